//! The ACP agent: one per connection. Answers `initialize`, creates and loads sessions, sets modes and
//! models ([`crate::side`] maps the protocol's methods onto these; prompt turns are [`crate::turn`]'s).
//!
//! Owns: the sessions this connection knows, one engine per (project directory, client MCP servers),
//! and each request's validation into a JSON-RPC error a client can show.
//! Must not: decide engine rules; every check (agent names, models) is the engine's own.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use codeloop_core::mcp::{McpOrigin, McpSettings};
use codeloop_core::{Engine, EngineError, ErrorKind};
use codeloop_types::{ModelRef, SessionId};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::protocol::{
    self, AgentCapabilities, ConfigOption, ConfigValue, Implementation, InitializeRequest,
    InitializeResponse, LoadSessionRequest, LoadSessionResponse, McpCapabilities, McpServer,
    NewSessionRequest, NewSessionResponse, PromptCapabilities, SessionMode, SessionModeState,
    SessionNotification, SessionUpdate, code, method,
};
use crate::rpc::{Peer, RpcError};
use crate::{AcpOptions, Host, stream};
use codeloop_types::LockExt;

/// What a prompt turn uses of a session, changed by `session/set_mode` and `session/set_config_option`.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub mode: String,
    pub model: Option<ModelRef>,
    /// `None`: the agent's or model's own (DESIGN.md §5l).
    pub effort: Option<codeloop_types::Effort>,
}

/// A session this connection created or loaded.
pub(crate) struct AcpSession {
    pub id: SessionId,
    pub engine: Engine,
    pub cwd: PathBuf,
    pub choice: Mutex<Choice>,
    /// One turn at a time: a second prompt waits for the first.
    pub turn: tokio::sync::Mutex<()>,
    /// Prompts running or waiting; `session/cancel` cancels them all.
    pub cancels: Mutex<Vec<(u64, CancellationToken)>>,
    /// Config warnings not yet shown (shown at the start of the next turn).
    pub warnings: Mutex<Vec<String>>,
}

pub struct Agent {
    pub(crate) peer: Peer,
    host: Arc<dyn Host>,
    pub(crate) options: AcpOptions,
    /// Whether the client shows `notice` updates.
    notices: Mutex<bool>,
    sessions: Mutex<HashMap<SessionId, Arc<AcpSession>>>,
    /// Running `session/prompt` requests by JSON-RPC id, for `$/cancel_request`.
    pub(crate) prompts: Mutex<HashMap<String, CancellationToken>>,
    engines: tokio::sync::Mutex<HashMap<String, (Engine, Vec<String>)>>,
}

