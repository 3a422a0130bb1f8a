//! Anthropic Messages streaming (`POST /v1/messages`): message_start (input usage), ping, one content block
//! per part (thinking with thinking_delta + signature_delta, text with text_delta, tool_use with
//! input_json_delta fragments), message_delta (stop_reason, output usage), message_stop.
//! Shapes copied from recorded Claude streams.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::plan::{Ctx, Finish};
use crate::sse::{SseWriter, split_even};

/// Bytes of JSON around each delta, for sizing the buffer up front.
const OVERHEAD_PER_CHUNK: usize = 110;

/// A structural event: `data` gets its `type`.
fn event(w: &mut SseWriter, kind: &str, mut data: Value) {
    if let Value::Object(map) = &mut data {
        map.insert("type".into(), Value::from(kind));
    }
    w.named(Some(kind), &data);
}

/// `content_block_delta` with `{"type": delta_type, field: piece}`.
fn delta(w: &mut SseWriter, index: usize, delta_type: &str, field: &str, piece: &str) {
    w.raw("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
    w.number(index as u64);
    w.raw(",\"delta\":{\"type\":\"");
    w.raw(delta_type);
    w.raw("\",\"");
    w.raw(field);
    w.raw("\":");
    w.json_str(piece);
    w.raw("}}\n\n");
    w.end_event();
}

/// The start and deltas of one content block; the caller adds anything else and the stop.
fn block(w: &mut SseWriter, index: usize, start: Value, deltas: (&str, &str, &[&str])) {
    event(w, "content_block_start", json!({"index": index, "content_block": start}));
    let (delta_type, field, pieces) = deltas;
    for piece in pieces {
        delta(w, index, delta_type, field, piece);
    }
}

fn stop_block(w: &mut SseWriter, index: usize) {
    event(w, "content_block_stop", json!({ "index": index }));
}

pub(crate) fn render(ctx: &Ctx<'_>) -> Vec<Bytes> {
    let reasoning = ctx.reasoning().map(|r| split_even(r, ctx.reply.reasoning_chunks)).unwrap_or_default();
    let text = ctx.text().map(|t| split_even(t, ctx.reply.text_chunks)).unwrap_or_default();
    let events = 8 + reasoning.len() + text.len() + 8 + ctx.calls.len() * 2;
    let bytes = ctx.reply.text.as_ref().map_or(0, String::len)
        + ctx.reply.reasoning.as_ref().map_or(0, String::len)
        + events * OVERHEAD_PER_CHUNK;
    let mut w = SseWriter::with_capacity(bytes, events);

    let usage = ctx.usage;
    event(
        &mut w,
        "message_start",
        json!({"message": {
            "id": format!("msg_fake_{}", ctx.turn),
            "type": "message",
            "role": "assistant",
            "model": ctx.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": usage.input.saturating_sub(usage.cached + usage.cache_write),
                "cache_creation_input_tokens": usage.cache_write,
                "cache_read_input_tokens": usage.cached,
                "output_tokens": 1,
            },
        }}),
    );
    event(&mut w, "ping", json!({}));

    let mut index = 0;
    if ctx.reasoning().is_some() {
        let start = json!({"type": "thinking", "thinking": "", "signature": ""});
        block(&mut w, index, start, ("thinking_delta", "thinking", &reasoning));
        let signature = format!("fake-signature-{}", ctx.turn);
        delta(&mut w, index, "signature_delta", "signature", &signature);
        stop_block(&mut w, index);
        index += 1;
    }
    if ctx.text().is_some() {
        let start = json!({"type": "text", "text": ""});
        block(&mut w, index, start, ("text_delta", "text", &text));
        stop_block(&mut w, index);
        index += 1;
    }
    for call in &ctx.calls {
        let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
        let pieces = split_even(&call.arguments, call.fragments);
        block(&mut w, index, start, ("input_json_delta", "partial_json", &pieces));
        stop_block(&mut w, index);
        index += 1;
    }

    event(
        &mut w,
        "message_delta",
        json!({
            "delta": {"stop_reason": stop_reason(&ctx.finish), "stop_sequence": null},
            "usage": {"output_tokens": usage.output},
        }),
    );
    event(&mut w, "message_stop", json!({}));
    w.finish()
}

fn stop_reason(finish: &Finish) -> &str {
    match finish {
        Finish::Stop => "end_turn",
        Finish::ToolCalls => "tool_use",
        Finish::Length => "max_tokens",
        Finish::ContentFilter => "refusal",
        Finish::Other(name) => name,
    }
}

/// An in-stream error as Anthropic sends it: `event: error` with `{"type":"error","error":{...}}`, then the end.
pub(crate) fn error_event(error: &Value) -> Vec<Bytes> {
    let mut w = SseWriter::default();
    event(&mut w, "error", json!({ "error": error }));
    w.finish()
}
