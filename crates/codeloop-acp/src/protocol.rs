//! The part of the Agent Client Protocol v1 wire format codeloop speaks, as plain serde types.
//!
//! Owns: field names, tags and casing exactly as the ACP schema (`agent-client-protocol-schema` 1.x)
//! defines them, for the methods in [`method`]. Incoming types ignore fields they do not know, so a client
//! on a newer minor version is still understood.
//! Must not: hold behaviour; [`crate::agent`] decides what to send.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this agent speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// JSON-RPC method names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const AUTHENTICATE: &str = "authenticate";
    pub const SESSION_NEW: &str = "session/new";
    pub const SESSION_LOAD: &str = "session/load";
    pub const SESSION_LIST: &str = "session/list";
    pub const SESSION_RESUME: &str = "session/resume";
    pub const SESSION_CLOSE: &str = "session/close";
    pub const SESSION_PROMPT: &str = "session/prompt";
    pub const SESSION_CANCEL: &str = "session/cancel";
    pub const SESSION_SET_MODE: &str = "session/set_mode";
    pub const SESSION_SET_CONFIG_OPTION: &str = "session/set_config_option";
    pub const SESSION_UPDATE: &str = "session/update";
    pub const REQUEST_PERMISSION: &str = "session/request_permission";
    /// Protocol level: the sender no longer needs the answer to one of its requests.
    pub const CANCEL_REQUEST: &str = "$/cancel_request";
}

/// JSON-RPC and ACP error codes.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const REQUEST_CANCELLED: i64 = -32800;
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

