//! Turning one script turn into what goes on the wire for one request: the wire format (chosen by the
//! path), the resolved reply (ids, usage, finish), and the fault applied to the rendered chunks.
//! Format-specific rendering lives in `chat.rs`, `responses.rs` and `anthropic.rs`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::script::{Fault, Reply, ScriptUsage, Turn};
use crate::{anthropic, chat, responses};

/// `created` timestamp in every response: fixed so streams are reproducible.
pub(crate) const CREATED: u64 = 1_700_000_000;

/// The wire format, chosen by the request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Chat,
    Responses,
    Anthropic,
}

/// The finish reason in format-neutral terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finish {
    Stop,
    ToolCalls,
    Length,
    ContentFilter,
    Other(String),
}

/// A tool call with its id and wire argument text resolved.
pub(crate) struct Call<'a> {
    pub id: String,
    pub name: &'a str,
    pub arguments: String,
    pub fragments: usize,
}

/// Everything a format renderer needs for one reply.
pub(crate) struct Ctx<'a> {
    /// 1-based number of the turn being served; used in generated ids.
    pub turn: usize,
    pub model: &'a str,
    pub reply: &'a Reply,
    pub calls: Vec<Call<'a>>,
    pub usage: ScriptUsage,
    pub finish: Finish,
}

/// What the response body does once the rendered chunks are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// End the body normally.
    Clean,
    /// Abort the connection mid-body.
    Reset,
    /// Send nothing more until the client goes away or the server stops.
    Stall,
}

/// A streamed response, ready to send.
pub(crate) struct StreamPlan {
    pub chunks: Vec<Bytes>,
    pub delay: Duration,
    pub ending: Ending,
}

/// The whole answer to one request.
pub(crate) enum Answer {
    Status { status: u16, headers: Vec<(String, String)>, body: String },
    Stream(StreamPlan),
}

/// Request facts the answer depends on.
pub(crate) struct RequestInfo<'a> {
    pub format: Format,
    pub turn: usize,
    pub model: &'a str,
    pub body_len: usize,
}

pub(crate) fn answer(turn: &Turn, request: &RequestInfo<'_>) -> Answer {
    let (reply, fault) = match turn {
        Turn::Reply(reply) => (reply, None),
        Turn::Fault(Fault::Status { status, headers, body }) => {
            return status_answer(request.format, *status, headers, body);
        }
        Turn::Fault(
            fault @ (Fault::Reset { reply, .. }
            | Fault::Truncated { reply, .. }
            | Fault::Malformed { reply, .. }
            | Fault::Stall { reply, .. }
            | Fault::ErrorEvent { reply, .. }),
        ) => (reply, Some(fault)),
    };
    let ctx = Ctx::new(request, reply);
    let mut chunks = match request.format {
        Format::Chat => chat::render(&ctx),
        Format::Responses => responses::render(&ctx),
        Format::Anthropic => anthropic::render(&ctx),
    };
    let ending = match fault {
        Some(fault) => apply_fault(fault, &mut chunks, &ctx, request.format),
        None => Ending::Clean,
    };
    Answer::Stream(StreamPlan { chunks, delay: Duration::from_millis(reply.chunk_delay_ms), ending })
}

fn status_answer(format: Format, status: u16, headers: &[(String, String)], body: &str) -> Answer {
    let body = if body.is_empty() { default_error_body(format, status) } else { body.to_owned() };
    Answer::Status { status, headers: headers.to_vec(), body }
}

/// Cuts, extends or corrupts the rendered chunks as `fault` says; returns how the body ends.
fn apply_fault(fault: &Fault, chunks: &mut Vec<Bytes>, ctx: &Ctx<'_>, format: Format) -> Ending {
    match fault {
        Fault::Status { .. } => Ending::Clean,
        Fault::Reset { after_chunks, .. } => {
            chunks.truncate(*after_chunks);
            Ending::Reset
        }
        Fault::Truncated { after_chunks, .. } => {
            chunks.truncate(*after_chunks);
            Ending::Clean
        }
        Fault::Malformed { after_chunks, .. } => {
            let at = (*after_chunks).min(chunks.len());
            chunks.insert(at, malformed_chunk(format));
            Ending::Clean
        }
        Fault::Stall { after_chunks, .. } => {
            chunks.truncate(*after_chunks);
            Ending::Stall
        }
        Fault::ErrorEvent { after_chunks, error, .. } => {
            chunks.truncate(*after_chunks);
            let sequence = chunks.len() as u64;
            chunks.extend(match format {
                Format::Chat => chat::error_event(error),
                Format::Responses => responses::error_event(ctx, error, sequence),
                Format::Anthropic => anthropic::error_event(error),
            });
            Ending::Clean
        }
    }
}

