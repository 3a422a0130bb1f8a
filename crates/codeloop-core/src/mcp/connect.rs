//! Reaching one server (DESIGN.md §5e): a child process over stdio, or Streamable HTTP with the
//! sign-in the data dir holds for it. Both go through rmcp; this module only chooses how.
//!
//! Protocol revisions: over HTTP the client probes with `server/discover` (2026-07-28, stateless) and
//! falls back to `initialize` (2025-11-25, `Mcp-Session-Id`) as the spec's backward-compatibility rules
//! say; rmcp does both and re-opens a session the server dropped (404). Over stdio it starts with
//! `initialize` (servers of the older revisions do not all answer an unknown first request, and a probe
//! would cost them seconds); a server that refuses `initialize` is started again and reached with
//! `server/discover`. A server that answers Streamable HTTP with neither (a 404/405, an HTML page) is
//! tried with the legacy HTTP+SSE transport ([`super::legacy_sse`]), as is one set to `transport = "sse"`.
//!
//! Owns: building the transport, the handshake, the first tool list, the refresh of a token with under a
//! minute left, and watching the connection until it ends. Must not: decide what to tell the user (the
//! caller words [`StartFailure`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ClientConfig, Implementation, ProtocolVersion, ServerCapabilities, SubscriptionFilter};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::auth::{AuthClient, AuthorizationManager, OAuthClientConfig};
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use tokio_util::sync::CancellationToken;

use super::auth::{AuthRecord, AuthState, AuthStore, FileCredentials, REFRESH_MARGIN, resource_of};
use super::settings::{McpSettings, TransportKind};
use crate::models::EnvLookup;
use codeloop_types::LockExt;

/// Why a server is not connected.
#[derive(Debug, Clone, PartialEq)]
pub enum StartFailure {
    /// It asked for a sign-in and none works: `expired` when there was one (its refresh failed).
    NeedsLogin {
        expired: bool,
        detail: String,
    },
    Failed(String),
}

/// What starting a server needs from outside.
#[derive(Clone)]
pub struct StartContext {
    pub auth: AuthStore,
    pub env: EnvLookup,
    /// What stdio servers are not handed of codeloop's environment.
    pub withheld_env: WithheldEnv,
}

/// What a stdio server is not handed of codeloop's environment (DESIGN.md §5j): the variables codeloop
/// reads credentials from ([`crate::credentials`]), unless `[sandbox] env_keep` names one or the server's
/// own `env` does (as a key, or in a `${VAR}`). A server is the user's program, so nothing else is taken.
#[derive(Debug, Clone, Default)]
pub struct WithheldEnv {
    names: Vec<String>,
}

impl WithheldEnv {
    pub fn new(credentials: &[String], env_keep: &[String]) -> Self {
        Self { names: credentials.iter().filter(|n| !env_keep.contains(n)).cloned().collect() }
    }

    /// The variables `settings`' server does not get.
    fn for_server<'a>(&'a self, settings: &'a McpSettings) -> impl Iterator<Item = &'a str> {
        let named: Vec<String> = settings
            .env
            .iter()
            .flat_map(|(key, value)| {
                std::iter::once(key.clone()).chain(crate::credentials::interpolated(value))
            })
            .collect();
        self.names.iter().filter(move |n| !named.contains(n)).map(String::as_str)
    }
}

/// Flags the server raises between calls; read at the next step.
#[derive(Default)]
pub(crate) struct Signals {
    pub tools_stale: AtomicBool,
    pub prompts_stale: AtomicBool,
    /// Shared by every server: bumped whenever the offered tools may have changed.
    pub generation: Arc<AtomicU64>,
    /// The server's name in the config.
    pub server: String,
    /// The calls of this server that are running, oldest first: whom its elicitations, progress and
    /// log messages go to.
    pub callers: Mutex<Vec<Caller>>,
    /// Log messages at `warning` and above, for the person (drained into notices).
    pub logged: Mutex<Vec<String>>,
}

/// The permission a server's sampling request is asked under (pattern: the server's name).
pub const SAMPLING_PERMISSION: &str = "mcp_sampling";
/// Where a call's part keeps the sampling it answered.
pub const SAMPLING_META_KEY: &str = "sampling";

