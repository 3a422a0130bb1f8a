//! [`StoreWriter`]: the batched write path. A dedicated thread drains every queued [`Write`] and commits
//! it as one transaction per batch, so the run loop never blocks on SQLite.
//!
//! This is the hot path for streamed text (the engine sends a coalesced text part every 200 ms and at
//! text-end), so `send` only pushes onto a queue, and a batch writes each part once, in its last version.
//! Errors are logged when they happen and returned by the next [`StoreWriter::flush`]; they are never
//! dropped silently.
//! Owns: the writer thread, batching, coalescing, flush acknowledgements.
//! Must not: decide what to write or when to flush (the processor does), or drop a write.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::thread::JoinHandle;

use tokio::sync::oneshot;

use crate::{Result, Store, StoreError, Write};

/// What the writer thread has still to do. Flushes need no position among the writes: the thread
/// commits everything it drained before answering any flush it drained with it.
#[derive(Default)]
struct Queue {
    writes: Vec<Write>,
    flushes: Vec<oneshot::Sender<Result<()>>>,
    /// Asked to stop: drain what is queued, then exit.
    closed: bool,
    /// The thread has exited (normally or by a panic): nothing queued from now on will be written.
    stopped: bool,
}

impl Queue {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.flushes.is_empty()
    }
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    /// Writes that failed since the thread started; never reset (see [`StoreWriter::failed_writes`]).
    failed: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue is a plain Vec; a panic while holding it cannot leave it half-updated.
        codeloop_types::LockExt::locked(&self.queue)
    }
}

/// Owns the writer thread. Cheap to call from async code: `send` never blocks on I/O.
///
/// The queue is unbounded on purpose: a durable write may not be dropped, and the producer's rate is
/// already bounded by the engine's 200 ms text coalescing; the thread drains everything at each wake-up.
pub struct StoreWriter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter").finish_non_exhaustive()
    }
}

impl StoreWriter {
    /// Starts the writer thread over `store`.
    pub fn new(store: Arc<dyn Store>) -> Result<StoreWriter> {
        let shared = Arc::new(Shared::default());
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("codeloop-store-writer".into())
            .spawn(move || run(&*store, &thread_shared))
            .map_err(|source| StoreError::Io { path: "store writer thread".into(), source })?;
        Ok(StoreWriter { shared, thread: Some(thread) })
    }

    /// Queues a write. Writes are applied in the order sent. Never blocks on the database.
    pub fn send(&self, write: Write) {
        self.push(|queue| queue.writes.push(write));
    }

    /// Queues writes that land together: they are drained in one go, so they are committed in one
    /// transaction (a crash leaves all of them or none).
    pub fn send_all(&self, writes: impl IntoIterator<Item = Write>) {
        self.push(|queue| queue.writes.extend(writes));
    }

    /// Resolves once everything sent before it is committed, with the first error since the previous
    /// flush if any write failed. `.await` it from async code, or [`Flush::wait`] from a plain thread.
    pub fn flush(&self) -> Flush {
        let (tx, rx) = oneshot::channel();
        self.push(|queue| queue.flushes.push(tx));
        Flush { rx }
    }

    /// How many writes have failed since the writer started. Never reset: a flush reports the errors
    /// since the previous flush to whoever called it, this count lets anyone compare before and after
    /// (a run learns that some of its writes were lost even if another flush took the error).
    pub fn failed_writes(&self) -> u64 {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// Commits everything queued, stops the thread and joins it; returns the last unreported error.
    /// Blocks until the queue is written (like dropping the writer), so from async code call it in
    /// `spawn_blocking` if the queue may be long.
    pub fn close(mut self) -> Result<()> {
        let mut flush = self.flush();
        self.stop();
        // The thread has answered (or dropped) the flush before it exited: no waiting, no runtime needed.
        flush.rx.try_recv().unwrap_or_else(|_| Err(stopped()))
    }

    fn push(&self, add: impl FnOnce(&mut Queue)) {
        let mut queue = self.shared.lock();
        let was_empty = queue.is_empty();
        add(&mut queue);
        if queue.stopped {
            // Dropping a flush's sender resolves it with `WriterStopped`; writes can only be reported.
            queue.flushes.clear();
            let lost = std::mem::take(&mut queue.writes);
            if !lost.is_empty() {
                tracing::error!(writes = lost.len(), "the store writer thread has stopped; write dropped");
            }
            return;
        }
        drop(queue);
        if was_empty {
            self.shared.wake.notify_one();
        }
    }

    fn stop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the store writer thread panicked; queued writes may be lost");
        }
    }
}

