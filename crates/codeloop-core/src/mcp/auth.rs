//! Sign-in records of remote MCP servers (DESIGN.md §5e): the data dir's `mcp-auth/` (0700), one JSON
//! file per server and issuer (0600), keyed inside by issuer and resource. Tokens live only here:
//! never in a config file, never in a log (every `Debug` here redacts them).
//!
//! Owns: reading, writing and forgetting records, and the [`CredentialStore`] rmcp's OAuth machinery
//! refreshes through (a file lock keeps two codeloop processes from spending one refresh token twice).
//! Must not: talk to any server.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use codeloop_types::LockExt;
use oauth2::TokenResponse as _;
use rmcp::transport::auth::{
    AuthError, AuthorizationMetadata, CredentialRefreshGuard, CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};

/// A token with less left than this is refreshed before it is used (DESIGN.md §5e).
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// The sign-in of one server at one issuer.
#[derive(Clone, Serialize, Deserialize)]
pub struct AuthRecord {
    pub server: String,
    /// The authorization server (`iss`); empty when its metadata named none.
    pub issuer: String,
    /// The protected resource: the server's configured URL without a fragment.
    pub resource: String,
    pub client_id: String,
    /// A dynamically registered client's secret (a configured client's stays in its environment
    /// variable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub redirect_uri: String,
    /// The authorization server's metadata, so a run refreshes without discovering again.
    pub metadata: AuthorizationMetadata,
    #[serde(default)]
    pub credentials: Option<StoredCredentials>,
}

impl std::fmt::Debug for AuthRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthRecord")
            .field("server", &self.server)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "[REDACTED]"))
            .field("credentials", &self.credentials.as_ref().map(|_| "[REDACTED]"))
            .finish()
    }
}

/// What a listing says about a server's sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
#[serde(rename_all = "kebab-case")]
pub enum AuthState {
    /// No sign-in involved (a local server, one that does not ask, or `oauth = false`).
    None,
    SignedIn,
    /// A sign-in whose access token has run out (a run refreshes it when it can).
    Expired,
    NeedsLogin,
}

impl AuthState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl AuthRecord {
    /// How long the access token has left; `None` when the server did not say (or there is none).
    pub fn remaining(&self) -> Option<Duration> {
        let credentials = self.credentials.as_ref()?;
        let token = credentials.token_response.as_ref()?;
        let lifetime = token.expires_in()?;
        let received = credentials.token_received_at?;
        let elapsed = now_secs().saturating_sub(received);
        Some(lifetime.saturating_sub(Duration::from_secs(elapsed)))
    }

    /// The saved access token (for a transport that sends it by hand).
    pub fn access_token(&self) -> Option<String> {
        use oauth2::TokenResponse as _;
        let response = self.credentials.as_ref()?.token_response.as_ref()?;
        Some(response.access_token().secret().clone())
    }

    pub fn has_token(&self) -> bool {
        self.credentials.as_ref().is_some_and(|c| c.token_response.is_some())
    }

    pub fn state(&self) -> AuthState {
        if !self.has_token() {
            return AuthState::NeedsLogin;
        }
        match self.remaining() {
            Some(left) if left.is_zero() => AuthState::Expired,
            _ => AuthState::SignedIn,
        }
    }

    /// Needs a refresh before use: less than [`REFRESH_MARGIN`] left.
    pub fn needs_refresh(&self) -> bool {
        self.remaining().is_some_and(|left| left < REFRESH_MARGIN)
    }
}

pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The `resource` of a server URL: the URL without its fragment (RFC 8707).
pub fn resource_of(url: &str) -> String {
    match url.split_once('#') {
        Some((resource, _)) => resource.to_owned(),
        None => url.to_owned(),
    }
}

/// `mcp-auth/` in the data dir.
#[derive(Debug, Clone)]
pub struct AuthStore {
    dir: PathBuf,
}

impl AuthStore {
    pub fn new(data_dir: &Path) -> Self {
        Self { dir: data_dir.join("mcp-auth") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `server` at `issuer`: `<server>.<first 16 hex of sha256(issuer)>.json`.
    pub fn path_for(&self, server: &str, issuer: &str) -> PathBuf {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(issuer.as_bytes());
        let hash: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{}.{hash}.json", file_stem(server)))
    }

    /// Every record of `server` (any issuer, any resource).
    pub fn records(&self, server: &str) -> Vec<(PathBuf, AuthRecord)> {
        let prefix = format!("{}.", file_stem(server));
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !(name.starts_with(&prefix) && name.ends_with(".json")) {
                continue;
            }
            let path = entry.path();
            match read_record(&path) {
                // Names are sanitised, so two servers could share a stem: the record says whose it is.
                Ok(record) if record.server == server => out.push((path, record)),
                Ok(_) => {}
                Err(e) => tracing::debug!("skipping unreadable sign-in record {}: {e}", path.display()),
            }
        }
        out
    }

    /// The newest record of `server` for `resource`.
    pub fn find(&self, server: &str, resource: &str) -> Option<(PathBuf, AuthRecord)> {
        self.records(server)
            .into_iter()
            .filter(|(_, r)| r.resource == resource)
            .max_by_key(|(_, r)| r.credentials.as_ref().and_then(|c| c.token_received_at).unwrap_or(0))
    }

    /// Writes a record (the dir 0700, the file 0600, replaced atomically).
    pub fn save(&self, path: &Path, record: &AuthRecord) -> std::io::Result<()> {
        self.ensure_dir()?;
        let json = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&temp)?;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            file.write_all(&json)?;
            file.sync_all()?;
        }
        std::fs::rename(&temp, path)
    }

    /// Forgets every sign-in of `server`; how many records there were.
    pub fn forget(&self, server: &str) -> std::io::Result<usize> {
        let records = self.records(server);
        for (path, _) in &records {
            std::fs::remove_file(path)?;
        }
        Ok(records.len())
    }

    fn ensure_dir(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
    }
}

