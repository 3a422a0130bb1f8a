//! Decoder for Gemini `streamGenerateContent?alt=sse` streams: every `data:` is a whole
//! `GenerateContentResponse`. Parts with `thought: true` are reasoning, other text parts are text,
//! `functionCall` parts arrive whole (never in fragments) and are emitted at once, `thoughtSignature`s are
//! kept to be sent back, and `usageMetadata` is cumulative (the last one counts). There is no terminal
//! marker: the chunk with a `finishReason` ends the step.

use std::borrow::Cow;
use std::collections::HashSet;

use codeloop_types::Finish;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::assemble::{Step, map_finish};
use crate::stream::{Decoder, ended_early};
use crate::{ProviderError, StreamEvent, Usage, classify_stream_error, json};

/// Namespace of the metadata to send back: `thought_signature` (on reasoning and tool calls) and `id`
/// (on tool calls whose id Gemini gave).
pub(crate) const METADATA_KEY: &str = "gemini";

#[derive(Debug, Default)]
pub struct GeminiDecoder {
    step: Step,
    /// The signature of the open reasoning block (set only while one is open).
    signature: Option<String>,
    finish_reason: Option<String>,
    /// The last `usageMetadata`: each one repeats the totals so far.
    usage: Option<GeminiUsage>,
    /// Calls emitted so far, numbering the ids generated for calls Gemini gave none (`call_N`).
    calls: usize,
    /// Ids Gemini gave, so a chunk a proxy repeats does not run a call twice.
    seen_ids: HashSet<String>,
}

impl GeminiDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn chunk(&mut self, chunk: Chunk<'_>, out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if let Some(usage) = chunk.usage_metadata {
            self.usage = Some(usage);
        }
        // Only one candidate is asked for.
        let candidate = chunk.candidates.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0);
        if let Some(candidate) = candidate {
            for part in candidate.content.and_then(|c| c.parts).into_iter().flatten() {
                self.part(part, out);
            }
            if let Some(reason) = candidate.finish_reason.filter(|r| !r.is_empty()) {
                let finish = finish_of(&reason, self.step.made_tool_calls());
                self.finish_reason = Some(reason.into_owned());
                self.finish(finish, out);
            }
        } else if let Some(reason) =
            chunk.prompt_feedback.and_then(|f| f.block_reason).filter(|r| !r.is_empty())
        {
            // The prompt itself was blocked: no candidate follows.
            self.finish_reason = Some(reason.into_owned());
            self.finish(Finish::ContentFilter, out);
        }
        Ok(())
    }

    fn part(&mut self, part: Part<'_>, out: &mut Vec<StreamEvent>) {
        let signature = part.thought_signature.filter(|s| !s.is_empty()).map(Cow::into_owned);
        if let Some(call) = part.function_call {
            self.function_call(call, signature, out);
            return;
        }
        let text = part.text.as_deref().unwrap_or("");
        if part.thought.as_ref().is_some_and(|t| t == &Value::Bool(true)) {
            self.thought(text, signature, out);
        } else {
            self.text(text, signature, out);
        }
    }

    /// Thought text joins the open reasoning block; a signed block is complete, so thought after it
    /// starts another.
    fn thought(&mut self, text: &str, signature: Option<String>, out: &mut Vec<StreamEvent>) {
        if self.signature.is_some() {
            self.end_reasoning(out);
        }
        if !self.step.in_reasoning() && (!text.is_empty() || signature.is_some()) {
            self.step.open_reasoning(None, out);
        }
        self.step.reasoning_delta(text, out);
        if signature.is_some() {
            self.signature = signature;
        }
    }

    fn text(&mut self, text: &str, signature: Option<String>, out: &mut Vec<StreamEvent>) {
        if let Some(signature) = signature {
            self.sign_reasoning(signature, out);
        }
        if !text.is_empty() {
            self.end_reasoning(out);
            self.step.text_delta(text, out);
        }
    }

    /// A signature on a text part seals the thinking before it. Text blocks carry no metadata, so it
    /// goes on the open unsigned reasoning block, or else on an empty reasoning block of its own; either
    /// way it is sent back with the thoughts.
    fn sign_reasoning(&mut self, signature: String, out: &mut Vec<StreamEvent>) {
        if !self.step.in_reasoning() || self.signature.is_some() {
            self.end_reasoning(out);
            self.step.open_reasoning(None, out);
        }
        self.signature = Some(signature);
        self.end_reasoning(out);
    }

    fn end_reasoning(&mut self, out: &mut Vec<StreamEvent>) {
        let signature = self.signature.take();
        if self.step.in_reasoning() {
            let metadata = signature.map(|s| json!({ METADATA_KEY: { "thought_signature": s } }));
            self.step.close_reasoning(metadata, out);
        }
    }

    /// A whole call: start, its arguments as one delta, end and the call, at once.
    fn function_call(
        &mut self,
        call: FunctionCall<'_>,
        signature: Option<String>,
        out: &mut Vec<StreamEvent>,
    ) {
        let provider_id = call.id.filter(|id| !id.is_empty()).map(Cow::into_owned);
        if let Some(id) = &provider_id
            && !self.seen_ids.insert(id.clone())
        {
            return;
        }
        self.end_reasoning(out);
        let call_id = provider_id.clone().unwrap_or_else(|| format!("call_{}", self.calls));
        self.calls += 1;
        let name = call.name.as_deref().unwrap_or_default();
        // Absent or null `args` is a call without arguments: `{}`.
        let arguments = call.args.as_deref().unwrap_or_default();
        self.step.tool_start(&call_id, name, out);
        self.step.tool_delta(&call_id, arguments, out);
        let mut metadata = Map::new();
        if let Some(id) = provider_id {
            metadata.insert("id".into(), json!(id));
        }
        if let Some(signature) = signature {
            metadata.insert("thought_signature".into(), json!(signature));
        }
        let metadata = (!metadata.is_empty()).then(|| json!({ METADATA_KEY: metadata }));
        self.step.tool_end(&call_id, name, arguments, metadata, out);
    }

    fn finish(&mut self, finish: Finish, out: &mut Vec<StreamEvent>) {
        self.end_reasoning(out);
        let usage = self.usage.map(|u| u.normalise());
        self.step.finish_step(finish, self.finish_reason.clone(), usage, out);
        self.step.finish(out);
    }
}

