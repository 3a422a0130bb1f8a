//! The program's edge: environment variables, default paths, config loading and engine construction.
//! Library crates never read the environment; this module passes what they need in.

use std::path::{Path, PathBuf};

use anyhow::Context;
use codeloop_core::config::{Config, ConfigSources};
use codeloop_core::instructions::ProjectInfo;
use codeloop_core::permission::AskPolicy;
use codeloop_core::trust::TrustStore;
use codeloop_core::{Engine, EngineOptions, EventIds, StoreChoice};

pub fn init_tracing() {
    let asked = std::env::var("CODELOOP_LOG").ok().filter(|v| !v.trim().is_empty());
    // rmcp logs a server that went away as an error of its own (codeloop says it once, in its words),
    // and its OAuth code logs codes and token responses at debug: never shown, whatever is asked.
    let directives = match asked {
        Some(asked) if asked.contains("rmcp") => format!("{asked},rmcp::transport::auth=off"),
        Some(asked) => format!("{asked},rmcp=off"),
        None => "warn,rmcp=off".to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp=off"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| EscapedStderr)
        .with_target(false)
        .without_time()
        .with_ansi(false)
        .try_init();
}

/// Log lines carry outside text (a server's error, a hook's or a job's words): their control characters
/// are escaped before they reach a terminal or a log file (DESIGN.md §5j), which is why logs have no
/// colour.
struct EscapedStderr;

impl std::io::Write for EscapedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(codeloop_types::escape_controls(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn home() -> Option<PathBuf> {
    std::env::home_dir()
}

/// `$CODELOOP_DATA_DIR`, else `$XDG_DATA_HOME/codeloop`, else `~/.local/share/codeloop`.
pub fn data_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("CODELOOP_DATA_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("codeloop"));
    }
    let home = home().context("cannot find the home directory: set CODELOOP_DATA_DIR")?;
    Ok(home.join(".local/share/codeloop"))
}

/// `$XDG_CONFIG_HOME/codeloop`, else `~/.config/codeloop`.
pub fn config_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("codeloop"));
    }
    home().map(|h| h.join(".config/codeloop"))
}

/// The user's trust records (`trusted.toml` in the config dir).
pub fn trust_store() -> Option<TrustStore> {
    config_dir().map(|dir| TrustStore::in_config_dir(&dir))
}

/// Where config comes from for a project directory (`None`: the user's files only).
pub fn config_sources(project: Option<&Path>) -> ConfigSources {
    let info = project.map(ProjectInfo::discover);
    ConfigSources {
        global: config_dir().map(|d| d.join("config.toml")),
        project_dir: project.map(Path::to_owned),
        project_root: info.map(|i| i.root),
        explicit: std::env::var_os("CODELOOP_CONFIG").filter(|c| !c.is_empty()).map(PathBuf::from),
        trust: trust_store(),
        home: home(),
        env: Some(codeloop_core::config::ConfigEnv(std::sync::Arc::new(|name| std::env::var(name).ok()))),
    }
}

/// Loads config for a project directory; prints warnings (unknown keys, an untrusted project's ignored
/// keys) to stderr.
pub fn load_config(project: Option<&Path>) -> anyhow::Result<Config> {
    let loaded = config_sources(project).load()?;
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(loaded.config)
}

/// One warning per run when the config asks for walls this machine cannot put up.
fn warn_without_landlock(config: &Config) {
    if config.sandbox.mode != codeloop_sandbox::SandboxMode::Off && !codeloop_sandbox::probe().landlock() {
        eprintln!(
            "warning: this system has no Landlock, so commands run without OS walls (permission rules only); \
             `codeloop sandbox check` shows what is enforced"
        );
    }
}

