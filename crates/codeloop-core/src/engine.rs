//! The engine: the one object the CLI, the server and tests hold. It opens the store, builds the shared
//! services once, and exposes sessions, prompts, aborts, compaction and permission replies.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use codeloop_store::{MessageWithParts, SessionFilter, Store, StoreError, StoreWriter};
use codeloop_tools::{BuiltinConfig, ToolRegistry};
use codeloop_types::{
    EventPayload, Message, MessageId, ModelRef, PartKind, PermissionId, PermissionRequest, Session,
    SessionId, WorkerRequest,
};

use crate::instructions::ProjectInfo;

use crate::agents::{Agent, AgentMode, DEFAULT_AGENT, agents};
use crate::bus::{Bus, Replay};
use crate::config::Config;
use crate::coordinator::{Coordinator, RunResult};
use crate::input::{Delivery, PromptInput};
use crate::models::{EnvLookup, Models};
use crate::permission::{AskPolicy, PermissionEngine, Reply, ReplyError, default_rules};
use crate::run::RunError;
use crate::services::Services;
use crate::stores::{EventIds, StoreChoice, open_store, relayed_bus};
use crate::subagent::TaskTool;

pub use codeloop_tools::TOOL_OUTPUT_RETENTION;

pub struct EngineOptions {
    pub data_dir: PathBuf,
    pub config: Config,
    /// The store; SQLite in `data_dir` unless the environment or the config name another.
    pub store: StoreChoice,
    /// Event ids: this process's own, or the shared store's (`serve` on PostgreSQL).
    pub events: EventIds,
    /// What happens to permission questions nobody can answer.
    pub ask_policy: AskPolicy,
    /// Environment lookup for API keys.
    pub env: EnvLookup,
    /// A global instructions file (`~/.config/codeloop/AGENTS.md`).
    pub global_instructions: Option<PathBuf>,
    /// Folders searched for skills; `None` uses the tools' defaults.
    pub skill_dirs: Option<Vec<PathBuf>>,
    /// Events a live subscriber may fall behind before it lags.
    pub bus_channel_capacity: usize,
    /// Events kept for replay after a reconnect (`Last-Event-ID`).
    pub bus_replay_capacity: usize,
    /// Directories no tool writes without an explicit grant, besides the data dir (the user's config dir).
    pub protected_dirs: Vec<PathBuf>,
    /// The executable with the sandbox helper mode (`codeloop` itself); `None` runs tools' commands
    /// without OS walls (library tests).
    pub sandbox_helper: Option<PathBuf>,
    /// The user's home: secret rules, package caches and masks are under it.
    pub home: Option<PathBuf>,
    /// Loads the config for a session's directory (user files plus that project's own, under its trust):
    /// an engine that serves many projects (`serve`) applies each project's permission rules and
    /// instructions to its sessions. `None`: `config` holds for every session.
    pub project_config: Option<ProjectConfigLoader>,
}

/// See [`EngineOptions::project_config`].
pub type ProjectConfigLoader =
    Arc<dyn Fn(&Path) -> Result<crate::config::LoadedConfig, crate::config::ConfigError> + Send + Sync>;

