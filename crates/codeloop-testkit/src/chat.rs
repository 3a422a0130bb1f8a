//! OpenAI Chat Completions streaming (`POST /v1/chat/completions`): `data: {chat.completion.chunk}` records
//! (role, `reasoning_content`, `content`, `tool_calls` with id/name only in a call's first chunk), a finish
//! chunk, a usage chunk with `choices: []` (always sent, whether or not the request asked for
//! `stream_options.include_usage`), then `data: [DONE]`. Shapes copied from recorded OpenAI/DeepSeek streams.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::plan::{CREATED, Ctx, Finish};
use crate::sse::{SseWriter, json_string, split_even};

/// Bytes of JSON around each delta, for sizing the buffer up front.
const OVERHEAD_PER_CHUNK: usize = 200;

pub(crate) fn render(ctx: &Ctx<'_>) -> Vec<Bytes> {
    let reasoning = ctx.reasoning().map(|r| split_even(r, ctx.reply.reasoning_chunks)).unwrap_or_default();
    let text = ctx.text().map(|t| split_even(t, ctx.reply.text_chunks)).unwrap_or_default();
    let fragments: Vec<Vec<&str>> =
        ctx.calls.iter().map(|call| split_even(&call.arguments, call.fragments)).collect();
    let events = 4 + reasoning.len() + text.len() + fragments.iter().map(|f| f.len() + 1).sum::<usize>();
    let bytes = ctx.reply.text.as_ref().map_or(0, String::len)
        + ctx.reply.reasoning.as_ref().map_or(0, String::len)
        + events * OVERHEAD_PER_CHUNK;
    let mut w = SseWriter::with_capacity(bytes, events);

    let head = format!(
        "data: {{\"id\":\"chatcmpl-fake-{}\",\"object\":\"chat.completion.chunk\",\"created\":{CREATED},\"model\":{},\"choices\":[",
        ctx.turn,
        json_string(ctx.model)
    );
    let open = |w: &mut SseWriter| {
        w.raw(&head);
        w.raw("{\"index\":0,\"delta\":");
    };
    let close = |w: &mut SseWriter| {
        w.raw(",\"logprobs\":null,\"finish_reason\":null}]}\n\n");
        w.end_event();
    };

    open(&mut w);
    w.raw("{\"role\":\"assistant\",\"content\":\"\"}");
    close(&mut w);
    for piece in reasoning {
        open(&mut w);
        w.raw("{\"reasoning_content\":");
        w.json_str(piece);
        w.raw("}");
        close(&mut w);
    }
    for piece in text {
        open(&mut w);
        w.raw("{\"content\":");
        w.json_str(piece);
        w.raw("}");
        close(&mut w);
    }
    for (index, (call, pieces)) in ctx.calls.iter().zip(&fragments).enumerate() {
        open(&mut w);
        w.raw("{\"tool_calls\":[{\"index\":");
        w.number(index as u64);
        w.raw(",\"id\":");
        w.json_str(&call.id);
        w.raw(",\"type\":\"function\",\"function\":{\"name\":");
        w.json_str(call.name);
        w.raw(",\"arguments\":\"\"}}]}");
        close(&mut w);
        for piece in pieces {
            open(&mut w);
            w.raw("{\"tool_calls\":[{\"index\":");
            w.number(index as u64);
            w.raw(",\"function\":{\"arguments\":");
            w.json_str(piece);
            w.raw("}}]}");
            close(&mut w);
        }
    }

    w.raw(&head);
    w.raw("{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":");
    w.json_str(finish_reason(&ctx.finish));
    w.raw("}]}\n\n");
    w.end_event();

    let usage = ctx.usage;
    let usage = json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cached},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
    });
    w.raw(&head);
    w.raw("],\"usage\":");
    w.raw(&usage.to_string());
    w.raw("}\n\n");
    w.end_event();

    w.raw("data: [DONE]\n\n");
    w.end_event();
    w.finish()
}

fn finish_reason(finish: &Finish) -> &str {
    match finish {
        Finish::Stop => "stop",
        Finish::ToolCalls => "tool_calls",
        Finish::Length => "length",
        Finish::ContentFilter => "content_filter",
        Finish::Other(name) => name,
    }
}

/// An in-stream error as OpenAI-compatible servers send it: a data record `{"error": {...}}`, then the end.
pub(crate) fn error_event(error: &Value) -> Vec<Bytes> {
    let mut w = SseWriter::default();
    w.data(&json!({ "error": error }));
    w.finish()
}
