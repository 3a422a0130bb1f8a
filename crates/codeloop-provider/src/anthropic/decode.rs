//! Decoder for Anthropic Messages streams: content blocks (text, thinking with its signature, redacted
//! thinking, tool use), usage split between `message_start` and `message_delta`, `ping` and `error`
//! events. Server-side tools (`server_tool_use`, web search results) are not client tool calls.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::assemble::{PendingCall, Step, map_finish};
use crate::stream::{Decoder, ended_early};
use crate::{ProviderError, StreamEvent, Usage, classify_stream_error, json};

/// Namespace of the reasoning metadata to send back (`signature`, `redacted_data`).
pub(crate) const METADATA_KEY: &str = "anthropic";

#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    step: Step,
    /// Open content blocks by index.
    blocks: Vec<(u64, Block)>,
    usage: AnthropicUsage,
    saw_usage: bool,
    stop_reason: Option<String>,
}

#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        signature: String,
    },
    Redacted {
        data: String,
    },
    ToolUse {
        call: PendingCall,
        initial_input: Option<String>,
    },
    /// Server tools and their results, citations: nothing the client acts on.
    Other,
}

impl AnthropicDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn dispatch(
        &mut self,
        kind: &str,
        event: Event<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError> {
        match kind {
            "message_start" => {
                if let Some(usage) = event.message.and_then(|m| m.usage) {
                    self.merge_usage(usage);
                }
            }
            "content_block_start" => {
                if let Some(block) = event.content_block {
                    self.block_start(event.index.unwrap_or(0), block, out);
                }
            }
            "content_block_delta" => {
                if let Some(delta) = event.delta {
                    self.block_delta(event.index.unwrap_or(0), delta, out);
                }
            }
            "content_block_stop" => self.block_stop(event.index.unwrap_or(0), out),
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(reason.into_owned());
                }
                if let Some(usage) = event.usage {
                    self.merge_usage(usage);
                }
            }
            "message_stop" => self.finish(out),
            "error" => {
                let error =
                    event.error.filter(|e| !e.is_null()).unwrap_or_else(|| json!({ "message": "error" }));
                return Err(match error {
                    Value::String(message) => classify_stream_error(&json!({ "message": message })),
                    other => classify_stream_error(&other),
                });
            }
            // `ping` and anything new.
            _ => {}
        }
        Ok(())
    }

    /// Later usage objects (message_delta) correct earlier ones field by field.
    fn merge_usage(&mut self, usage: AnthropicUsage) {
        self.saw_usage = true;
        let merged = &mut self.usage;
        merged.input_tokens = usage.input_tokens.or(merged.input_tokens);
        merged.output_tokens = usage.output_tokens.or(merged.output_tokens);
        merged.cache_creation_input_tokens =
            usage.cache_creation_input_tokens.or(merged.cache_creation_input_tokens);
        merged.cache_read_input_tokens = usage.cache_read_input_tokens.or(merged.cache_read_input_tokens);
    }

    fn block_start(&mut self, index: u64, block: ContentBlock<'_>, out: &mut Vec<StreamEvent>) {
        let state = match block.kind.as_deref() {
            Some("text") => {
                self.step.open_text("text", out);
                self.step.text_delta(block.text.as_deref().unwrap_or(""), out);
                Block::Text
            }
            Some("thinking") => {
                self.step.open_reasoning(None, out);
                self.step.reasoning_delta(block.thinking.as_deref().unwrap_or(""), out);
                Block::Thinking { signature: block.signature.map(Cow::into_owned).unwrap_or_default() }
            }
            Some("redacted_thinking") => {
                self.step.open_reasoning(None, out);
                Block::Redacted { data: block.data.map(Cow::into_owned).unwrap_or_default() }
            }
            Some("tool_use") => {
                let id = block.id.map(Cow::into_owned).unwrap_or_else(|| format!("toolu_{index}"));
                let mut call = PendingCall::new(id, block.name.map(Cow::into_owned).unwrap_or_default());
                call.start_if_named(&mut self.step, out);
                // Some compatible servers send the whole input here and no deltas.
                let initial_input = block.input.filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                Block::ToolUse { call, initial_input: initial_input.map(|i| i.to_string()) }
            }
            _ => Block::Other,
        };
        self.blocks.retain(|(i, _)| *i != index);
        self.blocks.push((index, state));
    }

    fn block_delta(&mut self, index: u64, delta: Delta<'_>, out: &mut Vec<StreamEvent>) {
        if !self.blocks.iter().any(|(i, _)| *i == index) {
            self.implicit_start(index, delta.kind.as_deref(), out);
        }
        let Some((_, block)) = self.blocks.iter_mut().find(|(i, _)| *i == index) else { return };
        match (block, delta.kind.as_deref()) {
            (Block::Text, Some("text_delta")) => {
                self.step.text_delta(delta.text.as_deref().unwrap_or(""), out)
            }
            (Block::Thinking { .. }, Some("thinking_delta")) => {
                self.step.reasoning_delta(delta.thinking.as_deref().unwrap_or(""), out);
            }
            (Block::Thinking { signature }, Some("signature_delta")) => {
                signature.push_str(delta.signature.as_deref().unwrap_or(""));
            }
            (Block::ToolUse { call, .. }, Some("input_json_delta")) => {
                call.push_arguments(delta.partial_json.as_deref().unwrap_or(""), &mut self.step, out);
            }
            _ => {}
        }
    }

    /// Some compatible servers skip `content_block_start` for text and thinking: the first delta opens
    /// the block.
    fn implicit_start(&mut self, index: u64, delta_kind: Option<&str>, out: &mut Vec<StreamEvent>) {
        let block = match delta_kind {
            Some("text_delta") => {
                self.step.open_text("text", out);
                Block::Text
            }
            Some("thinking_delta" | "signature_delta") => {
                self.step.open_reasoning(None, out);
                Block::Thinking { signature: String::new() }
            }
            _ => return,
        };
        self.blocks.push((index, block));
    }

    fn block_stop(&mut self, index: u64, out: &mut Vec<StreamEvent>) {
        let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) else { return };
        let (_, block) = self.blocks.remove(pos);
        self.close(block, out);
    }

    fn close(&mut self, block: Block, out: &mut Vec<StreamEvent>) {
        match block {
            Block::Text => self.step.close_text(out),
            Block::Thinking { signature } => {
                let metadata =
                    (!signature.is_empty()).then(|| json!({ METADATA_KEY: { "signature": signature } }));
                self.step.close_reasoning(metadata, out);
            }
            Block::Redacted { data } => {
                self.step.close_reasoning(Some(json!({ METADATA_KEY: { "redacted_data": data } })), out);
            }
            Block::ToolUse { mut call, initial_input } => {
                if call.arguments.is_empty()
                    && let Some(input) = initial_input
                {
                    call.push_arguments(&input, &mut self.step, out);
                }
                call.complete(None, &mut self.step, out);
            }
            Block::Other => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        for (_, block) in std::mem::take(&mut self.blocks) {
            self.close(block, out);
        }
        let finish = map_finish(self.stop_reason.as_deref(), self.step.made_tool_calls());
        let usage = self.saw_usage.then(|| self.usage.normalise());
        self.step.finish_step(finish, self.stop_reason.clone(), usage, out);
        self.step.finish(out);
    }
}

