//! `bash` with `run_in_background: true` (DESIGN.md §5f): the script starts like any call (same asks,
//! same walls, its own process limit) and the call returns at once with the job id. One task per job then
//! moves its output into the job's buffer and saved file and waits for its end: exit, a kill, or the
//! owner's end (when codeloop dies, the helper sees its channel close and ends the tree).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use codeloop_types::JobState;

use super::guarded::{Before, model_note};
use super::process::{self, Spawned};
use crate::jobs::{Job, Jobs, PROTECTED_SWEEP_EVERY, Swept};
use crate::{ToolContext, ToolFailure, ToolOutput, Walls};
use codeloop_types::LockExt;

/// After the job's main process exits, how long to keep reading what is still in the pipe.
const DRAIN_AFTER_EXIT: std::time::Duration = std::time::Duration::from_millis(100);

pub(super) struct Start<'a> {
    pub command: &'a str,
    pub title: String,
    pub cwd: &'a Path,
    pub walls: Option<&'a Walls>,
    pub before: Before,
}

/// Starts the job and answers with its id.
pub(super) fn start(ctx: &ToolContext, jobs: Arc<Jobs>, start: Start<'_>) -> Result<ToolOutput, ToolFailure> {
    let job = jobs.reserve(&ctx.call.session_id, start.command).map_err(ToolFailure::Failed)?;
    let spawned = match process::spawn(start.command, start.cwd, ctx, start.walls) {
        Ok(spawned) => spawned,
        Err(e) => {
            jobs.abandon(&job);
            return Err(ToolFailure::Failed(format!("Failed to start the background job: {e}")));
        }
    };
    let id = job.id();
    let saved = ctx.tool_output_dir.join(format!("{id}.log"));
    job.output.locked().saved = Some(saved.clone());
    if start.before.watches() {
        let (before, sweep_ctx) = (start.before, ctx.clone());
        job.watch_protected(Arc::new(move || {
            let lines = before.sweep(&sweep_ctx);
            (!lines.is_empty()).then(|| Swept { note: model_note(&lines), lines })
        }));
    }
    jobs.started(&job);
    let task = Task { jobs, job, ctx: ctx.clone(), saved };
    tokio::spawn(task.run(spawned));
    let output = format!(
        "Started background job {id}: {}\nIt keeps running after this call. Read its output with \
         bash_output {{\"job_id\": \"{id}\"}} (add \"filter\": a regex to see matching lines only); stop it \
         with bash_kill {{\"job_id\": \"{id}\"}}. You will be told when it ends.",
        start.command
    );
    let metadata = json!({
        "job_id": id.as_str(),
        "background": true,
        "output": "",
        "exit": null,
        "truncated": false,
    });
    Ok(ToolOutput { title: start.title, output, metadata, attachments: Vec::new() })
}

struct Task {
    jobs: Arc<Jobs>,
    job: Arc<Job>,
    ctx: ToolContext,
    saved: PathBuf,
}

impl Task {
    async fn run(self, mut spawned: Spawned) {
        let mut file = open_saved(&self.saved).await;
        let cap = self.ctx.limits.max_saved_bytes;
        let mut written: u64 = 0;
        let mut buf = vec![0u8; 64 * 1024];
        let mut status = None;
        let mut killed = false;
        let mut eof = false;
        let mut drain_until = None;
        // Protected paths the job creates are moved out while it runs, not only when it ends; no timer
        // for a job whose walls watch nothing.
        let watching = self.job.watches_protected();
        let mut sweep = tokio::time::interval(PROTECTED_SWEEP_EVERY);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !(eof && status.is_some()) {
            let drain_at = drain_until.unwrap_or_else(tokio::time::Instant::now);
            tokio::select! {
                read = spawned.pipe.read(&mut buf), if !eof => match read {
                    Ok(0) | Err(_) => eof = true,
                    Ok(n) => {
                        let chunk = &buf[..n];
                        if let Some(f) = file.as_mut() {
                            let room = usize::try_from(cap.saturating_sub(written)).unwrap_or(usize::MAX);
                            let part = &chunk[..n.min(room)];
                            if !part.is_empty() && f.write_all(part).await.is_err() {
                                file = None;
                            }
                            written += part.len() as u64;
                        }
                        self.push(chunk);
                    }
                },
                exit = spawned.child.wait(), if status.is_none() => {
                    status = Some(exit.ok().and_then(|s| exit_code(&s)));
                    drain_until = Some(tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
                }
                _ = self.job.kill_requested().cancelled(), if status.is_none() && !killed => {
                    killed = true;
                    spawned.kill().await;
                }
                _ = tokio::time::sleep_until(drain_at), if drain_until.is_some() => break,
                _ = sweep.tick(), if watching && status.is_none() => {
                    let (jobs, job) = (self.jobs.clone(), self.job.clone());
                    let _ = tokio::task::spawn_blocking(move || jobs.sweep_job(&job)).await;
                }
            }
        }
        let total = self.job.output.locked().total();
        if let Some(mut f) = file {
            if total > cap {
                let note = format!(
                    "\n\n[cut: the output went on for {total} bytes in all; only the first {cap} are saved \
                     ([tool_output] max_saved_bytes)]\n"
                );
                let _ = f.write_all(note.as_bytes()).await;
                self.job.output.locked().cut = true;
            }
            let _ = f.flush().await;
        }
        self.closing_notes(&spawned, killed).await;
        let state = if killed { JobState::Killed } else { JobState::Exited };
        let code = if killed { None } else { status.flatten() };
        self.jobs.finish(&self.job, state, code);
    }

    fn push(&self, chunk: &[u8]) {
        self.job.output.locked().push(chunk);
    }

    /// What the model should know once the job is over: leftovers ended, protected paths it created.
    async fn closing_notes(&self, spawned: &Spawned, killed: bool) {
        let leftovers = spawned.report().map_or(0, |r| r.leftovers);
        if leftovers > 0 && !killed {
            let noun = if leftovers == 1 { "process" } else { "processes" };
            self.push(format!("\n[{leftovers} leftover {noun} ended with the job]\n").as_bytes());
        }
        let (jobs, job) = (self.jobs.clone(), self.job.clone());
        let _ = tokio::task::spawn_blocking(move || jobs.sweep_job(&job)).await;
    }
}

async fn open_saved(path: &Path) -> Option<tokio::fs::File> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.ok()?;
    }
    match tokio::fs::File::create(path).await {
        Ok(file) => Some(file),
        Err(e) => {
            tracing::warn!("cannot save a background job's output to {}: {e}", path.display());
            None
        }
    }
}

/// The exit code, or 128 + the signal that ended it (as a shell says).
fn exit_code(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt as _;
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}