impl EngineOptions {
    pub fn new(data_dir: impl Into<PathBuf>, config: Config) -> Self {
        Self {
            data_dir: data_dir.into(),
            config,
            store: StoreChoice::default(),
            events: EventIds::default(),
            ask_policy: AskPolicy::Deny,
            env: Arc::new(|name| std::env::var(name).ok()),
            global_instructions: None,
            skill_dirs: None,
            bus_channel_capacity: crate::bus::DEFAULT_CHANNEL_CAPACITY,
            bus_replay_capacity: crate::bus::DEFAULT_REPLAY_CAPACITY,
            protected_dirs: Vec::new(),
            sandbox_helper: None,
            home: None,
            project_config: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(
        "session {0} not found: `codeloop session list --all` (or GET /session) shows the sessions in this data directory"
    )]
    SessionNotFound(SessionId),
    /// The session is running and the operation needs it idle.
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Invalid(String),
}

#[derive(Clone)]
pub struct Engine {
    services: Arc<Services>,
    coordinator: Coordinator,
}

impl Engine {
    /// Opens the data directory (recovering what a crashed run left open) and builds the services.
    pub fn open(options: EngineOptions) -> Result<Engine, EngineError> {
        let store = open_store(&options.store, &options.data_dir, &options.env, &options.config)?;
        let writer = StoreWriter::new(store.clone())?;
        let (bus, peers) = match (options.events, store.event_log()) {
            (EventIds::Store, Some(log)) => (
                relayed_bus(log, options.bus_channel_capacity, options.bus_replay_capacity)?,
                Some(Arc::new(crate::peers::Peers::default())),
            ),
            _ => (Bus::new(options.bus_channel_capacity, options.bus_replay_capacity), None),
        };
        let tool_output_dir = options.data_dir.join("tool-output");
        // Only codeloop's own dirs are outside the project without asking: the spill files here, and each
        // session's temp dir (which the tools treat as part of the project), not the whole system temp dir.
        let allowed = vec![tool_output_dir.display().to_string()];
        let mut defaults = default_rules(&allowed, options.home.as_deref());
        if options.ask_policy == AskPolicy::Wait {
            // Someone can answer: the model may ask questions.
            defaults.push(codeloop_types::PermissionRule::new(
                "question",
                "*",
                codeloop_types::PermissionAction::Allow,
            ));
        }
        let permissions = PermissionEngine::new(store.clone(), bus.clone(), options.ask_policy, defaults);
        let questions = crate::question::Questions::new(bus.clone(), options.ask_policy);
        let skill_dirs = options.skill_dirs.unwrap_or_else(codeloop_tools::SkillTool::default_dirs);
        let mut tools = ToolRegistry::builtin_with(BuiltinConfig { skill_dirs: skill_dirs.clone() });
        let agents = agents(&options.config);
        let subagents: Vec<&Agent> = agents.values().filter(|a| a.mode == AgentMode::Subagent).collect();
        tools.register(Arc::new(TaskTool::new(&subagents)));
        // Spill files are swept now and then every hour, so a long-running server stays bounded too. The
        // thread ends when the engine is dropped (its end of the channel goes with the services).
        let sweep_dir = tool_output_dir.clone();
        let (sweep_stop, stopped) = std::sync::mpsc::channel::<()>();
        let _ = std::thread::Builder::new().name("codeloop-sweep".into()).spawn(move || {
            loop {
                if let Err(e) = codeloop_tools::sweep_tool_output(&sweep_dir, TOOL_OUTPUT_RETENTION)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::debug!("tool output sweep failed: {e}");
                }
                match stopped.recv_timeout(std::time::Duration::from_secs(3600)) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
            }
        });
        let mcp = crate::mcp::McpServers::new(
            options.config.mcp.clone(),
            crate::mcp::StartContext {
                auth: crate::mcp::AuthStore::new(&options.data_dir),
                env: options.env.clone(),
            },
        );
        let data_dir = options.data_dir.clone();
        let services = Arc::new(Services {
            agents,
            models: Models::new(options.config.clone(), options.env),
            config: options.config,
            store,
            journal: crate::services::Journal::new(writer, bus.clone()),
            bus,
            tools: Arc::new(tools),
            permissions,
            questions,
            data_dir: options.data_dir,
            tool_output_dir,
            walls: crate::walls::WallsSetup {
                helper: options.sandbox_helper,
                home: options.home,
                cache_layers: Some(data_dir.join("sandbox").join("caches")),
                masked: options.protected_dirs.iter().cloned().chain([data_dir]).collect(),
            },
            protected_dirs: options.protected_dirs,
            global_instructions: options.global_instructions,
            skill_dirs,
            statuses: Default::default(),
            snapshots: Default::default(),
            mcp,
            peers: peers.clone(),
            project_config: options.project_config,
            warned_projects: Default::default(),
            _sweep_stop: sweep_stop,
            all_tools: Default::default(),
        });
        let coordinator = Coordinator::new(services.clone());
        if let Some(peers) = peers {
            crate::peers::listen(&services, coordinator.downgrade(), peers);
        }
        Ok(Engine { services, coordinator })
    }

