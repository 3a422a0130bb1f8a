//! Running a script: `bash -c` (or `sh`) in its own process group, stdin closed, stdout and stderr on one
//! pipe, raced against exit, timeout and cancellation. Timeout and cancellation kill the whole group
//! (SIGTERM, then SIGKILL after [`KILL_GRACE`]) so grandchildren die too. Inside the walls the call has a
//! PID namespace of its own, whose init ends whatever the script left running and says how many there
//! were (through the helper's stdin, a [`codeloop_sandbox::CallChannel`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::time::{Instant, MissedTickBehavior};

use codeloop_sandbox::{CallChannel, CallReport};

use super::output::OutputSink;
use crate::{ToolContext, Walls};

/// Time between SIGTERM and SIGKILL for the process group.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(2);
/// Extra time the walls' helper gets to end its tree itself (it takes [`KILL_GRACE`] too) before the group
/// is killed from here.
const HELPER_SLACK: Duration = Duration::from_secs(1);
/// After the shell exits, how long to keep reading output that background processes still write to the
/// inherited pipe. A detached server may hold it open forever; this bounds the wait (reference: +100 ms).
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(100);
/// Minimum time between two live-progress updates.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    Exited(Option<i32>),
    TimedOut,
    Aborted,
}

/// How a run ended, with what the walls' helper reported of the tree (`None` without a PID namespace).
pub(crate) struct Finished {
    pub ending: Ending,
    pub report: Option<CallReport>,
}

/// A started script: the process (the walls' helper, or the shell), the read end of its output pipe, and
/// the channel the helper reports on (it must live as long as the call: its end-of-file ends the tree).
pub(crate) struct Spawned {
    pub child: Child,
    pub pipe: tokio::net::unix::pipe::Receiver,
    pub channel: Option<CallChannel>,
    pub pgid: Option<Pid>,
}

impl Spawned {
    /// SIGTERM to the process group; then, after the grace (the helper's own plus a second when a helper
    /// ends the tree itself), SIGKILL to it.
    pub(crate) async fn kill(&mut self) {
        let grace = if self.channel.is_some() { KILL_GRACE + HELPER_SLACK } else { KILL_GRACE };
        kill_group(self.pgid, &mut self.child, grace).await;
    }

    /// What the helper reported, once it has exited.
    pub(crate) fn report(&self) -> Option<CallReport> {
        self.channel.as_ref().and_then(CallChannel::report)
    }
}

/// Starts `script` in `cwd` (inside `walls` when given) in its own process group, stdout and stderr on
/// one pipe, stdin closed.
pub(crate) fn spawn(
    script: &str,
    cwd: &Path,
    ctx: &ToolContext,
    walls: Option<&Walls>,
) -> std::io::Result<Spawned> {
    let (reader, writer) = std::io::pipe()?;
    // What the session's SessionStart hooks exported (`CLAUDE_ENV_FILE`) is set before the command runs.
    let with_env;
    let script = match session_env(ctx) {
        Some(file) => {
            with_env = format!(
                ". '{}' >/dev/null 2>&1\n{script}",
                file.display().to_string().replace('\'', "'\\''")
            );
            with_env.as_str()
        }
        None => script,
    };
    let mut channel = None;
    let mut command = match walls {
        Some(walls) => {
            let channel = channel.insert(CallChannel::new()?);
            let mut command = Command::from(codeloop_sandbox::wrap_command(
                &walls.helper,
                &walls.policy,
                shell().as_os_str(),
                &["-c".into(), script.into()],
            ));
            command.stdin(channel.stdin());
            command
        }
        None => {
            let mut command = Command::new(shell());
            command.arg("-c").arg(script).stdin(Stdio::null());
            if let Some(temp) = &ctx.project.temp_dir {
                command.env("TMPDIR", temp);
            }
            command
        }
    };
    // The call's id is its operation id (DESIGN.md §5m): a command can tag what it does with it.
    command
        .env("CODELOOP_CALL_ID", &ctx.call.call_id)
        .env("CODELOOP_SESSION_ID", ctx.call.session_id.as_str());
    command.current_dir(cwd).stdout(writer.try_clone()?).stderr(writer).process_group(0).kill_on_drop(false);
    let child = command.spawn()?;
    // The command keeps our copies of the pipe's write end: drop it, or the read side never sees EOF.
    drop(command);
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())?;
    Ok(Spawned { child, pipe, channel, pgid })
}

