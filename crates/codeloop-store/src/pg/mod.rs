//! [`PgStore`]: the [`Store`] on PostgreSQL, shared by many `codeloop serve` workers (DESIGN.md §5b).
//!
//! The [`Store`] trait is synchronous (callers run it on the blocking pool or the writer thread), while the
//! driver is `tokio-postgres` pooled by `deadpool-postgres`. The store owns a small runtime of its own and
//! each call is a task on it whose result comes back over a channel; that works from any thread, a caller's
//! async worker included (the blocking `postgres` client would panic there, as it starts a runtime inside
//! the caller's). Every write batch is one transaction; multi-query reads run in one read-only repeatable-
//! read transaction, so they see one snapshot, as on SQLite.
//! Owns: the pool and its runtime, transactions, the `Store` methods, recovery of sessions no live lease holds.
//! Must not: hold business rules, or block the store's own runtime.

mod events;
mod lease;
mod pool;
mod rows;
pub(crate) mod schema;
mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use codeloop_types::{MessageId, Millis, PermissionRule, Session, SessionId, Todo, now_ms};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use tokio_postgres::IsolationLevel;

use crate::recovery::{settle_message, settle_part};
use crate::redact::redact;
use crate::rows::{decode_json, encode_json};
use crate::{
    Approval, MessageWithParts, Page, QueuedInput, RecoveryReport, Result, RunGuard, SessionFilter, Store,
    StoreError, Write,
};
pub use lease::DEFAULT_LEASE;
use lease::Lease;
use pool::scrub;
pub(crate) use pool::{Db, Shared, block_on, connection_lost, describe};
use rows::{
    action_name, apply_write, approval_from_row, message_from_row, part_from_row, session_from_row,
    upsert_message, upsert_part,
};
use tls::{Connector, TlsOptions, password};

/// Connections kept by one worker. Runs write through one writer thread; reads come from request handlers.
const POOL_SIZE: usize = 16;
/// Connections tried for one transaction when the server closed the pooled ones (after a restart every
/// pooled connection is dead; `Db::client` skips those it already knows are).
const BEGIN_ATTEMPTS: u32 = POOL_SIZE as u32 + 1;
/// Time allowed to open a connection when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a call waits for a free connection before failing.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Threads of the store's own runtime: the driver's I/O only, never the caller's work.
const RUNTIME_THREADS: usize = 2;

pub struct PgStore {
    shared: Arc<Shared>,
    last_recovery: RecoveryReport,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.shared.db.url).finish_non_exhaustive()
    }
}

/// How a transaction sees and touches the database.
#[derive(Clone, Copy)]
enum Access {
    Write,
    /// Read-only, on one consistent snapshot.
    ReadOnlySnapshot,
}

/// Runs `work` in one transaction on a live connection and commits it. A pooled connection whose `BEGIN`
/// fails because the server closed it (a restart we had not noticed yet) is replaced: nothing ran on it.
async fn in_transaction<T, W>(db: Db, access: Access, work: W) -> Result<T>
where
    W: for<'t> FnOnce(&'t Transaction<'t>) -> std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 't>>,
{
    let mut client = db.client().await?;
    let mut work = Some(work);
    for attempt in 1..=BEGIN_ATTEMPTS {
        let builder = client.build_transaction();
        let begun = match access {
            Access::Write => builder.start().await,
            Access::ReadOnlySnapshot => {
                builder.isolation_level(IsolationLevel::RepeatableRead).read_only(true).start().await
            }
        };
        match (begun, work.take()) {
            (Ok(tx), Some(work)) => {
                let value = work(&tx).await?;
                tx.commit().await?;
                return Ok(value);
            }
            (Err(error), Some(unused)) if connection_lost(&error) && attempt < BEGIN_ATTEMPTS => {
                work = Some(unused);
            }
            (Err(error), _) => return Err(error.into()),
            // `work` is put back whenever the loop goes round: never reached. (Matching on the tuple, not
            // on `begun` alone, ends the borrow of `client` before it is replaced below.)
            (Ok(_), None) => break,
        }
        client = db.client().await?;
    }
    Err(StoreError::Interrupted("no connection to the PostgreSQL store could begin a transaction: is the database up? `codeloop doctor` checks it".into()))
}

