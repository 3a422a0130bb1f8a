//! `codeloop sandbox check`: what the OS walls are for a project here, and a self-test that they hold.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use codeloop_core::instructions::ProjectInfo;
use codeloop_core::walls::{WallsSetup, walls_for};

use crate::env;

#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Print the platform, Landlock ABI, mode, writable roots, protected paths and network setting for a
    /// project, then check that a write outside really is blocked. Exit 1 when a self-test fails.
    Check {
        /// The project (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The agent whose walls to show (`plan` and `explore` always run read-only).
        #[arg(long, default_value = "build")]
        agent: String,
    },
}

pub fn sandbox(command: SandboxCommand) -> anyhow::Result<ExitCode> {
    let SandboxCommand::Check { dir, agent } = command;
    let dir = crate::project_dir(dir)?;
    let config = env::load_config(Some(&dir))?;
    let project = ProjectInfo::discover(&dir);
    let mut paths = codeloop_tools::ProjectPaths::new(&project.directory, &project.root);
    let temp = tempfile::Builder::new().prefix("codeloop-sandbox-check-").tempdir()?;
    paths.temp_dir = Some(temp.path().to_owned());
    let setup = WallsSetup {
        helper: Some(std::env::current_exe().context("cannot find the codeloop executable")?),
        home: std::env::home_dir(),
        masked: env::config_dir().into_iter().chain(env::data_dir().ok()).collect(),
        cache_layers: env::data_dir().ok().map(|d| d.join("sandbox").join("caches")),
        credentials: codeloop_core::credentials::credential_variables(&config),
        protected: env::protected_paths(),
    };
    let walls = walls_for(&setup, &config.sandbox, &paths, &agent).context("no sandbox helper")?;
    let report = codeloop_sandbox::check(&walls.helper, &walls.policy);
    print!("{report}");
    if !walls.policy.mode.eq(&codeloop_sandbox::SandboxMode::Off) && !config.sandbox.git_write {
        println!("  (.git is read-only for commands: set [sandbox] git_write = true to let them commit)");
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
