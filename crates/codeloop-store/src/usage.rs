//! What each provider step spent, read back for `codeloop stats` (DESIGN.md §5h): one row per
//! step-finish part, with its session's directory and its message's model and time.
//!
//! Owns: the row shape and decoding the stored JSON into it (shared by SQLite and PostgreSQL).
//! Must not: aggregate or price anything; that is the caller's.

use codeloop_types::{Message, Millis, ModelRef, SessionId, Tokens};

use crate::Result;
use crate::rows::decode_json;

/// One provider step's usage.
#[derive(Debug, Clone, PartialEq)]
pub struct StepUsage {
    pub session_id: SessionId,
    /// The session's project directory.
    pub directory: String,
    pub model: ModelRef,
    /// When the step's assistant message was created (epoch ms).
    pub created: Millis,
    pub tokens: Tokens,
    pub cost: f64,
}

/// The fields of a stored step-finish part that count.
#[derive(serde::Deserialize)]
struct StepFinishData {
    #[serde(default)]
    tokens: Tokens,
    #[serde(default)]
    cost: f64,
}

/// The SQL both stores run (`{json}` is how each reads a JSON column as text): step-finish parts of
/// sessions updated since `$1`, with their message and session directory. `time_updated` only
/// narrows; each message's own time decides.
pub(crate) fn step_usage_sql(json_as_text: &str) -> String {
    format!(
        "SELECT p.id, s.id, s.directory, m.data{json_as_text}, p.data{json_as_text} FROM part p \
         JOIN message m ON m.id = p.message_id JOIN session s ON s.id = m.session_id \
         WHERE p.kind = 'step-finish' AND s.time_updated >= $1 ORDER BY p.id"
    )
}

/// Decodes one row of [`STEP_USAGE_SQL`]; `None` for a step that is not an assistant's, or older than
/// `since`.
pub(crate) fn step_usage(
    part_id: &str,
    session_id: &str,
    directory: &str,
    message: &str,
    part: &str,
    since: Millis,
) -> Result<Option<StepUsage>> {
    let Message::Assistant(message) = decode_json::<Message>("message", part_id, message)? else {
        return Ok(None);
    };
    if message.time.created < since {
        return Ok(None);
    }
    let step: StepFinishData = decode_json("part", part_id, part)?;
    Ok(Some(StepUsage {
        session_id: session_id.into(),
        directory: directory.to_owned(),
        model: message.model,
        created: message.time.created,
        tokens: step.tokens,
        cost: step.cost,
    }))
}
