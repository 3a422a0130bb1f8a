//! A Streamable HTTP MCP server on loopback for the tests (feature `mcp`), built on rmcp's own server
//! side, in either protocol revision:
//!
//! - [`Revision::Sessions`]: 2025-11-25 and older, `initialize` and an `Mcp-Session-Id` session
//!   ([`McpTestServer::drop_sessions`] forgets them, so the next request gets 404);
//! - [`Revision::Stateless`]: only 2026-07-28, `server/discover` and no session.
//!
//! Tools: `echo {text}`, `image`, `audio`, `slow {ms}`, `fail`, `ask` (an elicitation), `report`
//! (progress and a warning log), `sample` (a sampling request), `add_tool` (adds `added` and says the
//! list changed); resources `file:///notes.txt` (text) and `file:///logo.png` (blob); prompts
//! `greet {name}` and `picture` (text, an image and an embedded resource). With
//! [`McpServerOptions::auth`] it is an OAuth protected resource (RFC 9728): a request without a token
//! the [`crate::OAuthTestServer`] issued gets 401 and a
//! `WWW-Authenticate` challenge. Every HTTP request is recorded (headers, session, JSON-RPC method), and
//! the time the server spends on each is summed (for the overhead figure).

use codeloop_types::LockExt;
use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, DiscoverResult, ErrorCode,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptArgument,
    PromptMessage, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, Role, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::oauth::Tokens;

/// A one-pixel PNG, base64.
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Which protocol revision the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25 (and older): `initialize`, `Mcp-Session-Id`.
    Sessions,
    /// 2026-07-28 only: `server/discover`, stateless.
    Stateless,
}

/// A protected resource: tokens come from an [`crate::OAuthTestServer`].
#[derive(Clone)]
pub struct McpAuth {
    pub tokens: Tokens,
    /// The authorization server its metadata names.
    pub issuer: String,
    /// Put `resource_metadata` in the challenge (else clients must find it at the well-known URI).
    pub metadata_in_challenge: bool,
}

#[derive(Clone)]
pub struct McpServerOptions {
    pub revision: Revision,
    pub auth: Option<McpAuth>,
    /// Tools `extra_0`, `extra_1`, … beside the usual ones (a server with a large tool set).
    pub extra_tools: usize,
}

impl McpServerOptions {
    pub fn new(revision: Revision) -> Self {
        Self { revision, auth: None, extra_tools: 0 }
    }
}

/// One HTTP request as the server got it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpRequest {
    pub http_method: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The JSON-RPC method of a POST (`initialize`, `server/discover`, `tools/call`, …).
    pub rpc_method: Option<String>,
    /// The tool of a `tools/call`.
    pub tool: Option<String>,
    /// The request's `params._meta`.
    pub meta: Option<Value>,
    pub status: u16,
}

impl McpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<McpRequest>>,
    added: AtomicUsize,
    /// Nanoseconds spent answering requests (from the request to the response's head).
    busy_nanos: AtomicU64,
}

/// A running MCP test server; dropping it stops it.
pub struct McpTestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl McpTestServer {
    pub async fn start(options: McpServerOptions) -> std::io::Result<Self> {
        Self::serve(options, "127.0.0.1:0").await
    }

