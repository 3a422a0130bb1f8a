//! `bash`: runs a shell command in the project (reference §8.3 bash).
//!
//! Before running, the script is parsed once (tree-sitter-bash, [`parse`]) into every command it can run.
//! Then, in one call each: `external_directory` for a `workdir` or path arguments outside the project,
//! `read` for every path argument (relative to the project root; the rules make secrets ask), and
//! `bash` with one normalised pattern per command and an arity-prefix `always` pattern
//! (`git status --short` → `git status *`).

mod arity;
mod background;
mod files;
mod guarded;
mod output;
mod parse;
mod process;
mod words;
mod wrappers;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use codeloop_sandbox::SandboxMode;

use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::{Grant, PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput, Walls};
use output::OutputSink;
use parse::{Check, Command, analyse};
use process::Ending;

const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// Longest timeout honoured; larger values are clamped (the reference has no maximum, but an `Instant`
/// cannot be arbitrarily far away).
const MAX_TIMEOUT_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// Extra time a call gets past its own timeout before the engine's watchdog steps in.
const WATCHDOG_GRACE: Duration = Duration::from_secs(60);

const DESCRIPTION: &str = "Run a bash command in the project directory (or `workdir`) and return its combined stdout/stderr \
and exit code. Use for builds, tests, git and other terminal tasks; prefer the read/grep/glob/edit tools over \
cat/grep/find/sed. Use `workdir` instead of `cd`. Quote paths with spaces. Chain dependent commands with &&. \
Default timeout 120000 ms. Long outputs are cut (the full output is saved to a file). A call's processes end \
with it: for servers, watchers and long builds set `run_in_background` (you get a job id at once; read it \
with bash_output, stop it with bash_kill).";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The command to execute.
    command: String,
    /// Timeout in milliseconds (default 120000).
    #[serde(default, deserialize_with = "crate::lenient::opt_u64")]
    #[schemars(range(min = 1))]
    timeout: Option<u64>,
    /// Working directory (default: the project directory).
    #[serde(default, deserialize_with = "crate::lenient::opt_text")]
    workdir: Option<String>,
    /// What the command does, in 5-10 words.
    description: Option<String>,
    /// Run outside codeloop's sandbox. Only after a command failed because the sandbox blocked it; the
    /// user is asked every time.
    #[serde(default, deserialize_with = "crate::lenient::opt_bool")]
    escalate: Option<bool>,
    /// Run as a background job that outlives this call (servers, watchers, long builds): returns a job id
    /// at once.
    #[serde(default, deserialize_with = "crate::lenient::opt_bool")]
    run_in_background: Option<bool>,
}

/// Runs shell commands.
pub struct BashTool {
    parameters: Value,
}

impl BashTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }

    /// The `bash` permission ask a script leads to (without the path asks, which depend on the file
    /// system): one normalised pattern per command it can run. `None` when it runs nothing that is
    /// asked (`cd dir`). Parses the script once; cheap enough to call per tool call.
    pub fn permission_ask(script: &str) -> Option<PermissionAsk> {
        bash_ask(&analyse(script))
    }
}

