//! Row encoding and history reads of the PostgreSQL store: the same JSON as the SQLite rows (`rows.rs`),
//! through cached prepared statements.
//!
//! Owns: single-row upserts, deletes and the history queries, each inside the caller's transaction.
//! Must not: open or commit transactions; `pg/mod.rs` does.

use codeloop_types::{
    Message, MessageId, Part, PartId, PermissionAction, PermissionRule, Session, SessionId,
};
use deadpool_postgres::Transaction;
use tokio_postgres::Row;

use crate::rows::{decode_json, decode_kind, encode_json, encode_kind, is_unfinished};
use crate::{Approval, MessageWithParts, Page, Result, Write};

const UPSERT_SESSION: &str = "INSERT INTO session (id, parent_id, directory, time_updated, data)
     VALUES ($1, $2, $3, $4, $5::text::json)
     ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id, directory = excluded.directory,
         time_updated = excluded.time_updated, data = excluded.data";

const UPSERT_MESSAGE: &str = "INSERT INTO message (id, session_id, unfinished, data)
     VALUES ($1, $2, $3, $4::text::json)
     ON CONFLICT (id) DO UPDATE SET session_id = excluded.session_id, unfinished = excluded.unfinished,
         data = excluded.data";

const UPSERT_PART: &str = "INSERT INTO part (id, message_id, session_id, kind, tool_status, data)
     VALUES ($1, $2, $3, $4, $5, $6::text::json)
     ON CONFLICT (id) DO UPDATE SET message_id = excluded.message_id, session_id = excluded.session_id,
         kind = excluded.kind, tool_status = excluded.tool_status, data = excluded.data";

pub(crate) const SESSION_COLUMNS: &str = "id, data::text";
const MESSAGE_BY_ID: &str = "SELECT id, data::text FROM message WHERE id = $1";
const PARTS_OF_MESSAGE: &str =
    "SELECT id, message_id, session_id, kind, data::text FROM part WHERE message_id = $1 ORDER BY id";
const ALL_MESSAGES: &str = "SELECT id, data::text FROM message WHERE session_id = $1 ORDER BY id";
const ALL_PARTS: &str = "SELECT p.id, p.message_id, p.session_id, p.kind, p.data::text
     FROM message m JOIN part p ON p.message_id = m.id
     WHERE m.session_id = $1 ORDER BY m.id, p.id";
const NEWEST_MESSAGES: &str =
    "SELECT id, data::text FROM message WHERE session_id = $1 ORDER BY id DESC LIMIT $2";
const MESSAGES_BEFORE: &str =
    "SELECT id, data::text FROM message WHERE session_id = $1 AND id < $3 ORDER BY id DESC LIMIT $2";
const PART_COUNTS_IN_RANGE: &str = "SELECT m.id, COUNT(p.id)
     FROM message m LEFT JOIN part p ON p.message_id = m.id
     WHERE m.session_id = $1 AND m.id >= $2 AND m.id <= $3 GROUP BY m.id ORDER BY m.id DESC";
const PARTS_IN_RANGE: &str = "SELECT p.id, p.message_id, p.session_id, p.kind, p.data::text
     FROM message m JOIN part p ON p.message_id = m.id
     WHERE m.session_id = $1 AND m.id >= $2 AND m.id <= $3 ORDER BY m.id, p.id";

pub(crate) const OPEN_TOOL_PARTS: &str = "SELECT id, message_id, session_id, kind, data::text FROM part
     WHERE session_id = $1 AND tool_status IN ('pending', 'running') FOR UPDATE";
pub(crate) const UNFINISHED_MESSAGES: &str =
    "SELECT id, data::text FROM message WHERE session_id = $1 AND unfinished FOR UPDATE";
pub(crate) const OPEN_SESSIONS: &str =
    "SELECT session_id FROM part WHERE tool_status IN ('pending', 'running')
     UNION SELECT session_id FROM message WHERE unfinished";

