//! `bash`: runs a shell command in the project (reference §8.3 bash).
//!
//! Before running, it asks `external_directory` for a `workdir` or path arguments of file-touching commands
//! outside the project, then `bash` with one pattern per command of the script and an arity-prefix
//! `always` pattern (`git status --short` → `git status *`).

mod arity;
mod output;
mod parse;
mod process;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::{Grant, PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput, Walls};
use output::OutputSink;
use parse::{SimpleCommand, split_commands};
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
Default timeout 120000 ms. Long outputs are cut (the full output is saved to a file).";

/// Commands that are not asked about: they only move the shell around.
const NOT_ASKED: &[&str] = &["cd", "pushd", "popd"];
/// Commands whose arguments are paths the command touches.
const FILE_COMMANDS: &[&str] =
    &["cat", "cd", "chmod", "chown", "cp", "ln", "mkdir", "mv", "pushd", "rm", "rmdir", "touch"];

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// The command to execute.
    command: String,
    /// Timeout in milliseconds (default 120000).
    #[serde(default, deserialize_with = "crate::lenient::opt_u64")]
    #[schemars(range(min = 1))]
    timeout: Option<u64>,
    /// Working directory (default: the project directory).
    workdir: Option<String>,
    /// What the command does, in 5-10 words.
    description: Option<String>,
    /// Run outside codeloop's sandbox. Only after a command failed because the sandbox blocked it; the
    /// user is asked every time.
    #[serde(default, deserialize_with = "crate::lenient::opt_bool")]
    escalate: Option<bool>,
}

/// Runs shell commands.
pub struct BashTool {
    parameters: Value,
}

impl BashTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
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
        let commands = split_commands(&params.command);
        ask_permissions(ctx, &cwd, &commands, params.workdir.is_some()).await?;
        if !cwd.is_dir() {
            return Err(ToolFailure::Failed(format!("Working directory does not exist: {}", cwd.display())));
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
        let walls = walls_for(ctx, &params).await?;
        let timeout = Duration::from_millis(timeout_ms);
        let ending = process::run(&params.command, &cwd, timeout, ctx, walls, &mut sink, report)
            .await
            .map_err(|e| ToolFailure::Failed(format!("Failed to run command: {e}")))?;
        let mut out = sink.finish().await;
        if let (Some(walls), Ending::Exited(Some(code))) = (walls, ending)
            && code != 0
            && let Some(note) = codeloop_sandbox::explain_failure(&walls.policy, &out.text)
        {
            out.text.push_str(&format!("\n\n<sandbox>\n{note}\n</sandbox>"));
        }
        let mut output = render(title, description, ending, timeout_ms, out);
        output.metadata["sandbox"] = json!(walls.map_or("off", |w| w.policy.mode.as_str()));
        Ok(output)
    }
}

/// The walls this call runs in: the session's, unless the model asked to escalate and a person (or a rule
/// naming `sandbox_escalate`) agreed.
async fn walls_for<'a>(ctx: &'a ToolContext, params: &Params) -> Result<Option<&'a Walls>, ToolFailure> {
    let Some(walls) = ctx.walls.as_deref() else { return Ok(None) };
    if walls.policy.mode == codeloop_sandbox::SandboxMode::Off || params.escalate != Some(true) {
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

/// `external_directory` for paths outside the project, then `bash` for every command of the script.
async fn ask_permissions(
    ctx: &ToolContext,
    cwd: &Path,
    commands: &[SimpleCommand],
    explicit_workdir: bool,
) -> Result<(), ToolFailure> {
    let mut external = BTreeSet::new();
    if explicit_workdir && !paths::is_inside_project(ctx, cwd) {
        external.insert(paths::external_pattern(cwd, PathKind::Directory));
    }
    for command in commands {
        let targets = command.redirect_targets.iter().filter(|t| !is_dynamic(t) && !t.starts_with("/dev/"));
        for path in targets.map(|t| paths::resolve_from(cwd, t)) {
            if !paths::is_inside_project(ctx, &path) {
                external.insert(paths::external_pattern(&path, PathKind::File));
            }
        }
        for path in path_arguments(cwd, &command.words) {
            if !paths::is_inside_project(ctx, &path) {
                let kind = if command.words[0] == "cd" || command.words[0] == "pushd" || path.is_dir() {
                    PathKind::Directory
                } else {
                    PathKind::File
                };
                external.insert(paths::external_pattern(&path, kind));
            }
        }
    }
    paths::ask_external_patterns(ctx, external.into_iter().collect()).await?;

    let mut patterns = Vec::new();
    let mut always = Vec::new();
    for command in commands.iter().filter(|c| !NOT_ASKED.contains(&c.words[0].as_str())) {
        push_unique(&mut patterns, command.text.clone());
        push_unique(&mut always, format!("{} *", arity::prefix(&command.words).join(" ")));
    }
    if patterns.is_empty() {
        return Ok(());
    }
    ctx.ask(PermissionAsk {
        grant: Default::default(),
        permission: "bash".to_string(),
        patterns,
        always,
        metadata: json!({}),
    })
    .await?;
    Ok(())
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Resolved path arguments of a file-touching command. Flags, the mode/owner operand of chmod/chown and
/// dynamic words (`$VAR`, substitutions) are skipped; a glob contributes its literal directory part.
fn path_arguments(cwd: &Path, words: &[String]) -> Vec<std::path::PathBuf> {
    let Some(command) = words.first() else { return Vec::new() };
    if !FILE_COMMANDS.contains(&command.as_str()) {
        return Vec::new();
    }
    let mut operands = words[1..].iter().filter(|w| !w.starts_with('-') || w.as_str() == "-");
    if command == "chmod" || command == "chown" {
        operands.next();
    }
    operands
        .filter(|w| !is_dynamic(w) && w.as_str() != "-")
        .filter_map(|w| {
            let literal = match w.find(['*', '?', '[']) {
                Some(idx) => {
                    w[..idx].rsplit_once('/').map(|(dir, _)| if dir.is_empty() { "/" } else { dir })?
                }
                None => w.as_str(),
            };
            Some(paths::resolve_from(cwd, literal))
        })
        .collect()
}

/// A word whose value is only known when the shell runs it.
fn is_dynamic(word: &str) -> bool {
    word.contains('$') || word.contains('`')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn path_arguments_skip_flags_modes_and_dynamic_words() {
        let cwd = Path::new("/proj");
        assert_eq!(
            path_arguments(cwd, &words("rm -rf ../other /tmp/x")),
            vec![PathBuf::from("/other"), PathBuf::from("/tmp/x")]
        );
        assert_eq!(path_arguments(cwd, &words("chmod 755 bin/run")), vec![PathBuf::from("/proj/bin/run")]);
        assert_eq!(path_arguments(cwd, &words("rm $HOME/x /etc/*.conf")), vec![PathBuf::from("/etc")]);
        assert!(path_arguments(cwd, &words("echo /etc/passwd")).is_empty());
    }
}
