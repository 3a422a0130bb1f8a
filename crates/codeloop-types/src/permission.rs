use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ElicitationId, MessageId, PermissionId, QuestionId, SessionId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionAction {
    Allow,
    Ask,
    Deny,
}

/// `{permission, pattern, action}`; in a ruleset the last matching rule wins (DESIGN.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PermissionRule {
    pub permission: String,
    pub pattern: String,
    pub action: PermissionAction,
}

impl PermissionRule {
    pub fn new(permission: impl Into<String>, pattern: impl Into<String>, action: PermissionAction) -> Self {
        Self { permission: permission.into(), pattern: pattern.into(), action }
    }
}

/// A question to the person at the keyboard: may this tool call go ahead?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionRequest {
    pub id: PermissionId,
    pub session_id: SessionId,
    /// The session's parent when a subagent asks: a client shows the request with the session it watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<SessionId>,
    pub permission: String,
    pub patterns: Vec<String>,
    /// Patterns an `always` reply approves for the future.
    pub always: Vec<String>,
    #[serde(default)]
    pub metadata: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCallRef>,
}

/// What an MCP server asks the person for in the middle of a call (MCP elicitation, DESIGN.md §5o).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationAsk {
    /// The server's name in the config.
    pub server: String,
    /// The server's words: what it needs and why.
    pub message: String,
    pub mode: ElicitationMode,
    /// `form`: the JSON schema of the answer (an object of primitive fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// `url`: where the person goes to give it (never opened by codeloop itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ElicitationMode {
    Form,
    Url,
}

/// A pending elicitation: `GET /session/:id/elicitation` lists these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationRequest {
    pub id: ElicitationId,
    pub session_id: SessionId,
    #[serde(flatten)]
    pub ask: ElicitationAsk,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCallRef>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum ElicitationAction {
    /// The person gave what was asked (`content`).
    Accept,
    /// The person said no; the call goes on without it.
    Decline,
    /// The person dismissed it.
    Cancel,
}

/// The answer to an elicitation: `POST /session/:id/elicitation/:eid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationReply {
    pub action: ElicitationAction,
    /// An accepted form's values (fields left out take the schema's defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
}

impl ElicitationReply {
    pub fn decline() -> Self {
        Self { action: ElicitationAction::Decline, content: None }
    }
}

/// Questions a tool asks the person at the keyboard (the `question` tool), answered by any client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionRequest {
    pub id: QuestionId,
    pub session_id: SessionId,
    /// The session's parent when a subagent asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session_id: Option<SessionId>,
    pub questions: Vec<Question>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCallRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Question {
    pub question: String,
    /// A short label for the question (a few words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Suggested answers; a person may also type their own.
    #[serde(default)]
    pub options: Vec<QuestionOption>,
    /// Whether several options may be chosen.
    #[serde(default)]
    pub multiple: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionOption {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRef {
    pub message_id: MessageId,
    pub call_id: String,
}
