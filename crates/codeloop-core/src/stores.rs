//! Which store and which event ids an engine gets (DESIGN.md §5, §5a, §5b): the store URL precedence
//! (`serve --store` > `CODELOOP_DATABASE_URL` > `[store] url` > SQLite in the data dir) and the bus that
//! relays events through a shared store's event log.
//! Owns: resolving and opening the store, building the relayed bus. Must not: read the process
//! environment directly (it goes through the engine's [`EnvLookup`]).

use std::path::Path;
use std::sync::Arc;

use codeloop_store::{Store, StoreError, StoreUrl};
use codeloop_types::EventPayload;

use crate::Bus;
use crate::config::Config;
use crate::models::EnvLookup;

/// The environment variable naming the store URL; wins over `[store] url`, loses to `serve --store`.
pub const DATABASE_URL_ENV: &str = "CODELOOP_DATABASE_URL";

/// Which store the engine opens (DESIGN.md §5a: `--store` > `CODELOOP_DATABASE_URL` > `[store] url` >
/// SQLite in the data dir).
#[derive(Clone, Default)]
pub enum StoreChoice {
    /// `CODELOOP_DATABASE_URL` (read through [`crate::EngineOptions::env`]), else `[store] url`, else SQLite.
    #[default]
    FromConfig,
    /// A URL given on the command line (`serve --store`): wins over the environment and the config.
    Url(String),
    /// A store opened by the caller (tests, embedders).
    Opened(Arc<dyn Store>),
}

/// Opens the store `choice` names (migrating it and recovering dead runs); SQLite lives in `data_dir`.
pub fn open_store(
    choice: &StoreChoice,
    data_dir: &Path,
    env: &EnvLookup,
    config: &Config,
) -> Result<Arc<dyn Store>, StoreError> {
    let url = match choice {
        StoreChoice::Opened(store) => return Ok(store.clone()),
        StoreChoice::Url(url) => Some(url.clone()),
        StoreChoice::FromConfig => {
            env(DATABASE_URL_ENV).filter(|url| !url.trim().is_empty()).or_else(|| config.store.url.clone())
        }
    };
    codeloop_store::open(&StoreUrl::parse(url.as_deref())?, data_dir, config.store.lease())
}

/// Where event ids come from (DESIGN.md §5b).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum EventIds {
    /// Counted by this process: a client that reconnects to a restarted process gets `resync`.
    #[default]
    Local,
    /// Handed out by a shared store (PostgreSQL) in commit order: every worker's bus carries every
    /// worker's events with the same ids, so SSE replay works on any worker. SQLite stays `Local`.
    Store,
}

/// A bus whose events go through the store's event log: published payloads are appended there, and
/// every worker's events come back with their store ids.
pub(crate) fn relayed_bus(
    log: &dyn codeloop_store::EventLog,
    channel_capacity: usize,
    replay_capacity: usize,
) -> Result<Bus, StoreError> {
    let (outbox, pending) = tokio::sync::mpsc::unbounded_channel::<String>();
    let relay: crate::bus::Relay = Box::new(move |payload| match serde_json::to_string(&payload) {
        Ok(json) => {
            let _ = outbox.send(json);
        }
        Err(error) => tracing::warn!(%error, "an event could not be encoded; it is not published"),
    });
    let bus = Bus::relayed(channel_capacity, replay_capacity, relay);
    let target = bus.clone();
    let newest = log.relay(
        pending,
        Box::new(move |id, json| match serde_json::from_str::<EventPayload>(&json) {
            Ok(payload) => target.deliver(id, payload),
            Err(error) => tracing::warn!(id, %error, "an event from the store could not be read; skipped"),
        }),
    )?;
    bus.start_after(newest);
    Ok(bus)
}