/// A sampling message's text: its text blocks; other media named.
fn sampling_text(content: &serde_json::Value) -> String {
    let blocks = match content {
        serde_json::Value::Array(blocks) => blocks.clone(),
        block => vec![block.clone()],
    };
    blocks
        .iter()
        .map(|block| match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or("").to_owned(),
            Some(kind) => format!("[{kind} {}]", block["mimeType"].as_str().unwrap_or("")),
            None => block.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A running call of a server's tool: the host that can ask its session's person and show its progress.
pub(crate) struct Caller {
    pub id: u64,
    pub host: Arc<dyn codeloop_tools::ToolHost>,
    pub call: codeloop_tools::CallInfo,
    pub feed: Arc<Mutex<CallFeed>>,
}

/// What a running call's part shows of the server's notifications (its metadata, kept in the export).
#[derive(Debug, Default)]
pub(crate) struct CallFeed {
    /// The part's own metadata (server, tool, hook name).
    pub base: serde_json::Map<String, serde_json::Value>,
    /// The newest `{progress, total?, message?}`.
    pub progress: Option<serde_json::Value>,
    /// `{level, logger?, data}`, the newest [`CallFeed::MAX_LOGS`].
    pub logs: VecDeque<serde_json::Value>,
    /// Sampling requests answered during the call: `{server, messages, answer, model, tokens, cost}`
    /// (the run adds their cost to the session's).
    pub sampling: Vec<serde_json::Value>,
}

impl CallFeed {
    const MAX_LOGS: usize = 50;

    pub fn metadata(&self) -> serde_json::Value {
        let mut metadata = self.base.clone();
        if let Some(progress) = &self.progress {
            metadata.insert("progress".into(), progress.clone());
        }
        if !self.logs.is_empty() {
            metadata.insert("logs".into(), serde_json::Value::Array(self.logs.iter().cloned().collect()));
        }
        if !self.sampling.is_empty() {
            metadata.insert(SAMPLING_META_KEY.into(), serde_json::Value::Array(self.sampling.clone()));
        }
        serde_json::Value::Object(metadata)
    }

    fn log(&mut self, entry: serde_json::Value) {
        if self.logs.len() == Self::MAX_LOGS {
            self.logs.pop_front();
        }
        self.logs.push_back(entry);
    }
}

/// Keeps a call registered as a caller while it runs.
pub(crate) struct CallerGuard {
    signals: Arc<Signals>,
    id: u64,
    feed: Arc<Mutex<CallFeed>>,
}

impl Signals {
    pub fn enter(
        self: &Arc<Self>,
        host: Arc<dyn codeloop_tools::ToolHost>,
        call: codeloop_tools::CallInfo,
        base: serde_json::Map<String, serde_json::Value>,
    ) -> CallerGuard {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let feed = Arc::new(Mutex::new(CallFeed { base, ..CallFeed::default() }));
        self.callers.locked().push(Caller { id, host, call, feed: feed.clone() });
        CallerGuard { signals: self.clone(), id, feed }
    }

    /// The newest running call: the one a notification without a known request is shown on.
    #[allow(clippy::type_complexity)]
    fn newest_caller(
        &self,
    ) -> Option<(Arc<dyn codeloop_tools::ToolHost>, codeloop_tools::CallInfo, Arc<Mutex<CallFeed>>)> {
        self.callers.locked().last().map(|c| (c.host.clone(), c.call.clone(), c.feed.clone()))
    }
}

impl CallerGuard {
    /// What the call's part should keep of the server's notifications.
    pub fn metadata(&self) -> serde_json::Value {
        self.feed.locked().metadata()
    }
}

impl Drop for CallerGuard {
    fn drop(&mut self) {
        self.signals.callers.locked().retain(|c| c.id != self.id);
    }
}

impl Signals {
    pub fn new(server: &str, generation: Arc<AtomicU64>) -> Self {
        Self { server: server.to_owned(), generation, ..Self::default() }
    }

    fn tools_changed(&self) {
        self.tools_stale.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// codeloop as an MCP client: notes list changes and passes a server's elicitation to the person of the
/// call that is running (the newest, when several are; none running: declined). Sampling and roots are
/// refused by rmcp's defaults.
#[derive(Clone)]
pub(crate) struct Handler {
    signals: Arc<Signals>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info = Implementation::new("codeloop", env!("CARGO_PKG_VERSION"));
        // What `initialize` offers: its newest revision (2026-07-28 has no handshake; it is reached by
        // `server/discover`).
        info.protocol_version = ProtocolVersion::LATEST_WITH_INITIALIZE;
        let mut elicitation = rmcp::model::ElicitationCapability::new();
        elicitation.form = Some(Default::default());
        elicitation.url = Some(Default::default());
        info.capabilities.elicitation = Some(elicitation);
        // Sampling (deprecated by SEP-2577, still used): answered with the session's model once allowed.
        #[allow(deprecated)]
        {
            info.capabilities.sampling = Some(Default::default());
        }
        info
    }

    /// A server's `sampling/createMessage`, during one of its calls: the person allows it (or a rule
    /// `[permission] mcp_sampling = { SERVER = "allow" }`; `--on-ask allow` never does), then the
    /// session's model answers; the request, the answer and their cost go on the call's part.
    #[allow(deprecated)]
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        let refused = |why: String| rmcp::ErrorData::new(rmcp::model::ErrorCode(-1), why, None);
        let Some((host, call, feed)) = self.signals.newest_caller() else {
            return Err(refused(
                "codeloop answers sampling only while one of this server's tools runs".into(),
            ));
        };
        let server = self.signals.server.clone();
        let messages: Vec<(String, String)> = params
            .messages
            .iter()
            .map(|message| {
                let value = serde_json::to_value(message).unwrap_or_default();
                let role = value["role"].as_str().unwrap_or("user").to_owned();
                (role, sampling_text(&value["content"]))
            })
            .collect();
        let preview: String =
            messages.last().map(|(_, text)| codeloop_tools::ellipsize(text, 300)).unwrap_or_default();
        let ask = codeloop_tools::PermissionAsk {
            permission: SAMPLING_PERMISSION.into(),
            patterns: vec![server.clone()],
            always: vec![server.clone()],
            metadata: serde_json::json!({"server": server, "request": preview, "max_tokens": params.max_tokens}),
            grant: codeloop_tools::Grant::Brake,
        };
        host.ask(&call, ask)
            .await
            .map_err(|e| refused(format!("the sampling request was not allowed: {e}")))?;
        let request = codeloop_tools::SampleRequest {
            system: params.system_prompt.clone(),
            messages: messages.clone(),
            max_tokens: u64::from(params.max_tokens),
        };
        let sampled = host.sample(&call, request).await.map_err(refused)?;
        let record = serde_json::json!({
            "server": server,
            "messages": messages.iter().map(|(role, text)| serde_json::json!({"role": role, "text": text})).collect::<Vec<_>>(),
            "answer": sampled.text,
            "model": sampled.model,
            "tokens": {"input": sampled.input_tokens, "output": sampled.output_tokens},
            "cost": sampled.cost,
        });
        let metadata = {
            let mut feed = feed.locked();
            feed.sampling.push(record);
            feed.metadata()
        };
        host.progress(&call, None, Some(metadata));
        let message =
            serde_json::json!({"role": "assistant", "content": {"type": "text", "text": sampled.text}});
        let message = serde_json::from_value(message).map_err(|e| refused(format!("the answer: {e}")))?;
        let mut result = rmcp::model::CreateMessageResult::new(message, sampled.model);
        result.stop_reason = Some(sampled.stop);
        Ok(result)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        use codeloop_types::{ElicitationAction, ElicitationAsk, ElicitationMode};
        use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction as Action};
        let Some((host, call, _)) = self.signals.newest_caller() else {
            return Ok(ElicitResult::new(Action::Decline));
        };
        let server = self.signals.server.clone();
        let ask = match request {
            ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } => ElicitationAsk {
                server,
                message,
                mode: ElicitationMode::Form,
                schema: serde_json::to_value(&requested_schema).ok(),
                url: None,
            },
            ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
                ElicitationAsk { server, message, mode: ElicitationMode::Url, schema: None, url: Some(url) }
            }
            // A mode of a later revision: nothing to show it with.
            _ => return Ok(ElicitResult::new(Action::Decline)),
        };
        let reply = host.elicit(&call, ask).await;
        let mut result = ElicitResult::new(match reply.action {
            ElicitationAction::Accept => Action::Accept,
            ElicitationAction::Decline => Action::Decline,
            ElicitationAction::Cancel => Action::Cancel,
        });
        result.content = reply.content;
        Ok(result)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signals.tools_changed();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.signals.prompts_stale.store(true, Ordering::SeqCst);
    }

    /// Progress shows on the running call's part (a live status every client sees). rmcp does not say
    /// which request a token belongs to, so with several calls to one server running it goes to the
    /// newest.
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some((host, call, feed)) = self.signals.newest_caller() else { return };
        let mut progress = serde_json::json!({"progress": params.progress});
        if let Some(total) = params.total {
            progress["total"] = total.into();
        }
        let message = params.message.map(|m| codeloop_types::escape_controls(&m).into_owned());
        if let Some(message) = &message {
            progress["message"] = message.clone().into();
        }
        let metadata = {
            let mut feed = feed.locked();
            feed.progress = Some(progress);
            feed.metadata()
        };
        let amount = match params.total {
            Some(total) if total > 0.0 => format!("{:.0}%", params.progress / total * 100.0),
            _ => format!("{}", params.progress),
        };
        let title = match message {
            Some(message) => format!("{amount} · {message}"),
            None => amount,
        };
        host.progress(&call, Some(title), Some(metadata));
    }

    /// Log messages go on the running call's part (all of them, kept in the export); at `warning` and
    /// above the person is told too.
    #[allow(deprecated)] // Logging is deprecated by SEP-2577; servers of the current revisions still send it.
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        use rmcp::model::LoggingLevel as L;
        let level = serde_json::to_value(params.level).ok().and_then(|v| v.as_str().map(str::to_owned));
        let level = level.unwrap_or_else(|| "info".into());
        let text = match &params.data {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let text = codeloop_types::escape_controls(&text).into_owned();
        if !matches!(params.level, L::Debug | L::Info | L::Notice) {
            let from = params.logger.as_deref().map(|l| format!(" {l}")).unwrap_or_default();
            let line = format!("MCP server {}{from} ({level}): {text}", self.signals.server);
            self.signals.logged.locked().push(line);
        }
        let Some((host, call, feed)) = self.signals.newest_caller() else { return };
        let mut entry = serde_json::json!({"level": level, "data": text});
        if let Some(logger) = params.logger {
            entry["logger"] = logger.into();
        }
        let metadata = {
            let mut feed = feed.locked();
            feed.log(entry);
            feed.metadata()
        };
        host.progress(&call, None, Some(metadata));
    }
}

