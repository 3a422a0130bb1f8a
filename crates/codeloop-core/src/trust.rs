//! Project trust (DESIGN.md §5a): which repositories' own config the user has accepted.
//!
//! A record is the project's canonical root plus a hash of every file the project layer reads, every byte
//! of them (DESIGN.md §5c "Trust covers the whole project config"). A trusted project applies all of its
//! keys, the allow-listed ones included, so any change — a pull that adds an MCP server, an instructions
//! entry outside the project or an allow-all rule, or a command that rewrites `[permission]` — means
//! untrusted again, and is asked about before it counts.
//!
//! Owns: the trust file in the user's config dir (`trusted.toml`), written atomically with mode 0600.
//! Must not: decide what a project's config may do; [`crate::config`] applies the records.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One trusted project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustRecord {
    /// The project's canonical root.
    pub path: PathBuf,
    /// `sha256:` of the project's config files, as they were when trusted.
    pub hash: String,
    /// When it was trusted (ms since the epoch).
    pub trusted_at: i64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    #[serde(default)]
    project: Vec<TrustRecord>,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot read the trust records in {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the trust records in {path} are not valid TOML ({message}); fix or delete the file")]
    Invalid { path: PathBuf, message: String },
    #[error("cannot save the trust records to {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// The user's trust records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

/// What the records say about one project's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustState {
    Trusted,
    /// Never trusted (or revoked).
    Untrusted,
    /// Trusted once, but its config files changed since.
    Changed,
}

impl TrustStore {
    /// The records file `trusted.toml` inside the user's config dir.
    pub fn in_config_dir(config_dir: &Path) -> Self {
        Self { path: config_dir.join("trusted.toml") }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn list(&self) -> Result<Vec<TrustRecord>, TrustError> {
        Ok(self.read()?.project)
    }

    /// The state of `root` whose config currently hashes to `hash`.
    pub fn state(&self, root: &Path, hash: &str) -> Result<TrustState, TrustError> {
        let root = canonical(root);
        let file = self.read()?;
        Ok(match file.project.iter().find(|r| r.path == root) {
            Some(record) if record.hash == hash => TrustState::Trusted,
            Some(_) => TrustState::Changed,
            None => TrustState::Untrusted,
        })
    }

    /// Trusts `root` with its config as it is now (`hash`), replacing an older record.
    pub fn trust(&self, root: &Path, hash: &str, now_ms: i64) -> Result<TrustRecord, TrustError> {
        let root = canonical(root);
        let mut file = self.read()?;
        file.project.retain(|r| r.path != root);
        let record = TrustRecord { path: root, hash: hash.to_owned(), trusted_at: now_ms };
        file.project.push(record.clone());
        self.write(&file)?;
        Ok(record)
    }

    /// Forgets `root`; false when it was not trusted.
    pub fn revoke(&self, root: &Path) -> Result<bool, TrustError> {
        let root = canonical(root);
        let mut file = self.read()?;
        let before = file.project.len();
        file.project.retain(|r| r.path != root);
        if file.project.len() == before {
            return Ok(false);
        }
        self.write(&file)?;
        Ok(true)
    }

    fn read(&self) -> Result<TrustFile, TrustError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustFile::default()),
            Err(source) => return Err(TrustError::Read { path: self.path.clone(), source }),
        };
        toml::from_str(&text)
            .map_err(|e| TrustError::Invalid { path: self.path.clone(), message: e.to_string() })
    }

    fn write(&self, file: &TrustFile) -> Result<(), TrustError> {
        let err = |source| TrustError::Write { path: self.path.clone(), source };
        let text = toml::to_string(file).map_err(|e| err(std::io::Error::other(e)))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(err)?;
        // Written next to the target and renamed over it: a crash leaves the old or the new records.
        let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
        temp.write_all(text.as_bytes()).map_err(err)?;
        temp.as_file().sync_all().map_err(err)?;
        temp.persist(&self.path).map_err(|e| err(e.error))?;
        Ok(())
    }
}

/// The hash a trust record keeps: every file the project layer reads (`codeloop.toml`, `.codeloop/`
/// config, imported `.claude/settings*.json`), by its path relative to `root` and its whole contents, in
/// the order given. A file that cannot be read hashes as its error, so it never matches a trusted state.
pub fn config_hash(root: &Path, files: &[PathBuf]) -> String {
    let mut hasher = Sha256::new();
    for file in files {
        let name = file.strip_prefix(root).unwrap_or(file);
        let name = name.to_string_lossy();
        // Lengths first, so no two different lists of (name, contents) feed the same bytes.
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        match std::fs::read(file) {
            Ok(bytes) => {
                hasher.update((bytes.len() as u64).to_le_bytes());
                hasher.update(&bytes);
            }
            Err(e) => {
                hasher.update(u64::MAX.to_le_bytes());
                hasher.update(e.to_string().as_bytes());
            }
        }
    }
    let hex: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The hash of a project with no config of its own.
pub fn empty_config_hash() -> String {
    config_hash(Path::new(""), &[])
}

/// The canonical form of a project root (the path itself when it cannot be resolved).
pub fn canonical(root: &Path) -> PathBuf {
    root.canonicalize().unwrap_or_else(|_| root.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_keyed_by_canonical_root_and_hash() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::in_config_dir(&dir.path().join("config"));
        let project = dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let hash = empty_config_hash();
        assert_eq!(store.state(&project, &hash).unwrap(), TrustState::Untrusted);
        store.trust(&project.join("."), &hash, 1).unwrap();
        assert_eq!(store.state(&project, &hash).unwrap(), TrustState::Trusted);
        assert_eq!(store.state(&project, "sha256:other").unwrap(), TrustState::Changed);
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.revoke(&project).unwrap());
        assert!(!store.revoke(&project).unwrap());
        assert_eq!(store.state(&project, &hash).unwrap(), TrustState::Untrusted);
    }

    #[test]
    fn every_byte_of_every_file_counts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let file = root.join("codeloop.toml");
        std::fs::write(&file, "model = \"a/b\"\n").unwrap();
        let files = vec![file.clone()];
        let before = config_hash(root, &files);
        assert_eq!(config_hash(root, &files), before);
        std::fs::write(&file, "model = \"a/b\"\n[permission]\nsandbox_escalate = \"allow\"\n").unwrap();
        assert_ne!(config_hash(root, &files), before, "an allow-listed key changes the hash");
        std::fs::write(&file, "model = \"a/b\"\n# comment\n").unwrap();
        assert_ne!(config_hash(root, &files), before, "any byte changes it");
        std::fs::write(&file, "model = \"a/b\"\n").unwrap();
        let moved = root.join(".codeloop/config.toml");
        std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
        std::fs::rename(&file, &moved).unwrap();
        assert_ne!(config_hash(root, &[moved]), before, "the same text in another file is another config");
    }

    #[test]
    fn a_broken_records_file_is_an_error_not_trust() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trusted.toml"), "project = 3").unwrap();
        let store = TrustStore::in_config_dir(dir.path());
        let err = store.state(dir.path(), "x").unwrap_err().to_string();
        assert!(err.contains("trusted.toml"), "{err}");
    }
}
