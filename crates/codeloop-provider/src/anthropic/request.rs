//! Request body for Anthropic Messages (`POST {base_url}/messages`): system blocks, alternating
//! messages (consecutive results grouped in one user message), signed thinking passed back untouched,
//! and prompt-cache markers on the first 2 system blocks and the last 2 messages (reference §7.5).
//!
//! With a run's memo, each message's own blocks are reused from the step that first sent them; the
//! grouping into wire messages and the last 2 wire messages (whose blocks carry the markers) are made
//! fresh every step.

use serde_json::{Map, Value, json};

use super::decode::METADATA_KEY;
use crate::WireApi;
use crate::encode::{Memo, runs, write_elements, write_spliced};
use crate::media::{self, MediaKind};
use crate::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, Reasoning, ToolChoice, ToolResult,
    UserContent,
};

/// `max_tokens` is required by the API; used when the request sets no limit.
pub const DEFAULT_MAX_TOKENS: u64 = 8_192;

/// How many system blocks and trailing messages get a cache marker (4 in all, the API's maximum).
const CACHED_SYSTEM_BLOCKS: usize = 2;
const CACHED_MESSAGES: usize = 2;

/// The beta that lets a model think between tool calls with a token budget (adaptive thinking does so
/// by itself).
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";

/// The `anthropic-beta` value this request needs, if any.
pub(crate) fn beta(request: &ProviderRequest) -> Option<&'static str> {
    match &request.reasoning {
        Some(reasoning @ Reasoning::Budget(_)) if reasoning.thinks() => Some(INTERLEAVED_THINKING_BETA),
        _ => None,
    }
}

/// Builds the streaming request body.
pub fn build_body(request: &ProviderRequest) -> Value {
    Value::Object(body(request, Value::Array(messages(&request.messages))))
}

/// The body as bytes, reusing the memo's encoding of the blocks of messages an earlier request of the
/// run sent: byte for byte `serde_json::to_vec(&build_body(..))`. The wire messages around the blocks
/// are built fresh; the last [`CACHED_MESSAGES`] wire messages, whose blocks carry the cache markers,
/// are encoded fresh whole.
pub(crate) fn encode(
    request: &ProviderRequest,
    memo: &mut Memo,
    owner: (WireApi, &str, &str),
) -> Result<Vec<u8>, serde_json::Error> {
    memo.refresh(owner, &request.messages, own_blocks);
    let memo = &*memo;
    let runs = runs(&request.messages, role, |index| memo.is_silent(index));
    let mut out = Vec::with_capacity(memo.size() + 4096);
    // Every run of a role has the same wire message around its blocks.
    let user = message(Role::User, Vec::new(), Marker::None);
    let assistant = message(Role::Assistant, Vec::new(), Marker::None);
    write_spliced(&mut out, &body(request, Value::Null), "messages", |out| {
        for (position, (role, run)) in runs.iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            match marker(position, runs.len()) {
                Marker::None => {
                    let wrapper = match role {
                        Role::User => &user,
                        Role::Assistant => &assistant,
                    };
                    write_spliced(out, wrapper, "content", |out| {
                        write_elements(out, run.clone().flat_map(|index| memo.serialised(index)));
                        Ok(())
                    })?;
                }
                // The marker goes inside a block: build these blocks again.
                Marker::Last => {
                    let blocks = request.messages[run.clone()].iter().flat_map(own_blocks).collect();
                    serde_json::to_writer(&mut *out, &Value::Object(message(*role, blocks, Marker::Last)))?;
                }
            }
        }
        Ok(())
    })?;
    Ok(out)
}

/// Every field of the body, with `messages` as given.
fn body(request: &ProviderRequest, messages: Value) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(request.max_output_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    let system: Vec<Value> = request
        .system
        .iter()
        .filter(|s| !s.is_empty())
        .enumerate()
        .map(|(i, text)| {
            let mut block = json!({ "type": "text", "text": text });
            if i < CACHED_SYSTEM_BLOCKS {
                block["cache_control"] = ephemeral();
            }
            block
        })
        .collect();
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert("messages".into(), messages);
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "any",
        };
        body.insert("tool_choice".into(), json!({ "type": choice }));
    }
    let thinking = request.reasoning.as_ref().filter(|r| r.thinks());
    match thinking {
        Some(Reasoning::Effort(level)) => {
            body.insert("thinking".into(), json!({ "type": "adaptive" }));
            body.insert("output_config".into(), json!({ "effort": level }));
        }
        Some(Reasoning::Budget(tokens)) => {
            body.insert("thinking".into(), json!({ "type": "enabled", "budget_tokens": tokens }));
        }
        None => {}
    }
    // The API refuses a sampling temperature or top_p below 0.95 while the model thinks.
    if thinking.is_none() {
        if let Some(temperature) = request.temperature {
            body.insert("temperature".into(), crate::request::sampling(temperature));
        }
        if let Some(top_p) = request.top_p {
            body.insert("top_p".into(), crate::request::sampling(top_p));
        }
    }
    body.insert("stream".into(), json!(true));
    body
}

fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

/// The wire messages. The API wants roles to alternate: consecutive results (and a user message after
/// them) share one user message.
fn messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut blocks: Vec<Vec<Value>> = messages.iter().map(own_blocks).collect();
    let runs = runs(messages, role, |index| blocks[index].is_empty());
    let count = runs.len();
    let mut out = Vec::with_capacity(count);
    for (position, (role, run)) in runs.into_iter().enumerate() {
        let content = blocks[run].iter_mut().flat_map(std::mem::take).collect();
        out.push(Value::Object(message(role, content, marker(position, count))));
    }
    out
}

/// Whether a wire message carries a prompt-cache marker.
enum Marker {
    None,
    /// On its last block that can carry one.
    Last,
}

/// The last [`CACHED_MESSAGES`] of `count` wire messages carry a marker.
fn marker(position: usize, count: usize) -> Marker {
    if position + CACHED_MESSAGES >= count { Marker::Last } else { Marker::None }
}

fn message(role: Role, mut content: Vec<Value>, marker: Marker) -> Map<String, Value> {
    match marker {
        Marker::None => {}
        // Thinking blocks cannot carry a cache marker: mark the last block that can.
        Marker::Last => {
            if let Some(block) = content.iter_mut().rev().find(|b| !is_thinking(b)) {
                block["cache_control"] = ephemeral();
            }
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), json!(role.as_str()));
    message.insert("content".into(), Value::Array(content));
    message
}

#[derive(Clone, Copy, PartialEq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

fn role(message: &ChatMessage) -> Role {
    match message {
        ChatMessage::User(_) | ChatMessage::Tool(_) => Role::User,
        ChatMessage::Assistant(_) => Role::Assistant,
    }
}

/// What one message's blocks are by themselves, before cache markers (none for an assistant message
/// with nothing to send).
fn own_blocks(message: &ChatMessage) -> Vec<Value> {
    match message {
        ChatMessage::User(parts) => parts.iter().map(user_block).collect(),
        ChatMessage::Assistant(parts) => parts.iter().filter_map(assistant_block).collect(),
        ChatMessage::Tool(result) => vec![tool_result(result)],
    }
}

fn is_thinking(block: &Value) -> bool {
    matches!(block["type"].as_str(), Some("thinking" | "redacted_thinking"))
}

fn user_block(part: &UserContent) -> Value {
    match part {
        UserContent::Text(text) => json!({ "type": "text", "text": text }),
        UserContent::File(file) => file_block(file),
    }
}

fn file_block(file: &FileContent) -> Value {
    let source = match media::base64_data(&file.url) {
        Some((mime, data)) => json!({ "type": "base64", "media_type": mime, "data": data }),
        None => json!({ "type": "url", "url": file.url }),
    };
    match media::kind(file) {
        MediaKind::Image => json!({ "type": "image", "source": source }),
        MediaKind::Pdf => json!({ "type": "document", "source": source }),
        MediaKind::Other => json!({ "type": "text", "text": media::as_text(file) }),
    }
}

fn assistant_block(part: &AssistantContent) -> Option<Value> {
    match part {
        // The API rejects empty text blocks.
        AssistantContent::Text { text, .. } if text.is_empty() => None,
        AssistantContent::Text { text, .. } => Some(json!({ "type": "text", "text": text })),
        AssistantContent::Reasoning { text, metadata } => {
            let meta = metadata.as_ref().and_then(|m| m.get(METADATA_KEY))?;
            if let Some(data) = meta.get("redacted_data").and_then(Value::as_str) {
                return Some(json!({ "type": "redacted_thinking", "data": data }));
            }
            // Thinking without its signature cannot be sent back.
            let signature = meta.get("signature").and_then(Value::as_str)?;
            Some(json!({ "type": "thinking", "thinking": text, "signature": signature }))
        }
        AssistantContent::ToolCall { call_id, name, input, .. } => {
            Some(json!({ "type": "tool_use", "id": call_id, "name": name, "input": input }))
        }
    }
}

