//! The coordinator (DESIGN.md §4 "Coordinator", reference §12): one run per session.
//!
//! `run` joins the active run (every caller gets the same result); `wake` while running coalesces into
//! exactly one follow-up; `interrupt` returns only after the run's cleanup finished; input sent while busy
//! is steered into the next step boundary or queued as its own turn (FIFO). Different sessions run in
//! parallel. The session's run ownership (file lock or lease, DESIGN.md §5b) is held for as long as its
//! run lives; a lease lost to another worker stops the run. Queued turns are stored
//! ([`codeloop_store::Store::enqueue_input`]), so they survive the process and whoever owns the session
//! next runs them; only the callers' reply channels live in memory.
//!
//! Store work (taking ownership, recording and queueing input) runs on the blocking pool and never under
//! the map of sessions' lock: that lock only swaps a session's [`Slot`], so one slow store call stalls
//! its own session, never the others.
//! Must not: know what a run does; it only starts, joins, interrupts and sequences them.

use std::collections::HashMap;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use codeloop_store::RunGuard;
use codeloop_types::SessionId;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::error::RunError;
use crate::input::{Delivery, PromptInput};
use crate::outcome::{RunOutcome, StopReason};
use crate::run::Inbox;
use crate::runs::Runs;
use crate::services::Services;
use codeloop_types::LockExt;

pub type RunResult = Result<RunOutcome, RunError>;

/// Resolves with a run's outcome, shared by everyone who joined it.
type Done = watch::Receiver<Option<RunResult>>;

#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    services: Arc<Services>,
    sessions: Mutex<HashMap<SessionId, Slot>>,
}

/// Where a session is, as far as this process knows (idle sessions are absent).
enum Slot {
    /// Someone is taking the session's ownership and recording its first turn; the others wait until
    /// the slot changes (its sender is dropped then).
    Claiming(watch::Receiver<()>),
    Running(Arc<Entry>),
}

/// Callers waiting for their queued turn, by queued input id.
type Replies = HashMap<i64, oneshot::Sender<RunResult>>;

/// A run's queued turns as this process sees them. Its lock is held across the store calls that queue
/// or dequeue a turn, so a turn is never queued to a run that has just decided to end.
#[derive(Default)]
struct Queue {
    replies: Replies,
    /// The run takes no more turns: queue behind whoever runs the session next.
    closed: bool,
}

struct Entry {
    cancel: CancellationToken,
    inbox: Inbox,
    queue: Arc<tokio::sync::Mutex<Queue>>,
    pending_wake: AtomicBool,
    /// Interrupted, lost its ownership, or ending: newcomers wait for `done`, then start afresh.
    stopping: AtomicBool,
    done: watch::Sender<Option<RunResult>>,
    /// The session's run ownership (file lock or lease), released when the run ends.
    ownership: Mutex<Option<RunGuard>>,
}

impl Entry {
    fn new(ownership: RunGuard, replies: Replies) -> Arc<Entry> {
        Arc::new(Entry {
            cancel: CancellationToken::new(),
            inbox: Inbox::default(),
            queue: Arc::new(tokio::sync::Mutex::new(Queue { replies, closed: false })),
            pending_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            done: watch::channel(None).0,
            ownership: Mutex::new(Some(ownership)),
        })
    }

    /// Lets the session go: off the async threads, as releasing a lease is a database call.
    async fn release(&self) {
        let guard = self.ownership.locked().take();
        if let Some(guard) = guard {
            let _ = tokio::task::spawn_blocking(move || drop(guard)).await;
        }
    }
}

/// What a new run records before it starts.
#[derive(Default)]
struct FirstTurn {
    /// New input whose caller waits for its own turn's outcome.
    input: Option<(PromptInput, oneshot::Sender<RunResult>)>,
    /// Input steered into an interrupted run: recorded before anything queued.
    steered: Vec<crate::run::Steered>,
    /// Callers of queued turns carried over from the run before.
    replies: Replies,
    /// Run what the session holds before any queued turn (a bare run, a wake, a run a dead worker left
    /// open): the run loop decides whether there is anything to answer.
    always: bool,
}

/// A run ready to start: its ownership, and the caller of the turn it starts with.
struct Started {
    ownership: RunGuard,
    replies: Replies,
    reply: Option<oneshot::Sender<RunResult>>,
}

/// How often a prompt queued behind another worker's run checks on it.
const REMOTE_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// How often a running session checks that it still owns its run (a lease can be lost to another worker).
const OWNERSHIP_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A session lock can look taken for a moment after this process released it: a child process being
/// spawned (by any tool of any session) holds copies of every descriptor until its `exec`. A few short
/// retries tell that apart from another process really running the session.
const LOCK_RETRIES: u32 = 10;
const LOCK_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(5);

