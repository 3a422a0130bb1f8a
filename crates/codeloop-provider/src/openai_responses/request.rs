//! Request body for the OpenAI Responses API (`POST {base_url}/responses`), stateless: `store: false`,
//! so reasoning is carried back as encrypted content and no item ids are referenced.

use serde_json::{Map, Value, json};

use super::decode::METADATA_KEY;
use crate::encode::{Memo, splice};
use crate::media::{self, MediaKind};
use crate::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, ToolChoice, ToolResult, UserContent,
};
use crate::{Endpoint, WireApi};

/// OpenAI models that reject `include: ["reasoning.encrypted_content"]` ("Encrypted content is not
/// supported with this model"): the non-reasoning families.
fn rejects_encrypted_reasoning(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    ["gpt-4", "gpt-3.5", "chatgpt-4o"].iter().any(|prefix| model.starts_with(prefix))
}

/// Builds the streaming request body.
pub fn build_body(request: &ProviderRequest, endpoint: Endpoint) -> Value {
    let input = request.messages.iter().flat_map(own_items).collect();
    Value::Object(body(request, endpoint, Value::Array(input)))
}

/// The body as bytes, reusing the memo's encoding of messages an earlier request of the run sent:
/// byte for byte `serde_json::to_vec(&build_body(..))`. Every input item comes from one message.
pub(crate) fn encode(
    request: &ProviderRequest,
    endpoint: Endpoint,
    memo: &mut Memo,
    owner: (WireApi, &str, &str),
) -> Result<Vec<u8>, serde_json::Error> {
    memo.refresh(owner, &request.messages, own_items);
    let memo = &*memo;
    let input: Vec<_> = (0..request.messages.len()).flat_map(move |index| memo.items(index)).collect();
    splice(&body(request, endpoint, Value::Null), "input", &input)
}

/// Every field of the body, with `input` as given.
fn body(request: &ProviderRequest, endpoint: Endpoint, input: Value) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let instructions: Vec<&str> =
        request.system.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    body.insert("input".into(), input);
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": false,
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
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    if !rejects_encrypted_reasoning(&request.model) {
        body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_output_tokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), crate::request::sampling(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), crate::request::sampling(top_p));
    }
    if let Some(reasoning @ crate::Reasoning::Effort(level)) = &request.reasoning {
        // A summary makes the reasoning visible as reasoning parts; `none` has nothing to summarise.
        let value = if reasoning.thinks() {
            json!({ "effort": level, "summary": "auto" })
        } else {
            json!({ "effort": level })
        };
        body.insert("reasoning".into(), value);
    }
    if let (Endpoint::OpenAi, Some(session)) = (endpoint, &request.session_id) {
        // Routes a session's requests to the same prompt cache.
        body.insert("prompt_cache_key".into(), json!(session));
    }
    body
}

/// The input items of one message.
fn own_items(message: &ChatMessage) -> Vec<Value> {
    match message {
        ChatMessage::User(parts) => {
            let content: Vec<Value> = parts
                .iter()
                .map(|part| match part {
                    UserContent::Text(text) => json!({ "type": "input_text", "text": text }),
                    UserContent::File(file) => file_item(file),
                })
                .collect();
            vec![json!({ "role": "user", "content": content })]
        }
        ChatMessage::Assistant(parts) => {
            let mut items = Vec::new();
            assistant(parts, &mut items);
            items
        }
        ChatMessage::Tool(result) => vec![tool_output(result)],
    }
}

fn file_item(file: &FileContent) -> Value {
    match media::kind(file) {
        MediaKind::Image => json!({ "type": "input_image", "image_url": file.url }),
        MediaKind::Pdf if file.url.starts_with("data:") => json!({
            "type": "input_file",
            "filename": file.filename.as_deref().unwrap_or("file.pdf"),
            "file_data": file.url,
        }),
        MediaKind::Pdf if file.url.starts_with("http") => {
            json!({ "type": "input_file", "file_url": file.url })
        }
        MediaKind::Pdf => json!({ "type": "input_text", "text": media::placeholder(file) }),
        MediaKind::Other => json!({ "type": "input_text", "text": media::as_text(file) }),
    }
}

fn assistant(parts: &[AssistantContent], items: &mut Vec<Value>) {
    // Summary parts of one reasoning item arrive as several reasoning parts with the same item id.
    let mut reasoning: Option<Reasoning> = None;
    for part in parts {
        if let AssistantContent::Reasoning { text, metadata } = part {
            let meta = metadata.as_ref().and_then(|m| m.get(METADATA_KEY));
            let item_id = meta.and_then(|m| m.get("item_id")).and_then(Value::as_str).unwrap_or_default();
            let encrypted = meta.and_then(|m| m.get("encrypted_content")).and_then(Value::as_str);
            match &mut reasoning {
                Some(r) if r.item_id == item_id => r.push(text, encrypted),
                _ => {
                    flush_reasoning(reasoning.take(), items);
                    let mut r =
                        Reasoning { item_id: item_id.to_owned(), summary: Vec::new(), encrypted: None };
                    r.push(text, encrypted);
                    reasoning = Some(r);
                }
            }
            continue;
        }
        flush_reasoning(reasoning.take(), items);
        match part {
            AssistantContent::Text { text, .. } if !text.is_empty() => items.push(json!({
                "role": "assistant",
                "content": [{ "type": "output_text", "text": text }],
            })),
            AssistantContent::ToolCall { call_id, name, input, .. } => items.push(json!({
                "type": "function_call",
                "call_id": call_id,
                "name": name,
                "arguments": input.to_string(),
            })),
            _ => {}
        }
    }
    flush_reasoning(reasoning, items);
}

