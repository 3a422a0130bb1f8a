//! OpenAI Responses streaming (`POST /v1/responses`): `event: <type>` + `data: <json>` records with a
//! running `sequence_number`: response.created/in_progress, then per output item (reasoning summary,
//! message text, function calls) output_item.added → deltas → done events → output_item.done, then
//! response.completed (or response.incomplete for a length/content-filter finish) with usage.
//! Shapes copied from recorded OpenAI streams.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::plan::{CREATED, Ctx, Finish};
use crate::sse::{SseWriter, split_even};

/// Bytes of JSON around each delta, for sizing the buffer up front.
const OVERHEAD_PER_CHUNK: usize = 200;

/// The writer plus the running `sequence_number`.
struct Events {
    w: SseWriter,
    seq: u64,
}

impl Events {
    /// A structural event: `data` gets `type` and `sequence_number` added.
    fn event(&mut self, kind: &str, mut data: Value) {
        if let Value::Object(map) = &mut data {
            map.insert("type".into(), Value::from(kind));
            map.insert("sequence_number".into(), Value::from(self.seq));
        }
        self.w.named(Some(kind), &data);
        self.seq += 1;
    }

    /// A delta event from a template: `{"type":kind,"delta":<piece>` + `rest` + `"sequence_number":n}`;
    /// `lead` goes between the type and the delta.
    fn delta(&mut self, kind: &str, lead: &str, piece: &str, rest: &str) {
        self.w.raw("event: ");
        self.w.raw(kind);
        self.w.raw("\ndata: {\"type\":\"");
        self.w.raw(kind);
        self.w.raw("\",");
        self.w.raw(lead);
        self.w.raw("\"delta\":");
        self.w.json_str(piece);
        self.w.raw(rest);
        self.w.raw("\"sequence_number\":");
        self.w.number(self.seq);
        self.w.raw("}\n\n");
        self.w.end_event();
        self.seq += 1;
    }
}

pub(crate) fn render(ctx: &Ctx<'_>) -> Vec<Bytes> {
    let reasoning = ctx.reasoning().map(|r| split_even(r, ctx.reply.reasoning_chunks)).unwrap_or_default();
    let text = ctx.text().map(|t| split_even(t, ctx.reply.text_chunks)).unwrap_or_default();
    let events = 8 + reasoning.len() + text.len() + 12 + ctx.calls.len() * 4;
    let bytes = ctx.reply.text.as_ref().map_or(0, String::len) * 4
        + ctx.reply.reasoning.as_ref().map_or(0, String::len) * 4
        + events * OVERHEAD_PER_CHUNK;
    let mut e = Events { w: SseWriter::with_capacity(bytes, events), seq: 0 };
    e.event("response.created", json!({"response": response(ctx, "in_progress", &[], None)}));
    e.event("response.in_progress", json!({"response": response(ctx, "in_progress", &[], None)}));

    let mut output = Vec::new();
    if let Some(full) = ctx.reasoning() {
        output.push(reasoning_item(&mut e, ctx, output.len(), &reasoning, full));
    }
    if let Some(full) = ctx.text() {
        output.push(message_item(&mut e, ctx, output.len(), &text, full));
    }
    for (i, call) in ctx.calls.iter().enumerate() {
        let index = output.len();
        let item_id = format!("fc_fake_{}_{i}", ctx.turn);
        let mut item = json!({
            "id": item_id, "type": "function_call", "status": "in_progress",
            "arguments": "", "call_id": call.id, "name": call.name,
        });
        e.event("response.output_item.added", json!({"item": item, "output_index": index}));
        let rest = format!(",\"item_id\":\"{item_id}\",\"output_index\":{index},");
        for piece in split_even(&call.arguments, call.fragments) {
            e.delta("response.function_call_arguments.delta", "", piece, &rest);
        }
        e.event(
            "response.function_call_arguments.done",
            json!({"arguments": call.arguments, "item_id": item_id, "output_index": index}),
        );
        item["status"] = json!("completed");
        item["arguments"] = json!(call.arguments);
        e.event("response.output_item.done", json!({"item": item, "output_index": index}));
        output.push(item);
    }

    let (kind, status) = match incomplete_reason(&ctx.finish) {
        Some(_) => ("response.incomplete", "incomplete"),
        None => ("response.completed", "completed"),
    };
    let usage = json!({
        "input_tokens": ctx.usage.input,
        "input_tokens_details": {"cached_tokens": ctx.usage.cached},
        "output_tokens": ctx.usage.output,
        "output_tokens_details": {"reasoning_tokens": ctx.usage.reasoning},
        "total_tokens": ctx.usage.input + ctx.usage.output,
    });
    e.event(kind, json!({"response": response(ctx, status, &output, Some(usage))}));
    e.w.finish()
}

