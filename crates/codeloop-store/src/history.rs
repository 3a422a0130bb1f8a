//! History reads: one message, a page of messages, or a whole session, each with its parts in id order.
//!
//! Owns: the read queries over `message` and `part` and stitching parts onto their messages.
//! Must not: write, or filter history by business rules (summaries, pruning): the projection does that.

use codeloop_types::{MessageId, SessionId};
use rusqlite::Connection;

use crate::rows::{message_from_row, part_from_row};
use crate::{MessageWithParts, Page, Result};

const MESSAGE_BY_ID: &str = "SELECT id, data FROM message WHERE id = ?1";
const PARTS_OF_MESSAGE: &str =
    "SELECT id, message_id, session_id, kind, data FROM part WHERE message_id = ?1 ORDER BY id";

const ALL_MESSAGES: &str = "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id";
const ALL_PARTS: &str = "SELECT p.id, p.message_id, p.session_id, p.kind, p.data
     FROM message m JOIN part p ON p.message_id = m.id
     WHERE m.session_id = ?1 ORDER BY m.id, p.id";

const NEWEST_MESSAGES: &str = "SELECT id, data FROM message WHERE session_id = ?1 ORDER BY id DESC LIMIT ?2";
const MESSAGES_BEFORE: &str =
    "SELECT id, data FROM message WHERE session_id = ?1 AND id < ?3 ORDER BY id DESC LIMIT ?2";
const PART_COUNTS_IN_RANGE: &str = "SELECT m.id, COUNT(p.id)
     FROM message m LEFT JOIN part p ON p.message_id = m.id
     WHERE m.session_id = ?1 AND m.id >= ?2 AND m.id <= ?3 GROUP BY m.id ORDER BY m.id DESC";
pub(crate) const PARTS_IN_RANGE: &str = "SELECT p.id, p.message_id, p.session_id, p.kind, p.data
     FROM message m JOIN part p ON p.message_id = m.id
     WHERE m.session_id = ?1 AND m.id >= ?2 AND m.id <= ?3 ORDER BY m.id, p.id";

pub(crate) fn get_message(conn: &Connection, id: &MessageId) -> Result<Option<MessageWithParts>> {
    let mut stmt = conn.prepare_cached(MESSAGE_BY_ID)?;
    let mut rows = stmt.query([id.as_str()])?;
    let Some(row) = rows.next()? else { return Ok(None) };
    let info = message_from_row(row)?;
    let mut stmt = conn.prepare_cached(PARTS_OF_MESSAGE)?;
    let mut rows = stmt.query([id.as_str()])?;
    let mut parts = Vec::new();
    while let Some(row) = rows.next()? {
        parts.push(part_from_row(row)?);
    }
    Ok(Some(MessageWithParts { info, parts }))
}

/// The whole session, oldest first.
pub(crate) fn load_history(conn: &Connection, session: &SessionId) -> Result<Vec<MessageWithParts>> {
    let mut messages = Vec::new();
    let mut stmt = conn.prepare_cached(ALL_MESSAGES)?;
    let mut rows = stmt.query([session.as_str()])?;
    while let Some(row) = rows.next()? {
        messages.push(MessageWithParts { info: message_from_row(row)?, parts: Vec::new() });
    }
    let mut stmt = conn.prepare_cached(ALL_PARTS)?;
    attach_parts(&mut messages, stmt.query([session.as_str()])?)?;
    Ok(messages)
}

/// Messages strictly older than `page.before`, newest first; `limit == 0` means no limit.
pub(crate) fn list_messages(
    conn: &Connection,
    session: &SessionId,
    page: &Page,
) -> Result<Vec<MessageWithParts>> {
    let limit = if page.limit == 0 { -1 } else { i64::try_from(page.limit).unwrap_or(i64::MAX) };
    let mut messages = Vec::new();
    {
        let mut stmt;
        let mut rows = match &page.before {
            Some(before) => {
                stmt = conn.prepare_cached(MESSAGES_BEFORE)?;
                stmt.query(rusqlite::params![session.as_str(), limit, before.as_str()])?
            }
            None => {
                stmt = conn.prepare_cached(NEWEST_MESSAGES)?;
                stmt.query(rusqlite::params![session.as_str(), limit])?
            }
        };
        while let Some(row) = rows.next()? {
            messages.push(MessageWithParts { info: message_from_row(row)?, parts: Vec::new() });
        }
    }
    if page.max_parts.is_some()
        && let (Some(newest), Some(oldest)) = (messages.first(), messages.last())
    {
        let (low, high) = (oldest.info.id().as_str().to_owned(), newest.info.id().as_str().to_owned());
        let mut stmt = conn.prepare_cached(PART_COUNTS_IN_RANGE)?;
        let counts = stmt
            .query_map(rusqlite::params![session.as_str(), low, high], |row| row.get::<_, i64>(1))?
            .collect::<std::result::Result<Vec<i64>, _>>()?;
        messages.truncate(page.keep(counts.into_iter().map(|n| usize::try_from(n).unwrap_or(0))));
    }
    let (Some(newest), Some(oldest)) = (messages.first(), messages.last()) else { return Ok(messages) };
    let (low, high) = (oldest.info.id().as_str().to_owned(), newest.info.id().as_str().to_owned());
    // Hydrate in ascending order, then give the page back newest first.
    messages.reverse();
    let mut stmt = conn.prepare_cached(PARTS_IN_RANGE)?;
    attach_parts(&mut messages, stmt.query(rusqlite::params![session.as_str(), low, high])?)?;
    messages.reverse();
    Ok(messages)
}

/// Stitches SQLite part rows (ordered by message id, then part id) onto messages (ordered by id).
fn attach_parts(messages: &mut [MessageWithParts], mut rows: rusqlite::Rows<'_>) -> Result<()> {
    let mut stitch = Stitch::default();
    while let Some(row) = rows.next()? {
        stitch.push(messages, part_from_row(row)?);
    }
    Ok(())
}

/// Puts parts onto their messages in one pass, for both stores: parts come ordered by message id, then
/// part id, and messages by id, so a cursor only moves forward.
#[derive(Default)]
pub(crate) struct Stitch {
    index: usize,
}

impl Stitch {
    pub(crate) fn push(&mut self, messages: &mut [MessageWithParts], part: codeloop_types::Part) {
        while self.index < messages.len() && messages[self.index].info.id() != &part.message_id {
            self.index += 1;
        }
        match messages.get_mut(self.index) {
            Some(message) => message.parts.push(part),
            // Unreachable with the joins of both stores (every part's message is in the list, same order,
            // read in one snapshot).
            None => tracing::warn!(part = %part.id, "part without a message in the same read; skipped"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_reads_use_indexes_and_need_no_sort() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        crate::schema::setup_writer(&mut conn).unwrap();
        for sql in
            [ALL_MESSAGES, ALL_PARTS, NEWEST_MESSAGES, MESSAGES_BEFORE, PARTS_IN_RANGE, PARTS_OF_MESSAGE]
        {
            let plan = crate::schema::query_plan(&conn, sql);
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
            assert!(!plan.contains("SCAN p") && !plan.contains("SCAN part"), "{sql}: {plan}");
        }
    }
}
