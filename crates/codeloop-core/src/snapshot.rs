//! Snapshots (DESIGN.md §4 "Snapshots", reference §10): a shadow git directory per project in the data
//! dir, so every step's file changes can be listed (`patch` parts) and a session reverted to a message.
//!
//! Owns: the shadow repository (`<data>/snapshot/<hash of the worktree>`), with the project as its work
//! tree. Must not: touch the user's `.git` — every command names the shadow `--git-dir` explicitly.
//! Untracked files over 2 MiB are left out; the shadow repository is garbage-collected after runs.
//! Nested repositories (a vendored clone, an example project) are snapshotted file by file: `git add`
//! would record each as one opaque entry, or fail on one without a commit and lose every snapshot.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

use crate::instructions::ProjectInfo;

/// Untracked files larger than this are not snapshotted.
pub const MAX_UNTRACKED_BYTES: u64 = 2 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("cannot run git: {0} (is git installed? set `snapshot = false` in config to turn snapshots off)")]
    Spawn(std::io::Error),
    #[error("git {command} failed: {stderr}")]
    Git { command: String, stderr: String },
    #[error("cannot prepare the snapshot directory {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The shadow repository of one project. Operations are serialised per repository.
pub struct Snapshots {
    git_dir: PathBuf,
    work_tree: PathBuf,
    user_git_dir: PathBuf,
    gate: tokio::sync::Mutex<()>,
}