impl Agent {
    pub fn new(peer: Peer, host: Arc<dyn Host>, options: AcpOptions) -> Self {
        Self {
            peer,
            host,
            options,
            notices: Mutex::new(false),
            sessions: Mutex::new(HashMap::new()),
            prompts: Mutex::new(HashMap::new()),
            engines: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// `session/cancel`: every turn of the session running or waiting stops.
    pub(crate) fn cancel_session(&self, session: &str) {
        match self.sessions.locked().get(&SessionId::from(session)).cloned() {
            Some(session) => session.cancels.locked().iter().for_each(|(_, c)| c.cancel()),
            None => tracing::debug!("session/cancel for unknown session {session}"),
        }
    }

    /// `$/cancel_request`: a cancelled `session/prompt` ends like `session/cancel`; other requests finish
    /// quickly.
    pub(crate) fn cancel_prompt(&self, request: &Value) {
        if let Some(token) = self.prompts.locked().get(&request.to_string()) {
            token.cancel();
        }
    }

    pub(crate) fn initialize(&self, request: InitializeRequest) -> InitializeResponse {
        let notices = request.client_capabilities.session.and_then(|s| s.notices).is_some();
        *self.notices.locked() = notices;
        if request.protocol_version != protocol::PROTOCOL_VERSION {
            tracing::info!(
                "the client speaks ACP version {}; answering with {}",
                request.protocol_version,
                protocol::PROTOCOL_VERSION
            );
        }
        InitializeResponse {
            protocol_version: protocol::PROTOCOL_VERSION,
            agent_capabilities: AgentCapabilities {
                load_session: true,
                // Images become file parts the model sees; audio has no provider path yet.
                prompt_capabilities: PromptCapabilities { image: true, audio: false, embedded_context: true },
                mcp_capabilities: McpCapabilities { http: true, sse: false },
                session_capabilities: protocol::SessionCapabilities {
                    list: json!({}),
                    resume: json!({}),
                    close: json!({}),
                },
            },
            auth_methods: Vec::new(),
            agent_info: Implementation {
                name: "codeloop".into(),
                title: "codeloop".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
        }
    }

    pub(crate) async fn new_session(
        &self,
        request: NewSessionRequest,
    ) -> Result<NewSessionResponse, RpcError> {
        let cwd = directory(&request.cwd)?;
        let (engine, warnings) = self.engine(&cwd, &request.mcp_servers).await?;
        engine.check_model(None).map_err(|e| engine_error(&e))?;
        let session = engine.create_session(&cwd, None, None, None).await.map_err(|e| engine_error(&e))?;
        let acp = self.register(engine, session, warnings);
        let response = NewSessionResponse {
            session_id: acp.id.to_string(),
            modes: modes(&acp),
            config_options: config_options(&acp),
        };
        Ok(response)
    }

    pub(crate) async fn load_session(
        &self,
        request: LoadSessionRequest,
    ) -> Result<LoadSessionResponse, RpcError> {
        let acp = self.open_session(&request).await?;
        let history = acp.engine.history(&acp.id).await.map_err(|e| engine_error(&e))?;
        for update in stream::replay(&history, acp.cwd.clone()) {
            self.send_update(&acp.id, update).await;
        }
        Ok(LoadSessionResponse { modes: modes(&acp), config_options: config_options(&acp) })
    }

    /// A stored session, under the config of its own directory (whatever directory the editor is in).
    async fn open_session(&self, request: &LoadSessionRequest) -> Result<Arc<AcpSession>, RpcError> {
        let cwd = directory(&request.cwd)?;
        let id = SessionId::from(request.session_id.as_str());
        let (engine, _) = self.engine(&cwd, &request.mcp_servers).await?;
        let stored = engine.session(&id).await.map_err(|e| engine_error(&e))?;
        let directory = PathBuf::from(&stored.directory);
        let (engine, warnings) = if directory != cwd && directory.is_dir() {
            self.engine(&directory, &request.mcp_servers).await?
        } else {
            self.engine(&cwd, &request.mcp_servers).await?
        };
        Ok(self.register(engine, stored, warnings))
    }

    fn register(
        &self,
        engine: Engine,
        session: codeloop_types::Session,
        warnings: Vec<String>,
    ) -> Arc<AcpSession> {
        let mut sessions = self.sessions.locked();
        // Loaded again while known: keep its running turn, cancel list and choices.
        if let Some(known) = sessions.get(&session.id) {
            return known.clone();
        }
        let acp = Arc::new(AcpSession {
            id: session.id.clone(),
            engine,
            cwd: PathBuf::from(&session.directory),
            choice: Mutex::new(Choice {
                mode: session.agent.clone(),
                model: session.model.clone(),
                effort: None,
            }),
            turn: tokio::sync::Mutex::new(()),
            cancels: Mutex::new(Vec::new()),
            warnings: Mutex::new(warnings),
        });
        sessions.insert(session.id, acp.clone());
        acp
    }

    pub(crate) fn session(&self, id: &str) -> Result<Arc<AcpSession>, RpcError> {
        self.sessions.locked().get(&SessionId::from(id)).cloned().ok_or_else(|| {
            RpcError::not_found(format!(
                "Session not found: {id} (create it with session/new or session/load)"
            ))
        })
    }

    /// The one agent rule (the engine's), then the client hears the new mode.
    pub(crate) async fn set_mode(&self, session: &AcpSession, mode: &str) -> Result<(), RpcError> {
        session.engine.check_agent(mode).map_err(|e| engine_error(&e))?;
        session.choice.locked().mode = mode.to_owned();
        let update = SessionUpdate::CurrentModeUpdate { current_mode_id: mode.to_owned() };
        self.send_update(&session.id, update).await;
        Ok(())
    }

    pub(crate) async fn list_sessions(
        &self,
        request: protocol::ListSessionsRequest,
    ) -> Result<protocol::ListSessionsResponse, RpcError> {
        let directory = match &request.cwd {
            Some(cwd) => Some(directory(cwd)?.display().to_string()),
            None => None,
        };
        let cwd = request.cwd.clone().unwrap_or_else(|| std::env::current_dir().unwrap_or_default());
        let (engine, _) = self.engine(&directory.as_ref().map_or(cwd, PathBuf::from), &[]).await?;
        let filter = codeloop_types::SessionFilter { directory, ..Default::default() };
        let sessions = engine.sessions(filter).await.map_err(|e| engine_error(&e))?;
        // One page: the cursor is the number already sent.
        const PAGE: usize = 100;
        let skip: usize = request.cursor.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0);
        let page: Vec<protocol::SessionInfo> = sessions
            .iter()
            .skip(skip)
            .take(PAGE)
            .map(|s| protocol::SessionInfo {
                session_id: s.id.to_string(),
                cwd: PathBuf::from(&s.directory),
                title: Some(s.title.clone()).filter(|t| !t.is_empty()),
                updated_at: Some(codeloop_types::iso8601(s.time.updated)),
            })
            .collect();
        let next_cursor = (skip + page.len() < sessions.len()).then(|| (skip + page.len()).to_string());
        Ok(protocol::ListSessionsResponse { sessions: page, next_cursor })
    }

    /// Like `session/load`, without replaying the conversation.
    pub(crate) async fn resume_session(
        &self,
        request: protocol::ResumeSessionRequest,
    ) -> Result<protocol::ResumeSessionResponse, RpcError> {
        let acp = self.open_session(&request).await?;
        Ok(protocol::ResumeSessionResponse { modes: modes(&acp), config_options: config_options(&acp) })
    }

    /// Cancels the session's turns and forgets it here (the stored session stays).
    pub(crate) fn close_session(
        &self,
        request: protocol::CloseSessionRequest,
    ) -> Result<protocol::EmptyResponse, RpcError> {
        let session = self.sessions.locked().remove(&SessionId::from(request.session_id.as_str()));
        match session {
            Some(session) => {
                session.cancels.locked().iter().for_each(|(_, c)| c.cancel());
                // The editor is done with it: its SessionEnd hooks run (in the background; the answer
                // does not wait for them).
                let (engine, id) = (session.engine.clone(), SessionId::from(request.session_id.as_str()));
                tokio::spawn(async move { engine.end_session(&id, "other").await });
                Ok(protocol::EmptyResponse {})
            }
            None => Err(RpcError::not_found(format!("Session not found: {}", request.session_id))),
        }
    }

    pub(crate) async fn set_config_option(
        &self,
        request: protocol::SetConfigOptionRequest,
    ) -> Result<protocol::SetConfigOptionResponse, RpcError> {
        let session = self.session(&request.session_id)?;
        let value = request
            .value
            .as_str()
            .ok_or_else(|| RpcError::invalid_params("Invalid params: `value` must be a string"))?;
        match request.config_id.as_str() {
            "mode" => self.set_mode(&session, value).await?,
            "model" => {
                let model: ModelRef =
                    value.parse().map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))?;
                session.engine.check_model(Some(&model)).map_err(|e| engine_error(&e))?;
                session.choice.locked().model = Some(model);
            }
            "effort" => {
                session.choice.locked().effort = match value {
                    DEFAULT_EFFORT => None,
                    level => Some(
                        level
                            .parse()
                            .map_err(|e| RpcError::invalid_params(format!("Invalid params: {e}")))?,
                    ),
                };
            }
            other => {
                return Err(RpcError::invalid_params(format!("Invalid params: no config option `{other}`")));
            }
        }
        Ok(protocol::SetConfigOptionResponse { config_options: config_options(&session) })
    }