    /// Starts on a given address (a server that comes back on the port it had).
    pub async fn serve(options: McpServerOptions, addr: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let sessions = Arc::new(LocalSessionManager::default());
        let stop = CancellationToken::new();
        let revision = options.revision;
        let handler = TestHandler { revision, shared: shared.clone(), extra_tools: options.extra_tools };
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(revision == Revision::Sessions)
            .with_json_response(revision == Revision::Stateless)
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop.child_token());
        let service = StreamableHttpService::new(move || Ok(handler.clone()), sessions.clone(), config);
        let gate = Gate { addr, auth: options.auth.clone(), shared: shared.clone() };
        let mut router = Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(gate.clone(), guard));
        if options.auth.is_some() {
            router = router.route(
                "/.well-known/oauth-protected-resource/mcp",
                axum::routing::get(protected_resource).with_state(gate),
            );
        }
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                // Small writes go out at once (no Nagle wait on the delayed ACK).
                let _ = tcp.set_nodelay(true);
            });
            let _ = axum::serve(listener, router).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        });
        Ok(Self { addr, shared, sessions, stop, task: Some(task) })
    }

    /// `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn requests(&self) -> Vec<McpRequest> {
        self.shared.requests.locked().clone()
    }

    /// The JSON-RPC methods received, in order.
    pub fn rpc_methods(&self) -> Vec<String> {
        self.requests().into_iter().filter_map(|r| r.rpc_method).collect()
    }

    /// Forgets every session: the next request of a session gets 404, and a client must start anew.
    pub async fn drop_sessions(&self) {
        self.sessions.sessions.write().await.clear();
    }

    /// Time spent answering requests so far.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.shared.busy_nanos.load(Ordering::SeqCst))
    }

    /// Stops the server (its port refuses connections from now on).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[derive(Clone)]
struct Gate {
    addr: SocketAddr,
    auth: Option<McpAuth>,
    shared: Arc<Shared>,
}

/// Records the request, checks its token, and times the answer.
async fn guard(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 16 * 1024 * 1024).await.unwrap_or_default();
    let rpc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_lowercase(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut record = McpRequest {
        http_method: parts.method.to_string(),
        headers,
        rpc_method: rpc.get("method").and_then(Value::as_str).map(str::to_owned),
        tool: rpc.pointer("/params/name").and_then(Value::as_str).map(str::to_owned),
        meta: rpc.pointer("/params/_meta").cloned(),
        status: 0,
    };
    let response = match &gate.auth {
        Some(auth) if !authorized(auth, &parts.headers) => {
            let metadata = format!("http://{}/.well-known/oauth-protected-resource/mcp", gate.addr);
            let challenge = if auth.metadata_in_challenge {
                format!("Bearer resource_metadata=\"{metadata}\", scope=\"mcp\"")
            } else {
                "Bearer scope=\"mcp\"".to_owned()
            };
            (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)], "sign in first")
                .into_response()
        }
        _ => next.run(Request::from_parts(parts, Body::from(bytes))).await,
    };
    record.status = response.status().as_u16();
    gate.shared.requests.locked().push(record);
    // The server's time runs until its answer's last byte (an SSE answer streams after its head).
    let (parts, body) = response.into_parts();
    let timed = Timed { inner: body.into_data_stream(), started, shared: gate.shared.clone(), done: false };
    Response::from_parts(parts, Body::from_stream(timed))
}

/// A response body that adds the time until its end to the server's busy time.
struct Timed {
    inner: axum::body::BodyDataStream,
    started: Instant,
    shared: Arc<Shared>,
    done: bool,
}

impl Timed {
    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            self.shared.busy_nanos.fetch_add(self.started.elapsed().as_nanos() as u64, Ordering::SeqCst);
        }
    }
}

impl futures::Stream for Timed {
    type Item = Result<bytes::Bytes, axum::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_next(cx);
        if let std::task::Poll::Ready(None) = polled {
            self.finish();
        }
        polled
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        self.finish();
    }
}

fn authorized(auth: &McpAuth, headers: &axum::http::HeaderMap) -> bool {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    token.is_some_and(|t| auth.tokens.valid(t))
}

/// RFC 9728 protected resource metadata.
async fn protected_resource(State(gate): State<Gate>) -> Response {
    let Some(auth) = &gate.auth else { return StatusCode::NOT_FOUND.into_response() };
    axum::Json(json!({
        "resource": format!("http://{}/mcp", gate.addr),
        "authorization_servers": [auth.issuer],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
    }))
    .into_response()
}

#[derive(Clone)]
struct TestHandler {
    revision: Revision,
    shared: Arc<Shared>,
    extra_tools: usize,
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    Arc::new(value.as_object().cloned().unwrap_or_default())
}

