//! Connection setup and schema migrations of the SQLite store.
//!
//! Owns: the pragmas every connection gets, the numbered migrations (`PRAGMA user_version`) and the
//! refusal to touch a database written by a newer codeloop.
//! Must not: read or write rows; that is `rows.rs` and `history.rs`.

use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::{Result, StoreError};

/// How long a connection waits for another connection's (or process's) lock before failing.
/// Long enough that two codeloop processes on one data dir never see "database is locked" in normal use.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache per connection, in KiB (negative = KiB for `cache_size`). Only the pages touched are
/// allocated, so this is a ceiling, not a cost — but a long-running server touches ever new pages, and
/// with the writer and four idle readers the ceilings add up to what its resident memory grows to (12
/// MiB here); the file's pages stay in the kernel's cache besides.
const WRITER_CACHE_KIB: i64 = 4 * 1024;
const READER_CACHE_KIB: i64 = 2 * 1024;

/// Page size of a new database file.
const PAGE_SIZE: i64 = 8192;

/// A WAL file larger than this is truncated back after a checkpoint, so a burst does not pin disk space.
const JOURNAL_SIZE_LIMIT: i64 = 16 * 1024 * 1024;

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`. Append only; never edit a shipped
/// migration.
const MIGRATIONS: &[&str] = &[
    // 1: one row per entity, updated in place. JSON `data` holds the entity; the scalar columns exist
    // for lookups and ordering only.
    r#"
    CREATE TABLE session (
        id           TEXT PRIMARY KEY NOT NULL,
        parent_id    TEXT,
        directory    TEXT NOT NULL,
        time_updated INTEGER NOT NULL,
        data         TEXT NOT NULL
    );
    CREATE INDEX session_parent ON session (parent_id, time_updated);
    CREATE INDEX session_directory ON session (directory, time_updated);

    CREATE TABLE message (
        id          TEXT PRIMARY KEY NOT NULL,
        session_id  TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        -- 1 for an assistant message without time.completed: what recovery looks for.
        unfinished  INTEGER NOT NULL DEFAULT 0,
        data        TEXT NOT NULL
    );
    -- UNIQUE (id is unique anyway) lets the planner walk parts in (message, part) order without a sort.
    CREATE UNIQUE INDEX message_session ON message (session_id, id);
    CREATE INDEX message_unfinished ON message (session_id) WHERE unfinished = 1;

    CREATE TABLE part (
        id          TEXT PRIMARY KEY NOT NULL,
        message_id  TEXT NOT NULL REFERENCES message (id) ON DELETE CASCADE,
        session_id  TEXT NOT NULL,
        -- The `type` tag of the part (`text`, `tool`, …); `data` holds the kind's fields without it.
        kind        TEXT NOT NULL,
        -- The tool state's status for tool parts, NULL otherwise.
        tool_status TEXT,
        data        TEXT NOT NULL
    );
    CREATE INDEX part_message ON part (message_id, id);
    CREATE INDEX part_open_tool ON part (session_id) WHERE tool_status IN ('pending', 'running');

    CREATE TABLE todo (
        session_id TEXT PRIMARY KEY NOT NULL,
        data       TEXT NOT NULL
    );

    CREATE TABLE approval (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        project    TEXT NOT NULL,
        permission TEXT NOT NULL,
        pattern    TEXT NOT NULL,
        action     TEXT NOT NULL,
        created    INTEGER NOT NULL,
        UNIQUE (project, permission, pattern)
    );
    "#,
    // 2: durable queued input (prompts posted while the session was busy).
    r#"
    CREATE TABLE queued_input (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        input      TEXT NOT NULL,
        created    INTEGER NOT NULL
    );
    CREATE INDEX queued_input_session ON queued_input (session_id, id);
    "#,
    // 3: background jobs (DESIGN.md §5f): one row per job, `owner` names the process that runs it so a
    // job whose process died can be recorded as lost.
    r#"
    CREATE TABLE job (
        id         TEXT PRIMARY KEY NOT NULL,
        session_id TEXT NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        state      TEXT NOT NULL,
        owner      TEXT NOT NULL,
        data       TEXT NOT NULL
    );
    CREATE INDEX job_session ON job (session_id, id);
    CREATE INDEX job_running ON job (owner) WHERE state = 'running';
    "#,
];

/// The newest schema version this build understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Pragmas shared by every connection.
fn common_pragmas(conn: &Connection, cache_kib: i64) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "cache_size", -cache_kib)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

/// Prepares the writer connection: WAL, incremental auto-vacuum on a new file, and migrations.
pub(crate) fn setup_writer(conn: &mut Connection) -> Result<()> {
    common_pragmas(conn, WRITER_CACHE_KIB)?;
    // These two only take effect on a database without tables, i.e. at creation; later they are no-ops.
    // 8 KiB pages hold five typical 1.4 KB tool-part rows where 4 KiB pages hold two (measured in
    // benches/persist.rs: bytes of database per 1 000 parts).
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))?;
    conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
    migrate(conn)
}

/// Prepares a read connection. It never writes, so it never takes the write lock.
pub(crate) fn setup_reader(conn: &Connection) -> Result<()> {
    common_pragmas(conn, READER_CACHE_KIB)?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(())
}

/// Brings the schema to [`SCHEMA_VERSION`] inside one immediate transaction, so two processes opening a
/// new data dir at once migrate it exactly once.
fn migrate(conn: &mut Connection) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        tx.execute_batch(sql)?;
        tracing::debug!(version = index + 1, "applied store migration");
    }
    if found < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(())
}

/// `EXPLAIN QUERY PLAN` of `sql` with every parameter bound to NULL, joined into one line.
#[cfg(test)]
pub(crate) fn query_plan(conn: &Connection, sql: &str) -> String {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let nulls = vec![rusqlite::types::Null; stmt.parameter_count()];
    let rows = stmt.query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3)).unwrap();
    rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_database_gets_wal_incremental_vacuum_and_current_version() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        setup_writer(&mut conn).unwrap();
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        let vacuum: i64 = conn.pragma_query_value(None, "auto_vacuum", |r| r.get(0)).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        let fk: i64 = conn.pragma_query_value(None, "foreign_keys", |r| r.get(0)).unwrap();
        let sync: i64 = conn.pragma_query_value(None, "synchronous", |r| r.get(0)).unwrap();
        let page: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0)).unwrap();
        assert_eq!(
            (mode.as_str(), vacuum, version, fk, sync, page),
            ("wal", 2, SCHEMA_VERSION, 1, 1, PAGE_SIZE)
        );
    }

    #[test]
    fn migrating_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut conn = Connection::open(&path).unwrap();
        setup_writer(&mut conn).unwrap();
        drop(conn);
        let mut conn = Connection::open(&path).unwrap();
        setup_writer(&mut conn).unwrap();
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        drop(conn);
        let mut conn = Connection::open(&path).unwrap();
        let err = setup_writer(&mut conn).unwrap_err();
        assert!(
            matches!(err, StoreError::SchemaTooNew { found, supported } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION)
        );
    }

    #[test]
    fn recovery_queries_use_the_partial_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        setup_writer(&mut conn).unwrap();
        let plan = |sql: &str| query_plan(&conn, sql);
        let parts = plan(crate::recovery::OPEN_TOOL_SESSIONS_SQL);
        assert!(parts.contains("part_open_tool"), "{parts}");
        let messages = plan(crate::recovery::UNFINISHED_SESSIONS_SQL);
        assert!(messages.contains("message_unfinished"), "{messages}");
    }
}
