//! Many workers on one store (DESIGN.md §5b), seen from one worker: the runs other workers own, and
//! the requests a client makes here for them.
//!
//! Every worker's bus carries every worker's events, so this worker mirrors what it needs of the others'
//! runs from them: their sessions' statuses, and the permission requests and questions they wait on.
//! A client that answers one of those, or aborts such a run, on this worker is forwarded as a
//! `worker.request` event through the shared log; the worker running the session acts on it, and this
//! one waits for the outcome to come back on the bus (`permission.replied`, `session.idle`…).
//! Owns: the mirrors, the listener that keeps them and acts on requests for local runs, forwarding.
//! Must not: act on a session this worker does not run, or send `worker.request` events to clients.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use codeloop_types::{
    EventPayload, PermissionId, PermissionRequest, QuestionId, QuestionRequest, SessionId, WorkerRequest,
};
use tokio::sync::broadcast::error::RecvError;

use crate::coordinator::WeakCoordinator;
use crate::permission::Reply;
use crate::services::Services;
use codeloop_types::LockExt;

/// How long a forwarded answer waits for the owner's confirmation before it counts as not delivered.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// What this worker sees of other workers' runs.
#[derive(Default)]
pub struct Peers {
    permissions: Mutex<HashMap<PermissionId, PermissionRequest>>,
    questions: Mutex<HashMap<QuestionId, QuestionRequest>>,
}

impl Peers {
    /// Permission requests other workers' runs wait on.
    pub fn permissions(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let all = self.permissions.locked();
        all.values().filter(|r| session.is_none_or(|s| &r.session_id == s)).cloned().collect()
    }

    /// Questions other workers' runs wait on.
    pub fn questions(&self, session: Option<&SessionId>) -> Vec<QuestionRequest> {
        let all = self.questions.locked();
        all.values().filter(|r| session.is_none_or(|s| &r.session_id == s)).cloned().collect()
    }

    /// The session of another worker's run that waits on permission request `id`.
    pub(crate) fn permission_session(&self, id: &PermissionId) -> Option<SessionId> {
        self.permissions.locked().get(id).map(|r| r.session_id.clone())
    }

    /// The session of another worker's run that waits on question `id`.
    pub(crate) fn question_session(&self, id: &QuestionId) -> Option<SessionId> {
        self.questions.locked().get(id).map(|r| r.session_id.clone())
    }

    /// A run ended somewhere: whatever it waited on is gone with it.
    fn forget_session(&self, session: &SessionId) {
        self.permissions.locked().retain(|_, r| &r.session_id != session);
        self.questions.locked().retain(|_, r| &r.session_id != session);
    }
}

/// Events a worker that starts reads back from the shared log to learn what other workers' runs wait on.
const BACKFILL: usize = 10_000;

/// Keeps `peers` from the bus and acts on requests for runs of this worker, until the engine is dropped.
/// It starts from the log's recent events, so a worker that joins late knows what is already pending.
pub(crate) fn listen(services: &Arc<Services>, coordinator: WeakCoordinator, peers: Arc<Peers>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let mut events = services.bus.subscribe();
    let start = services.bus.next_id();
    let services: Weak<Services> = Arc::downgrade(services);
    runtime.spawn(async move {
        if let Some(strong) = services.upgrade() {
            let logged = strong
                .blocking(move |store| match store.event_log() {
                    Some(log) => log.recent_events(start, BACKFILL),
                    None => Ok(Vec::new()),
                })
                .await;
            match logged {
                Ok(logged) => {
                    for (_, json) in logged {
                        if let Ok(payload) = serde_json::from_str::<EventPayload>(&json) {
                            mirror(&peers, &strong, &payload, &|_| false);
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "could not read what other workers' runs wait on"),
            }
        }
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "the worker listener fell behind the event stream");
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let (Some(services), Some(coordinator)) = (services.upgrade(), coordinator.upgrade()) else {
                return;
            };
            let local = |session: &SessionId| coordinator.is_busy(session);
            match &event.payload {
                EventPayload::WorkerRequest { session_id, request } if local(session_id) => {
                    act(&services, &coordinator, session_id, request.clone());
                }
                payload => mirror(&peers, &services, payload, &local),
            }
        }
    });
}

/// Updates the mirrors of other workers' runs with one event (`local`: sessions this worker runs).
fn mirror(peers: &Peers, services: &Services, payload: &EventPayload, local: &dyn Fn(&SessionId) -> bool) {
    match payload {
        EventPayload::PermissionAsked(request) if !local(&request.session_id) => {
            let mut all = peers.permissions.locked();
            all.insert(request.id.clone(), request.clone());
        }
        EventPayload::PermissionReplied { request_id, .. } => {
            peers.permissions.locked().remove(request_id);
        }
        EventPayload::QuestionAsked(request) if !local(&request.session_id) => {
            let mut all = peers.questions.locked();
            all.insert(request.id.clone(), request.clone());
        }
        EventPayload::QuestionReplied { request_id, .. }
        | EventPayload::QuestionRejected { request_id, .. } => {
            peers.questions.locked().remove(request_id);
        }
        EventPayload::SessionStatus { session_id, status } if !local(session_id) => {
            services.live.set_status(session_id, status);
        }
        EventPayload::SessionIdle { session_id } => peers.forget_session(session_id),
        _ => {}
    }
}

/// Does what another worker asked of a run of this one.
fn act(
    services: &Arc<Services>,
    coordinator: &crate::Coordinator,
    session: &SessionId,
    request: WorkerRequest,
) {
    match request {
        WorkerRequest::Abort => {
            let (coordinator, session) = (coordinator.clone(), session.clone());
            tokio::spawn(async move { coordinator.interrupt(&session).await });
        }
        WorkerRequest::PermissionReply { request_id, reply, message } => {
            // An "always" reply saves the approval in the store: off the async threads.
            let services = services.clone();
            tokio::task::spawn_blocking(move || {
                if let Err(error) = services.permissions.reply(&request_id, Reply { reply, message }) {
                    tracing::debug!(%error, "a forwarded permission reply found nothing to answer");
                }
            });
        }
        WorkerRequest::QuestionReply { request_id, answers } => {
            let answered = match answers {
                Some(answers) => services.questions.reply(&request_id, answers),
                None => services.questions.reject(&request_id),
            };
            if let Err(error) = answered {
                tracing::debug!(%error, "a forwarded answer found no question");
            }
        }
    }
}

/// Forwards `request` to whichever worker runs `session` and waits until `done` sees its outcome on the
/// bus. False when nothing confirmed it within `timeout`.
pub(crate) async fn forward(
    services: &Services,
    session: &SessionId,
    request: WorkerRequest,
    timeout: Duration,
    done: impl Fn(&EventPayload) -> bool,
) -> bool {
    let mut events = services.bus.subscribe();
    services.bus.publish(EventPayload::WorkerRequest { session_id: session.clone(), request });
    let confirmed = async {
        loop {
            match events.recv().await {
                Ok(event) if done(&event.payload) => return true,
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return false,
            }
        }
    };
    tokio::time::timeout(timeout, confirmed).await.unwrap_or(false)
}