impl TestHandler {
    fn tools(&self) -> Vec<Tool> {
        let object = |properties: Value| schema(json!({"type": "object", "properties": properties}));
        let mut tools = vec![
            Tool::new("echo", "Echo the text back", object(json!({"text": {"type": "string"}}))),
            Tool::new("image", "A one-pixel image", object(json!({}))),
            Tool::new("audio", "A short sound", object(json!({}))),
            Tool::new("slow", "Answer after `ms` milliseconds", object(json!({"ms": {"type": "integer"}}))),
            Tool::new("fail", "Always fails", object(json!({}))),
            Tool::new("add_tool", "Add the tool `added` and say the tool list changed", object(json!({}))),
            Tool::new(
                "ask",
                "Ask the person for a name and a count (elicitation), say what came back",
                object(json!({})),
            ),
            Tool::new("report", "Report progress twice and log a warning, then answer", object(json!({}))),
            Tool::new(
                "sample",
                "Ask the client's model a question (sampling), say its answer",
                object(json!({})),
            ),
        ];
        for n in 0..self.extra_tools {
            let properties = json!({
                "id": {"type": "string", "description": "Which record of extra set {n} to act on"},
                "limit": {"type": "integer", "description": "How many results to return at most"},
            });
            let description =
                format!("Extra tool number {n}: looks records of kind {n} up and summarises them");
            tools.push(Tool::new(format!("extra_{n}"), description, object(properties)));
        }
        if self.shared.added.load(Ordering::SeqCst) > 0 {
            tools.push(Tool::new("added", "A tool added while the server ran", object(json!({}))));
        }
        tools
    }
}

