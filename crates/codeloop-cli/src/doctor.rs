//! `codeloop doctor [--json]`: says, one line per fact with ✓ or ✗ and what to do, whether a run could
//! start here: version, config files (and an untrusted project's ignored keys), the model and why, each
//! provider's key and reachability, the data dir, the sandbox, git, MCP commands and language servers.
//! Never prints a key.
//!
//! Exit 0 when a run could start; 1 only when the provider a run would use is unusable (DESIGN.md §5a).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use codeloop_core::config::LoadedConfig;
use codeloop_core::models::{ModelChoice, Models};
use codeloop_core::trust::TrustState;
use serde::Serialize;

use crate::env;

/// How long a provider's base URL has to answer.
const REACH_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// The project to check (default: the current directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print the checks as one JSON object instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Check {
    name: String,
    ok: bool,
    detail: String,
    /// What to do about it, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

impl Check {
    fn ok(name: impl Into<String>, detail: impl Into<String>) -> Check {
        Check { name: name.into(), ok: true, detail: detail.into(), fix: None }
    }

    fn bad(name: impl Into<String>, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check { name: name.into(), ok: false, detail: detail.into(), fix: Some(fix.into()) }
    }
}

#[derive(Debug, Serialize)]
struct Report {
    /// A run could start with the model below.
    ready: bool,
    checks: Vec<Check>,
}

pub async fn doctor(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let dir = crate::project_dir(args.dir)?;
    let mut checks = vec![Check::ok("version", format!("codeloop {}", env!("CARGO_PKG_VERSION")))];
    let sources = env::config_sources(Some(&dir));
    let loaded = match sources.load() {
        Ok(loaded) => loaded,
        Err(e) => {
            checks.push(Check::bad("config", e.to_string(), "fix the file named above"));
            return finish(Report { ready: false, checks }, args.json);
        }
    };
    config_checks(&mut checks, &sources, &loaded);
    let ready = model_checks(&mut checks, &loaded).await;
    data_dir_check(&mut checks, &loaded.config.storage);
    store_check(&mut checks, &loaded).await;
    session_dirs_check(&mut checks, &loaded).await;
    sandbox_check(&mut checks, &loaded);
    git_check(&mut checks);
    mcp_checks(&mut checks, &loaded);
    lsp_checks(&mut checks, &loaded);
    finish(Report { ready, checks }, args.json)
}