    pub fn bus(&self) -> &Bus {
        &self.services.bus
    }

    /// True when a shared store's event log holds event `id`: an id this worker has not delivered yet
    /// but another worker already handed to a client, which this worker will deliver soon.
    pub async fn is_logged_event(&self, id: u64) -> bool {
        let logged = self
            .services
            .blocking(move |store| match store.event_log() {
                Some(log) => log.events_between(id.saturating_sub(1), id.saturating_add(1)),
                None => Ok(None),
            })
            .await;
        matches!(logged, Ok(Some(events)) if events.iter().any(|(logged, _)| *logged == id))
    }

    /// [`Bus::subscribe_after`], reaching further back through a shared store's event log (PostgreSQL
    /// keeps an hour of every worker's events): a client that reconnects to any worker, even one that
    /// started after it left, replays what it missed. Without such a log, or when the log no longer
    /// has it, the replay stays [`Replay::TooFarBehind`].
    pub async fn subscribe_after(
        &self,
        last_id: u64,
    ) -> (Replay, tokio::sync::broadcast::Receiver<Arc<codeloop_types::Event>>) {
        let (replay, receiver) = self.services.bus.subscribe_after(last_id);
        let Replay::TooFarBehind { held_from, held } = replay else { return (replay, receiver) };
        let logged = self
            .services
            .blocking(move |store| match store.event_log() {
                Some(log) => log.events_between(last_id, held_from),
                None => Ok(None),
            })
            .await;
        let older = match logged {
            Ok(Some(older)) => older,
            Ok(None) => return (Replay::TooFarBehind { held_from, held }, receiver),
            Err(error) => {
                tracing::warn!(%error, "could not read missed events from the store");
                return (Replay::TooFarBehind { held_from, held }, receiver);
            }
        };
        let mut events = Vec::with_capacity(older.len() + held.len());
        for (id, json) in older {
            match serde_json::from_str::<EventPayload>(&json) {
                Ok(payload) => events.push(Arc::new(codeloop_types::Event { id, payload })),
                Err(error) => {
                    tracing::warn!(id, %error, "an event from the store could not be read; skipped")
                }
            }
        }
        events.extend(held);
        (Replay::Events(events), receiver)
    }

    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// The MCP servers' state (starting them on first use): what `codeloop mcp list` shows.
    pub async fn mcp_status(&self) -> Vec<crate::mcp::ServerStatus> {
        self.services.mcp.status().await
    }

    /// The MCP servers' prompts as commands `mcp__SERVER__PROMPT` (DESIGN.md §5g): the commands module
    /// lists these next to the Markdown commands.
    pub async fn mcp_prompts(&self) -> Vec<crate::mcp::McpPrompt> {
        self.services.mcp.prompts().await
    }

    /// The text of MCP prompt `command` (`mcp__SERVER__PROMPT`) with its arguments filled in: what a
    /// command sends as the user's message.
    pub async fn mcp_prompt(
        &self,
        command: &str,
        arguments: std::collections::BTreeMap<String, String>,
    ) -> Result<crate::mcp::McpPromptText, crate::mcp::McpPromptError> {
        self.services.mcp.prompt(command, arguments).await
    }

    pub fn config(&self) -> &Config {
        &self.services.config
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.services.store.clone()
    }

    /// Runs the sessions that dead processes or workers left behind (DESIGN.md §5b failover): stored
    /// queued input nobody runs, and runs left open under an expired lease or a released lock. Each is
    /// settled like crash recovery when its run starts, then its queue runs in order. Returns how many
    /// sessions were picked up (some may go to another worker that asked first).
    pub async fn resume_orphans(&self) -> Result<usize, EngineError> {
        let sessions = self.services.blocking(|store| store.orphaned_sessions()).await?;
        for session in &sessions {
            self.coordinator.resume(session);
        }
        Ok(sessions.len())
    }

