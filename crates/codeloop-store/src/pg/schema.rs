//! Schema migrations of the PostgreSQL store: the same ideas as the SQLite schema (one row per entity,
//! updated in place; a `json` column holds the entity, scalar columns exist for lookups and ordering),
//! plus what many workers need: run leases.
//!
//! Owns: the numbered migrations (version in `codeloop_schema`), applied under an advisory lock so workers
//! starting together migrate once, and the refusal to touch a database written by a newer codeloop.
//! Must not: read or write entity rows.

use deadpool_postgres::Client;

use crate::{Result, StoreError};

/// Any constant works; it only has to be the same in every worker ("cl" "mg").
const MIGRATION_LOCK: i64 = 0x636c_6d67;

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`. Append only.
///
/// Ids and directories use the "C" collation so `ORDER BY id` is byte order, as in SQLite, whatever the
/// database's locale. `json` (not `jsonb`) keeps the text as written: no re-parse on read, and tool output
/// with `\u0000` in it is accepted.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE session (
        id           TEXT COLLATE "C" PRIMARY KEY,
        parent_id    TEXT COLLATE "C",
        directory    TEXT COLLATE "C" NOT NULL,
        time_updated BIGINT NOT NULL,
        data         JSON NOT NULL
    );
    CREATE INDEX session_parent ON session (parent_id, time_updated);
    CREATE INDEX session_directory ON session (directory, time_updated);

    CREATE TABLE message (
        id          TEXT COLLATE "C" PRIMARY KEY,
        session_id  TEXT COLLATE "C" NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        -- An assistant message without time.completed: what recovery looks for.
        unfinished  BOOLEAN NOT NULL DEFAULT FALSE,
        data        JSON NOT NULL
    );
    CREATE UNIQUE INDEX message_session ON message (session_id, id);
    CREATE INDEX message_unfinished ON message (session_id) WHERE unfinished;

    CREATE TABLE part (
        id          TEXT COLLATE "C" PRIMARY KEY,
        message_id  TEXT COLLATE "C" NOT NULL REFERENCES message (id) ON DELETE CASCADE,
        session_id  TEXT COLLATE "C" NOT NULL,
        kind        TEXT NOT NULL,
        tool_status TEXT,
        data        JSON NOT NULL
    );
    CREATE INDEX part_message ON part (message_id, id);
    CREATE INDEX part_open_tool ON part (session_id) WHERE tool_status IN ('pending', 'running');

    CREATE TABLE todo (
        session_id TEXT COLLATE "C" PRIMARY KEY,
        data       JSON NOT NULL
    );

    CREATE TABLE approval (
        id         BIGSERIAL PRIMARY KEY,
        project    TEXT NOT NULL,
        permission TEXT NOT NULL,
        pattern    TEXT NOT NULL,
        action     TEXT NOT NULL,
        created    BIGINT NOT NULL,
        UNIQUE (project, permission, pattern)
    );

    -- One row per running session: who runs it and until when (database time) unless renewed.
    CREATE TABLE run_lease (
        session_id TEXT COLLATE "C" PRIMARY KEY,
        owner      TEXT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE INDEX run_lease_expiry ON run_lease (expires_at);

    -- Prompts posted while the session was busy, run in id order by whichever worker holds the lease.
    CREATE TABLE queued_input (
        id         BIGSERIAL PRIMARY KEY,
        session_id TEXT COLLATE "C" NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        input      JSON NOT NULL,
        created    BIGINT NOT NULL
    );
    CREATE INDEX queued_input_session ON queued_input (session_id, id);

    -- Every worker's bus events, for every worker's SSE clients. Ids are handed out under an advisory
    -- lock held to commit, so they become visible in id order; rows are pruned by age.
    CREATE TABLE event (
        id      BIGSERIAL PRIMARY KEY,
        created TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        payload JSON NOT NULL
    );
    CREATE INDEX event_created ON event (created);
    "#,
    // 2: background jobs (DESIGN.md §5f); `owner` names the process that runs one.
    r#"
    CREATE TABLE job (
        id         TEXT COLLATE "C" PRIMARY KEY,
        session_id TEXT COLLATE "C" NOT NULL REFERENCES session (id) ON DELETE CASCADE,
        state      TEXT NOT NULL,
        owner      TEXT NOT NULL,
        data       JSON NOT NULL
    );
    CREATE INDEX job_session ON job (session_id, id);
    CREATE INDEX job_running ON job (owner) WHERE state = 'running';
    "#,
];

/// The newest schema version this build understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema to [`SCHEMA_VERSION`] in one transaction.
pub(crate) async fn migrate(client: &mut Client) -> Result<()> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS codeloop_schema (version BIGINT NOT NULL)").await?;
    let found: i64 = match tx.query_opt("SELECT version FROM codeloop_schema", &[]).await? {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO codeloop_schema (version) VALUES (0)", &[]).await?;
            0
        }
    };
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        tx.batch_execute(sql).await?;
        tracing::debug!(version = index + 1, "applied PostgreSQL store migration");
    }
    if found < SCHEMA_VERSION {
        tx.execute("UPDATE codeloop_schema SET version = $1", &[&SCHEMA_VERSION]).await?;
    }
    tx.commit().await?;
    Ok(())
}
