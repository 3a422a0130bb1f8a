//! Decoder for OpenAI Responses streams (`response.*` events), including compatible servers that send
//! no `event:` lines (the type is read from the JSON), only `function_call_arguments.done` or only
//! `output_item.done` instead of deltas, and reasoning as `reasoning_text` rather than summaries.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::assemble::{PendingCall, Step, map_finish};
use crate::stream::{Decoder, ended_early};
use crate::{ProviderError, StreamEvent, Usage, classify_stream_error, json};

/// Namespace of the metadata this format needs echoed back (item ids, encrypted reasoning).
pub(crate) const METADATA_KEY: &str = "openai";

#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    step: Step,
    /// Function calls by item id, in stream order.
    calls: Vec<(String, PendingCall)>,
    /// The reasoning item being streamed.
    reasoning: Option<ReasoningItem>,
    /// The message item being streamed, and whether it sent text deltas.
    message: Option<(String, bool)>,
    /// Ids of items already added, so a repeated `output_item.added`/`.done` (a proxy replaying an
    /// event) neither reopens nor re-emits anything.
    added: HashSet<String>,
    done: HashSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arguments {
    Delta,
    Done,
}

#[derive(Debug)]
struct ReasoningItem {
    id: String,
    encrypted_content: Option<String>,
    /// Text arrived as deltas (else it is taken from `output_item.done`).
    streamed: bool,
}

