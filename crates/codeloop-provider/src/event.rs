//! The normalised stream every adapter produces: one vocabulary for OpenAI Chat, OpenAI Responses,
//! Anthropic Messages and Gemini, consumed by the processor in codeloop-core.

use codeloop_types::{CacheTokens, Finish, Tokens};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The provider accepted the request and the body started.
    Start,
    ReasoningStart {
        id: String,
        metadata: Option<Value>,
    },
    ReasoningDelta {
        id: String,
        text: String,
    },
    /// Closes a reasoning block; `metadata` carries what must be sent back with it (signature,
    /// encrypted content, redacted data), namespaced by wire format.
    ReasoningEnd {
        id: String,
        metadata: Option<Value>,
    },
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        text: String,
    },
    TextEnd {
        id: String,
    },
    /// A tool call began streaming its arguments.
    ToolInputStart {
        call_id: String,
        name: String,
    },
    ToolInputDelta {
        call_id: String,
        delta: String,
    },
    ToolInputEnd {
        call_id: String,
    },
    /// A complete tool call, ready to run.
    ToolCall(ToolCall),
    StartStep,
    FinishStep {
        finish: Finish,
        raw_finish: Option<String>,
        usage: Option<Usage>,
    },
    /// The stream ended normally.
    Finish,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub call_id: String,
    pub name: String,
    /// The parsed arguments (an empty argument string gives `{}`), or why they could not be parsed.
    pub input: Result<Value, InvalidArguments>,
    /// Provider metadata to echo back with the call (e.g. a Responses item id).
    pub metadata: Option<Value>,
}

/// Arguments that are not a JSON object: the model gets a clear tool error and can retry.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidArguments {
    pub raw: String,
    pub error: String,
}

/// Usage of one step, normalised: `input` excludes cached tokens, `output` excludes reasoning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// The provider's own total, when it sent one.
    pub total: Option<u64>,
}

impl Usage {
    pub fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input,
            output: self.output,
            reasoning: self.reasoning,
            cache: CacheTokens { read: self.cache_read, write: self.cache_write },
            total: Some(
                self.total.unwrap_or(
                    self.input + self.output + self.reasoning + self.cache_read + self.cache_write,
                ),
            ),
            estimated: false,
        }
    }
}

/// Parses tool-call argument text the way every adapter must: empty means `{}`, a non-object value is
/// wrapped as `{"value": …}`, and invalid JSON becomes [`InvalidArguments`] rather than an error.
pub fn parse_arguments(raw: &str) -> Result<Value, InvalidArguments> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(Value::Object(map)),
        Ok(other) => {
            let mut map = serde_json::Map::new();
            map.insert("value".into(), other);
            Ok(Value::Object(map))
        }
        Err(e) => Err(InvalidArguments { raw: raw.to_owned(), error: e.to_string() }),
    }
}
