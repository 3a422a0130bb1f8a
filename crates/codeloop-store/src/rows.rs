//! Row encoding: how each entity becomes one row (upserted in place) and how a row becomes the entity again.
//!
//! Owns: the SQL of single-row writes and the JSON (de)serialisation of the `data` columns.
//! Must not: open transactions or decide what to write; callers do.

use codeloop_types::{Message, MessageId, Part, PartId, PartKind, Session, SessionId};
use rusqlite::types::Type;
use rusqlite::{Connection, Row, params};

use crate::{Result, StoreError, Write};

const UPSERT_SESSION: &str = "INSERT INTO session (id, parent_id, directory, time_updated, data)
     VALUES (?1, ?2, ?3, ?4, ?5)
     ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id, directory = excluded.directory,
         time_updated = excluded.time_updated, data = excluded.data";

const UPSERT_MESSAGE: &str = "INSERT INTO message (id, session_id, unfinished, data) VALUES (?1, ?2, ?3, ?4)
     ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, unfinished = excluded.unfinished,
         data = excluded.data";

const UPSERT_PART: &str = "INSERT INTO part (id, message_id, session_id, kind, tool_status, data)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (id) DO UPDATE SET message_id = excluded.message_id, session_id = excluded.session_id,
         kind = excluded.kind, tool_status = excluded.tool_status, data = excluded.data";

/// Applies one write with cached statements. The caller owns the transaction.
pub(crate) fn apply_write(conn: &Connection, write: &Write) -> Result<()> {
    match write {
        Write::Session(session) => upsert_session(conn, session),
        Write::Message(message) => upsert_message(conn, message),
        Write::Part(part) => upsert_part(conn, part),
        Write::RemovePart(id) => {
            conn.prepare_cached("DELETE FROM part WHERE id = ?1")?.execute([id.as_str()])?;
            Ok(())
        }
        Write::RemoveMessage(id) => {
            // Parts go with it through the foreign key's ON DELETE CASCADE.
            conn.prepare_cached("DELETE FROM message WHERE id = ?1")?.execute([id.as_str()])?;
            Ok(())
        }
        Write::RemoveQueued(id) => {
            conn.prepare_cached("DELETE FROM queued_input WHERE id = ?1")?.execute([id])?;
            Ok(())
        }
        Write::Job { job, owner } => upsert_job(conn, job, owner),
    }
}

pub(crate) fn upsert_job(conn: &Connection, job: &codeloop_types::Job, owner: &str) -> Result<()> {
    let data = encode_json("job", job.id.as_str(), job)?;
    // A job's last record can come after its session was deleted: it is dropped with the session.
    conn.prepare_cached(
        "INSERT INTO job (id, session_id, state, owner, data)
         SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM session WHERE id = ?2)
         ON CONFLICT (id) DO UPDATE SET state = excluded.state, owner = excluded.owner, data = excluded.data",
    )?
    .execute(params![job.id.as_str(), job.session_id.as_str(), job.state.as_str(), owner, data])?;
    Ok(())
}

pub(crate) fn upsert_session(conn: &Connection, session: &Session) -> Result<()> {
    let data = encode_json("session", session.id.as_str(), session)?;
    conn.prepare_cached(UPSERT_SESSION)?.execute(params![
        session.id.as_str(),
        session.parent_id.as_ref().map(SessionId::as_str),
        session.directory,
        session.time.updated,
        data
    ])?;
    Ok(())
}

/// True for an assistant message that has not been settled: what recovery looks for.
pub(crate) fn is_unfinished(message: &Message) -> bool {
    matches!(message, Message::Assistant(m) if m.time.completed.is_none())
}

pub(crate) fn upsert_message(conn: &Connection, message: &Message) -> Result<()> {
    let id = message.id().as_str();
    let data = encode_json("message", id, message)?;
    conn.prepare_cached(UPSERT_MESSAGE)?.execute(params![
        id,
        message.session_id().as_str(),
        is_unfinished(message),
        data
    ])?;
    Ok(())
}

pub(crate) fn upsert_part(conn: &Connection, part: &Part) -> Result<()> {
    let data = encode_kind(part.id.as_str(), &part.kind)?;
    let tool_status = part.as_tool().map(|tool| tool.state.status());
    conn.prepare_cached(UPSERT_PART)?.execute(params![
        part.id.as_str(),
        part.message_id.as_str(),
        part.session_id.as_str(),
        part.kind_name(),
        tool_status,
        data
    ])?;
    Ok(())
}