/// The driver's settings for `url` and the TLS connector its `sslmode` asks for. The driver knows neither
/// `sslrootcert` nor the `verify-*` modes: they are taken out and handled here.
fn connection_settings(url: &str) -> Result<(tokio_postgres::Config, Connector)> {
    let shown = redact(url);
    let password = password(url);
    let invalid = |reason: String| StoreError::InvalidUrl {
        url: shown.clone(),
        reason: scrub(&reason, password.as_deref()),
    };
    let (driver_url, tls_options) = TlsOptions::split(url).map_err(&invalid)?;
    let mut config: tokio_postgres::Config =
        driver_url.parse().map_err(|e: tokio_postgres::Error| invalid(e.to_string()))?;
    config.ssl_mode(tls_options.driver_mode());
    let tls = tls_options.connector(&shown)?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name("codeloop");
    }
    Ok((config, tls))
}

impl PgStore {
    /// Connects to `url`, migrates the schema, and settles runs whose lease has expired (a dead worker's).
    /// Run leases last `lease` unless renewed. TLS follows the URL's `sslmode` and `sslrootcert` as in libpq
    /// (see `tls.rs`). Errors never show the password.
    pub fn open(url: &str, lease: Duration) -> Result<PgStore> {
        let shown = redact(url);
        let password = password(url);
        let invalid = |reason: String| StoreError::InvalidUrl {
            url: shown.clone(),
            reason: scrub(&reason, password.as_deref()),
        };
        let (config, tls) = connection_settings(url)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("codeloop-pg")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io { path: "PostgreSQL store runtime".into(), source })?;
        let pg_config = config.clone();
        let manager = Manager::from_config(
            config,
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let lease = if lease.is_zero() { DEFAULT_LEASE } else { lease };
        let db = Db { pool, url: shown.as_str().into(), password: password.as_deref().map(Arc::from) };
        let shared = Arc::new(Shared {
            db,
            pg_config,
            tls,
            handle: runtime.handle().clone(),
            held: Default::default(),
            lease_renewals: Default::default(),
            leases_lost: Default::default(),
            lease,
            runtime: Some(runtime),
        });
        let mut store = PgStore { shared, last_recovery: RecoveryReport::default() };
        store.run(|db| async move {
            let mut client = db.client().await?;
            schema::migrate(&mut client).await
        })?;
        store.last_recovery = store.recover_unleased()?;
        Ok(store)
    }

    /// Logs in to `url` the way [`PgStore::open`] does (TLS included) and returns the server's version:
    /// changes nothing (no migration, no recovery). What `codeloop doctor` checks.
    pub async fn probe(url: &str) -> Result<String> {
        let (config, tls) = connection_settings(url)?;
        let password = password(url);
        let unavailable = |error: &tokio_postgres::Error| {
            let (url, reason) = (redact(url), scrub(&describe(error), password.as_deref()));
            match tls::advice(error) {
                Some(advice) => StoreError::Tls { url, reason, advice: advice.to_owned() },
                None => StoreError::Unavailable { url, reason },
            }
        };
        let (client, connection) = config.connect(tls).await.map_err(|e| unavailable(&e))?;
        let connection = tokio::spawn(connection);
        let version = client.query_one("SHOW server_version", &[]).await.map_err(|e| unavailable(&e));
        drop(client);
        let _ = connection.await;
        version?.try_get::<_, String>(0).map_err(|e| unavailable(&e))
    }

    /// What the recovery run by [`PgStore::open`] changed.
    pub fn last_recovery(&self) -> &RecoveryReport {
        &self.last_recovery
    }

    /// The lease length: how long a dead worker's session stays untouchable.
    pub fn lease(&self) -> Duration {
        self.shared.lease
    }

