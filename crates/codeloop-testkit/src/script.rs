//! The script: what the fake provider answers, turn by turn. Pure data (serde, JSON files for the binary)
//! plus builders that make tests read well. It knows nothing about wire formats or HTTP.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An ordered list of turns; each provider request consumes the next turn, whatever its path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Script {
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// Start again from the first turn when the script is exhausted (benchmarks, the demo).
    /// Off by default: an exhausted script answers HTTP 400 so a test that calls too often fails clearly.
    #[serde(default)]
    pub repeat: bool,
}

/// One provider call's answer. JSON: `{"reply": {...}}` or `{"fault": {"kind": "...", ...}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Turn {
    Reply(Reply),
    Fault(Fault),
}

/// A well-formed streamed answer. Every field is optional in JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Reply {
    /// Reasoning / thinking text, streamed before the text.
    pub reasoning: Option<String>,
    /// How many deltas the reasoning is split into; 0 = about 8 characters per delta.
    pub reasoning_chunks: usize,
    pub text: Option<String>,
    /// How many deltas the text is split into; 0 = about 8 characters per delta.
    pub text_chunks: usize,
    /// Tool calls, streamed after the text, in order.
    pub tool_calls: Vec<ScriptToolCall>,
    /// Token usage; `None` estimates it (input: request bytes / 4, output: streamed characters / 4).
    pub usage: Option<ScriptUsage>,
    /// Finish-reason override. Canonical names are translated per format
    /// (`stop`/`end_turn`, `tool_calls`/`tool_use`, `length`/`max_tokens`, `content_filter`/`refusal`);
    /// anything else is sent verbatim. Default: `tool_calls` when there are tool calls, else `stop`.
    pub finish: Option<String>,
    /// Delay before every chunk after the first, in milliseconds (a slow model).
    pub chunk_delay_ms: u64,
}

/// One tool call of a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScriptToolCall {
    /// Call id; generated (`call_<turn>_<i>`, Anthropic `toolu_<turn>_<i>`) when absent.
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub arguments: Arguments,
    /// How many fragments the argument text is split into; 0 = about 8 characters per fragment.
    #[serde(default)]
    pub fragments: usize,
}

/// Tool-call arguments: a JSON value (sent compact) or a raw string sent verbatim (to test invalid JSON).
/// In JSON scripts a string is raw, anything else is a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arguments {
    Raw(String),
    Json(Value),
}

/// Token usage in OpenAI terms: `input` includes `cached` and `cache_write`, `output` includes `reasoning`.
/// Anthropic's `input_tokens` is sent as `input - cached - cache_write`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScriptUsage {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cached: u64,
    pub cache_write: u64,
}

/// A failure, observed by the client the way real providers fail.
/// JSON: `{"kind": "status", "status": 429, "headers": {"retry-after": "1"}, "body": ""}`,
/// `{"kind": "reset", "reply": {...}, "after_chunks": 3}` (same shape for truncated, malformed, stall),
/// `{"kind": "error_event", "reply": {...}, "after_chunks": 3, "error": {...}}`.
/// A "chunk" is one SSE event as sent (`data:` record, or `event:` + `data:` pair).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// A plain HTTP error. An empty body is replaced by an error body in the request's format.
    Status {
        status: u16,
        /// `[["name", "value"], ...]`, or `{"name": "value"}` in JSON.
        #[serde(default, deserialize_with = "header_pairs")]
        headers: Vec<(String, String)>,
        #[serde(default)]
        body: String,
    },
    /// Send `after_chunks` chunks, then drop the connection (no chunked terminator).
    Reset {
        #[serde(default)]
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Send `after_chunks` chunks, then end the body cleanly (no finish, no `[DONE]`/`message_stop`).
    Truncated {
        #[serde(default)]
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Insert a chunk whose data is not JSON after `after_chunks` chunks; the rest follows.
    Malformed {
        #[serde(default)]
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Send `after_chunks` chunks, then go silent until the client disconnects (or the server stops).
    Stall {
        #[serde(default)]
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
    },
    /// Send `after_chunks` chunks, then the format's own in-stream error, then end.
    /// `error` is the inner error object, e.g. `{"type": "overloaded_error", "message": "Overloaded"}`.
    ErrorEvent {
        #[serde(default)]
        reply: Reply,
        #[serde(default)]
        after_chunks: usize,
        #[serde(default = "default_stream_error")]
        error: Value,
    },
}

/// Headers as `[name, value]` pairs (repeatable, ordered) or as an object.
fn header_pairs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Headers {
        Pairs(Vec<(String, String)>),
        Map(std::collections::BTreeMap<String, String>),
    }
    Ok(match Headers::deserialize(d)? {
        Headers::Pairs(pairs) => pairs,
        Headers::Map(map) => map.into_iter().collect(),
    })
}

fn default_stream_error() -> Value {
    serde_json::json!({"type": "overloaded_error", "message": "Overloaded"})
}

/// A script file that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("invalid script{}: {source}", path.as_deref().map(|p| format!(" {p}")).unwrap_or_default())]
    Parse { path: Option<String>, source: serde_json::Error },
}

