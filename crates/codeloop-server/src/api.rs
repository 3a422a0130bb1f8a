//! The wire types of the HTTP API: request bodies, query strings and the responses the server defines
//! itself (sessions, messages, parts and events are `codeloop-types` values, sent as they serialise).
//! Public so clients in Rust (`codeloop run --attach`, tests) read exactly what the server writes.
//!
//! Owns: shapes, their JSON schemas (for `/doc`) and conversions to engine inputs.
//! Must not: validate against state (whether a session exists is the routes' and the engine's job).

use codeloop_core::Blocked;
use codeloop_core::PermissionAnswer;
use codeloop_core::{Delivery, InputPart, PromptInput, StopReason};
use codeloop_types::{AssistantError, Message, ModelRef, Part};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `{"error": {"code": "not_found", "message": "…"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code: `invalid_request`, `not_found`, `busy`, `not_pending`,
    /// `unauthorized`, `payload_too_large`, `internal`, …
    pub code: String,
    /// What went wrong and what to do about it.
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub healthy: bool,
    pub version: String,
}

/// A model as `"provider/model"` or `{"provider_id", "model_id"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ModelSpec {
    Text(String),
    Ref {
        #[serde(alias = "providerID")]
        provider_id: String,
        #[serde(alias = "modelID")]
        model_id: String,
    },
}

impl ModelSpec {
    pub fn to_ref(&self) -> Result<ModelRef, String> {
        match self {
            ModelSpec::Text(text) => text.parse().map_err(|e: codeloop_types::ModelRefError| e.to_string()),
            ModelSpec::Ref { provider_id, model_id } if !provider_id.is_empty() && !model_id.is_empty() => {
                Ok(ModelRef::new(provider_id.clone(), model_id.clone()))
            }
            ModelSpec::Ref { .. } => Err("invalid model: provider_id and model_id must not be empty".into()),
        }
    }
}

/// `POST /session`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateSession {
    /// Working directory of the session (default: the server's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, alias = "parentID", skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

/// `PATCH /session/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateSession {
    pub title: String,
}

/// One part of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PromptPart {
    Text {
        text: String,
    },
    File {
        mime: String,
        url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
}

/// How a prompt sent while the session runs is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryMode {
    /// Joins the active run at its next step boundary (the default).
    #[default]
    Steer,
    /// Becomes its own turn after the active run ends.
    Queue,
}

/// `POST /session/{id}/prompt`, `/message` and `/prompt_async`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptBody {
    pub parts: Vec<PromptPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Extra system text for this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
    /// How hard the model thinks this turn: `none`, `low`, `medium`, `high` or `max` (DESIGN.md §5l).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
}

impl PromptBody {
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            parts: vec![PromptPart::Text { text: text.into() }],
            model: None,
            agent: None,
            system: None,
            delivery: None,
            effort: None,
        }
    }

    /// The engine input, or what is wrong with the body.
    pub fn to_input(&self) -> Result<(PromptInput, Delivery), String> {
        let has_content = self.parts.iter().any(|part| match part {
            PromptPart::Text { text } => !text.trim().is_empty(),
            PromptPart::File { .. } => true,
        });
        if !has_content {
            return Err("the prompt is empty: send at least one non-empty text part in `parts`".into());
        }
        let mut parts = Vec::with_capacity(self.parts.len());
        for (index, part) in self.parts.iter().enumerate() {
            parts.push(match part {
                PromptPart::Text { text } => InputPart::Text { text: text.clone(), synthetic: false },
                PromptPart::File { mime, url, filename } => {
                    if mime.trim().is_empty() || url.trim().is_empty() {
                        return Err(format!(
                            "parts[{index}]: a file part needs a non-empty `mime` and `url`"
                        ));
                    }
                    InputPart::File { mime: mime.clone(), url: url.clone(), filename: filename.clone() }
                }
            });
        }
        let model = self.model.as_ref().map(ModelSpec::to_ref).transpose()?;
        let delivery = match self.delivery.unwrap_or_default() {
            DeliveryMode::Steer => Delivery::Steer,
            DeliveryMode::Queue => Delivery::Queue,
        };
        let effort = self.effort.as_deref().map(str::parse).transpose().map_err(|e| format!("{e}"))?;
        let input = PromptInput {
            parts,
            model,
            agent: self.agent.clone(),
            system: self.system.clone(),
            command: None,
            effort,
            allowed_tools: Vec::new(),
            message_id: None,
        };
        Ok((input, delivery))
    }
}