fn finish(report: Report, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for check in &report.checks {
            let mark = if check.ok { '✓' } else { '✗' };
            match &check.fix {
                Some(fix) => println!("{mark} {}: {} — {fix}", check.name, check.detail),
                None => println!("{mark} {}: {}", check.name, check.detail),
            }
        }
        if report.ready {
            println!("a run can start here");
        } else {
            println!("a run cannot start here: fix the ✗ lines about the model or its provider");
        }
    }
    Ok(if report.ready { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn config_checks(
    checks: &mut Vec<Check>,
    sources: &codeloop_core::config::ConfigSources,
    loaded: &LoadedConfig,
) {
    let user: Vec<String> = [sources.global.as_ref(), sources.explicit.as_ref()]
        .into_iter()
        .flatten()
        .filter(|f| f.is_file())
        .map(|f| f.display().to_string())
        .collect();
    if user.is_empty() {
        let global = sources.global.as_ref().map(|g| g.display().to_string()).unwrap_or_default();
        checks.push(Check::ok(
            "config",
            format!("no user config file ({global} does not exist; `codeloop config init` writes one)"),
        ));
    } else {
        checks.push(Check::ok("config", format!("read {}", user.join(", "))));
    }
    if let Some(project) = &loaded.project {
        let files: Vec<String> = project.files.iter().map(|f| f.display().to_string()).collect();
        match project.trust {
            TrustState::Trusted => {
                checks.push(Check::ok("project config", format!("{} (trusted)", files.join(", "))));
                // What the trusted project brings, named so a person sees what runs on its say-so.
                for want in &project.wants {
                    checks.push(Check::ok("this project brings", format!("{want} (trusted)")));
                }
            }
            state if project.wants.is_empty() => checks.push(Check::ok(
                "project config",
                format!("{} ({}; it only narrows your settings)", files.join(", "), trust_word(state)),
            )),
            state => checks.push(Check::bad(
                "project config",
                format!(
                    "{} is {}; ignored: {}",
                    files.join(", "),
                    trust_word(state),
                    project.wants.join("; ")
                ),
                format!("review it, then `codeloop trust {}`", project.root.display()),
            )),
        }
    }
    for warning in &loaded.warnings {
        if !warning.contains("not trusted") && !warning.contains("changed since you trusted") {
            checks.push(Check::bad("config", warning.clone(), "fix the key named above"));
        }
    }
}

fn trust_word(state: TrustState) -> &'static str {
    match state {
        TrustState::Trusted => "trusted",
        TrustState::Untrusted => "not trusted",
        TrustState::Changed => "changed since you trusted it",
    }
}

/// The model a run would use and its provider; true when a run could start.
async fn model_checks(checks: &mut Vec<Check>, loaded: &LoadedConfig) -> bool {
    if let Ok(data) = env::data_dir() {
        codeloop_core::models::use_cached_catalogue(&data);
    }
    let source = codeloop_core::models::catalogue_source().unwrap_or("built in");
    checks.push(Check::ok("catalogue", source.to_owned()));
    let models = Models::new(loaded.config.clone(), std::sync::Arc::new(|name| std::env::var(name).ok()));
    let chosen = match models.default_model_choice() {
        Ok((model, ModelChoice::Configured)) => {
            checks.push(Check::ok("model", format!("{model} (from your config)")));
            Some(model)
        }
        Ok((model, ModelChoice::FromKey { variable })) => {
            checks.push(Check::ok(
                "model",
                format!("{model} (no model configured; chosen because ${variable} is set)"),
            ));
            Some(model)
        }
        Err(e) => {
            checks.push(Check::bad("model", "none", e.to_string()));
            None
        }
    };
    let mut names: Vec<String> = loaded.config.provider.keys().cloned().collect();
    if let Some(model) = &chosen
        && !names.contains(&model.provider_id)
    {
        names.push(model.provider_id.clone());
    }
    let client = reqwest::Client::builder().timeout(REACH_TIMEOUT).build();
    let mut ready = chosen.is_some();
    for name in names {
        let used = chosen.as_ref().is_some_and(|m| m.provider_id == name);
        let Some(settings) = models.provider_endpoint(&name) else {
            checks.push(Check::bad(
                format!("provider {name}"),
                "unknown provider",
                format!("add [provider.{name}] with api, base_url and api_key_env to your config"),
            ));
            ready &= !used;
            continue;
        };
        if let Some(variable) = &settings.api_key_env {
            if std::env::var(variable).is_ok_and(|v| !v.is_empty()) {
                checks.push(Check::ok(format!("provider {name}"), format!("key found in ${variable}")));
            } else {
                checks.push(Check::bad(
                    format!("provider {name}"),
                    format!("${variable} is not set"),
                    format!("export {variable}=… (or set api_key_env in [provider.{name}])"),
                ));
                ready &= !used;
            }
        }
        let Some(base_url) = settings.base_url else { continue };
        let reached = match &client {
            Ok(client) => reachable(client, &base_url).await,
            Err(e) => Err(e.to_string()),
        };
        let local = codeloop_core::local_models::LOCAL_PRESETS.contains(&name.as_str())
            || crate::models::is_loopback(&base_url);
        match reached {
            Ok(_) if local => {
                // A local server: which models it has (what `--model {name}/ID` can name).
                let preset = codeloop_core::local_models::LOCAL_PRESETS
                    .contains(&name.as_str())
                    .then_some(name.as_str());
                match codeloop_core::local_models::served_models(&base_url, preset).await {
                    Ok(models) if !models.is_empty() => {
                        let ids: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
                        checks.push(Check::ok(
                            format!("provider {name}"),
                            format!("{base_url} answers; {} model(s): {}", ids.len(), ids.join(", ")),
                        ));
                    }
                    Ok(_) => checks.push(Check::bad(
                        format!("provider {name}"),
                        format!("{base_url} answers but has no models"),
                        "load or pull a model in the server",
                    )),
                    Err(why) => checks.push(Check::ok(
                        format!("provider {name}"),
                        format!("{base_url} answers (its model list: {why})"),
                    )),
                }
            }
            Ok(status) => checks
                .push(Check::ok(format!("provider {name}"), format!("{base_url} answers (HTTP {status})"))),
            Err(error) => {
                checks.push(Check::bad(
                    format!("provider {name}"),
                    format!("{base_url} is unreachable: {error}"),
                    format!("check the network, or base_url in [provider.{name}]"),
                ));
                ready &= !used;
            }
        }
    }
    ready
}

/// Any HTTP answer to `GET {base_url}/models` counts: no tokens are spent and no key is sent.
async fn reachable(client: &reqwest::Client, base_url: &str) -> Result<u16, String> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    match client.get(&url).send().await {
        Ok(response) => Ok(response.status().as_u16()),
        Err(e) if e.is_timeout() => Err(format!("no answer within {} s", REACH_TIMEOUT.as_secs())),
        Err(e) if e.is_connect() => Err("connection refused or host not found".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn data_dir_check(checks: &mut Vec<Check>, storage: &codeloop_core::config::StorageConfig) {
    use std::os::unix::fs::PermissionsExt;
    let dir = match env::data_dir() {
        Ok(dir) => dir,
        Err(e) => {
            checks.push(Check::bad("data dir", e.to_string(), "set CODELOOP_DATA_DIR"));
            return;
        }
    };
    let Ok(meta) = std::fs::metadata(&dir) else {
        checks.push(Check::ok("data dir", format!("{} (created on the first run)", dir.display())));
        return;
    };
    let mode = meta.permissions().mode() & 0o777;
    let size = dir_size(&dir);
    let detail = format!("{} ({:.1} MB, mode {mode:o})", dir.display(), size as f64 / 1e6);
    if mode & 0o077 != 0 {
        checks.push(Check::bad(
            "data dir",
            detail,
            format!("others can read your sessions: chmod 700 {}", dir.display()),
        ));
    } else {
        checks.push(Check::ok("data dir", detail));
    }
    storage_check(checks, storage, size);
}

/// The data dir against `[storage]`'s bounds: over them, `codeloop gc` is the fix.
fn storage_check(checks: &mut Vec<Check>, storage: &codeloop_core::config::StorageConfig, size: u64) {
    let age = storage.max_age_days.map_or("no age limit".to_owned(), |d| format!("sessions kept {d} days"));
    match storage.max_bytes {
        Some(max) if size > max => checks.push(Check::bad(
            "storage",
            format!("{:.1} MB, over max_bytes {:.1} MB; {age}", size as f64 / 1e6, max as f64 / 1e6),
            "run `codeloop gc` (it removes the oldest sessions first, never a running one)",
        )),
        Some(max) => checks.push(Check::ok(
            "storage",
            format!("{:.1} of max_bytes {:.1} MB; {age}", size as f64 / 1e6, max as f64 / 1e6),
        )),
        None => checks.push(Check::ok(
            "storage",
            format!("no size limit ([storage] max_bytes); {age}; `codeloop gc` removes what they allow"),
        )),
    }
}

/// Which store every command uses, and for PostgreSQL whether it lets us in (no changes).
async fn store_check(checks: &mut Vec<Check>, loaded: &LoadedConfig) {
    let env_url = std::env::var(codeloop_core::DATABASE_URL_ENV).ok().filter(|u| !u.trim().is_empty());
    let (url, from) = match (env_url, &loaded.config.store.url) {
        (Some(url), _) => (url, format!("${}", codeloop_core::DATABASE_URL_ENV)),
        (None, Some(url)) => (url.clone(), "[store] url".to_string()),
        (None, None) => {
            checks.push(Check::ok("store", "SQLite in the data dir"));
            return;
        }
    };
    let Ok(parsed) = reqwest::Url::parse(&url) else {
        checks.push(Check::bad(
            "store",
            format!("{from} is not a URL"),
            "use postgres://user:password@host:5432/db",
        ));
        return;
    };
    let mut shown = parsed.clone();
    if shown.password().is_some() {
        let _ = shown.set_password(Some("***"));
    }
    // Logs in as a run would (TLS per `sslmode` included) and reads the version: nothing is changed.
    match tokio::time::timeout(REACH_TIMEOUT, codeloop_store::PgStore::probe(&url)).await {
        Ok(Ok(version)) => {
            checks.push(Check::ok("store", format!("PostgreSQL {version} at {shown} (from {from}) answers")))
        }
        Ok(Err(error)) => checks.push(Check::bad(
            "store",
            format!("PostgreSQL at {shown} (from {from}): {error}"),
            "start the database or fix the URL (host, user, password, database, sslmode)",
        )),
        Err(_) => checks.push(Check::bad(
            "store",
            format!(
                "PostgreSQL at {shown} (from {from}) does not answer within {} s",
                REACH_TIMEOUT.as_secs()
            ),
            "start the database or fix the URL",
        )),
    }
}

/// Directories shown by name when some are missing.
const MISSING_SHOWN: usize = 5;

/// Whether this machine sees the directories of the store's sessions: a worker runs a session only
/// where its directory exists (another worker that sees it takes the run), so a missing mount here
/// means this worker leaves those sessions to others.
async fn session_dirs_check(checks: &mut Vec<Check>, loaded: &LoadedConfig) {
    let opened = env::open_engine(loaded.config.clone(), codeloop_core::permission::AskPolicy::Deny);
    let Ok(engine) = opened else { return };
    let filter = codeloop_types::SessionFilter { include_children: false, ..Default::default() };
    let sessions = match engine.sessions(filter).await {
        Ok(sessions) => sessions,
        Err(error) => {
            checks.push(Check::bad(
                "session directories",
                format!("cannot list sessions: {error}"),
                "see the store line above",
            ));
            return;
        }
    };
    let mut dirs: Vec<&str> = sessions.iter().map(|s| s.directory.as_str()).collect();
    dirs.sort_unstable();
    dirs.dedup();
    let missing: Vec<&str> = dirs.iter().copied().filter(|d| !Path::new(d).is_dir()).collect();
    if missing.is_empty() {
        checks.push(Check::ok(
            "session directories",
            format!("all {} directories of the store's sessions are here", dirs.len()),
        ));
        return;
    }
    let mut shown = missing.iter().take(MISSING_SHOWN).copied().collect::<Vec<_>>().join(", ");
    if missing.len() > MISSING_SHOWN {
        shown.push_str(&format!(" and {} more", missing.len() - MISSING_SHOWN));
    }
    checks.push(Check::bad(
        "session directories",
        format!("{} of {} directories of the store's sessions are not here: {shown}", missing.len(), dirs.len()),
        "this worker leaves their runs to a worker that sees them; mount them at the same paths to run them here",
    ));
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => dir_size(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

fn sandbox_check(checks: &mut Vec<Check>, loaded: &LoadedConfig) {
    let support = codeloop_sandbox::probe();
    let mode = loaded.config.sandbox.mode;
    let network = if loaded.config.sandbox.network { "network open" } else { "network closed" };
    match support.landlock_abi {
        Some(abi) => checks.push(Check::ok(
            "sandbox",
            format!("{mode}, {network} (Landlock ABI {abi}; `codeloop sandbox check` tests it)"),
        )),
        None if mode == codeloop_sandbox::SandboxMode::Off => {
            checks.push(Check::ok("sandbox", "off ([sandbox] mode = \"off\")"))
        }
        None => checks.push(Check::bad(
            "sandbox",
            format!(
                "{mode} asked for, but this system has no Landlock: commands run under permission rules only"
            ),
            "use Linux 5.13 or newer for OS walls",
        )),
    }
}

fn git_check(checks: &mut Vec<Check>) {
    match std::process::Command::new("git").arg("--version").output() {
        Ok(out) if out.status.success() => {
            checks.push(Check::ok("git", String::from_utf8_lossy(&out.stdout).trim().to_string()))
        }
        _ => checks.push(Check::bad("git", "not found", "install git for snapshots and undo")),
    }
}

fn mcp_checks(checks: &mut Vec<Check>, loaded: &LoadedConfig) {
    for (name, server) in &loaded.config.mcp {
        match server.transport(name) {
            Err(why) => {
                checks.push(Check::bad(format!("mcp {name}"), why, format!("fix [mcp.{name}]")));
                continue;
            }
            // Not contacted here: `codeloop mcp list` starts every server and says how each one is.
            Ok(codeloop_core::mcp::TransportKind::Http | codeloop_core::mcp::TransportKind::Sse) => {
                let url = server.url.clone().unwrap_or_default();
                checks.push(Check::ok(
                    format!("mcp {name}"),
                    format!("remote `{url}` (`codeloop mcp list` checks it)"),
                ));
                continue;
            }
            Ok(codeloop_core::mcp::TransportKind::Stdio) => {}
        }
        let Some(program) = server.command.first() else { continue };
        if find_program(program).is_some() {
            checks.push(Check::ok(format!("mcp {name}"), format!("`{}`", server.command.join(" "))));
        } else {
            checks.push(Check::bad(
                format!("mcp {name}"),
                format!("`{program}` is not on PATH"),
                format!("install it, or fix command in [mcp.{name}]"),
            ));
        }
    }
}

/// Which language servers a run would use (DESIGN.md §5n): found, missing or switched off. Nothing is
/// started here; `codeloop lsp status` starts them.
fn lsp_checks(checks: &mut Vec<Check>, loaded: &LoadedConfig) {
    let config = &loaded.config.lsp;
    if !config.enabled() {
        checks.push(Check::ok("language servers", "off ([lsp] enabled = false)"));
        return;
    }
    let path = std::env::var("PATH").ok();
    let (active, inactive) = codeloop_core::lsp::resolve(config, path.as_deref());
    for server in &active {
        let name = format!("lsp {}", server.spec.name);
        match &server.program {
            Some(program) => checks.push(Check::ok(
                name,
                format!("{} for .{}", program.display(), server.spec.extensions.join(" .")),
            )),
            None => checks.push(Check::bad(
                name,
                format!("`{}` is not on PATH", server.spec.command.first().cloned().unwrap_or_default()),
                format!("install it, or fix command in [lsp.{}]", server.spec.name),
            )),
        }
    }
    let missing: Vec<&str> =
        inactive.iter().filter(|c| c.preset && c.program.is_none()).map(|c| c.spec.name.as_str()).collect();
    let detail = match (active.is_empty(), missing.is_empty()) {
        (true, _) => format!("none found; presets looked for: {}", missing.join(", ")),
        (false, true) => format!("{} in use", active.len()),
        (false, false) => format!("{} in use; not found: {}", active.len(), missing.join(", ")),
    };
    checks.push(Check::ok("language servers", detail));
}

fn find_program(program: &str) -> Option<PathBuf> {
    let path = Path::new(program);
    if program.contains('/') {
        return path.is_file().then(|| path.to_owned());
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs).map(|d| d.join(program)).find(|p| p.is_file())
}
