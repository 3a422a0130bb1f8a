//! Engine events (the bus, live) applied to the UI's state: the conversation, the run state, and the
//! permission and question prompts of this session and its subagents' sessions.

use codeloop_types::{EventPayload, Message, SessionId};

use super::{Action, App, PermissionMode, RunState, run_state};
use crate::client::Incoming;
use crate::convo::Notice;

impl App {
    pub fn incoming(&mut self, incoming: Incoming) -> Vec<Action> {
        match incoming {
            Incoming::Event(event) => self.event(event.payload.clone()),
            Incoming::Resync => self.session_id().cloned().map(Action::Reload).into_iter().collect(),
            Incoming::Closed(message) => {
                self.convo.notice(Notice::error(format!("lost the server: {message}")));
                Vec::new()
            }
        }
    }

    fn mine(&self, session: &SessionId) -> bool {
        Some(session) == self.session_id()
    }

    pub fn event(&mut self, payload: EventPayload) -> Vec<Action> {
        match payload {
            EventPayload::SessionUpdated { session_id, info } if self.mine(&session_id) => {
                let model_changed = self.convo.session.as_ref().map(|s| &s.model) != Some(&info.model);
                self.convo.session = Some(info);
                if model_changed {
                    return self.lookups();
                }
            }
            EventPayload::SessionDeleted { session_id } if self.mine(&session_id) => {
                self.convo.notice(Notice::warning("this session was deleted elsewhere: /new or /sessions"));
            }
            EventPayload::MessageUpdated { session_id, info } if self.mine(&session_id) => {
                if matches!(info, Message::User(_))
                    && !self.convo.messages.contains_key(info.id())
                    && self.queued > 0
                    && self.busy()
                {
                    self.queued -= 1;
                }
                self.convo.message_updated(info);
            }
            EventPayload::PartUpdated { session_id, part } if self.mine(&session_id) => {
                self.convo.part_updated(part);
            }
            EventPayload::PartDelta { session_id, message_id, part_id, delta, .. }
                if self.mine(&session_id) =>
            {
                self.convo.part_delta(&message_id, &part_id, &delta);
            }
            EventPayload::SessionStatus { session_id, status } if self.mine(&session_id) => {
                let state = run_state(status);
                if let RunState::Retry { attempt, max_attempts, message, next } = &state
                    && !matches!(&self.state, RunState::Retry { attempt: a, .. } if a == attempt)
                {
                    let wait = (*next - codeloop_types::now_ms()).max(0) as f64 / 1000.0;
                    self.convo.notice(Notice::warning(format!(
                        "retrying in {wait:.0} s (attempt {attempt}/{max_attempts}): {message}"
                    )));
                }
                self.state = state;
            }
            EventPayload::SessionIdle { session_id } if self.mine(&session_id) => {
                self.state = RunState::Idle;
                self.queued = 0;
            }
            EventPayload::SessionError { session_id: Some(session_id), error }
                if self.mine(&session_id)
                    && !error.is_aborted()
                    && self.convo.last_error().as_deref() != Some(error.message()) =>
            {
                self.convo.notice(Notice::error(error.message().to_owned()));
            }
            EventPayload::SessionCompacted { session_id } if self.mine(&session_id) => {
                self.convo.notice(Notice::info("context compacted: older messages were summarised"));
            }
            EventPayload::SessionWarning { session_id, message } if self.mine(&session_id) => {
                self.convo.notice(Notice::warning(message));
            }
            EventPayload::SessionNotice { session_id, message } if self.mine(&session_id) => {
                self.convo.notice(Notice::info(message));
            }
            EventPayload::JobStarted { session_id, job_id, command } if self.mine(&session_id) => {
                self.job_started(job_id, &command);
            }
            EventPayload::JobExited { session_id, job_id, exit_code, state } if self.mine(&session_id) => {
                self.job_exited(job_id, state, exit_code);
            }
            EventPayload::SessionLimit { session_id, limit, value, used } if self.mine(&session_id) => {
                let reached = codeloop_types::LimitReached { limit, value, used };
                self.convo.notice(Notice::error(reached.to_string()));
            }
            EventPayload::HookRan { session_id, event, command, duration_ms, decision, .. }
                if self.mine(&session_id) =>
            {
                self.convo.notice(Notice::info(format!(
                    "hook {event} `{command}` → {decision} ({duration_ms} ms)"
                )));
            }
            EventPayload::PermissionAsked(request)
                if self.mine(&request.session_id)
                    || request.parent_session_id.as_ref().is_some_and(|p| self.mine(p)) =>
            {
                self.permissions.retain(|p| p.id != request.id);
                self.permissions.push_back(request);
            }
            EventPayload::PermissionReplied { request_id, .. } => {
                let front = self.permissions.front().map(|p| p.id.clone());
                self.permissions.retain(|p| p.id != request_id);
                if front.as_ref() == Some(&request_id) {
                    self.permission_mode = PermissionMode::Choosing;
                }
            }
            EventPayload::QuestionAsked(request)
                if self.mine(&request.session_id)
                    || request.parent_session_id.as_ref().is_some_and(|p| self.mine(p)) =>
            {
                self.questions.retain(|q| q.id != request.id);
                self.questions.push_back(request);
            }
            EventPayload::ElicitationAsked(request) if self.mine(&request.session_id) => {
                self.elicitations.retain(|e| e.id != request.id);
                self.elicitations.push_back(request);
            }
            EventPayload::ElicitationReplied { request_id, .. } => {
                // Answered elsewhere (another client, or withdrawn by the server's own sign-in).
                if self.elicitations.front().is_some_and(|e| e.id == request_id) {
                    self.fields.clear();
                }
                self.elicitations.retain(|e| e.id != request_id);
            }
            EventPayload::QuestionReplied { request_id, .. }
            | EventPayload::QuestionRejected { request_id, .. } => {
                if self.questions.front().is_some_and(|q| q.id == request_id) {
                    self.answers.clear();
                }
                self.questions.retain(|q| q.id != request_id);
            }
            _ => {}
        }
        Vec::new()
    }
}