fn read_record(path: &Path) -> std::io::Result<AuthRecord> {
    let bytes = std::fs::read(path)?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// A server name in the characters a file name takes everywhere.
fn file_stem(server: &str) -> String {
    server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// One record as rmcp's credential store: reads come from memory, every save goes to the file.
#[derive(Clone)]
pub struct FileCredentials {
    store: AuthStore,
    path: PathBuf,
    record: Arc<Mutex<AuthRecord>>,
}

impl FileCredentials {
    pub fn new(store: AuthStore, path: PathBuf, record: AuthRecord) -> Self {
        Self { store, path, record: Arc::new(Mutex::new(record)) }
    }

    pub fn record(&self) -> AuthRecord {
        self.record.locked().clone()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes what another sign-in saved (a step-up's wider token): the live connection's next request
    /// uses it.
    pub fn replace(&self, record: AuthRecord) {
        *self.record.locked() = record;
    }

    async fn write(&self, record: AuthRecord) -> Result<(), AuthError> {
        let (store, path) = (self.store.clone(), self.path.clone());
        tokio::task::spawn_blocking(move || store.save(&path, &record))
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(|e| {
                AuthError::CredentialStoreError(format!("cannot write {}: {e}", self.path.display()))
            })
    }
}

#[async_trait::async_trait]
impl CredentialStore for FileCredentials {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        Ok(self.record.locked().credentials.clone())
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let record = {
            let mut record = self.record.locked();
            record.credentials = Some(credentials);
            record.clone()
        };
        self.write(record).await
    }

    async fn clear(&self) -> Result<(), AuthError> {
        let record = {
            let mut record = self.record.locked();
            record.credentials = None;
            record.clone()
        };
        self.write(record).await
    }

    /// Another codeloop process may refresh the same token: hold a lock on `mcp-auth/` itself through
    /// the refresh (no lock files beside the records), and read what it saved first (a rotated refresh
    /// token is spent only once).
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let path = self.path.clone();
        let store = self.store.clone();
        let locked =
            tokio::task::spawn_blocking(move || -> std::io::Result<(std::fs::File, Option<AuthRecord>)> {
                store.ensure_dir()?;
                let lock = std::fs::File::open(store.dir())?;
                lock.lock()?;
                Ok((lock, read_record(&path).ok()))
            })
            .await
            .map_err(|e| AuthError::CredentialStoreError(e.to_string()))?
            .map_err(|e| {
                AuthError::CredentialStoreError(format!("cannot lock {}: {e}", self.store.dir().display()))
            })?;
        let (lock, on_disk) = locked;
        if let Some(on_disk) = on_disk {
            let mut record = self.record.locked();
            if on_disk.client_id == record.client_id && on_disk.credentials.is_some() {
                record.credentials = on_disk.credentials;
            }
        }
        Ok(Some(CredentialRefreshGuard::new(lock)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(server: &str, issuer: &str) -> AuthRecord {
        AuthRecord {
            server: server.into(),
            issuer: issuer.into(),
            resource: "http://127.0.0.1:1/mcp".into(),
            client_id: "client".into(),
            client_secret: Some("shh".into()),
            redirect_uri: "http://127.0.0.1:2/callback".into(),
            metadata: AuthorizationMetadata::default(),
            credentials: None,
        }
    }

    #[test]
    fn records_are_private_files_one_per_server_and_issuer() {
        let data = tempfile::tempdir().unwrap();
        let store = AuthStore::new(data.path());
        let a = store.path_for("web", "https://as.one");
        let b = store.path_for("web", "https://as.two");
        assert_ne!(a, b);
        store.save(&a, &record("web", "https://as.one")).unwrap();
        store.save(&b, &record("web", "https://as.two")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&a), 0o600);
        assert_eq!(store.records("web").len(), 2);
        assert!(store.find("web", "http://127.0.0.1:1/mcp").is_some());
        assert!(store.find("web", "http://elsewhere/mcp").is_none());
        assert!(store.records("other").is_empty());
        assert_eq!(store.forget("web").unwrap(), 2);
        assert!(store.records("web").is_empty());
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let shown = format!("{:?}", record("web", "x"));
        assert!(!shown.contains("shh"), "{shown}");
    }

    #[test]
    fn the_resource_is_the_url_without_its_fragment() {
        assert_eq!(resource_of("https://x/mcp#part"), "https://x/mcp");
        assert_eq!(resource_of("https://x/mcp"), "https://x/mcp");
    }
}

#[cfg(test)]
mod authstate_text {
    use super::AuthState;
    use strum::VariantArray as _;

    #[test]
    fn the_text_is_the_serialized_name() {
        for value in AuthState::VARIANTS {
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
    }
}
