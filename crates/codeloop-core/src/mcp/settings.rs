//! `[mcp.NAME]` (DESIGN.md §5e): a local server started as a child process speaking MCP over stdio
//! (`command`), or a remote one over Streamable HTTP (`url`), with what each needs.
//!
//! Owns: the schema, its checks (one of `command` / `url`), the tool filter, the time-out, and the
//! `${ENV}` expansion of headers (the user's own config only; a trusted project's headers are sent as
//! written). Must not: contact anything.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::models::EnvLookup;

/// Bounds a server's start (connect, handshake, tool list) and each call, unless `timeout_ms` says
/// otherwise.
pub const DEFAULT_MCP_TIMEOUT: Duration = Duration::from_millis(30_000);

/// Offered MCP tool schemas beyond this many bytes go behind `tool_search` (DESIGN.md §5o).
pub const DEFAULT_TOOL_BUDGET_BYTES: usize = 8192;
/// Offered MCP tools beyond this many go behind `tool_search`.
pub const DEFAULT_TOOL_BUDGET_TOOLS: usize = 40;

/// `[mcp]`: the servers (`[mcp.NAME]`) and the budget of tool schemas offered with every request
/// (`tool_budget_bytes`, `tool_budget_tools`); past it the rest wait behind `tool_search`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    pub servers: BTreeMap<String, McpSettings>,
    pub tool_budget_bytes: Option<usize>,
    pub tool_budget_tools: Option<usize>,
}

const BUDGET_BYTES_KEY: &str = "tool_budget_bytes";
const BUDGET_TOOLS_KEY: &str = "tool_budget_tools";

impl McpConfig {
    /// `(bytes, tools)`: the defaults unless set.
    pub fn budget(&self) -> (usize, usize) {
        (
            self.tool_budget_bytes.unwrap_or(DEFAULT_TOOL_BUDGET_BYTES),
            self.tool_budget_tools.unwrap_or(DEFAULT_TOOL_BUDGET_TOOLS),
        )
    }
}

impl std::ops::Deref for McpConfig {
    type Target = BTreeMap<String, McpSettings>;
    fn deref(&self) -> &Self::Target {
        &self.servers
    }
}

impl std::ops::DerefMut for McpConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.servers
    }
}

impl<'a> IntoIterator for &'a McpConfig {
    type Item = (&'a String, &'a McpSettings);
    type IntoIter = std::collections::btree_map::Iter<'a, String, McpSettings>;
    fn into_iter(self) -> Self::IntoIter {
        self.servers.iter()
    }
}

impl From<BTreeMap<String, McpSettings>> for McpConfig {
    fn from(servers: BTreeMap<String, McpSettings>) -> Self {
        Self { servers, ..Self::default() }
    }
}

