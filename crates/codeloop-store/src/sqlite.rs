//! [`SqliteStore`]: the [`Store`] on one SQLite file (`<data_dir>/codeloop.db`, WAL).
//!
//! One writer connection behind a mutex runs every write as a `BEGIN IMMEDIATE` transaction; reads use
//! a small pool of separate connections, so under WAL a reader never waits for the writer. Two processes
//! on one data dir share the file safely: the immediate transaction plus the busy timeout serialise their
//! writers instead of failing with "database is locked".
//! Owns: connections, transactions, and the `Store` methods that are not history reads.
//! Must not: hold business rules, or block an async runtime (callers use the writer thread or
//! `spawn_blocking`).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use codeloop_types::{MessageId, PermissionAction, PermissionRule, Session, SessionId, Todo, now_ms};
use rusqlite::{Connection, OpenFlags, TransactionBehavior, params};

use crate::rows::{apply_write, decode_json, encode_json, get_session, session_from_row};
use crate::{
    Approval, MessageWithParts, Page, QueuedInput, RecoveryReport, Result, RunGuard, SessionFilter, Store,
    StoreError, Write, history, lock, private, recovery, schema,
};

/// The database file inside the data dir.
pub const DB_FILE: &str = "codeloop.db";
/// The folder of session lock files inside the data dir.
pub const LOCK_DIR: &str = "locks";

/// Idle read connections kept for reuse; more are opened when needed and closed afterwards.
const MAX_IDLE_READERS: usize = 4;

/// Size of the database file, for reports and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskUsage {
    pub page_size: u64,
    pub page_count: u64,
    /// Pages inside the file that hold nothing (reused by later writes, or returned by vacuum).
    pub freelist_count: u64,
    /// Bytes in the `-wal` file not yet checkpointed into the main file.
    pub wal_bytes: u64,
}

impl DiskUsage {
    /// Bytes of the main file holding data.
    pub fn used_bytes(&self) -> u64 {
        (self.page_count - self.freelist_count.min(self.page_count)) * self.page_size
    }
}

pub struct SqliteStore {
    data_dir: PathBuf,
    db_path: PathBuf,
    lock_dir: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    last_recovery: RecoveryReport,
    /// The sessions that recovery settled (their runs died with a process).
    settled: Vec<SessionId>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("db_path", &self.db_path).finish_non_exhaustive()
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.display().to_string(), source }
}

/// Recovers a poisoned mutex: a panic elsewhere cannot leave a connection mid-transaction, because the
/// transaction guard rolls back while unwinding.
fn lock_ignoring_poison<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    codeloop_types::LockExt::locked(mutex)
}