impl Decoder for AnthropicDecoder {
    fn event(
        &mut self,
        event_type: &str,
        data: &str,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), ProviderError> {
        if self.step.finished() {
            return Ok(());
        }
        self.step.start(out);
        let event: Event<'_> = serde_json::from_str(data)
            .map_err(|e| ProviderError::Stream { message: format!("malformed Anthropic event: {e}") })?;
        let kind = event.kind.clone();
        let kind = kind.as_deref().unwrap_or(event_type);
        self.dispatch(kind, event, out)
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.step.finished() {
            return Ok(());
        }
        if self.stop_reason.is_none() {
            return Err(ended_early());
        }
        // The stop reason arrived but `message_stop` (or the blank line after it) was cut off.
        self.finish(out);
        Ok(())
    }

    fn finished(&self) -> bool {
        self.step.finished()
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default, borrow)]
    content_block: Option<ContentBlock<'a>>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    usage: Option<AnthropicUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    usage: Option<AnthropicUsage>,
}

#[derive(Deserialize)]
struct ContentBlock<'a> {
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    name: Option<Cow<'a, str>>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    data: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    signature: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    stop_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct AnthropicUsage {
    #[serde(default, deserialize_with = "json::count")]
    input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    output_tokens: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    cache_read_input_tokens: Option<u64>,
}

impl AnthropicUsage {
    /// Anthropic's `input_tokens` already exclude cache reads and writes; thinking is inside output
    /// and not reported apart.
    fn normalise(&self) -> Usage {
        Usage {
            input: self.input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
            reasoning: 0,
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_write: self.cache_creation_input_tokens.unwrap_or(0),
            total: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[(&str, &str)]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = AnthropicDecoder::new();
        let mut out = Vec::new();
        for (kind, data) in events {
            if let Err(e) = decoder.event(kind, data, &mut out) {
                return (out, Err(e));
            }
        }
        let end = decoder.end(&mut out);
        (out, end)
    }

    #[test]
    fn overloaded_error_event_is_retryable() {
        let (_, end) = decode(&[
            ("message_start", r#"{"type":"message_start","message":{"usage":{"input_tokens":5}}}"#),
            ("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
        ]);
        let error = end.unwrap_err();
        assert!(error.retryable(), "{error:?}");
        assert_eq!(error.short_reason(), "provider overloaded");
    }

    #[test]
    fn tool_input_sent_whole_at_block_start_is_used() {
        let (out, end) = decode(&[
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}}"#,
            ),
            ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"}}"#),
            ("message_stop", r#"{"type":"message_stop"}"#),
        ]);
        end.unwrap();
        let input = out.iter().find_map(|e| match e {
            StreamEvent::ToolCall(c) => Some(c.input.clone()),
            _ => None,
        });
        assert_eq!(input, Some(Ok(json!({"a": 1}))));
    }

    #[test]
    fn deltas_without_a_block_start_still_count() {
        let (out, end) = decode(&[
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
            ),
            ("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"}}"#),
        ]);
        end.unwrap();
        assert!(out.iter().any(|e| matches!(e, StreamEvent::TextDelta { text, .. } if text == "Hi")));
        assert!(out.iter().any(|e| matches!(e, StreamEvent::TextEnd { .. })));
    }

    #[test]
    fn stream_cut_before_the_stop_reason_is_an_error() {
        let (_, end) = decode(&[(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        )]);
        assert!(matches!(end, Err(ProviderError::Stream { .. })));
    }
}