/// OpenTelemetry settings from `[telemetry]` and the standard `OTEL_*` variables (DESIGN.md §5h);
/// `None`: nothing is exported (no endpoint anywhere, or `OTEL_SDK_DISABLED=true`).
pub fn telemetry_settings(
    config: &codeloop_core::config::TelemetryConfig,
) -> Option<codeloop_telemetry::Settings> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return None;
    }
    // The config's base URL, else the standard variables (a signal's own URL as given, the base one with
    // `/v1/<signal>` appended).
    let configured = config.otlp_endpoint.clone().filter(|e| !e.trim().is_empty());
    let base = configured.clone().or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let signal = |own: &str, signal: &str| match (&configured, var(own)) {
        (None, Some(url)) => Some(url),
        _ => base.as_deref().map(|b| codeloop_telemetry::signal_url(b, signal)),
    };
    let traces_url = signal("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "traces")?;
    let metrics_url = signal("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "metrics")
        .unwrap_or_else(|| traces_url.replace("/v1/traces", "/v1/metrics"));
    let timeout_ms =
        var("OTEL_EXPORTER_OTLP_TIMEOUT").and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(10_000);
    Some(codeloop_telemetry::Settings {
        traces_url,
        metrics_url,
        export_timeout: std::time::Duration::from_millis(timeout_ms),
        service_name: config
            .service_name
            .clone()
            .or_else(|| var("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "codeloop".to_owned()),
        instance_id: codeloop_telemetry::new_instance_id(),
        log_content: config.log_content,
        // Short batches unless the standard variables say otherwise: a run's spans reach the collector
        // about a second after they end, a server's metrics every ten seconds.
        batch_delay: var("OTEL_BSP_SCHEDULE_DELAY").is_none().then_some(std::time::Duration::from_secs(1)),
        metric_interval: var("OTEL_METRIC_EXPORT_INTERVAL")
            .is_none()
            .then_some(std::time::Duration::from_secs(10)),
    })
}

/// Starts exporting `engine`'s runs when its config or the environment names a collector. A collector
/// that cannot be set up is a warning: the run goes on without telemetry.
pub fn start_telemetry(engine: &Engine) -> Option<codeloop_telemetry::Telemetry> {
    let settings = telemetry_settings(&engine.config().telemetry)?;
    Some(codeloop_telemetry::Telemetry::start(engine.bus(), &settings))
}

/// Sends what telemetry has left (bounded: a dead collector holds nothing up).
pub async fn finish_telemetry(telemetry: Option<codeloop_telemetry::Telemetry>) {
    if let Some(telemetry) = telemetry {
        telemetry.finish().await;
    }
}

/// Who watches the engine's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watchers {
    /// This process, subscribed before anything runs: nothing to replay, so no replay buffer.
    InProcess,
    /// Clients that connect and reconnect (the HTTP server): `Last-Event-ID` replays what they missed.
    Remote,
}

/// Opens the engine on the store of every command: `CODELOOP_DATABASE_URL`, else `[store] url`, else
/// SQLite in the data directory; its events are watched in this process.
pub fn open_engine(config: Config, ask_policy: AskPolicy) -> anyhow::Result<Engine> {
    open_engine_on(config, ask_policy, StoreChoice::FromConfig, EventIds::Local, Watchers::InProcess)
}

/// Opens the engine on `store` (`serve --store` passes its URL, which wins over the rest), with event
/// ids from `events` (`serve` takes them from a shared store, so every worker streams every event).
pub fn open_engine_on(
    config: Config,
    ask_policy: AskPolicy,
    store: StoreChoice,
    events: EventIds,
    watchers: Watchers,
) -> anyhow::Result<Engine> {
    let data_dir = data_dir()?;
    warn_without_landlock(&config);
    let mut options = EngineOptions::new(&data_dir, config);
    options.store = store;
    options.events = events;
    options.ask_policy = ask_policy;
    match watchers {
        // A 20 000-delta answer kept 10 000 events alive for replays no one would ask for.
        Watchers::InProcess => options.bus_replay_capacity = 0,
        // A server serves sessions of many projects: each gets its own project's rules and instructions,
        // under that project's trust (DESIGN.md §5a).
        Watchers::Remote => {
            options.project_config = Some(std::sync::Arc::new(|dir: &Path| config_sources(Some(dir)).load()))
        }
    }
    options.home = home();
    options.protected_dirs = config_dir().into_iter().collect();
    options.protected_paths = protected_paths();
    options.sandbox_helper = std::env::current_exe().ok();
    options.global_instructions = config_dir().map(|d| d.join("AGENTS.md"));
    options.command_dirs = Some(command_dirs());
    options.project_trust = Some(std::sync::Arc::new(project_trusted));
    Engine::open(options)
        .with_context(|| format!("cannot open codeloop's store (data directory {})", data_dir.display()))
}

/// Files and folders outside any project that codeloop, Claude Code, OpenCode or Codex take programs or
/// rules from (DESIGN.md §5j): a tool writes them only with an explicit grant, whatever `"*"`,
/// `--on-ask allow` or an "always" answer say. The config and data dirs are protected (and hidden) apart.
pub fn protected_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(explicit) = std::env::var_os("CODELOOP_CONFIG").filter(|c| !c.is_empty()).map(PathBuf::from) {
        let explicit = std::path::absolute(&explicit).unwrap_or(explicit);
        if let Some(folder) = explicit.parent() {
            out.push(folder.join("commands"));
        }
        out.push(explicit);
    }
    out.extend(command_dirs());
    out.extend(codeloop_tools::SkillTool::default_dirs().into_iter().filter(|d| d.is_absolute()));
    if let Some(home) = home() {
        let claude = home.join(".claude");
        for name in ["settings.json", "settings.local.json", "commands", "skills", "agents", "plugins"] {
            out.push(claude.join(name));
        }
        out.push(home.join(".claude.json"));
        out.push(home.join(".codex"));
        out.push(home.join(".config").join("opencode"));
    }
    let xdg_config = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()).map(PathBuf::from);
    out.extend(xdg_config.map(|config| config.join("opencode")));
    out.extend(std::env::var_os("CODEX_HOME").filter(|d| !d.is_empty()).map(PathBuf::from));
    out.sort();
    out.dedup();
    out
}

