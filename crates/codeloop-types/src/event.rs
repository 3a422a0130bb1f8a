//! Bus events: what every watcher (CLI, SSE clients, TUI) sees. Serialised as
//! `{"id": N, "type": "message.part.updated", "properties": {...}}`.
//!
//! The id is a per-process sequence number assigned by the bus at publish time: strictly increasing, so a
//! client resumes with `Last-Event-ID` by plain number comparison.

use serde::{Deserialize, Serialize};

use crate::{
    AssistantError, CacheReason, ElicitationAction, ElicitationId, ElicitationRequest, JobId, JobState,
    Limit, Message, MessageId, Millis, Part, PartId, PermissionId, PermissionRequest, QuestionId,
    QuestionRequest, Session, SessionId,
};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: u64,
    #[serde(flatten)]
    pub payload: EventPayload,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "properties")]
pub enum EventPayload {
    #[serde(rename = "session.created")]
    SessionCreated { session_id: SessionId, info: Session },
    #[serde(rename = "session.updated")]
    SessionUpdated { session_id: SessionId, info: Session },
    #[serde(rename = "session.deleted")]
    SessionDeleted { session_id: SessionId },
    #[serde(rename = "message.updated")]
    MessageUpdated { session_id: SessionId, info: Message },
    #[serde(rename = "message.part.updated")]
    PartUpdated { session_id: SessionId, part: Part },
    /// A live text or reasoning chunk; the part's full text is persisted in batches.
    #[serde(rename = "message.part.delta")]
    PartDelta { session_id: SessionId, message_id: MessageId, part_id: PartId, field: String, delta: String },
    #[serde(rename = "session.status")]
    SessionStatus { session_id: SessionId, status: SessionStatus },
    #[serde(rename = "session.idle")]
    SessionIdle { session_id: SessionId },
    #[serde(rename = "session.error")]
    SessionError {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<SessionId>,
        error: AssistantError,
    },
    #[serde(rename = "session.compacted")]
    SessionCompacted { session_id: SessionId },
    /// Something the user should know and can fix, that does not stop the run (e.g. the model wrote
    /// a tool call as text); `message` says what to do.
    #[serde(rename = "session.warning")]
    SessionWarning { session_id: SessionId, message: String },
    /// Something the walls did on the user's behalf that they should know of (DESIGN.md §5j: protected
    /// paths a background job created were moved out of the project); `message` says what and where.
    #[serde(rename = "session.notice")]
    SessionNotice { session_id: SessionId, message: String },
    /// The run reached a `[limits]` limit (DESIGN.md §5h): nothing more was sent and the run stopped.
    /// `limit` is the config key, `value` the limit, `used` what had been spent.
    #[serde(rename = "session.limit")]
    SessionLimit { session_id: SessionId, limit: Limit, value: f64, used: f64 },
    /// codeloop itself changed the prompt's prefix (so the provider's prompt cache misses once).
    #[serde(rename = "session.cache")]
    SessionCache { session_id: SessionId, reason: CacheReason },
    #[serde(rename = "todo.updated")]
    TodoUpdated { session_id: SessionId, todos: Vec<Todo> },
    /// One run of one hook handler (DESIGN.md §5d).
    #[serde(rename = "hook.ran")]
    HookRan {
        session_id: SessionId,
        /// `PreToolUse`, `Stop`, … (Claude Code's event names).
        event: String,
        /// `user` | `project` | `claude-user` | `claude-project`.
        source: String,
        /// The command, or the URL of an HTTP handler.
        command: String,
        duration_ms: u64,
        /// The process's exit code (an HTTP handler's status); `None` after a time-out or a crash.
        exit_code: Option<i32>,
        /// `allow` | `deny` | `ask` | `block` | `none`.
        decision: String,
    },
    #[serde(rename = "permission.asked")]
    PermissionAsked(PermissionRequest),
    #[serde(rename = "permission.replied")]
    PermissionReplied { session_id: SessionId, request_id: PermissionId, reply: PermissionReply },
    #[serde(rename = "question.asked")]
    QuestionAsked(QuestionRequest),
    /// `answers[i]` holds the chosen or typed answers to question `i`.
    #[serde(rename = "question.replied")]
    QuestionReplied { session_id: SessionId, request_id: QuestionId, answers: Vec<Vec<String>> },
    #[serde(rename = "question.rejected")]
    QuestionRejected { session_id: SessionId, request_id: QuestionId },
    /// An MCP server asks the person for input (DESIGN.md §5o).
    #[serde(rename = "elicitation.asked")]
    ElicitationAsked(ElicitationRequest),
    #[serde(rename = "elicitation.replied")]
    ElicitationReplied { session_id: SessionId, request_id: ElicitationId, action: ElicitationAction },
    /// A background job started (DESIGN.md §5f).
    #[serde(rename = "job.started")]
    JobStarted { job_id: JobId, session_id: SessionId, command: String },
    /// A background job ended: by itself (`exited`, with its code), killed, or lost with its owner.
    #[serde(rename = "job.exited")]
    JobExited {
        job_id: JobId,
        session_id: SessionId,
        #[serde(default)]
        exit_code: Option<i32>,
        state: JobState,
    },
    /// Many workers on one store (DESIGN.md §5b): a request a client made on one worker for a session
    /// another worker runs, carried to that worker through the shared event log. Not sent to clients.
    #[serde(rename = "worker.request")]
    WorkerRequest { session_id: SessionId, request: WorkerRequest },
}