/// Gemini's finish reasons. `STOP` also ends a step that called functions (there is no reason of its
/// own for that). The safety family is a content filter. Anything else — notably
/// `MALFORMED_FUNCTION_CALL`, a call Gemini could not parse, of which nothing reaches the stream — is
/// unknown, so the run loop gives the model another step (bounded by the step limit and the doom-loop
/// guard) rather than ending the turn on an empty answer.
fn finish_of(raw: &str, made_tool_calls: bool) -> Finish {
    match raw {
        "STOP" if made_tool_calls => Finish::ToolCalls,
        "STOP" => Finish::Stop,
        "MAX_TOKENS" => Finish::Length,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => Finish::ContentFilter,
        _ => map_finish(None, made_tool_calls),
    }
}

fn stream_error(error: Value) -> ProviderError {
    match error {
        Value::String(message) => classify_stream_error(&json!({ "message": message })),
        other => classify_stream_error(&other),
    }
}

impl Decoder for GeminiDecoder {
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
        if data.is_empty() || data == "[DONE]" {
            return Ok(());
        }
        if event_type == "error" {
            let error = serde_json::from_str::<Value>(data).unwrap_or_else(|_| json!({ "message": data }));
            return Err(stream_error(error.get("error").cloned().unwrap_or(error)));
        }
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|e| ProviderError::Stream { message: format!("malformed Gemini chunk: {e}") })?;
        self.chunk(chunk, out)
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        // The step ends at its finish reason; a body that stops before one was cut off.
        if self.step.finished() { Ok(()) } else { Err(ended_early()) }
    }

    fn finished(&self) -> bool {
        self.step.finished()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk<'a> {
    #[serde(default, borrow)]
    candidates: Option<Vec<Candidate<'a>>>,
    #[serde(default)]
    usage_metadata: Option<GeminiUsage>,
    #[serde(default, borrow)]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(default, borrow)]
    content: Option<Content<'a>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    finish_reason: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "json::count")]
    index: Option<u64>,
}

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(default, borrow)]
    parts: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    text: Option<Cow<'a, str>>,
    /// Read loosely: only `true` marks a thought.
    #[serde(default)]
    thought: Option<Value>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    thought_signature: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function_call: Option<FunctionCall<'a>>,
}