/// Why a run ended (`StopReason` on the wire).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Stop {
    Completed,
    Interrupted,
    /// A permission was rejected or could not be asked, the doom-loop brake held, or the model called a
    /// tool while summarising (`reason`: rejected | unanswerable | doom_loop | tool_call_during_summary).
    Blocked {
        message: String,
        #[serde(default)]
        reason: String,
        /// The tool, for `rejected` and `tool_call_during_summary`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
    },
    /// An error was recorded on the last message.
    Error {
        #[schemars(with = "serde_json::Value")]
        error: AssistantError,
    },
    StepLimit {
        steps: u32,
    },
    /// A `[limits]` limit was reached (`limit` is its config key); nothing more was sent to the model.
    Limit {
        message: String,
        #[schemars(with = "String")]
        limit: codeloop_types::Limit,
        value: f64,
        used: f64,
    },
    /// A hook answered `continue: false` (`reason`: its `stopReason`).
    HookStopped {
        #[serde(default)]
        reason: String,
    },
}

impl From<&StopReason> for Stop {
    fn from(stop: &StopReason) -> Self {
        match stop {
            StopReason::Completed => Stop::Completed,
            StopReason::Interrupted => Stop::Interrupted,
            StopReason::Blocked(blocked) => {
                let (reason, tool) = match blocked {
                    Blocked::Rejected { tool } => ("rejected", Some(tool.clone())),
                    Blocked::Unanswerable { .. } => ("unanswerable", None),
                    Blocked::DoomLoop { .. } => ("doom_loop", None),
                    Blocked::ToolCallDuringSummary { tool } => {
                        ("tool_call_during_summary", Some(tool.clone()))
                    }
                };
                Stop::Blocked { message: blocked.to_string(), reason: reason.to_owned(), tool }
            }
            StopReason::Error(error) => Stop::Error { error: error.clone() },
            StopReason::StepLimit(steps) => Stop::StepLimit { steps: *steps },
            StopReason::Limit(reached) => Stop::Limit {
                message: reached.to_string(),
                limit: reached.limit,
                value: reached.value,
                used: reached.used,
            },
            StopReason::HookStopped(reason) => Stop::HookStopped { reason: reason.clone() },
        }
    }
}

impl From<Stop> for StopReason {
    fn from(stop: Stop) -> Self {
        match stop {
            Stop::Completed => StopReason::Completed,
            Stop::Interrupted => StopReason::Interrupted,
            Stop::Blocked { message, reason, tool } => StopReason::Blocked(match (reason.as_str(), tool) {
                ("rejected", Some(tool)) => Blocked::Rejected { tool },
                ("doom_loop", _) => Blocked::DoomLoop { message },
                ("tool_call_during_summary", Some(tool)) => Blocked::ToolCallDuringSummary { tool },
                // What an older server, or an unanswerable ask, says: the message as it was.
                _ => Blocked::Unanswerable { message: message.trim_start_matches("Stopped: ").to_owned() },
            }),
            Stop::Error { error } => StopReason::Error(error),
            Stop::StepLimit { steps } => StopReason::StepLimit(steps),
            Stop::Limit { limit, value, used, .. } => {
                StopReason::Limit(codeloop_types::LimitReached { limit, value, used })
            }
            Stop::HookStopped { reason } => StopReason::HookStopped(reason),
        }
    }
}

/// The final assistant message of a run with its parts, and why the run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PromptResult {
    /// `null` when the run ended before answering.
    #[schemars(with = "Option<serde_json::Value>")]
    pub info: Option<Message>,
    #[schemars(with = "Vec<serde_json::Value>")]
    pub parts: Vec<Part>,
    pub stop: Stop,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionListQuery {
    /// Only sessions whose directory is exactly this.
    pub directory: Option<String>,
    pub limit: Option<usize>,
    /// Only root sessions (no subtask children).
    pub roots: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobOutputQuery {
    /// At most this many of the newest bytes (default 16 384, at most 1 MiB).
    pub bytes: Option<usize>,
}

/// The newest output of a background job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobOutput {
    pub id: String,
    pub output: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageListQuery {
    /// Page size (1–1000, default 100).
    pub limit: Option<usize>,
    /// Only messages older than this message id (the cursor of the previous page).
    pub before: Option<String>,
    /// The page also ends once its messages hold this many parts (at least one message is sent), so a
    /// page of a few very long messages stays light.
    pub max_parts: Option<usize>,
}

/// `POST /session/{id}/command` (DESIGN.md §5g).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandBody {
    /// The command's name (`review`, `git:log`, `mcp__SERVER__PROMPT`, `init`, `compact`).
    pub command: String,
    /// Its arguments: one string as typed (`$ARGUMENTS`), or a list of words joined by spaces.
    #[serde(default)]
    pub arguments: CommandArguments,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryMode>,
    /// How hard the model thinks for the command's turn: none, low, medium, high or max (DESIGN.md §5l).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CommandArguments {
    Text(String),
    Words(Vec<String>),
}

impl Default for CommandArguments {
    fn default() -> Self {
        Self::Text(String::new())
    }
}

impl CommandArguments {
    pub fn joined(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::Words(words) => words.join(" "),
        }
    }
}

