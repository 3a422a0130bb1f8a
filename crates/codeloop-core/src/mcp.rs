//! MCP tools (DESIGN.md §4 "Tools"): the tools of configured Model Context Protocol servers, offered to
//! the model next to the built-in ones.
//!
//! Owns: starting each `[mcp.NAME]` server once per process (on the first run that needs tools, so
//! commands like `session list` never pay for it), listing its tools, and calling them with a timeout.
//! A server that fails to start is skipped with a warning; the run goes on without its tools.
//! Must not: decide permissions — every MCP tool asks under its own name (`NAME_tool`, pattern `*`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use codeloop_tools::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};
use codeloop_types::FilePart;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Time allowed to start a server and list its tools, and the default per call.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_secs(30);

/// `[mcp.NAME]`: a server started as a child process speaking MCP over stdio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpSettings {
    /// The program and its arguments, e.g. `["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]`.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub enabled: bool,
    /// Per call, in milliseconds (default 30 000).
    pub timeout_ms: Option<u64>,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self { command: Vec::new(), env: BTreeMap::new(), enabled: true, timeout_ms: None }
    }
}

type Client = RunningService<RoleClient, ()>;

/// The configured servers, started lazily and kept for the life of the process.
pub struct McpServers {
    settings: BTreeMap<String, McpSettings>,
    started: tokio::sync::OnceCell<Vec<Arc<dyn Tool>>>,
}

impl McpServers {
    pub fn new(settings: BTreeMap<String, McpSettings>) -> Self {
        Self { settings, started: tokio::sync::OnceCell::new() }
    }

    pub fn is_empty(&self) -> bool {
        !self.settings.values().any(|s| s.enabled)
    }

    /// Every tool of every server that started (starting them on the first call).
    pub async fn tools(&self) -> &[Arc<dyn Tool>] {
        self.started.get_or_init(|| self.start_all()).await
    }

    async fn start_all(&self) -> Vec<Arc<dyn Tool>> {
        let mut tools = Vec::new();
        for (name, settings) in self.settings.iter().filter(|(_, s)| s.enabled) {
            match tokio::time::timeout(DEFAULT_MCP_TIMEOUT, connect(name, settings)).await {
                Ok(Ok(found)) => tools.extend(found),
                Ok(Err(e)) => tracing::warn!("MCP server `{name}` is not available: {e}"),
                Err(_) => tracing::warn!(
                    "MCP server `{name}` did not answer within {} s; its tools are not offered",
                    DEFAULT_MCP_TIMEOUT.as_secs()
                ),
            }
        }
        tools
    }
}

async fn connect(name: &str, settings: &McpSettings) -> Result<Vec<Arc<dyn Tool>>, String> {
    let (program, args) = settings
        .command
        .split_first()
        .ok_or_else(|| format!("[mcp.{name}] needs `command = [\"program\", …]`"))?;
    let mut command = tokio::process::Command::new(program);
    command.args(args).envs(&settings.env);
    let transport = TokioChildProcess::new(command).map_err(|e| format!("cannot start `{program}`: {e}"))?;
    let client: Client = ().serve(transport).await.map_err(|e| format!("the MCP handshake failed: {e}"))?;
    let client = Arc::new(client);
    let listed = client.list_all_tools().await.map_err(|e| format!("cannot list its tools: {e}"))?;
    let timeout = settings.timeout_ms.map(Duration::from_millis).unwrap_or(DEFAULT_MCP_TIMEOUT);
    Ok(listed
        .into_iter()
        .map(|tool| {
            Arc::new(McpTool {
                name: tool_key(name, &tool.name),
                server: name.to_owned(),
                tool: tool.name.to_string(),
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                parameters: Value::Object((*tool.input_schema).clone()),
                timeout,
                client: client.clone(),
            }) as Arc<dyn Tool>
        })
        .collect())
}

/// `server_tool`, in the characters every provider accepts in a tool name, at most 64 long.
pub fn tool_key(server: &str, tool: &str) -> String {
    let key: String = format!("{server}_{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    key.chars().take(64).collect()
}

struct McpTool {
    name: String,
    server: String,
    tool: String,
    description: String,
    parameters: Value,
    timeout: Duration,
    client: Arc<Client>,
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return Err(ToolFailure::InvalidArguments {
                    tool: self.name.clone(),
                    detail: format!("expected an object, got {other}"),
                });
            }
        };
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: self.name.clone(),
            patterns: vec!["*".into()],
            always: vec!["*".into()],
            metadata: json!({"server": self.server, "tool": self.tool}),
        })
        .await?;
        let mut params = CallToolRequestParams::new(self.tool.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let call = self.client.call_tool(params);
        let result = tokio::select! {
            result = tokio::time::timeout(self.timeout, call) => result,
            _ = ctx.cancel.cancelled() => return Err(ToolFailure::Cancelled),
        };
        let result = result
            .map_err(|_| {
                ToolFailure::Failed(format!(
                    "The MCP tool did not answer within {} s",
                    self.timeout.as_secs()
                ))
            })?
            .map_err(|e| ToolFailure::Failed(format!("The MCP server `{}` failed: {e}", self.server)))?;
        let value = serde_json::to_value(&result).unwrap_or_default();
        let (output, attachments) = content(&value);
        if value.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(ToolFailure::Failed(if output.is_empty() {
                "The MCP tool failed".into()
            } else {
                output
            }));
        }
        Ok(ToolOutput {
            title: format!("{} ({})", self.tool, self.server),
            output,
            metadata: json!({"server": self.server, "tool": self.tool}),
            attachments,
        })
    }
}

/// An MCP result's text blocks joined, media as attachments, other blocks and structured content as JSON.
fn content(result: &Value) -> (String, Vec<FilePart>) {
    let mut texts = Vec::new();
    let mut attachments = Vec::new();
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block.get("text").and_then(Value::as_str).unwrap_or("").to_owned()),
            Some("image") | Some("audio") => {
                let mime =
                    block.get("mimeType").and_then(Value::as_str).unwrap_or("application/octet-stream");
                let data = block.get("data").and_then(Value::as_str).unwrap_or("");
                attachments.push(FilePart {
                    mime: mime.to_owned(),
                    filename: None,
                    url: format!("data:{mime};base64,{data}"),
                    source: None,
                });
            }
            Some("resource") => match block.pointer("/resource/text").and_then(Value::as_str) {
                Some(text) => texts.push(text.to_owned()),
                None => texts.push(block.to_string()),
            },
            _ => texts.push(block.to_string()),
        }
    }
    if texts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        texts.push(structured.to_string());
    }
    (texts.join("\n"), attachments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_keys_are_provider_safe() {
        assert_eq!(tool_key("fs", "read_file"), "fs_read_file");
        assert_eq!(tool_key("my server", "do.it"), "my_server_do_it");
        assert_eq!(tool_key("s", &"x".repeat(100)).len(), 64);
    }

    #[test]
    fn results_become_text_and_attachments() {
        let (text, media) = content(&json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "two"}}
        ]}));
        assert_eq!(text, "one\ntwo");
        assert_eq!(media[0].url, "data:image/png;base64,AAAA");
        let (text, _) = content(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(text, "{\"n\":1}");
    }
}
