//! The server's own door (DESIGN.md §5c): `codeloop serve` always requires a bearer token. Without one
//! from the user it makes one; either way it writes `{"url", "token", "pid"}` to `$DATA_DIR/server/<port>.json`
//! (0600, in a 0700 dir; the data dir is masked from tools), so clients on the same machine (`run
//! --attach`, `tui --attach`, `codeloop web`) find it there while no tool's process can.
//!
//! Owns: making the token, the server file (written, found, removed) and how a client picks its token.
//! Must not: check requests (that is `codeloop_server`'s guard) or decide who may bind where.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// Environment variable holding the server token (both for `serve` and its clients).
pub const TOKEN_ENV: &str = "CODELOOP_SERVER_TOKEN";

/// Bytes of randomness in a generated token (hex-encoded: 64 characters).
const TOKEN_BYTES: usize = 32;

/// Where a running server left its address and token for clients on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerFile {
    pub url: String,
    pub token: String,
    pub pid: u32,
}

/// A fresh random token from the kernel's CSPRNG.
pub fn generate_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("cannot read /dev/urandom to make a server token: pass one in CODELOOP_SERVER_TOKEN")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// `$DATA_DIR/server/<port>.json`.
pub fn server_file_path(data_dir: &Path, port: u16) -> PathBuf {
    data_dir.join("server").join(format!("{port}.json"))
}

/// Writes the server file (0600, its dir 0700), replacing one a dead server left.
pub fn write_server_file(path: &Path, file: &ServerFile) -> anyhow::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let text = serde_json::to_string(file)?;
    // A new file next to the target, renamed over it: never a moment where the token is world-readable.
    let temp =
        dir.join(format!(".{}.{}.tmp", path.file_name().unwrap_or_default().to_string_lossy(), file.pid));
    let _ = std::fs::remove_file(&temp);
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("cannot write the server token file {}", temp.display()))?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.sync_all())
        .with_context(|| format!("cannot write the server token file {}", temp.display()))?;
    std::fs::rename(&temp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Removes the server file if it is still this process's (a newer server on the port keeps its own).
pub fn remove_server_file(path: &Path) {
    if read_server_file(path).is_some_and(|f| f.pid == std::process::id()) {
        let _ = std::fs::remove_file(path);
    }
}

fn read_server_file(path: &Path) -> Option<ServerFile> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The token a client uses for `url`: the one the server listening there left in the data dir (a live
/// server of this machine on a loopback URL whose port it names), else `CODELOOP_SERVER_TOKEN`.
pub fn client_token(url: &str, data_dir: Option<&Path>) -> Option<String> {
    if let Some(token) = data_dir.and_then(|dir| found_token(url, dir)) {
        return Some(token);
    }
    std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty())
}

fn found_token(url: &str, data_dir: &Path) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    let host = parsed.host_str()?;
    let loopback = host == "localhost"
        || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    let port = parsed.port_or_known_default()?;
    let file = read_server_file(&server_file_path(data_dir, port))?;
    // A file a dead server left says nothing of what listens on the port now.
    if !Path::new("/proc").join(file.pid.to_string()).exists() {
        return None;
    }
    let theirs = reqwest::Url::parse(&file.url).ok()?;
    (theirs.port_or_known_default() == Some(port)).then_some(file.token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn generated_tokens_are_long_and_differ() {
        let (a, b) = (generate_token().unwrap(), generate_token().unwrap());
        assert_eq!(a.len(), 2 * TOKEN_BYTES);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn the_server_file_is_private_and_found_by_port() {
        let data = tempfile::tempdir().unwrap();
        let path = server_file_path(data.path(), 4321);
        let file =
            ServerFile { url: "http://127.0.0.1:4321".into(), token: "t0k".into(), pid: std::process::id() };
        write_server_file(&path, &file).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(found_token("http://127.0.0.1:4321/", data.path()).as_deref(), Some("t0k"));
        assert_eq!(found_token("http://localhost:4321", data.path()).as_deref(), Some("t0k"));
        assert_eq!(found_token("http://127.0.0.1:4322", data.path()), None, "another port");
        assert_eq!(found_token("http://example.com:4321", data.path()), None, "not this machine");
        remove_server_file(&path);
        assert!(!path.exists());
    }

    #[test]
    fn another_servers_file_is_left_alone() {
        let data = tempfile::tempdir().unwrap();
        let path = server_file_path(data.path(), 1);
        let file = ServerFile { url: "http://127.0.0.1:1".into(), token: "t".into(), pid: u32::MAX };
        write_server_file(&path, &file).unwrap();
        remove_server_file(&path);
        assert!(path.exists());
    }
}
