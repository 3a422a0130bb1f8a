//! The connection side of the PostgreSQL store: the pool handle async work captures, the private runtime
//! the driver runs on, the bridge from the synchronous [`crate::Store`] calls to it, and error texts that
//! carry the server's message (and, for TLS failures, what to change) and never the password.
//! Owns: those pieces. Must not: run queries of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Client, Pool};
use tokio::runtime::Handle;

use super::tls::{self, Connector};
use crate::{Result, StoreError};

/// A pool handle that async store work captures by value.
#[derive(Clone)]
pub(crate) struct Db {
    pub(crate) pool: Pool,
    /// The URL with its password hidden.
    pub(crate) url: Arc<str>,
    pub(crate) password: Option<Arc<str>>,
}

impl Db {
    pub(crate) async fn client(&self) -> Result<Client> {
        self.pool.get().await.map_err(|error| self.unavailable(&error))
    }

    /// A failed connection as an error value: a TLS one with what to change in the URL.
    fn unavailable(&self, error: &(dyn std::error::Error + 'static)) -> StoreError {
        let (url, reason) = (self.url.to_string(), scrub(&with_causes(error), self.password.as_deref()));
        match tls::advice(error) {
            Some(advice) => StoreError::Tls { url, reason, advice: advice.to_owned() },
            None => StoreError::Unavailable { url, reason },
        }
    }
}

/// The driver's error with the server's message (its `Display` alone says only "db error").
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{}: {} ({detail})", db.severity(), db.message()),
            None => format!("{}: {}", db.severity(), db.message()),
        },
        None => with_causes(error),
    }
}

/// An error and its chain of causes on one line ("error connecting to server: Connection refused").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(crate) fn scrub(text: &str, password: Option<&str>) -> String {
    match password {
        Some(password) => text.replace(password, "***"),
        None => text.to_owned(),
    }
}

/// What the store and its leases share. The runtime stops when the last of them is gone.
pub(crate) struct Shared {
    pub(crate) db: Db,
    /// For connections outside the pool (the event listener).
    pub(crate) pg_config: tokio_postgres::Config,
    /// TLS as the URL's `sslmode` asks, for those connections too.
    pub(crate) tls: Connector,
    pub(crate) handle: Handle,
    pub(crate) lease: Duration,
    pub(crate) runtime: Option<tokio::runtime::Runtime>,
    /// The leases this store holds: session → owner token. Writes to these sessions are fenced.
    pub(crate) held: std::sync::Mutex<std::collections::HashMap<codeloop_types::SessionId, String>>,
}

impl Shared {
    pub(crate) fn held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<codeloop_types::SessionId, String>> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Shared {
    pub(crate) async fn client(&self) -> Result<Client> {
        self.db.client().await
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Never blocks, so it is safe wherever the last handle is dropped (an async test's end included).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `future` on the store's runtime and waits for it on this thread, whatever runtime this thread
/// belongs to. Must not be called from the store's own runtime.
pub(crate) fn block_on<T: Send + 'static>(
    handle: &Handle,
    future: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(future.await);
    });
    rx.recv().unwrap_or_else(|_| Err(StoreError::Interrupted("the PostgreSQL store has shut down".into())))
}
