//! Decoder for OpenAI Chat Completions streams (`chat.completion.chunk`), tolerant of the compatible
//! servers' quirks: calls that repeat their id and name in every chunk, a first index of 1, calls
//! without an index, reasoning in `reasoning_content` or `reasoning`, usage sent twice or on its own
//! `choices: []` chunk, error chunks on an HTTP 200, and streams that end without `[DONE]`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::assemble::{PendingCall, Step, map_finish};
use crate::stream::{Decoder, ended_early};
use crate::{ProviderError, StreamEvent, Usage, classify_stream_error, json};

/// Metadata on reasoning from `reasoning_content`: servers that emit that field (DeepSeek, vLLM,
/// llama.cpp) read it back on the assistant message.
pub(crate) const REASONING_CONTENT_KEY: &str = "openai_chat";

#[derive(Debug, Default)]
pub struct ChatDecoder {
    step: Step,
    calls: Vec<ChatCall>,
    /// The last non-null `finish_reason` of choice 0.
    finish_reason: Option<String>,
    /// The last usage object seen (some servers send the same one twice).
    usage: Option<Usage>,
    /// Which field the reasoning came from, to echo it back the same way.
    reasoning_field: Option<&'static str>,
}

#[derive(Debug)]
struct ChatCall {
    index: Option<u64>,
    /// The id came from the provider (not generated here).
    provider_id: bool,
    call: PendingCall,
}

impl ChatDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn chunk(&mut self, chunk: Chunk<'_>, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.normalise());
        }
        for choice in chunk.choices.into_iter().flatten() {
            // With n > 1 only the first choice is the answer.
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason.into_owned());
                self.complete_calls(out);
            }
        }
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(self.fail(&error, out));
        }
        Ok(())
    }

    fn delta(&mut self, delta: Delta<'_>, out: &mut Vec<StreamEvent>) {
        let (reasoning, field) = match (delta.reasoning_content, delta.reasoning) {
            (Some(text), _) if !text.is_empty() => (Some(text), "reasoning_content"),
            (_, Some(text)) => (Some(text), "reasoning"),
            _ => (None, ""),
        };
        if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
            self.reasoning_field.get_or_insert(field);
            self.step.reasoning_delta(&text, out);
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.end_reasoning(out);
            if self.step.in_text("refusal") {
                self.step.close_text(out);
            }
            self.step.text_delta(&text, out);
        }
        if let Some(text) = delta.refusal.filter(|t| !t.is_empty()) {
            // A refusal is shown to the user like text, in a block of its own.
            self.end_reasoning(out);
            if !self.step.in_text("refusal") {
                self.step.open_text("refusal", out);
            }
            self.step.text_delta(&text, out);
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.end_reasoning(out);
            self.call_delta(call, out);
        }
    }

    fn end_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        if self.step.in_reasoning() {
            let metadata = match self.reasoning_field {
                Some("reasoning_content") => {
                    Some(json!({ REASONING_CONTENT_KEY: { "field": "reasoning_content" } }))
                }
                _ => None,
            };
            self.step.close_reasoning(metadata, out);
        }
    }

    fn call_delta(&mut self, delta: CallDelta<'_>, out: &mut Vec<StreamEvent>) {
        let id = delta.id.filter(|id| !id.is_empty());
        let (name, arguments) = match delta.function {
            Some(f) => (f.name.filter(|n| !n.is_empty()), f.arguments),
            None => (None, None),
        };
        let known = self.calls.len();
        let slot = self.slot(delta.index, id.as_deref());
        if slot >= known {
            self.complete_finished_calls(slot, out);
        }
        let entry = &mut self.calls[slot];
        let call = &mut entry.call;
        if call.done {
            return;
        }
        if call.name.is_empty()
            && let Some(name) = name
        {
            call.name = name.into_owned();
        }
        if !entry.provider_id
            && !call.started
            && let Some(id) = id
        {
            call.call_id = id.into_owned();
            entry.provider_id = true;
        }
        if let Some(arguments) = arguments {
            call.push_arguments(&arguments, &mut self.step, out);
        }
        call.start_if_named(&mut self.step, out);
    }

    /// Finds the call a fragment belongs to: by index, else by id, else the latest call; a new index
    /// or id starts a new call. Some servers give every parallel call index 0: a different id under a
    /// known index starts a new call once the earlier one's arguments are complete JSON (a complete
    /// object can take no more fragments; an id that merely changes mid-call does not split it).
    fn slot(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        let found = match (index, id) {
            (Some(index), _) => self.calls.iter().rposition(|c| {
                let other_call = c.provider_id
                    && id.is_some_and(|id| id != c.call.call_id)
                    && serde_json::from_str::<serde::de::IgnoredAny>(&c.call.arguments).is_ok();
                c.index == Some(index) && !other_call
            }),
            (None, Some(id)) => self.calls.iter().rposition(|c| c.provider_id && c.call.call_id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        if let Some(slot) = found {
            return slot;
        }
        let call_id = match id {
            Some(id) => id.to_owned(),
            None => format!("call_{}", self.calls.len()),
        };
        self.calls.push(ChatCall {
            index,
            provider_id: id.is_some(),
            call: PendingCall::new(call_id, String::new()),
        });
        self.calls.len() - 1
    }

    /// A new call began: earlier calls whose arguments are complete JSON can take no more fragments,
    /// so they are emitted now and their tools start while the stream goes on (DESIGN.md §4).
    /// Calls with incomplete arguments (servers that interleave parallel calls) wait for the finish.
    fn complete_finished_calls(&mut self, before: usize, out: &mut Vec<StreamEvent>) {
        for entry in &mut self.calls[..before] {
            let complete = !entry.call.done
                && !entry.call.name.is_empty()
                && serde_json::from_str::<serde::de::IgnoredAny>(&entry.call.arguments).is_ok();
            if complete {
                entry.call.complete(None, &mut self.step, out);
            }
        }
    }

    fn complete_calls(&mut self, out: &mut Vec<StreamEvent>) {
        self.end_reasoning(out);
        for entry in &mut self.calls {
            entry.call.complete(None, &mut self.step, out);
        }
    }

    fn finish_step(&mut self, out: &mut Vec<StreamEvent>) {
        self.complete_calls(out);
        let finish = map_finish(self.finish_reason.as_deref(), self.step.made_tool_calls());
        self.step.finish_step(finish, self.finish_reason.clone(), self.usage, out);
    }

    fn finish(&mut self, out: &mut Vec<StreamEvent>) {
        self.finish_step(out);
        self.step.finish(out);
    }

    /// An error inside the stream. If the provider had already finished (an error chunk after the
    /// finish reason), the step is closed first so its usage is not lost.
    fn fail(&mut self, error: &Value, out: &mut Vec<StreamEvent>) -> ProviderError {
        if self.finish_reason.is_some() {
            self.finish_step(out);
        }
        let inner = error.get("error").filter(|e| !e.is_null()).unwrap_or(error);
        match inner {
            Value::String(message) => classify_stream_error(&json!({ "message": message })),
            other => classify_stream_error(other),
        }
    }
}

impl Decoder for ChatDecoder {
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
        let data = data.trim();
        if data == "[DONE]" {
            self.finish(out);
            return Ok(());
        }
        if event_type == "error" {
            let error = serde_json::from_str::<Value>(data).unwrap_or_else(|_| json!({ "message": data }));
            return Err(self.fail(&error, out));
        }
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| ProviderError::Stream {
            message: format!("malformed chat completion chunk: {e}"),
        })?;
        self.chunk(chunk, out)
    }

    fn end(&mut self, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.step.finished() {
            return Ok(());
        }
        if self.finish_reason.is_none() {
            return Err(ended_early());
        }
        // Finished but the `[DONE]` (or the blank line after it) was cut off.
        self.finish(out);
        Ok(())
    }

    fn finished(&self) -> bool {
        self.step.finished()
    }
}

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow, deserialize_with = "json::content")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::arguments")]
    arguments: Option<Cow<'a, str>>,
}