impl Serialize for McpConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        if let Some(bytes) = self.tool_budget_bytes {
            map.serialize_entry(BUDGET_BYTES_KEY, &bytes)?;
        }
        if let Some(tools) = self.tool_budget_tools {
            map.serialize_entry(BUDGET_TOOLS_KEY, &tools)?;
        }
        for (name, server) in &self.servers {
            map.serialize_entry(name, server)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for McpConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = McpConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("[mcp.NAME] server tables, tool_budget_bytes and tool_budget_tools")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<McpConfig, A::Error> {
                let mut config = McpConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        BUDGET_BYTES_KEY => config.tool_budget_bytes = Some(map.next_value()?),
                        BUDGET_TOOLS_KEY => config.tool_budget_tools = Some(map.next_value()?),
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

/// `[mcp.NAME]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpSettings {
    /// A local server: the program and its arguments, e.g.
    /// `["npx", "-y", "@modelcontextprotocol/server-filesystem", "."]`.
    pub command: Vec<String>,
    /// The local server's environment, added to codeloop's.
    pub env: BTreeMap<String, String>,
    /// A remote server: its Streamable HTTP endpoint, e.g. `https://mcp.example.com/mcp`.
    pub url: Option<String>,
    /// Sent with every request to a remote server; values may use `${ENV}` in the user's config.
    pub headers: BTreeMap<String, String>,
    /// A remote server's transport: `http` (Streamable HTTP, the default, falling back to the legacy
    /// one by itself) or `sse` (only the legacy HTTP+SSE transport of 2024-11-05).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<RemoteTransport>,
    pub enabled: bool,
    /// Bounds the server's start and each call, in milliseconds (default 30 000).
    pub timeout_ms: Option<u64>,
    /// Only these of the server's tools are offered (its own names); `disabled_tools` then removes.
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
    /// `false`: never sign in; a table: a pre-registered client or a client metadata document.
    pub oauth: OAuthConfig,
    /// Header names whose values are sent as written: those set by a trusted project's config or by an
    /// editor (ACP). `${ENV}` is expanded only in what the user's own files set.
    #[serde(skip)]
    pub literal_headers: BTreeSet<String>,
    /// Where the entry came from: a config file, or an editor's `session/new` (ACP).
    #[serde(skip)]
    pub origin: McpOrigin,
}

/// Who asked for a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum McpOrigin {
    /// The user's config, or a trusted project's.
    #[default]
    Config,
    /// An editor, through ACP: the sign-in hint then names the server's URL.
    Editor,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            env: BTreeMap::new(),
            url: None,
            headers: BTreeMap::new(),
            transport: None,
            enabled: true,
            timeout_ms: None,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            oauth: OAuthConfig::default(),
            literal_headers: BTreeSet::new(),
            origin: McpOrigin::Config,
        }
    }
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Stdio,
    Http,
    /// The legacy HTTP+SSE transport (2024-11-05): a GET event stream and POSTs to the endpoint it names.
    Sse,
}

/// `transport = "http" | "sse"` of a remote server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum RemoteTransport {
    #[serde(alias = "streamable-http", alias = "streamable_http")]
    Http,
    Sse,
}

impl TransportKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl McpSettings {
    /// A remote server at `url`.
    pub fn remote(url: impl Into<String>) -> Self {
        Self { url: Some(url.into()), ..Self::default() }
    }

    /// A local server started as `command`.
    pub fn local(command: Vec<String>) -> Self {
        Self { command, ..Self::default() }
    }

    /// Stdio or HTTP, or what is wrong with the entry (in words that say how to fix it).
    pub fn transport(&self, name: &str) -> Result<TransportKind, String> {
        match (&self.url, self.command.is_empty()) {
            (Some(_), false) => Err(format!(
                "[mcp.{name}] sets both `command` and `url`: keep `command` for a local server or `url` for \
                 a remote one"
            )),
            (Some(url), true) if url.trim().is_empty() => {
                Err(format!("[mcp.{name}] has an empty `url`: give the server's address, e.g. https://…/mcp"))
            }
            (Some(_), true) if self.transport == Some(RemoteTransport::Sse) => Ok(TransportKind::Sse),
            (Some(_), true) => Ok(TransportKind::Http),
            (None, false) if self.transport.is_some() => Err(format!(
                "[mcp.{name}] sets `transport` for a local server: it applies to a `url` only; remove it"
            )),
            (None, false) => Ok(TransportKind::Stdio),
            (None, true) => Err(format!(
                "[mcp.{name}] needs `command = [\"program\", …]` (a local server) or `url = \"https://…\"` \
                 (a remote one)"
            )),
        }
    }

    /// The kind a listing shows, even for an entry that is wrong.
    pub fn transport_kind(&self) -> TransportKind {
        match (&self.url, self.transport) {
            (Some(_), Some(RemoteTransport::Sse)) => TransportKind::Sse,
            (Some(_), _) => TransportKind::Http,
            (None, _) => TransportKind::Stdio,
        }
    }

    pub fn timeout(&self) -> Duration {
        match self.timeout_ms {
            Some(ms) if ms > 0 => Duration::from_millis(ms),
            _ => DEFAULT_MCP_TIMEOUT,
        }
    }

    /// Whether the server's own tool `tool` is offered: `enabled_tools` first (all when absent), then
    /// `disabled_tools` removes.
    pub fn offers_tool(&self, tool: &str) -> bool {
        let enabled = self.enabled_tools.as_ref().is_none_or(|only| only.iter().any(|t| t == tool));
        enabled && !self.disabled_tools.iter().any(|t| t == tool)
    }