/// The writer connection, set up. Two processes creating a data dir at once race to switch the new file
/// to WAL, which needs it alone and does not wait on the busy timeout: the loser asks again, briefly.
fn open_writer(db_path: &Path) -> Result<Connection> {
    const ATTEMPTS: usize = 50;
    let mut attempt = 0;
    loop {
        let mut writer = Connection::open(db_path)?;
        match schema::setup_writer(&mut writer) {
            Ok(()) => return Ok(writer),
            Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(failure, _)))
                if failure.code == rusqlite::ErrorCode::DatabaseBusy && attempt + 1 < ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) `<data_dir>/codeloop.db`, migrates it, and recovers runs left open by a
    /// crashed process (see [`SqliteStore::last_recovery`]). A data dir it creates is 0700, the database
    /// files are 0600.
    pub fn open(data_dir: &Path) -> Result<SqliteStore> {
        let lock_dir = data_dir.join(LOCK_DIR);
        private::create_dir(data_dir).map_err(io_error(data_dir))?;
        private::create_dir(&lock_dir).map_err(io_error(&lock_dir))?;
        let db_path = data_dir.join(DB_FILE);
        private::prepare_db_file(&db_path).map_err(io_error(&db_path))?;
        let writer = open_writer(&db_path)?;
        let mut store = SqliteStore {
            data_dir: data_dir.to_path_buf(),
            db_path,
            lock_dir,
            writer: Mutex::new(writer),
            readers: Mutex::new(Vec::new()),
            last_recovery: RecoveryReport::default(),
            settled: Vec::new(),
        };
        (store.last_recovery, store.settled) = recovery::recover_unlocked(&store, now_ms())?;
        Ok(store)
    }

    /// What the recovery run by [`SqliteStore::open`] changed.
    pub fn last_recovery(&self) -> &RecoveryReport {
        &self.last_recovery
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn db_path(&self) -> &Path {
        &self.db_path
    }

    /// Page counts of the database file (after nothing else: no checkpoint is forced).
    pub fn disk_usage(&self) -> Result<DiskUsage> {
        let (page_size, page_count, freelist_count) = self.read(|conn| {
            let get = |name: &str| conn.pragma_query_value(None, name, |row| row.get::<_, i64>(0));
            Ok((get("page_size")?, get("page_count")?, get("freelist_count")?))
        })?;
        let wal_path = self.db_path.with_extension("db-wal");
        let wal_bytes = std::fs::metadata(&wal_path).map(|m| m.len()).unwrap_or(0);
        let to_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(DiskUsage {
            page_size: to_u64(page_size),
            page_count: to_u64(page_count),
            freelist_count: to_u64(freelist_count),
            wal_bytes,
        })
    }

    /// Copies the WAL into the main file and truncates it (e.g. before measuring or backing up).
    pub fn checkpoint(&self) -> Result<()> {
        let conn = lock_ignoring_poison(&self.writer);
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// Runs `f` in one write transaction (`BEGIN IMMEDIATE`), committing if it succeeds.
    pub(crate) fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut conn = lock_ignoring_poison(&self.writer);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let value = f(&tx)?;
        tx.commit()?;
        Ok(value)
    }

    /// Runs `f` on a read connection inside one read transaction, so multi-query reads see one snapshot.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let pooled = lock_ignoring_poison(&self.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => self.open_reader()?,
        };
        let result = (|| {
            let tx = conn.unchecked_transaction()?;
            let value = f(&tx)?;
            tx.commit()?;
            Ok(value)
        })();
        if conn.is_autocommit() {
            let mut idle = lock_ignoring_poison(&self.readers);
            if idle.len() < MAX_IDLE_READERS {
                idle.push(conn);
            }
        }
        result
    }

    fn open_reader(&self) -> Result<Connection> {
        let flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&self.db_path, flags)?;
        schema::setup_reader(&conn)?;
        Ok(conn)
    }

    /// Every session in the tree rooted at `id` (itself first), following `parent_id`.
    fn session_tree(conn: &Connection, id: &SessionId) -> Result<Vec<SessionId>> {
        let mut stmt = conn.prepare_cached(
            "WITH RECURSIVE tree (id) AS (
                 SELECT id FROM session WHERE id = ?1
                 UNION SELECT s.id FROM session s JOIN tree t ON s.parent_id = t.id
             ) SELECT id FROM tree",
        )?;
        let ids = stmt.query_map([id.as_str()], |row| row.get::<_, String>(0))?;
        ids.map(|id| Ok(SessionId::from(id?))).collect()
    }

    /// Returns freed pages to the file system (the file was created with `auto_vacuum = INCREMENTAL`).
    fn release_free_pages(&self) -> Result<()> {
        let conn = lock_ignoring_poison(&self.writer);
        let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    }
}

fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Allow => "allow",
        PermissionAction::Ask => "ask",
        PermissionAction::Deny => "deny",
    }
}

fn parse_action(id: i64, name: &str) -> Result<PermissionAction> {
    match name {
        "allow" => Ok(PermissionAction::Allow),
        "ask" => Ok(PermissionAction::Ask),
        "deny" => Ok(PermissionAction::Deny),
        // Not valid JSON either, so this reports the row as corrupt.
        other => decode_json("approval", &id.to_string(), other),
    }
}

fn approval_from_row(row: &rusqlite::Row<'_>) -> Result<Approval> {
    let id: i64 = row.get(0)?;
    let action: String = row.get(4)?;
    Ok(Approval {
        id,
        project: row.get(1)?,
        rule: PermissionRule {
            permission: row.get(2)?,
            pattern: row.get(3)?,
            action: parse_action(id, &action)?,
        },
        created: row.get(5)?,
    })
}