pub(crate) async fn apply_write(tx: &Transaction<'_>, write: &Write) -> Result<()> {
    match write {
        Write::Session(session) => upsert_session(tx, session).await,
        Write::Message(message) => upsert_message(tx, message).await,
        Write::Part(part) => upsert_part(tx, part).await,
        Write::RemovePart(id) => {
            let stmt = tx.prepare_cached("DELETE FROM part WHERE id = $1").await?;
            tx.execute(&stmt, &[&id.as_str()]).await?;
            Ok(())
        }
        Write::RemoveMessage(id) => {
            // Parts go with it through ON DELETE CASCADE.
            let stmt = tx.prepare_cached("DELETE FROM message WHERE id = $1").await?;
            tx.execute(&stmt, &[&id.as_str()]).await?;
            Ok(())
        }
        Write::RemoveQueued(id) => {
            let stmt = tx.prepare_cached("DELETE FROM queued_input WHERE id = $1").await?;
            tx.execute(&stmt, &[id]).await?;
            Ok(())
        }
        Write::Job { job, owner } => upsert_job(tx, job, owner).await,
    }
}

pub(crate) async fn upsert_job(tx: &Transaction<'_>, job: &codeloop_types::Job, owner: &str) -> Result<()> {
    let data = encode_json("job", job.id.as_str(), job)?;
    let stmt = tx
        .prepare_cached(
            // A job's last record can come after its session was deleted: it is dropped with the session.
            "INSERT INTO job (id, session_id, state, owner, data)
             SELECT $1, $2, $3, $4, $5::text::json WHERE EXISTS (SELECT 1 FROM session WHERE id = $2)
             ON CONFLICT (id) DO UPDATE SET state = excluded.state, owner = excluded.owner, data = excluded.data",
        )
        .await?;
    tx.execute(&stmt, &[&job.id.as_str(), &job.session_id.as_str(), &job.state.as_str(), &owner, &data])
        .await?;
    Ok(())
}

async fn upsert_session(tx: &Transaction<'_>, session: &Session) -> Result<()> {
    let data = encode_json("session", session.id.as_str(), session)?;
    let stmt = tx.prepare_cached(UPSERT_SESSION).await?;
    let parent = session.parent_id.as_ref().map(SessionId::as_str);
    tx.execute(&stmt, &[&session.id.as_str(), &parent, &session.directory, &session.time.updated, &data])
        .await?;
    Ok(())
}

pub(crate) async fn upsert_message(tx: &Transaction<'_>, message: &Message) -> Result<()> {
    let id = message.id().as_str();
    let data = encode_json("message", id, message)?;
    let stmt = tx.prepare_cached(UPSERT_MESSAGE).await?;
    tx.execute(&stmt, &[&id, &message.session_id().as_str(), &is_unfinished(message), &data]).await?;
    Ok(())
}

pub(crate) async fn upsert_part(tx: &Transaction<'_>, part: &Part) -> Result<()> {
    let data = encode_kind(part.id.as_str(), &part.kind)?;
    let tool_status = part.as_tool().map(|tool| tool.state.status());
    let stmt = tx.prepare_cached(UPSERT_PART).await?;
    tx.execute(
        &stmt,
        &[
            &part.id.as_str(),
            &part.message_id.as_str(),
            &part.session_id.as_str(),
            &part.kind_name(),
            &tool_status,
            &data,
        ],
    )
    .await?;
    Ok(())
}

/// Decodes a `session` row selected as `(id, data::text)`.
pub(crate) fn session_from_row(row: &Row) -> Result<Session> {
    let id: &str = row.try_get(0)?;
    decode_json("session", id, row.try_get(1)?)
}

/// Decodes a `message` row selected as `(id, data::text)`.
pub(crate) fn message_from_row(row: &Row) -> Result<Message> {
    let id: &str = row.try_get(0)?;
    decode_json("message", id, row.try_get(1)?)
}

/// Decodes a `part` row selected as `(id, message_id, session_id, kind, data::text)`.
pub(crate) fn part_from_row(row: &Row) -> Result<Part> {
    let id: &str = row.try_get(0)?;
    let kind = decode_kind(id, row.try_get(3)?, row.try_get(4)?)?;
    Ok(Part {
        id: PartId::from(id),
        message_id: MessageId::from(row.try_get::<_, &str>(1)?),
        session_id: SessionId::from(row.try_get::<_, &str>(2)?),
        kind,
    })
}

pub(crate) async fn get_message(tx: &Transaction<'_>, id: &MessageId) -> Result<Option<MessageWithParts>> {
    let stmt = tx.prepare_cached(MESSAGE_BY_ID).await?;
    let Some(row) = tx.query_opt(&stmt, &[&id.as_str()]).await? else { return Ok(None) };
    let info = message_from_row(&row)?;
    let stmt = tx.prepare_cached(PARTS_OF_MESSAGE).await?;
    let parts = tx.query(&stmt, &[&id.as_str()]).await?.iter().map(part_from_row).collect::<Result<_>>()?;
    Ok(Some(MessageWithParts { info, parts }))
}

