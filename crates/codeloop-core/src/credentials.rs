//! The environment variables codeloop reads credentials from (DESIGN.md §5j), so that no child it starts —
//! a command, a job, a template's `` !`cmd` ``, an MCP stdio server — is handed one: a model that runs `env`
//! would otherwise send the user's collector key or provider key to its provider. The name-based filter
//! of the walls (`KEY`, `TOKEN`, …) misses names like `OTEL_EXPORTER_OTLP_HEADERS` or a provider's
//! `api_key_env = "ACME_LLM"`; this list names them.
//!
//! Owns: which variable names are codeloop's credentials under a config. Must not: decide which child
//! keeps one (`[sandbox] env_keep` and an MCP server's own `env` do). Values are read only to find the
//! variables a trusted project's `.mcp.json` was filled from (its `${VAR}` are expanded as it is loaded).

use std::collections::BTreeSet;

use crate::config::Config;

/// Read by codeloop itself whatever the config says: the OTLP headers (a hosted collector's API key), the
/// server's token and the store's URL (a database password).
const CODELOOP_OWN: [&str; 6] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
    "CODELOOP_SERVER_TOKEN",
    crate::stores::DATABASE_URL_ENV,
];

/// The cloud vendors' credential variables (their SDKs' standard chains read them).
const CLOUD: [&str; 17] = [
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_BEARER_TOKEN_BEDROCK",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
    "CLOUDSDK_AUTH_ACCESS_TOKEN_FILE",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_CLIENT_CERTIFICATE_PASSWORD",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_OPENAI_API_KEY",
    "AZURE_API_KEY",
];

/// [`credential_variables`], and every variable of `environment` whose value an MCP server's `headers` or
/// `env` carries (a trusted project's `.mcp.json` arrives with its `${VAR}` already filled in).
pub fn credential_variables_in(
    config: &Config,
    environment: impl IntoIterator<Item = (String, String)>,
) -> Vec<String> {
    /// Shorter values say too little to tell whose they are (`1`, `true`, a port).
    const SHORTEST: usize = 8;
    /// Never taken away from a command, whatever a server was given (`"env": {"HOME": "${HOME}"}`).
    const ESSENTIAL: [&str; 9] =
        ["HOME", "PATH", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "PWD", "TMPDIR"];
    // Headers are sent to a server (its credentials); of a stdio server's `env`, what has a secret's name.
    let carried: Vec<&str> = config
        .mcp
        .values()
        .flat_map(|server| {
            let secret_env = server
                .env
                .iter()
                .filter(|(key, _)| codeloop_sandbox::looks_secret(std::ffi::OsStr::new(key.as_str())))
                .map(|(_, value)| value);
            server.headers.values().chain(secret_env)
        })
        .map(String::as_str)
        .collect();
    let mut names: BTreeSet<String> = credential_variables(config).into_iter().collect();
    for (name, value) in environment {
        if value.len() >= SHORTEST
            && !ESSENTIAL.contains(&name.as_str())
            && carried.iter().any(|c| c.contains(value.as_str()))
        {
            names.insert(name);
        }
    }
    names.into_iter().collect()
}

/// Every variable codeloop reads a credential from under `config`, sorted: its own, the cloud ones, each
/// provider's `api_key_env` (the built-in providers' too), each MCP server's OAuth `client_secret_env` and
/// every `${VAR}` its `headers` or `env` name.
pub fn credential_variables(config: &Config) -> Vec<String> {
    let mut names: BTreeSet<String> =
        CODELOOP_OWN.iter().chain(CLOUD.iter()).map(|n| (*n).to_owned()).collect();
    let builtin = crate::models::providers_by_key().iter().flat_map(|(_, variables, _)| variables.iter());
    names.extend(builtin.map(|v| (*v).to_owned()));
    names.extend(config.provider.values().filter_map(|p| p.api_key_env.clone()));
    for server in config.mcp.values() {
        names.extend(server.oauth.client().and_then(|c| c.client_secret_env.clone()));
        for value in server.headers.values().chain(server.env.values()) {
            names.extend(interpolated(value));
        }
    }
    names.retain(|n| !n.trim().is_empty());
    names.into_iter().collect()
}

/// The names `${NAME}` (or `${NAME:-default}`) in `value`.
pub(crate) fn interpolated(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else { break };
        let inner = &rest[start + 2..start + 2 + len];
        let name = inner.split(":-").next().unwrap_or(inner).trim();
        if !name.is_empty() {
            out.push(name.to_owned());
        }
        rest = &rest[start + 3 + len..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_a_projects_mcp_json_was_filled_from_are_named() {
        // As a trusted project's `.mcp.json` arrives: `${ACME_SEAT}` and `${REGION}` already expanded.
        let config: Config = toml::from_str(
            r#"
            [mcp.acme]
            url = "https://mcp.acme.test"
            headers = { Authorization = "Bearer s3at-0123456789", X-Region = "eu" }
            [mcp.local]
            command = ["acme-mcp"]
            env = { ACME_HOME = "/opt/acme/home", ACME_API_KEY = "k3y-0123456789", HOME = "/home/person" }
            "#,
        )
        .unwrap();
        let environment = [
            ("ACME_SEAT", "s3at-0123456789"),
            ("REGION", "eu"),
            ("ACME_HOME_DIR", "/opt/acme/home"),
            ("ACME_KEY", "k3y-0123456789"),
            ("HOME", "/home/person"),
            ("UNRELATED", "something-else-entirely"),
        ]
        .map(|(n, v)| (n.to_owned(), v.to_owned()));
        let names = credential_variables_in(&config, environment);
        assert!(names.contains(&"ACME_SEAT".to_owned()) && names.contains(&"ACME_KEY".to_owned()));
        assert!(!names.contains(&"ACME_HOME_DIR".to_owned()), "a server's plain setting is not a credential");
        assert!(!names.contains(&"HOME".to_owned()));
        assert!(!names.contains(&"REGION".to_owned()), "too short to tell");
        assert!(!names.contains(&"UNRELATED".to_owned()));
    }

    #[test]
    fn every_source_of_a_credential_is_named() {
        let config: Config = toml::from_str(
            r#"
            [provider.acme]
            api = "openai-chat"
            base_url = "http://127.0.0.1:1/v1"
            api_key_env = "ACME_LLM"
            [mcp.remote]
            url = "https://mcp.example.com/mcp"
            headers = { Authorization = "Bearer ${MCP_REMOTE_TOKEN}", X-Team = "${TEAM:-core}" }
            oauth = { client_id = "c", client_secret_env = "MCP_CLIENT_SECRET" }
            [mcp.local]
            command = ["server"]
            env = { UPSTREAM = "${UPSTREAM_CRED}" }
            "#,
        )
        .unwrap();
        let names = credential_variables(&config);
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "CODELOOP_SERVER_TOKEN",
            "CODELOOP_DATABASE_URL",
            "AWS_SECRET_ACCESS_KEY",
            "ANTHROPIC_API_KEY",
            "ACME_LLM",
            "MCP_REMOTE_TOKEN",
            "TEAM",
            "MCP_CLIENT_SECRET",
            "UPSTREAM_CRED",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
        assert!(!names.iter().any(|n| n == "OTEL_SERVICE_NAME" || n == "PATH"), "{names:?}");
    }
}