/// The part's fields as JSON, without the `type` tag: the tag lives in the `kind` column, so reading a
/// part decodes straight into its struct instead of buffering the JSON to find the tag first (~30% of
/// the decode time of a tool part). Only the kind's fields are stored; the ids are columns already.
pub(crate) fn encode_kind(id: &str, kind: &PartKind) -> Result<String> {
    match kind {
        PartKind::Text(p) => encode_json("part", id, p),
        PartKind::Reasoning(p) => encode_json("part", id, p),
        PartKind::File(p) => encode_json("part", id, p),
        PartKind::Tool(p) => encode_json("part", id, p),
        PartKind::StepStart(p) => encode_json("part", id, p),
        PartKind::StepFinish(p) => encode_json("part", id, p),
        PartKind::Patch(p) => encode_json("part", id, p),
        PartKind::Compaction(p) => encode_json("part", id, p),
        PartKind::Subtask(p) => encode_json("part", id, p),
        PartKind::Agent(p) => encode_json("part", id, p),
        PartKind::Retry(p) => encode_json("part", id, p),
    }
}

/// The inverse of [`encode_kind`]; `kind` is [`Part::kind_name`].
pub(crate) fn decode_kind(id: &str, kind: &str, data: &str) -> Result<PartKind> {
    Ok(match kind {
        "text" => PartKind::Text(decode_json("part", id, data)?),
        "reasoning" => PartKind::Reasoning(decode_json("part", id, data)?),
        "file" => PartKind::File(decode_json("part", id, data)?),
        "tool" => PartKind::Tool(decode_json("part", id, data)?),
        "step-start" => PartKind::StepStart(decode_json("part", id, data)?),
        "step-finish" => PartKind::StepFinish(decode_json("part", id, data)?),
        "patch" => PartKind::Patch(decode_json("part", id, data)?),
        "compaction" => PartKind::Compaction(decode_json("part", id, data)?),
        "subtask" => PartKind::Subtask(decode_json("part", id, data)?),
        "agent" => PartKind::Agent(decode_json("part", id, data)?),
        "retry" => PartKind::Retry(decode_json("part", id, data)?),
        other => {
            let source = serde::de::Error::custom(format!("unknown part type `{other}`"));
            return Err(StoreError::Corrupt { table: "part", id: id.to_owned(), source });
        }
    })
}

pub(crate) fn encode_json<T: serde::Serialize>(table: &'static str, id: &str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|source| StoreError::Corrupt { table, id: id.to_owned(), source })
}

pub(crate) fn decode_json<T: serde::de::DeserializeOwned>(
    table: &'static str,
    id: &str,
    json: &str,
) -> Result<T> {
    serde_json::from_str(json).map_err(|source| StoreError::Corrupt { table, id: id.to_owned(), source })
}

/// A TEXT column borrowed from the row, without copying.
pub(crate) fn text<'r>(row: &'r Row<'_>, index: usize) -> Result<&'r str> {
    row.get_ref(index)?.as_str().map_err(|e| {
        StoreError::Sqlite(rusqlite::Error::FromSqlConversionFailure(index, Type::Text, Box::new(e)))
    })
}

/// Decodes a `session` row selected as `(id, data)`.
pub(crate) fn session_from_row(row: &Row<'_>) -> Result<Session> {
    let id = text(row, 0)?;
    decode_json("session", id, text(row, 1)?)
}

/// Decodes a `message` row selected as `(id, data)`.
pub(crate) fn message_from_row(row: &Row<'_>) -> Result<Message> {
    let id = text(row, 0)?;
    decode_json("message", id, text(row, 1)?)
}

/// Decodes a `part` row selected as `(id, message_id, session_id, kind, data)`.
pub(crate) fn part_from_row(row: &Row<'_>) -> Result<Part> {
    let id = text(row, 0)?;
    let kind = decode_kind(id, text(row, 3)?, text(row, 4)?)?;
    Ok(Part {
        id: PartId::from(id),
        message_id: MessageId::from(text(row, 1)?),
        session_id: SessionId::from(text(row, 2)?),
        kind,
    })
}

pub(crate) fn get_session(conn: &Connection, id: &SessionId) -> Result<Option<Session>> {
    let mut stmt = conn.prepare_cached("SELECT id, data FROM session WHERE id = ?1")?;
    let mut rows = stmt.query([id.as_str()])?;
    match rows.next()? {
        Some(row) => Ok(Some(session_from_row(row)?)),
        None => Ok(None),
    }
}