/// One command of `GET /command`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CommandEntry {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// `user`, `project`, `mcp` or `builtin`.
    pub source: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DirectoryQuery {
    /// The project directory (relative to the server's); default: the server's.
    pub directory: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionQuery {
    /// Only this session.
    pub session: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventQuery {
    /// Only events of this session (control events are always sent).
    pub session: Option<String>,
    /// Replay every event after this id (as the `Last-Event-ID` header does).
    pub since: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplyKind {
    Once,
    Always,
    Reject,
    /// Reject, and every request like it in this session from now on (this server process).
    RejectAlways,
}

/// `POST /session/{id}/compact?focus=…`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactQuery {
    /// What the summary should keep in view.
    #[serde(default)]
    pub focus: Option<String>,
}

/// `POST /permission/{requestID}/reply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PermissionReplyBody {
    pub reply: ReplyKind,
    /// With `reject`: feedback passed to the model instead of stopping the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl PermissionReplyBody {
    /// The engine's answer this body carries.
    pub fn to_answer(&self) -> PermissionAnswer {
        match self.reply {
            ReplyKind::Once => PermissionAnswer::Once,
            ReplyKind::Always => PermissionAnswer::Always,
            ReplyKind::Reject => PermissionAnswer::Reject { message: self.message.clone() },
            ReplyKind::RejectAlways => PermissionAnswer::RejectAlways,
        }
    }
}

/// `POST /question/{requestID}/reply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionReplyBody {
    /// One list of answers per question, in order (chosen option labels or typed text).
    pub answers: Vec<Vec<String>>,
}

/// `POST /session/{id}/elicitation/{eid}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElicitationReplyBody {
    /// `accept` (with `content`), `decline` or `cancel`.
    #[schemars(regex(pattern = "^(accept|decline|cancel)$"))]
    pub action: String,
    /// An accepted form's values: an object of the requested fields.
    #[serde(default)]
    pub content: Option<serde_json::Value>,
}

/// `POST /session/{id}/revert`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevertBody {
    /// The first message to undo: files changed from it on are put back, and it is hidden with everything
    /// after it until the next prompt.
    #[serde(alias = "messageID")]
    pub message_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Aborted {
    /// Whether a run was active (an idle abort is a no-op).
    pub aborted: bool,
}

/// One row of `GET /agent`: an agent a person may pick for a session or a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentEntry {
    pub name: String,
    pub description: String,
    /// Whether this is the agent a session gets when none is named.
    pub default: bool,
}

/// One row of `GET /models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelEntry {
    /// `provider/model`.
    pub id: String,
    pub provider_id: String,
    pub model_id: String,
    pub limit: ModelLimit,
    /// USD per million tokens.
    pub cost: ModelCost,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelLimit {
    pub context: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<u64>,
    pub output: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn model_accepts_text_and_object() {
        let a: ModelSpec = serde_json::from_value(json!("fake/test")).unwrap();
        let b: ModelSpec =
            serde_json::from_value(json!({"provider_id": "fake", "model_id": "test"})).unwrap();
        assert_eq!(a.to_ref().unwrap(), b.to_ref().unwrap());
        assert!(ModelSpec::Text("nope".into()).to_ref().is_err());
    }

    #[test]
    fn empty_prompts_are_refused() {
        let body: PromptBody =
            serde_json::from_value(json!({"parts": [{"type": "text", "text": "  "}]})).unwrap();
        assert!(body.to_input().unwrap_err().contains("empty"));
        let body: PromptBody = serde_json::from_value(json!({"parts": []})).unwrap();
        assert!(body.to_input().is_err());
        let (input, delivery) = PromptBody::text("hi").to_input().unwrap();
        assert_eq!((input, delivery), (PromptInput::text("hi"), Delivery::Steer));
    }

    #[test]
    fn stop_reasons_round_trip() {
        for stop in [
            StopReason::Completed,
            StopReason::Interrupted,
            StopReason::Blocked(Blocked::Rejected { tool: "bash".into() }),
            StopReason::Blocked(Blocked::Unanswerable { message: "no one can answer".into() }),
            StopReason::Blocked(Blocked::DoomLoop { message: "Stopped: doom loop detected".into() }),
            StopReason::Blocked(Blocked::ToolCallDuringSummary { tool: "read".into() }),
            StopReason::StepLimit(3),
            StopReason::Limit(codeloop_types::LimitReached {
                limit: codeloop_types::Limit::RunMaxCostUsd,
                value: 0.5,
                used: 0.75,
            }),
            StopReason::Error(AssistantError::Aborted { message: "x".into() }),
        ] {
            let wire = serde_json::to_value(Stop::from(&stop)).unwrap();
            let back: Stop = serde_json::from_value(wire).unwrap();
            assert_eq!(StopReason::from(back), stop);
        }
    }
}