impl ServerHandler for TestHandler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_prompts()
            .build();
        let mut info = ServerConfig::new(capabilities);
        info.protocol_version = match self.revision {
            Revision::Sessions => ProtocolVersion::V_2025_11_25,
            Revision::Stateless => ProtocolVersion::V_2026_07_28,
        };
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.revision {
            Revision::Sessions => Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25)),
            Revision::Stateless => Cow::Borrowed(&[ProtocolVersion::V_2026_07_28]),
        }
    }

    /// A 2025-11-25 server knows no `server/discover` (the method came with 2026-07-28).
    async fn discover(&self, _context: RequestContext<RoleServer>) -> Result<DiscoverResult, ErrorData> {
        match self.revision {
            Revision::Sessions => Err(ErrorData::new(ErrorCode::METHOD_NOT_FOUND, "Method not found", None)),
            Revision::Stateless => Ok(DiscoverResult::from_server_info(
                self.supported_protocol_versions().into_owned(),
                self.get_info(),
            )),
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => {
                let text = args.get("text").and_then(Value::as_str).unwrap_or("");
                CallToolResult::success(vec![ContentBlock::text(format!("echo: {text}"))])
            }
            "image" => CallToolResult::success(vec![
                ContentBlock::text("a pixel"),
                ContentBlock::image(PNG, "image/png"),
            ]),
            "audio" => CallToolResult::success(vec![ContentBlock::audio("UklGRg==", "audio/wav")]),
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("it failed on purpose")]),
            "add_tool" => {
                self.shared.added.fetch_add(1, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text("added the tool `added`")])
            }
            "added" => CallToolResult::success(vec![ContentBlock::text("the added tool works")]),
            name if name.starts_with("extra_") => {
                CallToolResult::success(vec![ContentBlock::text(format!("{name} answered"))])
            }
            "report" => {
                // rmcp hands the request's `_meta` over in the context.
                if let Some(token) = context.meta.get_progress_token() {
                    for step in 1..=2 {
                        let mut progress = ProgressNotificationParam::new(token.clone(), f64::from(step));
                        progress.total = Some(2.0);
                        progress.message = Some(format!("step {step}"));
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
                let log = json!({"level": "warning", "logger": "report", "data": "disk almost full"});
                if let Ok(log) = serde_json::from_value(log) {
                    // Deprecated by SEP-2577, still sent by servers of the current revisions.
                    #[allow(deprecated)]
                    let _ = context.peer.notify_logging_message(log).await;
                }
                CallToolResult::success(vec![ContentBlock::text("reported")])
            }
            "sample" => {
                let params = json!({
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Name a colour."}}],
                    "systemPrompt": "Answer in one word.",
                    "maxTokens": 20,
                });
                let params = serde_json::from_value(params)
                    .map_err(|e| ErrorData::internal_error(format!("sampling params: {e}"), None))?;
                // Deprecated by SEP-2577, still what servers of the current revisions send.
                #[allow(deprecated)]
                let answer = context.peer.create_message(params).await;
                match answer {
                    Ok(answer) => {
                        let answer = serde_json::to_value(&answer).unwrap_or_default();
                        // The answer's message is flattened into the result.
                        let content = &answer["content"];
                        let block = if content.is_array() { &content[0] } else { content };
                        let text =
                            block["text"].as_str().map(str::to_owned).unwrap_or_else(|| answer.to_string());
                        CallToolResult::success(vec![ContentBlock::text(format!("sampled: {text}"))])
                    }
                    Err(e) => {
                        CallToolResult::error(vec![ContentBlock::text(format!("sampling failed: {e}"))])
                    }
                }
            }
            "ask" => {
                let params = json!({
                    "mode": "form",
                    "message": "Which name, how many?",
                    "requestedSchema": {"type": "object", "properties": {
                        "name": {"type": "string", "default": "Ada"},
                        "count": {"type": "integer"},
                    }},
                });
                let params = serde_json::from_value(params)
                    .map_err(|e| ErrorData::internal_error(format!("elicitation params: {e}"), None))?;
                let answer = context
                    .peer
                    .create_elicitation(params)
                    .await
                    .map_err(|e| ErrorData::internal_error(format!("elicitation failed: {e}"), None))?;
                let answer = serde_json::to_value(&answer).unwrap_or_default();
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "{} {}",
                    answer["action"].as_str().unwrap_or("?"),
                    answer.get("content").cloned().unwrap_or(Value::Null)
                ))])
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![
            Resource::new("file:///notes.txt", "notes").with_mime_type("text/plain"),
            Resource::new("file:///logo.png", "logo").with_mime_type("image/png"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let contents = match request.uri.as_str() {
            "file:///notes.txt" => ResourceContents::text("the notes say hi", "file:///notes.txt"),
            "file:///logo.png" => ResourceContents::blob(PNG, "file:///logo.png").with_mime_type("image/png"),
            other => return Err(ErrorData::resource_not_found(format!("no resource {other}"), None)),
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let name = PromptArgument::new("name").with_description("Who to greet").with_required(true);
        Ok(ListPromptsResult::with_all_items(vec![
            Prompt::new("greet", Some("Greet someone"), Some(vec![name])),
            Prompt::new("picture", Some("Describe a picture and a note"), None),
        ]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name == "picture" {
            // Content of every type: text, an image, an embedded text resource.
            let result = json!({"description": "Describe a picture and a note", "messages": [
                {"role": "user", "content": {"type": "text", "text": "Describe this picture."}},
                {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
                {"role": "user", "content": {"type": "resource", "resource": {
                    "uri": "file:///notes.txt", "mimeType": "text/plain", "text": "the notes say hi"}}},
            ]});
            let result: GetPromptResult = serde_json::from_value(result)
                .map_err(|e| ErrorData::internal_error(format!("picture prompt: {e}"), None))?;
            return Ok(result.into());
        }
        if request.name != "greet" {
            return Err(ErrorData::invalid_params(format!("no prompt {}", request.name), None));
        }
        let name =
            request.arguments.as_ref().and_then(|a| a.get("name")).and_then(Value::as_str).unwrap_or("world");
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, format!("Say hello to {name}."))])
            .with_description("Greet someone")
            .into())
    }
}