/// The last lines a local server wrote to stderr: its own words for why it failed.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    const LINES: usize = 20;

    fn push(&self, line: String) {
        let mut lines = self.0.locked();
        if lines.len() == Self::LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub fn last(&self) -> Option<String> {
        self.0.locked().iter().rev().find(|l| !l.trim().is_empty()).cloned()
    }
}

/// A live connection.
pub(crate) struct Connected {
    pub peer: rmcp::Peer<RoleClient>,
    pub capabilities: ServerCapabilities,
    pub protocol: String,
    pub auth: AuthState,
    /// Cancelled to close the connection (and end its watcher and token refresher).
    pub stop: CancellationToken,
    pub stderr: StderrTail,
    service: Option<RunningService<RoleClient, Handler>>,
    tokens: Option<Arc<tokio::sync::Mutex<AuthorizationManager>>>,
    /// A signed-in connection's token record: what a step-up sign-in replaces.
    pub credentials: Option<FileCredentials>,
    /// How it was reached in the end (a Streamable HTTP server may have turned out a legacy one).
    pub transport: Option<TransportKind>,
}

impl Connected {
    /// Hands the service to a watcher that calls `lost` with a reason when the connection ends by
    /// itself (the process exited, the transport closed); a `stop` ends it quietly.
    pub fn watch(&mut self, lost: impl FnOnce(String) + Send + 'static) {
        let Some(service) = self.service.take() else { return };
        let (stop, stderr) = (self.stop.clone(), self.stderr.clone());
        let quit = service.cancellation_token();
        tokio::spawn(async move {
            tokio::select! {
                reason = service.waiting() => {
                    if stop.is_cancelled() {
                        return;
                    }
                    let why = match (reason, stderr.last()) {
                        (_, Some(line)) => format!("the connection closed; its last words: {line}"),
                        (Ok(_), None) => "the connection closed".to_owned(),
                        (Err(e), None) => format!("its client task ended: {e}"),
                    };
                    lost(why);
                }
                _ = stop.cancelled() => quit.cancel(),
            }
        });
        if let Some(tokens) = self.tokens.take() {
            tokio::spawn(refresh_ahead(tokens, self.stop.clone()));
        }
    }
}

