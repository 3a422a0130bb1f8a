//! The shared dependencies of every run: store, journal (writer + bus), tools, permissions, models,
//! config. Built once by the [`crate::Engine`] and passed down as data (no globals).
//!
//! The run loop and the coordinator hold all of it; the stages under them get narrow handles: the
//! stream processor a [`Journal`] (writes and announcements) and a [`crate::ToolGate`] (permission
//! rules, and what tools reach through their host).

use std::path::PathBuf;
use std::sync::Arc;

use codeloop_store::{Store, StoreWriter, Write};
use codeloop_tools::{OutputLimits, ToolRegistry};
use std::collections::HashMap;
use std::sync::Mutex;

use codeloop_types::{EventPayload, Message, Part, Session, SessionId, SessionStatus};

use crate::Bus;
use crate::agents::Agent;
use crate::config::Config;
use crate::instructions::ProjectInfo;
use crate::mcp::McpServers;
use crate::models::Models;
use crate::permission::PermissionEngine;
use crate::snapshot::Snapshots;
use codeloop_types::LockExt;

pub struct Services {
    pub config: Config,
    /// Only the trait: nothing above the store knows which store it has.
    pub store: Arc<dyn Store>,
    /// Writes and their announcements.
    pub journal: Journal,
    pub bus: Bus,
    /// The built-in tools; [`Services::tool_set`] adds the MCP ones.
    pub tools: Arc<ToolRegistry>,
    pub permissions: PermissionEngine,
    pub questions: crate::question::Questions,
    pub elicitations: crate::elicitation::Elicitations,
    pub models: Models,
    pub agents: std::collections::BTreeMap<String, Agent>,
    pub data_dir: PathBuf,
    /// Where truncated tool outputs are saved in full.
    pub tool_output_dir: PathBuf,
    /// Directories outside any project that tools never write without an explicit grant (the user's
    /// config dir; the data dir is always added).
    pub protected_dirs: Vec<PathBuf>,
    /// How tools' child processes are walled in (helper, home, masked dirs).
    pub walls: crate::walls::WallsSetup,
    /// A global `AGENTS.md` (e.g. `~/.config/codeloop/AGENTS.md`).
    pub global_instructions: Option<PathBuf>,
    /// Folders with `<name>/SKILL.md` skills (relative ones are inside the project).
    pub skill_dirs: Vec<PathBuf>,
    /// The user's command folders, highest precedence first (DESIGN.md §5g).
    pub command_dirs: Vec<PathBuf>,
    /// Whether a project directory is trusted (its commands' shell parts may run); `None`: none is.
    pub project_trust: Option<crate::file_commands::ProjectTrust>,
    /// What this process knows of each live session: status, last prompt prefix, hooks fired and owed.
    pub(crate) live: crate::live::LiveSessions,
    /// One shadow repository per project worktree, shared by its sessions (git serialises per repository).
    pub snapshots: Mutex<HashMap<PathBuf, Arc<Snapshots>>>,
    pub mcp: McpServers,
    /// The projects' language servers, shared by their sessions (DESIGN.md §5n).
    pub lsp: Arc<crate::lsp::LanguageServers>,
    /// Each session directory's own config (see [`crate::EngineOptions::project_config`]).
    pub project_config: Option<crate::config::ProjectConfigLoader>,
    /// Project roots whose config warnings were already given.
    pub(crate) warned_projects: Mutex<std::collections::HashSet<PathBuf>>,
    /// Dropped with the services: the hourly spill-file sweep thread then ends.
    pub(crate) _sweep_stop: std::sync::mpsc::Sender<()>,
    /// Built-in and MCP tools together, as of the MCP servers' last change.
    pub all_tools: Mutex<Option<ToolSet>>,
    /// Every session's background jobs in this process (DESIGN.md §5f).
    pub jobs: Arc<codeloop_tools::jobs::Jobs>,
    /// The hooks last compiled, with the layers they came from.
    pub(crate) hooks_cache: Mutex<Option<(Vec<crate::hooks::HookLayer>, Arc<crate::hooks::Hooks>)>>,
    /// Unanswered prompts failover already started a run for (each once per process).
    pub(crate) resumed_prompts: Mutex<std::collections::HashSet<codeloop_types::MessageId>>,
    /// Sessions the store settled when it opened (runs a dead process left): failover runs them again.
    pub(crate) settled_at_open: Mutex<Vec<SessionId>>,
    /// Sessions this process took over from a dead process or worker (`GET /metrics`).
    pub(crate) failovers: std::sync::atomic::AtomicU64,
}

