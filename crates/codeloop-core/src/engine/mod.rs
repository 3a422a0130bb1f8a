//! The engine: the one object every client holds, and its closed facade. It opens the store, builds the
//! shared services once, and takes [`crate::SessionCommand`]s ([`Engine::submit`]); clients read
//! sessions through it ([`sessions`]) and answer what runs wait on through it ([`answers`]). The services,
//! the store and the coordinator stay inside (reachable only by core's own tests, feature `internals`).

mod answers;
mod commands;
mod file_commands;
mod gc;
mod hooks;
mod jobs;
mod sessions;

pub use gc::{GC_MIN_AGE, GcPolicy, GcReport, StorageUsage};
pub use sessions::{AgentChoice, ProjectItem, ProjectReport};

use std::path::PathBuf;
use std::sync::Arc;

use codeloop_store::StoreWriter;
use codeloop_tools::{BuiltinConfig, ToolRegistry};
use codeloop_types::{EventPayload, LockExt, SessionId};

use crate::agents::{Agent, AgentMode, agents};
use crate::bus::{Bus, Replay};
use crate::config::Config;
use crate::coordinator::Coordinator;
use crate::error::EngineError;
use crate::models::{EnvLookup, Models};
use crate::permission::{AskPolicy, PermissionEngine, default_rules};
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
    /// The user's command folders, highest precedence first; `None`: those under `home`
    /// (`~/.config/codeloop/commands`, `~/.claude/commands`).
    pub command_dirs: Option<Vec<PathBuf>>,
    /// Whether a project directory is trusted, so that its commands' `` !`cmd` `` parts run (DESIGN.md
    /// §5g); `None`: no project is.
    pub project_trust: Option<crate::file_commands::ProjectTrust>,
    /// Events a live subscriber may fall behind before it lags.
    pub bus_channel_capacity: usize,
    /// Events kept for replay after a reconnect (`Last-Event-ID`).
    pub bus_replay_capacity: usize,
    /// Directories no tool writes without an explicit grant, besides the data dir (the user's config dir);
    /// hidden from commands.
    pub protected_dirs: Vec<PathBuf>,
    /// Files and folders outside the project that codeloop or another agent takes programs or rules from
    /// (`CODELOOP_CONFIG`, `~/.claude/settings.json`, `~/.codex`, …): written only with an explicit grant,
    /// read-only for commands, not hidden (DESIGN.md §5j).
    pub protected_paths: Vec<PathBuf>,
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

pub use crate::config::ProjectConfigLoader;

/// Records as lost the running jobs of processes on this machine that are gone (DESIGN.md §5f).
fn settle_lost_jobs(store: &dyn codeloop_store::Store) {
    match store.list_jobs(None) {
        Ok(running) => {
            for (job, owner) in running {
                crate::jobs::settle(store, job, &owner);
            }
        }
        Err(error) => tracing::warn!(%error, "could not look for background jobs left by dead processes"),
    }
}

/// How far back failover looks for prompts a dead process recorded but never began to answer.
const UNANSWERED_WINDOW_MS: i64 = 24 * 3600 * 1000;

/// See [`Engine::scale_figures`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScaleFigures {
    pub queue_depth: u64,
    pub lease_renewals: u64,
    pub leases_lost: u64,
    pub failovers: u64,
}

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
            command_dirs: None,
            project_trust: None,
            bus_channel_capacity: crate::bus::DEFAULT_CHANNEL_CAPACITY,
            bus_replay_capacity: crate::bus::DEFAULT_REPLAY_CAPACITY,
            protected_dirs: Vec::new(),
            protected_paths: Vec::new(),
            sandbox_helper: None,
            home: None,
            project_config: None,
        }
    }
}

#[derive(Clone)]
pub struct Engine {
    services: Arc<Services>,
    coordinator: Coordinator,
    /// Other workers' runs on a shared store (`None` with a store of this process alone).
    peers: Option<Arc<crate::peers::Peers>>,
}