/// The whole session, oldest first.
pub(crate) async fn load_history(tx: &Transaction<'_>, session: &SessionId) -> Result<Vec<MessageWithParts>> {
    let stmt = tx.prepare_cached(ALL_MESSAGES).await?;
    let mut messages = tx
        .query(&stmt, &[&session.as_str()])
        .await?
        .iter()
        .map(|row| Ok(MessageWithParts { info: message_from_row(row)?, parts: Vec::new() }))
        .collect::<Result<Vec<_>>>()?;
    let stmt = tx.prepare_cached(ALL_PARTS).await?;
    attach_parts(&mut messages, &tx.query(&stmt, &[&session.as_str()]).await?)?;
    Ok(messages)
}

/// Messages strictly older than `page.before`, newest first; `limit == 0` means no limit.
pub(crate) async fn list_messages(
    tx: &Transaction<'_>,
    session: &SessionId,
    page: &Page,
) -> Result<Vec<MessageWithParts>> {
    // LIMIT NULL is no limit.
    let limit = (page.limit != 0).then(|| i64::try_from(page.limit).unwrap_or(i64::MAX));
    let rows = match &page.before {
        Some(before) => {
            let stmt = tx.prepare_cached(MESSAGES_BEFORE).await?;
            tx.query(&stmt, &[&session.as_str(), &limit, &before.as_str()]).await?
        }
        None => {
            let stmt = tx.prepare_cached(NEWEST_MESSAGES).await?;
            tx.query(&stmt, &[&session.as_str(), &limit]).await?
        }
    };
    let mut messages = rows
        .iter()
        .map(|row| Ok(MessageWithParts { info: message_from_row(row)?, parts: Vec::new() }))
        .collect::<Result<Vec<_>>>()?;
    if page.max_parts.is_some()
        && let (Some(newest), Some(oldest)) = (messages.first(), messages.last())
    {
        let (low, high) = (oldest.info.id().as_str().to_owned(), newest.info.id().as_str().to_owned());
        let stmt = tx.prepare_cached(PART_COUNTS_IN_RANGE).await?;
        let counts = tx.query(&stmt, &[&session.as_str(), &low, &high]).await?;
        let counts = counts.iter().map(|row| usize::try_from(row.get::<_, i64>(1)).unwrap_or(0));
        messages.truncate(page.keep(counts));
    }
    let (Some(newest), Some(oldest)) = (messages.first(), messages.last()) else { return Ok(messages) };
    let (low, high) = (oldest.info.id().as_str().to_owned(), newest.info.id().as_str().to_owned());
    messages.reverse();
    let stmt = tx.prepare_cached(PARTS_IN_RANGE).await?;
    attach_parts(&mut messages, &tx.query(&stmt, &[&session.as_str(), &low, &high]).await?)?;
    messages.reverse();
    Ok(messages)
}

/// Stitches PostgreSQL part rows onto messages (see [`crate::history::Stitch`]).
fn attach_parts(messages: &mut [MessageWithParts], rows: &[Row]) -> Result<()> {
    let mut stitch = crate::history::Stitch::default();
    for row in rows {
        stitch.push(messages, part_from_row(row)?);
    }
    Ok(())
}

pub(super) fn action_name(action: PermissionAction) -> &'static str {
    match action {
        PermissionAction::Allow => "allow",
        PermissionAction::Ask => "ask",
        PermissionAction::Deny => "deny",
    }
}

pub(super) fn approval_from_row(row: &tokio_postgres::Row) -> Result<Approval> {
    let id: i64 = row.try_get(0)?;
    let action = match row.try_get::<_, &str>(4)? {
        "allow" => PermissionAction::Allow,
        "ask" => PermissionAction::Ask,
        "deny" => PermissionAction::Deny,
        other => decode_json("approval", &id.to_string(), other)?,
    };
    Ok(Approval {
        id,
        project: row.try_get(1)?,
        rule: PermissionRule { permission: row.try_get(2)?, pattern: row.try_get(3)?, action },
        created: row.try_get(5)?,
    })
}