impl Drop for StoreWriter {
    /// Commits everything queued, then joins the thread (errors are logged, see [`StoreWriter::close`]).
    fn drop(&mut self) {
        self.stop();
    }
}

/// A pending flush acknowledgement.
#[derive(Debug)]
pub struct Flush {
    rx: oneshot::Receiver<Result<()>>,
}

impl Flush {
    /// Blocks the current thread until the flush resolves. Must not be called on an async runtime thread
    /// (tokio panics there); `.await` the flush instead.
    pub fn wait(self) -> Result<()> {
        self.rx.blocking_recv().unwrap_or_else(|_| Err(stopped()))
    }
}

impl Future for Flush {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|result| result.unwrap_or_else(|_| Err(stopped())))
    }
}

fn stopped() -> StoreError {
    StoreError::WriterStopped("the writer thread ended before answering a flush".into())
}

/// Failures not yet reported to a flush.
#[derive(Default)]
struct Failures {
    count: usize,
    first: Option<String>,
    /// Every failure since the thread started (not reset by `take`).
    total: u64,
}

impl Failures {
    fn record(&mut self, error: &StoreError) {
        self.count += 1;
        self.total += 1;
        self.first.get_or_insert_with(|| error.to_string());
    }

    fn take(&mut self) -> Result<()> {
        let count = std::mem::take(&mut self.count);
        match self.first.take() {
            None => Ok(()),
            Some(first) => Err(StoreError::WriteFailed { count, first }),
        }
    }
}

/// The writer thread: wait for items, drain them all, commit, acknowledge flushes; exit once closed and
/// drained.
fn run(store: &dyn Store, shared: &Shared) {
    let _stopped = StoppedOnExit(shared);
    let mut failures = Failures::default();
    loop {
        let (writes, flushes, closed) = {
            let mut queue = shared.lock();
            while queue.is_empty() && !queue.closed {
                queue = shared.wake.wait(queue).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            (std::mem::take(&mut queue.writes), std::mem::take(&mut queue.flushes), queue.closed)
        };
        process(store, writes, flushes, &mut failures, &shared.failed);
        if closed {
            break;
        }
    }
    if let Err(error) = failures.take() {
        tracing::error!(%error, "store writer stopped with unreported write errors");
    }
}

/// Marks the queue stopped when the thread exits, even by a panic, and answers the flushes still queued
/// (dropping their senders resolves them with `WriterStopped`) so no caller waits forever.
struct StoppedOnExit<'a>(&'a Shared);

impl Drop for StoppedOnExit<'_> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.stopped = true;
        queue.flushes.clear();
        if !queue.writes.is_empty() {
            tracing::error!(
                writes = queue.writes.len(),
                "the store writer thread stopped with writes queued"
            );
        }
    }
}

fn process(
    store: &dyn Store,
    writes: Vec<Write>,
    flushes: Vec<oneshot::Sender<Result<()>>>,
    failures: &mut Failures,
    failed: &AtomicU64,
) {
    if !writes.is_empty() {
        commit(store, &coalesce(writes), failures);
        // Before any flush is answered: whoever awaited one sees the count of what it covered.
        failed.store(failures.total, Ordering::Release);
    }
    if !flushes.is_empty() {
        let result = failures.take();
        for ack in flushes {
            let reply = match &result {
                Ok(()) => Ok(()),
                Err(StoreError::WriteFailed { count, first }) => {
                    Err(StoreError::WriteFailed { count: *count, first: first.clone() })
                }
                Err(other) => Err(StoreError::WriteFailed { count: 1, first: other.to_string() }),
            };
            // The flusher may have stopped waiting; that is its choice.
            let _ = ack.send(reply);
        }
    }
}

