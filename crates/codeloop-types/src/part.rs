use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{AssistantError, Finish, MessageId, Millis, ModelRef, PartId, SessionId, Tokens, ToolState};

/// One durable piece of a message. Parts are updated in place by id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Part {
    pub id: PartId,
    pub session_id: SessionId,
    pub message_id: MessageId,
    #[serde(flatten)]
    pub kind: PartKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PartKind {
    Text(TextPart),
    Reasoning(ReasoningPart),
    File(FilePart),
    Tool(ToolPart),
    StepStart(StepStartPart),
    StepFinish(StepFinishPart),
    Patch(PatchPart),
    Compaction(CompactionPart),
    Subtask(SubtaskPart),
    Agent(AgentPart),
    Retry(RetryPart),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PartTime {
    pub start: Millis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<Millis>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TextPart {
    pub text: String,
    /// Written by the runtime rather than typed by a person; still sent to the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub synthetic: bool,
    /// Kept for the record but never sent to the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    #[serde(default)]
    pub time: PartTime,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl TextPart {
    /// What a compaction carried after its summary, in one line for people (`None` for other text): the
    /// part's metadata says `carried` is `user_words` (with `count`) or `files` (with `shown` and
    /// `left_out`).
    pub fn carried_label(&self) -> Option<String> {
        let meta = self.metadata.as_ref()?;
        let names = |key: &str| -> Vec<&str> {
            meta.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default()
        };
        match meta.get("carried")?.as_str()? {
            "user_words" => {
                let count = meta.get("count").and_then(Value::as_u64).unwrap_or(0);
                let plural = if count == 1 { "" } else { "s" };
                Some(format!("carried {count} earlier user message{plural} verbatim"))
            }
            "files" => {
                let (shown, left_out) = (names("shown"), names("left_out"));
                let mut label =
                    format!("restored {} file{}", shown.len(), if shown.len() == 1 { "" } else { "s" });
                if !shown.is_empty() {
                    label.push_str(&format!(": {}", shown.join(", ")));
                }
                if !left_out.is_empty() {
                    label.push_str(&format!("; named, not shown: {}", left_out.join("; ")));
                }
                Some(label)
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReasoningPart {
    pub text: String,
    /// Left by a failed attempt: kept for the record, never sent to the model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// Provider metadata needed to send the reasoning back (signatures, encrypted content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub time: PartTime,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilePart {
    pub mime: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// A `data:` or `file:` URL.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolPart {
    pub call_id: String,
    pub tool: String,
    pub state: ToolState,
    /// Provider metadata of the call (e.g. `provider_executed`, Responses item ids).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// A call cut short with its failed attempt: kept for the record, never sent to the model (the retried
    /// attempt makes its own calls).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StepStartPart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFinishPart {
    pub reason: Finish,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    pub tokens: Tokens,
    pub cost: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchPart {
    pub hash: String,
    pub files: Vec<String>,
}

/// Marks a compaction request on a synthetic user message.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CompactionPart {
    pub auto: bool,
    #[serde(default)]
    pub overflow: bool,
    /// First message of the verbatim tail kept after the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_start_id: Option<MessageId>,
    /// Every message of the tail, by id: the projection never re-attaches messages by position.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tail: Vec<MessageId>,
    /// What the person asked the summary to keep in view (`/compact FOCUS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubtaskPart {
    pub prompt: String,
    pub description: String,
    pub agent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPart {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryPart {
    pub attempt: u32,
    pub error: AssistantError,
    pub time: RetryTime,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryTime {
    pub created: Millis,
}

impl Part {
    pub fn new(session_id: SessionId, message_id: MessageId, kind: PartKind) -> Self {
        Self { id: PartId::new(), session_id, message_id, kind }
    }

    /// A text part typed by the user.
    pub fn user_text(session_id: SessionId, message_id: MessageId, text: impl Into<String>) -> Self {
        let now = crate::now_ms();
        Self::new(
            session_id,
            message_id,
            PartKind::Text(TextPart {
                text: text.into(),
                time: PartTime { start: now, end: Some(now) },
                ..Default::default()
            }),
        )
    }

    /// A text part written by the runtime.
    pub fn synthetic_text(session_id: SessionId, message_id: MessageId, text: impl Into<String>) -> Self {
        let mut part = Self::user_text(session_id, message_id, text);
        if let PartKind::Text(t) = &mut part.kind {
            t.synthetic = true;
        }
        part
    }

    pub fn as_tool(&self) -> Option<&ToolPart> {
        match &self.kind {
            PartKind::Tool(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_tool_mut(&mut self) -> Option<&mut ToolPart> {
        match &mut self.kind {
            PartKind::Tool(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_text(&self) -> Option<&TextPart> {
        match &self.kind {
            PartKind::Text(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_compaction(&self) -> Option<&CompactionPart> {
        match &self.kind {
            PartKind::Compaction(c) => Some(c),
            _ => None,
        }
    }

    /// The `type` tag of this part as it appears in JSON.
    pub fn kind_name(&self) -> &'static str {
        match &self.kind {
            PartKind::Text(_) => "text",
            PartKind::Reasoning(_) => "reasoning",
            PartKind::File(_) => "file",
            PartKind::Tool(_) => "tool",
            PartKind::StepStart(_) => "step-start",
            PartKind::StepFinish(_) => "step-finish",
            PartKind::Patch(_) => "patch",
            PartKind::Compaction(_) => "compaction",
            PartKind::Subtask(_) => "subtask",
            PartKind::Agent(_) => "agent",
            PartKind::Retry(_) => "retry",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn part_json_is_flat_with_type_tag() {
        let part = Part {
            id: "prt_1".into(),
            session_id: "ses_1".into(),
            message_id: "msg_1".into(),
            kind: PartKind::Tool(ToolPart {
                call_id: "call_1".into(),
                tool: "bash".into(),
                state: ToolState::default(),
                metadata: None,
                ignored: false,
            }),
        };
        let v = serde_json::to_value(&part).unwrap();
        assert_eq!(
            v,
            json!({
                "id": "prt_1", "session_id": "ses_1", "message_id": "msg_1", "type": "tool",
                "call_id": "call_1", "tool": "bash", "state": {"status": "pending", "input": {}, "raw": ""}
            })
        );
        assert_eq!(serde_json::from_value::<Part>(v).unwrap(), part);
    }

    #[test]
    fn step_parts_use_kebab_case_tags() {
        let kind = PartKind::StepFinish(StepFinishPart {
            reason: Finish::ToolCalls,
            snapshot: None,
            tokens: Tokens::default(),
            cost: 0.5,
        });
        let v = serde_json::to_value(&kind).unwrap();
        assert_eq!(v["type"], "step-finish");
        assert_eq!(v["reason"], "tool-calls");
    }
}