fn reasoning_item(e: &mut Events, ctx: &Ctx<'_>, index: usize, pieces: &[&str], full: &str) -> Value {
    let item_id = format!("rs_fake_{}", ctx.turn);
    let ids = json!({"item_id": item_id, "output_index": index, "summary_index": 0});
    let with = |extra: Value| merge(&ids, extra);
    e.event(
        "response.output_item.added",
        json!({"item": {"id": item_id, "type": "reasoning", "summary": []}, "output_index": index}),
    );
    e.event(
        "response.reasoning_summary_part.added",
        with(json!({"part": {"type": "summary_text", "text": ""}})),
    );
    let rest = format!(",\"item_id\":\"{item_id}\",\"output_index\":{index},\"summary_index\":0,");
    for piece in pieces {
        e.delta("response.reasoning_summary_text.delta", "", piece, &rest);
    }
    e.event("response.reasoning_summary_text.done", with(json!({"text": full})));
    e.event(
        "response.reasoning_summary_part.done",
        with(json!({"part": {"type": "summary_text", "text": full}})),
    );
    let item = json!({
        "id": item_id, "type": "reasoning",
        "summary": [{"type": "summary_text", "text": full}],
    });
    e.event("response.output_item.done", json!({"item": item, "output_index": index}));
    item
}

fn message_item(e: &mut Events, ctx: &Ctx<'_>, index: usize, pieces: &[&str], full: &str) -> Value {
    let item_id = format!("msg_fake_{}", ctx.turn);
    let ids = json!({"content_index": 0, "item_id": item_id, "output_index": index});
    let with = |extra: Value| merge(&ids, extra);
    let part = |text: &str| json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
    e.event(
        "response.output_item.added",
        json!({
            "item": {"id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"},
            "output_index": index,
        }),
    );
    e.event("response.content_part.added", with(json!({"part": part("")})));
    let rest = format!(",\"item_id\":\"{item_id}\",\"logprobs\":[],\"output_index\":{index},");
    for piece in pieces {
        e.delta("response.output_text.delta", "\"content_index\":0,", piece, &rest);
    }
    e.event("response.output_text.done", with(json!({"logprobs": [], "text": full})));
    e.event("response.content_part.done", with(json!({"part": part(full)})));
    let item = json!({
        "id": item_id, "type": "message", "status": "completed",
        "content": [part(full)], "role": "assistant",
    });
    e.event("response.output_item.done", json!({"item": item, "output_index": index}));
    item
}

/// `base` with the fields of `extra` added.
fn merge(base: &Value, extra: Value) -> Value {
    let mut out = base.clone();
    if let (Value::Object(out), Value::Object(extra)) = (&mut out, extra) {
        out.extend(extra);
    }
    out
}

fn incomplete_reason(finish: &Finish) -> Option<&'static str> {
    match finish {
        Finish::Length => Some("max_output_tokens"),
        Finish::ContentFilter => Some("content_filter"),
        Finish::Stop | Finish::ToolCalls | Finish::Other(_) => None,
    }
}

/// The `response` object of created/completed/failed events.
fn response(ctx: &Ctx<'_>, status: &str, output: &[Value], usage: Option<Value>) -> Value {
    let incomplete = match (status, incomplete_reason(&ctx.finish)) {
        ("incomplete", Some(reason)) => json!({ "reason": reason }),
        _ => Value::Null,
    };
    json!({
        "id": format!("resp_fake_{}", ctx.turn),
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": true,
        "usage": usage,
    })
}

/// An in-stream failure: an `error` event (with the error both nested, as recorded streams have it, and
/// flattened, as the API reference documents it), then `response.failed`.
pub(crate) fn error_event(ctx: &Ctx<'_>, error: &Value, sequence: u64) -> Vec<Bytes> {
    let code = error.get("code").or_else(|| error.get("type")).cloned().unwrap_or(Value::Null);
    let message = error.get("message").cloned().unwrap_or(Value::Null);
    let mut e = Events { w: SseWriter::default(), seq: sequence };
    e.event("error", json!({"code": code, "message": message, "param": null, "error": error}));
    let mut failed = response(ctx, "failed", &[], None);
    failed["error"] = json!({"code": code, "message": message});
    e.event("response.failed", json!({ "response": failed }));
    e.w.finish()
}