    fn run<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnOnce(Db) -> Fut,
        Fut: Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        block_on(&self.shared.handle, call(self.shared.db.clone()))
    }

    /// Runs `work` in one write transaction, committing if it succeeds.
    fn write<T, W>(&self, work: W) -> Result<T>
    where
        W: for<'t> FnOnce(
                &'t Transaction<'t>,
            ) -> std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 't>>
            + Send
            + 'static,
        T: Send + 'static,
    {
        self.run(|db| in_transaction(db, Access::Write, work))
    }

    /// Runs `work` in one read-only snapshot.
    fn read<T, W>(&self, work: W) -> Result<T>
    where
        W: for<'t> FnOnce(
                &'t Transaction<'t>,
            ) -> std::pin::Pin<Box<dyn Future<Output = Result<T>> + Send + 't>>
            + Send
            + 'static,
        T: Send + 'static,
    {
        self.run(|db| in_transaction(db, Access::ReadOnlySnapshot, work))
    }

    /// The leases this store holds over sessions `batch` writes to: the batch commits only while they are
    /// still this store's (fencing a worker that lost a session to another one).
    fn fenced(&self, batch: &[Write]) -> Vec<(SessionId, String)> {
        let held = self.shared.held();
        if held.is_empty() {
            return Vec::new();
        }
        let mut fenced: Vec<(SessionId, String)> = batch
            .iter()
            .filter_map(|write| match write {
                Write::Session(session) => Some(&session.id),
                Write::Message(message) => Some(message.session_id()),
                Write::Part(part) => Some(&part.session_id),
                Write::RemovePart(_)
                | Write::RemoveMessage(_)
                | Write::RemoveQueued(_)
                | Write::Job { .. } => None,
            })
            .filter_map(|session| held.get(session).map(|owner| (session.clone(), owner.clone())))
            .collect();
        fenced.sort();
        fenced.dedup();
        fenced
    }

    /// Settles every session with open rows whose lease is free or expired: each in one transaction that
    /// holds the session's lease row meanwhile, so a worker starting that session waits for it.
    fn recover_unleased(&self) -> Result<RecoveryReport> {
        let lease = self.shared.lease;
        let report = self.run(move |db| async move {
            let mut client = db.client().await?;
            let sessions: Vec<String> = client
                .query(rows::OPEN_SESSIONS, &[])
                .await?
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()?;
            let mut report = RecoveryReport::default();
            for session in sessions.into_iter().map(SessionId::from) {
                let owner = lease::new_owner();
                let tx = client.transaction().await?;
                let taken = tx
                    .query_opt(lease::TAKE, &[&session.as_str(), &owner, &lease::seconds(lease)])
                    .await?
                    .is_some();
                if !taken {
                    tracing::debug!(%session, "session is leased by a live worker; recovery leaves it alone");
                    continue;
                }
                let one = settle_session(&tx, &session, now_ms()).await?;
                tx.execute(lease::RELEASE, &[&session.as_str(), &owner]).await?;
                tx.commit().await?;
                report.interrupted_parts += one.interrupted_parts;
                report.aborted_messages += one.aborted_messages;
            }
            Ok(report)
        })?;
        if report != RecoveryReport::default() {
            tracing::info!(
                parts = report.interrupted_parts,
                messages = report.aborted_messages,
                "recovered runs left open by a dead worker"
            );
        }
        Ok(report)
    }
}

/// Settles one session's open parts and messages (see `recovery.rs`). The caller owns the transaction.
async fn settle_session(tx: &Transaction<'_>, session: &SessionId, now: Millis) -> Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    for row in tx.query(rows::OPEN_TOOL_PARTS, &[&session.as_str()]).await? {
        let mut part = part_from_row(&row)?;
        report.interrupted_parts += usize::from(settle_part(&mut part, now));
        upsert_part(tx, &part).await?;
    }
    for row in tx.query(rows::UNFINISHED_MESSAGES, &[&session.as_str()]).await? {
        let mut message = message_from_row(&row)?;
        report.aborted_messages += usize::from(settle_message(&mut message, now));
        upsert_message(tx, &message).await?;
    }
    Ok(report)
}