/// The tools a run offers and can execute.
#[derive(Clone)]
pub struct ToolSet {
    pub registry: Arc<ToolRegistry>,
    pub specs: Vec<codeloop_provider::ToolSpec>,
    /// The MCP servers' tool generation this set was built from (0: no MCP servers).
    pub generation: u64,
}

impl Services {
    /// Built-in tools plus those the MCP servers offer now (started on the first call). The set changes
    /// when a server's tools do (`tools/list_changed`, a connection that ended, a restart): its
    /// `generation` says so, and a run takes the new set at its next step.
    pub async fn tool_set(&self) -> ToolSet {
        let mcp = if self.mcp.is_empty() { None } else { Some(self.mcp.tools().await) };
        let generation = mcp.as_ref().map_or(0, |m| m.generation);
        let mut cached = self.all_tools.locked();
        if let Some(set) = cached.as_ref().filter(|s| s.generation == generation) {
            return set.clone();
        }
        let registry = match &mcp {
            None => self.tools.clone(),
            Some(mcp) => {
                let mut registry = self.tools.as_ref().clone();
                for tool in mcp.tools.iter() {
                    registry.register(tool.clone());
                }
                Arc::new(registry)
            }
        };
        let specs = registry.specs();
        let set = ToolSet { registry, specs, generation };
        *cached = Some(set.clone());
        set
    }

    /// The project's snapshots: `None` when off in config or the project is not a git repository.
    pub fn snapshots_for(&self, project: &ProjectInfo) -> Option<Arc<Snapshots>> {
        if self.config.snapshot == Some(false) || !project.is_git {
            return None;
        }
        let mut all = self.snapshots.locked();
        if let Some(existing) = all.get(&project.root) {
            return Some(existing.clone());
        }
        let snapshots = Arc::new(Snapshots::for_project(&self.data_dir, project)?);
        all.insert(project.root.clone(), snapshots.clone());
        Some(snapshots)
    }

    /// What a session's tools see of its project: the session's own temp dir (created here; without it
    /// bash falls back to no TMPDIR of its own) and the protected dirs.
    pub fn project_paths(&self, project: &ProjectInfo, session: &SessionId) -> codeloop_tools::ProjectPaths {
        let mut paths = codeloop_tools::ProjectPaths::new(&project.directory, &project.root);
        paths.temp_dir = match codeloop_tools::session_temp_dir(session.as_str()) {
            Ok(dir) => Some(dir),
            Err(e) => {
                tracing::warn!("cannot create the session's temp dir: {e}");
                None
            }
        };
        paths.protected = self.protected_dirs.clone();
        paths.protected.push(self.data_dir.clone());
        paths.protected.extend(self.walls.protected.iter().cloned());
        paths
    }

    /// Runs a store call on the blocking pool: store work never stalls the async worker threads.
    pub async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&dyn Store) -> codeloop_store::Result<T> + Send + 'static,
    ) -> codeloop_store::Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || call(store.as_ref()))
            .await
            .unwrap_or_else(|e| Err(codeloop_store::StoreError::Interrupted(e.to_string())))
    }

    /// Records and announces a session's status.
    pub fn set_status(&self, session: &SessionId, status: SessionStatus) {
        self.live.set_status(session, &status);
        self.bus.publish(EventPayload::SessionStatus { session_id: session.clone(), status });
    }

    pub fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    pub fn limits(&self) -> OutputLimits {
        OutputLimits {
            max_lines: self.config.tool_output.max_lines,
            max_bytes: self.config.tool_output.max_bytes,
            max_saved_bytes: self.config.tool_output.max_saved_bytes,
        }
    }
}

/// Writes that land together (one store transaction, see [`Services::commit`]) and the events that
/// announce them once sent.
#[derive(Default)]
pub struct Batch {
    writes: Vec<Write>,
    events: Vec<EventPayload>,
}