impl Engine {
    /// Opens the data directory (recovering what a crashed run left open) and builds the services.
    pub fn open(options: EngineOptions) -> Result<Engine, EngineError> {
        let store = open_store(&options.store, &options.data_dir, &options.env, &options.config)?;
        let writer = Arc::new(StoreWriter::new(store.clone())?);
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
        let elicitations = crate::elicitation::Elicitations::new(bus.clone(), options.ask_policy);
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
        let owner = crate::jobs::Owner::this_process();
        settle_lost_jobs(store.as_ref());
        let settled_at_open = store.settled_at_open();
        let recorder = crate::jobs::JobRecorder::new(writer.clone(), bus.clone(), owner);
        let jobs = codeloop_tools::jobs::Jobs::new(options.config.bash.max_jobs, Arc::new(recorder));
        let credentials = crate::credentials::credential_variables_in(&options.config, std::env::vars());
        let mcp = crate::mcp::McpServers::new(
            options.config.mcp.servers.clone(),
            crate::mcp::StartContext {
                auth: crate::mcp::AuthStore::new(&options.data_dir),
                env: options.env.clone(),
                withheld_env: crate::mcp::WithheldEnv::new(&credentials, &options.config.sandbox.env_keep),
            },
        );
        let data_dir = options.data_dir.clone();
        let walls = crate::walls::WallsSetup {
            helper: options.sandbox_helper,
            home: options.home.clone(),
            cache_layers: Some(data_dir.join("sandbox").join("caches")),
            masked: options.protected_dirs.iter().cloned().chain([data_dir.clone()]).collect(),
            credentials,
            protected: options.protected_paths,
        };
        let lsp = Arc::new(crate::lsp::LanguageServers::new(
            options.config.lsp.clone(),
            walls.clone(),
            options.config.sandbox.clone(),
            (options.env)("PATH").as_deref(),
        ));
        tools.register(Arc::new(crate::lsp::LspTool::new(lsp.clone())));
        tools.register(Arc::new(crate::lsp::DiagnosticsTool::new(lsp.clone())));
        crate::models::use_cached_catalogue(&data_dir);
        let command_dirs = options.command_dirs.unwrap_or_else(|| {
            let config = options.home.as_ref().map(|h| h.join(".config").join("codeloop"));
            crate::file_commands::load::user_dirs(config.as_deref(), options.home.as_deref())
        });
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
            elicitations,
            data_dir: options.data_dir,
            tool_output_dir,
            walls,
            protected_dirs: options.protected_dirs,
            global_instructions: options.global_instructions,
            skill_dirs,
            command_dirs,
            project_trust: options.project_trust,
            live: Default::default(),
            snapshots: Default::default(),
            mcp,
            lsp,
            project_config: options.project_config,
            warned_projects: Default::default(),
            _sweep_stop: sweep_stop,
            all_tools: Default::default(),
            jobs,
            hooks_cache: Default::default(),
            failovers: Default::default(),
            resumed_prompts: Default::default(),
            settled_at_open: std::sync::Mutex::new(settled_at_open),
        });
        let coordinator = Coordinator::new(services.clone());
        if let Some(peers) = &peers {
            crate::peers::listen(&services, coordinator.downgrade(), peers.clone());
        }
        Ok(Engine { services, coordinator, peers })
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

    /// The engine's insides, for core's own tests and benches only.
    #[cfg(any(test, feature = "internals"))]
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The engine's insides, for core's own tests and benches only.
    #[cfg(any(test, feature = "internals"))]
    pub fn coordinator(&self) -> &Coordinator {
        &self.coordinator
    }

    /// The engine's insides, for core's own tests and benches only.
    #[cfg(any(test, feature = "internals"))]
    pub fn store(&self) -> Arc<dyn codeloop_store::Store> {
        self.services.store.clone()
    }

    /// The language servers for `directory`'s project (DESIGN.md §5n): with `start`, each server that
    /// serves a file there is started first, so its state says whether it answers.
    pub async fn lsp_status(
        &self,
        directory: &std::path::Path,
        start: bool,
    ) -> Vec<crate::lsp::ServerStatus> {
        if start {
            let project = crate::instructions::ProjectInfo::discover(directory);
            self.services.lsp.start_for_project(&project.root).await;
        }
        self.services.lsp.status()
    }

    /// Shuts the language servers down (`shutdown`, `exit`, then a kill): a process that ends on purpose
    /// calls it; one that is killed leaves servers whose input ended, and they exit by themselves.
    pub async fn shutdown_language_servers(&self) {
        self.services.lsp.shutdown().await;
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

    /// Runs the sessions that dead processes or workers left behind (DESIGN.md §5b failover): stored
    /// queued input nobody runs, and runs left open under an expired lease or a released lock. Each is
    /// settled like crash recovery when its run starts, then its queue runs in order. Returns how many
    /// sessions were picked up (some may go to another worker that asked first).
    pub async fn resume_orphans(&self) -> Result<usize, EngineError> {
        let mut sessions = self.services.blocking(|store| store.orphaned_sessions()).await?;
        // Runs a dead process left that the store settled as it opened: their last prompt is unanswered.
        sessions.extend(std::mem::take(&mut *self.services.settled_at_open.locked()));
        // Prompts recorded by a process that died before it began their answer.
        let since = codeloop_types::now_ms() - UNANSWERED_WINDOW_MS;
        let unanswered = self.services.blocking(move |store| store.unanswered(since)).await?;
        {
            let mut resumed = self.services.resumed_prompts.locked();
            if resumed.len() > 10_000 {
                resumed.clear();
            }
            sessions.extend(
                unanswered.into_iter().filter(|(_, prompt)| resumed.insert(prompt.clone())).map(|(s, _)| s),
            );
        }
        sessions.sort();
        sessions.dedup();
        for session in &sessions {
            self.forget_dead_run(session);
            // Only where its directory is: another worker that sees it takes it over instead.
            if let Ok(info) = self.session(session).await
                && let Err(refused) = commands::check_directory(&info)
            {
                tracing::warn!(%session, "not taking over: {refused}");
                continue;
            }
            self.coordinator.resume(session);
        }
        Ok(sessions.len())
    }

    /// A session nobody owns any more (its worker's lease is gone) is not busy, whatever that worker last
    /// said: every worker is told, before whichever one takes it over says busy again.
    fn forget_dead_run(&self, session: &SessionId) {
        if self.coordinator.is_busy(session) {
            return;
        }
        let mirrored = self.services.live.set_status(session, &codeloop_types::SessionStatus::Idle);
        if mirrored {
            self.services.bus.publish(EventPayload::SessionStatus {
                session_id: session.clone(),
                status: codeloop_types::SessionStatus::Idle,
            });
        }
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
        let peers = self.peers.clone();
        tokio::spawn(async move {
            loop {
                let (Some(services), Some(coordinator)) = (services.upgrade(), coordinator.upgrade()) else {
                    return;
                };
                let engine = Engine { services, coordinator, peers: peers.clone() };
                if let Err(error) = engine.resume_orphans().await {
                    tracing::warn!(%error, "could not look for sessions to take over");
                }
                drop(engine);
                tokio::time::sleep(period).await;
            }
        })
    }

    /// The figures of many workers on one store (`GET /metrics`): input queued over every session, this
    /// process's lease renewals and lost leases, and the sessions it took over.
    pub async fn scale_figures(&self) -> Result<ScaleFigures, EngineError> {
        let (queue_depth, leases) =
            self.services.blocking(|store| Ok((store.queue_depth()?, store.lease_figures()))).await?;
        Ok(ScaleFigures {
            queue_depth,
            lease_renewals: leases.renewals,
            leases_lost: leases.lost,
            failovers: self.services.failovers.load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// Waits until everything written so far is durable.
    pub async fn flush(&self) -> Result<(), EngineError> {
        Ok(self.services.journal.flush().await?)
    }
}