impl ResponsesDecoder {
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
            "response.output_item.added" => {
                if let Some(item) = event.item {
                    self.item_added(item, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = event.item {
                    self.item_done(item, out);
                }
            }
            "response.output_text.delta" => {
                self.text_delta(event.item_id.as_deref(), event.delta.as_deref(), out)
            }
            "response.refusal.delta" => self.refusal_delta(event.delta.as_deref(), out),
            "response.reasoning_summary_part.added" => self.summary_part_added(event.summary_index, out),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                self.reasoning_delta(event.delta.as_deref(), out)
            }
            "response.function_call_arguments.delta" => {
                self.arguments(event.item_id.as_deref(), event.delta.as_deref(), Arguments::Delta, out)
            }
            "response.function_call_arguments.done" => {
                self.arguments(event.item_id.as_deref(), event.arguments.as_deref(), Arguments::Done, out)
            }
            "response.completed" | "response.incomplete" => self.completed(event.response, out),
            "response.failed" => {
                let error = event.response.and_then(|r| r.error).filter(|e| !e.is_null());
                return Err(stream_error(
                    error.unwrap_or_else(|| json!({ "message": "the response failed" })),
                ));
            }
            "error" => {
                let error = event.error.filter(|e| !e.is_null()).unwrap_or_else(
                    || json!({ "message": event.message.as_deref().unwrap_or("error"), "code": event.code }),
                );
                return Err(stream_error(error));
            }
            _ => {}
        }
        Ok(())
    }

    fn refusal_delta(&mut self, delta: Option<&str>, out: &mut Vec<StreamEvent>) {
        if let Some(delta) = delta.filter(|d| !d.is_empty()) {
            if !self.step.in_text("refusal") {
                self.step.open_text("refusal", out);
            }
            self.step.text_delta(delta, out);
        }
    }

    /// Each summary part after the first is a reasoning block of its own.
    fn summary_part_added(&mut self, summary_index: Option<u64>, out: &mut Vec<StreamEvent>) {
        if summary_index.unwrap_or(0) > 0
            && let Some(item) = &self.reasoning
        {
            let metadata = reasoning_metadata(&item.id, None);
            self.step.close_reasoning(Some(metadata), out);
            self.step.open_reasoning(None, out);
        }
    }

    fn reasoning_delta(&mut self, delta: Option<&str>, out: &mut Vec<StreamEvent>) {
        if let Some(delta) = delta.filter(|d| !d.is_empty()) {
            if let Some(item) = &mut self.reasoning {
                item.streamed = true;
            }
            self.step.reasoning_delta(delta, out);
        }
    }

    fn arguments(
        &mut self,
        item_id: Option<&str>,
        text: Option<&str>,
        kind: Arguments,
        out: &mut Vec<StreamEvent>,
    ) {
        let (Some(id), Some(text)) = (item_id, text) else { return };
        let Some(call) = find_call(&mut self.calls, id) else { return };
        // Servers that send no deltas give the arguments only with `.done`.
        if kind == Arguments::Delta || call.arguments.is_empty() {
            call.push_arguments(text, &mut self.step, out);
        }
    }

    fn item_added(&mut self, item: Item<'_>, out: &mut Vec<StreamEvent>) {
        let id = item.id.map(Cow::into_owned).unwrap_or_default();
        if !id.is_empty() && !self.added.insert(id.clone()) {
            return;
        }
        match item.kind.as_deref() {
            Some("message") => {
                self.step.close_blocks(out);
                self.message = Some((id, false));
            }
            Some("reasoning") => {
                self.step.open_reasoning(None, out);
                let encrypted_content = item.encrypted_content.map(Cow::into_owned);
                self.reasoning = Some(ReasoningItem { id, encrypted_content, streamed: false });
            }
            Some("function_call") => {
                self.step.close_blocks(out);
                let call_id = item.call_id.map(Cow::into_owned).unwrap_or_else(|| id.clone());
                if self.calls.iter().any(|(_, c)| c.call_id == call_id) {
                    return;
                }
                let name = item.name.map(Cow::into_owned).unwrap_or_default();
                let mut call = PendingCall::new(call_id, name);
                call.start_if_named(&mut self.step, out);
                if let Some(arguments) = item.arguments {
                    call.push_arguments(&arguments, &mut self.step, out);
                }
                self.calls.push((id, call));
            }
            _ => {}
        }
    }

    fn item_done(&mut self, item: Item<'_>, out: &mut Vec<StreamEvent>) {
        let id = item.id.as_deref().unwrap_or_default().to_owned();
        if !id.is_empty() && !self.done.insert(id.clone()) {
            return;
        }
        match item.kind.as_deref() {
            Some("message") => {
                let streamed = self.message.take().is_some_and(|(m, streamed)| m == id && streamed);
                if !streamed {
                    for part in item.content.iter().flatten() {
                        match part.kind.as_deref() {
                            Some("refusal") => self.refusal(part.refusal.as_deref(), out),
                            _ => self.step.text_delta(part.text.as_deref().unwrap_or(""), out),
                        }
                    }
                }
                self.step.close_text(out);
            }
            Some("reasoning") => self.reasoning_done(id, item, out),
            Some("function_call") => {
                if find_call(&mut self.calls, &id).is_none() {
                    let call_id = item.call_id.as_deref().unwrap_or(&id).to_owned();
                    let name = item.name.as_deref().unwrap_or_default().to_owned();
                    self.calls.push((id.clone(), PendingCall::new(call_id, name)));
                }
                if let Some(call) = find_call(&mut self.calls, &id) {
                    if call.arguments.is_empty()
                        && let Some(arguments) = &item.arguments
                    {
                        call.start_if_named(&mut self.step, out);
                        call.push_arguments(arguments, &mut self.step, out);
                    }
                    let metadata = json!({ METADATA_KEY: { "item_id": id } });
                    call.complete(Some(metadata), &mut self.step, out);
                }
            }
            _ => {}
        }
    }

    fn refusal(&mut self, text: Option<&str>, out: &mut Vec<StreamEvent>) {
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            self.step.open_text("refusal", out);
            self.step.text_delta(text, out);
        }
    }

    fn reasoning_done(&mut self, id: String, item: Item<'_>, out: &mut Vec<StreamEvent>) {
        let current = self.reasoning.take().filter(|r| r.id == id);
        let streamed = current.as_ref().is_some_and(|r| r.streamed);
        if current.is_none() || !self.step.in_reasoning() {
            self.step.open_reasoning(None, out);
        }
        if !streamed {
            // No deltas: the text is only in the finished item (summary parts, or raw reasoning text).
            let summary = item.summary.iter().flatten().filter_map(|p| p.text.as_deref());
            let content = item.content.iter().flatten().filter_map(|p| p.text.as_deref());
            let texts: Vec<&str> = summary.chain(content).filter(|t| !t.is_empty()).collect();
            for (n, text) in texts.iter().enumerate() {
                if n > 0 {
                    self.step.close_reasoning(Some(reasoning_metadata(&id, None)), out);
                    self.step.open_reasoning(None, out);
                }
                self.step.reasoning_delta(text, out);
            }
        }
        let encrypted =
            item.encrypted_content.map(Cow::into_owned).or(current.and_then(|r| r.encrypted_content));
        self.step.close_reasoning(Some(reasoning_metadata(&id, encrypted)), out);
    }

    fn text_delta(&mut self, item_id: Option<&str>, delta: Option<&str>, out: &mut Vec<StreamEvent>) {
        let Some(delta) = delta.filter(|d| !d.is_empty()) else { return };
        if self.step.in_text("refusal") {
            self.step.close_text(out);
        }
        if let Some((id, streamed)) = &mut self.message
            && item_id.is_none_or(|i| i == id)
        {
            *streamed = true;
        }
        self.step.text_delta(delta, out);
    }

    fn completed(&mut self, response: Option<Response<'_>>, out: &mut Vec<StreamEvent>) {
        for (_, call) in &mut self.calls {
            call.complete(None, &mut self.step, out);
        }
        let response = response.unwrap_or_default();
        let status = response.status.as_deref().unwrap_or("completed");
        let reason = response.incomplete_details.as_ref().and_then(|d| d.reason.as_deref());
        let (raw, finish) = match (status, reason) {
            ("incomplete", Some(reason)) => (format!("incomplete:{reason}"), map_finish(Some(reason), false)),
            // Responses reports `completed` whether or not the model called tools.
            (status, _) => (status.to_owned(), map_finish(Some(status), false)),
        };
        let finish = match finish {
            codeloop_types::Finish::Stop | codeloop_types::Finish::Unknown if self.step.made_tool_calls() => {
                codeloop_types::Finish::ToolCalls
            }
            other => other,
        };
        let usage = response.usage.map(|u| u.normalise());
        self.step.finish_step(finish, Some(raw), usage, out);
        self.step.finish(out);
    }
}

