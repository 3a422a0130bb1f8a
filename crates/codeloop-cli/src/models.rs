//! `codeloop models`: the model catalogue with limits, prices, the file-editing tools each model is
//! offered and the sampling sent to it.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use crate::render::group;
use crate::{Format, env};

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Only models of this provider.
    pub provider: Option<String>,
    /// text: a table; json: a list with each model's limits and prices.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn models(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let config = env::load_config(std::env::current_dir().ok().as_deref())?;
    let entries = codeloop_core::models::catalogue(&config);
    if let Some(provider) = &args.provider
        && !entries.iter().any(|e| &e.reference.provider_id == provider)
    {
        let mut known: Vec<&str> = entries.iter().map(|e| e.reference.provider_id.as_str()).collect();
        known.sort_unstable();
        known.dedup();
        anyhow::bail!("no models for provider \"{provider}\": known providers are {}", known.join(", "));
    }
    let entries: Vec<_> = entries
        .into_iter()
        .filter(|e| args.provider.as_deref().is_none_or(|p| e.reference.provider_id == p))
        .collect();
    let mut out = std::io::stdout().lock();
    if args.format == Format::Json {
        let list: Vec<serde_json::Value> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.reference.to_string(),
                    "limit": {"context": e.limits.context, "input": e.limits.input, "output": e.limits.output},
                    "cost": {"input": e.pricing.input, "output": e.pricing.output,
                             "cache_read": e.pricing.cache_read, "cache_write": e.pricing.cache_write},
                    "tools": e.tools.as_str(),
                    "temperature": e.temperature.map(decimal),
                    "top_p": e.top_p.map(decimal),
                    "effort": e.effort,
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{:<44} {:>10} {:>8}  {:>8} {:>8} {:>8}  {:<5}  {:<10}  effort",
        "model", "context", "output", "input", "output", "cached", "tools", "sampling"
    )?;
    for e in entries {
        writeln!(
            out,
            "{:<44} {:>10} {:>8}  {:>8.2} {:>8.2} {:>8.2}  {:<5}  {:<10}  {}",
            e.reference.to_string(),
            group(e.limits.context),
            group(e.limits.output),
            e.pricing.input,
            e.pricing.output,
            e.pricing.cache_read,
            e.tools.as_str(),
            sampling(e.temperature, e.top_p),
            effort(&e.effort),
        )?;
    }
    writeln!(out, "prices in USD per 1M tokens; tools, sampling and effort: see `codeloop models --help`")?;
    if let Some(source) = codeloop_core::models::catalogue_source() {
        writeln!(out, "catalogue: {source}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `low,medium,high`, or `-` for a model that does not reason.
fn effort(levels: &[codeloop_types::Effort]) -> String {
    if levels.is_empty() {
        return "-".into();
    }
    levels.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(",")
}

/// `t=0.55 p=1`, or `-` when nothing is sent.
fn sampling(temperature: Option<f32>, top_p: Option<f32>) -> String {
    let parts: Vec<String> = [("t", temperature), ("p", top_p)]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| format!("{name}={v}")))
        .collect();
    if parts.is_empty() { "-".into() } else { parts.join(" ") }
}

/// A sampling value as its shortest decimal (`0.55`, not the `f64` widening of the `f32`).
fn decimal(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}
