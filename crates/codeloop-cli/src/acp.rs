//! `codeloop acp`: the Agent Client Protocol agent on stdin/stdout, for editors.
//!
//! Owns: the command-line edge — opening an engine per project directory the way `run` does (config
//! and trust for that directory, `AskPolicy::Wait` since the editor answers) — and handing stdio to
//! `codeloop_acp::serve`.
//! Must not: write anything but protocol messages to stdout; warnings and logs go to stderr.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use codeloop_acp::{AcpOptions, Host, Opened};
use codeloop_core::mcp::McpSettings;
use codeloop_core::permission::AskPolicy;

use crate::env;
use codeloop_types::LockExt;

#[derive(Args, Debug)]
pub struct AcpArgs {
    /// Seconds a permission request waits for the editor's answer before it counts as rejected.
    #[arg(long, value_name = "SECS", default_value_t = codeloop_acp::DEFAULT_PERMISSION_TIMEOUT.as_secs_f64())]
    pub permission_timeout: f64,
}

/// Engines as the CLI opens them, each with its telemetry (finished when the agent exits).
#[derive(Default)]
struct CliHost {
    telemetry: std::sync::Mutex<Vec<codeloop_telemetry::Telemetry>>,
}

impl Host for CliHost {
    fn open(&self, directory: &Path, mcp: BTreeMap<String, McpSettings>) -> anyhow::Result<Opened> {
        let loaded = env::config_sources(Some(directory)).load()?;
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
        let mut config = loaded.config;
        // The editor's MCP servers are the user's own programs, like those in the user's config.
        config.mcp.extend(mcp);
        let engine = env::open_engine(config, AskPolicy::Wait)?;
        if let Some(telemetry) = env::start_telemetry(&engine) {
            self.telemetry.locked().push(telemetry);
        }
        Ok(Opened { engine, warnings: loaded.warnings })
    }
}

pub async fn acp(args: AcpArgs) -> anyhow::Result<ExitCode> {
    if !(args.permission_timeout.is_finite() && args.permission_timeout > 0.0) {
        anyhow::bail!("--permission-timeout must be a positive number of seconds");
    }
    let options = AcpOptions {
        permission_timeout: Duration::from_secs_f64(args.permission_timeout),
        ..AcpOptions::default()
    };
    // Our own handles on fds 0 and 1 (tokio's `io-std` is not among the workspace's features).
    let stdin = std::io::stdin().as_fd().try_clone_to_owned().context("cannot use stdin")?;
    let stdout = std::io::stdout().as_fd().try_clone_to_owned().context("cannot use stdout")?;
    let input = tokio::fs::File::from_std(std::fs::File::from(stdin));
    let output = tokio::fs::File::from_std(std::fs::File::from(stdout));
    let host = Arc::new(CliHost::default());
    let served = codeloop_acp::serve(host.clone(), options, input, output).await;
    let telemetry = std::mem::take(&mut *host.telemetry.locked());
    futures::future::join_all(telemetry.into_iter().map(|t| t.finish())).await;
    served?;
    Ok(ExitCode::SUCCESS)
}