fn find_call<'a>(calls: &'a mut [(String, PendingCall)], item_id: &str) -> Option<&'a mut PendingCall> {
    calls.iter_mut().find(|(id, _)| id == item_id).map(|(_, call)| call)
}

fn reasoning_metadata(item_id: &str, encrypted_content: Option<String>) -> Value {
    let mut inner = Map::new();
    inner.insert("item_id".into(), json!(item_id));
    if let Some(content) = encrypted_content {
        inner.insert("encrypted_content".into(), json!(content));
    }
    json!({ METADATA_KEY: inner })
}

fn stream_error(error: Value) -> ProviderError {
    match error {
        Value::String(message) => classify_stream_error(&json!({ "message": message })),
        other => classify_stream_error(&other),
    }
}

impl Decoder for ResponsesDecoder {
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
            return Ok(());
        }
        let event: Event<'_> = serde_json::from_str(data)
            .map_err(|e| ProviderError::Stream { message: format!("malformed Responses event: {e}") })?;
        let kind = event.kind.clone();
        let kind = kind.as_deref().unwrap_or(event_type);
        self.dispatch(kind, event, out)
    }

    fn end(&mut self, _out: &mut Vec<StreamEvent>) -> Result<(), ProviderError> {
        if self.step.finished() { Ok(()) } else { Err(ended_early()) }
    }

    fn finished(&self) -> bool {
        self.step.finished()
    }
}

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    delta: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    item_id: Option<Cow<'a, str>>,
    #[serde(default)]
    summary_index: Option<u64>,
    #[serde(default, borrow, deserialize_with = "json::arguments")]
    arguments: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item: Option<Item<'a>>,
    #[serde(default, borrow)]
    response: Option<Response<'a>>,
    #[serde(default)]
    error: Option<Value>,
    /// Older error events carry the fields at the top level.
    #[serde(default, borrow, deserialize_with = "json::text")]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    code: Option<Value>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    call_id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::arguments")]
    arguments: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    encrypted_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    summary: Option<Vec<Part<'a>>>,
    #[serde(default, borrow)]
    content: Option<Vec<Part<'a>>>,
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(default, rename = "type", borrow, deserialize_with = "json::text")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "json::text")]
    refusal: Option<Cow<'a, str>>,
}

