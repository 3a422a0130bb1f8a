//! The shared event log (DESIGN.md §5b "events across workers"): an `event` table plus LISTEN/NOTIFY.
//!
//! Appending: a task drains the worker's outbox and writes each batch in one transaction that holds an
//! advisory lock until commit, so ids (a sequence) become visible strictly in id order, and notifies.
//! Reading: a dedicated connection LISTENs; on each notification (and every second, in case one was
//! missed while reconnecting) the reader fetches the rows after the last id it delivered. Pruning: rows
//! older than [`RETENTION`] go, so a reconnecting client may replay that far back.
//! Owns: those three tasks on the store's runtime. Must not: parse the events (the caller's JSON).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_postgres::AsyncMessage;

use super::tls::Connector;
use super::{Db, PgStore};
use crate::{EventLog, EventSink, Outbox, Result};

/// How long events stay in the table.
pub(crate) const RETENTION: Duration = Duration::from_secs(3600);
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Events one replay reads back from the log at most; a client further behind refetches state.
const MAX_REPLAY: i64 = 50_000;
/// Events written per transaction at most.
const BATCH: usize = 512;
/// The reader looks for new rows at least this often, notification or not.
const POLL_EVERY: Duration = Duration::from_secs(1);
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Serialises appends across workers ("cl" "ev").
const APPEND_LOCK: i64 = 0x636c_6576;
const CHANNEL: &str = "codeloop_events";

impl EventLog for PgStore {
    fn relay(&self, outbox: Outbox, deliver: EventSink) -> Result<u64> {
        let newest = self.run(|db| async move {
            let client = db.client().await?;
            Ok(client.query_one("SELECT coalesce(max(id), 0) FROM event", &[]).await?.try_get::<_, i64>(0)?)
        })?;
        let handle = &self.shared.handle;
        handle.spawn(append(self.shared.db.clone(), outbox));
        let (config, tls) = (self.shared.pg_config.clone(), self.shared.tls.clone());
        handle.spawn(read(self.shared.db.clone(), config, tls, newest, deliver));
        handle.spawn(prune(self.shared.db.clone()));
        Ok(u64::try_from(newest).unwrap_or(0))
    }

    fn events_between(&self, after: u64, before: u64) -> Result<Option<Vec<(u64, String)>>> {
        let (after, before) = (clamp(after), clamp(before));
        self.run(move |db| async move {
            let client = db.client().await?;
            let oldest: Option<i64> = client.query_one("SELECT min(id) FROM event", &[]).await?.try_get(0)?;
            // Events right after `after` were pruned (or none were ever logged there).
            if oldest.is_none_or(|oldest| oldest > after.saturating_add(1))
                && before > after.saturating_add(1)
            {
                return Ok(None);
            }
            let stmt = client
                .prepare_cached(
                    "SELECT id, payload::text FROM event WHERE id > $1 AND id < $2 ORDER BY id LIMIT $3",
                )
                .await?;
            let rows = client.query(&stmt, &[&after, &before, &(MAX_REPLAY + 1)]).await?;
            if rows.len() > MAX_REPLAY as usize {
                return Ok(None);
            }
            Ok(Some(rows.iter().map(row_event).collect::<Result<Vec<_>>>()?))
        })
    }

    fn recent_events(&self, before: u64, limit: usize) -> Result<Vec<(u64, String)>> {
        let (before, limit) = (clamp(before), i64::try_from(limit).unwrap_or(i64::MAX));
        self.run(move |db| async move {
            let client = db.client().await?;
            let rows = client
                .query(
                    "SELECT id, payload FROM (SELECT id, payload::text FROM event WHERE id < $1
                                              ORDER BY id DESC LIMIT $2) AS recent ORDER BY id",
                    &[&before, &limit],
                )
                .await?;
            rows.iter().map(row_event).collect()
        })
    }
}

/// One event row: its id and JSON.
fn row_event(row: &tokio_postgres::Row) -> Result<(u64, String)> {
    Ok((u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0), row.try_get(1)?))
}

/// Ids are `bigint` in the table.
fn clamp(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

async fn append(db: Db, outbox: Outbox) {
    let Outbox { events: mut outbox, pending } = outbox;
    let mut batch = Vec::new();
    loop {
        if batch.is_empty() {
            match outbox.recv().await {
                Some(event) => batch.push(event),
                None => return,
            }
        }
        while batch.len() < BATCH {
            match outbox.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        match append_batch(&db, &batch).await {
            Ok(()) => {
                pending.fetch_sub(batch.len(), std::sync::atomic::Ordering::Relaxed);
                batch.clear();
            }
            Err(error) => {
                // Kept and retried: a database that is away for a while delays events, it does not drop them.
                tracing::warn!(%error, events = batch.len(), "could not append events; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
}

async fn append_batch(db: &Db, batch: &[String]) -> Result<()> {
    let mut client = db.client().await?;
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK]).await?;
    tx.execute(
        "INSERT INTO event (payload)
         SELECT p::json FROM unnest($1::text[]) WITH ORDINALITY AS t (p, n) ORDER BY n",
        &[&batch],
    )
    .await?;
    tx.execute(&format!("NOTIFY {CHANNEL}"), &[]).await?;
    tx.commit().await?;
    Ok(())
}

async fn read(db: Db, config: tokio_postgres::Config, tls: Connector, mut last: i64, deliver: EventSink) {
    loop {
        let (client, mut connection) = match config.connect(tls.clone()).await {
            Ok(pair) => pair,
            Err(error) => {
                tracing::warn!(error = %super::describe(&error), "cannot open the event listener; retrying");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let notified = Arc::new(Notify::new());
        let wake = notified.clone();
        let listener = tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => wake.notify_one(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        if let Err(error) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
            tracing::warn!(error = %super::describe(&error), "cannot listen for events; retrying");
            listener.abort();
            tokio::time::sleep(RETRY_AFTER).await;
            continue;
        }
        while !listener.is_finished() {
            match fetch(&db, last).await {
                Ok(rows) => {
                    for (id, payload) in rows {
                        last = id;
                        deliver(u64::try_from(id).unwrap_or(0), payload);
                    }
                }
                Err(error) => tracing::warn!(%error, "cannot read new events"),
            }
            tokio::select! {
                () = notified.notified() => {}
                () = tokio::time::sleep(POLL_EVERY) => {}
            }
        }
        tracing::warn!("the event listener connection closed; reconnecting");
    }
}

async fn fetch(db: &Db, after: i64) -> Result<Vec<(i64, String)>> {
    let client = db.client().await?;
    let stmt = client
        .prepare_cached("SELECT id, payload::text FROM event WHERE id > $1 ORDER BY id LIMIT 1000")
        .await?;
    let rows = client.query(&stmt, &[&after]).await?;
    rows.iter().map(|row| Ok((row.try_get(0)?, row.try_get(1)?))).collect()
}

async fn prune(db: Db) {
    loop {
        let pruned = async {
            let client = db.client().await?;
            Ok::<_, crate::StoreError>(
                client
                    .execute(
                        "DELETE FROM event WHERE created < clock_timestamp() - make_interval(secs => $1)",
                        &[&RETENTION.as_secs_f64()],
                    )
                    .await?,
            )
        };
        if let Err(error) = pruned.await {
            tracing::debug!(%error, "could not prune old events");
        }
        tokio::time::sleep(PRUNE_EVERY).await;
    }
}
