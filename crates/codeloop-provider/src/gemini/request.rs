//! Request body for Gemini `streamGenerateContent`: system blocks as `systemInstruction`, `user`/`model`
//! contents (consecutive tool results grouped in one user content), signed thoughts and function-call
//! signatures passed back where they came from, and tool schemas trimmed to what Gemini accepts.
//! The model is named in the URL, not the body.
//!
//! With a run's memo, each message's own parts are reused from the step that first sent them, unless
//! the ids known from the rest of the request changed what they say; the grouping into contents is made
//! fresh every step.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::decode::METADATA_KEY;
use super::schema;
use crate::WireApi;
use crate::encode::{Memo, runs, write_elements, write_spliced};
use crate::media::{self, MediaKind};
use crate::{
    AssistantContent, ChatMessage, FileContent, ProviderRequest, ToolChoice, ToolResult, UserContent,
};

/// Google's documented stand-in signature: Gemini 3 rejects (400) a replayed function call without a
/// `thoughtSignature`, which is what a call made by another model, or one whose metadata was lost,
/// looks like. Only the first call of a step needs one.
const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// Builds the streaming request body.
pub fn build_body(request: &ProviderRequest) -> Value {
    Value::Object(body(request, Value::Array(contents(request))))
}

/// The body as bytes, reusing the memo's encoding of the parts of messages an earlier request of the
/// run sent: byte for byte `serde_json::to_vec(&build_body(..))`. The contents around the parts are
/// built fresh.
pub(crate) fn encode(
    request: &ProviderRequest,
    memo: &mut Memo,
    owner: (WireApi, &str, &str),
) -> Result<Vec<u8>, serde_json::Error> {
    let facts = Facts::of(request);
    memo.refresh_with(owner, &request.messages, |m| facts.context(m), |m| facts.own_parts(m));
    let memo = &*memo;
    let runs = runs(&request.messages, role, |index| memo.is_silent(index));
    let mut out = Vec::with_capacity(memo.size() + 4096);
    // Every run of a role has the same content around its parts.
    let user = content(Role::User, Value::Null);
    let model = content(Role::Model, Value::Null);
    write_spliced(&mut out, &body(request, Value::Null), "contents", |out| {
        for (position, (role, run)) in runs.iter().enumerate() {
            if position > 0 {
                out.push(b',');
            }
            let wrapper = match role {
                Role::User => &user,
                Role::Model => &model,
            };
            write_spliced(out, wrapper, "parts", |out| {
                write_elements(out, run.clone().flat_map(|index| memo.serialised(index)));
                Ok(())
            })?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// Every field of the body, with `contents` as given.
fn body(request: &ProviderRequest, contents: Value) -> Map<String, Value> {
    let mut body = Map::new();
    let system: Vec<Value> =
        request.system.iter().filter(|s| !s.is_empty()).map(|text| json!({ "text": text })).collect();
    if !system.is_empty() {
        body.insert("systemInstruction".into(), json!({ "parts": system }));
    }
    body.insert("contents".into(), contents);
    if !request.tools.is_empty() {
        let declarations: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let mut declaration = json!({ "name": tool.name, "description": tool.description });
                if let Some(parameters) = schema::parameters(&tool.parameters) {
                    declaration["parameters"] = parameters;
                }
                declaration
            })
            .collect();
        body.insert("tools".into(), json!([{ "functionDeclarations": declarations }]));
        let mode = match request.tool_choice {
            ToolChoice::Auto => "AUTO",
            ToolChoice::None => "NONE",
            ToolChoice::Required => "ANY",
        };
        body.insert("toolConfig".into(), json!({ "functionCallingConfig": { "mode": mode } }));
    }
    let mut generation = Map::new();
    if let Some(max) = request.max_output_tokens {
        generation.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(temperature) = request.temperature {
        generation.insert("temperature".into(), crate::request::sampling(temperature));
    }
    if let Some(top_p) = request.top_p {
        generation.insert("topP".into(), crate::request::sampling(top_p));
    }
    if let Some(reasoning) = &request.reasoning {
        generation.insert("thinkingConfig".into(), thinking_config(reasoning));
    }
    if !generation.is_empty() {
        body.insert("generationConfig".into(), Value::Object(generation));
    }
    body
}

/// `thinkingLevel` (Gemini 3) or `thinkingBudget` (2.5; 0 turns thinking off), with the thoughts
/// included so they show as reasoning parts.
fn thinking_config(reasoning: &crate::Reasoning) -> Value {
    let mut config = match reasoning {
        crate::Reasoning::Effort(level) => json!({ "thinkingLevel": level }),
        crate::Reasoning::Budget(tokens) => json!({ "thinkingBudget": tokens }),
    };
    if reasoning.thinks() {
        config["includeThoughts"] = json!(true);
    }
    config
}

/// `gemini-3-pro-preview`, `models/gemini-3.1-pro`: the models that validate replayed signatures.
fn validates_signatures(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    model.strip_prefix("gemini-3").is_some_and(|rest| rest.starts_with(['.', '-']))
}

/// Results of one step answer together, in one user content (with a user message after them).
fn contents(request: &ProviderRequest) -> Vec<Value> {
    let facts = Facts::of(request);
    let mut parts: Vec<Vec<Value>> = request.messages.iter().map(|m| facts.own_parts(m)).collect();
    let runs = runs(&request.messages, role, |index| parts[index].is_empty());
    let mut out = Vec::with_capacity(runs.len());
    for (role, run) in runs {
        let run_parts = parts[run].iter_mut().flat_map(std::mem::take).collect();
        out.push(Value::Object(content(role, Value::Array(run_parts))));
    }
    out
}

fn content(role: Role, parts: Value) -> Map<String, Value> {
    let mut content = Map::new();
    content.insert("role".into(), json!(role.as_str()));
    content.insert("parts".into(), parts);
    content
}

#[derive(Clone, Copy, PartialEq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
enum Role {
    User,
    Model,
}

impl Role {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

fn role(message: &ChatMessage) -> Role {
    match message {
        ChatMessage::User(_) | ChatMessage::Tool(_) => Role::User,
        ChatMessage::Assistant(_) => Role::Model,
    }
}

/// What the parts of a message depend on besides the message: the model, and the call ids that came
/// from Gemini anywhere in the request.
struct Facts<'r> {
    provider_ids: HashSet<&'r str>,
    signatures: bool,
}

impl<'r> Facts<'r> {
    fn of(request: &'r ProviderRequest) -> Self {
        Self {
            provider_ids: provider_ids(&request.messages),
            signatures: validates_signatures(&request.model),
        }
    }

    /// What one message's parts are (none for an assistant message with nothing to send).
    fn own_parts(&self, message: &ChatMessage) -> Vec<Value> {
        match message {
            ChatMessage::User(parts) => parts.iter().map(user_part).collect(),
            ChatMessage::Assistant(parts) => model_parts(parts, &self.provider_ids, self.signatures),
            ChatMessage::Tool(result) => {
                tool_result(result, self.provider_ids.contains(result.call_id.as_str()))
            }
        }
    }

    /// What the message's parts take from other messages: whether each of its calls (or its result)
    /// is sent with its id. (The model is part of the memo's owner.)
    fn context(&self, message: &ChatMessage) -> Vec<bool> {
        let known = |call_id: &String| self.provider_ids.contains(call_id.as_str());
        match message {
            ChatMessage::User(_) => Vec::new(),
            ChatMessage::Assistant(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    AssistantContent::ToolCall { call_id, .. } => Some(known(call_id)),
                    _ => None,
                })
                .collect(),
            ChatMessage::Tool(result) => vec![known(&result.call_id)],
        }
    }
}

/// Calls whose id came from Gemini (the decoder keeps it in the metadata): only those ids are sent back,
/// on the call and on its response; ids generated by the decoder mean nothing to Gemini.
fn provider_ids(messages: &[ChatMessage]) -> HashSet<&str> {
    let calls = messages.iter().filter_map(|m| match m {
        ChatMessage::Assistant(parts) => Some(parts),
        _ => None,
    });
    calls
        .flatten()
        .filter_map(|part| match part {
            AssistantContent::ToolCall { call_id, metadata, .. } => {
                let id = metadata.as_ref()?.get(METADATA_KEY)?.get("id")?.as_str()?;
                (id == call_id).then_some(call_id.as_str())
            }
            _ => None,
        })
        .collect()
}

fn signature(metadata: Option<&Value>) -> Option<&str> {
    metadata?.get(METADATA_KEY)?.get("thought_signature")?.as_str()
}

fn user_part(part: &UserContent) -> Value {
    match part {
        UserContent::Text(text) => json!({ "text": text }),
        UserContent::File(file) => file_part(file),
    }
}

/// Inline base64 for `data:` URLs, a file reference for other URLs; kinds Gemini cannot read become a
/// placeholder.
fn file_part(file: &FileContent) -> Value {
    let mime = file.mime.to_ascii_lowercase();
    let readable = media::kind(file) != MediaKind::Other
        || ["audio/", "video/", "text/"].iter().any(|prefix| mime.starts_with(prefix));
    if !readable {
        return json!({ "text": media::placeholder(file) });
    }
    match media::base64_data(&file.url) {
        Some((declared, data)) => {
            let mime = if declared.is_empty() { file.mime.as_str() } else { declared };
            json!({ "inlineData": { "mimeType": mime, "data": data } })
        }
        None => json!({ "fileData": { "mimeType": file.mime, "fileUri": file.url } }),
    }
}

fn model_parts(parts: &[AssistantContent], provider_ids: &HashSet<&str>, validates: bool) -> Vec<Value> {
    let mut out = Vec::with_capacity(parts.len());
    let mut first_call = true;
    for part in parts {
        match part {
            // Gemini rejects empty text parts.
            AssistantContent::Text { text, .. } if text.is_empty() => {}
            AssistantContent::Text { text, .. } => out.push(json!({ "text": text })),
            AssistantContent::Reasoning { text, metadata } => {
                // Gemini reads nothing from unsigned thought text, so only signed thoughts go back.
                if let Some(signature) = signature(metadata.as_ref()) {
                    out.push(json!({ "text": text, "thought": true, "thoughtSignature": signature }));
                }
            }
            AssistantContent::ToolCall { call_id, name, input, metadata } => {
                // `args` is a protobuf Struct: an object.
                let args = if input.is_object() { input.clone() } else { json!({}) };
                let mut call = json!({ "name": name, "args": args });
                if provider_ids.contains(call_id.as_str()) {
                    call["id"] = json!(call_id);
                }
                let mut part = json!({ "functionCall": call });
                match signature(metadata.as_ref()) {
                    Some(signature) => part["thoughtSignature"] = json!(signature),
                    None if validates && first_call => part["thoughtSignature"] = json!(SKIP_SIGNATURE),
                    None => {}
                }
                first_call = false;
                out.push(part);
            }
        }
    }
    out
}

/// A `functionResponse` (Gemini's convention: the output under `content`, a failure under `error`),
/// followed by the media the tool produced.
fn tool_result(result: &ToolResult, with_id: bool) -> Vec<Value> {
    let key = if result.is_error { "error" } else { "content" };
    let mut response = json!({ "name": result.name, "response": { key: result.output } });
    if with_id {
        response["id"] = json!(result.call_id);
    }
    let mut parts = vec![json!({ "functionResponse": response })];
    parts.extend(result.attachments.iter().map(file_part));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ToolSpec;
    use pretty_assertions::assert_eq;

    fn call(call_id: &str, path: &str, metadata: Option<Value>) -> AssistantContent {
        AssistantContent::ToolCall {
            call_id: call_id.into(),
            name: "read".into(),
            input: json!({ "path": path }),
            metadata,
        }
    }

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
    fn builds_a_conversation_with_signed_reasoning_a_tool_call_and_grouped_results() {
        let request = ProviderRequest {
            model: "gemini-2.5-pro".into(),
            system: vec!["Header.".into(), String::new(), "Env.".into()],
            messages: vec![
                ChatMessage::User(vec![UserContent::Text("Read a and b".into())]),
                ChatMessage::Assistant(vec![
                    AssistantContent::Reasoning {
                        text: "Two reads.".into(),
                        metadata: Some(json!({ "gemini": { "thought_signature": "sig-thought" } })),
                    },
                    AssistantContent::Reasoning { text: "unsigned".into(), metadata: None },
                    AssistantContent::Text { text: String::new(), metadata: None },
                    AssistantContent::Text { text: "Reading.".into(), metadata: None },
                    call(
                        "a1b2c3d4",
                        "a",
                        Some(json!({ "gemini": { "id": "a1b2c3d4", "thought_signature": "sig-call" } })),
                    ),
                    call("call_1", "b", None),
                ]),
                result("a1b2c3d4", "A", false),
                result("call_1", "no such file", true),
                ChatMessage::User(vec![UserContent::Text("Thanks".into())]),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                parameters: json!({
                    "type": "object",
                    "properties": { "path": { "type": "string" } },
                    "required": ["path"],
                    "additionalProperties": false,
                }),
            }],
            tool_choice: ToolChoice::Required,
            max_output_tokens: Some(4096),
            temperature: Some(0.5),
            top_p: None,
            tool_call_text: Default::default(),
            session_id: Some("s".into()),
            reasoning: None,
            cache: None,
        };
        assert_eq!(
            build_body(&request),
            json!({
                "systemInstruction": { "parts": [{ "text": "Header." }, { "text": "Env." }] },
                "contents": [
                    { "role": "user", "parts": [{ "text": "Read a and b" }] },
                    {
                        "role": "model",
                        "parts": [
                            { "text": "Two reads.", "thought": true, "thoughtSignature": "sig-thought" },
                            { "text": "Reading." },
                            {
                                "functionCall": { "name": "read", "args": { "path": "a" }, "id": "a1b2c3d4" },
                                "thoughtSignature": "sig-call",
                            },
                            { "functionCall": { "name": "read", "args": { "path": "b" } } },
                        ],
                    },
                    {
                        "role": "user",
                        "parts": [
                            {
                                "functionResponse": {
                                    "name": "read",
                                    "response": { "content": "A" },
                                    "id": "a1b2c3d4",
                                },
                            },
                            { "functionResponse": { "name": "read", "response": { "error": "no such file" } } },
                            { "text": "Thanks" },
                        ],
                    },
                ],
                "tools": [{
                    "functionDeclarations": [{
                        "name": "read",
                        "description": "Read a file",
                        "parameters": {
                            "type": "object",
                            "properties": { "path": { "type": "string" } },
                            "required": ["path"],
                        },
                    }],
                }],
                "toolConfig": { "functionCallingConfig": { "mode": "ANY" } },
                "generationConfig": { "maxOutputTokens": 4096, "temperature": 0.5 },
            })
        );
    }

    #[test]
    fn gemini_3_gets_a_stand_in_signature_on_an_unsigned_first_call() {
        let messages = vec![ChatMessage::Assistant(vec![call("c0", "a", None), call("c1", "b", None)])];
        let parts = |model: &str| {
            let request =
                ProviderRequest { model: model.into(), messages: messages.clone(), ..Default::default() };
            build_body(&request)["contents"][0]["parts"].clone()
        };
        let gemini3 = parts("gemini-3-pro-preview");
        assert_eq!(gemini3[0]["thoughtSignature"], SKIP_SIGNATURE);
        assert!(gemini3[1].get("thoughtSignature").is_none());
        assert!(parts("gemini-2.5-pro")[0].get("thoughtSignature").is_none());
        assert!(validates_signatures("models/gemini-3.1-pro"));
        assert!(!validates_signatures("gemini-30"));
    }

    #[test]
    fn media_is_inline_or_a_file_reference_and_no_tools_means_no_tool_config() {
        let file = |mime: &str, url: &str| {
            UserContent::File(FileContent { mime: mime.into(), url: url.into(), filename: Some("f".into()) })
        };
        let request = ProviderRequest {
            messages: vec![ChatMessage::User(vec![
                file("image/png", "data:image/png;base64,AAAA"),
                file("application/pdf", "https://example.com/a.pdf"),
                file("application/zip", "data:application/zip;base64,UEs="),
            ])],
            tool_choice: ToolChoice::None,
            ..Default::default()
        };
        let body = build_body(&request);
        assert_eq!(
            body["contents"][0]["parts"],
            json!([
                { "inlineData": { "mimeType": "image/png", "data": "AAAA" } },
                { "fileData": { "mimeType": "application/pdf", "fileUri": "https://example.com/a.pdf" } },
                { "text": "[Attached application/zip: f — not sent: this model's API does not take this kind of file]" },
            ])
        );
        assert!(body.get("toolConfig").is_none() && body.get("generationConfig").is_none());
        assert!(body.get("systemInstruction").is_none());
    }
}
