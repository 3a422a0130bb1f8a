//! Request body for Anthropic Messages (`POST {base_url}/messages`): system blocks, alternating
//! messages (consecutive results grouped in one user message), signed thinking passed back untouched,
//! and prompt-cache markers on the first 2 system blocks and the last 2 messages (reference §7.5).

use serde_json::{Map, Value, json};

use super::decode::METADATA_KEY;
use crate::media::{self, MediaKind};
use crate::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, ToolChoice, ToolResult, UserContent,
};

/// `max_tokens` is required by the API; used when the request sets no limit.
pub const DEFAULT_MAX_TOKENS: u64 = 8_192;

/// How many system blocks and trailing messages get a cache marker (4 in all, the API's maximum).
const CACHED_SYSTEM_BLOCKS: usize = 2;
const CACHED_MESSAGES: usize = 2;

/// Builds the streaming request body.
pub fn build_body(request: &ProviderRequest) -> Value {
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
    body.insert("messages".into(), Value::Array(messages(&request.messages)));
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
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

fn messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, blocks) = match message {
            ChatMessage::User(parts) => ("user", parts.iter().map(user_block).collect()),
            ChatMessage::Assistant(parts) => {
                ("assistant", parts.iter().filter_map(assistant_block).collect())
            }
            ChatMessage::Tool(result) => ("user", vec![tool_result(result)]),
        };
        if blocks.is_empty() {
            continue;
        }
        // The API wants roles to alternate: consecutive results (and a user message after them) share
        // one user message.
        match out.last_mut() {
            Some((last, content)) if *last == role => content.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    let count = out.len();
    for (role_index, (_, content)) in out.iter_mut().enumerate() {
        if role_index + CACHED_MESSAGES >= count {
            // Thinking blocks cannot carry a cache marker: mark the last block that can.
            if let Some(block) = content.iter_mut().rev().find(|b| !is_thinking(b)) {
                block["cache_control"] = ephemeral();
            }
        }
    }
    out.into_iter().map(|(role, content)| json!({ "role": role, "content": content })).collect()
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
        MediaKind::Other => json!({ "type": "text", "text": media::placeholder(file) }),
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
            session_id: None,
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
