//! What Claude Code's, OpenCode's and Codex's files bring, in codeloop's terms (DESIGN.md §5k): the
//! `permissions` of Claude settings files as permission rules, `.mcp.json` servers as `[mcp.NAME]`
//! tables, agent files (`.claude/agents/*.md`, `.opencode/agent/*.md`) as `[agent.NAME]` tables,
//! `opencode.json`'s `mcp`, `agent` and `permission`, and `~/.codex/config.toml`'s `[mcp_servers]`. What
//! cannot be honoured exactly is left out and said, never half-applied.
//!
//! Owns: the translation. Must not: decide trust or layering ([`super::sources`] does).

use std::path::{Path, PathBuf};

use codeloop_types::{PermissionAction, PermissionRule};
use serde_json::Value;

use crate::file_commands::load::{split_front_matter, unquote};

/// Looks up an environment variable (`${VAR}` in `.mcp.json`).
#[derive(Clone)]
pub struct EnvLookup(pub crate::models::EnvLookup);

impl std::fmt::Debug for EnvLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EnvLookup")
    }
}

/// Claude's `permissions` of one settings file as codeloop rules, in the order that gives Claude's
/// precedence under "the last matching rule wins": allow, then ask, then deny. Rules that cannot be
/// translated are named in `notes`.
pub(super) fn claude_permission_rules(
    settings: &Value,
    file: &Path,
    root: &Path,
    home: Option<&Path>,
    notes: &mut Vec<String>,
) -> Vec<PermissionRule> {
    let mut rules = Vec::new();
    let Some(permissions) = settings.get("permissions") else { return rules };
    for (key, action) in
        [("allow", PermissionAction::Allow), ("ask", PermissionAction::Ask), ("deny", PermissionAction::Deny)]
    {
        for entry in permissions.get(key).and_then(Value::as_array).into_iter().flatten() {
            let Some(text) = entry.as_str() else { continue };
            match claude_rule(text, root, home) {
                Ok(translated) => rules.extend(
                    translated.into_iter().map(|(p, pattern)| PermissionRule::new(p, pattern, action)),
                ),
                Err(why) => notes
                    .push(format!("{}: permissions.{key} rule `{text}` is not used: {why}", file.display())),
            }
        }
    }
    rules
}

/// A command's `allowed-tools` as allow rules (those codeloop cannot read are left out).
pub fn claude_allow_rules(rules: &[String], root: &Path) -> Vec<PermissionRule> {
    rules
        .iter()
        .filter_map(|text| claude_rule(text, root, None).ok())
        .flatten()
        .map(|(permission, pattern)| PermissionRule::new(permission, pattern, PermissionAction::Allow))
        .collect()
}

/// `Tool` or `Tool(specifier)` as `(permission, pattern)` pairs.
fn claude_rule(text: &str, root: &Path, home: Option<&Path>) -> Result<Vec<(String, String)>, String> {
    let text = text.trim();
    let (tool, specifier) = match text.split_once('(') {
        Some((tool, rest)) => {
            let inner = rest.strip_suffix(')').ok_or("a `(` without its closing `)`")?;
            (tool.trim(), Some(inner.trim()))
        }
        None => (text, None),
    };
    if let Some(rest) = tool.strip_prefix("mcp__") {
        // An MCP tool's permission is its offered name, `server_tool`; `mcp__server` covers them all.
        let (server, name) = rest.split_once("__").unwrap_or((rest, "*"));
        let permission = match name {
            "*" => format!("{}*", crate::mcp::tool_key(server, "")),
            name => crate::mcp::tool_key(server, name),
        };
        return Ok(vec![(permission, "*".into())]);
    }
    let permissions: &[&str] = match tool {
        "Bash" => &["bash"],
        "Read" => &["read"],
        "Edit" | "Write" | "MultiEdit" | "NotebookEdit" => &["edit"],
        "Glob" => &["glob"],
        "Grep" => &["grep"],
        "WebFetch" => &["webfetch"],
        "Task" | "Agent" => &["task"],
        "TodoWrite" => &["todowrite"],
        "Skill" => &["skill"],
        "WebSearch" => return Err("codeloop has no web search tool".into()),
        other => return Err(format!("`{other}` is not a tool codeloop knows")),
    };
    let patterns = match (tool, specifier) {
        (_, None) | (_, Some("")) | (_, Some("*")) => vec!["*".to_owned()],
        ("Bash", Some(command)) => vec![bash_pattern(command)],
        ("WebFetch", Some(spec)) => {
            let domain = spec.strip_prefix("domain:").ok_or("WebFetch rules name `domain:HOST`")?;
            vec![format!("https://{domain}/*"), format!("http://{domain}/*")]
        }
        ("Read" | "Edit" | "Write" | "MultiEdit" | "NotebookEdit" | "Glob" | "Grep", Some(path)) => {
            vec![path_pattern(path, root, home)?]
        }
        (_, Some(spec)) => vec![spec.to_owned()],
    };
    Ok(permissions
        .iter()
        .flat_map(|p| patterns.iter().map(move |pattern| ((*p).to_owned(), pattern.clone())))
        .collect())
}

