//! Configuration (DESIGN.md §5): TOML files merged in order — global `~/.config/codeloop/config.toml`,
//! then the project's `codeloop.toml` and `.codeloop/config.toml`, then the file named by
//! `CODELOOP_CONFIG`. Later files win; tables merge key by key.
//!
//! Owns: the config schema, its defaults, merging, and clear errors (file and key) for invalid input.
//! Unknown keys are reported as warnings, not errors, so a newer config still loads.
//! Must not: read environment variables itself; the caller passes the paths in ([`ConfigSources`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
    /// Extra instruction files (paths relative to the project, or absolute).
    pub instructions: Vec<String>,
    /// Whether to take file snapshots of the project at each step (git projects; default on).
    pub snapshot: Option<bool>,
    /// A rejected permission is fed back to the model as the tool's error instead of stopping the run.
    pub continue_on_reject: bool,
    /// MCP servers whose tools are offered to the model: `[mcp.NAME] command = ["program", "arg"]`.
    pub mcp: BTreeMap<String, crate::mcp::McpSettings>,
}

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
    pub models: BTreeMap<String, ModelSettings>,
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
            models: BTreeMap::new(),
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
    pub temperature: Option<f32>,
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
    pub permission: PermissionConfig,
    pub disable: bool,
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

fn expand_home(pattern: &str) -> String {
    // Expansion happens with the HOME the process was started with; patterns stay literal otherwise.
    match (pattern.strip_prefix("~/"), std::env::home_dir()) {
        (Some(rest), Some(home)) => format!("{}/{rest}", home.display()),
        _ => pattern.to_owned(),
    }
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryConfig {
    /// Attempts per provider call, the first included.
    pub max_attempts: u32,
    /// Total waiting allowed across retries of one call, in seconds.
    pub max_wait_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self { max_attempts: 8, max_wait_secs: 600 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolOutputConfig {
    pub max_lines: usize,
    pub max_bytes: usize,
}

impl Default for ToolOutputConfig {
    fn default() -> Self {
        Self { max_lines: 2000, max_bytes: 50 * 1024 }
    }
}

/// Where to look for config files.
#[derive(Debug, Clone, Default)]
pub struct ConfigSources {
    /// `~/.config/codeloop/config.toml` (or under `$XDG_CONFIG_HOME`).
    pub global: Option<PathBuf>,
    /// The project directory; `codeloop.toml` and `.codeloop/config.toml` are read from it and its
    /// ancestors up to `root`.
    pub project_dir: Option<PathBuf>,
    pub project_root: Option<PathBuf>,
    /// `CODELOOP_CONFIG`: must exist when given.
    pub explicit: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config in {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// A loaded config with the files it came from and any warnings (unknown keys).
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    pub config: Config,
    pub files: Vec<PathBuf>,
    pub warnings: Vec<String>,
}

impl ConfigSources {
    /// Config files in merge order (lowest priority first) that exist.
    pub fn files(&self) -> Result<Vec<PathBuf>, ConfigError> {
        let mut files = Vec::new();
        if let Some(global) = &self.global
            && global.is_file()
        {
            files.push(global.clone());
        }
        if let Some(dir) = &self.project_dir {
            let mut dirs: Vec<&Path> = Vec::new();
            for ancestor in dir.ancestors() {
                dirs.push(ancestor);
                if Some(ancestor) == self.project_root.as_deref() {
                    break;
                }
            }
            if self.project_root.is_none() {
                dirs.truncate(1);
            }
            // Outermost first, so the innermost project file wins.
            for dir in dirs.into_iter().rev() {
                for candidate in [dir.join("codeloop.toml"), dir.join(".codeloop").join("config.toml")] {
                    if candidate.is_file() && !files.contains(&candidate) {
                        files.push(candidate);
                    }
                }
            }
        }
        if let Some(explicit) = &self.explicit {
            if !explicit.is_file() {
                return Err(ConfigError::Read {
                    path: explicit.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "file named by CODELOOP_CONFIG does not exist",
                    ),
                });
            }
            files.push(explicit.clone());
        }
        Ok(files)
    }

    pub fn load(&self) -> Result<LoadedConfig, ConfigError> {
        let files = self.files()?;
        let mut merged = toml::Table::new();
        let mut warnings = Vec::new();
        for path in &files {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.clone(), source })?;
            let table = parse_file(path, &text, &mut warnings)?;
            merge(&mut merged, table);
        }
        let config = Config::deserialize(toml::Value::Table(merged)).map_err(|e| ConfigError::Invalid {
            path: files.last().cloned().unwrap_or_default(),
            message: e.to_string(),
        })?;
        Ok(LoadedConfig { config, files, warnings })
    }
}

/// Parses and validates one file on its own, so an error names the file that has it.
fn parse_file(path: &Path, text: &str, warnings: &mut Vec<String>) -> Result<toml::Table, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid { path: path.to_owned(), message };
    let table: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let deserializer = toml::Value::Table(table.clone());
    let mut unknown = Vec::new();
    let _: Config = serde_ignored::deserialize(deserializer, |key| unknown.push(key.to_string()))
        .map_err(|e| invalid(e.to_string()))?;
    for key in unknown {
        warnings.push(format!("{}: unknown config key `{key}` (ignored)", path.display()));
    }
    Ok(table)
}

fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(incoming)) => merge(existing, incoming),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

impl Config {
    pub fn from_toml(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_keys() {
        let config = Config::from_toml(
            r#"
            model = "local/qwen"
            [provider.local]
            api = "openai-chat"
            base_url = "http://127.0.0.1:8080/v1"
            api_key_env = "LOCAL_KEY"
            [provider.local.models.qwen]
            context = 32000
            output = 4096
            cost = { input = 1.0, output = 2.0 }
            [compaction]
            auto = false
            tail_turns = 3
            [permission]
            bash = { "*" = "ask", "git status *" = "allow" }
            edit = "deny"
            "#,
        )
        .unwrap();
        assert_eq!(config.model.as_deref(), Some("local/qwen"));
        let local = &config.provider["local"];
        assert_eq!(local.api, WireApi::OpenAiChat);
        assert_eq!(local.models["qwen"].context, Some(32000));
        assert_eq!(local.models["qwen"].cost.unwrap().output, 2.0);
        assert!(!config.compaction.auto);
        assert!(config.compaction.prune);
        assert_eq!(config.compaction.tail_turns, 3);
        assert_eq!(
            config.permission.0,
            vec![
                PermissionRule::new("bash", "*", PermissionAction::Ask),
                PermissionRule::new("bash", "git status *", PermissionAction::Allow),
                PermissionRule::new("edit", "*", PermissionAction::Deny),
            ]
        );
    }

    #[test]
    fn later_files_win_and_unknown_keys_warn() {
        let dir = tempfile::tempdir().unwrap();
        let global = dir.path().join("global.toml");
        std::fs::write(&global, "model = \"a/b\"\nflavour = 1\n[compaction]\ntail_turns = 5\n").unwrap();
        let project = dir.path().join("project");
        std::fs::create_dir_all(project.join(".codeloop")).unwrap();
        std::fs::write(project.join("codeloop.toml"), "model = \"c/d\"\n").unwrap();
        std::fs::write(project.join(".codeloop/config.toml"), "[compaction]\nauto = false\n").unwrap();
        let sources = ConfigSources {
            global: Some(global),
            project_dir: Some(project.clone()),
            project_root: Some(project),
            explicit: None,
        };
        let loaded = sources.load().unwrap();
        assert_eq!(loaded.config.model.as_deref(), Some("c/d"));
        assert_eq!(loaded.config.compaction.tail_turns, 5);
        assert!(!loaded.config.compaction.auto);
        assert_eq!(loaded.files.len(), 3);
        assert_eq!(loaded.warnings.len(), 1);
        assert!(loaded.warnings[0].contains("flavour"), "{:?}", loaded.warnings);
    }

    #[test]
    fn invalid_values_name_the_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bad.toml");
        std::fs::write(&file, "[compaction]\nauto = \"maybe\"\n").unwrap();
        let err = ConfigSources { explicit: Some(file.clone()), ..Default::default() }.load().unwrap_err();
        let text = err.to_string();
        assert!(text.contains("bad.toml") && text.contains("auto"), "{text}");
        let missing = ConfigSources { explicit: Some(dir.path().join("nope.toml")), ..Default::default() };
        assert!(missing.load().unwrap_err().to_string().contains("nope.toml"));
    }
}