/// The user's command folders (DESIGN.md §5g), highest precedence first: codeloop's config dir, the
/// folder of the file `CODELOOP_CONFIG` names, then Claude's and OpenCode's.
pub fn command_dirs() -> Vec<PathBuf> {
    let mut dirs = codeloop_core::file_commands::load::user_dirs(config_dir().as_deref(), home().as_deref());
    let explicit = std::env::var_os("CODELOOP_CONFIG").filter(|c| !c.is_empty()).map(PathBuf::from);
    if let Some(folder) = explicit.as_deref().and_then(Path::parent).map(|p| p.join("commands"))
        && !dirs.contains(&folder)
    {
        dirs.insert(1, folder);
    }
    dirs
}

/// Whether the user trusts the project of `dir` (`codeloop trust`): only then do its commands' shell
/// parts run. A project with no config of its own is trusted under the empty config's hash.
fn project_trusted(dir: &Path) -> bool {
    let sources = config_sources(Some(dir));
    let Some(store) = &sources.trust else { return false };
    match sources.project() {
        Ok(Some(project)) => project.trusted(),
        Ok(None) => {
            let root = sources.project_root.clone().unwrap_or_else(|| dir.to_owned());
            let hash = codeloop_core::trust::empty_config_hash();
            matches!(store.state(&root, &hash), Ok(codeloop_core::trust::TrustState::Trusted))
        }
        Err(_) => false,
    }
}

/// The store every command uses, opened without an engine (to look a session up before its project's
/// config is known): `CODELOOP_DATABASE_URL`, else the user's `[store] url`, else SQLite in the data dir.
pub fn open_store() -> anyhow::Result<std::sync::Arc<dyn codeloop_store::Store>> {
    let data_dir = data_dir()?;
    let config = config_sources(None).load()?.config;
    let env: codeloop_core::models::EnvLookup = std::sync::Arc::new(|name| std::env::var(name).ok());
    codeloop_core::open_store(&StoreChoice::FromConfig, &data_dir, &env, &config)
        .with_context(|| format!("cannot open codeloop's store (data directory {})", data_dir.display()))
}
