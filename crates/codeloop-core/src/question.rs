//! Questions from the `question` tool to the person at the keyboard: pending until any client (terminal,
//! HTTP) answers or rejects; announced on the bus like permission requests.
//!
//! Must not: be offered where no one can answer — the engine only allows the tool when it waits for
//! replies (a terminal or the server); otherwise asking fails at once instead of hanging.

use std::collections::HashMap;
use std::sync::Mutex;

use codeloop_tools::PermissionError;
use codeloop_types::{EventPayload, Question, QuestionId, QuestionRequest, SessionId, ToolCallRef};
use tokio::sync::oneshot;

use crate::Bus;
use crate::permission::AskPolicy;
use codeloop_types::LockExt;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuestionError {
    #[error("no pending question {0} (already answered, or unknown): see GET /question")]
    NotPending(QuestionId),
}

struct Pending {
    request: QuestionRequest,
    /// `None` rejects.
    answer: oneshot::Sender<Option<Vec<Vec<String>>>>,
}

pub struct Questions {
    bus: Bus,
    policy: AskPolicy,
    pending: Mutex<HashMap<QuestionId, Pending>>,
}

impl Questions {
    pub fn new(bus: Bus, policy: AskPolicy) -> Self {
        Self { bus, policy, pending: Mutex::new(HashMap::new()) }
    }

    /// Asks and waits for the answers (one list per question).
    pub async fn ask(
        &self,
        session: &SessionId,
        parent: Option<&SessionId>,
        tool: Option<ToolCallRef>,
        questions: Vec<Question>,
    ) -> Result<Vec<Vec<String>>, PermissionError> {
        if self.policy != AskPolicy::Wait {
            return Err(PermissionError::Blocked {
                message: "the model asked a question and no one can answer in this headless run".into(),
            });
        }
        let request = QuestionRequest {
            id: QuestionId::new(),
            session_id: session.clone(),
            parent_session_id: parent.cloned(),
            questions,
            tool,
        };
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(request.id.clone(), Pending { request: request.clone(), answer: tx });
        let id = request.id.clone();
        self.bus.publish(EventPayload::QuestionAsked(request));
        let guard = Forget { questions: self, id };
        let answer = rx.await;
        drop(guard);
        match answer {
            Ok(Some(answers)) => Ok(answers),
            Ok(None) | Err(_) => Err(PermissionError::Rejected),
        }
    }

    pub fn pending(&self, session: Option<&SessionId>) -> Vec<QuestionRequest> {
        let pending = self.pending.locked();
        let mut list: Vec<QuestionRequest> = pending
            .values()
            .filter(|p| session.is_none_or(|s| &p.request.session_id == s))
            .map(|p| p.request.clone())
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }

    pub fn reply(&self, id: &QuestionId, answers: Vec<Vec<String>>) -> Result<(), QuestionError> {
        let entry = self.take(id)?;
        let session_id = entry.request.session_id.clone();
        let _ = entry.answer.send(Some(answers.clone()));
        self.bus.publish(EventPayload::QuestionReplied { session_id, request_id: id.clone(), answers });
        Ok(())
    }

    pub fn reject(&self, id: &QuestionId) -> Result<(), QuestionError> {
        let entry = self.take(id)?;
        let session_id = entry.request.session_id.clone();
        let _ = entry.answer.send(None);
        self.bus.publish(EventPayload::QuestionRejected { session_id, request_id: id.clone() });
        Ok(())
    }

    /// Rejects every pending question of a session (its run is stopping).
    pub fn reject_session(&self, session: &SessionId) {
        for request in self.pending(Some(session)) {
            let _ = self.reject(&request.id);
        }
    }

    fn take(&self, id: &QuestionId) -> Result<Pending, QuestionError> {
        self.pending.locked().remove(id).ok_or_else(|| QuestionError::NotPending(id.clone()))
    }
}

/// Removes a question whose asking call was dropped (cancelled).
struct Forget<'a> {
    questions: &'a Questions,
    id: QuestionId,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.questions.pending.locked().remove(&self.id);
    }
}