/// Connects, handshakes and lists nothing yet (the caller bounds it all by the server's time-out).
pub(crate) async fn connect(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
    signals: Arc<Signals>,
) -> Result<Connected, StartFailure> {
    let handler = Handler { signals: signals.clone() };
    let connected = match settings.transport(name).map_err(StartFailure::Failed)? {
        TransportKind::Stdio => connect_stdio(name, settings, &context.withheld_env, handler).await?,
        TransportKind::Http => connect_http(name, settings, context, handler).await?,
        TransportKind::Sse => connect_sse(name, settings, context, handler).await?,
    };
    let stateless = connected.protocol.as_str() >= ProtocolVersion::NO_INITIALIZE.as_str();
    if stateless && connected.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true) {
        listen_for_changes(&connected.peer, signals, connected.stop.clone());
    }
    Ok(connected)
}

async fn connect_stdio(
    name: &str,
    settings: &McpSettings,
    withheld: &WithheldEnv,
    handler: Handler,
) -> Result<Connected, StartFailure> {
    let (transport, tail) = spawn_stdio(name, settings, withheld)?;
    let refused = match handler.clone().serve(transport).await {
        Ok(service) => return Ok(connected(service, AuthState::None, tail, None)),
        Err(rmcp::service::ClientInitializeError::JsonRpcError(error)) => error,
        Err(e) => return Err(handshake_failed(&e, &tail)),
    };
    // It refused `initialize`: a server of the stateless revision only. Start it again and discover.
    tracing::debug!(server = %name, "initialize refused ({}); trying server/discover", refused.message);
    let (transport, tail) = spawn_stdio(name, settings, withheld)?;
    let discover = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    match handler.serve_with_lifecycle(transport, discover).await {
        Ok(service) => Ok(connected(service, AuthState::None, tail, None)),
        Err(e) => Err(handshake_failed(&e, &tail)),
    }
}

