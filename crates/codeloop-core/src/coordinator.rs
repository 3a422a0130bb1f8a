//! The coordinator (DESIGN.md §4 "Coordinator", reference §12): one run per session.
//!
//! `run` joins the active run (every caller gets the same result); `wake` while running coalesces into
//! exactly one follow-up; `interrupt` returns only after the run's cleanup finished; input sent while busy
//! is steered into the next step boundary or queued as its own turn (FIFO). Different sessions run in
//! parallel. The session's cross-process lock is held for as long as its entry lives.
//! Must not: know what a run does; it only starts, joins, interrupts and sequences them.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use codeloop_store::RunGuard;
use codeloop_types::SessionId;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::input::{Delivery, PromptInput, create_user_message};
use crate::run::{Inbox, RunError, RunOutcome, run_session};
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

struct Queued {
    input: PromptInput,
    reply: oneshot::Sender<RunResult>,
}

struct Entry {
    cancel: CancellationToken,
    inbox: Inbox,
    queue: Mutex<VecDeque<Queued>>,
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
                            Delivery::Queue => {
                                let (reply, rx) = oneshot::channel();
                                entry
                                    .queue
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push_back(Queued { input, reply });
                                Next::AwaitOwn(rx)
                            }
                        }
                    }
                    None => {
                        // The caller that starts the run gets its own turn's outcome, like queued callers.
                        let (reply, rx) = oneshot::channel();
                        match self.inner.start(&mut sessions, session, input.clone(), Some(reply)) {
                            Ok(_) => Next::AwaitOwn(rx),
                            Err(RunError::Busy(_)) if busy_retries < LOCK_RETRIES => Next::RetryLock,
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
            }
        }
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
        reply: Option<oneshot::Sender<RunResult>>,
    ) -> Result<watch::Receiver<Option<RunResult>>, RunError> {
        let lock = self.services.store.lock_session(session)?;
        if let Some(input) = input {
            self.record_input(session, &input)?;
        }
        let (done, rx) = watch::channel(None);
        let entry = Arc::new(Entry {
            cancel: CancellationToken::new(),
            inbox: Inbox::default(),
            queue: Mutex::new(VecDeque::new()),
            pending_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            done,
            lock: Mutex::new(Some(lock)),
        });
        sessions.insert(session.clone(), entry.clone());
        let inner = self.clone();
        let session = session.clone();
        tokio::spawn(async move { inner.drive(session, entry, reply).await });
        Ok(rx)
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
                let queue: VecDeque<Queued> =
                    std::mem::take(&mut *entry.queue.lock().unwrap_or_else(|e| e.into_inner()));
                let woken = entry.pending_wake.load(Ordering::SeqCst) || !entry.inbox.is_empty();
                let leftover = entry.inbox.take();
                let _ = entry.done.send(Some(result));
                if !queue.is_empty() || woken {
                    self.start_successor(&mut sessions, &session, queue, leftover);
                }
                return;
            }
            if entry.pending_wake.swap(false, Ordering::SeqCst) || !entry.inbox.is_empty() {
                continue;
            }
            // The next queued turn whose input can be recorded; the ones that cannot get their error.
            let next = loop {
                let Some(Queued { input, reply: tx }) =
                    entry.queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
                else {
                    break None;
                };
                match self.record_input(&session, &input) {
                    Ok(()) => break Some(tx),
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            };
            match next {
                Some(tx) => reply = Some(tx),
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
        mut queue: VecDeque<Queued>,
        steered: Vec<PromptInput>,
    ) {
        let lock = match self.services.store.lock_session(session) {
            Ok(lock) => lock,
            Err(e) => {
                let error = RunError::from(e);
                for queued in queue {
                    let _ = queued.reply.send(Err(error.clone()));
                }
                return;
            }
        };
        let mut reply = None;
        for input in &steered {
            if let Err(e) = self.record_input(session, input) {
                tracing::warn!("could not record steered input: {e}");
            }
        }
        if steered.is_empty()
            && let Some(Queued { input, reply: tx }) = queue.pop_front()
        {
            match self.record_input(session, &input) {
                Ok(()) => reply = Some(tx),
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        }
        let (done, _rx) = watch::channel(None);
        let entry = Arc::new(Entry {
            cancel: CancellationToken::new(),
            inbox: Inbox::default(),
            queue: Mutex::new(queue),
            pending_wake: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            done,
            lock: Mutex::new(Some(lock)),
        });
        sessions.insert(session.clone(), entry.clone());
        let inner = self.clone();
        let session = session.clone();
        tokio::spawn(async move { inner.drive(session, entry, reply).await });
    }
}

async fn wait(mut rx: watch::Receiver<Option<RunResult>>) -> RunResult {
    match rx.wait_for(Option::is_some).await {
        Ok(result) => result.clone().unwrap_or_else(|| Err(dropped())),
        Err(_) => Err(dropped()),
    }
}

fn dropped() -> RunError {
    RunError::Store("the run ended without reporting a result".into())
}
