//! The config schema: every key of `config.toml`, with its default and its documentation. Plain data and
//! the parsing of permission rules; reading files and layering them is [`super::sources`]'s.

use std::collections::BTreeMap;

use codeloop_provider::WireApi;
use codeloop_types::{PermissionAction, PermissionRule};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Default model, `provider/model`.
    pub model: Option<String>,
    /// Model for summaries and titles when the compaction agent names none.
    pub small_model: Option<String>,
    pub default_agent: Option<String>,
    pub provider: BTreeMap<String, ProviderSettings>,
    pub agent: BTreeMap<String, AgentSettings>,
    /// `permission.<name> = "allow" | "ask" | "deny"` or `permission.<name> = { "<pattern>" = action }`.
    pub permission: PermissionConfig,
    pub compaction: CompactionConfig,
    pub retry: RetryConfig,
    pub tool_output: ToolOutputConfig,
    /// `[bash] max_jobs`: background jobs per session (DESIGN.md §5f).
    pub bash: crate::jobs::BashConfig,
    /// Extra instruction files (paths relative to the project, or absolute).
    pub instructions: Vec<String>,
    /// Whether to take file snapshots of the project at each step (git projects; default on).
    pub snapshot: Option<bool>,
    /// A rejected permission is fed back to the model as the tool's error instead of stopping the run.
    pub continue_on_reject: bool,
    /// MCP servers whose tools are offered to the model: `[mcp.NAME] command = ["program", "arg"]`; and
    /// `[mcp] tool_budget_bytes`, `tool_budget_tools`.
    pub mcp: crate::mcp::McpConfig,
    /// Language servers (DESIGN.md §5n): `[lsp] enabled`, the waits, and `[lsp.NAME]` servers.
    pub lsp: crate::lsp::LspConfig,
    /// OS walls for tools' child processes (DESIGN.md §5a).
    pub sandbox: SandboxConfig,
    /// Where sessions live (DESIGN.md §5b): SQLite in the data dir unless a URL names PostgreSQL.
    pub store: StoreConfig,
    /// `[storage]`: how much the data dir may keep (`codeloop gc`).
    pub storage: StorageConfig,
    /// Spending limits the run loop enforces before each model request (DESIGN.md §5h).
    pub limits: LimitsConfig,
    /// `[telemetry]`: OpenTelemetry export over OTLP/HTTP (DESIGN.md §5h); off unless an endpoint is set.
    pub telemetry: TelemetryConfig,
    /// `[[hooks.EVENT]]` (DESIGN.md §5d), as merged; the hooks that run are [`Config::hook_layers`].
    pub hooks: crate::hooks::HooksSettings,
    /// Every file's hooks with their source, in config order: the user's, a trusted project's, and with
    /// `import_claude` Claude Code's. Never read from a file directly.
    #[serde(skip)]
    pub hook_layers: Vec<crate::hooks::HookLayer>,
    /// An untrusted project's own `[permission]` rules. They can only narrow: each call gets the stricter
    /// of these and every other layer (deny > ask > allow). Never read from a file directly.
    #[serde(skip)]
    pub project_rules: Vec<PermissionRule>,
}

