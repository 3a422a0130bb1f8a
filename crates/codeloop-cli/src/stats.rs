//! `codeloop stats`: tokens, prompt-cache hit rate and cost of the stored sessions (DESIGN.md §5h), by
//! model, project or day.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use codeloop_core::permission::AskPolicy;
use codeloop_core::stats::{StatsBy, UsageRow, hit_rate};

use crate::env;

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// How many days back to count (steps of the last N × 24 hours).
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// What each row adds up.
    #[arg(long, value_enum, default_value_t = By::Model)]
    pub by: By,
    /// Print the rows as a JSON list.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    Model,
    Project,
    Day,
}

pub async fn stats(args: StatsArgs) -> anyhow::Result<ExitCode> {
    let config = env::load_config(None)?;
    let engine = env::open_engine(config, AskPolicy::Deny)?;
    let by = match args.by {
        By::Model => StatsBy::Model,
        By::Project => StatsBy::Project,
        By::Day => StatsBy::Day,
    };
    let rows = engine.usage_stats(args.days, by).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if rows.is_empty() {
        eprintln!("no model requests in the last {} days", args.days);
        return Ok(ExitCode::SUCCESS);
    }
    let key = match args.by {
        By::Model => "model",
        By::Project => "project",
        By::Day => "day",
    };
    writeln!(
        out,
        "{key:<40} {:>8} {:>12} {:>10} {:>12} {:>12} {:>7} {:>10}",
        "sessions", "input", "output", "cache read", "cache write", "hit", "cost USD"
    )?;
    for row in &rows {
        write_row(&mut out, row)?;
    }
    if rows.len() > 1 {
        write_row(&mut out, &total(&rows))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_row(out: &mut impl Write, row: &UsageRow) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<40} {:>8} {:>12} {:>10} {:>12} {:>12} {:>6.1}% {:>10.4}",
        row.key,
        row.sessions,
        row.input_tokens,
        row.output_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
        row.cache_hit_rate * 100.0,
        row.cost_usd
    )
}

/// The sum of the rows (a session in two rows counts in each).
fn total(rows: &[UsageRow]) -> UsageRow {
    let mut total = UsageRow {
        key: "total".into(),
        sessions: 0,
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
        cost_usd: 0.0,
        cache_hit_rate: 0.0,
    };
    for row in rows {
        total.sessions += row.sessions;
        total.input_tokens += row.input_tokens;
        total.output_tokens += row.output_tokens;
        total.cache_read_tokens += row.cache_read_tokens;
        total.cache_write_tokens += row.cache_write_tokens;
        total.cost_usd += row.cost_usd;
    }
    total.cache_hit_rate = hit_rate(total.cache_read_tokens, total.input_tokens);
    total
}