fn spawn_stdio(
    name: &str,
    settings: &McpSettings,
    withheld: &WithheldEnv,
) -> Result<(TokioChildProcess, StderrTail), StartFailure> {
    let Some((program, args)) = settings.command.split_first() else {
        return Err(StartFailure::Failed(format!("[mcp.{name}] has an empty `command`")));
    };
    let mut command = tokio::process::Command::new(program);
    for variable in withheld.for_server(settings) {
        command.env_remove(variable);
    }
    command.args(args).envs(&settings.env);
    let (transport, stderr) = TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| StartFailure::Failed(format!("cannot start `{program}`: {e}")))?;
    let tail = StderrTail::default();
    if let Some(stderr) = stderr {
        tokio::spawn(drain_stderr(name.to_owned(), stderr, tail.clone()));
    }
    Ok((transport, tail))
}

fn handshake_failed(error: &rmcp::service::ClientInitializeError, tail: &StderrTail) -> StartFailure {
    let why = describe(error);
    StartFailure::Failed(match tail.last() {
        Some(line) => {
            let line = codeloop_types::escape_controls(&line).into_owned();
            format!("the MCP handshake failed ({why}); its last words: {line}")
        }
        None => format!("the MCP handshake failed: {why}"),
    })
}

async fn drain_stderr(name: String, stderr: tokio::process::ChildStderr, tail: StderrTail) {
    use tokio::io::AsyncBufReadExt as _;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %name, "{line}");
        tail.push(line);
    }
}

fn connected(
    service: RunningService<RoleClient, Handler>,
    auth: AuthState,
    stderr: StderrTail,
    tokens: Option<Arc<tokio::sync::Mutex<AuthorizationManager>>>,
) -> Connected {
    let info = service.peer().peer_info();
    let capabilities = info.as_ref().map(|i| i.capabilities.clone()).unwrap_or_default();
    let protocol = info.as_ref().map(|i| i.protocol_version.to_string()).unwrap_or_default();
    Connected {
        peer: service.peer().clone(),
        capabilities,
        protocol,
        auth,
        stop: CancellationToken::new(),
        stderr,
        service: Some(service),
        tokens,
        credentials: None,
        transport: None,
    }
}

/// The lifecycle over HTTP: `server/discover` first, `initialize` for servers of the older revisions.
fn http_lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// The HTTP handshake: rmcp's probe, then — when the server answered `server/discover` with something
/// that is neither a discover result nor a JSON-RPC error (an empty `{}`, an HTML error page, a 404/405:
/// servers of the older revisions do all of these) — plain `initialize` on a fresh transport, as the
/// spec's backward-compatibility rules ask. A sign-in demand is never retried.
async fn handshake_http<C>(
    handler: Handler,
    client: C,
    config: StreamableHttpClientTransportConfig,
) -> Result<RunningService<RoleClient, Handler>, rmcp::service::ClientInitializeError>
where
    C: rmcp::transport::streamable_http_client::StreamableHttpClient + Clone + Send + Sync + 'static,
{
    let transport = StreamableHttpClientTransport::with_client(client.clone(), config.clone());
    let probed = match handler.clone().serve_with_lifecycle(transport, http_lifecycle()).await {
        Ok(service) => return Ok(service),
        Err(e) if e.is_authorization_required() || e.auth_challenge().is_some() => return Err(e),
        Err(e) => e,
    };
    tracing::debug!("server/discover was not understood ({probed}); trying initialize");
    let transport = StreamableHttpClientTransport::with_client(client, config);
    handler.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize).await.map_err(|e| {
        // The first error says more when the retry failed the same way (a dead address).
        if e.is_authorization_required() { e } else { probed }
    })
}