impl Default for BashTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    /// The call's own timeout (at least the default) plus a grace for the process-group kill and the
    /// output drain: the watchdog only steps in if bash's own limit failed.
    fn deadline(&self, args: &Value) -> Option<Duration> {
        let timeout_ms = args.get("timeout").and_then(Value::as_u64).unwrap_or(DEFAULT_TIMEOUT_MS);
        Some(Duration::from_millis(timeout_ms.clamp(DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)) + WATCHDOG_GRACE)
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let timeout_ms = match params.timeout {
            Some(0) => {
                return Err(ToolFailure::Failed(
                    "Invalid timeout value: 0. Timeout must be a positive number.".into(),
                ));
            }
            Some(ms) => ms.min(MAX_TIMEOUT_MS),
            None => DEFAULT_TIMEOUT_MS,
        };
        let cwd = match &params.workdir {
            Some(dir) => paths::resolve(ctx, dir),
            None => ctx.project.directory.clone(),
        };
        let commands = analyse(&params.command);
        let granted_reads = ask_permissions(ctx, &cwd, &commands, params.workdir.is_some()).await?;
        if !cwd.is_dir() {
            return Err(ToolFailure::Failed(format!(
                "Working directory does not exist: {}. Leave workdir out to run in the project directory, or \
                 create it first (mkdir -p).",
                cwd.display()
            )));
        }

        let title = params.description.clone().unwrap_or_else(|| params.command.clone());
        let description = params.description.clone().unwrap_or_default();
        ctx.progress(Some(title.clone()), Some(json!({"output": "", "description": description})));
        let mut sink = OutputSink::new(ctx.limits, ctx.tool_output_dir.clone());
        let report = |sink: &OutputSink| {
            ctx.progress(
                Some(title.clone()),
                Some(json!({"output": sink.live(), "description": description})),
            );
        };
        let session_walls = walls_for(ctx, &params).await?;
        let (before, call_walls) = guarded::before(ctx, session_walls, &granted_reads);
        let walls = call_walls.as_ref();
        // Without a mount namespace the protected paths are not read-only mounts: check them afterwards.
        let watched = walls
            .filter(|w| w.policy.mode != SandboxMode::Off && !codeloop_sandbox::probe().user_namespaces)
            .map(|w| (w, codeloop_sandbox::fingerprint(&w.policy.protected)));
        if params.run_in_background == Some(true) {
            let Some(jobs) = ctx.host.jobs() else {
                return Err(ToolFailure::Failed(
                    "Background jobs are not available here: run the command without run_in_background."
                        .into(),
                ));
            };
            let start = background::Start { command: &params.command, title, cwd: &cwd, walls, before };
            let mut output = background::start(ctx, jobs, start)?;
            output.metadata["description"] = json!(description);
            output.metadata["sandbox"] = json!(walls.map_or("off", |w| w.policy.mode.as_str()));
            return Ok(output);
        }
        let timeout = Duration::from_millis(timeout_ms);
        let finished = process::run(&params.command, &cwd, timeout, ctx, walls, &mut sink, report)
            .await
            .map_err(|e| ToolFailure::Failed(format!("Failed to run command: {e}")))?;
        let ending = finished.ending;
        let mut out = sink.finish().await;
        let leftovers = finished.report.map_or(0, |r| r.leftovers);
        if leftovers > 0 && matches!(ending, Ending::Exited(_)) {
            let noun = if leftovers == 1 { "process" } else { "processes" };
            out.text.push_str(&format!(
                "\n\n<shell_metadata>\n{leftovers} leftover {noun} ended: use run_in_background for servers \
                 and watchers (a call's processes end with it)\n</shell_metadata>"
            ));
        }
        if let Some((walls, before)) = watched {
            let changed = before.changed(&codeloop_sandbox::fingerprint(&walls.policy.protected));
            if !changed.is_empty() {
                let list: Vec<String> = changed.iter().map(|p| p.display().to_string()).collect();
                out.text.push_str(&format!(
                    "\n\n<sandbox>\nThis command changed protected paths ({}), which commands must not write; \
                     the user has been told. Do not do this again.\n</sandbox>",
                    list.join(", ")
                ));
                tracing::warn!("a command changed protected paths: {}", list.join(", "));
            }
        }
        if let (Some(walls), Ending::Exited(Some(code))) = (walls, ending)
            && code != 0
        {
            if let Some(note) = codeloop_sandbox::explain_failure(&walls.policy, &out.text) {
                out.text.push_str(&format!("\n\n<sandbox>\n{note}\n</sandbox>"));
            }
            if let Some(note) = before.hidden_note(ctx) {
                out.text.push_str(&format!("\n\n{note}"));
            }
        }
        if let Some(note) = before.after(ctx) {
            out.text.push_str(&format!("\n\n{note}"));
        }
        let mut output = render(title, description, ending, timeout_ms, out);
        output.metadata["sandbox"] = json!(walls.map_or("off", |w| w.policy.mode.as_str()));
        // Files the language servers have open that the command changed: what they say of them now.
        Ok(ctx.with_diagnostics(output, &[]).await)
    }
}

/// The walls this call runs in: the session's, unless the model asked to escalate and a person (or a rule
/// naming `sandbox_escalate`) agreed.
async fn walls_for<'a>(ctx: &'a ToolContext, params: &Params) -> Result<Option<&'a Walls>, ToolFailure> {
    let Some(walls) = ctx.walls.as_deref() else { return Ok(None) };
    if walls.policy.mode == SandboxMode::Off || params.escalate != Some(true) {
        return Ok(Some(walls));
    }
    ctx.ask(PermissionAsk {
        grant: Grant::Explicit,
        permission: "sandbox_escalate".to_string(),
        patterns: vec![params.command.clone()],
        always: vec![params.command.clone()],
        metadata: json!({"command": params.command, "sandbox": walls.policy.mode.as_str()}),
    })
    .await?;
    Ok(None)
}