    /// The engine for a directory and a set of client MCP servers, opened on first use.
    async fn engine(
        &self,
        directory: &Path,
        servers: &[McpServer],
    ) -> Result<(Engine, Vec<String>), RpcError> {
        let (mcp, mut skipped) = mcp_settings(servers);
        let key = format!("{}\n{}", directory.display(), serde_json::to_string(&mcp).unwrap_or_default());
        let mut engines = self.engines.lock().await;
        if let Some((engine, warnings)) = engines.get(&key) {
            let mut warnings = warnings.clone();
            warnings.append(&mut skipped);
            return Ok((engine.clone(), warnings));
        }
        let host = self.host.clone();
        let dir = directory.to_owned();
        let opened = tokio::task::spawn_blocking(move || host.open(&dir, mcp))
            .await
            .map_err(|e| RpcError::internal(format!("cannot open the engine: {e}")))?
            .map_err(|e| RpcError::internal(format!("{e:#}")))?;
        engines.insert(key, (opened.engine.clone(), opened.warnings.clone()));
        let mut warnings = opened.warnings;
        warnings.append(&mut skipped);
        Ok((opened.engine, warnings))
    }

    /// Sends `available_commands_update`: the session's commands (built-ins, command files, MCP
    /// prompts), which the person types as `/NAME args`.
    pub async fn announce_commands(&self, session: &str) {
        let Ok(acp) = self.session(session) else { return };
        let commands = acp.engine.commands(&acp.cwd).await;
        let available_commands = commands
            .into_iter()
            .map(|c| protocol::AvailableCommand {
                description: c.description.unwrap_or_else(|| format!("/{}", c.name)),
                input: c.argument_hint.map(|hint| protocol::AvailableCommandInput { hint }),
                name: c.name,
            })
            .collect();
        self.send_update(&acp.id, SessionUpdate::AvailableCommandsUpdate { available_commands }).await;
    }

