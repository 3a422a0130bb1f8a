//! MCP servers' tools as codeloop tools (DESIGN.md §5e): each server tool under its model-visible name
//! `NAME_TOOL` (cut to 64 characters; hooks and matchers see `mcp__NAME__TOOL`), and the two resource
//! tools, `list_mcp_resources` and `read_mcp_resource`.
//!
//! Owns: calling through a connection with its time-out and the call's cancellation, turning results
//! into text and attachments, and telling the connection's owner when a call finds it gone.
//! Must not: decide permissions — every call asks under its own name, like any tool; nothing a server
//! returns widens a rule or a wall.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use codeloop_tools::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};
use codeloop_types::FilePart;
use rmcp::model::{CallToolRequestParams, ReadResourceRequestParams};
use rmcp::{RoleClient, ServiceError};
use serde_json::{Value, json};

/// One connection as its tools see it.
pub(crate) struct Link {
    pub server: String,
    /// A signed-in server's way to widen its sign-in when a call needs more scope.
    pub step_up: Option<super::step_up::StepUp>,
    /// Where a call registers itself so the server's elicitations reach its session.
    pub signals: Arc<super::connect::Signals>,
    pub peer: rmcp::Peer<RoleClient>,
    pub timeout: Duration,
    /// Tells the owner the connection is gone (a call met a closed transport).
    pub lost: Box<dyn Fn(String) + Send + Sync>,
}

/// A request's failure: a tool failure, or a server that wants a wider sign-in first.
pub(crate) enum Refused {
    Failed(ToolFailure),
    /// No answer within the server's time-out: the request went out, so it may have acted.
    TimedOut(String),
    /// 403 `insufficient_scope`: its challenge and the scope it names.
    NeedsScope {
        challenge: String,
        scope: Option<String>,
    },
}

