//! What the walls do on disk around a command (DESIGN.md §5c): one walk of the project finds nested git
//! repositories and secret files (to make them read-only and hide them), and after the call whatever it
//! created where only the `write` tool may — `codeloop.toml`, `.codeloop/`, `.claude/settings*.json`, a
//! `.git` at any depth — is moved out of the project into the session's temp dir.
//!
//! Owns: the protected names, the walk and the move. Must not: decide permissions (the caller asks) or put
//! walls up (`codeloop-sandbox` does).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::ProjectPaths;
use crate::paths::{CLAUDE_SETTINGS, is_secret, real_path};
use codeloop_types::LockExt;

/// Protected paths the file tools wrote, which only a rule naming them or a person's answer grants: the
/// sweep leaves them where they are (a `codeloop.toml` the user let the write tool create while a job runs
/// is theirs). Only protected names are kept, so it stays small for the process's life.
static GRANTED: std::sync::Mutex<BTreeSet<PathBuf>> = std::sync::Mutex::new(BTreeSet::new());

/// Records that a file tool wrote `path` (after its ask was granted).
pub(crate) fn note_written(path: &Path) {
    let names: Vec<&std::ffi::OsStr> = path.iter().collect();
    let claude_settings = names.len() >= 2
        && names[names.len() - 2] == ".claude"
        && CLAUDE_SETTINGS.iter().any(|s| names[names.len() - 1] == *s);
    let protected = claude_settings
        || names.last().is_some_and(|n| *n == "codeloop.toml")
        || names.iter().any(|n| *n == ".git" || *n == ".codeloop");
    if protected {
        GRANTED.locked().insert(path.to_owned());
    }
}

/// Whether a file tool wrote `path` or something under it.
pub(crate) fn was_granted(path: &Path) -> bool {
    GRANTED.locked().iter().any(|p| p.starts_with(path))
}

/// A walk stops after this many entries, so a huge tree cannot stall a call; what it did not see is
/// reported as incomplete.
const MAX_ENTRIES: usize = 200_000;

/// codeloop's and Claude's config paths from the session directory up to the project root, and the root's
/// `.git` unless `git_write`: each path whether it exists or not.
pub fn protected_candidates(project: &ProjectPaths, git_write: bool) -> Vec<PathBuf> {
    let root = real_path(&project.root);
    let directory = real_path(&project.directory);
    let mut out = Vec::new();
    for dir in directory.ancestors() {
        out.push(dir.join("codeloop.toml"));
        out.push(dir.join(".codeloop"));
        out.extend(CLAUDE_SETTINGS.iter().map(|name| dir.join(".claude").join(name)));
        if dir == root || !dir.starts_with(&root) {
            break;
        }
    }
    if !git_write {
        out.push(root.join(".git"));
    }
    out
}

/// What one walk of a project found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every `.git` (directory or file) below the root, the root's own included.
    pub git: BTreeSet<PathBuf>,
    /// Files whose names mark them as secrets (`.env`, `*.pem`, …).
    pub secrets: Vec<PathBuf>,
    /// False when the walk stopped at its entry cap.
    pub complete: bool,
}

/// Walks `root` without following links or entering `.git` directories.
pub fn scan(root: &Path) -> Scan {
    let mut found = Scan { complete: true, ..Scan::default() };
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            seen += 1;
            if seen > MAX_ENTRIES {
                found.complete = false;
                return found;
            }
            let Ok(kind) = entry.file_type() else { continue };
            let path = entry.path();
            if entry.file_name() == ".git" {
                found.git.insert(path);
            } else if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && is_secret(&path) {
                found.secrets.push(path);
            }
        }
    }
    found
}

/// The files of a nested repository as plain files (for snapshots, which git would otherwise record as
/// one opaque entry, or refuse): its `.gitignore` rules honoured without running its git, `.git`
/// directories skipped, files over `max_bytes` left out.
pub fn nested_files(dir: &Path, max_bytes: u64) -> Vec<PathBuf> {
    ignore::WalkBuilder::new(dir)
        .hidden(false)
        .parents(false)
        .require_git(false)
        .filter_entry(|entry| entry.file_name() != ".git")
        .build()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|t| t.is_file()))
        .filter(|entry| entry.metadata().is_ok_and(|m| m.len() <= max_bytes))
        .map(ignore::DirEntry::into_path)
        .collect()
}

