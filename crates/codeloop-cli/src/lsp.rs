//! `codeloop lsp status [--json]` (DESIGN.md §5n): the language servers a run in this directory would
//! use, started to see whether they answer (each that serves a file here), with their state, root, pid
//! and last error.
//!
//! Owns: the command-line edge. Must not: hold language-server logic (`codeloop_core::lsp` does).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use codeloop_core::permission::AskPolicy;

use crate::env;

#[derive(Subcommand, Debug)]
pub enum LspCommand {
    /// List the language servers for this project: state (running, broken, idle: serves no file here,
    /// missing: not on PATH, standby: another server of its language runs, off), root, pid and the last error. Starts each one that serves a file
    /// here to find out, then shuts them down.
    Status {
        /// One JSON array: [{name, state, root?, pid?, command, extensions, error?, restarts}].
        #[arg(long)]
        json: bool,
        /// Project directory (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Only list what is configured and found; start nothing.
        #[arg(long)]
        no_start: bool,
    },
}

pub async fn lsp(command: LspCommand) -> anyhow::Result<ExitCode> {
    let LspCommand::Status { json, dir, no_start } = command;
    let dir = crate::project_dir(dir)?;
    let config = env::load_config(Some(&dir))?;
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    let status = engine.lsp_status(&dir, !no_start).await;
    engine.shutdown_language_servers().await;
    if json {
        println!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    if status.is_empty() {
        eprintln!("no language servers: none of the presets is on PATH and [lsp.NAME] configures none");
        return Ok(ExitCode::SUCCESS);
    }
    for server in &status {
        let mut line = format!("{} — {}", server.name, server.state);
        if let Some(root) = &server.root {
            line.push_str(&format!(", root {}", root.display()));
        }
        if let Some(pid) = server.pid {
            line.push_str(&format!(", pid {pid}"));
        }
        if server.restarts > 0 {
            line.push_str(&format!(", restarted {}×", server.restarts));
        }
        line.push_str(&format!(" (`{}`; .{})", server.command.join(" "), server.extensions.join(" .")));
        if let Some(error) = &server.error {
            line.push_str(&format!("\n  error: {error}"));
        }
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
