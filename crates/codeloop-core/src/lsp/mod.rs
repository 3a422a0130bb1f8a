//! The project's language servers as a service of the engine (DESIGN.md §5n): which server serves a
//! file, one process per project root and server shared by every session, started on first use, walled
//! like `bash`, restarted once when it dies and then reported broken, shut down when idle and with the
//! engine; and what an edit's result says of the files it changed.
//!
//! Owns: the running servers and their state. Must not: talk LSP itself (`codeloop-lsp` does), decide
//! permissions, or change files (a rename comes back as a patch for the edit tools).

mod check;
mod presets;
mod settings;
mod tools;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use codeloop_lsp::{LspError, Server, ServerSpec};
use codeloop_tools::ProjectPaths;
use codeloop_types::LockExt as _;
use serde::Serialize;

pub use presets::{Candidate, PRESETS, resolve};
pub use settings::{LspConfig, LspServerSettings};
pub use tools::{DiagnosticsTool, LspTool};

use crate::config::SandboxConfig;
use crate::walls::WallsSetup;

/// The engine's language servers.
pub struct LanguageServers {
    config: LspConfig,
    active: Vec<Candidate>,
    inactive: Vec<Candidate>,
    walls: WallsSetup,
    sandbox: SandboxConfig,
    slots: std::sync::Mutex<HashMap<(PathBuf, String), Arc<Slot>>>,
    reaper: std::sync::Once,
}

/// One server for one root.
struct Slot {
    root: PathBuf,
    candidate: Candidate,
    state: tokio::sync::Mutex<SlotState>,
    last_used: std::sync::Mutex<Instant>,
}

#[derive(Default)]
struct SlotState {
    server: Option<Arc<Server>>,
    restarts: u32,
    /// Why it cannot run; set once starting failed or it died after its restart.
    broken: Option<String>,
    /// The broken note was given to a model already (it is given once; `lsp status` keeps it).
    told: bool,
}

/// One server in `codeloop lsp status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `running`, `broken`, `stopped`, `idle` (configured, not started), `missing` (program not found),
    /// `standby` (found, another server of its language runs), `off`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub extensions: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub restarts: u32,
}

/// A server ready for a file, and whether it was started just now.
struct Ready {
    server: Arc<Server>,
    fresh: bool,
}

impl LanguageServers {
    /// `path_var`: the `PATH` presets are looked up in.
    pub fn new(config: LspConfig, walls: WallsSetup, sandbox: SandboxConfig, path_var: Option<&str>) -> Self {
        let (active, inactive) = resolve(&config, path_var);
        Self {
            config,
            active,
            inactive,
            walls,
            sandbox,
            slots: Default::default(),
            reaper: std::sync::Once::new(),
        }
    }

    /// Whether any server could serve a file: without one, an edit costs nothing more.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// Whether a server runs for a root inside `project_root` (the `lsp` and `diagnostics` tools are
    /// offered only then).
    pub fn running_in(&self, project_root: &Path) -> bool {
        if self.active.is_empty() {
            return false;
        }
        let project_root = &real(project_root);
        self.slots.locked().values().any(|slot| {
            slot.root.starts_with(project_root)
                && slot
                    .state
                    .try_lock()
                    .map_or(true, |s| s.server.as_ref().is_some_and(|s| s.gone().is_none()))
        })
    }