impl Link {
    /// Runs one request bounded by the server's time-out and the call's cancellation.
    pub async fn request<T>(
        &self,
        what: &str,
        cancel: &tokio_util::sync::CancellationToken,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ToolFailure> {
        match self.request_scoped(what, cancel, request).await {
            Ok(value) => Ok(value),
            Err(Refused::Failed(failure)) => Err(failure),
            Err(Refused::TimedOut(why)) => Err(ToolFailure::Failed(why)),
            Err(Refused::NeedsScope { challenge, .. }) => Err(ToolFailure::Failed(format!(
                "The MCP server `{}` refused {what}: it needs a wider sign-in ({})",
                self.server,
                codeloop_types::escape_controls(&challenge)
            ))),
        }
    }

    /// [`Link::request`] that tells a 403 `insufficient_scope` apart (the connection stays: only that
    /// request was refused).
    pub async fn request_scoped<T>(
        &self,
        what: &str,
        cancel: &tokio_util::sync::CancellationToken,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, Refused> {
        let result = tokio::select! {
            result = tokio::time::timeout(self.timeout, request) => result,
            _ = cancel.cancelled() => return Err(Refused::Failed(ToolFailure::Cancelled)),
        };
        if let Ok(Err(error)) = &result
            && let Some((challenge, scope)) = super::step_up::insufficient_scope(error)
        {
            return Err(Refused::NeedsScope { challenge, scope });
        }
        let server = &self.server;
        let Ok(answered) = result else {
            return Err(Refused::TimedOut(format!(
                "The MCP server `{server}` did not answer {what} within {} ms (its timeout_ms)",
                self.timeout.as_millis()
            )));
        };
        match answered {
            Ok(value) => Ok(value),
            Err(ServiceError::McpError(error)) => Err(Refused::Failed(ToolFailure::Failed(format!(
                "The MCP server `{server}` refused {what}: {}",
                error.message
            )))),
            Err(error @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                let why = super::connect::describe(&error);
                (self.lost)(why.clone());
                Err(Refused::Failed(ToolFailure::Failed(format!(
                    "The MCP server `{server}` is gone ({why}); its tools are withdrawn until it restarts."
                ))))
            }
            Err(error) => Err(Refused::Failed(ToolFailure::Failed(format!(
                "The MCP server `{server}` failed {what}: {}",
                super::connect::describe(&error)
            )))),
        }
    }
}

/// The `_meta` key of a `tools/call` that carries the call's operation id.
pub const OPERATION_META_KEY: &str = "codeloop/operation";
/// A call part's metadata: the operation id its request carried.
pub const OPERATION_KEY: &str = "operation";
/// A call part's metadata: its request went out to the server.
pub const REQUEST_SENT_KEY: &str = "request_sent";

/// `server_tool`, in the characters every provider accepts in a tool name, at most 64 long.
pub fn tool_key(server: &str, tool: &str) -> String {
    let key: String = format!("{server}_{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .collect();
    key.chars().take(64).collect()
}

/// `mcp__server__tool`: the name hooks and matchers see (DESIGN.md §5d).
pub fn hook_name(server: &str, tool: &str) -> String {
    format!("mcp__{server}__{tool}")
}

pub(crate) struct McpTool {
    pub name: String,
    pub hook_name: String,
    pub tool: String,
    pub description: String,
    pub parameters: Value,
    pub link: Arc<Link>,
}

impl McpTool {
    pub fn new(link: &Arc<Link>, tool: rmcp::model::Tool) -> Self {
        let server = &link.server;
        Self {
            name: tool_key(server, &tool.name),
            hook_name: hook_name(server, &tool.name),
            tool: tool.name.to_string(),
            description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
            parameters: Value::Object((*tool.input_schema).clone()),
            link: link.clone(),
        }
    }
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

    fn hook_name(&self) -> Option<&str> {
        Some(&self.hook_name)
    }

    /// The server's own time-out bounds the call; the watchdog waits a little longer.
    fn deadline(&self, _args: &Value) -> Option<Duration> {
        Some(self.link.timeout + Duration::from_secs(5))
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
        let server = &self.link.server;
        let metadata = json!({"server": server, "tool": self.tool, "hook_name": self.hook_name});
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: self.name.clone(),
            patterns: vec!["*".into()],
            always: vec!["*".into()],
            metadata: metadata.clone(),
        })
        .await?;
        let mut params = CallToolRequestParams::new(self.tool.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // The call's id is its operation id (DESIGN.md §5m): a server can tell a retry from a new call.
        let mut meta = serde_json::Map::new();
        meta.insert(OPERATION_META_KEY.into(), ctx.call.call_id.clone().into());
        params.meta = Some(rmcp::model::RequestMetaObject(rmcp::model::MetaObject(meta)));
        let what = format!("`{}`", self.tool);
        let mut base = metadata.as_object().cloned().unwrap_or_default();
        // From here the request is on its way: an interruption cannot say it did nothing (DESIGN.md §5m).
        base.insert(OPERATION_KEY.into(), ctx.call.call_id.clone().into());
        base.insert(REQUEST_SENT_KEY.into(), true.into());
        let caller = self.link.signals.enter(ctx.host.clone(), ctx.call.clone(), base);
        ctx.host.progress(&ctx.call, None, Some(caller.metadata()));
        let sent = |why: String| {
            ToolFailure::Failed(format!(
                "{why}. The request reached the server (operation id {}): it may have acted; check its \
                 effects before repeating it.",
                ctx.call.call_id
            ))
        };
        let link = &self.link;
        let result = match link.request_scoped(&what, &ctx.cancel, link.peer.call_tool(params.clone())).await
        {
            Ok(result) => result,
            Err(Refused::Failed(failure)) => return Err(failure),
            Err(Refused::TimedOut(why)) => return Err(sent(why)),
            Err(Refused::NeedsScope { challenge, scope }) => {
                let Some(step_up) = &link.step_up else {
                    // Not signed in by codeloop (a configured Authorization header): nothing to widen.
                    return Err(ToolFailure::Failed(format!(
                        "The MCP server `{server}` refused {what}: its credentials lack a scope ({})",
                        codeloop_types::escape_controls(&challenge)
                    )));
                };
                step_up.run(server, &self.tool, &challenge, scope, ctx).await?;
                // Once: a server that still refuses is reported, not looped on.
                link.request(&what, &ctx.cancel, link.peer.call_tool(params)).await?
            }
        };
        let value = serde_json::to_value(&result).unwrap_or_default();
        let (output, attachments) = content(&value);
        if value.get("isError").and_then(Value::as_bool) == Some(true) {
            return Err(ToolFailure::Failed(if output.is_empty() {
                "The MCP tool failed".into()
            } else {
                output
            }));
        }
        // What the server reported while it ran (progress, log messages) stays with the part.
        let metadata = caller.metadata();
        Ok(ToolOutput { title: format!("{} ({server})", self.tool), output, metadata, attachments })
    }
}

/// An MCP result's text blocks joined, media as attachments (the projection gives a model whose API
/// takes no such media a note instead), other blocks and structured content as JSON.
pub(crate) fn content(result: &Value) -> (String, Vec<FilePart>) {
    let mut texts = Vec::new();
    let mut attachments = Vec::new();
    for block in result.get("content").and_then(Value::as_array).into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block.get("text").and_then(Value::as_str).unwrap_or("").to_owned()),
            Some("image") | Some("audio") => attachments.push(media(block, "data")),
            Some("resource") => match block.get("resource") {
                Some(resource) if resource.get("text").is_some() => {
                    texts.push(resource.get("text").and_then(Value::as_str).unwrap_or("").to_owned())
                }
                Some(resource) if resource.get("blob").is_some() => attachments.push(media(resource, "blob")),
                _ => texts.push(block.to_string()),
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

fn media(block: &Value, field: &str) -> FilePart {
    let mime = block.get("mimeType").and_then(Value::as_str).unwrap_or("application/octet-stream");
    let data = block.get(field).and_then(Value::as_str).unwrap_or("");
    let filename = block.get("uri").and_then(Value::as_str).map(str::to_owned);
    FilePart { mime: mime.to_owned(), filename, url: format!("data:{mime};base64,{data}"), source: None }
}

/// The connections the resource tools may read.
pub(crate) trait ResourceServers: Send + Sync {
    /// Connected servers that serve resources, by name.
    fn resource_links(&self) -> Vec<Arc<Link>>;
}

/// `list_mcp_resources {server?}` → `[{server, uri, name, mimeType}]`.
pub(crate) struct ListResources {
    pub servers: Weak<dyn ResourceServers>,
    pub parameters: Value,
}

/// `read_mcp_resource {server, uri}` → the content (text, or an attachment).
pub(crate) struct ReadResource {
    pub servers: Weak<dyn ResourceServers>,
    pub parameters: Value,
}

pub const LIST_RESOURCES: &str = "list_mcp_resources";
pub const READ_RESOURCE: &str = "read_mcp_resource";

impl ListResources {
    pub fn new(servers: Weak<dyn ResourceServers>) -> Self {
        let parameters = json!({
            "type": "object",
            "properties": {"server": {"type": "string", "description": "Only this MCP server's resources"}},
            "additionalProperties": false
        });
        Self { servers, parameters }
    }
}

impl ReadResource {
    pub fn new(servers: Weak<dyn ResourceServers>) -> Self {
        let parameters = json!({
            "type": "object",
            "properties": {
                "server": {"type": "string", "description": "The MCP server that lists the resource"},
                "uri": {"type": "string", "description": "The resource's uri, as list_mcp_resources gives it"}
            },
            "required": ["server", "uri"],
            "additionalProperties": false
        });
        Self { servers, parameters }
    }
}

fn links(servers: &Weak<dyn ResourceServers>) -> Vec<Arc<Link>> {
    servers.upgrade().map(|s| s.resource_links()).unwrap_or_default()
}

fn string_arg(args: &Value, key: &str) -> Option<String> {
    args.get(key).and_then(Value::as_str).map(str::to_owned)
}

#[async_trait]
impl Tool for ListResources {
    fn name(&self) -> &str {
        LIST_RESOURCES
    }

    fn description(&self) -> &str {
        "List the resources (files, records, documents) the connected MCP servers offer, as [{server, uri, name, mimeType}]. Read one with read_mcp_resource."
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let only = string_arg(&args, "server");
        let links: Vec<Arc<Link>> = links(&self.servers)
            .into_iter()
            .filter(|l| only.as_ref().is_none_or(|s| s == &l.server))
            .collect();
        if let Some(server) = &only
            && links.is_empty()
        {
            return Err(ToolFailure::Failed(format!(
                "No connected MCP server `{server}` serves resources; call list_mcp_resources without `server` to see all"
            )));
        }
        let patterns: Vec<String> = links.iter().map(|l| l.server.clone()).collect();
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: LIST_RESOURCES.into(),
            always: patterns.clone(),
            patterns,
            metadata: json!({"server": only}),
        })
        .await?;
        let mut listed = Vec::new();
        for link in &links {
            let resources =
                link.request("its resource list", &ctx.cancel, link.peer.list_all_resources()).await?;
            for resource in resources {
                let resource = serde_json::to_value(&resource).unwrap_or_default();
                listed.push(json!({
                    "server": link.server,
                    "uri": resource.get("uri"),
                    "name": resource.get("name"),
                    "mimeType": resource.get("mimeType"),
                }));
            }
        }
        Ok(ToolOutput {
            title: format!("{} MCP resources", listed.len()),
            output: Value::Array(listed).to_string(),
            metadata: json!({"server": only}),
            attachments: Vec::new(),
        })
    }
}

#[async_trait]
impl Tool for ReadResource {
    fn name(&self) -> &str {
        READ_RESOURCE
    }

