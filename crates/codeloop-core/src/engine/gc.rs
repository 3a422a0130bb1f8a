//! Bounded disk (DESIGN.md §5c, issue 26): what the data dir holds, and `codeloop gc` — sessions past
//! `[storage] max_age_days`, then the oldest ones while the data dir is over `[storage] max_bytes`, and
//! with them spilled outputs and job logs past their retention and the snapshot objects of projects no
//! session is left in. Never a running session (its run lock is taken), never one touched in the last
//! day.

use std::path::{Path, PathBuf};
use std::time::Duration;

use codeloop_types::{Session, SessionFilter, SessionId, now_ms};

use super::Engine;
use crate::error::EngineError;

/// Sessions touched this recently are never collected, whatever the limits say.
pub const GC_MIN_AGE: Duration = Duration::from_secs(24 * 3600);

/// What one collection may remove.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcPolicy {
    /// Sessions not updated for this many days go.
    pub max_age_days: Option<u64>,
    /// The oldest sessions go while the data dir is bigger than this.
    pub max_bytes: Option<u64>,
    /// Report what would go, remove nothing.
    pub dry_run: bool,
}

/// What a collection removed (or, on a dry run, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub sessions: Vec<SessionId>,
    /// Old enough to go, but running (or locked by another process): kept.
    pub kept_running: Vec<SessionId>,
    pub tool_outputs: usize,
    pub snapshot_dirs: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Bytes the data dir holds, by what holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageUsage {
    /// The embedded store's files (zero for PostgreSQL, whose space is the server's).
    pub store: u64,
    pub tool_output: u64,
    pub snapshots: u64,
    pub other: u64,
}

impl StorageUsage {
    pub fn total(&self) -> u64 {
        self.store + self.tool_output + self.snapshots + self.other
    }
}

impl Engine {
    /// The data dir's size, by part.
    pub async fn storage_usage(&self) -> StorageUsage {
        let dir = self.services.data_dir.clone();
        tokio::task::spawn_blocking(move || usage_of(&dir)).await.unwrap_or_default()
    }

    /// Collects what `policy` allows (see the module doc).
    pub async fn gc(&self, policy: GcPolicy) -> Result<GcReport, EngineError> {
        let bytes_before = self.storage_usage().await.total();
        let mut report = GcReport { bytes_before, bytes_after: bytes_before, ..GcReport::default() };
        let filter = SessionFilter { include_children: false, ..SessionFilter::default() };
        let mut sessions = self.sessions(filter).await?;
        sessions.sort_by_key(|s| s.time.updated);
        let now = now_ms();
        let age = |s: &Session| u64::try_from(now.saturating_sub(s.time.updated)).unwrap_or(0);
        let settled = |s: &Session| age(s) >= millis(GC_MIN_AGE);
        let too_old =
            |s: &Session| policy.max_age_days.is_some_and(|days| age(s) >= days.saturating_mul(86_400_000));
        let mut estimate = bytes_before;
        for session in sessions.iter().filter(|s| settled(s)) {
            let over = policy.max_bytes.is_some_and(|max| estimate > max);
            if !too_old(session) && !over {
                continue;
            }
            if self.coordinator.is_busy(&session.id) {
                report.kept_running.push(session.id.clone());
                continue;
            }
            if policy.dry_run {
                report.sessions.push(session.id.clone());
                // Without removing it nothing is measured: count the rest as over too (a dry run over
                // `max_bytes` lists every candidate, oldest first).
                continue;
            }
            match self.delete_session(&session.id).await {
                Ok(true) => report.sessions.push(session.id.clone()),
                Ok(false) => {}
                // Running in another process: its lock is taken.
                Err(
                    EngineError::Busy { .. } | EngineError::Store(codeloop_store::StoreError::SessionBusy(_)),
                ) => report.kept_running.push(session.id.clone()),
                Err(e) => return Err(e),
            }
            estimate = self.storage_usage().await.total();
        }
        if !policy.dry_run {
            let remaining =
                self.sessions(SessionFilter { include_children: true, ..SessionFilter::default() }).await?;
            let dir = self.services.data_dir.clone();
            let output = self.services.tool_output_dir.clone();
            let (outputs, snapshots) = tokio::task::spawn_blocking(move || {
                let outputs =
                    codeloop_tools::sweep_tool_output(&output, codeloop_tools::TOOL_OUTPUT_RETENTION);
                (outputs.unwrap_or(0), remove_orphan_snapshots(&dir, &remaining))
            })
            .await
            .unwrap_or_default();
            report.tool_outputs = outputs;
            report.snapshot_dirs = snapshots;
        }
        report.bytes_after = self.storage_usage().await.total();
        Ok(report)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The snapshot repositories of projects no stored session is in.
fn remove_orphan_snapshots(data_dir: &Path, remaining: &[Session]) -> usize {
    let keep: std::collections::HashSet<String> =
        remaining.iter().map(|s| crate::snapshot::snapshot_key(Path::new(&s.directory))).collect();
    let Ok(entries) = std::fs::read_dir(data_dir.join("snapshot")) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !keep.contains(&name) && entry.path().is_dir() && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn usage_of(data_dir: &Path) -> StorageUsage {
    let mut usage = StorageUsage::default();
    let Ok(entries) = std::fs::read_dir(data_dir) else { return usage };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let bytes = bytes_under(&entry.path());
        match name.as_str() {
            "tool-output" => usage.tool_output += bytes,
            "snapshot" => usage.snapshots += bytes,
            _ if name.starts_with("codeloop.db") => usage.store += bytes,
            _ => usage.other += bytes,
        }
    }
    usage
}

/// Bytes of the files under `path` (symbolic links not followed).
fn bytes_under(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return 0 };
    if !meta.is_dir() {
        return meta.len();
    }
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}
