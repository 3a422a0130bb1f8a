//! The engine's side of background jobs (DESIGN.md §5f): `[bash] max_jobs`, the recorder that stores
//! each job and announces `job.started` / `job.exited`, who owns a running job (this process, or one that
//! died: then the job is lost), and the note a session's next model request carries when jobs ended.
//!
//! Owns: what a job's start and end mean for the store and the bus. Must not: run processes (the tools'
//! job table does) or build requests (the run loop inserts the note).

use std::sync::Arc;

use codeloop_store::{Store, StoreWriter, Write};
use codeloop_tools::jobs::{DEFAULT_MAX_JOBS, JobNote, JobObserver};
use codeloop_types::{EventPayload, Job, JobState, now_ms};
use serde::{Deserialize, Serialize};

use crate::bus::Bus;

/// `[bash]`: background jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BashConfig {
    /// Background jobs that may run at once in one session.
    pub max_jobs: usize,
}

impl Default for BashConfig {
    fn default() -> Self {
        Self { max_jobs: DEFAULT_MAX_JOBS }
    }
}

/// Stores and announces every job's start and end. Records go through the engine's one store writer,
/// in order with everything else (a job that ends at once is never left recorded as running).
pub(crate) struct JobRecorder {
    bus: Bus,
    writer: Arc<StoreWriter>,
    owner: Owner,
}

impl JobRecorder {
    pub(crate) fn new(writer: Arc<StoreWriter>, bus: Bus, owner: Owner) -> Self {
        Self { bus, writer, owner }
    }

    fn record(&self, job: &Job) {
        self.writer.send(Write::Job { job: job.clone(), owner: self.owner.0.clone() });
    }
}

impl JobObserver for JobRecorder {
    fn started(&self, job: &Job) {
        self.record(job);
        self.bus.publish(EventPayload::JobStarted {
            job_id: job.id.clone(),
            session_id: job.session_id.clone(),
            command: job.command.clone(),
        });
    }

    fn flush(&self) {
        if let Err(error) = self.writer.flush().wait() {
            tracing::warn!(%error, "background jobs' last records could not be written");
        }
    }

    fn notice(&self, session: &codeloop_types::SessionId, message: String) {
        self.bus.publish(EventPayload::SessionNotice { session_id: session.clone(), message });
    }

    fn ended(&self, job: &Job) {
        self.record(job);
        self.bus.publish(EventPayload::JobExited {
            job_id: job.id.clone(),
            session_id: job.session_id.clone(),
            exit_code: job.exit_code,
            state: job.state,
        });
    }
}

/// Which process runs a job: `host:pid:start`, the start being the process's start time in clock ticks
/// since boot, so a reused pid is not taken for the same process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner(pub String);

impl Owner {
    pub(crate) fn this_process() -> Self {
        let pid = std::process::id();
        Self(format!("{}:{pid}:{}", host(), start_time(pid).unwrap_or(0)))
    }

    /// Whether the owner is known dead: a process of this host that is gone (or a new one with its pid).
    /// An owner on another host is not judged.
    pub(crate) fn is_dead(&self) -> bool {
        let mut fields = self.0.rsplitn(3, ':');
        let (Some(start), Some(pid), Some(host_name)) = (fields.next(), fields.next(), fields.next()) else {
            return false;
        };
        if host_name != host() {
            return false;
        }
        let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return false };
        start_time(pid) != Some(start)
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.0.rsplit(':').nth(1)?.parse().ok()
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default()
}

/// Field 22 of `/proc/PID/stat`.
fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..].split_ascii_whitespace().nth(19)?.parse().ok()
}

/// The stored job, lost when its owner is dead (recorded so when found).
pub(crate) fn settle(store: &dyn Store, job: Job, owner: &str) -> Job {
    if !job.state.is_running() || !Owner(owner.to_owned()).is_dead() {
        return job;
    }
    let lost = Job { state: JobState::Lost, ended: Some(now_ms()), ..job };
    if let Err(error) = store.save_job(&lost, owner) {
        tracing::warn!(%error, "could not record background job {} as lost", lost.id);
    }
    lost
}

/// The text of the note a model request carries after jobs ended (job id, exit code, new output).
pub(crate) fn note_text(notes: &[JobNote]) -> String {
    let lines: Vec<String> = notes
        .iter()
        .map(|note| {
            let how = match (note.state, note.exit_code) {
                (JobState::Exited, Some(code)) => format!("exited with code {code}"),
                (JobState::Exited, None) => "exited".to_owned(),
                (state, _) => state.as_str().to_owned(),
            };
            let output = match note.unread {
                0 => "no new output".to_owned(),
                n => format!("{} of new output (bash_output reads it)", bytes(n)),
            };
            format!("Background job {} {how}; {output}.", note.id)
        })
        .collect();
    format!("<job-notes>\n{}\n</job-notes>", lines.join("\n"))
}

fn bytes(n: u64) -> String {
    match n {
        n if n < 1024 => format!("{n} bytes"),
        n if n < 1024 * 1024 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_gone_one_is_dead() {
        let me = Owner::this_process();
        assert!(!me.is_dead());
        assert_eq!(me.pid(), Some(std::process::id()));
        let gone = Owner(format!("{}:{}:1", host(), std::process::id()));
        assert!(gone.is_dead(), "same pid, another start time");
        assert!(!Owner("elsewhere:1:1".into()).is_dead(), "another host is not judged");
    }

    #[test]
    fn the_note_names_each_job_its_end_and_its_new_output() {
        let note = |state, exit_code, unread| JobNote { id: "job_1".into(), state, exit_code, unread };
        assert_eq!(
            note_text(&[note(JobState::Exited, Some(2), 2048), note(JobState::Killed, None, 0)]),
            "<job-notes>\nBackground job job_1 exited with code 2; 2.0 KiB of new output (bash_output reads it).\n\
             Background job job_1 killed; no new output.\n</job-notes>"
        );
    }
}
