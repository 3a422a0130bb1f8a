//! The coordinator (DESIGN.md §4 "Coordinator", reference §12): one run per session.
//!
//! `run` joins the active run (every caller gets the same result); `wake` while running coalesces into
//! exactly one follow-up; `interrupt` returns only after the run's cleanup finished; input sent while busy
//! is steered into the next step boundary or queued as its own turn (FIFO). Different sessions run in
//! parallel. The session's run ownership (file lock or lease, DESIGN.md §5b) is held for as long as its
//! entry lives; a lease lost to another worker stops the run. Queued turns are stored
//! ([`codeloop_store::Store::enqueue_input`]), so they survive the process and whoever owns the session
//! next runs them; only the callers' reply channels live in memory.
//! Must not: know what a run does; it only starts, joins, interrupts and sequences them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use codeloop_store::{RunGuard, Write};
use codeloop_types::SessionId;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::input::{Delivery, PromptInput, create_user_message};
use crate::run::{Inbox, RunError, RunOutcome, StopReason, run_session};
use crate::services::Services;

pub type RunResult = Result<RunOutcome, RunError>;

#[derive(Clone)]
pub struct Coordinator {
    inner: Arc<Inner>,
}

struct Inner {
    services: Arc<Services>,
    sessions: Mutex<HashMap<SessionId, Arc<Entry>>>,
}

/// Callers waiting for their queued turn, by queued input id.
type Replies = HashMap<i64, oneshot::Sender<RunResult>>;

struct Entry {
    cancel: CancellationToken,
    inbox: Inbox,
    replies: Mutex<Replies>,
    pending_wake: AtomicBool,
    stopping: AtomicBool,
    done: watch::Sender<Option<RunResult>>,
    /// The session's run ownership (file lock or lease), released (under the sessions map lock) when the entry ends.
    lock: Mutex<Option<RunGuard>>,
}

impl Entry {
    fn release(&self) {
        self.lock.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
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

enum Next {
    /// The lock looked taken: try again shortly.
    RetryLock,
    Await(watch::Receiver<Option<RunResult>>),
    AwaitOwn(oneshot::Receiver<RunResult>),
    WaitThenRetry(watch::Receiver<Option<RunResult>>),
    Failed(RunError),
    /// Another worker runs the session: queue through the store.
    QueueRemote,
}

/// A coordinator handle that does not keep the engine alive (held by the `task` tool, which the engine
/// itself owns).
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
        let mut busy_retries = 0;
        loop {
            let next = {
                let mut sessions = self.inner.lock();
                match sessions.get(session) {
                    Some(entry) if entry.stopping.load(Ordering::SeqCst) => {
                        Next::WaitThenRetry(entry.done.subscribe())
                    }
                    Some(entry) => Next::Await(entry.done.subscribe()),
                    None => match self.inner.start(&mut sessions, session, None, None) {
                        Ok(rx) => Next::Await(rx),
                        Err(RunError::Busy(_)) if busy_retries < LOCK_RETRIES => Next::RetryLock,
                        Err(e) => Next::Failed(e),
                    },
                }
            };
            match next {
                Next::Await(rx) => return wait(rx).await,
                Next::WaitThenRetry(rx) => {
                    let _ = wait(rx).await;
                }
                Next::AwaitOwn(rx) => return rx.await.unwrap_or_else(|_| Err(dropped())),
                Next::Failed(e) => return Err(e),
                Next::RetryLock => {
                    busy_retries += 1;
                    tokio::time::sleep(LOCK_RETRY_DELAY).await;
                }
                // Only a prompt queues through the store; a bare run has no input to queue.
                Next::QueueRemote => return Err(RunError::Busy(format!("session {session} runs elsewhere"))),
            }
        }
    }