#[derive(Deserialize)]
struct FunctionCall<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    name: Option<Cow<'a, str>>,
    /// An object, kept as its JSON text.
    #[serde(default, borrow, deserialize_with = "json::arguments")]
    args: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    block_reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiUsage {
    #[serde(default, deserialize_with = "json::count")]
    prompt_token_count: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    cached_content_token_count: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    tool_use_prompt_token_count: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    candidates_token_count: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    thoughts_token_count: Option<u64>,
    #[serde(default, deserialize_with = "json::count")]
    total_token_count: Option<u64>,
}

impl GeminiUsage {
    /// `promptTokenCount` includes the cached tokens; the prompt of built-in tools
    /// (`toolUsePromptTokenCount`) is input counted apart; `candidatesTokenCount` excludes thinking
    /// (`thoughtsTokenCount`).
    fn normalise(&self) -> Usage {
        let cached = self.cached_content_token_count.unwrap_or(0);
        let prompt = self.prompt_token_count.unwrap_or(0).saturating_sub(cached);
        Usage {
            input: prompt + self.tool_use_prompt_token_count.unwrap_or(0),
            output: self.candidates_token_count.unwrap_or(0),
            reasoning: self.thoughts_token_count.unwrap_or(0),
            cache_read: cached,
            cache_write: 0,
            total: self.total_token_count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn decode(chunks: &[&str]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = GeminiDecoder::new();
        let mut out = Vec::new();
        for chunk in chunks {
            if let Err(e) = decoder.event("message", chunk, &mut out) {
                return (out, Err(e));
            }
        }
        let end = decoder.end(&mut out);
        (out, end)
    }

    fn finish_step(out: &[StreamEvent]) -> Option<(Finish, Option<String>, Option<Usage>)> {
        out.iter().find_map(|e| match e {
            StreamEvent::FinishStep { finish, raw_finish, usage } => {
                Some((*finish, raw_finish.clone(), *usage))
            }
            _ => None,
        })
    }

    #[test]
    fn usage_excludes_cached_input_and_counts_thoughts_apart() {
        let usage: GeminiUsage = serde_json::from_value(json!({
            "promptTokenCount": 1000,
            "cachedContentTokenCount": 600,
            "toolUsePromptTokenCount": 50,
            "candidatesTokenCount": 40,
            "thoughtsTokenCount": 300,
            "totalTokenCount": 1390,
        }))
        .unwrap();
        assert_eq!(
            usage.normalise(),
            Usage {
                input: 450,
                output: 40,
                reasoning: 300,
                cache_read: 600,
                cache_write: 0,
                total: Some(1390)
            }
        );
        let partial: GeminiUsage = serde_json::from_value(json!({ "promptTokenCount": 7 })).unwrap();
        assert_eq!(partial.normalise(), Usage { input: 7, ..Usage::default() });
    }

    #[test]
    fn finish_reasons_map_to_the_loop_s_vocabulary() {
        assert_eq!(finish_of("STOP", false), Finish::Stop);
        assert_eq!(finish_of("STOP", true), Finish::ToolCalls);
        assert_eq!(finish_of("MAX_TOKENS", true), Finish::Length);
        assert_eq!(finish_of("RECITATION", false), Finish::ContentFilter);
        assert_eq!(finish_of("PROHIBITED_CONTENT", false), Finish::ContentFilter);
        assert_eq!(finish_of("MALFORMED_FUNCTION_CALL", false), Finish::Unknown);
    }

    #[test]
    fn a_signature_on_the_first_answer_part_seals_the_thoughts_before_it() {
        let (out, end) = decode(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"Think","thought":true}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi","thoughtSignature":"sig"}]},"finishReason":"STOP"}]}"#,
        ]);
        end.unwrap();
        let reasoning_end = out.iter().find_map(|e| match e {
            StreamEvent::ReasoningEnd { metadata, .. } => Some(metadata.clone()),
            _ => None,
        });
        assert_eq!(reasoning_end, Some(Some(json!({ "gemini": { "thought_signature": "sig" } }))));
        assert!(out.iter().any(|e| matches!(e, StreamEvent::TextDelta { text, .. } if text == "Hi")));
    }

