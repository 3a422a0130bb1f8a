//! Which store and which event ids an engine gets (DESIGN.md §5, §5a, §5b): the store URL precedence
//! (`serve --store` > `CODELOOP_DATABASE_URL` > `[store] url` > SQLite in the data dir) and the bus that
//! relays events through a shared store's event log.
//! Owns: resolving and opening the store, building the relayed bus. Must not: read the process
//! environment directly (it goes through the engine's [`EnvLookup`]).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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

/// Events that may wait for the shared log before streamed deltas are dropped.
pub(crate) const MAX_WAITING_EVENTS: usize = 4_096;

/// A bus whose events go through the store's event log: published payloads are appended there, and
/// every worker's events come back with their store ids.
pub(crate) fn relayed_bus(
    log: &dyn codeloop_store::EventLog,
    channel_capacity: usize,
    replay_capacity: usize,
) -> Result<Bus, StoreError> {
    let (outbox, events) = tokio::sync::mpsc::unbounded_channel::<String>();
    let pending = Arc::new(AtomicUsize::new(0));
    let waiting = pending.clone();
    let dropping = AtomicBool::new(false);
    let relay: crate::bus::Relay = Box::new(move |payload| {
        // While the database is away, events wait in memory. Streamed deltas are only a live view (the
        // parts they build are stored whole), so past the bound they are dropped; nothing else is.
        let backlog = waiting.load(Ordering::Relaxed);
        if matches!(payload, EventPayload::PartDelta { .. }) && backlog >= MAX_WAITING_EVENTS {
            if !dropping.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    backlog,
                    "the store's event log is behind: live text deltas are dropped until it catches up"
                );
            }
            return;
        }
        if backlog < MAX_WAITING_EVENTS / 2 {
            dropping.store(false, Ordering::Relaxed);
        }
        match serde_json::to_string(&payload) {
            Ok(json) => {
                if outbox.send(json).is_ok() {
                    waiting.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(error) => tracing::warn!(%error, "an event could not be encoded; it is not published"),
        }
    });
    let bus = Bus::relayed(channel_capacity, replay_capacity, relay);
    let target = bus.clone();
    let newest = log.relay(
        codeloop_store::Outbox { events, pending },
        Box::new(move |id, json| match serde_json::from_str::<EventPayload>(&json) {
            Ok(payload) => target.deliver(id, payload),
            Err(error) => tracing::warn!(id, %error, "an event from the store could not be read; skipped"),
        }),
    )?;
    bus.start_after(newest);
    Ok(bus)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use codeloop_types::PartId;

    use super::*;

    /// A shared log whose database is away: nothing it is handed is ever written.
    #[derive(Default)]
    struct Away(Mutex<Option<codeloop_store::Outbox>>);

    impl codeloop_store::EventLog for Away {
        fn relay(
            &self,
            outbox: codeloop_store::Outbox,
            _: codeloop_store::EventSink,
        ) -> codeloop_store::Result<u64> {
            *self.0.lock().unwrap() = Some(outbox);
            Ok(0)
        }
        fn events_between(&self, _: u64, _: u64) -> codeloop_store::Result<Option<Vec<(u64, String)>>> {
            Ok(Some(Vec::new()))
        }
        fn recent_events(&self, _: u64, _: usize) -> codeloop_store::Result<Vec<(u64, String)>> {
            Ok(Vec::new())
        }
    }

    fn delta(n: usize) -> EventPayload {
        EventPayload::PartDelta {
            session_id: "ses_a".into(),
            message_id: "msg_a".into(),
            part_id: PartId::from(format!("prt_{n}")),
            field: "text".into(),
            delta: "word ".into(),
        }
    }

    #[test]
    fn while_the_log_is_away_deltas_past_the_bound_are_dropped_and_nothing_else() {
        let log = Away::default();
        let bus = relayed_bus(&log, 16, 0).unwrap();
        for n in 0..3 * MAX_WAITING_EVENTS {
            bus.publish(delta(n));
            if n % 100 == 0 {
                bus.publish(EventPayload::SessionCompacted { session_id: format!("ses_{n}").into() });
            }
        }
        let mut outbox = log.0.lock().unwrap().take().unwrap();
        let mut waiting = Vec::new();
        while let Ok(json) = outbox.events.try_recv() {
            waiting.push(json);
        }
        let kept_deltas = waiting.iter().filter(|j| j.contains("message.part.delta")).count();
        let others = waiting.len() - kept_deltas;
        assert_eq!(others, 3 * MAX_WAITING_EVENTS / 100 + 1, "every other event waits for the log");
        assert!(kept_deltas <= MAX_WAITING_EVENTS, "{kept_deltas} deltas held in memory");
        assert_eq!(outbox.pending.load(Ordering::Relaxed), waiting.len());
    }
}