    /// Records new input and runs it: immediately when idle, else steered or queued.
    pub async fn prompt(&self, session: &SessionId, input: PromptInput, delivery: Delivery) -> RunResult {
        let mut input = Some(input);
        let mut busy_retries = 0;
        loop {
            let next = {
                let mut sessions = self.inner.lock();
                match sessions.get(session) {
                    Some(entry) if entry.stopping.load(Ordering::SeqCst) => {
                        Next::WaitThenRetry(entry.done.subscribe())
                    }
                    Some(entry) => {
                        let input = input.take().unwrap_or_default();
                        match delivery {
                            Delivery::Steer => {
                                entry.inbox.push(input);
                                Next::Await(entry.done.subscribe())
                            }
                            Delivery::Queue => match self.inner.enqueue(session, &input) {
                                Ok(id) => {
                                    let (reply, rx) = oneshot::channel();
                                    entry.replies.lock().unwrap_or_else(|e| e.into_inner()).insert(id, reply);
                                    Next::AwaitOwn(rx)
                                }
                                Err(e) => Next::Failed(e),
                            },
                        }
                    }
                    None => {
                        // The caller that starts the run gets its own turn's outcome, like queued callers.
                        let (reply, rx) = oneshot::channel();
                        match self.inner.start(&mut sessions, session, input.clone(), Some(reply)) {
                            Ok(_) => Next::AwaitOwn(rx),
                            Err(RunError::Busy(_)) if busy_retries < LOCK_RETRIES => Next::RetryLock,
                            // Another worker runs it: queue behind that run through the shared store.
                            Err(RunError::Busy(_))
                                if delivery == Delivery::Queue
                                    && self.inner.services.store.event_log().is_some() =>
                            {
                                Next::QueueRemote
                            }
                            Err(e) => Next::Failed(e),
                        }
                    }
                }
            };
            match next {
                Next::Await(rx) => return wait(rx).await,
                Next::AwaitOwn(rx) => return rx.await.unwrap_or_else(|_| Err(dropped())),
                Next::WaitThenRetry(rx) => {
                    let _ = wait(rx).await;
                }
                Next::Failed(e) => return Err(e),
                Next::RetryLock => {
                    busy_retries += 1;
                    tokio::time::sleep(LOCK_RETRY_DELAY).await;
                }
                Next::QueueRemote => {
                    return self.queue_remote(session, input.take().unwrap_or_default()).await;
                }
            }
        }
    }