/// The session's env file when a hook wrote something to it.
fn session_env(ctx: &ToolContext) -> Option<PathBuf> {
    let file = ctx.project.temp_dir.as_ref()?.join(crate::SESSION_ENV_FILE);
    std::fs::metadata(&file).is_ok_and(|m| m.is_file() && m.len() > 0).then_some(file)
}

/// Runs `script` in `cwd` (inside `walls` when given), feeding output into `sink` and live progress into
/// `progress`.
pub(crate) async fn run(
    script: &str,
    cwd: &Path,
    timeout: Duration,
    ctx: &ToolContext,
    walls: Option<&Walls>,
    sink: &mut OutputSink,
    mut progress: impl FnMut(&OutputSink),
) -> std::io::Result<Finished> {
    let mut spawned = spawn(script, cwd, ctx, walls)?;
    let deadline = Instant::now() + timeout;
    let mut ticker = tokio::time::interval(PROGRESS_EVERY);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut buf = vec![0u8; 16 * 1024];
    let mut ending: Option<Ending> = None;
    let mut eof = false;
    let mut dirty = false;
    let mut drain_until: Option<Instant> = None;

    while !(eof && ending.is_some()) {
        let drain_at = drain_until.unwrap_or(deadline);
        tokio::select! {
            read = spawned.pipe.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    sink.push(&buf[..n]).await;
                    dirty = true;
                }
            },
            status = spawned.child.wait(), if ending.is_none() => {
                ending = Some(Ending::Exited(status?.code()));
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = tokio::time::sleep_until(drain_at), if drain_until.is_some() => break,
            _ = tokio::time::sleep_until(deadline), if ending.is_none() => {
                spawned.kill().await;
                ending = Some(Ending::TimedOut);
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = ctx.cancel.cancelled(), if ending.is_none() => {
                spawned.kill().await;
                ending = Some(Ending::Aborted);
                drain_until = Some(Instant::now() + DRAIN_AFTER_EXIT);
            }
            _ = ticker.tick() => {
                if dirty {
                    progress(sink);
                    dirty = false;
                }
            }
        }
    }
    if dirty {
        progress(sink);
    }
    // The helper has exited (or the drain gave up on it): its report, if any, is waiting.
    let _ = spawned.child.wait().await;
    let report = spawned.report();
    Ok(Finished { ending: ending.unwrap_or(Ending::Exited(None)), report })
}

/// SIGTERM to the group, up to `grace` for its leader (the helper, or the shell) to exit, then SIGKILL to
/// whatever is left of the group. Waiting on the group itself is not reliable: orphaned grandchildren
/// become zombies of an init that may never reap them, so the leader's exit is the signal to stop being
/// gentle. (The helper itself ends its whole tree, `setsid` processes included, TERM then KILL.)
async fn kill_group(pgid: Option<Pid>, child: &mut Child, grace: Duration) {
    let Some(pgid) = pgid else {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return;
    };
    let _ = killpg(pgid, Signal::SIGTERM);
    let _ = tokio::time::timeout(grace, child.wait()).await;
    let _ = killpg(pgid, Signal::SIGKILL);
    let _ = child.wait().await;
}

/// `bash` when it is on `PATH`, else `sh`.
fn shell() -> &'static Path {
    static SHELL: OnceLock<PathBuf> = OnceLock::new();
    SHELL.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join("bash"))
            .find(|candidate| candidate.is_file())
            .unwrap_or_else(|| PathBuf::from("sh"))
    })
}