/// Claude's `npm run test:*` (a prefix) is codeloop's `npm run test *` (which also matches the bare
/// command); other wildcards are the same.
fn bash_pattern(command: &str) -> String {
    match command.strip_suffix(":*") {
        Some(prefix) => format!("{} *", prefix.trim_end()),
        None => command.to_owned(),
    }
}

/// Claude's gitignore-style paths as codeloop's patterns: relative to the project root (`./x`, `/x`,
/// `x`), the home (`~/x`) or absolute (`//x`); `**` becomes `*`, which crosses folders in codeloop.
fn path_pattern(path: &str, root: &Path, home: Option<&Path>) -> Result<String, String> {
    let glob = |p: &str| p.replace("/**/", "/*").replace("**", "*");
    if let Some(absolute) = path.strip_prefix("//") {
        return Ok(glob(&format!("/{absolute}")));
    }
    if let Some(rest) = path.strip_prefix("~/") {
        let home = home.ok_or("no home directory to resolve `~` against")?;
        return Ok(glob(&format!("{}/{rest}", home.display())));
    }
    let relative = path.trim_start_matches("./").trim_start_matches('/');
    let _ = root;
    Ok(glob(relative))
}

/// `.mcp.json`'s `mcpServers` as `[mcp.NAME]` tables (`type` stdio, http, sse; `${VAR}` and `${VAR:-default}`
/// expanded from `env`). A server that cannot be honoured is left out and named in `notes`.
pub(super) fn mcp_json_servers(
    text: &str,
    file: &Path,
    env: Option<&EnvLookup>,
    notes: &mut Vec<String>,
) -> Result<toml::Table, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("{}: not valid JSON: {e}", file.display()))?;
    let mut out = toml::Table::new();
    let Some(servers) = value.get("mcpServers").and_then(Value::as_object) else { return Ok(out) };
    for (name, server) in servers {
        match mcp_server(server, env) {
            Ok(table) => {
                out.insert(name.clone(), toml::Value::Table(table));
            }
            Err(why) => notes.push(format!("{}: MCP server `{name}` is not started: {why}", file.display())),
        }
    }
    Ok(out)
}