/// A Chat Completions usage object, as the various servers send it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ChatUsage {
    #[serde(default, deserialize_with = "json::count")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    /// DeepSeek.
    #[serde(default, deserialize_with = "json::count")]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    #[serde(default, deserialize_with = "json::count")]
    cached_tokens: Option<u64>,
    /// OpenRouter.
    #[serde(default, deserialize_with = "json::count")]
    cache_write_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct CompletionDetails {
    #[serde(default, deserialize_with = "json::count")]
    reasoning_tokens: Option<u64>,
}

impl ChatUsage {
    /// `prompt_tokens` include cached tokens; `completion_tokens` include reasoning, except on servers
    /// (xAI) whose total shows reasoning counted outside: `prompt + completion + reasoning == total`.
    pub(crate) fn normalise(&self) -> Usage {
        let prompt = self.prompt_tokens.unwrap_or(0);
        let completion = self.completion_tokens.unwrap_or(0);
        let details = self.prompt_tokens_details.as_ref();
        let cache_read =
            details.and_then(|d| d.cached_tokens).unwrap_or(0).max(self.prompt_cache_hit_tokens.unwrap_or(0));
        let cache_write = details.and_then(|d| d.cache_write_tokens).unwrap_or(0);
        let reasoning = self.completion_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        let reasoning_outside = reasoning > 0 && self.total_tokens == Some(prompt + completion + reasoning);
        let output = if reasoning_outside { completion } else { completion.saturating_sub(reasoning) };
        Usage {
            input: prompt.saturating_sub(cache_read + cache_write),
            output,
            reasoning,
            cache_read,
            cache_write,
            total: self.total_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(json: &str) -> Usage {
        serde_json::from_str::<ChatUsage>(json).unwrap().normalise()
    }

    #[test]
    fn openai_usage_subtracts_cached_and_reasoning() {
        let u = usage(
            r#"{"prompt_tokens":145,"completion_tokens":89,"total_tokens":234,
                "prompt_tokens_details":{"cached_tokens":45},"completion_tokens_details":{"reasoning_tokens":64}}"#,
        );
        assert_eq!(
            u,
            Usage { input: 100, output: 25, reasoning: 64, cache_read: 45, cache_write: 0, total: Some(234) }
        );
    }

    #[test]
    fn xai_usage_keeps_completion_when_reasoning_is_outside() {
        let u = usage(
            r#"{"prompt_tokens":466,"completion_tokens":68,"total_tokens":800,
                "prompt_tokens_details":{"cached_tokens":192},"completion_tokens_details":{"reasoning_tokens":266}}"#,
        );
        assert_eq!(
            u,
            Usage {
                input: 274,
                output: 68,
                reasoning: 266,
                cache_read: 192,
                cache_write: 0,
                total: Some(800)
            }
        );
    }