/// Keys an untrusted project's config may set (DESIGN.md §5a); everything else needs `codeloop trust`.
pub const PROJECT_ALLOWED_KEYS: &[&str] =
    &["model", "small_model", "default_agent", "instructions", "permission"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProviderSettings {
    pub api: WireApi,
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key.
    pub api_key_env: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Time allowed for response headers, in milliseconds.
    pub headers_timeout_ms: Option<u64>,
    /// Time a stream may stay silent between chunks, in milliseconds.
    pub idle_timeout_ms: Option<u64>,
    /// What to do with an answer that is a tool call written as text: `"off"`, `"warn"` (default),
    /// `"parse"` (for servers started without a tool-call parser). A model's own setting wins.
    pub tool_call_text: Option<codeloop_provider::ToolCallText>,
    pub models: BTreeMap<String, ModelSettings>,
    /// `api = "azure"`: the resource name (`https://{resource}.openai.azure.com`), when `base_url` is not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// `api = "azure"`: the deployment requests go to; without one, the v1 path with the model in the body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// `api = "azure"`: the `api-version` (default `2024-10-21` for a deployment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
}

impl Default for ProviderSettings {
    fn default() -> Self {
        Self {
            api: WireApi::OpenAiChat,
            base_url: None,
            api_key_env: None,
            headers: BTreeMap::new(),
            headers_timeout_ms: None,
            idle_timeout_ms: None,
            tool_call_text: None,
            models: BTreeMap::new(),
            resource: None,
            deployment: None,
            api_version: None,
        }
    }
}

/// Overrides or additions to the model catalogue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelSettings {
    /// The id to send to the API, when it differs from the key.
    pub id: Option<String>,
    pub context: Option<u64>,
    pub input: Option<u64>,
    pub output: Option<u64>,
    pub cost: Option<CostSettings>,
    pub reasoning: Option<bool>,
    pub tool_call: Option<bool>,
    /// Replaces the family's default (e.g. 0.55 for Qwen); dropped for models that take none.
    pub temperature: Option<f32>,
    /// Nucleus sampling; replaces the family's default (e.g. 1.0 for Qwen, 0.95 for Gemini).
    pub top_p: Option<f32>,
    /// The file-editing tools offered: `"patch"` (`apply_patch`) or `"edit"` (`edit` and `write`);
    /// default by family (`patch` for GPT-5 and codex models, as OpenCode does).
    pub tools: Option<codeloop_types::ToolProfile>,
    /// Overrides the provider's `tool_call_text` for this model.
    pub tool_call_text: Option<codeloop_provider::ToolCallText>,
    /// How hard the model thinks by default: `none`, `low`, `medium`, `high` or `max` (DESIGN.md §5l).
    pub effort: Option<codeloop_types::Effort>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CostSettings {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentSettings {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub description: Option<String>,
    /// Maximum provider calls per run; on the last one tools are removed.
    pub steps: Option<u32>,
    pub temperature: Option<f32>,
    /// How hard the agent's model thinks: `none`, `low`, `medium`, `high` or `max` (DESIGN.md §5l).
    pub effort: Option<codeloop_types::Effort>,
    /// `primary` (chosen by a person; the default) or `subagent` (started by the `task` tool).
    pub mode: Option<AgentModeSetting>,
    pub permission: PermissionConfig,
    pub disable: bool,
}

/// `mode` of an `[agent.NAME]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentModeSetting {
    Primary,
    Subagent,
}

/// Permission rules in config order (the last matching rule wins, so order matters).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "toml::Value", into = "toml::Value")]
pub struct PermissionConfig(pub Vec<PermissionRule>);

impl TryFrom<toml::Value> for PermissionConfig {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, Self::Error> {
        let mut rules = Vec::new();
        match value {
            toml::Value::String(action) => rules.push(PermissionRule::new("*", "*", parse_action(&action)?)),
            toml::Value::Table(table) => {
                for (permission, value) in table {
                    match value {
                        toml::Value::String(action) => {
                            rules.push(PermissionRule::new(permission.clone(), "*", parse_action(&action)?))
                        }
                        toml::Value::Table(patterns) => {
                            for (pattern, action) in patterns {
                                let action = action.as_str().ok_or_else(|| {
                                    format!("permission.{permission}.\"{pattern}\" must be \"allow\", \"ask\" or \"deny\"")
                                })?;
                                rules.push(PermissionRule::new(
                                    permission.clone(),
                                    expand_home(&pattern),
                                    parse_action(action)?,
                                ));
                            }
                        }
                        other => {
                            return Err(format!(
                                "permission.{permission} must be an action or a table of pattern = action, not {}",
                                other.type_str()
                            ));
                        }
                    }
                }
            }
            other => {
                return Err(format!("permission must be an action or a table, not {}", other.type_str()));
            }
        }
        Ok(PermissionConfig(rules))
    }
}

impl From<PermissionConfig> for toml::Value {
    fn from(config: PermissionConfig) -> Self {
        let mut table = toml::Table::new();
        for rule in config.0 {
            let entry =
                table.entry(rule.permission).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(patterns) = entry {
                patterns.insert(rule.pattern, toml::Value::String(action_name(rule.action).into()));
            }
        }
        toml::Value::Table(table)
    }
}

fn parse_action(action: &str) -> Result<PermissionAction, String> {
    match action {
        "allow" => Ok(PermissionAction::Allow),
        "ask" => Ok(PermissionAction::Ask),
        "deny" => Ok(PermissionAction::Deny),
        other => Err(format!("unknown permission action \"{other}\": use \"allow\", \"ask\" or \"deny\"")),
    }
}

pub fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Allow => "allow",
        PermissionAction::Ask => "ask",
        PermissionAction::Deny => "deny",
    }
}

/// A pattern or path from config with `~/` expanded (the same expansion the tools apply to paths).
pub(crate) fn expand_home(pattern: &str) -> String {
    codeloop_tools::expand_home(pattern).to_string_lossy().into_owned()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionConfig {
    /// Every automatic compaction path (threshold and provider overflow errors).
    pub auto: bool,
    /// Clear old tool outputs from the model's view after each run.
    pub prune: bool,
    /// User turns kept verbatim after a summary.
    pub tail_turns: usize,
    /// Token budget of the verbatim tail (default: usable × 0.25 clamped to 2 000–15 000).
    pub preserve_recent_tokens: Option<u64>,
    /// Tokens kept free for the answer (default: min(20 000, max output)).
    pub reserved: Option<u64>,
    /// Model for summaries (`provider/model`), e.g. a cheaper one.
    pub model: Option<String>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            auto: true,
            prune: true,
            tail_turns: 2,
            preserve_recent_tokens: None,
            reserved: None,
            model: None,
        }
    }
}