    #[test]
    fn a_signature_without_thoughts_gets_an_empty_reasoning_block() {
        let (out, end) = decode(&[
            r#"{"candidates":[{"content":{"parts":[{"text":"Done."}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"","thoughtSignature":"sig"}]},"finishReason":"STOP"}]}"#,
        ]);
        end.unwrap();
        let kinds: Vec<&StreamEvent> = out
            .iter()
            .filter(|e| matches!(e, StreamEvent::ReasoningStart { .. } | StreamEvent::ReasoningDelta { .. }))
            .collect();
        assert_eq!(kinds, vec![&StreamEvent::ReasoningStart { id: "reasoning-1".into(), metadata: None }]);
        assert!(out.contains(&StreamEvent::ReasoningEnd {
            id: "reasoning-1".into(),
            metadata: Some(json!({ "gemini": { "thought_signature": "sig" } })),
        }));
    }

    #[test]
    fn calls_keep_gemini_s_id_and_signature_and_a_repeated_chunk_runs_nothing_twice() {
        let call = r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"read","args":{"path":"a"},"id":"x1"},"thoughtSignature":"sig"},{"functionCall":{"name":"ls"}}]}}]}"#;
        let (out, end) = decode(&[call, call, r#"{"candidates":[{"finishReason":"STOP"}]}"#]);
        end.unwrap();
        let calls: Vec<_> = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall(c) => Some((c.call_id.clone(), c.input.clone(), c.metadata.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                (
                    "x1".into(),
                    Ok(json!({"path": "a"})),
                    Some(json!({"gemini": {"id": "x1", "thought_signature": "sig"}}))
                ),
                ("call_1".into(), Ok(json!({})), None),
                // The repeated chunk's id-less call cannot be told from a new one.
                ("call_2".into(), Ok(json!({})), None),
            ]
        );
        assert_eq!(finish_step(&out).map(|f| f.0), Some(Finish::ToolCalls));
    }

    #[test]
    fn an_error_chunk_is_classified() {
        let (_, end) = decode(&[
            r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
        ]);
        let error = end.unwrap_err();
        assert!(error.retryable(), "{error:?}");
        let (_, end) = decode(&[
            r#"{"error":{"code":400,"message":"The input token count (2000000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
        ]);
        assert!(end.unwrap_err().is_context_overflow());
    }

    #[test]
    fn a_blocked_prompt_finishes_as_a_content_filter() {
        let (out, end) = decode(&[
            r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9}}"#,
        ]);
        end.unwrap();
        let (finish, raw, usage) = finish_step(&out).unwrap();
        assert_eq!((finish, raw.as_deref()), (Finish::ContentFilter, Some("SAFETY")));
        assert_eq!(usage.map(|u| u.input), Some(9));
    }

    #[test]
    fn a_body_cut_before_the_finish_reason_is_an_error() {
        let (out, end) = decode(&[r#"{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}]}"#]);
        assert!(out.iter().any(|e| matches!(e, StreamEvent::TextDelta { .. })));
        assert_eq!(end, Err(ended_early()));
    }
}
