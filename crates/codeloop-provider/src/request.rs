//! Provider-neutral request: what the projection in codeloop-core produces and every adapter turns into
//! its wire format.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderRequest {
    /// The model id as the provider's API knows it (`gpt-4.1`, `claude-sonnet-4-5`).
    pub model: String,
    /// System prompt blocks, stable header first (prompt-cache friendly).
    pub system: Vec<String>,
    pub messages: Vec<ChatMessage>,
    /// Sorted by name, schemas generated once.
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f32>,
    /// Nucleus sampling (`top_p`, Gemini's `topP`), for the families that need it.
    pub top_p: Option<f32>,
    /// What the adapter does with an answer that is a tool call written as text.
    pub tool_call_text: crate::ToolCallText,
    /// Used for session-affinity headers and prompt-cache keys.
    pub session_id: Option<String>,
    /// Thinking asked for (DESIGN.md §5l); `None` sends nothing, leaving the provider's default.
    pub reasoning: Option<Reasoning>,
    /// The run's memo of encoded messages, so a step encodes only what changed since the last one
    /// (not part of what the request says: equal requests with and without it send the same body).
    pub cache: Option<crate::EncodeCache>,
}

/// A thinking request in the model's own terms (from [`ModelInfo::reasoning_for`](crate::catalogue::ModelInfo::reasoning_for)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reasoning {
    /// A level as the API names it: Anthropic adaptive thinking's `output_config.effort`, OpenAI's
    /// `reasoning_effort`, Gemini's `thinkingLevel`.
    Effort(String),
    /// A token budget: Anthropic `thinking.budget_tokens`, Gemini `thinkingBudget` (0 = off).
    Budget(u64),
}

impl Reasoning {
    /// True when the model is asked to think at all.
    pub fn thinks(&self) -> bool {
        !matches!(self, Reasoning::Budget(0)) && !matches!(self, Reasoning::Effort(level) if level == "none")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolChoice {
    #[default]
    Auto,
    /// Tools are listed (so history stays valid) but the model must answer in text.
    None,
    Required,
}

pub use codeloop_types::ToolSpec;

#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    User(Vec<UserContent>),
    Assistant(Vec<AssistantContent>),
    /// The result of one tool call. Adapters whose API puts results in a user message group consecutive
    /// results into one.
    Tool(ToolResult),
}

#[derive(Debug, Clone, PartialEq)]
pub enum UserContent {
    Text(String),
    File(FileContent),
}

#[derive(Debug, Clone, PartialEq)]
pub struct FileContent {
    pub mime: String,
    /// A `data:` URL (base64) or an `http(s):` URL.
    pub url: String,
    pub filename: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum AssistantContent {
    Text {
        text: String,
        metadata: Option<Value>,
    },
    /// Reasoning from the same model, with the metadata it needs to be sent back (signatures, encrypted
    /// content). Reasoning from another model arrives as plain `Text` instead.
    Reasoning {
        text: String,
        metadata: Option<Value>,
    },
    ToolCall {
        call_id: String,
        name: String,
        input: Value,
        metadata: Option<Value>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub output: String,
    pub is_error: bool,
    /// Media produced by the tool (e.g. an image read from disk).
    pub attachments: Vec<FileContent>,
}

/// A sampling value as JSON, written as its shortest decimal: `0.55_f32` goes out as `0.55`, not as the
/// `0.550000011920929` its widening to `f64` would print.
pub(crate) fn sampling(value: f32) -> Value {
    match value.to_string().parse::<f64>() {
        Ok(decimal) => serde_json::json!(decimal),
        Err(_) => serde_json::json!(value),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sampling_values_go_out_as_written() {
        assert_eq!(super::sampling(0.55).to_string(), "0.55");
        assert_eq!(super::sampling(1.0).to_string(), "1.0");
        assert_eq!(super::sampling(0.95).to_string(), "0.95");
    }
}
