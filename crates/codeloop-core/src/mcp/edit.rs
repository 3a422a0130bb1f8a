//! `codeloop mcp add` / `mcp remove` (DESIGN.md §5e): one `[mcp.NAME]` table added to or removed from a
//! config file, the rest of the file kept as it was (comments, order, spacing), written atomically.
//!
//! Owns: the edit. Must not: choose the file (the caller passes the one `CODELOOP_CONFIG` names, else
//! the global user config) or touch sign-ins.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, value};

use super::settings::McpSettings;

#[derive(Debug, thiserror::Error)]
pub enum ConfigEditError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot edit {path}: it is not valid TOML ({message}); fix it first")]
    Parse { path: PathBuf, message: String },
    #[error(
        "{path} already has [mcp.{name}]: remove it first (`codeloop mcp remove {name}`) or edit the file"
    )]
    Exists { name: String, path: PathBuf },
    #[error("{path} has no [mcp.{name}]")]
    Missing { name: String, path: PathBuf },
    #[error("{path}: `mcp` is not a table; fix the file first")]
    NotATable { path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Adds `[mcp.NAME]` with the entry's command, env, url and headers.
pub fn add_server(path: &Path, name: &str, settings: &McpSettings) -> Result<(), ConfigEditError> {
    let mut document = read(path)?;
    let servers = servers_table(&mut document, path)?;
    if servers.contains_key(name) {
        return Err(ConfigEditError::Exists { name: name.to_owned(), path: path.to_owned() });
    }
    let mut entry = Table::new();
    if !settings.command.is_empty() {
        entry.insert("command", value(settings.command.iter().collect::<Array>()));
    }
    if !settings.env.is_empty() {
        entry
            .insert("env", value(settings.env.iter().map(|(k, v)| (k.as_str(), v)).collect::<InlineTable>()));
    }
    if let Some(url) = &settings.url {
        entry.insert("url", value(url.as_str()));
    }
    if !settings.headers.is_empty() {
        entry.insert(
            "headers",
            value(settings.headers.iter().map(|(k, v)| (k.as_str(), v)).collect::<InlineTable>()),
        );
    }
    if let Some(ms) = settings.timeout_ms {
        entry.insert("timeout_ms", value(i64::try_from(ms).unwrap_or(i64::MAX)));
    }
    servers.insert(name, Item::Table(entry));
    write(path, &document)
}

/// Removes `[mcp.NAME]`.
pub fn remove_server(path: &Path, name: &str) -> Result<(), ConfigEditError> {
    let missing = || ConfigEditError::Missing { name: name.to_owned(), path: path.to_owned() };
    if !path.exists() {
        return Err(missing());
    }
    let mut document = read(path)?;
    let Some(servers) = document.get_mut("mcp").and_then(Item::as_table_like_mut) else {
        return Err(missing());
    };
    if servers.remove(name).is_none() {
        return Err(missing());
    }
    if servers.is_empty() {
        document.remove("mcp");
    }
    write(path, &document)
}

fn read(path: &Path) -> Result<DocumentMut, ConfigEditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(ConfigEditError::Read { path: path.to_owned(), source }),
    };
    text.parse::<DocumentMut>()
        .map_err(|e| ConfigEditError::Parse { path: path.to_owned(), message: e.message().to_owned() })
}

/// The `mcp` table, created implicit (only `[mcp.NAME]` headers appear) when absent.
fn servers_table<'a>(
    document: &'a mut DocumentMut,
    path: &Path,
) -> Result<&'a mut dyn toml_edit::TableLike, ConfigEditError> {
    if !document.contains_key("mcp") {
        let mut table = Table::new();
        table.set_implicit(true);
        document.insert("mcp", Item::Table(table));
    }
    document
        .get_mut("mcp")
        .and_then(Item::as_table_like_mut)
        .ok_or_else(|| ConfigEditError::NotATable { path: path.to_owned() })
}

fn write(path: &Path, document: &DocumentMut) -> Result<(), ConfigEditError> {
    let failed = |source| ConfigEditError::Write { path: path.to_owned(), source };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let temp = path.with_extension(format!("toml.{}.tmp", std::process::id()));
    std::fs::write(&temp, document.to_string()).map_err(failed)?;
    // The file keeps its mode (a config with header secrets may be 0600).
    if let Ok(existing) = std::fs::metadata(path) {
        let mode = existing.permissions().mode();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(mode)).map_err(failed)?;
    }
    std::fs::rename(&temp, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove_keep_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let original = "# my config\nmodel = \"a/b\" # the model\n\n[mcp.old]\ncommand = [\"x\"] # keep\n";
        std::fs::write(&path, original).unwrap();
        let mut remote = McpSettings::remote("https://mcp.example.com/mcp");
        remote.headers.insert("X-Key".into(), "${KEY}".into());
        add_server(&path, "web", &remote).unwrap();
        let added = std::fs::read_to_string(&path).unwrap();
        assert!(added.starts_with(original), "{added}");
        assert!(added.contains("[mcp.web]\nurl = \"https://mcp.example.com/mcp\""), "{added}");
        let parsed: toml::Table = toml::from_str(&added).unwrap();
        assert_eq!(parsed["mcp"]["web"]["headers"]["X-Key"].as_str(), Some("${KEY}"));
        assert!(matches!(add_server(&path, "web", &remote), Err(ConfigEditError::Exists { .. })));
        remove_server(&path, "web").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), original);
        assert!(matches!(remove_server(&path, "web"), Err(ConfigEditError::Missing { .. })));
    }

    #[test]
    fn a_new_file_gets_just_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("config.toml");
        add_server(&path, "fs", &McpSettings::local(vec!["npx".into(), "server".into()])).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "[mcp.fs]\ncommand = [\"npx\", \"server\"]\n");
        remove_server(&path, "fs").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