/// One transaction for the batch. If it fails, each write is retried on its own so that one bad write
/// (say, a part whose message was deleted) costs only itself.
fn commit(store: &dyn Store, writes: &[Write], failures: &mut Failures) {
    let Err(error) = store.apply(writes) else { return };
    if writes.len() == 1 {
        tracing::error!(%error, write = describe(&writes[0]), "store write failed");
        failures.record(&error);
        return;
    }
    tracing::warn!(%error, writes = writes.len(), "store batch failed; retrying its writes one by one");
    for write in writes {
        if let Err(error) = store.apply(std::slice::from_ref(write)) {
            tracing::error!(%error, write = describe(write), "store write failed");
            failures.record(&error);
        }
    }
}

fn describe(write: &Write) -> String {
    match write {
        Write::Session(s) => format!("session {}", s.id),
        Write::Message(m) => format!("message {}", m.id()),
        Write::Part(p) => format!("part {}", p.id),
        Write::RemovePart(id) => format!("remove part {id}"),
        Write::RemoveMessage(id) => format!("remove message {id}"),
        Write::RemoveQueued(id) => format!("remove queued input {id}"),
        Write::Job { job, .. } => format!("job {}", job.id),
    }
}

/// Keeps only the last version of each part in a batch, at the position of that last version. The final
/// state is the same as writing every version in order: a later upsert replaces an earlier one, and the
/// part's message existed by the earlier write if the batch was valid at all.
pub(crate) fn coalesce(writes: Vec<Write>) -> Vec<Write> {
    let keep = {
        let part_writes = writes.iter().filter(|w| matches!(w, Write::Part(_))).count();
        if part_writes < 2 {
            return writes;
        }
        let mut seen: HashSet<&str> = HashSet::with_capacity(part_writes);
        let keep: Vec<bool> = writes
            .iter()
            .rev()
            .map(|write| match write {
                Write::Part(part) => seen.insert(part.id.as_str()),
                _ => true,
            })
            .collect();
        if seen.len() == part_writes {
            return writes;
        }
        keep
    };
    writes.into_iter().zip(keep.into_iter().rev()).filter_map(|(write, keep)| keep.then_some(write)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use codeloop_types::{Part, PartId};

    fn text(id: &str, text: &str) -> Write {
        Write::Part(Part::user_text("ses_1".into(), "msg_1".into(), text).with_id(id))
    }

    trait WithId {
        fn with_id(self, id: &str) -> Self;
    }

    impl WithId for Part {
        fn with_id(mut self, id: &str) -> Self {
            self.id = PartId::from(id);
            self
        }
    }

    fn texts(writes: &[Write]) -> Vec<(String, String)> {
        writes
            .iter()
            .map(|w| match w {
                Write::Part(p) => (p.id.to_string(), p.as_text().unwrap().text.clone()),
                Write::RemovePart(id) => (id.to_string(), "<removed>".into()),
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn coalesce_keeps_the_last_version_of_each_part_in_order() {
        let writes = vec![
            text("prt_a", "h"),
            text("prt_b", "x"),
            text("prt_a", "he"),
            Write::RemovePart("prt_c".into()),
            text("prt_a", "hello"),
        ];
        let pairs =
            |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert_eq!(
            texts(&coalesce(writes)),
            pairs(&[("prt_b", "x"), ("prt_c", "<removed>"), ("prt_a", "hello")])
        );
    }

    /// A store whose writes panic, standing in for a bug in the write path.
    struct PanickingStore;

    impl Store for PanickingStore {
        fn apply(&self, _: &[Write]) -> Result<()> {
            panic!("boom")
        }
        fn get_session(&self, _: &codeloop_types::SessionId) -> Result<Option<codeloop_types::Session>> {
            unimplemented!()
        }
        fn list_sessions(&self, _: &crate::SessionFilter) -> Result<Vec<codeloop_types::Session>> {
            unimplemented!()
        }
        fn delete_session(&self, _: &codeloop_types::SessionId) -> Result<bool> {
            unimplemented!()
        }
        fn get_message(&self, _: &codeloop_types::MessageId) -> Result<Option<crate::MessageWithParts>> {
            unimplemented!()
        }
        fn list_messages(
            &self,
            _: &codeloop_types::SessionId,
            _: &crate::Page,
        ) -> Result<Vec<crate::MessageWithParts>> {
            unimplemented!()
        }
        fn load_history(&self, _: &codeloop_types::SessionId) -> Result<Vec<crate::MessageWithParts>> {
            unimplemented!()
        }
        fn get_todos(&self, _: &codeloop_types::SessionId) -> Result<Vec<codeloop_types::Todo>> {
            unimplemented!()
        }
        fn set_todos(&self, _: &codeloop_types::SessionId, _: &[codeloop_types::Todo]) -> Result<()> {
            unimplemented!()
        }
        fn add_approval(&self, _: &str, _: &codeloop_types::PermissionRule) -> Result<crate::Approval> {
            unimplemented!()
        }
        fn list_approvals(&self, _: Option<&str>) -> Result<Vec<crate::Approval>> {
            unimplemented!()
        }
        fn revoke_approval(&self, _: i64) -> Result<bool> {
            unimplemented!()
        }
        fn lock_session(&self, _: &codeloop_types::SessionId) -> Result<crate::RunGuard> {
            unimplemented!()
        }
        fn enqueue_input(&self, _: &codeloop_types::SessionId, _: &str) -> Result<i64> {
            unimplemented!()
        }
        fn queued_inputs(&self, _: &codeloop_types::SessionId) -> Result<Vec<crate::QueuedInput>> {
            unimplemented!()
        }
        fn orphaned_sessions(&self) -> Result<Vec<codeloop_types::SessionId>> {
            unimplemented!()
        }
        fn queue_depth(&self) -> Result<u64> {
            unimplemented!()
        }
        fn unanswered(
            &self,
            _: codeloop_types::Millis,
        ) -> Result<Vec<(codeloop_types::SessionId, codeloop_types::MessageId)>> {
            unimplemented!()
        }
        fn save_job(&self, _: &codeloop_types::Job, _: &str) -> Result<()> {
            unimplemented!()
        }
        fn list_jobs(
            &self,
            _: Option<&codeloop_types::SessionId>,
        ) -> Result<Vec<(codeloop_types::Job, String)>> {
            unimplemented!()
        }
        fn step_usage(&self, _: codeloop_types::Millis) -> Result<Vec<crate::StepUsage>> {
            unimplemented!()
        }
        fn recover(&self, _: Option<&codeloop_types::SessionId>) -> Result<crate::RecoveryReport> {
            unimplemented!()
        }
    }

    #[test]
    fn flushes_resolve_with_an_error_after_the_thread_dies() {
        let writer = StoreWriter::new(Arc::new(PanickingStore)).unwrap();
        writer.send(text("prt_a", "x"));
        assert!(matches!(writer.flush().wait(), Err(StoreError::WriterStopped(_))));
        writer.send(text("prt_b", "y"));
        assert!(matches!(writer.flush().wait(), Err(StoreError::WriterStopped(_))));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn close_can_be_called_on_an_async_runtime_thread() {
        let writer = StoreWriter::new(Arc::new(PanickingStore)).unwrap();
        assert!(matches!(writer.close(), Ok(())));
    }

    #[test]
    fn coalesce_leaves_distinct_parts_alone() {
        let writes = vec![text("prt_a", "1"), text("prt_b", "2")];
        assert_eq!(coalesce(writes.clone()), writes);
    }
}
