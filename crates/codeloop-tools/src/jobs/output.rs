//! A job's output: the newest [`MEMORY_CAP`] bytes in memory (a ring), a read cursor for "output since the
//! last read", and where the full output is saved (up to the saved-output cap). A job with 100 MiB of
//! output costs the same memory and read time as one with 1 MiB.

use std::collections::VecDeque;
use std::path::PathBuf;

/// Bytes of a job's output kept in memory (DESIGN.md §5f: 1 MiB).
pub const MEMORY_CAP: usize = 1024 * 1024;

pub(crate) struct JobOutput {
    ring: VecDeque<u8>,
    /// Bytes written since the job started.
    total: u64,
    /// `total` at the last read.
    read: u64,
    /// The file with the whole output (up to the cap), once it exists.
    pub saved: Option<PathBuf>,
    /// The output went past the saved-output cap: the file holds its beginning only.
    pub cut: bool,
}

/// What a read returns: the unread output still in memory, and how much unread output memory had already
/// let go of (it is in the saved file).
pub(crate) struct Unread {
    pub bytes: Vec<u8>,
    pub dropped: u64,
}

impl JobOutput {
    pub(crate) fn new() -> Self {
        Self { ring: VecDeque::new(), total: 0, read: 0, saved: None, cut: false }
    }

    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= MEMORY_CAP {
            self.ring.clear();
            self.ring.extend(&chunk[chunk.len() - MEMORY_CAP..]);
            return;
        }
        let excess = (self.ring.len() + chunk.len()).saturating_sub(MEMORY_CAP);
        self.ring.drain(..excess);
        self.ring.extend(chunk);
    }

    /// Bytes not read yet.
    pub(crate) fn unread(&self) -> u64 {
        self.total - self.read
    }

    /// The newest `max` bytes (or fewer), without moving the read cursor: what a person looks at.
    pub(crate) fn tail(&self, max: usize) -> Vec<u8> {
        let start = self.ring.len().saturating_sub(max);
        self.ring.range(start..).copied().collect()
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Everything since the last read (what memory still holds of it), and moves the cursor to the end.
    pub(crate) fn take_unread(&mut self) -> Unread {
        let unread = self.unread();
        let held = (self.ring.len() as u64).min(unread);
        let start = self.ring.len() - held as usize;
        let (a, b) = self.ring.as_slices();
        let mut bytes = Vec::with_capacity(held as usize);
        if start < a.len() {
            bytes.extend_from_slice(&a[start..]);
            bytes.extend_from_slice(b);
        } else {
            bytes.extend_from_slice(&b[start - a.len()..]);
        }
        self.read = self.total;
        Unread { bytes, dropped: unread - held }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_return_what_came_since_the_last_read() {
        let mut out = JobOutput::new();
        out.push(b"one\n");
        out.push(b"two\n");
        assert_eq!(out.take_unread().bytes, b"one\ntwo\n");
        assert_eq!(out.take_unread().bytes, b"");
        out.push(b"three\n");
        assert_eq!(out.unread(), 6);
        assert_eq!(out.take_unread().bytes, b"three\n");
    }

    #[test]
    fn memory_keeps_the_newest_megabyte_and_counts_what_it_let_go() {
        let mut out = JobOutput::new();
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..40 {
            out.push(&chunk);
        }
        out.push(b"end\n");
        let unread = out.take_unread();
        assert_eq!(unread.bytes.len(), MEMORY_CAP);
        assert!(unread.bytes.ends_with(b"end\n"));
        assert_eq!(unread.dropped, out.total() - MEMORY_CAP as u64);
        out.push(&vec![b'y'; 2 * MEMORY_CAP]);
        let unread = out.take_unread();
        assert_eq!((unread.bytes.len(), unread.dropped), (MEMORY_CAP, MEMORY_CAP as u64));
    }
}