fn mcp_server(server: &Value, env: Option<&EnvLookup>) -> Result<toml::Table, String> {
    let text = |value: &Value| -> Result<String, String> {
        value.as_str().ok_or_else(|| format!("expected text, got {value}")).and_then(|s| expand(s, env))
    };
    let kind = server.get("type").and_then(Value::as_str).unwrap_or(if server.get("url").is_some() {
        "http"
    } else {
        "stdio"
    });
    let mut table = toml::Table::new();
    match kind {
        "stdio" => {
            let command = server.get("command").ok_or("a stdio server needs `command`")?;
            let mut argv = vec![toml::Value::String(text(command)?)];
            for arg in server.get("args").and_then(Value::as_array).into_iter().flatten() {
                argv.push(toml::Value::String(text(arg)?));
            }
            table.insert("command".into(), toml::Value::Array(argv));
            let mut vars = toml::Table::new();
            for (key, value) in server.get("env").and_then(Value::as_object).into_iter().flatten() {
                vars.insert(key.clone(), toml::Value::String(text(value)?));
            }
            if !vars.is_empty() {
                table.insert("env".into(), toml::Value::Table(vars));
            }
        }
        "http" | "streamable-http" | "sse" => {
            let url = server.get("url").ok_or_else(|| format!("an {kind} server needs `url`"))?;
            table.insert("url".into(), toml::Value::String(text(url)?));
            if kind == "sse" {
                table.insert("transport".into(), toml::Value::String("sse".into()));
            }
            let mut headers = toml::Table::new();
            for (key, value) in server.get("headers").and_then(Value::as_object).into_iter().flatten() {
                headers.insert(key.clone(), toml::Value::String(text(value)?));
            }
            if !headers.is_empty() {
                table.insert("headers".into(), toml::Value::Table(headers));
            }
        }
        other => return Err(format!("unknown type `{other}` (stdio, http or sse)")),
    }
    Ok(table)
}