    /// The servers that serve `file`, in config order.
    fn serving<'a>(&'a self, file: &'a Path) -> impl Iterator<Item = &'a Candidate> + 'a {
        self.active.iter().filter(move |c| c.spec.serves(file))
    }

    /// The slot of `candidate` for `file`: its root is the nearest folder up from the file (not above
    /// the project root) holding one of the server's root markers, else the project root.
    fn slot(&self, candidate: &Candidate, file: &Path, project_root: &Path) -> Arc<Slot> {
        let root = find_root(file, &candidate.spec.root_markers, project_root);
        let key = (root.clone(), candidate.spec.name.clone());
        self.slots
            .locked()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Slot {
                    root,
                    candidate: candidate.clone(),
                    state: Default::default(),
                    last_used: std::sync::Mutex::new(Instant::now()),
                })
            })
            .clone()
    }

    /// The slot's running server, started (or restarted once) as needed; `Err` says why there is none.
    async fn ready(self: &Arc<Self>, slot: &Slot) -> Result<Ready, String> {
        *slot.last_used.locked() = Instant::now();
        let mut state = slot.state.lock().await;
        if let Some(broken) = &state.broken {
            return Err(broken.clone());
        }
        if let Some(server) = &state.server {
            match server.gone() {
                None => return Ok(Ready { server: server.clone(), fresh: false }),
                Some(reason) if state.restarts >= 1 => {
                    let words =
                        server.last_stderr().map(|l| format!("; its last words: {l}")).unwrap_or_default();
                    let broken = format!("it stopped again after a restart ({reason}{words})");
                    state.server = None;
                    state.broken = Some(broken.clone());
                    return Err(broken);
                }
                Some(reason) => {
                    tracing::warn!(server = %slot.candidate.spec.name, "language server stopped ({reason}); restarting it once");
                    state.restarts += 1;
                }
            }
        }
        self.start_reaper();
        match self.start(slot).await {
            Ok(server) => {
                state.server = Some(server.clone());
                Ok(Ready { server, fresh: true })
            }
            Err(e) => {
                let broken = e.to_string();
                state.server = None;
                state.broken = Some(broken.clone());
                Err(broken)
            }
        }
    }

    async fn start(&self, slot: &Slot) -> Result<Arc<Server>, LspError> {
        let spec = &slot.candidate.spec;
        let Some(program) = &slot.candidate.program else {
            let name = spec.command.first().cloned().unwrap_or_default();
            return Err(LspError::Start {
                program: name,
                reason: format!("not found on PATH (install it, or set `command` in [lsp.{}])", spec.name),
            });
        };
        let command = self.command(spec, program, &slot.root)?;
        Server::start(spec, &slot.root, command, self.config.start_timeout()).await
    }

    /// The server's command inside the walls `bash` gets in this project (workspace-write unless config
    /// says otherwise, the session network rule, the same environment filtering).
    fn command(
        &self,
        spec: &ServerSpec,
        program: &Path,
        root: &Path,
    ) -> Result<tokio::process::Command, LspError> {
        let args: Vec<std::ffi::OsString> = spec.command.iter().skip(1).map(Into::into).collect();
        let key = root.to_string_lossy().bytes().fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
        let temp = codeloop_tools::session_temp_dir(&format!("lsp-{}-{key:x}", spec.name)).map_err(|e| {
            LspError::Start { program: program.display().to_string(), reason: format!("no temp dir: {e}") }
        })?;
        let mut paths = ProjectPaths::new(root, root);
        paths.temp_dir = Some(temp.clone());
        let mut command = match crate::walls::walls_for(&self.walls, &self.sandbox, &paths, "build") {
            Some(mut walls) => {
                walls.policy.stdin = codeloop_sandbox::ProgramStdin::Caller;
                tokio::process::Command::from(codeloop_sandbox::wrap_command(
                    &walls.helper,
                    &walls.policy,
                    program.as_os_str(),
                    &args,
                ))
            }
            None => {
                let mut command = tokio::process::Command::new(program);
                command.args(&args).env("TMPDIR", &temp);
                for (name, value) in std::env::vars_os() {
                    if codeloop_sandbox::withheld(&name, &value, &self.walls.credentials)
                        && !self.sandbox.env_keep.iter().any(|k| std::ffi::OsStr::new(k) == name)
                    {
                        command.env_remove(&name);
                    }
                }
                command
            }
        };
        command.envs(&spec.env).current_dir(root);
        Ok(command)
    }

    /// Shuts down servers no one used for the idle timeout, every minute, while the engine lives.
    fn start_reaper(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        self.reaper.call_once(|| {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    let Some(this) = weak.upgrade() else { return };
                    let idle = this.config.idle_timeout();
                    let slots: Vec<Arc<Slot>> = this.slots.locked().values().cloned().collect();
                    for slot in slots {
                        if slot.last_used.locked().elapsed() < idle {
                            continue;
                        }
                        let server = slot.state.lock().await.server.take();
                        if let Some(server) = server {
                            tracing::debug!(server = server.name(), "language server idle: shutting it down");
                            server.shutdown().await;
                        }
                    }
                }
            });
        });
    }

    /// Every server: the running ones with their roots, then the configured and preset ones not
    /// started, switched off or not found.
    pub fn status(&self) -> Vec<ServerStatus> {
        let mut out = Vec::new();
        let slots: Vec<Arc<Slot>> = self.slots.locked().values().cloned().collect();
        for slot in &slots {
            let spec = &slot.candidate.spec;
            let (state, pid, error, restarts) = match slot.state.try_lock() {
                Ok(s) => match (&s.server, &s.broken) {
                    (_, Some(broken)) => ("broken", None, Some(broken.clone()), s.restarts),
                    (Some(server), None) => match server.gone() {
                        None => ("running", server.pid(), None, s.restarts),
                        Some(reason) => ("stopped", None, Some(reason), s.restarts),
                    },
                    (None, None) => ("stopped", None, None, s.restarts),
                },
                Err(_) => ("starting", None, None, 0),
            };
            out.push(ServerStatus {
                name: spec.name.clone(),
                state,
                root: Some(slot.root.clone()),
                pid,
                command: spec.command.clone(),
                extensions: spec.extensions.clone(),
                error,
                restarts,
            });
        }
        for candidate in &self.active {
            if slots.iter().any(|s| s.candidate.spec.name == candidate.spec.name) {
                continue;
            }
            let state = if candidate.program.is_some() { "idle" } else { "missing" };
            out.push(not_started(candidate, state));
        }
        for candidate in &self.inactive {
            let switched_off = !self.config.enabled()
                || self.config.servers.get(&candidate.spec.name).is_some_and(|s| !s.enabled);
            let state = match (switched_off, candidate.program.is_some()) {
                (true, _) => "off",
                (false, false) => "missing",
                // Found, but another server of its language runs.
                (false, true) => "standby",
            };
            out.push(not_started(candidate, state));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.root.cmp(&b.root)));
        out
    }

    /// Starts every server that serves a file of `project_root` (the first matching file found), for
    /// `codeloop lsp status --start`: whether each answers.
    pub async fn start_for_project(self: &Arc<Self>, project_root: &Path) {
        let project_root = &real(project_root);
        for candidate in self.active.clone() {
            let Some(file) = first_file_served(project_root, &candidate.spec) else { continue };
            let slot = self.slot(&candidate, &file, project_root);
            let _ = self.ready(&slot).await;
        }
    }

    /// Shuts every server down (the engine's end).
    pub async fn shutdown(&self) {
        let slots: Vec<Arc<Slot>> = self.slots.locked().drain().map(|(_, s)| s).collect();
        for slot in slots {
            let server = slot.state.lock().await.server.take();
            if let Some(server) = server {
                server.shutdown().await;
            }
        }
    }

    /// The running server for `file` (started if it serves the file), for the `lsp` and `diagnostics`
    /// tools.
    async fn server_for(self: &Arc<Self>, file: &Path, project_root: &Path) -> Result<Ready, String> {
        let project_root = &real(project_root);
        let Some(candidate) = self.serving(file).next() else {
            return Err(format!("no language server serves {} files", extension_of(file)));
        };
        let slot = self.slot(candidate, file, project_root);
        self.ready(&slot).await.map_err(|e| format!("{} cannot run: {e}", candidate.spec.name))
    }

    /// Every running server of the project.
    fn running(&self, project_root: &Path) -> Vec<Arc<Server>> {
        let project_root = &real(project_root);
        self.slots
            .locked()
            .values()
            .filter(|slot| slot.root.starts_with(project_root))
            .filter_map(|slot| slot.state.try_lock().ok().and_then(|s| s.server.clone()))
            .filter(|server| server.gone().is_none())
            .collect()
    }
}

