//! The policy a caller hands to the sandbox: which mode, which paths are writable, protected or masked, and
//! whether the network is open. It is plain data: this module must not look at the file system or the
//! environment (the caller computes every list, so config resolution stays in one place).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How much a tool's child process may write (`[sandbox] mode`).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[strum(serialize_all = "kebab-case")]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// The project, the session temp dir, `writable_roots` and the package caches are writable.
    #[default]
    WorkspaceWrite,
    /// Only the session temp dir is writable.
    ReadOnly,
    /// No walls: permission rules only.
    Off,
}

impl SandboxMode {
    /// The name users write in `codeloop.toml`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything the walls need to know for one command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxPolicy {
    pub mode: SandboxMode,
    /// `false`: no TCP connect/bind (Landlock ABI >= 4) and no socket family but AF_UNIX (seccomp).
    pub network: bool,
    /// Writable in workspace-write.
    pub project_root: PathBuf,
    /// The session's own temp dir: always writable, also in read-only mode.
    pub temp_dir: PathBuf,
    /// Extra writable dirs (workspace-write only).
    pub writable_roots: Vec<PathBuf>,
    /// Stay read-only even inside a writable root (`codeloop.toml`, `.codeloop`, `.git`, …).
    pub protected: Vec<PathBuf>,
    /// Hidden (empty) where the mount namespace is available: `~/.ssh`, `~/.aws`, …
    pub masked: Vec<PathBuf>,
    /// Package caches written through to the user's own (workspace-write only; `[sandbox] cache_dirs`
    /// names them on purpose).
    pub cache_dirs: Vec<PathBuf>,
    /// Package caches seen through an overlay (workspace-write only): a command writes to a layer of its
    /// own, so nothing it puts there runs later in the user's unwalled builds (DESIGN.md §5c). Read-only
    /// where overlays cannot be made.
    pub cache_overlays: Vec<CacheOverlay>,
    /// Environment variables kept even though they look secret or reach an agent (`SSH_AUTH_SOCK`, …).
    pub env_keep: Vec<String>,
    /// Variables codeloop itself reads credentials from (DESIGN.md §5j): the OTLP headers, the server
    /// token, the store URL, each provider's `api_key_env`, the cloud credentials, what MCP servers'
    /// headers interpolate. Dropped whatever their name looks like, unless `env_keep` names them.
    pub env_drop: Vec<String>,
    /// UNIX sockets (or directories of them) outside the writable roots that stay reachable; every other
    /// one is masked where the mount namespace is available.
    pub allow_unix_sockets: Vec<PathBuf>,
    /// At most this many processes at once in a call's tree (`[sandbox] max_processes`).
    pub max_processes: u32,
    /// What the program reads: nothing (commands), or the caller's stdin (a language server's channel).
    #[serde(default)]
    pub stdin: ProgramStdin,
}

/// The walled program's stdin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgramStdin {
    /// `/dev/null`; the helper's own stdin stays the owner's channel ([`crate::CallChannel`]).
    #[default]
    Null,
    /// The helper's stdin, passed on: the caller then talks to the program over it, and its end is the
    /// program's (a language server exits when its input ends).
    Caller,
}

/// A package cache behind an overlay: `path` is what commands see; writes land in `state/upper`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheOverlay {
    pub path: PathBuf,
    /// A directory of codeloop's own (in its data dir, per project) holding `upper/` and `work/`.
    pub state: PathBuf,
}

/// The default of `[sandbox] max_processes`.
pub const DEFAULT_MAX_PROCESSES: u32 = 1024;

impl SandboxPolicy {
    /// A workspace-write policy for `project_root` with the network open and nothing else configured.
    pub fn new(project_root: impl Into<PathBuf>, temp_dir: impl Into<PathBuf>) -> Self {
        Self {
            mode: SandboxMode::default(),
            network: true,
            project_root: project_root.into(),
            temp_dir: temp_dir.into(),
            writable_roots: Vec::new(),
            protected: Vec::new(),
            masked: Vec::new(),
            cache_dirs: Vec::new(),
            cache_overlays: Vec::new(),
            env_keep: Vec::new(),
            env_drop: Vec::new(),
            allow_unix_sockets: Vec::new(),
            max_processes: DEFAULT_MAX_PROCESSES,
            stdin: ProgramStdin::Null,
        }
    }

    /// The package caches DESIGN.md §5a keeps writable so builds and installs work, as overlays (§5c).
    /// Missing ones are listed too: the walls skip paths that do not exist.
    pub fn default_cache_dirs(home: &Path) -> Vec<PathBuf> {
        [".cargo/registry", ".cargo/git", ".npm", ".cache/pip", ".cache/go-build", "go/pkg/mod"]
            .iter()
            .map(|rel| home.join(rel))
            .collect()
    }

    /// Credential stores hidden from tools. The caller adds codeloop's own config and data dirs, which it
    /// knows (they may be moved by `CODELOOP_CONFIG` / `CODELOOP_DATA_DIR`).
    pub fn default_masked(home: &Path) -> Vec<PathBuf> {
        [".ssh", ".aws", ".gnupg", ".config/gcloud"].iter().map(|rel| home.join(rel)).collect()
    }

    /// Directories the child may write, in the order the rules are added. Missing ones are included.
    pub fn writable_paths(&self) -> Vec<&Path> {
        let mut out = vec![self.temp_dir.as_path()];
        match self.mode {
            SandboxMode::WorkspaceWrite => {
                out.push(self.project_root.as_path());
                out.extend(self.writable_roots.iter().map(PathBuf::as_path));
                out.extend(self.cache_dirs.iter().map(PathBuf::as_path));
                out.extend(self.cache_overlays.iter().map(|c| c.path.as_path()));
            }
            SandboxMode::ReadOnly | SandboxMode::Off => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn mode_serialises_as_the_config_spelling() {
        let names: Vec<String> = [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly, SandboxMode::Off]
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
        assert_eq!(names, ["\"workspace-write\"", "\"read-only\"", "\"off\""]);
    }

    #[test]
    fn read_only_mode_writes_only_the_temp_dir() {
        let mut policy = SandboxPolicy::new("/p", "/t");
        policy.writable_roots = vec!["/w".into()];
        policy.mode = SandboxMode::ReadOnly;
        assert_eq!(policy.writable_paths(), [Path::new("/t")]);
    }
}

#[cfg(test)]
mod sandboxmode_text {
    use super::SandboxMode;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in SandboxMode::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