/// What a caller does next, decided under the map's lock and done without it.
enum Step {
    /// Another caller is claiming the session: wait for it, then look again.
    AwaitClaim(watch::Receiver<()>),
    /// The run is ending: wait for it, then look again.
    AwaitEnd(Done),
    /// Join the active run and share its outcome.
    Join(Done),
    /// Steer this input into the active run (stored first, so it outlives this process).
    Steer(Arc<Entry>, PromptInput),
    /// Queue this input as its own turn behind the active run.
    EnqueueInput(Arc<Entry>, PromptInput),
    /// Wait on the active run for a turn already queued.
    Enqueue(Arc<Entry>),
    /// This caller claims the session (its slot is now `Claiming`; dropping the sender settles it).
    Claim(watch::Sender<()>),
}

/// Told once a prompt's input is durable: stored in the session's queue, or recorded as its message. A
/// client that answers before the run ends (`prompt_async`) waits for this, so what it accepted
/// survives the process (DESIGN.md §5b).
#[derive(Default)]
pub struct Accepted(Mutex<Option<oneshot::Sender<()>>>);

impl Accepted {
    pub fn new() -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Self(Mutex::new(Some(tx))), rx)
    }

    pub fn fire(&self) {
        if let Some(tx) = self.0.locked().take() {
            let _ = tx.send(());
        }
    }
}

/// A coordinator handle that does not keep the engine alive (held by the failover task).
#[derive(Clone)]
pub struct WeakCoordinator {
    inner: std::sync::Weak<Inner>,
}

impl WeakCoordinator {
    pub fn upgrade(&self) -> Option<Coordinator> {
        self.inner.upgrade().map(|inner| Coordinator { inner })
    }
}

impl Coordinator {
    pub fn new(services: Arc<Services>) -> Self {
        Self { inner: Arc::new(Inner { services, sessions: Mutex::new(HashMap::new()) }) }
    }

    pub fn downgrade(&self) -> WeakCoordinator {
        WeakCoordinator { inner: Arc::downgrade(&self.inner) }
    }

    /// Starts a run (or joins the active one) and waits for its outcome.
    pub async fn run(&self, session: &SessionId) -> RunResult {
        self.submit(session, None, Delivery::Steer, &Accepted::default()).await
    }

    /// Records new input and runs it: immediately when idle, else steered or queued.
    pub async fn prompt(&self, session: &SessionId, input: PromptInput, delivery: Delivery) -> RunResult {
        self.submit(session, Some(input), delivery, &Accepted::default()).await
    }

    /// [`Coordinator::prompt`], telling `accepted` once the input is durable.
    pub async fn prompt_accepted(
        &self,
        session: &SessionId,
        input: PromptInput,
        delivery: Delivery,
        accepted: &Accepted,
    ) -> RunResult {
        self.submit(session, Some(input), delivery, accepted).await
    }

    /// The one path of `run` and `prompt`: join, steer, queue or claim, until one of them sticks.
    async fn submit(
        &self,
        session: &SessionId,
        input: Option<PromptInput>,
        delivery: Delivery,
        accepted: &Accepted,
    ) -> RunResult {
        loop {
            let step = self.inner.next_step(session, |entry| match (&input, delivery) {
                (None, _) => Step::Join(entry.done.subscribe()),
                (Some(input), Delivery::Steer) => Step::Steer(entry.clone(), input.clone()),
                (Some(input), Delivery::Queue) => Step::EnqueueInput(entry.clone(), input.clone()),
            });
            match step {
                Step::AwaitClaim(mut settled) => {
                    let _ = settled.changed().await;
                }
                Step::AwaitEnd(rx) => {
                    let _ = wait(rx).await;
                }
                Step::Join(rx) => return wait(rx).await,
                Step::Steer(entry, input) => {
                    let done = entry.done.subscribe();
                    if self.inner.steer_into(&entry, session, input).await? {
                        accepted.fire();
                        return wait(done).await;
                    }
                    // The run stopped taking input meanwhile: look again once it is gone.
                    let _ = wait(done).await;
                }
                // Not chosen here (only `attach_queued` waits on a turn already queued): look again once
                // the run is gone.
                Step::Enqueue(entry) => {
                    let _ = wait(entry.done.subscribe()).await;
                }
                Step::EnqueueInput(entry, input) => {
                    match self.inner.enqueue_behind(&entry, session, input).await? {
                        Some(own) => {
                            accepted.fire();
                            return own.await.unwrap_or(Err(RunError::Lost));
                        }
                        // The run ended meanwhile: look again once it is gone.
                        None => {
                            let _ = wait(entry.done.subscribe()).await;
                        }
                    }
                }
                Step::Claim(settled) => {
                    // The caller that starts the run gets its own turn's outcome, like queued callers.
                    let (reply, own) = oneshot::channel();
                    let first = FirstTurn {
                        input: input.clone().map(|input| (input, reply)),
                        always: input.is_none(),
                        ..FirstTurn::default()
                    };
                    let started = self.inner.claim(session, first, settled).await;
                    if started.is_ok() {
                        accepted.fire();
                    }
                    return match started {
                        Ok(Some(done)) if input.is_none() => wait(done).await,
                        Ok(_) => own.await.unwrap_or(Err(RunError::Lost)),
                        // Another worker runs it: queue behind that run through the shared store. (Steering
                        // joins a run of this process only: here the input becomes its own turn after it.)
                        Err(RunError::Busy(busy)) => match input {
                            Some(input) if self.inner.services.store.event_log().is_some() => {
                                self.queue_remote(session, input, accepted).await
                            }
                            _ => Err(RunError::Busy(busy)),
                        },
                        Err(e) => Err(e),
                    };
                }
            }
        }
    }