#[derive(Default, Deserialize)]
struct Response<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    status: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<ResponsesUsage>,
    #[serde(default, borrow)]
    incomplete_details: Option<IncompleteDetails<'a>>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct IncompleteDetails<'a> {
    #[serde(default, borrow, deserialize_with = "json::text")]
    reason: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
struct ResponsesUsage {
    #[serde(default, deserialize_with = "json::count")]
    input_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default, deserialize_with = "json::count")]
    output_tokens: Option<u64>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
    #[serde(default, deserialize_with = "json::count")]
    total_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct InputDetails {
    #[serde(default, deserialize_with = "json::count")]
    cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct OutputDetails {
    #[serde(default, deserialize_with = "json::count")]
    reasoning_tokens: Option<u64>,
}

impl ResponsesUsage {
    /// `input_tokens` include cached tokens and `output_tokens` include reasoning.
    fn normalise(&self) -> Usage {
        let cache_read = self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        let reasoning = self.output_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        Usage {
            input: self.input_tokens.unwrap_or(0).saturating_sub(cache_read),
            output: self.output_tokens.unwrap_or(0).saturating_sub(reasoning),
            reasoning,
            cache_read,
            cache_write: 0,
            total: self.total_tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(events: &[&str]) -> (Vec<StreamEvent>, Result<(), ProviderError>) {
        let mut decoder = ResponsesDecoder::new();
        let mut out = Vec::new();
        for data in events {
            if let Err(e) = decoder.event("message", data, &mut out) {
                return (out, Err(e));
            }
        }
        let end = decoder.end(&mut out);
        (out, end)
    }

    #[test]
    fn incomplete_response_maps_its_reason() {
        let (out, end) = decode(&[
            r#"{"type":"response.output_text.delta","item_id":"m","delta":"Hel"}"#,
            r#"{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}}"#,
        ]);
        end.unwrap();
        let finish = out.iter().find_map(|e| match e {
            StreamEvent::FinishStep { finish, raw_finish, .. } => Some((*finish, raw_finish.clone())),
            _ => None,
        });
        assert_eq!(
            finish,
            Some((codeloop_types::Finish::Length, Some("incomplete:max_output_tokens".into())))
        );
    }

    #[test]
    fn completed_with_function_calls_is_tool_calls() {
        let (out, _) = decode(&[
            r#"{"type":"response.output_item.added","item":{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":""}}"#,
            r#"{"type":"response.output_item.done","item":{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"}}"#,
            r#"{"type":"response.completed","response":{"status":"completed"}}"#,
        ]);
        assert!(
            out.iter().any(|e| matches!(
                e,
                StreamEvent::FinishStep { finish: codeloop_types::Finish::ToolCalls, .. }
            ))
        );
        let call = out.iter().find_map(|e| match e {
            StreamEvent::ToolCall(c) => Some(c.clone()),
            _ => None,
        });
        let call = call.unwrap();
        assert_eq!(call.input, Ok(json!({"a": 1})));
        assert_eq!(call.metadata, Some(json!({"openai": {"item_id": "fc_1"}})));
    }

    #[test]
    fn repeated_item_events_change_nothing() {
        let added = r#"{"type":"response.output_item.added","item":{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":""}}"#;
        let done = r#"{"type":"response.output_item.done","item":{"id":"fc_1","type":"function_call","call_id":"c1","name":"f","arguments":"{}"}}"#;
        let msg_done = r#"{"type":"response.output_item.done","item":{"id":"m1","type":"message","content":[{"type":"output_text","text":"Hi"}]}}"#;
        let completed = r#"{"type":"response.completed","response":{"status":"completed"}}"#;
        let (out, end) = decode(&[added, added, done, done, msg_done, msg_done, completed]);
        end.unwrap();
        let count = |f: fn(&StreamEvent) -> bool| out.iter().filter(|e| f(e)).count();
        assert_eq!(count(|e| matches!(e, StreamEvent::ToolInputStart { .. })), 1);
        assert_eq!(count(|e| matches!(e, StreamEvent::ToolCall(_))), 1);
        assert_eq!(count(|e| matches!(e, StreamEvent::TextDelta { .. })), 1);
    }

    #[test]
    fn server_error_in_response_failed_is_classified() {
        let (_, end) = decode(&[
            r#"{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}"#,
        ]);
        let error = end.unwrap_err();
        assert!(error.retryable(), "{error:?}");
    }
}
