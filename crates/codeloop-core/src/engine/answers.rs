//! Requests a run waits on — permission asks and questions — listed and answered, with many workers
//! also those of other workers' runs (mirrored from the shared event stream, answers forwarded).

use codeloop_types::{
    EventPayload, PermissionId, PermissionReply, PermissionRequest, SessionId, WorkerRequest,
};

use super::Engine;
use crate::command::PermissionAnswer;
use crate::permission::{Reply, ReplyError};

impl Engine {
    /// Pending questions: this worker's, and with many workers, those other workers' runs wait on.
    pub fn pending_questions(&self, session: Option<&SessionId>) -> Vec<codeloop_types::QuestionRequest> {
        let remote = self.peers.as_ref().map(|p| p.questions(session)).unwrap_or_default();
        with_remote(self.services.questions.pending(session), remote, |q| &q.id)
    }

    /// Answers (`Some`) or rejects (`None`) a pending question of this worker, or with many workers,
    /// one another worker's run waits on (forwarded, and confirmed once it took the answer).
    pub(super) async fn answer_question(
        &self,
        id: &codeloop_types::QuestionId,
        answers: Option<Vec<Vec<String>>>,
    ) -> Result<(), crate::question::QuestionError> {
        let local = match answers.clone() {
            Some(answers) => self.services.questions.reply(id, answers),
            None => self.services.questions.reject(id),
        };
        let Err(crate::question::QuestionError::NotPending(_)) = local else { return local };
        let session = self.peers.as_ref().and_then(|p| p.question_session(id));
        let answered = |p: &EventPayload| match p {
            EventPayload::QuestionReplied { request_id, .. }
            | EventPayload::QuestionRejected { request_id, .. } => request_id == id,
            _ => false,
        };
        let request = WorkerRequest::QuestionReply { request_id: id.clone(), answers };
        if self.forward_answer(session, request, answered).await { Ok(()) } else { local }
    }

    /// Answers a pending question: one list of answers per question asked.
    #[cfg(any(test, feature = "internals"))]
    pub fn reply_question(
        &self,
        id: &codeloop_types::QuestionId,
        answers: Vec<Vec<String>>,
    ) -> Result<(), crate::question::QuestionError> {
        self.services.questions.reply(id, answers)
    }

    #[cfg(any(test, feature = "internals"))]
    pub fn reject_question(
        &self,
        id: &codeloop_types::QuestionId,
    ) -> Result<(), crate::question::QuestionError> {
        self.services.questions.reject(id)
    }

    /// Pending MCP elicitations of a session (this worker's: an MCP server talks to the worker that
    /// runs the call).
    pub fn pending_elicitations(&self, session: &SessionId) -> Vec<codeloop_types::ElicitationRequest> {
        self.services.elicitations.pending(Some(session))
    }

    /// Answers a pending MCP elicitation of `session`.
    pub fn answer_elicitation(
        &self,
        session: &SessionId,
        id: &codeloop_types::ElicitationId,
        reply: codeloop_types::ElicitationReply,
    ) -> Result<(), crate::elicitation::ElicitationError> {
        self.services.elicitations.reply(session, id, reply)
    }

    /// Pending permission requests: this worker's, and with many workers, those other workers' runs wait on.
    pub fn pending_permissions(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let remote = self.peers.as_ref().map(|p| p.permissions(session)).unwrap_or_default();
        with_remote(self.services.permissions.pending(session), remote, |p| &p.id)
    }

    /// Answers a permission request of this process directly (tests drive runs this way).
    #[cfg(any(test, feature = "internals"))]
    pub fn reply_permission(&self, id: &PermissionId, reply: Reply) -> Result<(), ReplyError> {
        self.services.permissions.reply(id, reply)
    }

    /// Answers a pending request of this worker, or with many workers, one another worker's run waits on:
    /// forwarded to it, and confirmed once it took the answer. "Reject always" is remembered for the
    /// request's session in this process: later asks like it are refused with a note for the model.
    pub(super) async fn answer_permission(
        &self,
        id: &PermissionId,
        answer: PermissionAnswer,
    ) -> Result<(), ReplyError> {
        let reply = match answer {
            PermissionAnswer::Once => Reply { reply: PermissionReply::Once, message: None },
            PermissionAnswer::Always => Reply { reply: PermissionReply::Always, message: None },
            PermissionAnswer::Reject { message } => Reply { reply: PermissionReply::Reject, message },
            PermissionAnswer::RejectAlways => {
                self.services.permissions.reject_always(id)?;
                return Ok(());
            }
        };
        let local = {
            let (services, request, reply) = (self.services.clone(), id.clone(), reply.clone());
            // An "always" reply saves the approval in the store: off the async threads.
            tokio::task::spawn_blocking(move || services.permissions.reply(&request, reply))
                .await
                .unwrap_or_else(|_| Err(ReplyError::Unknown(id.clone())))
        };
        let Err(ReplyError::Unknown(_)) = local else { return local };
        let session = self.peers.as_ref().and_then(|p| p.permission_session(id));
        let request = WorkerRequest::PermissionReply {
            request_id: id.clone(),
            reply: reply.reply,
            message: reply.message,
        };
        let replied = |p: &EventPayload| matches!(p, EventPayload::PermissionReplied { request_id, .. } if request_id == id);
        if self.forward_answer(session, request, replied).await { Ok(()) } else { local }
    }

    /// Forwards an answer to the worker whose run of `session` waits for it (`None`: no other worker's
    /// run does); true once `taken` sees that worker took it.
    async fn forward_answer(
        &self,
        session: Option<SessionId>,
        request: WorkerRequest,
        taken: impl Fn(&EventPayload) -> bool,
    ) -> bool {
        match session {
            Some(session) => {
                crate::peers::forward(&self.services, &session, request, crate::peers::ANSWER_TIMEOUT, taken)
                    .await
            }
            None => false,
        }
    }
}

/// `local` followed by the entries of `remote` (other workers' runs) it does not already list.
fn with_remote<T, K: PartialEq>(mut local: Vec<T>, remote: Vec<T>, id: impl Fn(&T) -> &K) -> Vec<T> {
    for entry in remote {
        if !local.iter().any(|known| id(known) == id(&entry)) {
            local.push(entry);
        }
    }
    local
}