    /// Queues `input` in the store behind a run another worker owns (DESIGN.md §5b): that worker runs it
    /// after its current turn, or, if its run ends without seeing it, this worker (or any worker's
    /// failover sweep) does. Never runs alongside the other worker. The outcome of a turn another worker
    /// ran is read back from the store once that worker lets the session go: its last answer, and a
    /// stop reason derived from it (`Completed`, `Interrupted` or `Error`).
    async fn queue_remote(&self, session: &SessionId, input: PromptInput, accepted: &Accepted) -> RunResult {
        let id = {
            let (session, inner) = (session.clone(), self.inner.clone());
            off_runtime(move || inner.enqueue(&session, &input)).await??
        };
        accepted.fire();
        loop {
            tokio::time::sleep(REMOTE_POLL).await;
            let queued = {
                let session = session.clone();
                self.inner.services.blocking(move |store| store.queued_inputs(&session)).await?
            };
            if !queued.iter().any(|q| q.id == id) {
                break;
            }
            // Still queued: if no one runs the session any more, run it here (the queue is drained in order).
            if let Some(own) = self.attach_queued(session, id).await? {
                return own.await.unwrap_or(Err(RunError::Lost));
            }
        }
        // Another worker recorded it: wait until it lets the session go, then report its last answer.
        loop {
            let session_id = session.clone();
            let free = self
                .inner
                .services
                .blocking(move |store| match store.lock_session(&session_id) {
                    Ok(_guard) => Ok(true),
                    Err(codeloop_store::StoreError::SessionBusy(_)) => Ok(false),
                    Err(e) => Err(e),
                })
                .await?;
            if free {
                break;
            }
            tokio::time::sleep(REMOTE_POLL).await;
        }
        let session_id = session.clone();
        let history = self.inner.services.blocking(move |store| store.load_history(&session_id)).await?;
        let message = history.iter().rev().find_map(|m| m.info.as_assistant()).cloned();
        let stop = match message.as_ref().and_then(|m| m.error.clone()) {
            Some(error) if error.is_aborted() => StopReason::Interrupted,
            Some(error) => StopReason::Error(error),
            None => StopReason::Completed,
        };
        Ok(RunOutcome { session_id: session.clone(), message, stop })
    }

    /// Waits for the stored queued turn `id` in this process: on the active run, or on a run started
    /// here for it. `None` when another worker owns the session.
    async fn attach_queued(
        &self,
        session: &SessionId,
        id: i64,
    ) -> Result<Option<oneshot::Receiver<RunResult>>, RunError> {
        loop {
            let step = self.inner.next_step(session, |entry| Step::Enqueue(entry.clone()));
            match step {
                Step::AwaitClaim(mut settled) => {
                    let _ = settled.changed().await;
                }
                Step::AwaitEnd(rx) | Step::Join(rx) => {
                    let _ = wait(rx).await;
                }
                Step::Enqueue(entry) | Step::EnqueueInput(entry, _) | Step::Steer(entry, _) => {
                    let mut queue = entry.queue.clone().lock_owned().await;
                    if !queue.closed {
                        let (reply, own) = oneshot::channel();
                        queue.replies.insert(id, reply);
                        return Ok(Some(own));
                    }
                    drop(queue);
                    let _ = wait(entry.done.subscribe()).await;
                }
                Step::Claim(settled) => {
                    let (reply, own) = oneshot::channel();
                    let first = FirstTurn { replies: Replies::from([(id, reply)]), ..FirstTurn::default() };
                    return match self.inner.claim(session, first, settled).await {
                        Ok(Some(_)) => Ok(Some(own)),
                        // Taken off the queue meanwhile, or the session is another worker's.
                        Ok(None) | Err(RunError::Busy(_)) => Ok(None),
                        Err(e) => Err(e),
                    };
                }
            }
        }
    }