/// A path a call created that it may not have, and where it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub from: PathBuf,
    /// `None` when it could not be moved (it was then removed, or `error` says why not).
    pub to: Option<PathBuf>,
    pub error: Option<String>,
}

/// Moves each of `paths` into `<temp_dir>/moved-out/`, keeping its name (with a number when taken).
/// A move across file systems copies and removes.
pub fn move_out(paths: &[PathBuf], temp_dir: &Path) -> Vec<Moved> {
    let dir = temp_dir.join("moved-out");
    let made = std::fs::create_dir_all(&dir);
    paths
        .iter()
        .map(|from| {
            if let Err(e) = &made {
                return Moved { from: from.clone(), to: None, error: Some(e.to_string()) };
            }
            let to = free_name(&dir, from);
            match move_path(from, &to) {
                Ok(()) => Moved { from: from.clone(), to: Some(to), error: None },
                Err(e) => Moved { from: from.clone(), to: None, error: Some(e.to_string()) },
            }
        })
        .collect()
}

fn free_name(dir: &Path, from: &Path) -> PathBuf {
    let parent = from.parent().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned());
    let name = from.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let base = match parent {
        Some(parent) => format!("{parent}_{name}"),
        None => name,
    };
    let mut candidate = dir.join(&base);
    let mut n = 1;
    while candidate.symlink_metadata().is_ok() {
        n += 1;
        candidate = dir.join(format!("{base}.{n}"));
    }
    candidate
}

fn move_path(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            copy_tree(from, to)?;
            remove_tree(from)
        }
        Err(e) => Err(e),
    }
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_dir() {
        std::fs::create_dir(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else if meta.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)
    } else {
        std::fs::copy(from, to).map(|_| ())
    }
}

fn remove_tree(path: &Path) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path)?.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_finds_nested_repositories_and_secrets_but_not_inside_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [".git/objects", "vendor/lib/.git", "src"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::create_dir_all(root.join("worktree")).unwrap();
        std::fs::write(root.join("worktree/.git"), "gitdir: ../.git/worktrees/w\n").unwrap();
        std::fs::write(root.join(".env"), "K=V").unwrap();
        std::fs::write(root.join("src/server.pem"), "").unwrap();
        std::fs::write(root.join(".git/objects/x.pem"), "").unwrap();
        std::fs::write(root.join("src/main.rs"), "").unwrap();
        let found = scan(root);
        assert!(found.complete);
        let git: Vec<PathBuf> = found.git.into_iter().collect();
        assert_eq!(git, vec![root.join(".git"), root.join("vendor/lib/.git"), root.join("worktree/.git")]);
        let mut secrets = found.secrets;
        secrets.sort();
        assert_eq!(secrets, vec![root.join(".env"), root.join("src/server.pem")]);
    }

    #[test]
    fn moved_paths_keep_their_name_and_do_not_collide() {
        let project = tempfile::tempdir().unwrap();
        let temp = tempfile::tempdir().unwrap();
        let a = project.path().join("codeloop.toml");
        std::fs::write(&a, "x").unwrap();
        let b = project.path().join("sub/.git");
        std::fs::create_dir_all(b.join("hooks")).unwrap();
        std::fs::write(b.join("config"), "[core]").unwrap();
        let moved = move_out(&[a.clone(), b.clone()], temp.path());
        assert!(!a.exists() && !b.exists());
        let to: Vec<PathBuf> = moved.iter().map(|m| m.to.clone().unwrap()).collect();
        assert_eq!(std::fs::read_to_string(&to[0]).unwrap(), "x");
        assert_eq!(std::fs::read_to_string(to[1].join("config")).unwrap(), "[core]");
        std::fs::write(&a, "y").unwrap();
        let again = move_out(&[a], temp.path());
        assert_ne!(again[0].to, Some(to[0].clone()));
    }
}
