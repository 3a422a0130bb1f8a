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
    /// Download a models.dev-shaped catalogue (default: models.dev's public API) into the data dir and use
    /// it from now on instead of the built-in one. A download that fails or does not check out changes
    /// nothing.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = MODELS_DEV_URL)]
    pub refresh: Option<String>,
}

/// models.dev's public catalogue.
const MODELS_DEV_URL: &str = "https://models.dev/api.json";
/// A catalogue is a few MiB; anything far larger is not one.
const MAX_DOWNLOAD: usize = 64 << 20;

pub async fn models(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let data = env::data_dir()?;
    if let Some(url) = &args.refresh {
        refresh(url, &data).await?;
    }
    codeloop_core::models::use_cached_catalogue(&data);
    let config = env::load_config(std::env::current_dir().ok().as_deref())?;
    let entries = codeloop_core::models::catalogue(&config);
    let servers = local_servers(&config, args.provider.as_deref());
    let mut served = Vec::new();
    for (name, base_url) in servers {
        let preset =
            codeloop_core::local_models::LOCAL_PRESETS.contains(&name.as_str()).then_some(name.as_str());
        let found = codeloop_core::local_models::served_models(&base_url, preset).await;
        served.push((name, base_url, found));
    }
    if let Some(provider) = &args.provider
        && !entries.iter().any(|e| &e.reference.provider_id == provider)
        && !served.iter().any(|(name, ..)| name == provider)
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
        let mut list: Vec<serde_json::Value> = entries
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
        for (name, _, found) in &served {
            for model in found.as_deref().unwrap_or_default() {
                list.push(serde_json::json!({
                    "id": format!("{name}/{}", model.id),
                    "limit": {"context": model.context},
                    "served": true,
                }));
            }
        }
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
    for (name, base_url, found) in &served {
        match found {
            Ok(models) if models.is_empty() => {
                writeln!(out, "{name} ({base_url}) answers but has no models")?
            }
            Ok(models) => {
                writeln!(out, "{name} ({base_url}) has:")?;
                for model in models {
                    let context = model.context.map(|c| format!("context {}", group(c))).unwrap_or_default();
                    writeln!(out, "  {:<42} {context}", format!("{name}/{}", model.id))?;
                }
            }
            Err(why) => writeln!(out, "{name} ({base_url}): {why}")?,
        }
    }
    if let Some(source) = codeloop_core::models::catalogue_source() {
        writeln!(out, "catalogue: {source}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The local servers to ask for their models: the presets (`ollama`, `lmstudio`, `vllm`, `llamacpp`) and
/// providers on a loopback address that the config sets up or `only` names.
fn local_servers(config: &codeloop_core::config::Config, only: Option<&str>) -> Vec<(String, String)> {
    let models =
        codeloop_core::models::Models::new(config.clone(), std::sync::Arc::new(|n| std::env::var(n).ok()));
    let mut names: Vec<String> = config.provider.keys().cloned().collect();
    if let Some(only) = only
        && !names.iter().any(|n| n == only)
    {
        names.push(only.to_owned());
    }
    names
        .into_iter()
        .filter(|name| only.is_none_or(|o| o == name))
        .filter_map(|name| {
            let base_url = models.provider_endpoint(&name)?.base_url?;
            let local =
                codeloop_core::local_models::LOCAL_PRESETS.contains(&name.as_str()) || is_loopback(&base_url);
            local.then_some((name, base_url))
        })
        .collect()
}

pub(crate) fn is_loopback(url: &str) -> bool {
    let rest = url.split("://").nth(1).unwrap_or(url);
    rest.starts_with("127.") || rest.starts_with("localhost") || rest.starts_with("[::1]")
}

/// Downloads, checks and caches a catalogue; on any failure the cached (or built-in) one stays.
async fn refresh(url: &str, data: &std::path::Path) -> anyhow::Result<()> {
    let keeping = "the catalogue in use is kept";
    let text = download(url)
        .await
        .map_err(|e| anyhow::anyhow!("cannot refresh the catalogue from {url}: {e:#}; {keeping}"))?;
    let date = codeloop_types::iso8601(codeloop_types::now_ms());
    let refreshed = codeloop_provider::catalogue::refresh_from(&text, url, &date)
        .map_err(|e| anyhow::anyhow!("the catalogue from {url} is not usable: {e}; {keeping}"))?;
    std::fs::create_dir_all(data)?;
    let path = data.join(codeloop_core::models::CATALOGUE_FILE);
    let partial = path.with_extension("json.partial");
    std::fs::write(&partial, &refreshed.json)
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}; {keeping}", path.display()))?;
    let skipped = match refreshed.skipped {
        0 => String::new(),
        1 => " (1 entry without limits left out)".to_owned(),
        n => format!(" ({n} entries without limits left out)"),
    };
    eprintln!(
        "catalogue refreshed: {} models of {} providers from {url}{skipped}, cached in {}",
        refreshed.models,
        refreshed.providers,
        path.display()
    );
    Ok(())
}

async fn download(url: &str) -> anyhow::Result<String> {
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60)).build()?;
    let mut response = client.get(url).send().await?;
    if !response.status().is_success() {
        anyhow::bail!("HTTP {}", response.status());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_DOWNLOAD {
            anyhow::bail!("the download exceeds {} MiB", MAX_DOWNLOAD >> 20);
        }
    }
    Ok(String::from_utf8(body)?)
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