impl Batch {
    pub fn message(&mut self, message: &Message) {
        self.writes.push(Write::Message(message.clone()));
        self.events.push(EventPayload::MessageUpdated {
            session_id: message.session_id().clone(),
            info: message.clone(),
        });
    }

    pub fn part(&mut self, part: &Part) {
        self.writes.push(Write::Part(part.clone()));
        self.events
            .push(EventPayload::PartUpdated { session_id: part.session_id.clone(), part: part.clone() });
    }

    /// The session, taking a title a client set while it ran (the run's copy would overwrite it).
    pub fn session(&mut self, journal: &Journal, session: &mut Session) {
        journal.take_rename(session);
        self.writes.push(Write::Session(session.clone()));
        self.events
            .push(EventPayload::SessionUpdated { session_id: session.id.clone(), info: session.clone() });
    }

    /// The session exactly as given (a client's own change, such as a rename).
    pub fn session_as_is(&mut self, session: &Session) {
        self.writes.push(Write::Session(session.clone()));
        self.events
            .push(EventPayload::SessionUpdated { session_id: session.id.clone(), info: session.clone() });
    }

    /// A write no watcher needs to hear about (a removal, a dequeue).
    pub fn write(&mut self, write: Write) {
        self.writes.push(write);
    }
}

/// A session's durable record and its announcements: every write goes to the store's batched writer
/// (never blocking on the database), and what watchers may care about goes on the bus. Cheap to clone;
/// all the stream processor needs of the services.
#[derive(Clone)]
pub struct Journal {
    writer: Arc<StoreWriter>,
    bus: Bus,
    /// Titles set by a client while the session runs: the run's copy of the session takes them at its
    /// next save instead of overwriting them.
    renames: Arc<Mutex<HashMap<SessionId, String>>>,
}

impl Journal {
    pub fn new(writer: Arc<StoreWriter>, bus: Bus) -> Self {
        Self { writer, bus, renames: Default::default() }
    }

    /// Persists a part (batched by the writer) and tells watchers.
    pub fn save_part(&self, part: &Part) {
        let mut batch = Batch::default();
        batch.part(part);
        self.commit(batch);
    }

    /// Persists a message and tells watchers.
    pub fn save_message(&self, message: &Message) {
        let mut batch = Batch::default();
        batch.message(message);
        self.commit(batch);
    }

    pub fn save_session(&self, session: &mut Session) {
        let mut batch = Batch::default();
        batch.session(self, session);
        self.commit(batch);
    }

    /// Persists writes that must land together in one transaction, then tells watchers.
    pub fn commit(&self, batch: Batch) {
        self.writer.send_all(batch.writes);
        for event in batch.events {
            self.bus.publish(event);
        }
    }

    /// A write watchers hear about some other way (or not at all).
    pub fn write(&self, write: Write) {
        self.writer.send(write);
    }

    pub fn publish(&self, event: EventPayload) {
        self.bus.publish(event);
    }

    /// Resolves once everything written before is committed (see [`StoreWriter::flush`]).
    pub fn flush(&self) -> codeloop_store::Flush {
        self.writer.flush()
    }

    /// The store writer itself, for those that must flush it on their own (hooks' transcripts).
    pub fn writer(&self) -> Arc<StoreWriter> {
        self.writer.clone()
    }

    /// Writes that failed since the writer started.
    pub fn failed_writes(&self) -> u64 {
        self.writer.failed_writes()
    }

    /// A title a client gave the session while it runs: kept over the run's copy at its next save.
    pub fn rename(&self, session: &SessionId, title: String) {
        self.renames.locked().insert(session.clone(), title);
    }

    fn take_rename(&self, session: &mut Session) {
        if let Some(title) = self.renames.locked().remove(&session.id) {
            session.title = title;
        }
    }
}

/// The rules and instructions a run takes from config: the engine's, or with a per-directory loader, the
/// ones for the session's own project (DESIGN.md §5a: config and trust are resolved per session
/// directory). Providers, MCP servers, agents and walls stay the engine's.
pub struct ProjectPolicy {
    /// The config's permission rules (the user's, and a trusted project's).
    pub permission: Vec<codeloop_types::PermissionRule>,
    /// An untrusted project's rules: each call gets the stricter of these and the rest.
    pub narrowing: Arc<Vec<codeloop_types::PermissionRule>>,
    /// Extra instruction files (`instructions` in config).
    pub instructions: Vec<String>,
    /// The hooks of the user and, once trusted, the project (DESIGN.md §5d).
    pub hooks: Arc<crate::hooks::Hooks>,
}