struct Reasoning {
    item_id: String,
    summary: Vec<String>,
    encrypted: Option<String>,
}

impl Reasoning {
    fn push(&mut self, text: &str, encrypted: Option<&str>) {
        if !text.is_empty() {
            self.summary.push(text.to_owned());
        }
        if let Some(encrypted) = encrypted {
            self.encrypted = Some(encrypted.to_owned());
        }
    }
}

/// A reasoning item can only be sent back with its encrypted content (there is no stored item to
/// refer to); reasoning without it is dropped.
fn flush_reasoning(reasoning: Option<Reasoning>, items: &mut Vec<Value>) {
    let Some(Reasoning { summary, encrypted: Some(encrypted), .. }) = reasoning else { return };
    let summary: Vec<Value> =
        summary.iter().map(|text| json!({ "type": "summary_text", "text": text })).collect();
    items.push(json!({ "type": "reasoning", "summary": summary, "encrypted_content": encrypted }));
}

fn tool_output(result: &ToolResult) -> Value {
    let output = if result.attachments.is_empty() {
        json!(result.output)
    } else {
        let mut content = vec![json!({ "type": "input_text", "text": result.output })];
        content.extend(result.attachments.iter().map(file_item));
        Value::Array(content)
    };
    json!({ "type": "function_call_output", "call_id": result.call_id, "output": output })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    #[test]
    fn builds_a_conversation_with_a_tool_round_trip_and_encrypted_reasoning() {
        let reasoning = |text: &str, encrypted: Option<&str>| AssistantContent::Reasoning {
            text: text.into(),
            metadata: Some(match encrypted {
                Some(e) => json!({ "openai": { "item_id": "rs_1", "encrypted_content": e } }),
                None => json!({ "openai": { "item_id": "rs_1" } }),
            }),
        };
        let request = ProviderRequest {
            model: "gpt-5".into(),
            system: vec!["You are terse.".into()],
            messages: vec![
                ChatMessage::User(vec![UserContent::Text("Read a.txt".into())]),
                ChatMessage::Assistant(vec![
                    reasoning("First part.", None),
                    reasoning("Second part.", Some("gAAAA-secret")),
                    AssistantContent::Text { text: "Reading it.".into(), metadata: None },
                    AssistantContent::ToolCall {
                        call_id: "call_1".into(),
                        name: "read".into(),
                        input: json!({ "path": "a.txt" }),
                        metadata: Some(json!({ "openai": { "item_id": "fc_1" } })),
                    },
                ]),
                ChatMessage::Tool(ToolResult {
                    call_id: "call_1".into(),
                    name: "read".into(),
                    output: "hello".into(),
                    is_error: false,
                    attachments: vec![],
                }),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({ "type": "object" }),
            }],
            tool_choice: ToolChoice::Auto,
            max_output_tokens: Some(2000),
            temperature: None,
            top_p: None,
            tool_call_text: Default::default(),
            session_id: None,
            reasoning: None,
            cache: None,
        };
        assert_eq!(
            build_body(&request, Endpoint::Compatible),
            json!({
                "model": "gpt-5",
                "instructions": "You are terse.",
                "input": [
                    { "role": "user", "content": [{ "type": "input_text", "text": "Read a.txt" }] },
                    {
                        "type": "reasoning",
                        "summary": [
                            { "type": "summary_text", "text": "First part." },
                            { "type": "summary_text", "text": "Second part." },
                        ],
                        "encrypted_content": "gAAAA-secret",
                    },
                    { "role": "assistant", "content": [{ "type": "output_text", "text": "Reading it." }] },
                    { "type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"path\":\"a.txt\"}" },
                    { "type": "function_call_output", "call_id": "call_1", "output": "hello" },
                ],
                "tools": [{
                    "type": "function",
                    "name": "read",
                    "description": "Read a file",
                    "parameters": { "type": "object" },
                    "strict": false,
                }],
                "tool_choice": "auto",
                "stream": true,
                "store": false,
                "include": ["reasoning.encrypted_content"],
                "max_output_tokens": 2000,
            })
        );
    }

    #[test]
    fn reasoning_without_encrypted_content_is_not_sent_and_old_models_skip_include() {
        let request = ProviderRequest {
            model: "gpt-4.1".into(),
            messages: vec![ChatMessage::Assistant(vec![AssistantContent::Reasoning {
                text: "thinking".into(),
                metadata: Some(json!({ "openai": { "item_id": "rs_1" } })),
            }])],
            ..Default::default()
        };
        let body = build_body(&request, Endpoint::Compatible);
        assert_eq!(body["input"], json!([]));
        assert!(body.get("include").is_none());
    }

    #[test]
    fn tool_result_media_stays_in_the_output() {
        let result = ToolResult {
            call_id: "c".into(),
            name: "read".into(),
            output: "an image".into(),
            is_error: false,
            attachments: vec![FileContent {
                mime: "image/png".into(),
                url: "data:image/png;base64,AA".into(),
                filename: None,
            }],
        };
        assert_eq!(
            tool_output(&result)["output"],
            json!([
                { "type": "input_text", "text": "an image" },
                { "type": "input_image", "image_url": "data:image/png;base64,AA" },
            ])
        );
    }
}
