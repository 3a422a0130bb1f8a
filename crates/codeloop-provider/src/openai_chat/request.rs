//! Request body for OpenAI Chat Completions (`POST {base_url}/chat/completions`), shaped to be accepted
//! by OpenAI and the compatible servers alike (one system message, `role: tool` results, media from
//! tool results moved into a user message since tool messages take text only).

use serde_json::{Map, Value, json};

use super::decode::REASONING_CONTENT_KEY;
use crate::encode::{Memo, fresh, splice};
use crate::media::{self, MediaKind};
use crate::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, ToolChoice, ToolResult, UserContent,
};
use crate::{Endpoint, WireApi};

/// The text that introduces media moved out of tool results (reference §7).
pub(crate) const TOOL_MEDIA_NOTE: &str = "Attached media from tool result:";

/// The field that carries the output limit: `max_completion_tokens` for OpenAI itself and for its
/// reasoning model ids anywhere (they reject `max_tokens`), else `max_tokens`, which compatible servers
/// understand.
fn max_tokens_field(endpoint: Endpoint, model: &str) -> &'static str {
    let model = model.rsplit('/').next().unwrap_or(model);
    let reasoning_model = model.starts_with("gpt-5")
        || model.strip_prefix('o').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    if endpoint == Endpoint::OpenAi || reasoning_model { "max_completion_tokens" } else { "max_tokens" }
}

/// Builds the streaming request body.
pub fn build_body(request: &ProviderRequest, endpoint: Endpoint) -> Value {
    let messages = messages(request, |_, message| own_items(message), |item| item);
    Value::Object(body(request, endpoint, Value::Array(messages)))
}

/// The body as bytes, reusing the memo's encoding of messages an earlier request of the run sent:
/// byte for byte `serde_json::to_vec(&build_body(..))`.
pub(crate) fn encode(
    request: &ProviderRequest,
    endpoint: Endpoint,
    memo: &mut Memo,
    owner: (WireApi, &str, &str),
) -> Result<Vec<u8>, serde_json::Error> {
    memo.refresh(owner, &request.messages, own_items);
    let memo = &*memo;
    let messages = messages(request, move |index, _| memo.items(index).collect(), fresh);
    splice(&body(request, endpoint, Value::Null), "messages", &messages)
}

/// Every field of the body, with `messages` as given.
fn body(request: &ProviderRequest, endpoint: Endpoint, messages: Value) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), messages);
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": { "name": t.name, "description": t.description, "parameters": t.parameters },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match request.tool_choice {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "required",
        };
        body.insert("tool_choice".into(), json!(choice));
    }
    if let Some(max) = request.max_output_tokens {
        body.insert(max_tokens_field(endpoint, &request.model).into(), json!(max));
    }
    if let (Endpoint::OpenAi, Some(session)) = (endpoint, &request.session_id) {
        // Routes a session's requests to the same prompt cache.
        body.insert("prompt_cache_key".into(), json!(session));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), crate::request::sampling(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), crate::request::sampling(top_p));
    }
    if let Some(crate::Reasoning::Effort(level)) = &request.reasoning {
        body.insert("reasoning_effort".into(), json!(level));
    }
    body
}

/// The wire messages: the system message, each message's own items (from `own`, by index), and media
/// moved out of tool results; `lift` turns the items made here into the output type.
fn messages<T>(
    request: &ProviderRequest,
    mut own: impl FnMut(usize, &ChatMessage) -> Vec<T>,
    lift: impl Fn(Value) -> T,
) -> Vec<T> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    // One system message: several are fine for OpenAI, but some compatible servers' chat templates
    // accept only one, first.
    let system: Vec<&str> = request.system.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    if !system.is_empty() {
        out.push(lift(json!({ "role": "system", "content": system.join("\n\n") })));
    }
    let mut moved_media: Vec<Value> = Vec::new();
    for (i, message) in request.messages.iter().enumerate() {
        out.extend(own(i, message));
        if let ChatMessage::Tool(result) = message {
            moved_media.extend(result.attachments.iter().map(file_part));
            let run_ends = !matches!(request.messages.get(i + 1), Some(ChatMessage::Tool(_)));
            if run_ends && !moved_media.is_empty() {
                let mut content = vec![json!({ "type": "text", "text": TOOL_MEDIA_NOTE })];
                content.append(&mut moved_media);
                out.push(lift(json!({ "role": "user", "content": content })));
            }
        }
    }
    out
}

/// What one message is on the wire by itself (none for an assistant message with nothing to send).
fn own_items(message: &ChatMessage) -> Vec<Value> {
    match message {
        ChatMessage::User(parts) => vec![json!({ "role": "user", "content": user_content(parts) })],
        ChatMessage::Assistant(parts) => assistant(parts).into_iter().collect(),
        ChatMessage::Tool(result) => vec![tool_message(result)],
    }
}

/// A lone text part is sent as a plain string (what every server accepts), anything else as parts.
fn user_content(parts: &[UserContent]) -> Value {
    if let [UserContent::Text(text)] = parts {
        return json!(text);
    }
    let parts = parts
        .iter()
        .map(|part| match part {
            UserContent::Text(text) => json!({ "type": "text", "text": text }),
            UserContent::File(file) => file_part(file),
        })
        .collect();
    Value::Array(parts)
}

fn file_part(file: &FileContent) -> Value {
    match media::kind(file) {
        MediaKind::Image => json!({ "type": "image_url", "image_url": { "url": file.url } }),
        MediaKind::Pdf if file.url.starts_with("data:") => json!({
            "type": "file",
            "file": { "filename": file.filename.as_deref().unwrap_or("file.pdf"), "file_data": file.url },
        }),
        MediaKind::Pdf => json!({ "type": "text", "text": media::placeholder(file) }),
        MediaKind::Other => json!({ "type": "text", "text": media::as_text(file) }),
    }
}