    /// Queues `input` in the store behind a run another worker owns (DESIGN.md §5b): that worker runs it
    /// after its current turn, or, if its run ends without seeing it, this worker (or any worker's
    /// failover sweep) does. Never runs alongside the other worker. The outcome of a turn another worker
    /// ran is read back from the store once that worker lets the session go: its last answer, and a
    /// stop reason derived from it (`Completed`, `Interrupted` or `Error`).
    async fn queue_remote(&self, session: &SessionId, input: PromptInput) -> RunResult {
        let id = self.inner.enqueue(session, &input)?;
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
            let next = {
                let mut sessions = self.inner.lock();
                let entry = match sessions.get(session) {
                    Some(entry) => Some(entry.clone()),
                    None => match self.inner.start(&mut sessions, session, None, None) {
                        Ok(_) => sessions.get(session).cloned(),
                        Err(RunError::Busy(_)) => None,
                        Err(e) => return Err(e),
                    },
                };
                entry.filter(|e| !e.stopping.load(Ordering::SeqCst)).map(|entry| {
                    let (reply, rx) = oneshot::channel();
                    entry.replies.lock().unwrap_or_else(|e| e.into_inner()).insert(id, reply);
                    rx
                })
            };
            if let Some(rx) = next {
                return rx.await.unwrap_or_else(|_| Err(dropped()));
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

    /// New work was recorded elsewhere: start a run, or ask the active one for exactly one follow-up.
    pub fn wake(&self, session: &SessionId) {
        let mut sessions = self.inner.lock();
        match sessions.get(session) {
            Some(entry) => entry.pending_wake.store(true, Ordering::SeqCst),
            None => {
                if let Err(e) = self.inner.start(&mut sessions, session, None, None) {
                    tracing::warn!("could not start a run for {session}: {e}");
                }
            }
        }
    }

    /// Stops the active run and returns after its cleanup finished. A no-op when idle.
    pub async fn interrupt(&self, session: &SessionId) {
        let rx = {
            let sessions = self.inner.lock();
            let Some(entry) = sessions.get(session) else { return };
            entry.stopping.store(true, Ordering::SeqCst);
            entry.pending_wake.store(false, Ordering::SeqCst);
            entry.cancel.cancel();
            entry.done.subscribe()
        };
        self.inner.services.permissions.reject_session(session);
        self.inner.services.questions.reject_session(session);
        let _ = wait(rx).await;
    }

    /// Runs a session nobody owns that has work waiting (stored queued input, or a run a dead process
    /// left open): like [`Coordinator::wake`], but quiet when another process or worker got it first.
    pub fn resume(&self, session: &SessionId) {
        let mut sessions = self.inner.lock();
        if sessions.contains_key(session) {
            return;
        }
        match self.inner.start(&mut sessions, session, None, None) {
            Ok(_) => tracing::info!(%session, "resuming a session no one runs"),
            Err(RunError::Busy(_)) => tracing::debug!(%session, "another worker took the session first"),
            Err(e) => tracing::warn!("could not resume {session}: {e}"),
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

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<Entry>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Creates the entry (taking the session's cross-process lock), records `input` as the first user
    /// message, and spawns the driver. Called with the sessions map locked.
    fn start(
        self: &Arc<Self>,
        sessions: &mut HashMap<SessionId, Arc<Entry>>,
        session: &SessionId,
        input: Option<PromptInput>,
        mut reply: Option<oneshot::Sender<RunResult>>,
    ) -> Result<watch::Receiver<Option<RunResult>>, RunError> {
        let lock = self.services.store.lock_session(session)?;
        let mut replies = Replies::new();
        if let Some(input) = input {
            if self.has_queued(session) {
                // Input a process that is gone had queued comes first: this one waits its turn.
                let id = self.enqueue(session, &input)?;
                if let Some(reply) = reply.take() {
                    replies.insert(id, reply);
                }
            } else {
                self.record_input(session, &input)?;
            }
        }
        let (done, rx) = watch::channel(None);
        let entry = Arc::new(Entry {
            cancel: CancellationToken::new(),
            inbox: Inbox::default(),
            replies: Mutex::new(replies),
            pending_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            done,
            lock: Mutex::new(Some(lock)),
        });
        sessions.insert(session.clone(), entry.clone());
        watch_ownership(session, &entry);
        let inner = self.clone();
        let session = session.clone();
        tokio::spawn(async move { inner.drive(session, entry, reply).await });
        Ok(rx)
    }

    /// Stores `input` behind the session's run.
    fn enqueue(&self, session: &SessionId, input: &PromptInput) -> Result<i64, RunError> {
        let json = serde_json::to_string(input).map_err(|e| RunError::Input(e.to_string()))?;
        Ok(self.services.store.enqueue_input(session, &json)?)
    }

    /// Records the oldest stored queued input as the next turn, taking it off the queue in the writer's
    /// batch that records it. Inputs that cannot be recorded are taken off and answered with their error.
    /// `None` when the queue is empty; `Some(reply)` otherwise, `reply` being the caller waiting for that
    /// turn in this process (none for input queued by a process that is gone).
    fn record_next_queued(
        &self,
        session: &SessionId,
        replies: &Mutex<Replies>,
    ) -> Option<Option<oneshot::Sender<RunResult>>> {
        loop {
            let queued = match self.services.store.queued_inputs(session) {
                Ok(queued) => queued.into_iter().next()?,
                Err(e) => {
                    tracing::warn!("could not read the queued input of {session}: {e}");
                    return None;
                }
            };
            let reply = replies.lock().unwrap_or_else(|e| e.into_inner()).remove(&queued.id);
            let recorded = serde_json::from_str::<PromptInput>(&queued.input)
                .map_err(|e| RunError::Input(format!("queued input {} cannot be read: {e}", queued.id)))
                .and_then(|input| self.record_input(session, &input));
            match recorded {
                Ok(()) => {
                    // After the user message's writes: one batch records the turn and dequeues it.
                    self.services.writer.send(Write::RemoveQueued(queued.id));
                    return Some(reply);
                }
                Err(e) => {
                    if let Err(store_error) = self.services.store.apply(&[Write::RemoveQueued(queued.id)]) {
                        tracing::warn!("could not drop unusable queued input {}: {store_error}", queued.id);
                        return None;
                    }
                    match reply {
                        Some(reply) => {
                            let _ = reply.send(Err(e));
                        }
                        None => tracing::warn!("dropped queued input {} of {session}: {e}", queued.id),
                    }
                }
            }
        }
    }

    fn has_queued(&self, session: &SessionId) -> bool {
        self.services.store.queued_inputs(session).is_ok_and(|queued| !queued.is_empty())
    }

    fn record_input(&self, session: &SessionId, input: &PromptInput) -> Result<(), RunError> {
        let mut info = self
            .services
            .store
            .get_session(session)?
            .ok_or_else(|| RunError::SessionNotFound(session.clone()))?;
        create_user_message(&self.services, &mut info, input).map(|_| ())
    }

    /// Runs the session until nothing is left: follow-ups for wakes and steered input, then queued
    /// turns one by one.
    async fn drive(
        self: Arc<Self>,
        session: SessionId,
        entry: Arc<Entry>,
        mut reply: Option<oneshot::Sender<RunResult>>,
    ) {
        loop {
            let result =
                run_session(self.services.clone(), &session, entry.cancel.clone(), &entry.inbox).await;
            if let Some(reply) = reply.take() {
                let _ = reply.send(result.clone());
            }
            let mut sessions = self.lock();
            if entry.stopping.load(Ordering::SeqCst) {
                entry.release();
                sessions.remove(&session);
                let replies = std::mem::take(&mut *entry.replies.lock().unwrap_or_else(|e| e.into_inner()));
                let woken = entry.pending_wake.load(Ordering::SeqCst) || !entry.inbox.is_empty();
                let leftover = entry.inbox.take();
                let _ = entry.done.send(Some(result));
                if !replies.is_empty() || woken || self.has_queued(&session) {
                    self.start_successor(&mut sessions, &session, replies, leftover);
                }
                return;
            }
            if entry.pending_wake.swap(false, Ordering::SeqCst) || !entry.inbox.is_empty() {
                continue;
            }
            match self.record_next_queued(&session, &entry.replies) {
                Some(tx) => reply = tx,
                None => {
                    entry.release();
                    sessions.remove(&session);
                    let _ = entry.done.send(Some(result));
                    return;
                }
            }
        }
    }

    /// After an interrupt, queued turns (and input steered meanwhile) still run, on a fresh entry.
    fn start_successor(
        self: &Arc<Self>,
        sessions: &mut HashMap<SessionId, Arc<Entry>>,
        session: &SessionId,
        replies: Replies,
        steered: Vec<PromptInput>,
    ) {
        let lock = match self.services.store.lock_session(session) {
            Ok(lock) => lock,
            Err(e) => {
                // The stored queue stays for whoever owns the session now; the callers here learn why.
                let error = RunError::from(e);
                for reply in replies.into_values() {
                    let _ = reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let replies = Mutex::new(replies);
        let mut reply = None;
        for input in &steered {
            if let Err(e) = self.record_input(session, input) {
                tracing::warn!("could not record steered input: {e}");
            }
        }
        if steered.is_empty()
            && let Some(tx) = self.record_next_queued(session, &replies)
        {
            reply = tx;
        }
        let (done, _rx) = watch::channel(None);
        let entry = Arc::new(Entry {
            cancel: CancellationToken::new(),
            inbox: Inbox::default(),
            replies,
            pending_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            done,
            lock: Mutex::new(Some(lock)),
        });
        sessions.insert(session.clone(), entry.clone());
        watch_ownership(session, &entry);
        let inner = self.clone();
        let session = session.clone();
        tokio::spawn(async move { inner.drive(session, entry, reply).await });
    }
}

/// Stops the run when its ownership is lost (a lease another worker took over after it expired): that
/// worker now settles and continues the session, and two runs must never write it at once.
fn watch_ownership(session: &SessionId, entry: &Arc<Entry>) {
    let (session, entry) = (session.clone(), Arc::downgrade(entry));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(OWNERSHIP_CHECK).await;
            let Some(entry) = entry.upgrade() else { return };
            let held = match entry.lock.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                None => return,
                Some(guard) => guard.is_held(),
            };
            if !held {
                tracing::warn!(%session, "lost the run of this session to another worker; stopping it");
                entry.stopping.store(true, Ordering::SeqCst);
                entry.cancel.cancel();
                return;
            }
        }
    });
}

async fn wait(mut rx: watch::Receiver<Option<RunResult>>) -> RunResult {
    match rx.wait_for(Option::is_some).await {
        Ok(result) => result.clone().unwrap_or_else(|| Err(dropped())),
        Err(_) => Err(dropped()),
    }
}

fn dropped() -> RunError {
    RunError::Lost
}
