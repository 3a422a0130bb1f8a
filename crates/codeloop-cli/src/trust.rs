//! `codeloop trust [DIR] [--revoke] [--list]`: accept (or stop accepting) a repository's own config.
//!
//! Until a project is trusted its `codeloop.toml` / `.codeloop/config.toml` may only narrow the user's
//! setup (DESIGN.md §5a). Trusting records the project's canonical root and a hash of what its config can
//! do; when that part changes, the project is untrusted again until trusted anew.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use codeloop_core::trust::TrustState;

use crate::env;

#[derive(Args, Debug)]
pub struct TrustArgs {
    /// The project to trust (default: the current directory); its repository root is what is recorded.
    dir: Option<PathBuf>,
    /// Stop trusting the project: its config goes back to only narrowing yours.
    #[arg(long, conflicts_with = "list")]
    revoke: bool,
    /// List the trusted projects.
    #[arg(long)]
    list: bool,
}

/// In a terminal: a project whose config wants more than an untrusted one may do is asked about once
/// ("trust it?"); a yes records it as `codeloop trust` would, a no leaves it narrowing only (and its warning
/// says how to trust it later).
pub fn offer(dir: &std::path::Path) -> anyhow::Result<()> {
    let sources = env::config_sources(Some(dir));
    let Some(store) = &sources.trust else { return Ok(()) };
    let Some(project) = sources.project()? else { return Ok(()) };
    if project.trusted() || project.wants.is_empty() {
        return Ok(());
    }
    let files: Vec<String> = project.files.iter().map(|f| f.display().to_string()).collect();
    let again = if project.trust == TrustState::Changed { " changed since you trusted it and" } else { "" };
    eprintln!("This repository's config ({}){again} wants to:", files.join(", "));
    for want in &project.wants {
        eprintln!("  - {want}");
    }
    eprint!("Trust it? Until you do, it may only narrow your settings. [y/N] ");
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer).context("cannot read the answer")?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        store.trust(&project.root, &project.hash, codeloop_types::now_ms())?;
        eprintln!("trusted {} (codeloop trust --revoke undoes it)", project.root.display());
    }
    Ok(())
}

pub fn trust(args: TrustArgs) -> anyhow::Result<ExitCode> {
    let store =
        env::trust_store().context("cannot find the config directory: set HOME or XDG_CONFIG_HOME")?;
    if args.list {
        let records = store.list()?;
        if records.is_empty() {
            eprintln!("no trusted projects ({})", store.path().display());
        }
        let mut out = std::io::stdout().lock();
        for record in records {
            writeln!(out, "{}  {}", record.path.display(), record.hash)?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let dir = crate::project_dir(args.dir)?;
    let sources = env::config_sources(Some(&dir));
    let root = sources.project_root.clone().unwrap_or_else(|| dir.clone());
    if args.revoke {
        if store.revoke(&root)? {
            eprintln!("{} is no longer trusted: its config may only narrow yours", root.display());
            return Ok(ExitCode::SUCCESS);
        }
        anyhow::bail!("{} was not trusted: see codeloop trust --list", root.display());
    }
    let project = sources.project()?;
    let hash = match &project {
        Some(project) => project.hash.clone(),
        None => codeloop_core::trust::empty_config_hash(),
    };
    let record = store.trust(&root, &hash, codeloop_types::now_ms())?;
    match project {
        Some(project) if project.trust == TrustState::Trusted => {
            eprintln!("{} was already trusted", record.path.display());
        }
        Some(project) => {
            eprintln!("trusted {}", record.path.display());
            let files: Vec<String> = project.files.iter().map(|f| f.display().to_string()).collect();
            eprintln!("its config ({}) now counts in full", files.join(", "));
            for want in &project.wants {
                eprintln!("  - it may {want}");
            }
        }
        None => eprintln!(
            "trusted {} (it has no codeloop.toml or .codeloop/config.toml yet)",
            record.path.display()
        ),
    }
    Ok(ExitCode::SUCCESS)
}