fn assistant(parts: &[AssistantContent]) -> Option<Value> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for part in parts {
        match part {
            AssistantContent::Text { text: t, .. } => text.push_str(t),
            AssistantContent::Reasoning { text: t, metadata } => {
                // Sent back only to servers that produced it as `reasoning_content`.
                if metadata.as_ref().is_some_and(|m| m.get(REASONING_CONTENT_KEY).is_some()) {
                    reasoning.push_str(t);
                }
            }
            AssistantContent::ToolCall { call_id, name, input, .. } => calls.push(json!({
                "id": call_id,
                "type": "function",
                "function": { "name": name, "arguments": input.to_string() },
            })),
        }
    }
    if text.is_empty() && calls.is_empty() {
        return None;
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), if text.is_empty() { Value::Null } else { json!(text) });
    if !reasoning.is_empty() {
        message.insert("reasoning_content".into(), json!(reasoning));
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Some(Value::Object(message))
}

fn tool_message(result: &ToolResult) -> Value {
    json!({ "role": "tool", "tool_call_id": result.call_id, "content": result.output })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    #[test]
    fn max_tokens_field_follows_endpoint_and_model() {
        assert_eq!(max_tokens_field(Endpoint::OpenAi, "gpt-4o"), "max_completion_tokens");
        assert_eq!(max_tokens_field(Endpoint::Compatible, "o4-mini"), "max_completion_tokens");
        assert_eq!(max_tokens_field(Endpoint::Compatible, "openai/gpt-5"), "max_completion_tokens");
        assert_eq!(max_tokens_field(Endpoint::Compatible, "deepseek-chat"), "max_tokens");
        assert_eq!(max_tokens_field(Endpoint::Compatible, "openai/gpt-oss-20b"), "max_tokens");
    }

    #[test]
    fn openai_gets_the_session_as_prompt_cache_key() {
        let request = ProviderRequest { session_id: Some("ses_1".into()), ..Default::default() };
        assert_eq!(build_body(&request, Endpoint::OpenAi)["prompt_cache_key"], "ses_1");
        assert!(build_body(&request, Endpoint::Compatible).get("prompt_cache_key").is_none());
    }

    #[test]
    fn builds_a_conversation_with_a_tool_round_trip() {
        let request = ProviderRequest {
            model: "deepseek-reasoner".into(),
            system: vec!["You are terse.".into(), "Project rules.".into()],
            messages: vec![
                ChatMessage::User(vec![UserContent::Text("Read a.txt".into())]),
                ChatMessage::Assistant(vec![
                    AssistantContent::Reasoning {
                        text: "Need the file.".into(),
                        metadata: Some(json!({ "openai_chat": { "field": "reasoning_content" } })),
                    },
                    AssistantContent::Text { text: "Reading it.".into(), metadata: None },
                    AssistantContent::ToolCall {
                        call_id: "call_1".into(),
                        name: "read".into(),
                        input: json!({ "path": "a.txt" }),
                        metadata: None,
                    },
                ]),
                ChatMessage::Tool(ToolResult {
                    call_id: "call_1".into(),
                    name: "read".into(),
                    output: "hello".into(),
                    is_error: false,
                    attachments: vec![FileContent {
                        mime: "image/png".into(),
                        url: "data:image/png;base64,AAAA".into(),
                        filename: Some("a.png".into()),
                    }],
                }),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
            }],
            tool_choice: ToolChoice::Auto,
            max_output_tokens: Some(1000),
            temperature: None,
            top_p: None,
            tool_call_text: Default::default(),
            session_id: None,
            reasoning: None,
            cache: None,
        };
        let body = build_body(&request, Endpoint::Compatible);
        assert_eq!(
            body,
            json!({
                "model": "deepseek-reasoner",
                "messages": [
                    { "role": "system", "content": "You are terse.\n\nProject rules." },
                    { "role": "user", "content": "Read a.txt" },
                    {
                        "role": "assistant",
                        "content": "Reading it.",
                        "reasoning_content": "Need the file.",
                        "tool_calls": [{
                            "id": "call_1",
                            "type": "function",
                            "function": { "name": "read", "arguments": "{\"path\":\"a.txt\"}" },
                        }],
                    },
                    { "role": "tool", "tool_call_id": "call_1", "content": "hello" },
                    {
                        "role": "user",
                        "content": [
                            { "type": "text", "text": "Attached media from tool result:" },
                            { "type": "image_url", "image_url": { "url": "data:image/png;base64,AAAA" } },
                        ],
                    },
                ],
                "stream": true,
                "stream_options": { "include_usage": true },
                "tools": [{
                    "type": "function",
                    "function": {
                        "name": "read",
                        "description": "Read a file",
                        "parameters": { "type": "object", "properties": { "path": { "type": "string" } } },
                    },
                }],
                "tool_choice": "auto",
                "max_tokens": 1000,
            })
        );
    }

    #[test]
    fn media_is_moved_after_the_whole_run_of_tool_results() {
        let image =
            FileContent { mime: "image/png".into(), url: "data:image/png;base64,AA".into(), filename: None };
        let result = |id: &str, attachments: Vec<FileContent>| {
            ChatMessage::Tool(ToolResult {
                call_id: id.into(),
                name: "read".into(),
                output: "ok".into(),
                is_error: false,
                attachments,
            })
        };
        let request = ProviderRequest {
            messages: vec![result("a", vec![image.clone()]), result("b", vec![image])],
            ..Default::default()
        };
        let roles: Vec<_> = messages(&request, |_, m| own_items(m), |item| item)
            .iter()
            .map(|m| m["role"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(roles, ["tool", "tool", "user"]);
    }
}