    /// New work was recorded elsewhere: start a run, or ask the active one for exactly one follow-up.
    pub fn wake(&self, session: &SessionId) {
        self.start_detached(session, true);
    }

    /// Stops the active run and returns after its cleanup finished. A no-op when idle.
    pub async fn interrupt(&self, session: &SessionId) {
        loop {
            let step = {
                let sessions = self.inner.lock();
                match sessions.get(session) {
                    None => return,
                    Some(Slot::Claiming(settled)) => Step::AwaitClaim(settled.clone()),
                    Some(Slot::Running(entry)) => {
                        entry.stopping.store(true, Ordering::SeqCst);
                        entry.pending_wake.store(false, Ordering::SeqCst);
                        entry.cancel.cancel();
                        Step::AwaitEnd(entry.done.subscribe())
                    }
                }
            };
            match step {
                Step::AwaitClaim(mut settled) => {
                    let _ = settled.changed().await;
                }
                Step::AwaitEnd(rx) => {
                    self.inner.services.permissions.reject_session(session);
                    self.inner.services.questions.reject_session(session);
                    self.inner.services.elicitations.cancel_session(session);
                    let _ = wait(rx).await;
                    return;
                }
                _ => return,
            }
        }
    }

    /// Runs a session nobody owns that has work waiting (stored queued input, or a run a dead process
    /// left open): like [`Coordinator::wake`], but quiet when another process or worker got it first.
    pub fn resume(&self, session: &SessionId) {
        self.start_detached(session, false);
    }

    /// Starts a run nobody waits for; `wake` also asks an active run for one follow-up.
    fn start_detached(&self, session: &SessionId, wake: bool) {
        let settled = {
            let mut sessions = self.inner.lock();
            match sessions.get(session) {
                Some(Slot::Running(entry)) => {
                    if wake {
                        entry.pending_wake.store(true, Ordering::SeqCst);
                    }
                    return;
                }
                // The claimed run has not read the session yet: it sees the new work.
                Some(Slot::Claiming(_)) => return,
                None => {
                    let (settled, rx) = watch::channel(());
                    sessions.insert(session.clone(), Slot::Claiming(rx));
                    settled
                }
            }
        };
        let (inner, session) = (self.inner.clone(), session.clone());
        tokio::spawn(async move {
            let first = FirstTurn { always: true, ..FirstTurn::default() };
            match inner.claim(&session, first, settled).await {
                Ok(_) if !wake => {
                    inner.services.failovers.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(%session, "resuming a session no one runs");
                }
                Ok(_) => {}
                Err(RunError::Busy(_)) if !wake => {
                    tracing::debug!(%session, "another worker took the session first")
                }
                Err(e) => tracing::warn!("could not start a run for {session}: {e}"),
            }
        });
    }

    /// Returns once no run of `session` is left in this process (follow-ups and queued turns included).
    pub async fn settled(&self, session: &SessionId) {
        loop {
            let step = match self.inner.lock().get(session) {
                None => return,
                Some(Slot::Claiming(settled)) => Step::AwaitClaim(settled.clone()),
                Some(Slot::Running(entry)) => Step::AwaitEnd(entry.done.subscribe()),
            };
            match step {
                Step::AwaitClaim(mut settled) => {
                    let _ = settled.changed().await;
                }
                // A run's outcome is sent after its slot went (or became its successor's claim).
                Step::AwaitEnd(done) => {
                    let _ = wait(done).await;
                }
                _ => return,
            }
        }
    }

    pub fn is_busy(&self, session: &SessionId) -> bool {
        self.inner.lock().contains_key(session)
    }

    /// Sessions with an active run.
    pub fn active(&self) -> Vec<SessionId> {
        self.inner.lock().keys().cloned().collect()
    }
}

async fn wait(mut rx: Done) -> RunResult {
    match rx.wait_for(Option::is_some).await {
        Ok(result) => result.clone().unwrap_or(Err(RunError::Lost)),
        Err(_) => Err(RunError::Lost),
    }
}

/// Runs blocking store work on the blocking pool.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, RunError> {
    tokio::task::spawn_blocking(work).await.map_err(|_| RunError::Lost)
}

mod inner;

#[async_trait::async_trait]
impl Runs for Coordinator {
    async fn prompt(&self, session: &SessionId, input: PromptInput, delivery: Delivery) -> RunResult {
        Coordinator::prompt(self, session, input, delivery).await
    }

    async fn interrupt(&self, session: &SessionId) {
        Coordinator::interrupt(self, session).await;
    }
}
