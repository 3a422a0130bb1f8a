//! The coordinator's insides: claiming a session's run (its ownership and first turn, off the async
//! threads), queueing and dequeueing turns under the run's own queue lock, and driving a run until
//! nothing is left.

use crate::error::RunError;
use crate::input::PromptInput;
use crate::run::run_session;
use crate::runs::Runs;
use codeloop_store::{RunGuard, Write};
use codeloop_types::SessionId;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{OwnedMutexGuard, oneshot, watch};

use super::{
    Coordinator, Done, Entry, FirstTurn, Inner, LOCK_RETRIES, LOCK_RETRY_DELAY, OWNERSHIP_CHECK, Queue,
    Replies, RunResult, Slot, Started, Step, off_runtime,
};
use codeloop_types::LockExt;

impl Inner {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Slot>> {
        self.sessions.locked()
    }

    /// Decides under the map's lock: wait for a claim or an ending run, claim an idle session (its slot
    /// becomes `Claiming`), or leave a live run to `running`.
    pub(super) fn next_step(&self, session: &SessionId, running: impl FnOnce(&Arc<Entry>) -> Step) -> Step {
        let mut sessions = self.lock();
        match sessions.get(session) {
            Some(Slot::Claiming(settled)) => Step::AwaitClaim(settled.clone()),
            Some(Slot::Running(entry)) if entry.stopping.load(Ordering::SeqCst) => {
                Step::AwaitEnd(entry.done.subscribe())
            }
            Some(Slot::Running(entry)) => running(entry),
            None => {
                let (settled, rx) = watch::channel(());
                sessions.insert(session.clone(), Slot::Claiming(rx));
                Step::Claim(settled)
            }
        }
    }