impl Script {
    pub fn new<T: Into<Turn>>(turns: impl IntoIterator<Item = T>) -> Self {
        Script { turns: turns.into_iter().map(Into::into).collect(), repeat: false }
    }

    /// Restart from the first turn when exhausted.
    pub fn repeating(mut self) -> Self {
        self.repeat = true;
        self
    }

    /// Parses `{"turns": [...], "repeat": false}` or a bare `[...]` array of turns.
    pub fn from_json(json: &str) -> Result<Self, ScriptError> {
        let parse_error = |source| ScriptError::Parse { path: None, source };
        if json.trim_start().starts_with('[') {
            let turns: Vec<Turn> = serde_json::from_str(json).map_err(parse_error)?;
            return Ok(Script::new(turns));
        }
        serde_json::from_str(json).map_err(parse_error)
    }

    /// Reads and parses a script file (see [`Script::from_json`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScriptError::Read { path: path.display().to_string(), source })?;
        Script::from_json(&text).map_err(|err| match err {
            ScriptError::Parse { source, .. } => {
                ScriptError::Parse { path: Some(path.display().to_string()), source }
            }
            other => other,
        })
    }
}

impl<T: Into<Turn>> FromIterator<T> for Script {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Script::new(iter)
    }
}

impl Turn {
    pub fn reply(reply: Reply) -> Self {
        Turn::Reply(reply)
    }

    pub fn fault(fault: Fault) -> Self {
        Turn::Fault(fault)
    }
}

impl From<Reply> for Turn {
    fn from(reply: Reply) -> Self {
        Turn::Reply(reply)
    }
}

impl From<Fault> for Turn {
    fn from(fault: Fault) -> Self {
        Turn::Fault(fault)
    }
}

impl Reply {
    /// A text-only answer.
    pub fn text(text: impl Into<String>) -> Self {
        Reply { text: Some(text.into()), ..Reply::default() }
    }

    /// An answer made of one tool call.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<Arguments>) -> Self {
        Reply::default().with_tool_call(name, arguments)
    }

    pub fn with_text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    pub fn with_text_chunks(mut self, chunks: usize) -> Self {
        self.text_chunks = chunks;
        self
    }

    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning = Some(reasoning.into());
        self
    }

    pub fn with_reasoning_chunks(mut self, chunks: usize) -> Self {
        self.reasoning_chunks = chunks;
        self
    }

    /// Adds a tool call with a generated id and default fragmentation.
    pub fn with_tool_call(self, name: impl Into<String>, arguments: impl Into<Arguments>) -> Self {
        self.with_call(ScriptToolCall::new(name, arguments))
    }

    /// Adds a fully specified tool call.
    pub fn with_call(mut self, call: ScriptToolCall) -> Self {
        self.tool_calls.push(call);
        self
    }

    pub fn with_usage(mut self, usage: ScriptUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    pub fn with_finish(mut self, finish: impl Into<String>) -> Self {
        self.finish = Some(finish.into());
        self
    }

    pub fn with_chunk_delay_ms(mut self, delay_ms: u64) -> Self {
        self.chunk_delay_ms = delay_ms;
        self
    }
}