    /// The headers to send, `${ENV}` expanded where the user's config set them.
    pub fn resolved_headers(&self, name: &str, env: &EnvLookup) -> Result<Vec<(String, String)>, String> {
        self.headers
            .iter()
            .map(|(key, value)| {
                if self.literal_headers.contains(key) {
                    return Ok((key.clone(), value.clone()));
                }
                expand_env(value, env).map(|value| (key.clone(), value)).map_err(|variable| {
                    format!(
                        "header `{key}` of [mcp.{name}] uses ${{{variable}}}, which is not set: export it, or \
                         write the value in the header"
                    )
                })
            })
            .collect()
    }

    /// Whether a configured header carries the credentials itself (then codeloop never signs in).
    pub fn has_authorization_header(&self) -> bool {
        self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization"))
    }
}

/// `${NAME}` replaced by the variable's value; the name of the first one that is not set otherwise.
fn expand_env(value: &str, env: &EnvLookup) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else { break };
        let variable = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        match env(variable) {
            Some(found) => out.push_str(&found),
            None => return Err(variable.to_owned()),
        }
        rest = &rest[start + 3 + len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `oauth = false | true | { client_id, client_secret_env, scopes, client_metadata_url }`.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum OAuthConfig {
    /// Sign in when the server asks (a 401), registering dynamically.
    #[default]
    Auto,
    /// Never sign in: a server that asks is a failure.
    Off,
    /// Sign in with this client.
    Client(OAuthClientSettings),
}

impl OAuthConfig {
    pub fn enabled(&self) -> bool {
        !matches!(self, OAuthConfig::Off)
    }

    pub fn client(&self) -> Option<&OAuthClientSettings> {
        match self {
            OAuthConfig::Client(client) => Some(client),
            _ => None,
        }
    }
}

/// A pre-registered client, or the client metadata document codeloop is known by.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OAuthClientSettings {
    pub client_id: Option<String>,
    /// The environment variable holding the client's secret (never the secret itself).
    pub client_secret_env: Option<String>,
    /// Scopes to ask for (default: what the server names).
    pub scopes: Vec<String>,
    /// An https URL of a Client ID Metadata Document, used when the authorization server takes them.
    pub client_metadata_url: Option<String>,
}

