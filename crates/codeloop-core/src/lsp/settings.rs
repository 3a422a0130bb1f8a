//! `[lsp]` of the config (DESIGN.md §5n): `enabled`, the waits, what is shown, and `[lsp.NAME]` servers
//! (a preset's name changes or switches off that preset).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// How long an edit's result waits for a running server's diagnostics.
pub const DEFAULT_WAIT_MS: u64 = 2_000;
/// The first wait after a server started: it covers its indexing (typescript-language-server takes
/// ~6 s cold on two cores).
pub const DEFAULT_START_WAIT_MS: u64 = 10_000;
/// How long a server may take to answer `initialize`.
pub const DEFAULT_START_TIMEOUT_MS: u64 = 30_000;
/// Diagnostics shown per file before "and K more".
pub const DEFAULT_MAX_PER_FILE: usize = 10;
/// A server no session used for this long is shut down.
pub const DEFAULT_IDLE_TIMEOUT_S: u64 = 600;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LspConfig {
    /// `false` turns every server off.
    pub enabled: Option<bool>,
    pub wait_ms: Option<u64>,
    pub start_wait_ms: Option<u64>,
    pub start_timeout_ms: Option<u64>,
    /// Warnings are shown too (errors always are).
    pub warnings: Option<bool>,
    pub max_per_file: Option<usize>,
    pub idle_timeout_s: Option<u64>,
    pub servers: BTreeMap<String, LspServerSettings>,
}

impl LspConfig {
    pub fn enabled(&self) -> bool {
        self.enabled != Some(false)
    }
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.unwrap_or(DEFAULT_WAIT_MS))
    }
    pub fn start_wait(&self) -> Duration {
        Duration::from_millis(self.start_wait_ms.unwrap_or(DEFAULT_START_WAIT_MS))
    }
    pub fn start_timeout(&self) -> Duration {
        Duration::from_millis(self.start_timeout_ms.unwrap_or(DEFAULT_START_TIMEOUT_MS))
    }
    pub fn max_per_file(&self) -> usize {
        self.max_per_file.unwrap_or(DEFAULT_MAX_PER_FILE).max(1)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_s.unwrap_or(DEFAULT_IDLE_TIMEOUT_S))
    }
}

/// `[lsp.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LspServerSettings {
    /// The program and its arguments; empty for a preset keeps the preset's.
    pub command: Vec<String>,
    /// Extensions served (`"py"` or `".py"`); empty for a preset keeps the preset's.
    pub extensions: Vec<String>,
    pub root_markers: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// `initializationOptions`, and what `workspace/configuration` is answered from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initialization: Option<serde_json::Value>,
    pub enabled: bool,
}

impl Default for LspServerSettings {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            extensions: Vec::new(),
            root_markers: Vec::new(),
            env: BTreeMap::new(),
            initialization: None,
            enabled: true,
        }
    }
}

const KEYS: [&str; 7] =
    ["enabled", "wait_ms", "start_wait_ms", "start_timeout_ms", "warnings", "max_per_file", "idle_timeout_s"];

impl Serialize for LspConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        let numbers = [
            ("wait_ms", self.wait_ms),
            ("start_wait_ms", self.start_wait_ms),
            ("start_timeout_ms", self.start_timeout_ms),
            ("max_per_file", self.max_per_file.map(|n| n as u64)),
            ("idle_timeout_s", self.idle_timeout_s),
        ];
        if let Some(enabled) = self.enabled {
            map.serialize_entry("enabled", &enabled)?;
        }
        if let Some(warnings) = self.warnings {
            map.serialize_entry("warnings", &warnings)?;
        }
        for (key, value) in numbers {
            if let Some(value) = value {
                map.serialize_entry(key, &value)?;
            }
        }
        for (name, server) in &self.servers {
            map.serialize_entry(name, server)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for LspConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = LspConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "[lsp.NAME] server tables and {}", KEYS.join(", "))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<LspConfig, A::Error> {
                let mut config = LspConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "enabled" => config.enabled = Some(map.next_value()?),
                        "warnings" => config.warnings = Some(map.next_value()?),
                        "wait_ms" => config.wait_ms = Some(map.next_value()?),
                        "start_wait_ms" => config.start_wait_ms = Some(map.next_value()?),
                        "start_timeout_ms" => config.start_timeout_ms = Some(map.next_value()?),
                        "max_per_file" => config.max_per_file = Some(map.next_value()?),
                        "idle_timeout_s" => config.idle_timeout_s = Some(map.next_value()?),
                        _ => {
                            let server = map.next_value()?;
                            config.servers.insert(key, server);
                        }
                    }
                }
                Ok(config)
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_and_settings_share_the_table() {
        let config: LspConfig = toml::from_str(
            "enabled = true\nwait_ms = 500\n[pylsp]\nenabled = false\n[mine]\ncommand = [\"my-ls\"]\nextensions = [\"foo\"]\ninitialization = { a = { b = 1 } }\n",
        )
        .unwrap();
        assert_eq!(config.wait(), Duration::from_millis(500));
        assert!(!config.servers["pylsp"].enabled);
        assert_eq!(config.servers["mine"].initialization, Some(serde_json::json!({"a": {"b": 1}})));
        let back: LspConfig = toml::from_str(&toml::to_string(&config).unwrap()).unwrap();
        assert_eq!(back, config);
        assert!(toml::from_str::<LspConfig>("[x]\ncomand = []\n").is_err());
    }
}