impl ScriptToolCall {
    pub fn new(name: impl Into<String>, arguments: impl Into<Arguments>) -> Self {
        ScriptToolCall { id: None, name: name.into(), arguments: arguments.into(), fragments: 0 }
    }

    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn with_fragments(mut self, fragments: usize) -> Self {
        self.fragments = fragments;
        self
    }
}

impl Arguments {
    /// Arguments sent verbatim, e.g. `Arguments::raw("{\"path\": ")` for invalid JSON.
    pub fn raw(text: impl Into<String>) -> Self {
        Arguments::Raw(text.into())
    }

    /// The argument text as it goes on the wire.
    pub fn to_wire(&self) -> String {
        match self {
            Arguments::Raw(text) => text.clone(),
            Arguments::Json(value) => value.to_string(),
        }
    }
}

impl Default for Arguments {
    fn default() -> Self {
        Arguments::Json(Value::Object(serde_json::Map::new()))
    }
}

impl From<Value> for Arguments {
    fn from(value: Value) -> Self {
        Arguments::Json(value)
    }
}

impl ScriptUsage {
    pub fn new(input: u64, output: u64) -> Self {
        ScriptUsage { input, output, ..ScriptUsage::default() }
    }

    pub fn with_reasoning(mut self, reasoning: u64) -> Self {
        self.reasoning = reasoning;
        self
    }

    pub fn with_cached(mut self, cached: u64) -> Self {
        self.cached = cached;
        self
    }

    pub fn with_cache_write(mut self, cache_write: u64) -> Self {
        self.cache_write = cache_write;
        self
    }
}

impl Fault {
    /// An HTTP error with a default body in the request's format; add headers with [`Fault::header`].
    pub fn status(status: u16) -> Self {
        Fault::Status { status, headers: Vec::new(), body: String::new() }
    }

    /// 429 with `retry-after: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Fault::status(429).header("retry-after", retry_after_secs.to_string())
    }

    /// Anthropic's 529 overloaded.
    pub fn overloaded() -> Self {
        Fault::status(529)
    }

    /// 401 invalid API key.
    pub fn unauthorized() -> Self {
        Fault::status(401)
    }

    /// 400 `context_length_exceeded` (OpenAI's shape; the message also says "prompt is too long").
    pub fn context_overflow() -> Self {
        Fault::status(400).body(
            serde_json::json!({"error": {
                "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 200000 tokens (prompt is too long). Please reduce the length of the messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }})
            .to_string(),
        )
    }

    /// Adds a response header. Only [`Fault::Status`] has headers; other faults are returned unchanged.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Fault::Status { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sets the response body. Only [`Fault::Status`] has a body; other faults are returned unchanged.
    pub fn body(mut self, text: impl Into<String>) -> Self {
        if let Fault::Status { body, .. } = &mut self {
            *body = text.into();
        }
        self
    }

    pub fn reset(reply: Reply, after_chunks: usize) -> Self {
        Fault::Reset { reply, after_chunks }
    }

    pub fn truncated(reply: Reply, after_chunks: usize) -> Self {
        Fault::Truncated { reply, after_chunks }
    }

    pub fn malformed(reply: Reply, after_chunks: usize) -> Self {
        Fault::Malformed { reply, after_chunks }
    }

    pub fn stall(reply: Reply, after_chunks: usize) -> Self {
        Fault::Stall { reply, after_chunks }
    }

    pub fn error_event(reply: Reply, after_chunks: usize, error: Value) -> Self {
        Fault::ErrorEvent { reply, after_chunks, error }
    }
}