fn tool_result(result: &ToolResult) -> Value {
    let content = if result.attachments.is_empty() {
        json!(result.output)
    } else {
        let mut blocks = vec![json!({ "type": "text", "text": result.output })];
        blocks.extend(result.attachments.iter().map(file_block));
        Value::Array(blocks)
    };
    let mut block = json!({ "type": "tool_result", "tool_use_id": result.call_id, "content": content });
    if result.is_error {
        block["is_error"] = json!(true);
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    fn result(call_id: &str, output: &str, is_error: bool) -> ChatMessage {
        ChatMessage::Tool(ToolResult {
            call_id: call_id.into(),
            name: "read".into(),
            output: output.into(),
            is_error,
            attachments: vec![],
        })
    }

    #[test]
    fn builds_a_conversation_with_signed_thinking_and_grouped_results() {
        let request = ProviderRequest {
            model: "claude-sonnet-4-5".into(),
            system: vec!["Header.".into(), "Rules.".into(), "Env.".into()],
            messages: vec![
                ChatMessage::User(vec![UserContent::Text("Read a and b".into())]),
                ChatMessage::Assistant(vec![
                    AssistantContent::Reasoning {
                        text: "Two reads.".into(),
                        metadata: Some(json!({ "anthropic": { "signature": "sig==" } })),
                    },
                    AssistantContent::Reasoning {
                        text: String::new(),
                        metadata: Some(json!({ "anthropic": { "redacted_data": "opaque" } })),
                    },
                    AssistantContent::Text { text: String::new(), metadata: None },
                    AssistantContent::ToolCall {
                        call_id: "toolu_a".into(),
                        name: "read".into(),
                        input: json!({ "path": "a" }),
                        metadata: None,
                    },
                    AssistantContent::ToolCall {
                        call_id: "toolu_b".into(),
                        name: "read".into(),
                        input: json!({ "path": "b" }),
                        metadata: None,
                    },
                ]),
                result("toolu_a", "A", false),
                result("toolu_b", "no such file", true),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({ "type": "object" }),
            }],
            tool_choice: ToolChoice::Required,
            max_output_tokens: Some(4096),
            temperature: None,
            top_p: None,
            tool_call_text: Default::default(),
            session_id: None,
            reasoning: None,
            cache: None,
        };
        assert_eq!(
            build_body(&request),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 4096,
                "system": [
                    { "type": "text", "text": "Header.", "cache_control": { "type": "ephemeral" } },
                    { "type": "text", "text": "Rules.", "cache_control": { "type": "ephemeral" } },
                    { "type": "text", "text": "Env." },
                ],
                "messages": [
                    { "role": "user", "content": [{ "type": "text", "text": "Read a and b" }] },
                    {
                        "role": "assistant",
                        "content": [
                            { "type": "thinking", "thinking": "Two reads.", "signature": "sig==" },
                            { "type": "redacted_thinking", "data": "opaque" },
                            { "type": "tool_use", "id": "toolu_a", "name": "read", "input": { "path": "a" } },
                            {
                                "type": "tool_use",
                                "id": "toolu_b",
                                "name": "read",
                                "input": { "path": "b" },
                                "cache_control": { "type": "ephemeral" },
                            },
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            { "type": "tool_result", "tool_use_id": "toolu_a", "content": "A" },
                            {
                                "type": "tool_result",
                                "tool_use_id": "toolu_b",
                                "content": "no such file",
                                "is_error": true,
                                "cache_control": { "type": "ephemeral" },
                            },
                        ],
                    },
                ],
                "tools": [{ "name": "read", "description": "Read a file", "input_schema": { "type": "object" } }],
                "tool_choice": { "type": "any" },
                "stream": true,
            })
        );
    }

    #[test]
    fn unsigned_reasoning_is_dropped_and_media_is_base64() {
        let request = ProviderRequest {
            messages: vec![
                ChatMessage::User(vec![UserContent::File(FileContent {
                    mime: "image/png".into(),
                    url: "data:image/png;base64,AAAA".into(),
                    filename: None,
                })]),
                ChatMessage::Assistant(vec![
                    AssistantContent::Reasoning { text: "from another model".into(), metadata: None },
                    AssistantContent::Text { text: "ok".into(), metadata: None },
                ]),
            ],
            ..Default::default()
        };
        let body = build_body(&request);
        assert_eq!(
            body["messages"][0]["content"][0],
            json!({
                "type": "image",
                "source": { "type": "base64", "media_type": "image/png", "data": "AAAA" },
                "cache_control": { "type": "ephemeral" },
            })
        );
        assert_eq!(
            body["messages"][1]["content"],
            json!([{ "type": "text", "text": "ok", "cache_control": { "type": "ephemeral" } }])
        );
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
    }
}
