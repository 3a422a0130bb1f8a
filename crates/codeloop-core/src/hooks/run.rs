//! Running one firing's handlers: in parallel, each a `sh -c` process in the project directory (its
//! own process group, killed whole at the time-out) or an HTTP POST, with the event's JSON as input.
//! Every run is announced (`hook.ran`) and its non-blocking errors become warnings.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use codeloop_store::Store;
use codeloop_types::{EventPayload, SessionId};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::HookEvent;
use super::config::{Handler, HandlerKind, Hooks};
use super::merge::{Ended, HookOutcome, interpret};
use crate::Bus;

/// What a firing needs of its session.
#[derive(Clone)]
pub struct HookEnv {
    pub session_id: SessionId,
    /// The project directory: the hooks' working directory and `CODELOOP_PROJECT_DIR`.
    pub project_dir: PathBuf,
    /// Where `hook.ran` and warnings go (`None`: nowhere, as in `codeloop hooks test`).
    pub bus: Option<Bus>,
    /// The session's store, for `transcript_path` (`None`: an empty transcript).
    pub store: Option<Arc<dyn Store>>,
    /// `default`, or `bypassPermissions` for `--on-ask allow`.
    pub permission_mode: &'static str,
    /// Where sessions' transcripts for `transcript_path` are kept (`None`: no transcript).
    pub transcripts: Option<PathBuf>,
    /// The writer the session's parts go through: flushed before the transcript is read, so a hook sees
    /// the call it is about.
    pub writer: Option<Arc<codeloop_store::StoreWriter>>,
    /// `CLAUDE_ENV_FILE` for SessionStart hooks: what they export there reaches the session's later bash
    /// calls ([`codeloop_tools::SESSION_ENV_FILE`] in its temp dir).
    pub env_file: Option<PathBuf>,
    /// The prompt being answered (its user message's id): `prompt_id`, as Claude Code sends it.
    pub prompt_id: Option<String>,
    /// The effort asked for the turn: `effort: {level}` on the events of a model turn.
    pub effort: Option<codeloop_types::Effort>,
}

/// Runs the handlers of `event` that match `subjects` with `input` (the event's own fields; the common
/// ones are added here) and merges their answers. No matching handler: nothing runs, nothing is
/// allocated beyond the empty outcome.
pub async fn fire(
    hooks: &Hooks,
    event: HookEvent,
    subjects: &[&str],
    input: Value,
    env: &HookEnv,
) -> HookOutcome {
    if !hooks.any(event) {
        return HookOutcome::default();
    }
    let handlers = hooks.matching(event, subjects);
    if handlers.is_empty() {
        return HookOutcome::default();
    }
    let transcript = transcript(env).await;
    let mut input = match input {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let path = transcript.map(|t| t.display().to_string()).unwrap_or_default();
    // Fields the caller gave (`codeloop hooks test`'s input) stay; missing ones are filled in.
    input.entry("session_id").or_insert_with(|| env.session_id.as_str().into());
    input.entry("transcript_path").or_insert_with(|| path.into());
    input.entry("cwd").or_insert_with(|| env.project_dir.display().to_string().into());
    input.entry("hook_event_name").or_insert_with(|| event.name().into());
    input.entry("permission_mode").or_insert_with(|| env.permission_mode.into());
    // As Claude Code: every event of a prompt names it; the events of a model turn carry its effort.
    if let Some(prompt) = env.prompt_id.as_deref().filter(|_| event != HookEvent::SessionStart) {
        input.entry("prompt_id").or_insert_with(|| prompt.into());
    }
    if let Some(effort) = env.effort.filter(|_| event.in_model_turn()) {
        input.entry("effort").or_insert_with(|| serde_json::json!({ "level": effort.as_str() }));
    }
    let body = Value::Object(input).to_string();
    let runs = handlers.iter().map(|h| run_one(event, h, &body, env));
    let results = futures::future::join_all(runs).await;
    let mut merged = HookOutcome::default();
    for one in results {
        merged.merge(one);
    }
    if let Some(bus) = &env.bus {
        for warning in merged.warnings.iter().chain(merged.messages.iter()) {
            bus.publish(EventPayload::SessionWarning {
                session_id: env.session_id.clone(),
                message: if warning.starts_with("hook") {
                    warning.clone()
                } else {
                    format!("hook: {warning}")
                },
            });
        }
    }
    merged
}

async fn run_one(event: HookEvent, handler: &Handler, body: &str, env: &HookEnv) -> HookOutcome {
    let started = Instant::now();
    let ended = match handler.kind {
        HandlerKind::Command => run_command(event, handler, body, env).await,
        HandlerKind::Http => run_http(handler, body).await,
    };
    let exit_code = match &ended {
        Ended::Exited { code, .. } => Some(*code),
        _ => None,
    };
    let mut outcome = interpret(event, handler, ended).escaped();
    // A warning says which hook, in the words `run` prints: `warning: hook …`.
    for warning in &mut outcome.warnings {
        *warning = format!("hook {warning}");
    }
    if let Some(bus) = &env.bus {
        bus.publish(EventPayload::HookRan {
            session_id: env.session_id.clone(),
            event: event.name().to_owned(),
            source: handler.source.as_str().to_owned(),
            command: handler.target.clone(),
            duration_ms: started.elapsed().as_millis() as u64,
            exit_code,
            decision: outcome.label().to_owned(),
        });
    }
    outcome
}

async fn run_command(event: HookEvent, handler: &Handler, body: &str, env: &HookEnv) -> Ended {
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(&handler.target)
        .current_dir(&env.project_dir)
        .env("CODELOOP_PROJECT_DIR", &env.project_dir)
        .env("CLAUDE_PROJECT_DIR", &env.project_dir)
        .env("CODELOOP_SESSION_ID", env.session_id.as_str())
        .envs(
            env.env_file
                .as_ref()
                .filter(|_| event == HookEvent::SessionStart)
                .map(|file| ("CLAUDE_ENV_FILE", file.as_os_str())),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return Ended::Crashed(format!("could not start ({e})")),
    };
    let pid = child.id();
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let body = body.to_owned();
    let work = async move {
        // A hook that does not read its input must not block us: its stdin closes after the write.
        let feed = async move {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(body.as_bytes()).await;
            }
        };
        let (_, out, err, status) = tokio::join!(feed, read_all(stdout), read_all(stderr), child.wait());
        (out, err, status)
    };
    match tokio::time::timeout(handler.timeout, work).await {
        Ok((stdout, stderr, Ok(status))) => match status.code() {
            Some(code) => Ended::Exited { code, stdout, stderr },
            None => Ended::Crashed(format!("was killed ({status})")),
        },
        Ok((_, _, Err(e))) => Ended::Crashed(format!("could not be waited for ({e})")),
        Err(_) => {
            kill_group(pid);
            Ended::TimedOut
        }
    }
}