/// FNV-1a: a stable name for a worktree path (the std hasher may change between Rust releases).
/// The name of a project's snapshot repository under the data dir's `snapshot/`.
pub(crate) fn snapshot_key(path: &Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

impl Snapshots {
    /// Snapshots for a git project, or `None` (not a repository).
    pub fn for_project(data_dir: &Path, project: &ProjectInfo) -> Option<Snapshots> {
        if !project.is_git {
            return None;
        }
        Some(Snapshots {
            git_dir: data_dir.join("snapshot").join(snapshot_key(&project.root)),
            work_tree: project.root.clone(),
            user_git_dir: project.root.join(".git"),
            gate: tokio::sync::Mutex::new(()),
        })
    }

    async fn git(&self, args: &[&str]) -> Result<String, SnapshotError> {
        self.git_with_input(args, Vec::new()).await
    }

    /// `git` on the shadow repository with `input` on its stdin.
    async fn git_with_input(&self, args: &[&str], input: Vec<u8>) -> Result<String, SnapshotError> {
        use tokio::io::AsyncWriteExt as _;
        let mut child = Command::new("git")
            .arg("--git-dir")
            .arg(&self.git_dir)
            .arg("--work-tree")
            .arg(&self.work_tree)
            .args(["-c", "core.autocrlf=false", "-c", "core.fsmonitor=false", "-c", "core.quotepath=false"])
            .args(args)
            .current_dir(&self.work_tree)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .stdin(if input.is_empty() { Stdio::null() } else { Stdio::piped() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(SnapshotError::Spawn)?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&input).await.map_err(SnapshotError::Spawn)?;
        }
        let output = child.wait_with_output().await.map_err(SnapshotError::Spawn)?;
        if !output.status.success() {
            return Err(SnapshotError::Git {
                command: args.first().copied().unwrap_or("").to_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    async fn init(&self) -> Result<(), SnapshotError> {
        if self.git_dir.join("HEAD").is_file() {
            return Ok(());
        }
        let io = |source| SnapshotError::Io { path: self.git_dir.clone(), source };
        tokio::fs::create_dir_all(&self.git_dir).await.map_err(io)?;
        self.git(&["init", "--quiet"]).await?;
        // The user's own excludes apply to the snapshots too.
        let user_exclude = self.user_git_dir.join("info").join("exclude");
        if let Ok(text) = tokio::fs::read_to_string(&user_exclude).await {
            let info = self.git_dir.join("info");
            tokio::fs::create_dir_all(&info).await.map_err(io)?;
            tokio::fs::write(info.join("exclude"), text).await.map_err(io)?;
        }
        Ok(())
    }

    /// Leaves untracked files over [`MAX_UNTRACKED_BYTES`] out of the snapshots.
    async fn exclude_large_untracked(&self) -> Result<(), SnapshotError> {
        let listed = self.git(&["ls-files", "--others", "--exclude-standard", "-z"]).await?;
        let large: Vec<&str> = listed
            .split('\0')
            .filter(|f| !f.is_empty())
            .filter(|f| {
                std::fs::metadata(self.work_tree.join(f)).is_ok_and(|m| m.len() > MAX_UNTRACKED_BYTES)
            })
            .collect();
        if large.is_empty() {
            return Ok(());
        }
        let path = self.git_dir.join("info").join("exclude");
        let io = |source| SnapshotError::Io { path: path.clone(), source };
        let mut text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
        for file in large {
            let line = format!("/{}", file.replace('\\', "/"));
            if !text.lines().any(|l| l == line) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        tokio::fs::create_dir_all(self.git_dir.join("info")).await.map_err(io)?;
        tokio::fs::write(&path, text).await.map_err(io)
    }

    /// Records the current state of the work tree; returns its tree hash.
    pub async fn track(&self) -> Result<String, SnapshotError> {
        let _gate = self.gate.lock().await;
        self.init().await?;
        self.exclude_large_untracked().await?;
        let root = self.work_tree.clone();
        let nested =
            tokio::task::spawn_blocking(move || nested_repositories(&root)).await.unwrap_or_default();
        let excluded: Vec<String> = nested.iter().map(|rel| format!(":(exclude,literal){rel}")).collect();
        let mut add = vec!["add", "--all", "--", "."];
        add.extend(excluded.iter().map(String::as_str));
        self.git(&add).await?;
        if !nested.is_empty() {
            self.track_nested(&nested).await?;
        }
        Ok(self.git(&["write-tree"]).await?.trim().to_owned())
    }

    /// Puts the files of nested repositories (relative dirs) into the shadow index one by one, and takes
    /// out the ones gone since the last snapshot.
    async fn track_nested(&self, nested: &[String]) -> Result<(), SnapshotError> {
        let mut ls = vec!["ls-files", "-z", "--"];
        ls.extend(nested.iter().map(String::as_str));
        let mut paths: Vec<String> =
            self.git(&ls).await?.split('\0').filter(|f| !f.is_empty()).map(str::to_owned).collect();
        let (root, dirs) = (self.work_tree.clone(), nested.to_vec());
        let files = tokio::task::spawn_blocking(move || {
            dirs.iter()
                .flat_map(|dir| codeloop_tools::guard::nested_files(&root.join(dir), MAX_UNTRACKED_BYTES))
                .filter_map(|file| file.strip_prefix(&root).ok().map(|r| r.to_string_lossy().into_owned()))
                .collect::<Vec<String>>()
        })
        .await
        .unwrap_or_default();
        paths.extend(files);
        paths.sort();
        paths.dedup();
        let input: Vec<u8> = paths.iter().flat_map(|p| p.bytes().chain([0])).collect();
        self.git_with_input(&["update-index", "--add", "--remove", "-z", "--stdin"], input).await.map(|_| ())
    }

    /// Files (absolute paths) that differ between two snapshots.
    pub async fn changed_files(&self, from: &str, to: &str) -> Result<Vec<String>, SnapshotError> {
        if from == to {
            return Ok(Vec::new());
        }
        let _gate = self.gate.lock().await;
        let listed = self.git(&["diff", "--name-only", "-z", "--no-renames", from, to, "--"]).await?;
        Ok(listed
            .split('\0')
            .filter(|f| !f.is_empty())
            .map(|f| self.work_tree.join(f).display().to_string())
            .collect())
    }

    /// Puts `files` (absolute paths) back as they were in snapshot `tree`; a file the snapshot does not
    /// have is removed.
    pub async fn restore(&self, tree: &str, files: &[String]) -> Result<(), SnapshotError> {
        let _gate = self.gate.lock().await;
        for file in files {
            let Ok(relative) = Path::new(file).strip_prefix(&self.work_tree) else { continue };
            let relative = relative.to_string_lossy().into_owned();
            let present =
                !self.git(&["ls-tree", "--name-only", tree, "--", &relative]).await?.trim().is_empty();
            if present {
                self.git(&["checkout", tree, "--", &relative]).await?;
            } else if let Err(e) = tokio::fs::remove_file(file).await
                && e.kind() != std::io::ErrorKind::NotFound
            {
                return Err(SnapshotError::Io { path: PathBuf::from(file), source: e });
            }
        }
        Ok(())
    }

    /// Keeps the shadow repository small (git decides when there is enough to do).
    pub async fn collect_garbage(&self) {
        let _gate = self.gate.lock().await;
        if let Err(e) = self.git(&["gc", "--auto", "--quiet", "--prune=7.days.ago"]).await {
            tracing::debug!("snapshot gc: {e}");
        }
    }
}

/// The nested repositories of a work tree, as paths relative to it (`/`-separated).
fn nested_repositories(root: &Path) -> Vec<String> {
    let own = root.join(".git");
    codeloop_tools::guard::scan(root)
        .git
        .into_iter()
        .filter(|git| *git != own)
        .filter_map(|git| {
            git.parent()?.strip_prefix(root).ok().map(|r| r.to_string_lossy().replace('\\', "/"))
        })
        .filter(|rel| !rel.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git_available() -> bool {
        std::process::Command::new("git").arg("--version").output().is_ok_and(|o| o.status.success())
    }

    #[tokio::test]
    async fn tracks_changes_and_restores_files_without_touching_the_users_git() {
        assert!(git_available(), "snapshots need git: install it (.ci/run does)");
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        std::fs::write(root.join(".gitignore"), "ignored.txt\n").unwrap();
        std::fs::write(root.join("ignored.txt"), "secret\n").unwrap();
        let info = ProjectInfo::discover(&root);
        let snapshots = Snapshots::for_project(data.path(), &info).unwrap();

        let before = snapshots.track().await.unwrap();
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        std::fs::write(root.join("b.txt"), "new\n").unwrap();
        std::fs::write(root.join("ignored.txt"), "changed\n").unwrap();
        let after = snapshots.track().await.unwrap();
        let mut changed = snapshots.changed_files(&before, &after).await.unwrap();
        changed.sort();
        assert_eq!(
            changed,
            [root.join("a.txt").display().to_string(), root.join("b.txt").display().to_string()]
        );

        snapshots.restore(&before, &changed).await.unwrap();
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "one\n");
        assert!(!root.join("b.txt").exists());
        assert_eq!(std::fs::read_dir(root.join(".git")).unwrap().count(), 0, "the user's .git is untouched");
    }

    #[tokio::test]
    async fn a_nested_repository_is_snapshotted_file_by_file_even_without_a_commit() {
        assert!(git_available(), "snapshots need git: install it (.ci/run does)");
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let root = project.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("a.txt"), "one\n").unwrap();
        std::fs::create_dir_all(root.join("vendor/lib/src")).unwrap();
        let init = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(root.join("vendor/lib"))
            .output();
        assert!(init.unwrap().status.success());
        std::fs::write(root.join("vendor/lib/src/x.rs"), "old\n").unwrap();
        std::fs::write(root.join("vendor/lib/.gitignore"), "build/\n").unwrap();
        std::fs::create_dir_all(root.join("vendor/lib/build")).unwrap();
        std::fs::write(root.join("vendor/lib/build/out"), "artifact\n").unwrap();
        let snapshots = Snapshots::for_project(data.path(), &ProjectInfo::discover(&root)).unwrap();

        let before = snapshots.track().await.unwrap();
        std::fs::write(root.join("vendor/lib/src/x.rs"), "new\n").unwrap();
        std::fs::write(root.join("vendor/lib/src/y.rs"), "added\n").unwrap();
        std::fs::write(root.join("a.txt"), "two\n").unwrap();
        let after = snapshots.track().await.unwrap();
        let mut changed = snapshots.changed_files(&before, &after).await.unwrap();
        changed.sort();
        let expect: Vec<String> = ["a.txt", "vendor/lib/src/x.rs", "vendor/lib/src/y.rs"]
            .iter()
            .map(|f| root.join(f).display().to_string())
            .collect();
        assert_eq!(changed, expect);
        snapshots.restore(&before, &changed).await.unwrap();
        assert_eq!(std::fs::read_to_string(root.join("vendor/lib/src/x.rs")).unwrap(), "old\n");
        assert!(!root.join("vendor/lib/src/y.rs").exists());

        // A file removed inside the nested repository leaves the next snapshot too.
        std::fs::remove_file(root.join("vendor/lib/src/x.rs")).unwrap();
        let gone = snapshots.track().await.unwrap();
        let changed = snapshots.changed_files(&before, &gone).await.unwrap();
        assert_eq!(changed, vec![root.join("vendor/lib/src/x.rs").display().to_string()]);
    }
}