/// `${VAR}` and `${VAR:-default}` replaced; a variable that is not set (and has no default) is an error.
/// Without `env` the text stays as written: an untrusted project's `.mcp.json` is described, never filled
/// with the user's secrets.
fn expand(text: &str, env: Option<&EnvLookup>) -> Result<String, String> {
    let Some(env) = env else { return Ok(text.to_owned()) };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| format!("`${{` without `}}` in `{text}`"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        match (env.0)(name).or_else(|| default.map(str::to_owned)) {
            Some(value) => out.push_str(&value),
            None => return Err(format!("${{{name}}} is not set")),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `opencode.json` (JSON with comments): its `mcp` servers, `agent`s and `permission` as codeloop tables
/// (codeloop's permission shape is OpenCode's). `command` entries are said, not used: codeloop's
/// commands are files (`.opencode/command/*.md` is read).
pub(super) fn opencode_config(
    text: &str,
    file: &Path,
    notes: &mut Vec<String>,
) -> Result<toml::Table, String> {
    let value: Value = serde_json::from_str(&strip_jsonc(text))
        .map_err(|e| format!("{}: not valid JSON: {e}", file.display()))?;
    let mut out = toml::Table::new();
    let mut servers = toml::Table::new();
    for (name, server) in value.get("mcp").and_then(Value::as_object).into_iter().flatten() {
        let mut table = toml::Table::new();
        match server.get("type").and_then(Value::as_str) {
            Some("local") => {
                let argv: Vec<toml::Value> = server
                    .get("command")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|a| toml::Value::String(a.to_owned()))
                    .collect();
                if argv.is_empty() {
                    notes
                        .push(format!("{}: MCP server `{name}` has no command: not started", file.display()));
                    continue;
                }
                table.insert("command".into(), toml::Value::Array(argv));
                if let Some(vars) = server.get("environment").and_then(Value::as_object) {
                    table.insert("env".into(), toml::Value::Table(text_table(vars)));
                }
            }
            Some("remote") => {
                let Some(url) = server.get("url").and_then(Value::as_str) else {
                    notes.push(format!("{}: MCP server `{name}` has no url: not started", file.display()));
                    continue;
                };
                table.insert("url".into(), toml::Value::String(url.to_owned()));
                if let Some(headers) = server.get("headers").and_then(Value::as_object) {
                    table.insert("headers".into(), toml::Value::Table(text_table(headers)));
                }
            }
            other => {
                notes.push(format!(
                    "{}: MCP server `{name}` has type {other:?} (local or remote): not started",
                    file.display()
                ));
                continue;
            }
        }
        if server.get("enabled") == Some(&Value::Bool(false)) {
            table.insert("enabled".into(), toml::Value::Boolean(false));
        }
        servers.insert(name.clone(), toml::Value::Table(table));
    }
    if !servers.is_empty() {
        out.insert("mcp".into(), toml::Value::Table(servers));
    }
    if let Some(permission) = value.get("permission").and_then(json_to_toml) {
        out.insert("permission".into(), permission);
    }
    let mut agents = toml::Table::new();
    for (name, agent) in value.get("agent").and_then(Value::as_object).into_iter().flatten() {
        let mut table = toml::Table::new();
        for key in ["description", "prompt", "model"] {
            if let Some(text) = agent.get(key).and_then(Value::as_str) {
                table.insert(key.into(), toml::Value::String(text.to_owned()));
            }
        }
        if let Some(mode) = agent.get("mode").and_then(Value::as_str) {
            let mode = if mode == "subagent" { "subagent" } else { "primary" };
            table.insert("mode".into(), toml::Value::String(mode.into()));
        }
        if let Some(t) = agent.get("temperature").and_then(Value::as_f64) {
            table.insert("temperature".into(), toml::Value::Float(t));
        }
        if agent.get("disable") == Some(&Value::Bool(true)) {
            table.insert("disable".into(), toml::Value::Boolean(true));
        }
        let mut permission = agent
            .get("permission")
            .and_then(json_to_toml)
            .and_then(|p| match p {
                toml::Value::Table(t) => Some(t),
                _ => None,
            })
            .unwrap_or_default();
        for (tool, on) in agent.get("tools").and_then(Value::as_object).into_iter().flatten() {
            if on == &Value::Bool(false) {
                let tool = if tool == "write" || tool == "patch" { "edit" } else { tool.as_str() };
                permission.insert(tool.to_owned(), toml::Value::String("deny".into()));
            }
        }
        if !permission.is_empty() {
            table.insert("permission".into(), toml::Value::Table(permission));
        }
        agents.insert(name.clone(), toml::Value::Table(table));
    }
    if !agents.is_empty() {
        out.insert("agent".into(), toml::Value::Table(agents));
    }
    if let Some(commands) = value.get("command").and_then(Value::as_object).filter(|c| !c.is_empty()) {
        let names: Vec<&str> = commands.keys().map(String::as_str).collect();
        notes.push(format!(
            "{}: commands defined in JSON ({}) are not read: put each in .opencode/command/NAME.md",
            file.display(),
            names.join(", ")
        ));
    }
    Ok(out)
}

/// `~/.codex/config.toml`'s `[mcp_servers.NAME]` (`command` + `args` + `env`, or `url`) as `[mcp.NAME]`.
pub(super) fn codex_servers(text: &str, file: &Path, notes: &mut Vec<String>) -> Result<toml::Table, String> {
    let value: toml::Table =
        toml::from_str(text).map_err(|e| format!("{}: not valid TOML: {e}", file.display()))?;
    let mut out = toml::Table::new();
    for (name, server) in value.get("mcp_servers").and_then(toml::Value::as_table).into_iter().flatten() {
        let mut table = toml::Table::new();
        if let Some(command) = server.get("command").and_then(toml::Value::as_str) {
            let mut argv = vec![toml::Value::String(command.to_owned())];
            argv.extend(server.get("args").and_then(toml::Value::as_array).cloned().unwrap_or_default());
            table.insert("command".into(), toml::Value::Array(argv));
            if let Some(env) = server.get("env").cloned() {
                table.insert("env".into(), env);
            }
        } else if let Some(url) = server.get("url").and_then(toml::Value::as_str) {
            table.insert("url".into(), toml::Value::String(url.to_owned()));
            if let Some(headers) = server.get("http_headers").cloned() {
                table.insert("headers".into(), headers);
            }
        } else {
            notes.push(format!(
                "{}: mcp_servers.{name} has neither command nor url: not started",
                file.display()
            ));
            continue;
        }
        if server.get("enabled").and_then(toml::Value::as_bool) == Some(false) {
            table.insert("enabled".into(), toml::Value::Boolean(false));
        }
        out.insert(name.clone(), toml::Value::Table(table));
    }
    Ok(out)
}

fn text_table(map: &serde_json::Map<String, Value>) -> toml::Table {
    map.iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), toml::Value::String(v.to_owned()))))
        .collect()
}