// ---------------------------------------------------------------------------------------------------
// initialize

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeRequest {
    pub protocol_version: u16,
    #[serde(default)]
    pub client_capabilities: ClientCapabilities,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientCapabilities {
    #[serde(default)]
    pub session: Option<ClientSessionCapabilities>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientSessionCapabilities {
    /// Present when the client shows `notice` updates.
    #[serde(default)]
    pub notices: Option<Value>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    pub protocol_version: u16,
    pub agent_capabilities: AgentCapabilities,
    pub auth_methods: Vec<Value>,
    pub agent_info: Implementation,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    pub load_session: bool,
    pub prompt_capabilities: PromptCapabilities,
    pub mcp_capabilities: McpCapabilities,
    pub session_capabilities: SessionCapabilities,
}

/// The session methods beyond new/load/prompt: each `{}` when supported.
#[derive(Debug, Clone, Serialize)]
pub struct SessionCapabilities {
    pub list: Value,
    pub resume: Value,
    pub close: Value,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct McpCapabilities {
    pub http: bool,
    pub sse: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Implementation {
    pub name: String,
    pub title: String,
    pub version: String,
}

// ---------------------------------------------------------------------------------------------------
// sessions

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionRequest {
    pub cwd: PathBuf,
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionRequest {
    pub session_id: String,
    pub cwd: PathBuf,
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// An MCP server the client wants the agent to use. Stdio servers have no `type`; `http`/`sse` do.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServer {
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub command: Option<PathBuf>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub args: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub env: Vec<EnvVariable>,
    #[serde(default)]
    pub url: Option<String>,
    /// An http server's headers.
    #[serde(default, deserialize_with = "null_as_default")]
    pub headers: Vec<HttpHeader>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HttpHeader {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EnvVariable {
    pub name: String,
    pub value: String,
}

fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionResponse {
    pub session_id: String,
    pub modes: SessionModeState,
    pub config_options: Vec<ConfigOption>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadSessionResponse {
    pub modes: SessionModeState,
    pub config_options: Vec<ConfigOption>,
}

/// `session/list`: sessions, of one directory or all.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsRequest {
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// From an earlier response's `nextCursor`.
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub cwd: PathBuf,
    pub title: Option<String>,
    /// RFC 3339.
    pub updated_at: Option<String>,
}

/// `session/resume`: like `session/load`, without replaying the conversation.
pub type ResumeSessionRequest = LoadSessionRequest;
pub type ResumeSessionResponse = LoadSessionResponse;

/// `session/close`: cancel the session's work and forget it in this process.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloseSessionRequest {
    pub session_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionModeState {
    pub current_mode_id: String,
    pub available_modes: Vec<SessionMode>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionMode {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A session config option (only `select` ones: mode and model).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub category: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub current_value: String,
    pub options: Vec<ConfigValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConfigValue {
    pub value: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeRequest {
    pub session_id: String,
    pub mode_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionRequest {
    pub session_id: String,
    pub config_id: String,
    pub value: Value,
}

/// `session/set_mode`, `session/close` and `authenticate` answer an empty object.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EmptyResponse {}

/// `authenticate`: codeloop advertises no auth methods, so whatever is asked succeeds.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticateRequest {
    #[serde(default)]
    pub method_id: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionResponse {
    pub config_options: Vec<ConfigOption>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelNotification {
    pub session_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequestNotification {
    pub request_id: Value,
}

// ---------------------------------------------------------------------------------------------------
// prompt turn

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptRequest {
    pub session_id: String,
    pub prompt: Vec<ContentBlock>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    pub stop_reason: StopReason,
}

/// A content block (`text`, `image`, `audio`, `resource_link`, `resource`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        uri: Option<String>,
    },
    Audio {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(default, rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    Resource {
        resource: EmbeddedResource,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// `TextResourceContents | BlobResourceContents`, told apart by `text` / `blob`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedResource {
    pub uri: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification {
    pub session_id: String,
    pub update: SessionUpdate,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "sessionUpdate", rename_all = "snake_case")]
pub enum SessionUpdate {
    UserMessageChunk {
        content: ContentBlock,
    },
    AgentMessageChunk {
        content: ContentBlock,
    },
    AgentThoughtChunk {
        content: ContentBlock,
    },
    ToolCall(ToolCall),
    ToolCallUpdate(ToolCallUpdate),
    Plan {
        entries: Vec<PlanEntry>,
    },
    #[serde(rename_all = "camelCase")]
    CurrentModeUpdate {
        current_mode_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ConfigOptionUpdate {
        config_options: Vec<ConfigOption>,
    },
    /// The commands a person may type as `/NAME args` (DESIGN.md §5g).
    #[serde(rename_all = "camelCase")]
    AvailableCommandsUpdate {
        available_commands: Vec<AvailableCommand>,
    },
    /// Only sent to clients that advertised `session.notices`.
    Notice {
        severity: &'static str,
        title: String,
    },
}

/// One command of `available_commands_update`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AvailableCommand {
    pub name: String,
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<AvailableCommandInput>,
}

/// What a command takes after its name: a hint shown while nothing is typed yet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AvailableCommandInput {
    pub hint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub tool_call_id: String,
    pub title: String,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolCallContent>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolCallLocation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
}

/// Only the fields that changed are present.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdate {
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolCallStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ToolCallContent>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<ToolCallLocation>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_output: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    SwitchMode,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolCallContent {
    Content {
        content: ContentBlock,
    },
    #[serde(rename_all = "camelCase")]
    Diff {
        path: PathBuf,
        old_text: Option<String>,
        new_text: String,
    },
}

impl ToolCallContent {
    pub fn text(text: impl Into<String>) -> Self {
        ToolCallContent::Content { content: ContentBlock::text(text) }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallLocation {
    pub path: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanEntry {
    pub content: String,
    pub priority: &'static str,
    pub status: &'static str,
}

// ---------------------------------------------------------------------------------------------------
// permissions (agent → client)

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionRequest {
    pub session_id: String,
    pub tool_call: ToolCallUpdate,
    pub options: Vec<PermissionOption>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    pub option_id: String,
    pub name: String,
    pub kind: PermissionOptionKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOptionKind {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RequestPermissionResponse {
    pub outcome: PermissionOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum PermissionOutcome {
    Cancelled,
    #[serde(rename_all = "camelCase")]
    Selected {
        option_id: String,
    },
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;

    #[test]
    fn updates_serialise_with_the_session_update_tag() {
        let update = SessionNotification {
            session_id: "ses_1".into(),
            update: SessionUpdate::AgentMessageChunk { content: ContentBlock::text("hi") },
        };
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            json!({"sessionId": "ses_1", "update": {"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "hi"}}})
        );
        let update = SessionUpdate::ToolCallUpdate(ToolCallUpdate {
            tool_call_id: "prt_1".into(),
            status: Some(ToolCallStatus::InProgress),
            content: Some(vec![ToolCallContent::Diff {
                path: "/p/a.txt".into(),
                old_text: None,
                new_text: "x".into(),
            }]),
            ..Default::default()
        });
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "prt_1", "status": "in_progress",
                "content": [{"type": "diff", "path": "/p/a.txt", "oldText": null, "newText": "x"}]})
        );
        assert_eq!(
            serde_json::to_value(SessionUpdate::CurrentModeUpdate { current_mode_id: "plan".into() })
                .unwrap(),
            json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"})
        );
    }

    #[test]
    fn prompts_and_mcp_servers_parse_as_clients_send_them() {
        let request: PromptRequest = serde_json::from_value(json!({"sessionId": "s", "prompt": [
            {"type": "text", "text": "hello"},
            {"type": "resource", "resource": {"uri": "file:///a.rs", "mimeType": "text/x-rust", "text": "fn main() {}"}},
            {"type": "resource_link", "uri": "file:///b.rs", "name": "b.rs"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]}))
        .unwrap();
        assert_eq!(request.prompt.len(), 4);
        let servers: Vec<McpServer> = serde_json::from_value(json!([
            {"name": "fs", "command": "/bin/mcp", "args": ["-v"], "env": [{"name": "A", "value": "1"}]},
            {"name": "web", "type": "http", "url": "https://x", "headers": []}
        ]))
        .unwrap();
        assert_eq!(servers[0].kind, None);
        assert_eq!(servers[0].env[0].value, "1");
        assert_eq!(servers[1].kind.as_deref(), Some("http"));
    }

    #[test]
    fn permission_outcomes_parse() {
        let selected: RequestPermissionResponse =
            serde_json::from_value(json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}))
                .unwrap();
        assert_eq!(selected.outcome, PermissionOutcome::Selected { option_id: "allow_once".into() });
        let cancelled: RequestPermissionResponse =
            serde_json::from_value(json!({"outcome": {"outcome": "cancelled"}})).unwrap();
        assert_eq!(cancelled.outcome, PermissionOutcome::Cancelled);
    }
}