impl Services {
    /// The policy of a session in `directory`. A project config that cannot be read is an error that names
    /// it; its warnings (ignored keys of an untrusted project) are logged once per project.
    pub fn project_policy(
        &self,
        directory: &std::path::Path,
    ) -> Result<ProjectPolicy, crate::config::ConfigError> {
        let Some(load) = &self.project_config else {
            return Ok(ProjectPolicy {
                permission: self.config.permission.0.clone(),
                narrowing: Arc::new(self.config.project_rules.clone()),
                instructions: self.config.instructions.clone(),
                hooks: self.compiled_hooks(&self.config.hook_layers),
            });
        };
        let loaded = load(directory)?;
        if let Some(project) = &loaded.project {
            let first = self.warned_projects.locked().insert(project.root.clone());
            if first {
                for warning in &loaded.warnings {
                    tracing::warn!("{warning}");
                }
            }
        }
        Ok(ProjectPolicy {
            hooks: self.compiled_hooks(&loaded.config.hook_layers),
            permission: loaded.config.permission.0,
            narrowing: Arc::new(loaded.config.project_rules),
            instructions: loaded.config.instructions,
        })
    }

    /// The hooks of these layers; the last compiled set is reused while the layers stay the same.
    fn compiled_hooks(&self, layers: &[crate::hooks::HookLayer]) -> Arc<crate::hooks::Hooks> {
        let mut cache = self.hooks_cache.locked();
        if let Some((cached_layers, hooks)) = cache.as_ref()
            && cached_layers.as_slice() == layers
        {
            return hooks.clone();
        }
        let hooks = Arc::new(crate::hooks::Hooks::compile(layers));
        for warning in &hooks.warnings {
            tracing::warn!("{warning}");
        }
        *cache = Some((layers.to_vec(), hooks.clone()));
        hooks
    }

    /// What a session's hooks run with: its project directory, the bus, the store.
    pub fn turn_hooks(
        &self,
        session_id: &SessionId,
        directory: &std::path::Path,
        hooks: Arc<crate::hooks::Hooks>,
        stop: Arc<Mutex<Option<String>>>,
    ) -> crate::hooks::TurnHooks {
        let permission_mode = match self.permissions.policy() {
            crate::permission::AskPolicy::Allow => "bypassPermissions",
            _ => "default",
        };
        crate::hooks::TurnHooks {
            hooks,
            env: crate::hooks::HookEnv {
                session_id: session_id.clone(),
                project_dir: directory.to_owned(),
                bus: Some(self.bus.clone()),
                store: Some(self.store.clone()),
                permission_mode,
                transcripts: Some(self.data_dir.join("transcripts")),
                env_file: codeloop_tools::session_temp_dir(session_id.as_str())
                    .ok()
                    .map(|dir| dir.join(codeloop_tools::SESSION_ENV_FILE)),
                writer: Some(self.journal.writer()),
                prompt_id: None,
                effort: None,
            },
            stop,
        }
    }

    /// The hooks of a session in `directory`, ready to fire (off the async threads: it reads config).
    pub async fn session_hooks(
        self: &Arc<Self>,
        session_id: &SessionId,
        directory: &std::path::Path,
    ) -> Result<crate::hooks::TurnHooks, crate::config::ConfigError> {
        let (services, dir) = (self.clone(), directory.to_owned());
        let policy = tokio::task::spawn_blocking(move || services.project_policy(&dir))
            .await
            .unwrap_or_else(|_| {
                Ok(ProjectPolicy {
                    permission: Vec::new(),
                    narrowing: Arc::new(Vec::new()),
                    instructions: Vec::new(),
                    hooks: Arc::new(crate::hooks::Hooks::default()),
                })
            })?;
        Ok(self.turn_hooks(session_id, directory, policy.hooks, Default::default()))
    }
}