/// Ends a timed-out hook's whole process group (its children too).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

async fn read_all<R: tokio::io::AsyncRead + Unpin>(reader: Option<R>) -> String {
    let mut buf = Vec::new();
    if let Some(mut reader) = reader {
        // At most 1 MiB is read: the rest is cut anyway.
        let _ = (&mut reader).take(1 << 20).read_to_end(&mut buf).await;
        let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
    }
    String::from_utf8_lossy(&buf).into_owned()
}

async fn run_http(handler: &Handler, body: &str) -> Ended {
    let client = match reqwest::Client::builder().timeout(handler.timeout).build() {
        Ok(client) => client,
        Err(e) => return Ended::Crashed(format!("could not be reached ({e})")),
    };
    let mut request =
        client.post(&handler.target).header("content-type", "application/json").body(body.to_owned());
    for (name, value) in &handler.headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            // A 2xx answer is exit 0 (its body is the output); anything else a non-blocking error.
            if status.is_success() {
                Ended::Exited { code: 0, stdout: text, stderr: String::new() }
            } else {
                Ended::Exited { code: i32::from(status.as_u16()), stdout: String::new(), stderr: text }
            }
        }
        Err(e) if e.is_timeout() => Ended::TimedOut,
        Err(e) => Ended::Crashed(format!("could not be reached ({e})")),
    }
}

/// The session's transcript for `transcript_path` ([`super::transcript`]), brought up to date; `None`
/// without a store or a place for it (`codeloop hooks test`).
async fn transcript(env: &HookEnv) -> Option<std::path::PathBuf> {
    let (Some(store), Some(dir)) = (env.store.clone(), env.transcripts.clone()) else { return None };
    if let Some(writer) = &env.writer
        && let Err(error) = writer.flush().await
    {
        tracing::debug!(%error, "the transcript may miss the newest parts");
    }
    let (id, cwd) = (env.session_id.clone(), env.project_dir.clone());
    tokio::task::spawn_blocking(move || {
        let history = store.load_history(&id).ok()?;
        let path = super::transcript::path(&dir, &id);
        match super::transcript::write(&path, &id, &cwd, &history) {
            Ok(()) => Some(path),
            Err(error) => {
                tracing::warn!(%error, "the transcript for hooks could not be written to {}", path.display());
                None
            }
        }
    })
    .await
    .ok()
    .flatten()
}
