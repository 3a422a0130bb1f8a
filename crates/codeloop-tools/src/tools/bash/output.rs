//! The bash output buffer: keeps a rolling tail of about twice the byte limit in memory and, once the
//! output outgrows the limit, streams it to a spill file up to `max_saved_bytes` (then a "cut" note), so a
//! chatty command never grows memory or fills the disk.

use std::path::PathBuf;

use tokio::io::AsyncWriteExt;

use crate::OutputLimits;
use crate::truncate::{Keep, cut, exceeds, spill, spill_path};

/// How much of the output the live progress shows (reference: last 30 000 chars).
const LIVE_CHARS: usize = 30_000;

/// The last [`LIVE_CHARS`] characters of `text`: what `metadata.output` carries, live and at the end.
pub(crate) fn metadata_preview(text: &str) -> &str {
    let count = text.chars().count();
    match text.char_indices().nth(count.saturating_sub(LIVE_CHARS)) {
        Some((start, _)) => &text[start..],
        None => text,
    }
}

pub(crate) struct OutputSink {
    limits: OutputLimits,
    dir: PathBuf,
    tail: Vec<u8>,
    total: usize,
    spill: Option<(PathBuf, tokio::fs::File)>,
    spill_failed: bool,
    /// Bytes written to the spill file; past `max_saved_bytes` the rest is only counted.
    saved: u64,
}

/// The final text for the model.
pub(crate) struct FinalOutput {
    pub text: String,
    pub truncated: bool,
    pub output_path: Option<PathBuf>,
}

impl OutputSink {
    pub(crate) fn new(limits: OutputLimits, dir: PathBuf) -> Self {
        Self { limits, dir, tail: Vec::new(), total: 0, spill: None, spill_failed: false, saved: 0 }
    }

    pub(crate) async fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len();
        if self.spill.is_none() && !self.spill_failed && self.total > self.limits.max_bytes {
            // Nothing has been dropped from `tail` yet (it holds up to twice the limit), so it is the whole
            // output so far.
            self.start_spill().await;
        }
        if let Some((_, file)) = &mut self.spill {
            let room =
                usize::try_from(self.limits.max_saved_bytes.saturating_sub(self.saved)).unwrap_or(usize::MAX);
            let part = &chunk[..chunk.len().min(room)];
            if !part.is_empty() && file.write_all(part).await.is_err() {
                self.spill = None;
                self.spill_failed = true;
            }
            self.saved += part.len() as u64;
        }
        self.tail.extend_from_slice(chunk);
        let cap = self.limits.max_bytes.saturating_mul(2).max(LIVE_CHARS * 4);
        if self.tail.len() > cap {
            let excess = self.tail.len() - cap;
            self.tail.drain(..excess);
        }
    }

    async fn start_spill(&mut self) {
        let path = spill_path(&self.dir);
        let opened = async {
            tokio::fs::create_dir_all(&self.dir).await?;
            let mut file = tokio::fs::File::create(&path).await?;
            let head =
                usize::try_from(self.limits.max_saved_bytes).unwrap_or(usize::MAX).min(self.tail.len());
            file.write_all(&self.tail[..head]).await?;
            std::io::Result::Ok((file, head))
        }
        .await;
        match opened {
            Ok((file, head)) => {
                self.saved = head as u64;
                self.spill = Some((path, file));
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not spill bash output");
                self.spill_failed = true;
            }
        }
    }

    /// The last [`LIVE_CHARS`] characters, for live progress.
    pub(crate) fn live(&self) -> String {
        metadata_preview(&String::from_utf8_lossy(&self.tail)).to_string()
    }

    /// The output as the model sees it: the tail within the limits, prefixed with where the full output is
    /// when it was cut.
    pub(crate) async fn finish(mut self) -> FinalOutput {
        let text = String::from_utf8_lossy(&self.tail).into_owned();
        if self.spill.is_none() && !exceeds(&text, self.limits) {
            return FinalOutput { text, truncated: false, output_path: None };
        }
        let cut_at = (self.total as u64 > self.limits.max_saved_bytes).then_some(self.limits.max_saved_bytes);
        let path = match self.spill.take() {
            Some((path, mut file)) => {
                if let Some(cap) = cut_at {
                    let note = format!(
                        "\n\n[cut: the output went on for {} bytes in all; only the first {cap} are saved \
                         ([tool_output] max_saved_bytes)]\n",
                        self.total
                    );
                    let _ = file.write_all(note.as_bytes()).await;
                }
                let _ = file.flush().await;
                Some(path)
            }
            None if self.spill_failed => None,
            None => spill(&self.dir, &text, self.limits.max_saved_bytes).await.ok(),
        };
        let (preview, _) = cut(&text, self.limits, Keep::Tail);
        let text = match (&path, cut_at) {
            (Some(path), None) => {
                format!("...output truncated...\n\nFull output saved to: {}\n\n{preview}", path.display())
            }
            (Some(path), Some(cap)) => format!(
                "...output truncated...\n\nThe output was {} bytes; its first {cap} are saved to: {} (cut at \
                 [tool_output] max_saved_bytes). The last part is below.\n\n{preview}",
                self.total,
                path.display()
            ),
            (None, _) => format!("...output truncated...\n\n{preview}"),
        };
        FinalOutput { text, truncated: true, output_path: path }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn small_output_is_kept_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut sink = OutputSink::new(OutputLimits::default(), dir.path().to_path_buf());
        sink.push(b"hello\n").await;
        let out = sink.finish().await;
        assert_eq!(out.text, "hello\n");
        assert!(!out.truncated);
    }

    #[tokio::test]
    async fn large_output_spills_everything_and_keeps_the_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = OutputLimits { max_lines: 10, max_bytes: 100, ..OutputLimits::default() };
        let mut sink = OutputSink::new(limits, dir.path().to_path_buf());
        let mut full = String::new();
        for i in 0..500 {
            let line = format!("line {i}\n");
            full.push_str(&line);
            sink.push(line.as_bytes()).await;
        }
        let out = sink.finish().await;
        assert!(out.truncated);
        let path = out.output_path.expect("spilled");
        assert_eq!(std::fs::read_to_string(&path).expect("spill file"), full);
        assert!(out.text.starts_with("...output truncated...\n\nFull output saved to: "));
        assert!(out.text.ends_with("line 499\n"), "{}", out.text);
    }

    #[tokio::test]
    async fn saved_output_is_capped_with_a_cut_note() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = OutputLimits { max_lines: 10, max_bytes: 100, max_saved_bytes: 1000 };
        let mut sink = OutputSink::new(limits, dir.path().to_path_buf());
        for _ in 0..100 {
            sink.push(&[b'x'; 99]).await;
            sink.push(b"\n").await;
        }
        let out = sink.finish().await;
        let saved = std::fs::read_to_string(out.output_path.expect("spilled")).expect("spill file");
        assert!(saved.starts_with(&"x".repeat(99)), "{saved}");
        assert!(saved.len() < 1200, "{} bytes saved", saved.len());
        assert!(saved.contains("[cut: the output went on for 10000 bytes"), "{saved}");
        assert!(out.text.contains("max_saved_bytes"), "{}", out.text);
    }
}