async fn connect_http(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
    handler: Handler,
) -> Result<Connected, StartFailure> {
    let url = settings.url.clone().unwrap_or_default();
    let resource = resource_of(&url);
    let mut config = StreamableHttpClientTransportConfig::with_uri(resource.clone());
    config = config.custom_headers(header_map(name, settings, &context.env)?);
    let http = super::http::transport_client().map_err(StartFailure::Failed)?;
    // A configured Authorization header is the credential: codeloop never signs in on top of it.
    let oauth = settings.oauth.enabled() && !settings.has_authorization_header();
    let record = if oauth { context.auth.find(name, &resource) } else { None };
    let Some((path, record)) = record.filter(|(_, r)| r.has_token()) else {
        return match handshake_http(handler.clone(), http, config).await {
            Ok(service) => Ok(connected(service, AuthState::None, StderrTail::default(), None)),
            Err(e) if !e.is_authorization_required() && reached(&e) => {
                legacy_fallback(name, settings, context, handler, &e).await
            }
            Err(e) if e.is_authorization_required() && oauth => {
                Err(StartFailure::NeedsLogin { expired: false, detail: "no sign-in is saved for it".into() })
            }
            Err(e) if e.is_authorization_required() => {
                Err(StartFailure::Failed(if settings.oauth.enabled() {
                    "it refused the configured Authorization header (HTTP 401): check the header's value"
                        .into()
                } else {
                    format!(
                        "it asks for a sign-in, and [mcp.{name}] has oauth = false: remove that line to sign in"
                    )
                }))
            }
            Err(e) => Err(StartFailure::Failed(describe(&e))),
        };
    };
    let credentials = FileCredentials::new(context.auth.clone(), path, record.clone());
    let manager = token_manager(name, &resource, &record, settings, context, credentials.clone()).await?;
    if record.needs_refresh() {
        // DESIGN.md §5e: under a minute left is refreshed before use; a failed refresh is a sign-in.
        manager.refresh_token().await.map_err(|e| StartFailure::NeedsLogin {
            expired: true,
            detail: format!("its token expired and could not be refreshed ({e})"),
        })?;
    }
    let client = AuthClient::new(http, manager);
    let tokens = client.auth_manager.clone();
    match handshake_http(handler.clone(), client, config).await {
        Ok(service) => {
            let mut connected = connected(service, AuthState::SignedIn, StderrTail::default(), Some(tokens));
            connected.credentials = Some(credentials);
            Ok(connected)
        }
        Err(e) if e.is_authorization_required() => Err(StartFailure::NeedsLogin {
            expired: true,
            detail: "it refused the saved sign-in and a refresh did not help".into(),
        }),
        Err(e) if reached(&e) => legacy_fallback(name, settings, context, handler, &e).await,
        Err(e) => Err(StartFailure::Failed(describe(&e))),
    }
}

/// Whether the server answered at all (a refused connection or a time-out is not worth another try).
fn reached(error: &rmcp::service::ClientInitializeError) -> bool {
    use rmcp::service::ClientInitializeError as E;
    match error {
        E::TransportError { error, .. } => matches!(transport_cause(error).1, Reach::Answered),
        E::LegacyFallbackFailed { fallback, .. } => reached(fallback),
        _ => true,
    }
}

/// A server that answered but not as Streamable HTTP: the legacy HTTP+SSE transport, as the spec's
/// backward-compatibility rules say; when that fails too, both reasons are given.
async fn legacy_fallback(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
    handler: Handler,
    streamable: &rmcp::service::ClientInitializeError,
) -> Result<Connected, StartFailure> {
    tracing::debug!(server = %name, "not Streamable HTTP ({streamable}); trying the legacy HTTP+SSE transport");
    match connect_sse(name, settings, context, handler).await {
        Ok(connected) => Ok(connected),
        Err(StartFailure::Failed(legacy)) => Err(StartFailure::Failed(format!(
            "{} (and as a legacy HTTP+SSE server: {legacy})",
            describe(streamable)
        ))),
        Err(other) => Err(other),
    }
}