    pub(crate) async fn send_update(&self, session: &SessionId, update: SessionUpdate) {
        let notification = SessionNotification { session_id: session.to_string(), update };
        self.peer.notify(method::SESSION_UPDATE, notification).await;
    }

    /// Tells the person something outside the answer: a `notice` where the client shows them, else a
    /// quoted line in the message stream.
    pub(crate) async fn notice(&self, session: &SessionId, text: &str) {
        tracing::warn!("{text}");
        let update = if *self.notices.locked() {
            SessionUpdate::Notice { severity: "warning", title: text.to_owned() }
        } else {
            SessionUpdate::AgentMessageChunk {
                content: protocol::ContentBlock::text(format!("\n\n> {text}\n\n")),
            }
        };
        self.send_update(session, update).await;
    }

    /// Stops every running turn (the input ended).
    pub async fn shutdown(&self) {
        let sessions: Vec<Arc<AcpSession>> = self.sessions.locked().values().cloned().collect();
        for session in sessions {
            session.cancels.locked().iter().for_each(|(_, c)| c.cancel());
        }
    }

    /// Waits until every engine's writes are durable.
    pub async fn flush(&self) {
        let engines: Vec<Engine> = self.engines.lock().await.values().map(|(e, _)| e.clone()).collect();
        for engine in engines {
            if let Err(e) = engine.flush().await {
                tracing::warn!("cannot flush the store: {e}");
            }
        }
    }
}

/// An existing absolute directory, canonical.
/// An engine error as ACP answers it, by whose fault it is (the same [`ErrorKind`] that chooses the HTTP
/// status): the caller's as invalid params (not found as `-32002`), the configuration's, a server's and
/// codeloop's own as internal errors; `data.kind` says which.
pub(crate) fn engine_error(error: &EngineError) -> RpcError {
    let kind = error.kind();
    let code = match kind {
        ErrorKind::NotFound => code::RESOURCE_NOT_FOUND,
        ErrorKind::Invalid | ErrorKind::Conflict | ErrorKind::Busy | ErrorKind::Refused => {
            code::INVALID_PARAMS
        }
        ErrorKind::Config | ErrorKind::Upstream | ErrorKind::Internal => code::INTERNAL_ERROR,
    };
    RpcError { code, message: error.to_string(), data: Some(json!({ "kind": kind })) }
}