impl Store for SqliteStore {
    fn apply(&self, batch: &[Write]) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.write(|conn| batch.iter().try_for_each(|write| apply_write(conn, write)))
    }

    fn get_session(&self, id: &SessionId) -> Result<Option<Session>> {
        self.read(|conn| get_session(conn, id))
    }

    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>> {
        let mut sql = String::from("SELECT id, data FROM session WHERE 1");
        let mut args: Vec<&str> = Vec::new();
        match (&filter.parent, filter.include_children) {
            (Some(parent), _) => {
                args.push(parent.as_str());
                sql.push_str(&format!(" AND parent_id = ?{}", args.len()));
            }
            (None, false) => sql.push_str(" AND parent_id IS NULL"),
            (None, true) => {}
        }
        if let Some(directory) = &filter.directory {
            args.push(directory);
            sql.push_str(&format!(" AND directory = ?{}", args.len()));
        }
        let limit = filter.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
        sql.push_str(&format!(" ORDER BY time_updated DESC, id LIMIT {limit}"));
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(args.iter()))?;
            let mut sessions = Vec::new();
            while let Some(row) = rows.next()? {
                sessions.push(session_from_row(row)?);
            }
            Ok(sessions)
        })
    }

    fn delete_session(&self, id: &SessionId) -> Result<bool> {
        let deleted = self.write(|conn| {
            let tree = Self::session_tree(conn, id)?;
            for session in &tree {
                conn.prepare_cached("DELETE FROM todo WHERE session_id = ?1")?.execute([session.as_str()])?;
                // Messages and parts follow through ON DELETE CASCADE.
                conn.prepare_cached("DELETE FROM session WHERE id = ?1")?.execute([session.as_str()])?;
            }
            Ok(tree)
        })?;
        if deleted.is_empty() {
            return Ok(false);
        }
        if let Err(error) = self.release_free_pages() {
            tracing::warn!(%error, "could not release the space of a deleted session");
        }
        for session in &deleted {
            lock::remove(&self.lock_dir, session);
        }
        Ok(true)
    }

    fn get_message(&self, id: &MessageId) -> Result<Option<MessageWithParts>> {
        self.read(|conn| history::get_message(conn, id))
    }

    fn list_messages(&self, session: &SessionId, page: &Page) -> Result<Vec<MessageWithParts>> {
        self.read(|conn| history::list_messages(conn, session, page))
    }

    fn load_history(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        self.read(|conn| history::load_history(conn, session))
    }

    fn get_todos(&self, session: &SessionId) -> Result<Vec<Todo>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT data FROM todo WHERE session_id = ?1")?;
            let mut rows = stmt.query([session.as_str()])?;
            match rows.next()? {
                Some(row) => decode_json("todo", session.as_str(), crate::rows::text(row, 0)?),
                None => Ok(Vec::new()),
            }
        })
    }

    fn set_todos(&self, session: &SessionId, todos: &[Todo]) -> Result<()> {
        let data = encode_json("todo", session.as_str(), &todos)?;
        self.write(|conn| {
            if todos.is_empty() {
                conn.prepare_cached("DELETE FROM todo WHERE session_id = ?1")?.execute([session.as_str()])?;
            } else {
                conn.prepare_cached(
                    "INSERT INTO todo (session_id, data) VALUES (?1, ?2)
                     ON CONFLICT (session_id) DO UPDATE SET data = excluded.data",
                )?
                .execute(params![session.as_str(), data])?;
            }
            Ok(())
        })
    }

    fn save_job(&self, job: &codeloop_types::Job, owner: &str) -> Result<()> {
        self.write(|conn| crate::rows::upsert_job(conn, job, owner))
    }

    fn list_jobs(&self, session: Option<&SessionId>) -> Result<Vec<(codeloop_types::Job, String)>> {
        self.read(|conn| {
            let mut stmt = match session {
                Some(_) => {
                    conn.prepare_cached("SELECT id, owner, data FROM job WHERE session_id = ?1 ORDER BY id")?
                }
                None => conn
                    .prepare_cached("SELECT id, owner, data FROM job WHERE state = 'running' ORDER BY id")?,
            };
            let mut rows = match session {
                Some(id) => stmt.query([id.as_str()])?,
                None => stmt.query([])?,
            };
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let id = crate::rows::text(row, 0)?;
                let owner = crate::rows::text(row, 1)?.to_owned();
                out.push((decode_json("job", id, crate::rows::text(row, 2)?)?, owner));
            }
            Ok(out)
        })
    }

    fn add_approval(&self, project: &str, rule: &PermissionRule) -> Result<Approval> {
        self.write(|conn| {
            // Approving the same permission and pattern again keeps one row, with the latest action.
            let mut stmt = conn.prepare_cached(
                "INSERT INTO approval (project, permission, pattern, action, created) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (project, permission, pattern) DO UPDATE SET action = excluded.action
                 RETURNING id, project, permission, pattern, action, created",
            )?;
            let mut rows = stmt.query(params![
                project,
                rule.permission,
                rule.pattern,
                action_name(rule.action),
                now_ms()
            ])?;
            match rows.next()? {
                Some(row) => approval_from_row(row),
                None => Err(StoreError::Sqlite(rusqlite::Error::QueryReturnedNoRows)),
            }
        })
    }

    fn list_approvals(&self, project: Option<&str>) -> Result<Vec<Approval>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, project, permission, pattern, action, created FROM approval
                 WHERE ?1 IS NULL OR project = ?1 ORDER BY id",
            )?;
            let mut rows = stmt.query([project])?;
            let mut approvals = Vec::new();
            while let Some(row) = rows.next()? {
                approvals.push(approval_from_row(row)?);
            }
            Ok(approvals)
        })
    }

    fn revoke_approval(&self, id: i64) -> Result<bool> {
        self.write(|conn| Ok(conn.prepare_cached("DELETE FROM approval WHERE id = ?1")?.execute([id])? > 0))
    }

    fn recover(&self, session: Option<&SessionId>) -> Result<RecoveryReport> {
        match session {
            None => recovery::recover_unlocked(self, now_ms()).map(|(report, _)| report),
            Some(id) => self.write(|conn| recovery::recover_session(conn, id, now_ms())),
        }
    }

    fn enqueue_input(&self, session: &SessionId, input: &str) -> Result<i64> {
        self.write(|conn| {
            conn.prepare_cached("INSERT INTO queued_input (session_id, input, created) VALUES (?1, ?2, ?3)")?
                .execute(params![session.as_str(), input, now_ms()])?;
            Ok(conn.last_insert_rowid())
        })
    }

    fn settled_at_open(&self) -> Vec<SessionId> {
        self.settled.clone()
    }

    fn unanswered(&self, since: codeloop_types::Millis) -> Result<Vec<(SessionId, MessageId)>> {
        let found = self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT s.id, m.id FROM session s
                 JOIN message m ON m.id = (SELECT max(id) FROM message WHERE session_id = s.id)
                 WHERE s.time_updated >= ?1 AND s.parent_id IS NULL
                   AND json_extract(m.data, '$.role') = 'user' AND json_extract(s.data, '$.revert') IS NULL",
            )?;
            let rows = stmt.query_map([since], |row| {
                Ok((SessionId::from(row.get::<_, String>(0)?), MessageId::from(row.get::<_, String>(1)?)))
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })?;
        Ok(found.into_iter().filter(|(session, _)| lock::acquire(&self.lock_dir, session).is_ok()).collect())
    }

    fn queue_depth(&self) -> Result<u64> {
        self.read(|conn| {
            let count: i64 = conn.query_row("SELECT count(*) FROM queued_input", [], |row| row.get(0))?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
    }

    fn queued_inputs(&self, session: &SessionId) -> Result<Vec<QueuedInput>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, session_id, input, created FROM queued_input WHERE session_id = ?1 ORDER BY id",
            )?;
            let rows = stmt.query_map([session.as_str()], |row| {
                Ok(QueuedInput {
                    id: row.get(0)?,
                    session_id: SessionId::from(row.get::<_, String>(1)?),
                    input: row.get(2)?,
                    created: row.get(3)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
    }

    fn orphaned_sessions(&self) -> Result<Vec<SessionId>> {
        let mut sessions = self.read(|conn| {
            let mut sessions = recovery::open_sessions(conn)?;
            let mut stmt = conn.prepare_cached("SELECT DISTINCT session_id FROM queued_input")?;
            let queued = stmt.query_map([], |row| row.get::<_, String>(0))?;
            for id in queued {
                sessions.push(SessionId::from(id?));
            }
            Ok(sessions)
        })?;
        sessions.sort();
        sessions.dedup();
        // Owned by a live run (here or in another process) when its lock is taken; a free lock is let go
        // again at once, the caller takes it to run.
        sessions.retain(|session| lock::acquire(&self.lock_dir, session).is_ok());
        Ok(sessions)
    }

    fn lock_session(&self, id: &SessionId) -> Result<RunGuard> {
        Ok(Box::new(lock::acquire(&self.lock_dir, id)?))
    }

    fn step_usage(&self, since: codeloop_types::Millis) -> Result<Vec<crate::StepUsage>> {
        let sql = crate::usage::step_usage_sql("");
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&sql)?;
            let mut rows = stmt.query([since])?;
            let mut steps = Vec::new();
            while let Some(row) = rows.next()? {
                let column = |i| crate::rows::text(row, i);
                let (part, session, directory) = (column(0)?, column(1)?, column(2)?);
                if let Some(step) =
                    crate::usage::step_usage(part, session, directory, column(3)?, column(4)?, since)?
                {
                    steps.push(step);
                }
            }
            Ok(steps)
        })
    }
}
