//! `codeloop hooks list|test` (DESIGN.md §5d): every hook with its source and trust, and one event's
//! hooks run against an input read from stdin, with the merged decision printed as JSON.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use codeloop_core::Engine;
use codeloop_core::hooks::{HookEvent, Hooks};

use crate::env;

#[derive(Subcommand, Debug)]
pub enum HooksCommand {
    /// List every hook with its event, matcher, source and trust.
    List {
        /// The project whose hooks to list (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run the hooks of EVENT with the hook input JSON on stdin; print the merged decision (exit 2
    /// when it blocks).
    Test {
        /// The event: PreToolUse, Stop, UserPromptSubmit, …
        event: String,
        /// The tool the matchers see (default: the input's `tool_name`).
        #[arg(long)]
        tool: Option<String>,
        /// The project whose hooks run (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

pub async fn hooks(command: HooksCommand) -> anyhow::Result<ExitCode> {
    match command {
        HooksCommand::List { dir } => list(dir),
        HooksCommand::Test { event, tool, dir } => test(&event, tool.as_deref(), dir).await,
    }
}

fn list(dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let dir = crate::project_dir(dir)?;
    let loaded = env::config_sources(Some(&dir)).load()?;
    let hooks = Hooks::compile(&loaded.config.hook_layers);
    let mut out = std::io::stdout().lock();
    let mut any = false;
    for (event, matcher, handler) in hooks.list() {
        any = true;
        let matcher = matcher.unwrap_or_else(|| "*".to_owned());
        let kind = match handler.kind {
            codeloop_core::hooks::HandlerKind::Command => "command",
            codeloop_core::hooks::HandlerKind::Http => "http",
        };
        writeln!(
            out,
            "{:<18} {:<16} {:<14} trusted    {kind}  {}",
            event.name(),
            matcher,
            handler.source.as_str(),
            handler.target
        )?;
    }
    if let Some(project) = loaded.project.as_ref().filter(|p| !p.trusted()) {
        for want in project.wants.iter().filter(|w| w.starts_with("run hook")) {
            any = true;
            writeln!(out, "{:<18} {:<16} {:<14} untrusted  (not run: {want})", "-", "-", "project")?;
        }
        if project.wants.iter().any(|w| w.starts_with("run hook")) {
            eprintln!(
                "the project's hooks do not run until you trust it: review its config, then `codeloop trust {}`",
                project.root.display()
            );
        }
    }
    for warning in hooks.warnings.iter() {
        eprintln!("warning: {warning}");
    }
    if !any {
        eprintln!("no hooks configured ([[hooks.EVENT]] in your config, or [hooks] import_claude = true)");
    }
    Ok(ExitCode::SUCCESS)
}

async fn test(event: &str, tool: Option<&str>, dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let Some(event) = HookEvent::parse(event) else {
        anyhow::bail!(
            "unknown hook event `{event}`: use one of {}",
            HookEvent::ALL.iter().map(|e| e.name()).collect::<Vec<_>>().join(", ")
        );
    };
    let dir = crate::project_dir(dir)?;
    let loaded = env::config_sources(Some(&dir)).load()?;
    let hooks = Hooks::compile(&loaded.config.hook_layers);
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    let mut input: serde_json::Value = if text.trim().is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("the hook input on stdin is not JSON: {e}"))?
    };
    if !input.is_object() {
        anyhow::bail!("the hook input on stdin must be a JSON object");
    }
    fill_missing(event, tool, &mut input);
    let outcome = Engine::test_hooks(&hooks, event, &dir, tool, input).await;
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    println!("{}", serde_json::to_string_pretty(&outcome.to_json())?);
    Ok(if outcome.denial().is_some() { ExitCode::from(2) } else { ExitCode::SUCCESS })
}

/// The event's own fields a test input left out, with neutral values.
fn fill_missing(event: HookEvent, tool: Option<&str>, input: &mut serde_json::Value) {
    let mut set = |key: &str, value: serde_json::Value| {
        if input.get(key).is_none() {
            input[key] = value;
        }
    };
    match event {
        HookEvent::PreToolUse
        | HookEvent::PostToolUse
        | HookEvent::PostToolUseFailure
        | HookEvent::PermissionRequest => {
            set("tool_name", tool.unwrap_or("Bash").into());
            set("tool_input", serde_json::json!({}));
            set("tool_use_id", "call_test".into());
            if event == HookEvent::PostToolUse {
                set("tool_response", serde_json::json!({}));
            }
            if event == HookEvent::PostToolUseFailure {
                set("error", "".into());
            }
        }
        HookEvent::UserPromptSubmit => set("prompt", "".into()),
        HookEvent::SessionStart => set("source", "startup".into()),
        HookEvent::Stop | HookEvent::SubagentStop => {
            set("stop_hook_active", false.into());
            set("last_assistant_message", "".into());
        }
        HookEvent::PreCompact | HookEvent::PostCompact => set("trigger", "manual".into()),
        HookEvent::Notification => set("message", "".into()),
        HookEvent::SessionEnd => set("reason", "other".into()),
        HookEvent::StopFailure => set("error", "".into()),
        HookEvent::SubagentStart => set("agent_type", "".into()),
    }
}