fn directory(cwd: &Path) -> Result<PathBuf, RpcError> {
    if !cwd.is_absolute() {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: cwd must be an absolute path, got {}",
            cwd.display()
        )));
    }
    let dir = cwd.canonicalize().map_err(|e| {
        RpcError::invalid_params(format!("Invalid params: cannot use cwd {}: {e}", cwd.display()))
    })?;
    if !dir.is_dir() {
        return Err(RpcError::invalid_params(format!(
            "Invalid params: {} is not a directory",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The client's MCP servers as `[mcp.NAME]` settings: stdio and http (Streamable HTTP, headers sent as
/// given), started under the same rules as the user's own; a warning for each one codeloop cannot start
/// (the older SSE transport, which it does not advertise).
fn mcp_settings(servers: &[McpServer]) -> (BTreeMap<String, McpSettings>, Vec<String>) {
    let mut settings = BTreeMap::new();
    let mut skipped = Vec::new();
    for server in servers {
        let entry = match (server.kind.as_deref(), &server.command, &server.url) {
            (None, Some(command), _) => {
                let command = std::iter::once(command.display().to_string())
                    .chain(server.args.iter().cloned())
                    .collect();
                let env = server.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect();
                McpSettings { command, env, ..Default::default() }
            }
            (Some("http"), _, Some(url)) => {
                let mut entry = McpSettings::remote(url.clone());
                for header in &server.headers {
                    entry.headers.insert(header.name.clone(), header.value.clone());
                    // The editor's values are sent as written: nothing in them is expanded.
                    entry.literal_headers.insert(header.name.clone());
                }
                entry
            }
            (kind, _, _) => {
                skipped.push(format!(
                    "MCP server `{}` is not started: codeloop starts stdio and http (Streamable HTTP) MCP servers ({})",
                    server.name,
                    match kind {
                        Some("sse") => "this one uses the older SSE transport".to_owned(),
                        Some(other) => format!("this one is `{other}` without a url"),
                        None => "this one has no command".to_owned(),
                    }
                ));
                continue;
            }
        };
        settings.insert(server.name.clone(), McpSettings { origin: McpOrigin::Editor, ..entry });
    }
    (settings, skipped)
}

fn modes(session: &AcpSession) -> SessionModeState {
    let current = session.choice.locked().mode.clone();
    let available = session
        .engine
        .agents()
        .into_iter()
        .map(|a| SessionMode { id: a.name.clone(), name: a.name, description: Some(a.description) })
        .collect();
    SessionModeState { current_mode_id: current, available_modes: available }
}

/// Mode and model as select options (clients that prefer config options over modes use these).
fn config_options(session: &AcpSession) -> Vec<ConfigOption> {
    let modes = modes(session);
    let choice = session.choice.locked().clone();
    let mut options = vec![ConfigOption {
        id: "mode".into(),
        name: "Mode".into(),
        description: Some("build changes files; plan only reads and proposes".into()),
        category: "mode".into(),
        kind: "select",
        current_value: modes.current_mode_id,
        options: modes
            .available_modes
            .into_iter()
            .map(|m| ConfigValue { value: m.id, name: m.name, description: m.description })
            .collect(),
    }];
    let mut models: Vec<String> = session
        .engine
        .config()
        .provider
        .iter()
        .flat_map(|(provider, settings)| {
            settings.models.keys().map(move |model| format!("{provider}/{model}"))
        })
        .collect();
    if let Some(current) = &choice.model {
        let current = current.to_string();
        if !models.contains(&current) {
            models.insert(0, current);
        }
    }
    if let Some(current) = choice.model.map(|m| m.to_string()) {
        options.push(ConfigOption {
            id: "model".into(),
            name: "Model".into(),
            description: None,
            category: "model".into(),
            kind: "select",
            current_value: current,
            options: models
                .into_iter()
                .map(|m| ConfigValue { value: m.clone(), name: m, description: None })
                .collect(),
        });
    }
    let effort =
        |value: &str, name: &str| ConfigValue { value: value.into(), name: name.into(), description: None };
    let mut levels = vec![effort(DEFAULT_EFFORT, "Default (the agent's or model's)")];
    levels.extend(codeloop_types::Effort::ALL.into_iter().map(|e| effort(e.as_str(), e.as_str())));
    options.push(ConfigOption {
        id: "effort".into(),
        name: "Effort".into(),
        description: Some("How hard the model thinks; a level the model does not take is not sent".into()),
        category: "thought_level".into(),
        kind: "select",
        current_value: choice.effort.map_or(DEFAULT_EFFORT.into(), |e| e.as_str().into()),
        options: levels,
    });
    options
}

/// The effort option's value for "whatever the agent or model sets".
const DEFAULT_EFFORT: &str = "default";

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// ACP answers every engine error by whose fault it is, as the HTTP API does: the caller's are
    /// invalid params (not found `-32002`), the rest internal errors, and `data.kind` names the fault.
    #[test]
    fn engine_errors_become_rpc_errors_by_whose_fault_they_are() {
        use codeloop_core::RunError;
        let cases: Vec<(EngineError, i64, &str)> = vec![
            (EngineError::Invalid("empty".into()), code::INVALID_PARAMS, "invalid"),
            (EngineError::SessionNotFound("ses_x".into()), code::RESOURCE_NOT_FOUND, "not_found"),
            (EngineError::Busy { session: "ses_x".into(), action: "x" }, code::INVALID_PARAMS, "busy"),
            (EngineError::PromptRefused("no".into()), code::INVALID_PARAMS, "refused"),
            (
                EngineError::Config { origin: "codeloop.toml".into(), reason: "bad".into() },
                code::INTERNAL_ERROR,
                "config",
            ),
            (EngineError::Upstream("down".into()), code::INTERNAL_ERROR, "upstream"),
            (EngineError::Internal("lost".into()), code::INTERNAL_ERROR, "internal"),
            (EngineError::Run(RunError::Lost), code::INTERNAL_ERROR, "internal"),
            (EngineError::Run(RunError::Input("empty".into())), code::INVALID_PARAMS, "invalid"),
        ];
        for (error, code, kind) in cases {
            let rpc = engine_error(&error);
            assert_eq!((rpc.code, rpc.data.clone()), (code, Some(json!({ "kind": kind }))), "{error}");
            assert_eq!(rpc.message, error.to_string());
        }
    }

    #[test]
    fn stdio_and_http_mcp_servers_become_settings_and_sse_a_warning() {
        let servers: Vec<McpServer> = serde_json::from_value(json!([
            {"name": "fs", "command": "/bin/mcp-fs", "args": ["--root", "."], "env": [{"name": "A", "value": "1"}]},
            {"name": "web", "type": "http", "url": "https://example.invalid/mcp", "headers": [{"name": "X-Key", "value": "${K}"}]},
            {"name": "old", "type": "sse", "url": "https://example.invalid/sse", "headers": []}
        ]))
        .unwrap();
        let (settings, warnings) = mcp_settings(&servers);
        assert_eq!(settings["fs"].command, ["/bin/mcp-fs", "--root", "."]);
        assert_eq!(settings["fs"].env["A"], "1");
        assert!(settings["fs"].enabled);
        assert_eq!(settings["web"].url.as_deref(), Some("https://example.invalid/mcp"));
        assert_eq!(settings["web"].headers["X-Key"], "${K}");
        assert!(settings["web"].literal_headers.contains("X-Key"), "an editor's header is sent as written");
        assert_eq!(settings["web"].origin, McpOrigin::Editor);
        assert!(!settings.contains_key("old"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("`old`") && warnings[0].contains("SSE"), "{warnings:?}");
    }
}