/// What one worker asks of the worker running a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WorkerRequest {
    /// Interrupt the run.
    Abort,
    /// Answer a pending permission request.
    PermissionReply {
        request_id: PermissionId,
        reply: PermissionReply,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Answer a pending question (`None`: reject it).
    QuestionReply { request_id: QuestionId, answers: Option<Vec<Vec<String>>> },
}

impl EventPayload {
    /// The SSE event type, e.g. `message.part.updated`.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventPayload::SessionCreated { .. } => "session.created",
            EventPayload::SessionUpdated { .. } => "session.updated",
            EventPayload::SessionDeleted { .. } => "session.deleted",
            EventPayload::MessageUpdated { .. } => "message.updated",
            EventPayload::PartUpdated { .. } => "message.part.updated",
            EventPayload::PartDelta { .. } => "message.part.delta",
            EventPayload::SessionStatus { .. } => "session.status",
            EventPayload::SessionIdle { .. } => "session.idle",
            EventPayload::SessionError { .. } => "session.error",
            EventPayload::SessionCompacted { .. } => "session.compacted",
            EventPayload::SessionWarning { .. } => "session.warning",
            EventPayload::SessionNotice { .. } => "session.notice",
            EventPayload::SessionLimit { .. } => "session.limit",
            EventPayload::SessionCache { .. } => "session.cache",
            EventPayload::TodoUpdated { .. } => "todo.updated",
            EventPayload::HookRan { .. } => "hook.ran",
            EventPayload::PermissionAsked(_) => "permission.asked",
            EventPayload::PermissionReplied { .. } => "permission.replied",
            EventPayload::QuestionAsked(_) => "question.asked",
            EventPayload::QuestionReplied { .. } => "question.replied",
            EventPayload::QuestionRejected { .. } => "question.rejected",
            EventPayload::ElicitationAsked(_) => "elicitation.asked",
            EventPayload::ElicitationReplied { .. } => "elicitation.replied",
            EventPayload::JobStarted { .. } => "job.started",
            EventPayload::JobExited { .. } => "job.exited",
            EventPayload::WorkerRequest { .. } => "worker.request",
        }
    }

    /// The session the event belongs to, for per-session filtering.
    pub fn session_id(&self) -> Option<&SessionId> {
        match self {
            EventPayload::SessionCreated { session_id, .. }
            | EventPayload::SessionUpdated { session_id, .. }
            | EventPayload::SessionDeleted { session_id }
            | EventPayload::MessageUpdated { session_id, .. }
            | EventPayload::PartUpdated { session_id, .. }
            | EventPayload::PartDelta { session_id, .. }
            | EventPayload::SessionStatus { session_id, .. }
            | EventPayload::SessionIdle { session_id }
            | EventPayload::SessionCompacted { session_id }
            | EventPayload::SessionWarning { session_id, .. }
            | EventPayload::SessionNotice { session_id, .. }
            | EventPayload::SessionLimit { session_id, .. }
            | EventPayload::SessionCache { session_id, .. }
            | EventPayload::TodoUpdated { session_id, .. }
            | EventPayload::HookRan { session_id, .. }
            | EventPayload::PermissionReplied { session_id, .. }
            | EventPayload::QuestionReplied { session_id, .. }
            | EventPayload::QuestionRejected { session_id, .. }
            | EventPayload::ElicitationReplied { session_id, .. }
            | EventPayload::JobStarted { session_id, .. }
            | EventPayload::JobExited { session_id, .. }
            | EventPayload::WorkerRequest { session_id, .. } => Some(session_id),
            EventPayload::QuestionAsked(request) => Some(&request.session_id),
            EventPayload::ElicitationAsked(request) => Some(&request.session_id),
            EventPayload::SessionError { session_id, .. } => session_id.as_ref(),
            EventPayload::PermissionAsked(request) => Some(&request.session_id),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SessionStatus {
    Idle,
    Busy,
    /// Waiting before the next attempt; `next` is when it starts (epoch ms), `delay_ms` how long the
    /// wait is (the backoff chosen, or what the provider asked for).
    Retry {
        attempt: u32,
        max_attempts: u32,
        message: String,
        next: Millis,
        #[serde(default)]
        delay_ms: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionReply {
    Once,
    Always,
    Reject,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
    #[serde(default = "TodoPriority::medium")]
    pub priority: TodoPriority,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
    Cancelled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TodoPriority {
    High,
    Medium,
    Low,
}

impl TodoPriority {
    fn medium() -> Self {
        TodoPriority::Medium
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_serialise_as_type_and_properties() {
        let event = Event {
            id: 7,
            payload: EventPayload::PartDelta {
                session_id: "ses_1".into(),
                message_id: "msg_1".into(),
                part_id: "prt_1".into(),
                field: "text".into(),
                delta: "hi".into(),
            },
        };
        let v = serde_json::to_value(&event).unwrap();
        assert_eq!(
            v,
            json!({"id": 7, "type": "message.part.delta", "properties": {
                "session_id": "ses_1", "message_id": "msg_1", "part_id": "prt_1", "field": "text", "delta": "hi"}})
        );
        assert_eq!(v["type"], event.payload.type_name());
        assert_eq!(serde_json::from_value::<Event>(v).unwrap(), event);
    }

    #[test]
    fn retry_status_carries_attempt_and_next() {
        let s = SessionStatus::Retry {
            attempt: 2,
            max_attempts: 8,
            message: "rate limited".into(),
            next: 5,
            delay_ms: 2_000,
        };
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"type": "retry", "attempt": 2, "max_attempts": 8, "message": "rate limited", "next": 5, "delay_ms": 2000})
        );
    }
}