/// Tools name files by their real paths; a project root given through a symlink must match them.
pub(super) fn real(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

fn not_started(candidate: &Candidate, state: &'static str) -> ServerStatus {
    ServerStatus {
        name: candidate.spec.name.clone(),
        state,
        root: None,
        pid: None,
        command: candidate.spec.command.clone(),
        extensions: candidate.spec.extensions.clone(),
        error: None,
        restarts: 0,
    }
}

fn extension_of(file: &Path) -> String {
    file.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_else(|| "extension-less".into())
}

/// The nearest folder from `file` up to `project_root` that holds a marker; `project_root` otherwise.
fn find_root(file: &Path, markers: &[String], project_root: &Path) -> PathBuf {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if !d.starts_with(project_root) {
            break;
        }
        if markers.iter().any(|m| d.join(m).exists()) {
            return d.to_owned();
        }
        if d == project_root {
            break;
        }
        dir = d.parent();
    }
    project_root.to_owned()
}

/// A file under `root` the server serves (a short, ignore-aware walk).
fn first_file_served(root: &Path, spec: &ServerSpec) -> Option<PathBuf> {
    let mut seen = 0;
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 5_000 {
                return None;
            }
            let path = entry.path();
            let name = entry.file_name();
            if name.to_string_lossy().starts_with('.') || name == "node_modules" || name == "target" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if spec.serves(&path) {
                return Some(path);
            }
        }
    }
    None
}