fn render(
    title: String,
    description: String,
    ending: Ending,
    timeout_ms: u64,
    out: output::FinalOutput,
) -> ToolOutput {
    let mut text = if out.text.is_empty() { "(no output)".to_string() } else { out.text };
    // The model is told first that the command failed (DESIGN.md §5l), then what it printed.
    if let Some(status) = status_line(ending, timeout_ms) {
        text = format!("{status}\n{text}");
    }
    let note = match ending {
        Ending::Exited(_) => None,
        Ending::TimedOut => Some(format!(
            "bash tool terminated command after exceeding timeout {timeout_ms} ms. If this command is expected to \
             take longer and is not waiting for interactive input, retry with a larger timeout value in milliseconds."
        )),
        Ending::Aborted => Some("User aborted the command".to_string()),
    };
    if let Some(note) = note {
        text.push_str(&format!("\n\n<shell_metadata>\n{note}\n</shell_metadata>"));
    }
    let exit = match ending {
        Ending::Exited(code) => json!(code),
        Ending::TimedOut | Ending::Aborted => Value::Null,
    };
    let mut metadata = json!({
        "output": output::metadata_preview(&text),
        "exit": exit,
        "description": description,
        "truncated": out.truncated,
    });
    if let Some(path) = &out.output_path {
        metadata["outputPath"] = json!(path.to_string_lossy());
    }
    ToolOutput { title, output: text, metadata, attachments: Vec::new() }
}

/// The first line of a failed call's result: `Exit code N`, `Timed out after Ns`, `Interrupted`; none for
/// a command that exited 0.
fn status_line(ending: Ending, timeout_ms: u64) -> Option<String> {
    match ending {
        Ending::Exited(Some(0)) => None,
        Ending::Exited(Some(code)) => Some(format!("Exit code {code}")),
        Ending::Exited(None) => Some("Exit code unknown".to_owned()),
        Ending::TimedOut => Some(format!("Timed out after {}s", timeout_ms.div_ceil(1000))),
        Ending::Aborted => Some("Interrupted".to_owned()),
    }
}

/// `external_directory` for paths outside the project, `read` for every path argument, `edit` (explicit
/// grant only) for protected paths it writes, then `bash` for every command of the script; each in one
/// ask, so one denied pattern denies the call. Returns the `read` patterns granted.
async fn ask_permissions(
    ctx: &ToolContext,
    cwd: &Path,
    commands: &[Command],
    explicit_workdir: bool,
) -> Result<Vec<String>, ToolFailure> {
    let files = files::file_asks(ctx, cwd, commands);
    let mut external = files.external;
    if explicit_workdir {
        for dir in files::outside_project(ctx, cwd) {
            external.insert(paths::external_pattern(&dir, PathKind::Directory));
        }
    }
    paths::ask_external_patterns(ctx, external.into_iter().collect()).await?;
    if !files.read.is_empty() {
        let patterns = files.read.clone();
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: "read".to_string(),
            always: patterns.clone(),
            patterns,
            metadata: json!({}),
        })
        .await?;
    }
    if !files.protected.is_empty() {
        let patterns = files.protected;
        ctx.ask(PermissionAsk {
            grant: Grant::Explicit,
            permission: "edit".to_string(),
            always: patterns.clone(),
            patterns,
            metadata: json!({"protected": true}),
        })
        .await?;
    }

    if let Some(ask) = bash_ask(commands) {
        ctx.ask(ask).await?;
    }
    Ok(files.read)
}

/// The `bash` ask for the commands of a script: one pattern per command, deduplicated; `None` when
/// every command only moves the shell.
fn bash_ask(commands: &[Command]) -> Option<PermissionAsk> {
    let mut patterns = Vec::new();
    let mut always = Vec::new();
    for command in commands.iter().filter(|c| c.check == Check::Bash) {
        push_unique(&mut patterns, command.pattern.clone());
        push_unique(&mut always, command.always.clone());
    }
    (!patterns.is_empty()).then(|| PermissionAsk {
        grant: Default::default(),
        permission: "bash".to_string(),
        patterns,
        always,
        metadata: json!({}),
    })
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}