impl Serialize for OAuthConfig {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            OAuthConfig::Auto => serializer.serialize_bool(true),
            OAuthConfig::Off => serializer.serialize_bool(false),
            OAuthConfig::Client(client) => client.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for OAuthConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = OAuthConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`false`, `true` or a table { client_id, client_secret_env, scopes, client_metadata_url }")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<OAuthConfig, E> {
                Ok(if on { OAuthConfig::Auto } else { OAuthConfig::Off })
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<OAuthConfig, A::Error> {
                let client =
                    OAuthClientSettings::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(OAuthConfig::Client(client))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn env() -> EnvLookup {
        Arc::new(|name| (name == "TOKEN").then(|| "s3cret".to_owned()))
    }

    #[test]
    fn an_entry_is_local_or_remote_and_says_how_to_fix_itself() {
        assert_eq!(McpSettings::local(vec!["x".into()]).transport("a"), Ok(TransportKind::Stdio));
        assert_eq!(McpSettings::remote("https://x/mcp").transport("a"), Ok(TransportKind::Http));
        let legacy: McpSettings = toml::from_str("url = \"https://x/sse\"\ntransport = \"sse\"").unwrap();
        assert_eq!(legacy.transport("a"), Ok(TransportKind::Sse));
        let named: McpSettings =
            toml::from_str("url = \"https://x/mcp\"\ntransport = \"streamable-http\"").unwrap();
        assert_eq!(named.transport("a"), Ok(TransportKind::Http));
        let local =
            McpSettings { transport: Some(RemoteTransport::Sse), ..McpSettings::local(vec!["x".into()]) };
        assert!(local.transport("a").unwrap_err().contains("`url` only"));
        let neither = McpSettings::default().transport("a").unwrap_err();
        assert!(neither.contains("command") && neither.contains("url"), "{neither}");
        let both = McpSettings { url: Some("https://x".into()), ..McpSettings::local(vec!["x".into()]) };
        assert!(both.transport("a").unwrap_err().contains("both"));
    }

    #[test]
    fn tool_filters_take_enabled_first_then_disabled() {
        let settings = McpSettings {
            enabled_tools: Some(vec!["a".into(), "b".into()]),
            disabled_tools: vec!["b".into()],
            ..McpSettings::default()
        };
        assert!(settings.offers_tool("a"));
        assert!(!settings.offers_tool("b"));
        assert!(!settings.offers_tool("c"));
        assert!(McpSettings::default().offers_tool("anything"));
    }

    #[test]
    fn headers_expand_env_only_where_the_user_set_them() {
        let mut settings = McpSettings::remote("https://x");
        settings.headers.insert("Authorization".into(), "Bearer ${TOKEN}".into());
        settings.headers.insert("X-Project".into(), "${TOKEN}".into());
        settings.literal_headers.insert("X-Project".into());
        let headers = settings.resolved_headers("a", &env()).unwrap();
        assert_eq!(
            headers,
            vec![
                ("Authorization".to_owned(), "Bearer s3cret".to_owned()),
                ("X-Project".to_owned(), "${TOKEN}".to_owned())
            ]
        );
        settings.headers.insert("X-Other".into(), "${MISSING}".into());
        let error = settings.resolved_headers("a", &env()).unwrap_err();
        assert!(error.contains("${MISSING}") && error.contains("X-Other"), "{error}");
    }

    #[test]
    fn the_mcp_table_holds_servers_and_the_tool_budget() {
        let config: crate::config::Config = toml::from_str(
            "[mcp]\ntool_budget_bytes = 4096\ntool_budget_tools = 10\n[mcp.web]\nurl = \"https://x/mcp\"\n",
        )
        .unwrap();
        assert_eq!(config.mcp.budget(), (4096, 10));
        assert_eq!(config.mcp.len(), 1);
        assert_eq!(config.mcp["web"].url.as_deref(), Some("https://x/mcp"));
        assert_eq!(crate::config::Config::default().mcp.budget(), (8192, 40));
        // A value that is not a count is refused, naming the key; it never becomes a server.
        for bad in
            ["tool_budget_bytes = -1", "tool_budget_tools = \"all\"", "tool_budget_bytes = { url = \"x\" }"]
        {
            let error = toml::from_str::<crate::config::Config>(&format!("[mcp]\n{bad}\n")).unwrap_err();
            assert!(error.to_string().contains("tool_budget"), "{bad}: {error}");
        }
        // Unknown keys inside a server are still reported.
        let mut unknown = Vec::new();
        let value: toml::Value = toml::from_str("[mcp.web]\nurl = \"https://x/mcp\"\nbogus = 1\n").unwrap();
        let _: crate::config::Config =
            serde_ignored::deserialize(value, |path| unknown.push(path.to_string())).unwrap();
        assert_eq!(unknown, ["mcp.web.bogus"]);
        // And it writes back as it reads.
        let text = toml::to_string(&config).unwrap();
        let again: crate::config::Config = toml::from_str(&text).unwrap();
        assert_eq!(again.mcp, config.mcp);
    }

    #[test]
    fn oauth_is_a_bool_or_a_client_table() {
        #[derive(Deserialize)]
        struct Wrap {
            oauth: OAuthConfig,
        }
        let off: Wrap = toml::from_str("oauth = false").unwrap();
        assert_eq!(off.oauth, OAuthConfig::Off);
        let on: Wrap = toml::from_str("oauth = true").unwrap();
        assert_eq!(on.oauth, OAuthConfig::Auto);
        let client: Wrap = toml::from_str(
            "oauth = { client_id = \"abc\", client_secret_env = \"SECRET\", scopes = [\"r\"] }",
        )
        .unwrap();
        let client = client.oauth.client().cloned().unwrap();
        assert_eq!(client.client_id.as_deref(), Some("abc"));
        assert_eq!(client.scopes, ["r"]);
        assert_eq!(serde_json::to_value(OAuthConfig::Off).unwrap(), serde_json::json!(false));
    }
}

#[cfg(test)]
mod transportkind_text {
    use super::TransportKind;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in TransportKind::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