    #[test]
    fn deepseek_cache_hits_count_as_cached() {
        let u = usage(
            r#"{"prompt_tokens":339,"completion_tokens":83,"total_tokens":422,"prompt_cache_hit_tokens":320}"#,
        );
        assert_eq!((u.input, u.cache_read), (19, 320));
    }

    #[test]
    fn reasoning_larger_than_completion_does_not_underflow() {
        let u = usage(
            r#"{"prompt_tokens":43,"completion_tokens":10,"total_tokens":53,"completion_tokens_details":{"reasoning_tokens":11}}"#,
        );
        assert_eq!((u.output, u.reasoning), (0, 11));
    }

    fn decode(events: &[(&str, &str)]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = ChatDecoder::new();
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
    fn calls_without_index_are_matched_by_id() {
        let (out, end) = decode(&[
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"x","arguments":"{\"q\":"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"y","arguments":"{}"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"arguments":"1}"}}]}}]}"#,
            ),
            ("message", r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
            ("message", "[DONE]"),
        ]);
        end.unwrap();
        let calls: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall(c) => Some((c.call_id.clone(), c.input.clone().unwrap())),
                _ => None,
            })
            .collect();
        assert_eq!(calls, vec![("a".into(), json!({"q": 1})), ("b".into(), json!({}))]);
    }

    #[test]
    fn a_call_is_emitted_as_soon_as_the_next_one_starts() {
        let (out, end) = decode(&[
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{\"q\":1}"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"y","arguments":"{"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"}"}}]}}]}"#,
            ),
            ("message", r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
        ]);
        end.unwrap();
        let first_call = out.iter().position(|e| matches!(e, StreamEvent::ToolCall(c) if c.call_id == "a"));
        let second_start = out
            .iter()
            .position(|e| matches!(e, StreamEvent::ToolInputStart { call_id, .. } if call_id == "b"));
        assert!(first_call < second_start, "call a runs while b streams: {out:?}");
        assert_eq!(calls(&out), vec![("a".into(), json!({"q": 1})), ("b".into(), json!({}))]);
    }

    fn calls(out: &[StreamEvent]) -> Vec<(String, Value)> {
        out.iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall(c) => Some((c.call_id.clone(), c.input.clone().unwrap())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn parallel_calls_all_at_index_zero_are_told_apart_by_id() {
        let (out, end) = decode(&[
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{\"q\":"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"arguments":"1}"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"y","arguments":"{}"}}]}}]}"#,
            ),
            ("message", r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
            ("message", "[DONE]"),
        ]);
        end.unwrap();
        assert_eq!(calls(&out), vec![("a".into(), json!({"q": 1})), ("b".into(), json!({}))]);
    }

    #[test]
    fn an_id_changing_mid_call_does_not_split_it() {
        let (out, end) = decode(&[
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{\"q\":"}}]}}]}"#,
            ),
            (
                "message",
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a2","function":{"arguments":"1}"}}]}}]}"#,
            ),
            ("message", r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
        ]);
        end.unwrap();
        assert_eq!(calls(&out), vec![("a".into(), json!({"q": 1}))]);
    }

    #[test]
    fn stream_without_finish_or_done_is_an_error() {
        let (_, end) = decode(&[("message", r#"{"choices":[{"delta":{"content":"hi"}}]}"#)]);
        assert!(matches!(end, Err(ProviderError::Stream { .. })));
    }

    #[test]
    fn malformed_chunk_is_a_stream_error() {
        let (_, end) = decode(&[("message", "{not json")]);
        assert!(matches!(end, Err(ProviderError::Stream { .. })));
    }
}
