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
    /// A pooled connection that is still open: ones the server closed (a restart, a failover, an idle
    /// timeout) are thrown away rather than handed out to fail.
    pub(crate) async fn client(&self) -> Result<Client> {
        loop {
            let client = self.pool.get().await.map_err(|error| self.unavailable(&error))?;
            if !client.is_closed() {
                return Ok(client);
            }
            drop(deadpool_postgres::Object::take(client));
        }
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

/// True when `error` says the connection is gone (closed, or ended by the server: a restart, a
/// failover, an administrator): the statement never ran, and a fresh connection may.
pub(crate) fn connection_lost(error: &tokio_postgres::Error) -> bool {
    error.is_closed()
        || error.code().is_some_and(|code| {
            let code = code.code();
            // 57P01-57P03: admin or crash shutdown, cannot connect now; 08xxx: connection exceptions.
            code.starts_with("57P") || code.starts_with("08")
        })
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
    /// Lease renewals that succeeded, and leases lost, since the store opened.
    pub(crate) lease_renewals: std::sync::atomic::AtomicU64,
    pub(crate) leases_lost: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<codeloop_types::SessionId, String>> {
        codeloop_types::LockExt::locked(&self.held)
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