/// The legacy HTTP+SSE transport (2024-11-05): `transport = "sse"`, or the fallback above. A saved
/// sign-in's token is sent as it is (refreshed only by a Streamable HTTP start or `mcp login`).
async fn connect_sse(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
    handler: Handler,
) -> Result<Connected, StartFailure> {
    let url = settings.url.clone().unwrap_or_default();
    let mut headers = header_map(name, settings, &context.env)?;
    let oauth = settings.oauth.enabled() && !settings.has_authorization_header();
    let token = if oauth { context.auth.find(name, &resource_of(&url)) } else { None }
        .and_then(|(_, record)| record.access_token());
    if let Some(token) = &token {
        let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| StartFailure::Failed("the saved token is not a valid header value".into()))?;
        headers.insert(http::header::AUTHORIZATION, value);
    }
    let client = super::http::transport_client().map_err(StartFailure::Failed)?;
    let transport = match super::legacy_sse::LegacySse::open(client, &url, headers, settings.timeout()).await
    {
        Ok(transport) => transport,
        Err(super::legacy_sse::OpenFailure::Unauthorized) if oauth => {
            let detail =
                if token.is_some() { "it refused the saved sign-in" } else { "no sign-in is saved for it" };
            return Err(StartFailure::NeedsLogin { expired: token.is_some(), detail: detail.into() });
        }
        Err(super::legacy_sse::OpenFailure::Unauthorized) => {
            return Err(StartFailure::Failed("its event stream asks for a sign-in (HTTP 401)".into()));
        }
        Err(super::legacy_sse::OpenFailure::Failed(why)) => return Err(StartFailure::Failed(why)),
    };
    match handler.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize).await {
        Ok(service) => {
            let auth = if token.is_some() { AuthState::SignedIn } else { AuthState::None };
            let mut connected = connected(service, auth, StderrTail::default(), None);
            connected.transport = Some(TransportKind::Sse);
            Ok(connected)
        }
        Err(e) => Err(StartFailure::Failed(describe(&e))),
    }
}

/// An unauthenticated handshake: `Some(challenge)` (the `WWW-Authenticate` value, maybe empty) when the
/// server asks for a sign-in, `None` when it answers without one.
pub(crate) async fn probe_challenge(
    name: &str,
    settings: &McpSettings,
    context: &StartContext,
) -> Result<Option<String>, String> {
    let url = settings.url.clone().unwrap_or_default();
    let config = StreamableHttpClientTransportConfig::with_uri(resource_of(&url)).custom_headers(
        header_map(name, settings, &context.env).map_err(|f| match f {
            StartFailure::Failed(why) | StartFailure::NeedsLogin { detail: why, .. } => why,
        })?,
    );
    let http = super::http::transport_client()?;
    let handler = Handler { signals: Arc::new(Signals::default()) };
    match handshake_http(handler, http, config).await {
        Ok(service) => {
            let _ = service.cancel().await;
            Ok(None)
        }
        Err(e) if e.is_authorization_required() => {
            Ok(Some(e.auth_challenge().unwrap_or_default().to_owned()))
        }
        Err(e) => Err(describe(&e)),
    }
}

/// rmcp's OAuth state for a saved sign-in: the saved metadata (no discovery on the way to a run), the
/// client it was made with, and the record as its credential store.
pub(crate) async fn token_manager(
    name: &str,
    resource: &str,
    record: &AuthRecord,
    settings: &McpSettings,
    context: &StartContext,
    credentials: FileCredentials,
) -> Result<AuthorizationManager, StartFailure> {
    super::ensure_crypto_provider();
    let failed =
        |e: rmcp::transport::auth::AuthError| StartFailure::Failed(format!("cannot use its sign-in: {e}"));
    let mut manager = AuthorizationManager::new(resource).await.map_err(failed)?;
    manager.set_metadata(record.metadata.clone());
    let secret = match settings.oauth.client().filter(|c| c.client_id.as_deref() == Some(&record.client_id)) {
        Some(client) => client_secret(name, client, &context.env).map_err(StartFailure::Failed)?,
        None => record.client_secret.clone(),
    };
    let mut client = OAuthClientConfig::new(record.client_id.clone(), record.redirect_uri.clone());
    if let Some(secret) = secret {
        client = client.with_client_secret(secret);
    }
    manager.configure_client(client).map_err(failed)?;
    manager.set_credential_store(credentials);
    Ok(manager)
}

/// A configured client's secret, from the variable `client_secret_env` names.
pub(crate) fn client_secret(
    name: &str,
    client: &super::settings::OAuthClientSettings,
    env: &EnvLookup,
) -> Result<Option<String>, String> {
    match &client.client_secret_env {
        None => Ok(None),
        Some(variable) => env(variable).filter(|s| !s.is_empty()).map(Some).ok_or_else(|| {
            format!(
                "${variable} is not set: export the client secret of [mcp.{name}] oauth (client_secret_env)"
            )
        }),
    }
}

/// Refreshes the token a minute before it runs out, for as long as the connection lives.
async fn refresh_ahead(tokens: Arc<tokio::sync::Mutex<AuthorizationManager>>, stop: CancellationToken) {
    loop {
        let left = {
            let manager = tokens.lock().await;
            match manager.get_credentials().await {
                Ok((_, Some(token))) => remaining(&token),
                _ => None,
            }
        };
        let Some(left) = left else { return };
        let wait = left.saturating_sub(REFRESH_MARGIN).max(Duration::from_secs(1));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return,
        }
        if let Err(e) = tokens.lock().await.refresh_token().await {
            // The next request's 401 tries once more; after that the server needs a sign-in.
            tracing::debug!("refreshing an MCP token ahead of time failed: {e}");
            return;
        }
    }
}