/// JSON strings, booleans, numbers and objects as TOML (no nulls in TOML: they are dropped).
fn json_to_toml(value: &Value) -> Option<toml::Value> {
    Some(match value {
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        Value::Array(items) => toml::Value::Array(items.iter().filter_map(json_to_toml).collect()),
        Value::Object(map) => {
            toml::Value::Table(map.iter().filter_map(|(k, v)| Some((k.clone(), json_to_toml(v)?))).collect())
        }
        Value::Null => return None,
    })
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as OpenCode reads it, made plain JSON.
fn strip_jsonc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
            }
            (',', _) => {
                // A trailing comma: the next non-blank character closes the object or array.
                let rest: String = chars.clone().collect();
                if !rest.trim_start().starts_with(['}', ']']) {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The agent files of a folder (`*.md`, real files only, inside `root` when given) as `[agent.NAME]`
/// tables, with the files read.
pub(super) fn agent_files(
    dir: &Path,
    inside: Option<&Path>,
    notes: &mut Vec<String>,
) -> (toml::Table, Vec<PathBuf>) {
    let mut agents = toml::Table::new();
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return (agents, files) };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let Some(stem) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".md")) else {
            continue;
        };
        let real = match path.canonicalize() {
            Ok(real) if real.is_file() => real,
            _ => continue,
        };
        if inside.is_some_and(|root| !real.starts_with(crate::trust::canonical(root))) {
            notes.push(format!("{}: an agent file outside the project is not read", path.display()));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&real) else { continue };
        let (name, table) = agent(stem, &text, &path, notes);
        agents.insert(name, toml::Value::Table(table));
        files.push(path);
    }
    (agents, files)
}