impl<'a> Ctx<'a> {
    fn new(request: &RequestInfo<'a>, reply: &'a Reply) -> Self {
        let id_prefix = match request.format {
            Format::Anthropic => "toolu",
            Format::Chat | Format::Responses => "call",
        };
        let calls: Vec<Call<'a>> = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, call)| Call {
                id: call.id.clone().unwrap_or_else(|| format!("{id_prefix}_{}_{i}", request.turn)),
                name: &call.name,
                arguments: call.arguments.to_wire(),
                fragments: call.fragments,
            })
            .collect();
        let usage = reply.usage.unwrap_or_else(|| estimate_usage(reply, &calls, request.body_len));
        let finish = match reply.finish.as_deref() {
            Some(name) => Finish::parse(name),
            None if calls.is_empty() => Finish::Stop,
            None => Finish::ToolCalls,
        };
        Ctx { turn: request.turn, model: request.model, reply, calls, usage, finish }
    }

    /// The reasoning text, if any and non-empty.
    pub(crate) fn reasoning(&self) -> Option<&'a str> {
        self.reply.reasoning.as_deref().filter(|s| !s.is_empty())
    }

    /// The answer text, if any and non-empty.
    pub(crate) fn text(&self) -> Option<&'a str> {
        self.reply.text.as_deref().filter(|s| !s.is_empty())
    }
}

/// Roughly 4 characters per token, at least 1.
fn tokens_for(chars: usize) -> u64 {
    chars.div_ceil(4).max(1) as u64
}

fn estimate_usage(reply: &Reply, calls: &[Call<'_>], body_len: usize) -> ScriptUsage {
    let len = |text: &Option<String>| text.as_ref().map_or(0, |t| t.chars().count());
    let reasoning = len(&reply.reasoning);
    let args: usize = calls.iter().map(|c| c.arguments.len()).sum();
    ScriptUsage {
        input: tokens_for(body_len),
        output: tokens_for(reasoning + len(&reply.text) + args),
        reasoning: if reasoning == 0 { 0 } else { tokens_for(reasoning) },
        cached: 0,
        cache_write: 0,
    }
}

impl Finish {
    fn parse(name: &str) -> Self {
        match name {
            "stop" | "end_turn" => Finish::Stop,
            "tool_calls" | "tool_use" => Finish::ToolCalls,
            "length" | "max_tokens" => Finish::Length,
            "content_filter" | "refusal" => Finish::ContentFilter,
            other => Finish::Other(other.to_owned()),
        }
    }
}

fn malformed_chunk(format: Format) -> Bytes {
    Bytes::from_static(match format {
        Format::Chat => b"data: {\"id\":\"chatcmpl-fake\",\"choices\":[{\"delta\":{\"content\": not json\n\n",
        Format::Responses => {
            b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\": not json\n\n"
        }
        Format::Anthropic => {
            b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\": not json\n\n"
        }
    })
}

/// The error body a real provider of `format` sends with `status`.
pub(crate) fn default_error_body(format: Format, status: u16) -> String {
    let (kind, code, message) = match status {
        400 => ("invalid_request_error", "invalid_request", "Bad request"),
        401 => ("authentication_error", "invalid_api_key", "Incorrect API key provided"),
        403 => ("permission_error", "permission_denied", "Permission denied"),
        404 => ("not_found_error", "model_not_found", "Model not found"),
        408 => ("timeout_error", "timeout", "Request timed out"),
        413 => ("request_too_large", "request_too_large", "Request too large"),
        429 => ("rate_limit_error", "rate_limit_exceeded", "Rate limit reached, please try again later"),
        529 => ("overloaded_error", "overloaded", "Overloaded"),
        500..=599 => ("api_error", "server_error", "The server had an error"),
        _ => ("api_error", "error", "Request failed"),
    };
    error_body(format, kind, code, message)
}

/// An error body in `format`'s shape.
pub(crate) fn error_body(format: Format, kind: &str, code: &str, message: &str) -> String {
    let body: Value = match format {
        Format::Chat | Format::Responses => json!({"error": {
            "message": message, "type": kind, "param": null, "code": code,
        }}),
        Format::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
    };
    body.to_string()
}
