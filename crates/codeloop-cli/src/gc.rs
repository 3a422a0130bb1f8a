//! `codeloop gc`: keeps the data dir bounded (`[storage] max_age_days` / `max_bytes`, or the flags).
//! Sessions go oldest first; a running one, or one touched in the last day, never does.

use std::io::Write as _;
use std::process::ExitCode;

use clap::Args;
use codeloop_core::GcPolicy;
use codeloop_core::permission::AskPolicy;
use serde_json::json;

use crate::{Format, env};

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Remove sessions not updated for this many days (default: `[storage] max_age_days`).
    #[arg(long, value_name = "DAYS")]
    max_age_days: Option<u64>,
    /// Remove the oldest sessions while the data dir is bigger than this many bytes (default:
    /// `[storage] max_bytes`).
    #[arg(long, value_name = "BYTES")]
    max_bytes: Option<u64>,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// text: a line per removed session; json: one report object.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub async fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
    let config = env::load_config(None)?;
    let policy = GcPolicy {
        max_age_days: args.max_age_days.or(config.storage.max_age_days),
        max_bytes: args.max_bytes.or(config.storage.max_bytes),
        dry_run: args.dry_run,
    };
    if policy.max_age_days.is_none() && policy.max_bytes.is_none() {
        eprintln!(
            "note: no limit set ([storage] max_age_days / max_bytes, or --max-age-days / --max-bytes): \
             only spilled outputs past their retention and unused snapshots are removed"
        );
    }
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    let report = engine.gc(policy).await?;
    let mut out = std::io::stdout().lock();
    if args.format == Format::Json {
        let value = json!({
            "dry_run": policy.dry_run,
            "sessions": report.sessions,
            "kept_running": report.kept_running,
            "tool_outputs": report.tool_outputs,
            "snapshot_dirs": report.snapshot_dirs,
            "bytes_before": report.bytes_before,
            "bytes_after": report.bytes_after,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if policy.dry_run { "would remove" } else { "removed" };
    writeln!(out, "{verb} {} session(s)", report.sessions.len())?;
    for id in &report.sessions {
        writeln!(out, "  {id}")?;
    }
    for id in &report.kept_running {
        writeln!(out, "kept {id}: it is running")?;
    }
    if !policy.dry_run {
        writeln!(
            out,
            "removed {} spilled output(s), {} unused snapshot store(s)",
            report.tool_outputs, report.snapshot_dirs
        )?;
    }
    writeln!(out, "data dir: {} → {}", mib(report.bytes_before), mib(report.bytes_after))?;
    Ok(ExitCode::SUCCESS)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