impl Store for PgStore {
    fn apply(&self, batch: &[Write]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let batch = batch.to_vec();
        let fenced = self.fenced(&batch);
        self.write(move |tx| {
            Box::pin(async move {
                lease::check_fence(tx, &fenced).await?;
                for write in &batch {
                    apply_write(tx, write).await?;
                }
                Ok(())
            })
        })
    }

    fn get_session(&self, id: &SessionId) -> Result<Option<Session>> {
        let id = id.clone();
        self.read(move |tx| {
            Box::pin(async move {
                let stmt = tx.prepare_cached("SELECT id, data::text FROM session WHERE id = $1").await?;
                tx.query_opt(&stmt, &[&id.as_str()]).await?.map(|row| session_from_row(&row)).transpose()
            })
        })
    }

    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>> {
        type Arg = Box<dyn tokio_postgres::types::ToSql + Send + Sync>;
        let mut sql = format!("SELECT {} FROM session WHERE TRUE", rows::SESSION_COLUMNS);
        let mut args: Vec<Arg> = Vec::new();
        match (&filter.parent, filter.include_children) {
            (Some(parent), _) => {
                args.push(Box::new(parent.as_str().to_owned()));
                sql.push_str(&format!(" AND parent_id = ${}", args.len()));
            }
            (None, false) => sql.push_str(" AND parent_id IS NULL"),
            (None, true) => {}
        }
        if let Some(directory) = &filter.directory {
            args.push(Box::new(directory.clone()));
            sql.push_str(&format!(" AND directory = ${}", args.len()));
        }
        // LIMIT NULL is no limit; a parameter keeps one cached statement per filter shape.
        args.push(Box::new(filter.limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX))));
        sql.push_str(&format!(" ORDER BY time_updated DESC, id LIMIT ${}", args.len()));
        self.read(move |tx| {
            Box::pin(async move {
                let stmt = tx.prepare_cached(&sql).await?;
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
                    args.iter().map(|a| a.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync)).collect();
                tx.query(&stmt, &params).await?.iter().map(session_from_row).collect()
            })
        })
    }

    fn delete_session(&self, id: &SessionId) -> Result<bool> {
        let id = id.clone();
        self.write(move |tx| {
            Box::pin(async move {
                let tree = tx
                    .query(
                        "WITH RECURSIVE tree (id) AS (
                             SELECT id FROM session WHERE id = $1
                             UNION SELECT s.id FROM session s JOIN tree t ON s.parent_id = t.id
                         ) SELECT id FROM tree",
                        &[&id.as_str()],
                    )
                    .await?
                    .iter()
                    .map(|row| row.try_get::<_, String>(0))
                    .collect::<Result<Vec<_>, _>>()?;
                tx.execute("DELETE FROM todo WHERE session_id = ANY($1)", &[&tree]).await?;
                // Messages and parts follow through ON DELETE CASCADE.
                tx.execute("DELETE FROM session WHERE id = ANY($1)", &[&tree]).await?;
                Ok(!tree.is_empty())
            })
        })
    }

    fn get_message(&self, id: &MessageId) -> Result<Option<MessageWithParts>> {
        let id = id.clone();
        self.read(move |tx| Box::pin(async move { rows::get_message(tx, &id).await }))
    }

    fn list_messages(&self, session: &SessionId, page: &Page) -> Result<Vec<MessageWithParts>> {
        let (session, page) = (session.clone(), page.clone());
        self.read(move |tx| Box::pin(async move { rows::list_messages(tx, &session, &page).await }))
    }

    fn load_history(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        let session = session.clone();
        self.read(move |tx| Box::pin(async move { rows::load_history(tx, &session).await }))
    }

    fn save_job(&self, job: &codeloop_types::Job, owner: &str) -> Result<()> {
        let (job, owner) = (job.clone(), owner.to_owned());
        self.write(move |tx| Box::pin(async move { rows::upsert_job(tx, &job, &owner).await }))
    }

    fn list_jobs(&self, session: Option<&SessionId>) -> Result<Vec<(codeloop_types::Job, String)>> {
        let session = session.cloned();
        self.read(move |tx| {
            Box::pin(async move {
                let rows = match &session {
                    Some(id) => {
                        tx.query(
                            "SELECT id, owner, data::text FROM job WHERE session_id = $1 ORDER BY id",
                            &[&id.as_str()],
                        )
                        .await?
                    }
                    None => {
                        tx.query(
                            "SELECT id, owner, data::text FROM job WHERE state = 'running' ORDER BY id",
                            &[],
                        )
                        .await?
                    }
                };
                let mut out = Vec::with_capacity(rows.len());
                for row in rows {
                    let id: String = row.try_get(0)?;
                    let owner: String = row.try_get(1)?;
                    out.push((decode_json("job", &id, row.try_get(2)?)?, owner));
                }
                Ok(out)
            })
        })
    }

    fn get_todos(&self, session: &SessionId) -> Result<Vec<Todo>> {
        let session = session.clone();
        self.read(move |tx| {
            Box::pin(async move {
                let stmt = tx.prepare_cached("SELECT data::text FROM todo WHERE session_id = $1").await?;
                match tx.query_opt(&stmt, &[&session.as_str()]).await? {
                    Some(row) => decode_json("todo", session.as_str(), row.try_get(0)?),
                    None => Ok(Vec::new()),
                }
            })
        })
    }

    fn set_todos(&self, session: &SessionId, todos: &[Todo]) -> Result<()> {
        let data = encode_json("todo", session.as_str(), &todos)?;
        let (session, empty) = (session.clone(), todos.is_empty());
        self.write(move |tx| {
            Box::pin(async move {
                if empty {
                    tx.execute("DELETE FROM todo WHERE session_id = $1", &[&session.as_str()]).await?;
                } else {
                    tx.execute(
                        "INSERT INTO todo (session_id, data) VALUES ($1, $2::text::json)
                         ON CONFLICT (session_id) DO UPDATE SET data = excluded.data",
                        &[&session.as_str(), &data],
                    )
                    .await?;
                }
                Ok(())
            })
        })
    }

    fn add_approval(&self, project: &str, rule: &PermissionRule) -> Result<Approval> {
        let (project, rule) = (project.to_owned(), rule.clone());
        self.write(move |tx| {
            Box::pin(async move {
                // Approving the same permission and pattern again keeps one row, with the latest action.
                let row = tx
                    .query_one(
                        "INSERT INTO approval (project, permission, pattern, action, created)
                         VALUES ($1, $2, $3, $4, $5)
                         ON CONFLICT (project, permission, pattern) DO UPDATE SET action = excluded.action
                         RETURNING id, project, permission, pattern, action, created",
                        &[&project, &rule.permission, &rule.pattern, &action_name(rule.action), &now_ms()],
                    )
                    .await?;
                approval_from_row(&row)
            })
        })
    }

    fn list_approvals(&self, project: Option<&str>) -> Result<Vec<Approval>> {
        let project = project.map(str::to_owned);
        self.read(move |tx| {
            Box::pin(async move {
                let rows = tx
                    .query(
                        "SELECT id, project, permission, pattern, action, created FROM approval
                         WHERE $1::text IS NULL OR project = $1 ORDER BY id",
                        &[&project],
                    )
                    .await?;
                rows.iter().map(approval_from_row).collect()
            })
        })
    }

    fn revoke_approval(&self, id: i64) -> Result<bool> {
        self.write(move |tx| {
            Box::pin(async move { Ok(tx.execute("DELETE FROM approval WHERE id = $1", &[&id]).await? > 0) })
        })
    }

    fn recover(&self, session: Option<&SessionId>) -> Result<RecoveryReport> {
        match session {
            None => self.recover_unleased(),
            Some(id) => {
                let id = id.clone();
                self.write(move |tx| Box::pin(async move { settle_session(tx, &id, now_ms()).await }))
            }
        }
    }

    fn enqueue_input(&self, session: &SessionId, input: &str) -> Result<i64> {
        let (session, input) = (session.clone(), input.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                let row = tx
                    .query_one(
                        "INSERT INTO queued_input (session_id, input, created) VALUES ($1, $2::text::json, $3)
                         RETURNING id",
                        &[&session.as_str(), &input, &now_ms()],
                    )
                    .await?;
                Ok(row.try_get(0)?)
            })
        })
    }

    fn queued_inputs(&self, session: &SessionId) -> Result<Vec<QueuedInput>> {
        let session = session.clone();
        self.read(move |tx| {
            Box::pin(async move {
                let stmt = tx
                    .prepare_cached(
                        "SELECT id, session_id, input::text, created FROM queued_input
                         WHERE session_id = $1 ORDER BY id",
                    )
                    .await?;
                tx.query(&stmt, &[&session.as_str()])
                    .await?
                    .iter()
                    .map(|row| {
                        Ok(QueuedInput {
                            id: row.try_get(0)?,
                            session_id: SessionId::from(row.try_get::<_, &str>(1)?),
                            input: row.try_get(2)?,
                            created: row.try_get(3)?,
                        })
                    })
                    .collect()
            })
        })
    }

    fn unanswered(&self, since: codeloop_types::Millis) -> Result<Vec<(SessionId, MessageId)>> {
        self.read(move |tx| {
            Box::pin(async move {
                let rows = tx
                    .query(
                        "SELECT s.id, m.id FROM session s
                         JOIN LATERAL (SELECT id, data FROM message WHERE session_id = s.id
                                       ORDER BY id DESC LIMIT 1) m ON true
                         WHERE s.time_updated >= $1 AND s.parent_id IS NULL
                           AND m.data->>'role' = 'user' AND s.data->>'revert' IS NULL
                           AND NOT EXISTS (SELECT 1 FROM run_lease l
                                           WHERE l.session_id = s.id AND l.expires_at >= clock_timestamp())",
                        &[&since],
                    )
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok((
                            SessionId::from(row.try_get::<_, &str>(0)?),
                            MessageId::from(row.try_get::<_, &str>(1)?),
                        ))
                    })
                    .collect()
            })
        })
    }

    fn queue_depth(&self) -> Result<u64> {
        self.read(move |tx| {
            Box::pin(async move {
                let count: i64 = tx.query_one("SELECT count(*) FROM queued_input", &[]).await?.try_get(0)?;
                Ok(u64::try_from(count).unwrap_or(0))
            })
        })
    }

    fn lease_figures(&self) -> crate::LeaseFigures {
        crate::LeaseFigures {
            renewals: self.shared.lease_renewals.load(std::sync::atomic::Ordering::Relaxed),
            lost: self.shared.leases_lost.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn orphaned_sessions(&self) -> Result<Vec<SessionId>> {
        self.read(move |tx| {
            Box::pin(async move {
                let sql = format!(
                    "SELECT id FROM ({} UNION SELECT session_id FROM queued_input) AS waiting (id)
                     WHERE NOT EXISTS (SELECT 1 FROM run_lease l
                                       WHERE l.session_id = waiting.id AND l.expires_at >= clock_timestamp())
                     ORDER BY id",
                    rows::OPEN_SESSIONS
                );
                tx.query(&sql, &[])
                    .await?
                    .iter()
                    .map(|row| Ok(SessionId::from(row.try_get::<_, &str>(0)?)))
                    .collect()
            })
        })
    }

    fn lock_session(&self, id: &SessionId) -> Result<RunGuard> {
        Ok(Box::new(Lease::take(&self.shared, id)?))
    }

    fn step_usage(&self, since: codeloop_types::Millis) -> Result<Vec<crate::StepUsage>> {
        self.read(move |tx| {
            Box::pin(async move {
                let stmt = tx.prepare_cached(&crate::usage::step_usage_sql("::text")).await?;
                let mut steps = Vec::new();
                for row in tx.query(&stmt, &[&since]).await? {
                    let (part, session, directory): (&str, &str, &str) =
                        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                    let (message, data): (&str, &str) = (row.try_get(3)?, row.try_get(4)?);
                    if let Some(step) =
                        crate::usage::step_usage(part, session, directory, message, data, since)?
                    {
                        steps.push(step);
                    }
                }
                Ok(steps)
            })
        })
    }

    fn event_log(&self) -> Option<&dyn crate::EventLog> {
        Some(self)
    }
}
