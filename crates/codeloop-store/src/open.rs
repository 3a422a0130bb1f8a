//! Choosing and opening a store from a URL (DESIGN.md §5, §5b): SQLite in the data dir by default,
//! PostgreSQL for `postgres://…` / `postgresql://…`.
//!
//! Owns: parsing the store URL and opening the right store (its password hidden in every message).
//! Must not: decide which URL wins (`--store` > `CODELOOP_DATABASE_URL` > `[store] url` is the caller's
//! rule), or read the environment.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::pg::PgStore;
use crate::redact::redact;
use crate::{Result, SqliteStore, Store, StoreError};

/// Where the durable state lives.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `<data_dir>/codeloop.db`.
    Sqlite,
    /// A PostgreSQL connection URL (`postgres://user:password@host:port/db?options`).
    Postgres(String),
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite => f.write_str("Sqlite"),
            StoreUrl::Postgres(url) => write!(f, "Postgres({})", redact(url)),
        }
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite => f.write_str("SQLite in the data directory"),
            StoreUrl::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

impl StoreUrl {
    /// `None` or an empty string is SQLite in the data dir; `postgres://` and `postgresql://` are
    /// PostgreSQL; anything else is refused with what to write instead.
    pub fn parse(url: Option<&str>) -> Result<StoreUrl> {
        let Some(url) = url.map(str::trim).filter(|u| !u.is_empty()) else { return Ok(StoreUrl::Sqlite) };
        let scheme = url.split_once("://").map(|(scheme, _)| scheme.to_ascii_lowercase());
        match scheme.as_deref() {
            Some("postgres" | "postgresql") => Ok(StoreUrl::Postgres(url.to_owned())),
            Some("sqlite") if url.len() == "sqlite://".len() => Ok(StoreUrl::Sqlite),
            _ => Err(StoreError::InvalidUrl {
                url: redact(url),
                reason:
                    "unsupported store URL: use postgres://USER:PASSWORD@HOST:PORT/DATABASE, or leave it \
                         unset for SQLite in the data directory"
                        .into(),
            }),
        }
    }
}

/// Opens the store `url` names: SQLite in `data_dir`, or PostgreSQL with run leases of `lease`.
/// Both migrate and recover runs left open by a dead process before returning.
pub fn open(url: &StoreUrl, data_dir: &Path, lease: Duration) -> Result<Arc<dyn Store>> {
    match url {
        StoreUrl::Sqlite => Ok(Arc::new(SqliteStore::open(data_dir)?)),
        StoreUrl::Postgres(url) => Ok(Arc::new(PgStore::open(url, lease)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_choose_the_store_and_unknown_schemes_are_refused() {
        assert_eq!(StoreUrl::parse(None).unwrap(), StoreUrl::Sqlite);
        assert_eq!(StoreUrl::parse(Some("  ")).unwrap(), StoreUrl::Sqlite);
        assert_eq!(
            StoreUrl::parse(Some("postgresql://u@h/db")).unwrap(),
            StoreUrl::Postgres("postgresql://u@h/db".into())
        );
        let error = StoreUrl::parse(Some("mysql://u:hunter2@h/db")).unwrap_err().to_string();
        assert!(error.contains("postgres://"), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("postgres://u:hunter2@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db?password=hunter2&x=1"), "postgres://u@h/db?password=***&x=1");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert!(!format!("{:?}", StoreUrl::Postgres("postgres://u:pw@h/d".into())).contains("pw@"));
    }
}