fn remaining(token: &rmcp::transport::auth::OAuthTokenResponse) -> Option<Duration> {
    use oauth2::TokenResponse as _;
    token.expires_in()
}

fn header_map(
    name: &str,
    settings: &McpSettings,
    env: &EnvLookup,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, StartFailure> {
    let mut map = HashMap::new();
    for (key, value) in settings.resolved_headers(name, env).map_err(StartFailure::Failed)? {
        let header = http::HeaderName::from_bytes(key.as_bytes()).map_err(|_| {
            StartFailure::Failed(format!("header `{key}` of [mcp.{name}] is not a valid header name"))
        })?;
        let value = http::HeaderValue::from_str(&value).map_err(|_| {
            StartFailure::Failed(format!(
                "the value of header `{key}` of [mcp.{name}] is not a valid header value"
            ))
        })?;
        map.insert(header, value);
    }
    Ok(map)
}

/// On a 2026-07-28 connection list changes come on a `subscriptions/listen` stream.
fn listen_for_changes(peer: &rmcp::Peer<RoleClient>, signals: Arc<Signals>, stop: CancellationToken) {
    let peer = peer.clone();
    tokio::spawn(async move {
        let mut filter = SubscriptionFilter::new();
        filter.tools_list_changed = Some(true);
        let mut subscription = match peer.listen(filter).await {
            Ok(subscription) => subscription,
            Err(e) => {
                tracing::debug!("the MCP server took no subscription: {e}");
                return;
            }
        };
        loop {
            tokio::select! {
                next = subscription.next() => match next {
                    Ok(Some(rmcp::model::ServerNotification::ToolListChangedNotification(_))) => signals.tools_changed(),
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                },
                _ = stop.cancelled() => return,
            }
        }
    });
}

/// An error in words a person can act on: its message and innermost cause, once each ("cannot connect
/// to http://…: Connection refused"), seeing through rmcp's transport wrappers.
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    // A server's or a transport's words are outside text.
    codeloop_types::escape_controls(&describe_raw(error)).into_owned()
}

fn describe_raw(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(start) = error.downcast_ref::<rmcp::service::ClientInitializeError>() {
        use rmcp::service::ClientInitializeError as E;
        match start {
            E::TransportError { error, context } => {
                return match transport_cause(error) {
                    (cause, Reach::Unreachable) => cause,
                    (cause, Reach::Answered) => format!("{cause} ({context})"),
                };
            }
            E::LegacyFallbackFailed { fallback, .. } => return describe_raw(fallback.as_ref()),
            _ => {}
        }
    }
    if let Some(rmcp::ServiceError::TransportSend(error)) = error.downcast_ref::<rmcp::ServiceError>() {
        return transport_cause(error).0;
    }
    chained(error)
}

/// Whether the server was reached at all.
enum Reach {
    Unreachable,
    Answered,
}

fn transport_cause(error: &rmcp::transport::DynamicTransportError) -> (String, Reach) {
    let inner: &(dyn std::error::Error + 'static) = error.error.as_ref();
    let mut source = Some(inner);
    let mut deepest = inner.to_string();
    let mut http: Option<&reqwest_mcp::Error> = None;
    while let Some(cause) = source {
        http = http.or_else(|| cause.downcast_ref::<reqwest_mcp::Error>());
        deepest = cause.to_string();
        source = match cause.downcast_ref::<StreamableHttpError<reqwest_mcp::Error>>() {
            // rmcp keeps the HTTP client's error without naming it as the source.
            Some(StreamableHttpError::Client(client)) => Some(client as &(dyn std::error::Error + 'static)),
            _ => cause.source(),
        };
    }
    match http {
        Some(e) if e.is_connect() => {
            let url = e.url().map(|u| u.to_string()).unwrap_or_else(|| "the server".into());
            (format!("cannot connect to {url}: {deepest}"), Reach::Unreachable)
        }
        Some(e) if e.is_timeout() => ("the request timed out".to_owned(), Reach::Unreachable),
        _ => (chained(inner), Reach::Answered),
    }
}

fn chained(error: &(dyn std::error::Error + 'static)) -> String {
    let top = error.to_string();
    let mut deepest: Option<String> = None;
    let mut source = error.source();
    while let Some(cause) = source {
        deepest = Some(cause.to_string());
        source = cause.source();
    }
    match deepest {
        Some(cause) if !top.contains(&cause) => format!("{top}: {cause}"),
        _ => top,
    }
}
