//! The OS walls of a run (DESIGN.md §5a "The sandbox"): turns `[sandbox]` config, the project and the agent
//! into the policy every tool's child process runs under.
//!
//! Owns: which paths are writable, protected and masked for one session. Must not: put walls up (that is
//! `codeloop-sandbox`'s helper) or decide permissions.

use std::path::{Path, PathBuf};

use codeloop_sandbox::{CacheOverlay, SandboxMode, SandboxPolicy};
use codeloop_tools::{ProjectPaths, Walls};

use crate::config::{SandboxConfig, expand_home};

/// Agents that never change files: their commands run read-only whatever the config says.
const READ_ONLY_AGENTS: &[&str] = &["plan", "explore"];

/// What the walls need to know besides the config.
#[derive(Debug, Clone, Default)]
pub struct WallsSetup {
    /// The executable with the `__sandbox` helper mode; `None` runs commands without walls.
    pub helper: Option<PathBuf>,
    pub home: Option<PathBuf>,
    /// Hidden from commands besides `~/.ssh` and friends: the user's config dir and the data dir.
    pub masked: Vec<PathBuf>,
    /// Where the package caches' overlay layers live (`<data dir>/sandbox/caches`); `None` makes the
    /// caches read-only.
    pub cache_layers: Option<PathBuf>,
    /// The variables codeloop reads credentials from ([`crate::credentials`]): no command gets them.
    pub credentials: Vec<String>,
    /// Files and folders outside the project that codeloop (or another agent the user runs) takes
    /// programs or rules from (DESIGN.md §5j): the `CODELOOP_CONFIG` file, `~/.claude/settings.json`,
    /// `~/.claude/{commands,skills,agents,plugins}`, `~/.codex`, … Tools write them only with an explicit
    /// grant; commands cannot write those that lie inside a writable root. Not hidden.
    pub protected: Vec<PathBuf>,
}

/// The walls for one agent's commands in a project; `None` when there is no helper.
pub fn walls_for(
    setup: &WallsSetup,
    config: &SandboxConfig,
    paths: &ProjectPaths,
    agent: &str,
) -> Option<Walls> {
    let helper = setup.helper.clone()?;
    let temp_dir = paths.temp_dir.clone()?;
    let mode = if READ_ONLY_AGENTS.contains(&agent) { SandboxMode::ReadOnly } else { config.mode };
    let root = real(&paths.root);
    let mut policy = SandboxPolicy::new(root.clone(), temp_dir.clone());
    policy.mode = mode;
    policy.network = config.network;
    policy.writable_roots = config.writable_roots.iter().map(|r| PathBuf::from(expand_home(r))).collect();
    policy.protected = protected_paths(paths, config.git_write);
    // Outside the project only what a writable root (the project included) would let a command write.
    let writable: Vec<PathBuf> = policy.writable_paths().into_iter().map(real).collect();
    for path in setup.protected.iter().filter(|p| p.exists()).map(|p| real(p)) {
        if writable.iter().any(|w| path.starts_with(w)) && !policy.protected.contains(&path) {
            policy.protected.push(path);
        }
    }
    policy.env_keep = config.env_keep.clone();
    policy.env_drop = setup.credentials.clone();
    policy.allow_unix_sockets =
        config.allow_unix_sockets.iter().map(|s| PathBuf::from(expand_home(s))).collect();
    policy.max_processes = config.max_processes;
    // Named caches write through on purpose; the usual ones are overlays, per project.
    policy.cache_dirs = config.cache_dirs.iter().flatten().map(|d| PathBuf::from(expand_home(d))).collect();
    if let Some(home) = &setup.home {
        let layers = setup.cache_layers.as_ref().map(|dir| dir.join(project_key(&root)));
        for cache in SandboxPolicy::default_cache_dirs(home) {
            if policy.cache_dirs.contains(&cache) || !cache.is_dir() {
                continue;
            }
            let name = cache.strip_prefix(home).unwrap_or(&cache).to_string_lossy().replace('/', "_");
            match &layers {
                Some(layers) => {
                    policy.cache_overlays.push(CacheOverlay { path: cache, state: layers.join(name) })
                }
                // No place for an upper layer: read-only (never written through).
                None => policy.protected.push(cache),
            }
        }
        policy.masked = SandboxPolicy::default_masked(home);
    }
    policy.masked.extend(setup.masked.iter().cloned());
    // Never hide the project or the temp dir (a data dir that holds the project, say).
    policy.masked.retain(|m| {
        let m = real(m);
        m.exists() && !root.starts_with(&m) && !temp_dir.starts_with(&m)
    });
    policy.cache_dirs.retain(|d| d.exists());
    policy.writable_roots.retain(|d| d.exists());
    Some(Walls { helper, policy, git_write: config.git_write })
}

/// A file name for a project's own cache layers: its root's last name and a hash of the whole path.
fn project_key(root: &Path) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let name = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name}-{hex}")
}

/// `codeloop.toml`, `.codeloop/` and `.claude/settings*.json` from the session directory up to the root,
/// and the git dir (unless `git_write`): the ones that exist, by their real paths (a bind mount follows
/// links). Nested repositories are found per call (`codeloop_tools::guard`).
fn protected_paths(paths: &ProjectPaths, git_write: bool) -> Vec<PathBuf> {
    let root = real(&paths.root);
    let mut out = codeloop_tools::guard::protected_candidates(paths, git_write);
    if !git_write {
        let dot_git = root.join(".git");
        // A worktree or submodule: `.git` is a file naming the real git dir.
        if let Ok(text) = std::fs::read_to_string(&dot_git)
            && let Some(dir) = text.trim().strip_prefix("gitdir:")
        {
            out.push(root.join(dir.trim()));
        }
    }
    let mut protected: Vec<PathBuf> = out.iter().filter(|p| p.exists()).map(|p| real(p)).collect();
    protected.dedup();
    protected
}

fn real(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_runs_read_only_and_protected_paths_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("sub/.codeloop")).unwrap();
        std::fs::write(root.join("codeloop.toml"), "").unwrap();
        let temp = tempfile::tempdir().unwrap();
        let mut paths = ProjectPaths::new(root.join("sub"), &root);
        paths.temp_dir = Some(temp.path().to_owned());
        let setup = WallsSetup { helper: Some("/bin/codeloop".into()), ..Default::default() };
        let config = SandboxConfig::default();
        let build = walls_for(&setup, &config, &paths, "build").unwrap();
        assert_eq!(build.policy.mode, SandboxMode::WorkspaceWrite);
        assert_eq!(
            build.policy.protected,
            vec![root.join("sub/.codeloop"), root.join("codeloop.toml"), root.join(".git")]
        );
        assert_eq!(walls_for(&setup, &config, &paths, "plan").unwrap().policy.mode, SandboxMode::ReadOnly);
        let git = SandboxConfig { git_write: true, ..SandboxConfig::default() };
        assert!(
            !walls_for(&setup, &git, &paths, "build").unwrap().policy.protected.contains(&root.join(".git"))
        );
        assert!(walls_for(&WallsSetup::default(), &config, &paths, "build").is_none());
    }
}