    fn description(&self) -> &str {
        "Read one resource of a connected MCP server by its uri (from list_mcp_resources): text comes back as text, other content as an attachment."
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let invalid = |detail: &str| ToolFailure::InvalidArguments {
            tool: READ_RESOURCE.into(),
            detail: detail.into(),
        };
        let server = string_arg(&args, "server").ok_or_else(|| invalid("`server` (a string) is required"))?;
        let uri = string_arg(&args, "uri").ok_or_else(|| invalid("`uri` (a string) is required"))?;
        let link = links(&self.servers).into_iter().find(|l| l.server == server).ok_or_else(|| {
            ToolFailure::Failed(format!(
                "No connected MCP server `{server}` serves resources; list_mcp_resources names those that do"
            ))
        })?;
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: READ_RESOURCE.into(),
            patterns: vec![format!("{server}:{uri}")],
            always: vec![format!("{server}:*")],
            metadata: json!({"server": server, "uri": uri}),
        })
        .await?;
        let read = link
            .request(
                &format!("`{uri}`"),
                &ctx.cancel,
                link.peer.read_resource(ReadResourceRequestParams::new(uri.clone())),
            )
            .await?;
        let value = serde_json::to_value(&read).unwrap_or_default();
        let mut texts = Vec::new();
        let mut attachments = Vec::new();
        for contents in value.get("contents").and_then(Value::as_array).into_iter().flatten() {
            match contents.get("text").and_then(Value::as_str) {
                Some(text) => texts.push(text.to_owned()),
                None if contents.get("blob").is_some() => attachments.push(media(contents, "blob")),
                None => texts.push(contents.to_string()),
            }
        }
        Ok(ToolOutput {
            title: format!("{uri} ({server})"),
            output: texts.join("\n"),
            metadata: json!({"server": server, "uri": uri}),
            attachments,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_keys_are_provider_safe() {
        assert_eq!(tool_key("fs", "read_file"), "fs_read_file");
        assert_eq!(tool_key("my server", "do.it"), "my_server_do_it");
        assert_eq!(tool_key("s", &"x".repeat(100)).len(), 64);
        assert_eq!(hook_name("fs", "read_file"), "mcp__fs__read_file");
    }

    #[test]
    fn results_become_text_and_attachments() {
        let (text, media) = content(&json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "BBBB", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "two"}}
        ]}));
        assert_eq!(text, "one\ntwo");
        assert_eq!(media[0].url, "data:image/png;base64,AAAA");
        assert_eq!(media[1].mime, "audio/wav");
        let (text, _) = content(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(text, "{\"n\":1}");
    }
}
