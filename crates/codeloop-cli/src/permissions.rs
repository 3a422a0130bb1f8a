//! `codeloop permissions list|revoke`: saved "always" approvals, per project.

use std::io::Write;
use std::process::ExitCode;

use clap::Subcommand;
use codeloop_core::config::action_name;
use codeloop_core::permission::AskPolicy;

use crate::env;

#[derive(Subcommand, Debug)]
pub enum PermissionsCommand {
    /// List saved approvals (all projects, or one with --dir).
    List {
        /// Only the approvals of the project that holds this directory.
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Revoke a saved approval by its number (from `list`).
    Revoke {
        /// The approval's number, as `codeloop permissions list` shows it.
        id: i64,
    },
}

pub async fn permissions(command: PermissionsCommand) -> anyhow::Result<ExitCode> {
    let config = env::load_config(None)?;
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    match command {
        PermissionsCommand::List { dir } => {
            let project = match dir {
                Some(dir) => {
                    let dir = crate::project_dir(Some(dir))?;
                    Some(codeloop_core::instructions::ProjectInfo::discover(&dir).root.display().to_string())
                }
                None => None,
            };
            let approvals = engine.approvals(project).await?;
            if approvals.is_empty() {
                eprintln!("no saved approvals");
            }
            let mut out = std::io::stdout().lock();
            for a in approvals {
                writeln!(
                    out,
                    "{:>4}  {} {} → {}  ({})",
                    a.id,
                    a.rule.permission,
                    a.rule.pattern,
                    action_name(a.rule.action),
                    a.project
                )?;
            }
        }
        PermissionsCommand::Revoke { id } => {
            if engine.revoke_approval(id).await? {
                eprintln!("revoked approval {id}");
            } else {
                anyhow::bail!("no saved approval with number {id}: see codeloop permissions list");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