    /// Calls [`Engine::resume_orphans`] now and then every eighth of a lease (`[store] lease_secs`;
    /// between 0.25 and 2 s), until the engine is dropped. `serve` runs it: a worker takes over what
    /// another worker left soon after its lease expires (a dead worker's lease runs out at most a lease
    /// after its last renewal), not up to half a lease later.
    pub fn spawn_failover(&self) -> tokio::task::JoinHandle<()> {
        let period = (self.services.config.store.lease() / 8)
            .clamp(std::time::Duration::from_millis(250), std::time::Duration::from_secs(2));
        let services = Arc::downgrade(&self.services);
        let coordinator = self.coordinator.downgrade();
        tokio::spawn(async move {
            loop {
                let (Some(services), Some(coordinator)) = (services.upgrade(), coordinator.upgrade()) else {
                    return;
                };
                let engine = Engine { services, coordinator };
                if let Err(error) = engine.resume_orphans().await {
                    tracing::warn!(%error, "could not look for sessions to take over");
                }
                drop(engine);
                tokio::time::sleep(period).await;
            }
        })
    }

    /// A new session in `directory` (agent and model default to config).
    pub fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<ModelRef>,
        parent: Option<SessionId>,
    ) -> Result<Session, EngineError> {
        let agent = agent.unwrap_or(self.services.config.default_agent.as_deref().unwrap_or(DEFAULT_AGENT));
        crate::agents::find(&self.services.agents, agent).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let directory = directory.canonicalize().unwrap_or_else(|_| directory.to_owned());
        let model = model.or_else(|| self.services.models.default_model().ok());
        let mut session = Session::new(directory.display().to_string(), agent, model);
        session.parent_id = parent;
        self.services.store.apply(&[codeloop_store::Write::Session(session.clone())])?;
        self.services
            .bus
            .publish(EventPayload::SessionCreated { session_id: session.id.clone(), info: session.clone() });
        Ok(session)
    }

    /// Checks that a person may pick `name` for a session: a primary agent, not one that runs only as a
    /// subagent (through the task tool) or only inside the runtime (compaction).
    pub fn check_agent(&self, name: &str) -> Result<(), EngineError> {
        let primary: Vec<&str> = self
            .services
            .agents
            .values()
            .filter(|a| a.mode == AgentMode::Primary)
            .map(|a| a.name.as_str())
            .collect();
        let why = match self.services.agents.get(name).map(|a| a.mode) {
            Some(AgentMode::Primary) => return Ok(()),
            Some(AgentMode::Subagent) => "runs only as a subagent, through the task tool",
            Some(AgentMode::Hidden) => "is used by codeloop itself",
            None => "does not exist",
        };
        Err(EngineError::Invalid(format!("agent \"{name}\" {why}: choose one of {}", primary.join(", "))))
    }

    /// Checks that a model can be used (known provider, API key present) before anything is recorded.
    /// `None` means the config's default model.
    pub fn check_model(&self, model: Option<&ModelRef>) -> Result<ModelRef, EngineError> {
        let model = match model {
            Some(model) => model.clone(),
            None => self.services.models.default_model().map_err(|e| EngineError::Invalid(e.to_string()))?,
        };
        self.services.models.resolve(&model).map_err(|e| EngineError::Invalid(e.to_string()))?;
        Ok(model)
    }

    pub fn session(&self, id: &SessionId) -> Result<Session, EngineError> {
        self.services.store.get_session(id)?.ok_or_else(|| EngineError::SessionNotFound(id.clone()))
    }

    /// Renames a session. A run in progress keeps the new title (its own copy takes it at its next save).
    pub fn rename_session(&self, id: &SessionId, title: &str) -> Result<Session, EngineError> {
        let title = title.trim();
        if title.is_empty() {
            return Err(EngineError::Invalid(
                "the title is empty: give the session a title with at least one character".into(),
            ));
        }
        let mut session = self.session(id)?;
        if self.coordinator.is_busy(id) {
            self.services.journal.rename(id, title.to_owned());
        }
        session.title = title.to_owned();
        session.time.updated = codeloop_types::now_ms();
        let mut batch = crate::services::Batch::default();
        batch.session_as_is(&session);
        self.services.journal.commit(batch);
        Ok(session)
    }

    /// Sessions that are busy or waiting to retry (idle sessions are absent).
    pub fn statuses(&self) -> std::collections::HashMap<SessionId, codeloop_types::SessionStatus> {
        self.services.statuses.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>, EngineError> {
        Ok(self.services.store.list_sessions(filter)?)
    }

    pub fn history(&self, id: &SessionId) -> Result<Vec<MessageWithParts>, EngineError> {
        Ok(self.services.store.load_history(id)?)
    }

    /// Deletes a session and its children. Refused while it runs.
    pub fn delete_session(&self, id: &SessionId) -> Result<bool, EngineError> {
        if self.coordinator.is_busy(id) {
            return Err(EngineError::Busy(format!("session {id} is running; abort it first")));
        }
        let _lock = self.services.store.lock_session(id)?;
        let deleted = self.services.store.delete_session(id)?;
        if deleted {
            self.services.bus.publish(EventPayload::SessionDeleted { session_id: id.clone() });
        }
        Ok(deleted)
    }

    /// Sends input to a session and waits for the outcome of the run it starts or joins.
    pub async fn prompt(&self, session: &SessionId, input: PromptInput, delivery: Delivery) -> RunResult {
        if input.is_empty() {
            return Err(RunError::Input("the prompt is empty: send at least one non-empty text part".into()));
        }
        self.coordinator.prompt(session, input, delivery).await
    }

    /// Stops the session's run; returns after its cleanup.
    /// Stops the session's run and returns after its cleanup; with many workers, also a run another
    /// worker owns. False when nothing was running (or the owner did not confirm in time).
    pub async fn abort(&self, session: &SessionId) -> bool {
        if self.coordinator.is_busy(session) {
            self.coordinator.interrupt(session).await;
            return true;
        }
        if self.services.peers.is_none() {
            return false;
        }
        let seen_busy =
            self.services.statuses.lock().unwrap_or_else(|e| e.into_inner()).contains_key(session);
        // A run that started before this worker did was never seen starting: its lease says it runs.
        let running_elsewhere = seen_busy || {
            let id = session.clone();
            let probe = self.services.blocking(move |store| match store.lock_session(&id) {
                Ok(_free) => Ok(false),
                Err(StoreError::SessionBusy(_)) => Ok(true),
                Err(e) => Err(e),
            });
            probe.await.unwrap_or(false)
        };
        if !running_elsewhere {
            return false;
        }
        let ended =
            |p: &EventPayload| matches!(p, EventPayload::SessionIdle { session_id } if session_id == session);
        let timeout = self.services.config.store.lease() + crate::peers::ANSWER_TIMEOUT;
        crate::peers::forward(&self.services, session, WorkerRequest::Abort, timeout, ended).await
    }

    /// Holds the session's run ownership for a change that needs it idle (a revert, an undo), so no
    /// run starts meanwhile, in this process or any other (another `codeloop`, another worker).
    async fn hold_idle(&self, id: &SessionId, what: &str) -> Result<codeloop_store::RunGuard, EngineError> {
        let busy =
            || EngineError::Busy(format!("session {id} is running; wait for it or abort it before {what}"));
        if self.coordinator.is_busy(id) {
            return Err(busy());
        }
        let session = id.clone();
        match self.services.blocking(move |store| store.lock_session(&session)).await {
            Ok(guard) => Ok(guard),
            Err(StoreError::SessionBusy(_)) => Err(busy()),
            Err(e) => Err(e.into()),
        }
    }

    /// Summarises the session now (manual compaction: no automatic continuation).
    pub async fn compact(&self, session: &SessionId) -> RunResult {
        // Checked before the request is recorded: a failed command changes nothing. (The run takes the
        // ownership again; a run that starts in between makes it fail as busy.)
        match self.hold_idle(session, "compacting").await {
            Ok(_free) => {}
            Err(EngineError::Busy(message)) => return Err(RunError::Busy(message)),
            Err(EngineError::Run(e)) => return Err(e),
            Err(EngineError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(RunError::Input(e.to_string())),
        }
        let history = self.services.store.load_history(session)?;
        let Some(last_user) = history.iter().rev().find_map(|m| match &m.info {
            Message::User(u) => Some(u.clone()),
            Message::Assistant(_) => None,
        }) else {
            return Err(RunError::Input(format!("session {session} has no messages to compact")));
        };
        // Fail on an unusable model before recording the request: a failed command changes nothing.
        let model = self
            .services
            .agents
            .get(crate::agents::COMPACTION_AGENT)
            .and_then(|agent| agent.model.clone())
            .unwrap_or_else(|| last_user.model.clone());
        self.services.models.resolve(&model).map_err(RunError::Model)?;
        let request = crate::run::new_compaction_request(session, &last_user, false, false);
        self.services.journal.save_message(&request.info);
        for part in &request.parts {
            self.services.journal.save_part(part);
        }
        self.coordinator.run(session).await
    }

    /// Reverts a session to just before `message`: every file the steps from that message on changed is
    /// put back as it was, and those messages are hidden until the next prompt removes them (or
    /// [`Engine::unrevert`] undoes the revert). Needs snapshots (a git project).
    pub async fn revert(&self, id: &SessionId, message: &MessageId) -> Result<Session, EngineError> {
        let _idle = self.hold_idle(id, "reverting").await?;
        self.flush().await?;
        let session = self.session(id)?;
        let history = self.history(id)?;
        let start = history
            .iter()
            .position(|m| m.info.id() == message)
            .ok_or_else(|| {
                EngineError::Invalid(format!(
                    "message {message} is not part of session {id}: `codeloop session export {id}` lists its message ids"
                ))
            })?;
        let project = ProjectInfo::discover(Path::new(&session.directory));
        let snapshots = self.services.snapshots_for(&project).ok_or_else(|| {
            EngineError::Invalid(
                "snapshots are off for this session (not a git repository, or `snapshot = false` in config)"
                    .into(),
            )
        })?;
        // Only now that the request is known to be valid does a pending revert make way for it: a failed
        // command changes nothing.
        let mut session = if session.revert.is_some() { self.unrevert(id).await? } else { session };
        // Each file goes back to how it was before the first step (from `message` on) that changed it.
        let mut seen = std::collections::HashSet::new();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for part in history[start..].iter().flat_map(|m| &m.parts) {
            let PartKind::Patch(patch) = &part.kind else { continue };
            let fresh: Vec<String> =
                patch.files.iter().filter(|f| seen.insert((*f).clone())).cloned().collect();
            if !fresh.is_empty() {
                groups.push((patch.hash.clone(), fresh));
            }
        }
        let current = snapshots.track().await.map_err(|e| EngineError::Invalid(e.to_string()))?;
        for (hash, files) in &groups {
            snapshots.restore(hash, files).await.map_err(|e| EngineError::Invalid(e.to_string()))?;
        }
        let files: Vec<String> = groups.iter().flat_map(|(_, f)| f.iter().cloned()).collect();
        session.revert =
            Some(codeloop_types::Revert { message_id: message.clone(), snapshot: current, files });
        self.services.journal.save_session(&mut session);
        self.flush().await?;
        Ok(session)
    }

    /// Undoes a revert: the files come back as they were before it.
    pub async fn unrevert(&self, id: &SessionId) -> Result<Session, EngineError> {
        let _idle = self.hold_idle(id, "undoing the revert").await?;
        let mut session = self.session(id)?;
        let Some(revert) = session.revert.clone() else { return Ok(session) };
        let project = ProjectInfo::discover(Path::new(&session.directory));
        let Some(snapshots) = self.services.snapshots_for(&project) else {
            return Err(EngineError::Invalid("this revert cannot be undone: its snapshot is missing".into()));
        };
        snapshots
            .restore(&revert.snapshot, &revert.files)
            .await
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        session.revert = None;
        self.services.journal.save_session(&mut session);
        self.flush().await?;
        Ok(session)
    }

    /// Pending questions: this worker's, and with many workers, those other workers' runs wait on.
    pub fn pending_questions(&self, session: Option<&SessionId>) -> Vec<codeloop_types::QuestionRequest> {
        let remote = self.services.peers.as_ref().map(|p| p.questions(session)).unwrap_or_default();
        with_remote(self.services.questions.pending(session), remote, |q| &q.id)
    }

    /// Answers (`Some`) or rejects (`None`) a pending question of this worker, or with many workers,
    /// one another worker's run waits on (forwarded, and confirmed once it took the answer).
    pub async fn answer_question(
        &self,
        id: &codeloop_types::QuestionId,
        answers: Option<Vec<Vec<String>>>,
    ) -> Result<(), crate::question::QuestionError> {
        let local = match answers.clone() {
            Some(answers) => self.services.questions.reply(id, answers),
            None => self.services.questions.reject(id),
        };
        let Err(crate::question::QuestionError::NotPending(_)) = local else { return local };
        let session = self.services.peers.as_ref().and_then(|p| p.question_session(id));
        let answered = |p: &EventPayload| match p {
            EventPayload::QuestionReplied { request_id, .. }
            | EventPayload::QuestionRejected { request_id, .. } => request_id == id,
            _ => false,
        };
        let request = WorkerRequest::QuestionReply { request_id: id.clone(), answers };
        if self.forward_answer(session, request, answered).await { Ok(()) } else { local }
    }

    /// Answers a pending question: one list of answers per question asked.
    pub fn reply_question(
        &self,
        id: &codeloop_types::QuestionId,
        answers: Vec<Vec<String>>,
    ) -> Result<(), crate::question::QuestionError> {
        self.services.questions.reply(id, answers)
    }

    pub fn reject_question(
        &self,
        id: &codeloop_types::QuestionId,
    ) -> Result<(), crate::question::QuestionError> {
        self.services.questions.reject(id)
    }

    /// Pending permission requests: this worker's, and with many workers, those other workers' runs wait on.
    pub fn pending_permissions(&self, session: Option<&SessionId>) -> Vec<PermissionRequest> {
        let remote = self.services.peers.as_ref().map(|p| p.permissions(session)).unwrap_or_default();
        with_remote(self.services.permissions.pending(session), remote, |p| &p.id)
    }

    pub fn reply_permission(&self, id: &PermissionId, reply: Reply) -> Result<(), ReplyError> {
        self.services.permissions.reply(id, reply)
    }

    /// [`Engine::reply_permission`], or with many workers, the answer to a request another worker's run
    /// waits on: forwarded to it, and confirmed once it took the answer.
    pub async fn answer_permission(&self, id: &PermissionId, reply: Reply) -> Result<(), ReplyError> {
        let local = {
            let (engine, request, reply) = (self.clone(), id.clone(), reply.clone());
            // An "always" reply saves the approval in the store: off the async threads.
            tokio::task::spawn_blocking(move || engine.reply_permission(&request, reply))
                .await
                .unwrap_or_else(|_| Err(ReplyError::Unknown(id.clone())))
        };
        let Err(ReplyError::Unknown(_)) = local else { return local };
        let session = self.services.peers.as_ref().and_then(|p| p.permission_session(id));
        let request = WorkerRequest::PermissionReply {
            request_id: id.clone(),
            reply: reply.reply,
            message: reply.message,
        };
        let replied = |p: &EventPayload| matches!(p, EventPayload::PermissionReplied { request_id, .. } if request_id == id);
        if self.forward_answer(session, request, replied).await { Ok(()) } else { local }
    }

    /// Forwards an answer to the worker whose run of `session` waits for it (`None`: no other worker's
    /// run does); true once `taken` sees that worker took it.
    async fn forward_answer(
        &self,
        session: Option<SessionId>,
        request: WorkerRequest,
        taken: impl Fn(&EventPayload) -> bool,
    ) -> bool {
        match session {
            Some(session) => {
                crate::peers::forward(&self.services, &session, request, crate::peers::ANSWER_TIMEOUT, taken)
                    .await
            }
            None => false,
        }
    }

    /// Waits until everything written so far is durable.
    pub async fn flush(&self) -> Result<(), EngineError> {
        Ok(self.services.journal.flush().await?)
    }
}

/// `local` followed by the entries of `remote` (other workers' runs) it does not already list.
fn with_remote<T, K: PartialEq>(mut local: Vec<T>, remote: Vec<T>, id: impl Fn(&T) -> &K) -> Vec<T> {
    for entry in remote {
        if !local.iter().any(|known| id(known) == id(&entry)) {
            local.push(entry);
        }
    }
    local
}