/// One agent file: Claude's `name`, `description`, `tools` (a list: only those are allowed), `model`
/// (`inherit` or an alias: the session's model), and OpenCode's `mode`, `model` (`provider/model`),
/// `temperature` and `tools` (a map: `false` denies); the body is the prompt.
fn agent(stem: &str, text: &str, path: &Path, notes: &mut Vec<String>) -> (String, toml::Table) {
    let (front, body) = split_front_matter(text);
    let mut name = stem.to_owned();
    let mut table = toml::Table::new();
    table.insert("mode".into(), toml::Value::String("subagent".into()));
    let mut allowed: Option<Vec<String>> = None;
    let mut denied: Vec<String> = Vec::new();
    let mut open_list: Option<&str> = None;
    for line in front.lines() {
        let indented = line.starts_with([' ', '\t']);
        let trimmed = line.trim();
        if indented && open_list == Some("tools") {
            if let Some(item) = trimmed.strip_prefix("- ") {
                allowed.get_or_insert_with(Vec::new).push(unquote(item.trim()).to_owned());
            } else if let Some((tool, flag)) = trimmed.split_once(':')
                && flag.trim() == "false"
            {
                denied.push(tool.trim().to_owned());
            }
            continue;
        }
        open_list = None;
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = unquote(value.trim()).to_owned();
        match key.trim() {
            "name" if !value.is_empty() => name = value,
            "description" => {
                table.insert("description".into(), toml::Value::String(value));
            }
            "mode" if matches!(value.as_str(), "primary" | "subagent" | "all") => {
                let mode = if value == "subagent" { "subagent" } else { "primary" };
                table.insert("mode".into(), toml::Value::String(mode.into()));
            }
            "model" if value.contains('/') => {
                table.insert("model".into(), toml::Value::String(value));
            }
            "model" if !value.is_empty() && value != "inherit" => notes.push(format!(
                "{}: model `{value}` is an alias: agent `{name}` runs on the session's model (write provider/model to choose one)",
                path.display()
            )),
            "temperature" => {
                if let Ok(t) = value.parse::<f64>() {
                    table.insert("temperature".into(), toml::Value::Float(t));
                }
            }
            "tools" if value.is_empty() => open_list = Some("tools"),
            "tools" => {
                let list = value.trim_start_matches('[').trim_end_matches(']');
                allowed = Some(list.split(',').map(|t| unquote(t.trim()).to_owned()).filter(|t| !t.is_empty()).collect());
            }
            _ => {}
        }
    }
    table.insert("prompt".into(), toml::Value::String(body.trim().to_owned()));
    let mut permission = toml::Table::new();
    if let Some(allowed) = allowed {
        // Only the listed tools: everything else is denied first, the list allowed after it.
        permission.insert("*".into(), toml::Value::String("deny".into()));
        for tool in allowed {
            match claude_rule(&tool, Path::new(""), None) {
                Ok(pairs) => {
                    for (permission_name, _) in pairs {
                        permission.insert(permission_name, toml::Value::String("allow".into()));
                    }
                }
                Err(why) => notes
                    .push(format!("{}: tool `{tool}` of agent `{name}` is left out: {why}", path.display())),
            }
        }
    }
    for tool in denied {
        let permission_name = if tool == "write" || tool == "patch" { "edit".to_owned() } else { tool };
        permission.insert(permission_name, toml::Value::String("deny".into()));
    }
    if !permission.is_empty() {
        table.insert("permission".into(), toml::Value::Table(permission));
    }
    (name, table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_json_brings_its_servers_agents_and_permissions() {
        let text = r#"{
          // OpenCode's own config, with comments
          "$schema": "https://opencode.ai/config.json",
          "mcp": {
            "fs": {"type": "local", "command": ["npx", "-y", "server-fs"], "environment": {"A": "b"}},
            "docs": {"type": "remote", "url": "https://docs.example.com/mcp", "enabled": false,},
          },
          "permission": {"edit": "ask", "bash": {"git push": "deny", "*": "ask"}},
          "agent": {"review": {"description": "Reviews", "mode": "subagent", "tools": {"write": false}, "prompt": "Be strict."}},
          /* not read */
          "command": {"test": {"template": "run the tests"}}
        }"#;
        let mut notes = Vec::new();
        let table = opencode_config(text, Path::new("opencode.json"), &mut notes).unwrap();
        assert_eq!(table["mcp"]["fs"]["command"].as_array().unwrap().len(), 3);
        assert_eq!(table["mcp"]["fs"]["env"]["A"].as_str(), Some("b"));
        assert_eq!(table["mcp"]["docs"]["enabled"].as_bool(), Some(false));
        assert_eq!(table["permission"]["bash"]["git push"].as_str(), Some("deny"));
        assert_eq!(table["agent"]["review"]["mode"].as_str(), Some("subagent"));
        assert_eq!(table["agent"]["review"]["permission"]["edit"].as_str(), Some("deny"));
        assert!(notes.iter().any(|n| n.contains("commands defined in JSON (test)")), "{notes:?}");
        let config: crate::config::Config = toml::Value::Table(table).try_into().unwrap();
        assert_eq!(config.agent["review"].prompt.as_deref(), Some("Be strict."));
    }

    #[test]
    fn codex_mcp_servers_become_codeloop_servers() {
        let text = "model = \"o3\"\n[mcp_servers.gh]\ncommand = \"npx\"\nargs = [\"-y\", \"gh-mcp\"]\nenv = { TOKEN = \"x\" }\n[mcp_servers.bad]\n";
        let mut notes = Vec::new();
        let servers = codex_servers(text, Path::new("config.toml"), &mut notes).unwrap();
        assert_eq!(servers["gh"]["command"].as_array().unwrap().len(), 3);
        assert!(!servers.contains_key("bad") && notes.len() == 1, "{notes:?}");
    }

    #[test]
    fn claude_rules_keep_their_precedence_and_meaning() {
        let settings = serde_json::json!({"permissions": {
            "deny": ["Read(./.env)", "Bash(curl:*)", "WebSearch"],
            "allow": ["Bash(npm run test:*)", "Read(~/.zshrc)", "WebFetch(domain:docs.rs)", "mcp__github", "Edit(src/**)"],
            "ask": ["Bash(git push:*)"]
        }});
        let mut notes = Vec::new();
        let rules = claude_permission_rules(
            &settings,
            Path::new("s.json"),
            Path::new("/p"),
            Some(Path::new("/home/u")),
            &mut notes,
        );
        let shown: Vec<String> =
            rules.iter().map(|r| format!("{} {} {:?}", r.permission, r.pattern, r.action)).collect();
        assert_eq!(
            shown,
            [
                "bash npm run test * Allow",
                "read /home/u/.zshrc Allow",
                "webfetch https://docs.rs/* Allow",
                "webfetch http://docs.rs/* Allow",
                "github_* * Allow",
                "edit src/* Allow",
                "bash git push * Ask",
                "read .env Deny",
                "bash curl * Deny",
            ]
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("`WebSearch`") && notes[0].contains("no web search tool"), "{notes:?}");
    }

    #[test]
    fn mcp_json_servers_expand_variables_and_say_what_they_leave_out() {
        let env = EnvLookup(std::sync::Arc::new(|name| (name == "TOKEN").then(|| "t0k".to_owned())));
        let text = r#"{"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-fs", "${ROOT:-.}"], "env": {"KEY": "${TOKEN}"}},
            "web": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
            "old": {"type": "sse", "url": "https://old.example.com/sse"},
            "needs": {"command": "srv", "env": {"K": "${MISSING}"}}
        }}"#;
        let mut notes = Vec::new();
        let servers = mcp_json_servers(text, Path::new(".mcp.json"), Some(&env), &mut notes).unwrap();
        assert_eq!(servers["fs"]["command"].as_array().unwrap().len(), 4);
        assert_eq!(servers["fs"]["command"][3].as_str(), Some("."));
        assert_eq!(servers["fs"]["env"]["KEY"].as_str(), Some("t0k"));
        assert_eq!(servers["web"]["headers"]["Authorization"].as_str(), Some("Bearer t0k"));
        // The legacy HTTP+SSE transport is a `transport = "sse"` server.
        assert_eq!(servers["old"]["url"].as_str(), Some("https://old.example.com/sse"));
        assert_eq!(servers["old"]["transport"].as_str(), Some("sse"));
        assert!(!servers.contains_key("needs"));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes.iter().any(|n| n.contains("`needs`") && n.contains("${MISSING} is not set")),
            "{notes:?}"
        );
        assert!(mcp_json_servers("{", Path::new(".mcp.json"), None, &mut notes).is_err());
        // Not expanded without a lookup (an untrusted project's file is only described).
        let described = mcp_json_servers(text, Path::new(".mcp.json"), None, &mut notes).unwrap();
        assert_eq!(described["web"]["headers"]["Authorization"].as_str(), Some("Bearer ${TOKEN}"));
    }

    #[test]
    fn agent_files_become_subagents_with_only_their_tools() {
        let mut notes = Vec::new();
        let claude = "---\nname: reviewer\ndescription: Reviews diffs\ntools: Read, Grep, Bash\nmodel: sonnet\n---\nYou review code.\n";
        let (name, table) = agent("file-name", claude, Path::new("a.md"), &mut notes);
        assert_eq!(name, "reviewer");
        assert_eq!(table["mode"].as_str(), Some("subagent"));
        assert_eq!(table["prompt"].as_str(), Some("You review code."));
        let permission = table["permission"].as_table().unwrap();
        assert_eq!(permission["*"].as_str(), Some("deny"));
        assert_eq!(permission["read"].as_str(), Some("allow"));
        assert_eq!(permission["bash"].as_str(), Some("allow"));
        assert!(!permission.contains_key("edit"));
        assert!(notes[0].contains("alias"), "{notes:?}");
        let opencode = "---\ndescription: Docs writer\nmode: subagent\nmodel: anthropic/claude-sonnet-4-6\ntools:\n  bash: false\n  write: false\n---\nWrite docs.\n";
        let (name, table) = agent("docs", opencode, Path::new("docs.md"), &mut notes);
        assert_eq!((name.as_str(), table["model"].as_str()), ("docs", Some("anthropic/claude-sonnet-4-6")));
        let permission = table["permission"].as_table().unwrap();
        assert_eq!((permission["bash"].as_str(), permission["edit"].as_str()), (Some("deny"), Some("deny")));
        assert!(!permission.contains_key("*"));
    }
}