    /// Takes the session (whose slot this caller set to `Claiming`), records its first turn and starts
    /// the driver. `None` when there was nothing to run. Either way the slot is settled before this
    /// returns: `Running`, or gone.
    ///
    /// Boxed: a run that ends starts its successor through here, so the future's type would contain itself.
    pub(super) fn claim<'a>(
        self: &'a Arc<Self>,
        session: &'a SessionId,
        first: FirstTurn,
        settled: watch::Sender<()>,
    ) -> Pin<Box<dyn Future<Output = Result<Option<Done>, RunError>> + Send + 'a>> {
        Box::pin(async move {
            let started = {
                let (inner, id) = (self.clone(), session.clone());
                match self.take_ownership(session).await {
                    // Flattened, not `?`: the slot must be settled whatever happens.
                    Ok(ownership) => off_runtime(move || inner.record_first_turn(&id, ownership, first))
                        .await
                        .and_then(|recorded| recorded),
                    Err(e) => {
                        for reply in first.replies.into_values() {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Err(e)
                    }
                }
            };
            let mut sessions = self.lock();
            let started = match started {
                Ok(Some(started)) => started,
                Ok(None) | Err(_) => {
                    sessions.remove(session);
                    drop(settled);
                    return started.map(|_| None);
                }
            };
            let entry = Entry::new(started.ownership, started.replies);
            let done = entry.done.subscribe();
            sessions.insert(session.clone(), Slot::Running(entry.clone()));
            drop(settled);
            watch_ownership(session, &entry);
            let (inner, session) = (self.clone(), session.clone());
            tokio::spawn(async move { inner.drive(session, entry, started.reply).await });
            Ok(Some(done))
        })
    }

    pub(super) async fn take_ownership(&self, session: &SessionId) -> Result<RunGuard, RunError> {
        let mut attempt = 0;
        loop {
            let id = session.clone();
            match self.services.blocking(move |store| store.lock_session(&id)).await {
                Ok(guard) => return Ok(guard),
                Err(codeloop_store::StoreError::SessionBusy(_)) if attempt < LOCK_RETRIES => {
                    attempt += 1;
                    tokio::time::sleep(LOCK_RETRY_DELAY).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Records what a new run starts with (blocking store work): steered input, then the caller's input
    /// (queued behind what a process that is gone had queued, which comes first); a run that only
    /// waits for queued turns starts with the oldest. `None` when there is nothing to run; the
    /// ownership is then let go.
    pub(super) fn record_first_turn(
        &self,
        session: &SessionId,
        ownership: RunGuard,
        first: FirstTurn,
    ) -> Result<Option<Started>, RunError> {
        let FirstTurn { input, steered, mut replies, mut always } = first;
        let mut recorded = false;
        let mut reply = None;
        for steered in &steered {
            match self.record_input(session, &steered.input, Some(steered.queued)) {
                Ok(()) => recorded = true,
                Err(e) => tracing::warn!("could not record steered input: {e}"),
            }
        }
        if let Some((input, caller)) = input {
            if self.has_queued(session)? {
                // Input a process that is gone had queued comes first: this one waits its turn.
                let id = self.enqueue(session, &input)?;
                replies.insert(id, caller);
                always = true;
            } else {
                self.record_input(session, &input, None)?;
                reply = Some(caller);
                recorded = true;
            }
        }
        if always {
            // What the session holds runs first (a run a dead worker left open is continued); the queue
            // follows, turn by turn.
            return Ok(Some(Started { ownership, replies, reply }));
        }
        if !recorded && let Some(caller) = self.record_next_queued(session, &mut replies) {
            reply = caller;
            recorded = true;
        }
        if !recorded {
            // Their turns were taken by another run; dropping the senders tells any caller left.
            return Ok(None);
        }
        Ok(Some(Started { ownership, replies, reply }))
    }

    /// Queues `input` as its own turn behind `entry`'s run. `None` when that run has stopped taking
    /// turns; else the caller's reply, once the turn is stored.
    pub(super) async fn enqueue_behind(
        self: &Arc<Self>,
        entry: &Entry,
        session: &SessionId,
        input: PromptInput,
    ) -> Result<Option<oneshot::Receiver<RunResult>>, RunError> {
        let mut queue = entry.queue.clone().lock_owned().await;
        if queue.closed {
            return Ok(None);
        }
        let (inner, session) = (self.clone(), session.clone());
        let id = off_runtime(move || inner.enqueue(&session, &input)).await??;
        let (reply, own) = oneshot::channel();
        queue.replies.insert(id, reply);
        Ok(Some(own))
    }

    /// Steers `input` into `entry`'s run: stored in the session's queue first (a process that dies before
    /// the run's next step leaves it for the settling one), then handed to the run, which records it and
    /// takes it off the queue in one transaction. False when that run has stopped taking input.
    pub(super) async fn steer_into(
        self: &Arc<Self>,
        entry: &Entry,
        session: &SessionId,
        input: PromptInput,
    ) -> Result<bool, RunError> {
        // The run decides whether to go on under this lock, so the input is either seen or refused.
        let queue = entry.queue.clone().lock_owned().await;
        if queue.closed {
            return Ok(false);
        }
        let (inner, id, stored) = (self.clone(), session.clone(), input.clone());
        let queued = off_runtime(move || inner.enqueue(&id, &stored)).await??;
        entry.inbox.push(crate::run::Steered { queued, input });
        drop(queue);
        Ok(true)
    }

    /// Stores `input` behind the session's run.
    pub(super) fn enqueue(&self, session: &SessionId, input: &PromptInput) -> Result<i64, RunError> {
        let json = serde_json::to_string(input).map_err(|e| RunError::Internal(e.to_string()))?;
        Ok(self.services.store.enqueue_input(session, &json)?)
    }

    /// Records the oldest stored queued input as the next turn; the user message and its removal from
    /// the queue are one store transaction, so a crash can neither lose nor repeat it. Inputs that
    /// cannot be recorded are taken off and answered with their error. `None` when the queue is empty;
    /// `Some(reply)` otherwise, `reply` being the caller waiting for that turn in this process (none for
    /// input queued by a process that is gone).
    pub(super) fn record_next_queued(
        &self,
        session: &SessionId,
        replies: &mut Replies,
    ) -> Option<Option<oneshot::Sender<RunResult>>> {
        loop {
            let queued = match self.services.store.queued_inputs(session) {
                Ok(queued) => queued.into_iter().next()?,
                Err(e) => {
                    tracing::warn!("could not read the queued input of {session}: {e}");
                    return None;
                }
            };
            let reply = replies.remove(&queued.id);
            let recorded = serde_json::from_str::<PromptInput>(&queued.input)
                .map_err(|e| RunError::Internal(format!("queued input {} cannot be read: {e}", queued.id)))
                .and_then(|input| self.record_input(session, &input, Some(queued.id)));
            match recorded {
                Ok(()) => return Some(reply),
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

    pub(super) fn has_queued(&self, session: &SessionId) -> Result<bool, RunError> {
        Ok(!self.services.store.queued_inputs(session)?.is_empty())
    }

    /// Records `input` as a user message; `dequeue` names the stored queued input it came from, taken off
    /// the queue in the same transaction.
    pub(super) fn record_input(
        &self,
        session: &SessionId,
        input: &PromptInput,
        dequeue: Option<i64>,
    ) -> Result<(), RunError> {
        let mut info = self
            .services
            .store
            .get_session(session)?
            .ok_or_else(|| RunError::SessionNotFound(session.clone()))?;
        let (_, mut batch) = crate::input::user_message(&self.services, &mut info, input)?;
        if let Some(id) = dequeue {
            batch.write(Write::RemoveQueued(id));
        }
        self.services.journal.commit(batch);
        Ok(())
    }

    /// Runs the session until nothing is left: follow-ups for wakes and steered input, then queued
    /// turns one by one.
    pub(super) async fn drive(
        self: Arc<Self>,
        session: SessionId,
        entry: Arc<Entry>,
        mut reply: Option<oneshot::Sender<RunResult>>,
    ) {
        loop {
            let runs: Arc<dyn Runs> = Arc::new(Coordinator { inner: self.clone() });
            let result =
                run_session(self.services.clone(), runs, &session, entry.cancel.clone(), &entry.inbox).await;
            // The turn's caller hears back once the session's next state is settled (another turn
            // started, or the run gone), so whatever it does next finds the session as it will be.
            let answer = |reply: Option<oneshot::Sender<RunResult>>| {
                if let Some(reply) = reply {
                    let _ = reply.send(result.clone());
                }
            };
            let mut queue = entry.queue.clone().lock_owned().await;
            let interrupted = entry.stopping.load(Ordering::SeqCst);
            if !interrupted {
                if entry.pending_wake.swap(false, Ordering::SeqCst) || !entry.inbox.is_empty() {
                    answer(reply.take());
                    continue;
                }
                let next;
                (queue, next) = match self.next_queued(&session, queue).await {
                    Ok(found) => found,
                    Err(e) => {
                        tracing::warn!("could not take the next queued turn of {session}: {e}");
                        (entry.queue.clone().lock_owned().await, None)
                    }
                };
                if let Some(next) = next {
                    answer(std::mem::replace(&mut reply, next));
                    continue;
                }
            }
            // A stopped run's stored queue still runs, on a fresh run (a running one took it above).
            let waiting = interrupted && {
                let (inner, session) = (self.clone(), session.clone());
                off_runtime(move || inner.has_queued(&session))
                    .await
                    .is_ok_and(|queued| queued.unwrap_or(false))
            };
            // Decided under the map's lock: a steer or wake that arrived meanwhile gets its follow-up.
            let successor = {
                let mut sessions = self.lock();
                let stopped = entry.stopping.load(Ordering::SeqCst);
                if !stopped && (entry.pending_wake.swap(false, Ordering::SeqCst) || !entry.inbox.is_empty()) {
                    drop(sessions);
                    answer(reply.take());
                    continue;
                }
                entry.stopping.store(true, Ordering::SeqCst);
                queue.closed = true;
                let first = FirstTurn {
                    steered: entry.inbox.take(),
                    replies: std::mem::take(&mut queue.replies),
                    always: entry.pending_wake.load(Ordering::SeqCst),
                    input: None,
                };
                if !first.steered.is_empty() || !first.replies.is_empty() || first.always || waiting {
                    // Input steered or queued meanwhile (an interrupt cut the run short) runs on a fresh run.
                    let (settled, rx) = watch::channel(());
                    sessions.insert(session.clone(), Slot::Claiming(rx));
                    Some((first, settled))
                } else {
                    None
                }
            };
            drop(queue);
            entry.release().await;
            match successor {
                Some((first, settled)) => {
                    answer(reply.take());
                    let _ = entry.done.send(Some(result.clone()));
                    if let Err(e) = self.claim(&session, first, settled).await {
                        tracing::warn!("could not run the queued turns of {session}: {e}");
                    }
                }
                None => {
                    {
                        let mut sessions = self.lock();
                        if matches!(sessions.get(&session), Some(Slot::Running(e)) if Arc::ptr_eq(e, &entry))
                        {
                            sessions.remove(&session);
                        }
                    }
                    answer(reply.take());
                    let _ = entry.done.send(Some(result.clone()));
                }
            }
            return;
        }
    }

    /// [`Inner::record_next_queued`] off the async threads, holding the run's queue lock throughout.
    pub(super) async fn next_queued(
        self: &Arc<Self>,
        session: &SessionId,
        mut queue: OwnedMutexGuard<Queue>,
    ) -> Result<(OwnedMutexGuard<Queue>, Option<Option<oneshot::Sender<RunResult>>>), RunError> {
        let (inner, session) = (self.clone(), session.clone());
        off_runtime(move || {
            let next = inner.record_next_queued(&session, &mut queue.replies);
            (queue, next)
        })
        .await
    }
}

/// Stops the run when its ownership is lost (a lease another worker took over after it expired): that
/// worker now settles and continues the session, and two runs must never write it at once.
pub(super) fn watch_ownership(session: &SessionId, entry: &Arc<Entry>) {
    let (session, entry) = (session.clone(), Arc::downgrade(entry));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(OWNERSHIP_CHECK).await;
            let Some(entry) = entry.upgrade() else { return };
            let held = match entry.ownership.locked().as_ref() {
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
