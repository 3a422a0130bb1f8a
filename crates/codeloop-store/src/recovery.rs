//! Crash recovery (DESIGN.md §4 "Store and recovery"): settles what a dead run left open.
//!
//! Tool parts still `pending`/`running` become `error "Tool execution aborted"` with
//! `metadata.interrupted = true`; assistant messages without `time.completed` get `Aborted` (unless they
//! already carry an error) and `time.completed = now`. Only sessions whose run lock can be taken are
//! touched, so a live run in another process is left alone.
//! Owns: finding those rows (through the partial indexes) and rewriting them in one transaction per session.
//! Must not: touch settled parts or messages, or anything a live run holds.

use codeloop_types::{AssistantError, Message, Millis, Part, SessionId};
use rusqlite::Connection;

use crate::rows::{message_from_row, part_from_row, upsert_message, upsert_part};
use crate::sqlite::SqliteStore;
use crate::{RecoveryReport, Result, Store as _, StoreError};

pub(crate) const OPEN_TOOL_SESSIONS_SQL: &str =
    "SELECT DISTINCT session_id FROM part WHERE tool_status IN ('pending', 'running')";
pub(crate) const UNFINISHED_SESSIONS_SQL: &str =
    "SELECT DISTINCT session_id FROM message WHERE unfinished = 1";

const OPEN_TOOL_PARTS: &str = "SELECT id, message_id, session_id, kind, data FROM part
     WHERE session_id = ?1 AND tool_status IN ('pending', 'running')";
const UNFINISHED_MESSAGES: &str = "SELECT id, data FROM message WHERE session_id = ?1 AND unfinished = 1";

/// Sessions with anything left open, whether or not a run holds them.
pub(crate) fn open_sessions(conn: &Connection) -> Result<Vec<SessionId>> {
    let mut sessions = Vec::new();
    for sql in [OPEN_TOOL_SESSIONS_SQL, UNFINISHED_SESSIONS_SQL] {
        let mut stmt = conn.prepare_cached(sql)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            sessions.push(SessionId::from(row.get::<_, String>(0)?));
        }
    }
    sessions.sort();
    sessions.dedup();
    Ok(sessions)
}

/// Recovers every session no live run holds.
/// Also returns the sessions whose runs it settled: the ones a dead process was running.
pub(crate) fn recover_unlocked(store: &SqliteStore, now: Millis) -> Result<(RecoveryReport, Vec<SessionId>)> {
    let mut report = RecoveryReport::default();
    let mut settled = Vec::new();
    for session in store.read(open_sessions)? {
        let _lock = match store.lock_session(&session) {
            Ok(lock) => lock,
            Err(StoreError::SessionBusy(_)) => {
                tracing::debug!(%session, "session is running elsewhere; recovery leaves it alone");
                continue;
            }
            Err(error) => return Err(error),
        };
        let one = store.write(|conn| recover_session(conn, &session, now))?;
        report.interrupted_parts += one.interrupted_parts;
        report.aborted_messages += one.aborted_messages;
        if one != RecoveryReport::default() {
            settled.push(session);
        }
    }
    if report != RecoveryReport::default() {
        tracing::info!(
            parts = report.interrupted_parts,
            messages = report.aborted_messages,
            "recovered runs left open by a crash"
        );
    }
    Ok((report, settled))
}

/// Settles one session's open parts and messages. The caller holds its lock and the write transaction.
pub(crate) fn recover_session(conn: &Connection, session: &SessionId, now: Millis) -> Result<RecoveryReport> {
    let mut report = RecoveryReport::default();
    for mut part in select(conn, OPEN_TOOL_PARTS, session, part_from_row)? {
        report.interrupted_parts += usize::from(settle_part(&mut part, now));
        // Rewritten even when already terminal: the status column is then brought back in line.
        upsert_part(conn, &part)?;
    }
    for mut message in select(conn, UNFINISHED_MESSAGES, session, message_from_row)? {
        report.aborted_messages += usize::from(settle_message(&mut message, now));
        upsert_message(conn, &message)?;
    }
    Ok(report)
}

/// Turns a pending/running tool part into its interrupted error; true if it changed. Shared by every store.
pub(crate) fn settle_part(part: &mut Part, now: Millis) -> bool {
    part.as_tool_mut().is_some_and(|tool| tool.state.interrupt(now).is_ok())
}

/// Marks an unfinished assistant message `Aborted` (unless it carries an error) and completed; true if it
/// was an assistant message. Shared by every store.
pub(crate) fn settle_message(message: &mut Message, now: Millis) -> bool {
    let Message::Assistant(assistant) = message else { return false };
    assistant.error.get_or_insert_with(AssistantError::aborted);
    assistant.time.completed = Some(now);
    true
}

fn select<T>(
    conn: &Connection,
    sql: &str,
    session: &SessionId,
    decode: fn(&rusqlite::Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query([session.as_str()])?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        out.push(decode(row)?);
    }
    Ok(out)
}