/// `[telemetry]`. The standard `OTEL_*` variables apply where a key is not set here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TelemetryConfig {
    /// The collector's base URL (`/v1/traces` and `/v1/metrics` are appended), as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` is. Unset, and with no such variable, nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of every span and metric (default `OTEL_SERVICE_NAME`, else `codeloop`).
    pub service_name: Option<String>,
    /// Adds prompt, completion and tool texts to spans as events. Off: no text leaves the machine.
    pub log_content: bool,
}

/// `[limits]`: none is set by default. A run that has reached one sends nothing more and stops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LimitsConfig {
    /// The session's cost over all its runs, in USD.
    pub session_max_cost_usd: Option<f64>,
    /// One run's cost, in USD (`codeloop run --max-cost` sets it for that run).
    pub run_max_cost_usd: Option<f64>,
    /// One run's tokens (every prompt token, cached included, plus output).
    pub run_max_tokens: Option<u64>,
    /// One run's wall time, in minutes.
    pub run_max_minutes: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryConfig {
    /// Attempts per provider call, the first included.
    pub max_attempts: u32,
    /// Total waiting allowed across retries of one call, in seconds.
    pub max_wait_secs: u64,
    /// The first backoff, in milliseconds; each retry doubles it, up to 30 s (a provider's
    /// `retry-after` wins).
    pub base_delay_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self { max_attempts: 8, max_wait_secs: 600, base_delay_ms: 2_000 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolOutputConfig {
    pub max_lines: usize,
    pub max_bytes: usize,
    /// The most of one call's output saved to a file (DESIGN.md §5c); past it a "cut" note.
    pub max_saved_bytes: u64,
}

impl Default for ToolOutputConfig {
    fn default() -> Self {
        Self { max_lines: 2000, max_bytes: 50 * 1024, max_saved_bytes: 64 * 1024 * 1024 }
    }
}

/// `[storage]`: bounds on the data dir, applied by `codeloop gc` (never to a running session or one
/// touched in the last day).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StorageConfig {
    /// Sessions not updated for this many days are collected by `codeloop gc`.
    pub max_age_days: Option<u64>,
    /// `codeloop gc` collects the oldest sessions while the data dir is bigger than this.
    pub max_bytes: Option<u64>,
}

/// `[store]`: `url = "postgres://…"` shares sessions between workers (`serve --store` and
/// `CODELOOP_DATABASE_URL` take precedence; TLS as the URL's libpq `sslmode` and `sslrootcert` say);
/// `lease_secs` is how long a run's lease lasts unrenewed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    pub url: Option<String>,
    /// Default 15 (`codeloop_store::DEFAULT_LEASE`).
    pub lease_secs: Option<u64>,
}

impl StoreConfig {
    pub fn lease(&self) -> std::time::Duration {
        match self.lease_secs {
            Some(secs) if secs > 0 => std::time::Duration::from_secs(secs),
            _ => codeloop_store::DEFAULT_LEASE,
        }
    }
}

/// `[sandbox]`: the walls around every process a tool starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxConfig {
    /// `"workspace-write"` (default), `"read-only"` or `"off"`.
    pub mode: codeloop_sandbox::SandboxMode,
    /// Whether commands may use the network (TCP, UDP); `webfetch` obeys it too.
    pub network: bool,
    /// Extra writable directories (`~/` expanded).
    pub writable_roots: Vec<String>,
    /// Let commands write the project's `.git` (commits, branches); otherwise it stays read-only.
    pub git_write: bool,
    /// Package caches written through to the user's own on purpose (`~/` expanded). The usual caches
    /// (`~/.cargo/registry`, `~/.npm`, …) not named here are overlays: commands read them and write to a
    /// layer of codeloop's own, per project, so nothing they put there runs in the user's later builds.
    pub cache_dirs: Option<Vec<String>>,
    /// Environment variables kept although they look secret (`*KEY*`, `*TOKEN*`, URL credentials) or
    /// lead to an agent (`SSH_AUTH_SOCK`, `DISPLAY`, …).
    pub env_keep: Vec<String>,
    /// UNIX sockets (or their directories) outside the project that commands may still reach (`~/`
    /// expanded): agents, buses, daemons and every other socket outside the writable roots are masked.
    pub allow_unix_sockets: Vec<String>,
    /// At most this many processes at once in one call's tree.
    pub max_processes: u32,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            mode: codeloop_sandbox::SandboxMode::WorkspaceWrite,
            network: true,
            writable_roots: Vec::new(),
            git_write: false,
            cache_dirs: None,
            env_keep: Vec::new(),
            allow_unix_sockets: Vec::new(),
            max_processes: codeloop_sandbox::DEFAULT_MAX_PROCESSES,
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}
