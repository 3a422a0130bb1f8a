use serde::{Deserialize, Serialize};

use crate::{AssistantError, MessageId, Millis, ModelRef, SessionId, Tokens};

/// A message of a session: what the user (or the runtime on their behalf) said, or one assistant answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    User(UserMessage),
    Assistant(AssistantMessage),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    pub id: MessageId,
    pub session_id: SessionId,
    pub time: MessageTime,
    pub agent: String,
    pub model: ModelRef,
    /// Extra system text for this turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<serde_json::Value>,
    /// The command (DESIGN.md §5g) whose expanded template this message's text is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The effort asked for this turn (`run --effort`, a client's picker); else the agent's or model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<crate::Effort>,
    /// The command's `allowed-tools` (Claude's rule syntax), pre-approved for the turns answering this
    /// message, within deny rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    pub id: MessageId,
    pub session_id: SessionId,
    /// The user message this answers.
    pub parent_id: MessageId,
    pub agent: String,
    pub model: ModelRef,
    pub path: MessagePath,
    /// Accumulated across every step of this message, in USD.
    pub cost: f64,
    /// The latest step's usage, i.e. the size of the last request.
    pub tokens: Tokens,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<Finish>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<AssistantError>,
    /// Marks a compaction summary.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub summary: bool,
    pub time: MessageTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageTime {
    pub created: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessagePath {
    pub cwd: String,
    pub root: String,
}

/// Why a provider step ended, normalised across wire formats.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
#[serde(rename_all = "kebab-case")]
pub enum Finish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Error,
    Unknown,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Message {
    pub fn id(&self) -> &MessageId {
        match self {
            Message::User(m) => &m.id,
            Message::Assistant(m) => &m.id,
        }
    }

    pub fn session_id(&self) -> &SessionId {
        match self {
            Message::User(m) => &m.session_id,
            Message::Assistant(m) => &m.session_id,
        }
    }

    pub fn created(&self) -> Millis {
        match self {
            Message::User(m) => m.time.created,
            Message::Assistant(m) => m.time.created,
        }
    }

    pub fn as_user(&self) -> Option<&UserMessage> {
        match self {
            Message::User(m) => Some(m),
            Message::Assistant(_) => None,
        }
    }

    pub fn as_assistant(&self) -> Option<&AssistantMessage> {
        match self {
            Message::User(_) => None,
            Message::Assistant(m) => Some(m),
        }
    }
}

impl AssistantMessage {
    /// A fresh, empty answer to `parent`.
    pub fn new(
        session_id: SessionId,
        parent_id: MessageId,
        agent: impl Into<String>,
        model: ModelRef,
        path: MessagePath,
    ) -> Self {
        Self {
            id: MessageId::new(),
            session_id,
            parent_id,
            agent: agent.into(),
            model,
            path,
            cost: 0.0,
            tokens: Tokens::default(),
            finish: None,
            error: None,
            summary: false,
            time: MessageTime { created: crate::now_ms(), completed: None },
        }
    }
}

#[cfg(test)]
mod finish_text {
    use super::Finish;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in Finish::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
