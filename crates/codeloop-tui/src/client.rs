//! The one vocabulary the UI speaks to an engine, whether it runs in this process ([`crate::local`]) or
//! behind `codeloop serve` ([`crate::remote`]). The UI never touches either directly, so both modes
//! behave the same.
//!
//! Owns: the operations the UI needs and the shape of the live event feed.
//! Must not: hold UI state or re-validate what the engine validates.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use codeloop_types::{Event, MessageId, ModelRef, PermissionReply, QuestionId, Session, SessionId};
use codeloop_types::{MessageWithParts, Page};
use tokio::sync::mpsc;

/// What the live feed carries.
#[derive(Debug, Clone)]
pub enum Incoming {
    Event(Arc<Event>),
    /// Events were lost (the UI fell behind, or a server could not replay them): reload the session.
    Resync,
    /// The feed ended for good (the server went away).
    Closed(String),
}

/// A permission answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionAnswer {
    pub reply: PermissionReply,
    /// With `Reject`: a message fed back to the model.
    pub message: Option<String>,
}

/// Input for one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub text: String,
    pub model: Option<ModelRef>,
    pub agent: Option<String>,
    /// `/effort`: how hard the model thinks (`None`: the agent's or model's).
    pub effort: Option<codeloop_types::Effort>,
}

/// A command a person may type as `/NAME args` (DESIGN.md §5g): a command file, an MCP prompt, `/init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandEntry {
    pub name: String,
    pub description: Option<String>,
    pub hint: Option<String>,
}

/// The engine operations the UI uses. Every call returns an error a person can act on.
#[async_trait]
pub trait Client: Send + Sync + 'static {
    /// Starts the live event feed (every session; the UI filters). Nothing published after this
    /// returns is missed.
    async fn subscribe(&self) -> anyhow::Result<mpsc::Receiver<Incoming>>;
    async fn session(&self, id: &SessionId) -> anyhow::Result<Session>;
    /// Root sessions in `directory`, most recently updated first.
    async fn sessions(&self, directory: &Path) -> anyhow::Result<Vec<Session>>;
    async fn create_session(
        &self,
        directory: &Path,
        agent: Option<&str>,
        model: Option<&ModelRef>,
    ) -> anyhow::Result<Session>;
    async fn delete_session(&self, id: &SessionId) -> anyhow::Result<()>;
    async fn history(&self, id: &SessionId) -> anyhow::Result<Vec<MessageWithParts>>;
    /// A page of messages (`page.before`: `None` for the newest), newest first. The UI opens a session a
    /// page at a time, bounded by parts as well as messages, so neither a long session nor a long message
    /// is ever in memory whole.
    async fn history_page(&self, id: &SessionId, page: Page) -> anyhow::Result<Vec<MessageWithParts>>;
    /// Sends input; a busy session queues it as its own turn after the run. Returns when the engine
    /// accepted it (in-process: when the run it started ended); the run itself is watched through events.
    async fn prompt(&self, id: &SessionId, prompt: Prompt) -> anyhow::Result<()>;
    /// Stops the session's run; returns after its cleanup.
    async fn abort(&self, id: &SessionId) -> anyhow::Result<()>;
    /// Summarises the session now; `focus` tells the summariser what matters most.
    async fn compact(&self, id: &SessionId, focus: Option<String>) -> anyhow::Result<()>;
    async fn revert(&self, id: &SessionId, message: &MessageId) -> anyhow::Result<Session>;
    async fn unrevert(&self, id: &SessionId) -> anyhow::Result<Session>;
    async fn reply_permission(
        &self,
        id: &codeloop_types::PermissionId,
        answer: PermissionAnswer,
    ) -> anyhow::Result<()>;
    async fn reply_question(&self, id: &QuestionId, answers: Vec<Vec<String>>) -> anyhow::Result<()>;
    async fn reject_question(&self, id: &QuestionId) -> anyhow::Result<()>;
    /// MCP servers' requests of a session waiting for an answer.
    async fn pending_elicitations(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<Vec<codeloop_types::ElicitationRequest>>;
    /// Answers an MCP server's elicitation of a session.
    async fn answer_elicitation(
        &self,
        session: &SessionId,
        id: &codeloop_types::ElicitationId,
        reply: codeloop_types::ElicitationReply,
    ) -> anyhow::Result<()>;
    /// Pending permission requests and questions of a session (after a reconnect or a switch).
    async fn pending(
        &self,
        id: &SessionId,
    ) -> anyhow::Result<(Vec<codeloop_types::PermissionRequest>, Vec<codeloop_types::QuestionRequest>)>;
    /// Whether the session is running now.
    async fn status(&self, id: &SessionId) -> codeloop_types::SessionStatus;
    /// The model's context window in tokens, when known.
    async fn context_window(&self, model: &ModelRef) -> Option<u64>;
    /// Checks that a model can be used before it is chosen (`None`: the configured default).
    async fn check_model(&self, model: Option<&ModelRef>) -> anyhow::Result<()>;
    /// Checks that a person may pick `name` as the session's agent (the engine's one agent rule).
    async fn check_agent(&self, name: &str) -> anyhow::Result<()>;
    /// The commands of `directory` (built-ins, command files, MCP prompts).
    async fn commands(&self, directory: &Path) -> Vec<CommandEntry>;
    /// Runs command `name` with `arguments`; like [`Client::prompt`], returns once it is accepted.
    async fn run_command(
        &self,
        id: &SessionId,
        name: &str,
        arguments: &str,
        effort: Option<codeloop_types::Effort>,
    ) -> anyhow::Result<()>;
    /// Names of the agents a person can choose (`None`: unknown, accept any and let the engine say).
    async fn agents(&self) -> Option<Vec<String>>;
    /// The session's background jobs, oldest first.
    async fn jobs(&self, id: &SessionId) -> anyhow::Result<Vec<codeloop_types::Job>>;
    /// The newest output of a job, for a person (the model's own reads are not moved).
    async fn job_output(&self, id: &SessionId, job: &codeloop_types::JobId) -> anyhow::Result<String>;
    /// Ends a job (TERM, then KILL after 2 s); the job as it ended.
    async fn kill_job(
        &self,
        id: &SessionId,
        job: &codeloop_types::JobId,
    ) -> anyhow::Result<codeloop_types::Job>;
}

/// A whole history read a page at a time (`fetch(page)`: the page's messages older than `page.before`,
/// newest first; `shape` gives every page's limits), each message turned into what the caller keeps as
/// its page arrives. Returned oldest first. A page bounded by parts may end before `shape.limit`, so
/// only an empty page ends the history.
pub(crate) async fn read_pages<T, F, Fut>(
    shape: Page,
    mut fetch: F,
    keep: impl Fn(MessageWithParts) -> T,
    id_of: impl Fn(&T) -> &MessageId,
) -> anyhow::Result<Vec<T>>
where
    F: FnMut(Page) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<MessageWithParts>>>,
{
    let mut kept: Vec<T> = Vec::new();
    loop {
        let before = kept.last().map(|m| id_of(m).clone());
        let page = fetch(Page { before, ..shape.clone() }).await?;
        let last =
            page.is_empty() || shape.limit == 0 || (shape.max_parts.is_none() && page.len() < shape.limit);
        kept.extend(page.into_iter().map(&keep));
        if last {
            break;
        }
    }
    kept.reverse();
    Ok(kept)
}

/// A session as JSON with every message and part (`codeloop session export`'s shape).
pub fn export_json(session: &Session, history: &[MessageWithParts]) -> serde_json::Value {
    let hidden = codeloop_core::projection::hidden_ids(history);
    let messages: Vec<serde_json::Value> = history
        .iter()
        .map(|m| {
            let mut value = serde_json::json!({"info": m.info, "parts": m.parts});
            if hidden.contains(m.info.id()) {
                value["hidden"] = serde_json::json!(true);
            }
            value
        })
        .collect();
    serde_json::json!({"info": session, "messages": messages})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(n: usize) -> MessageWithParts {
        let info = serde_json::from_value(json!({
            "role": "user", "id": format!("msg_{n:04}"), "session_id": "ses_1", "time": {"created": 0},
            "agent": "build", "model": {"provider_id": "fake", "model_id": "test"}
        }))
        .unwrap();
        MessageWithParts { info, parts: Vec::new() }
    }

    #[tokio::test]
    async fn pages_come_back_as_one_history_oldest_first() {
        // 120 stored messages read 50 at a time: three pages, the last one short.
        let stored: Vec<MessageWithParts> = (0..120).map(message).collect();
        let mut asked = Vec::new();
        let all = read_pages(
            Page { limit: 50, ..Page::default() },
            |page: Page| {
                asked.push(page.before.clone());
                let older: Vec<MessageWithParts> = stored
                    .iter()
                    .rev()
                    .filter(|m| page.before.as_ref().is_none_or(|b| m.info.id() < b))
                    .take(page.limit)
                    .cloned()
                    .collect();
                async move { Ok(older) }
            },
            |m| m,
            |m| m.info.id(),
        )
        .await
        .unwrap();
        let ids: Vec<String> = all.iter().map(|m| m.info.id().to_string()).collect();
        let expected: Vec<String> = (0..120).map(|n| format!("msg_{n:04}")).collect();
        assert_eq!(ids, expected);
        assert_eq!(asked, [None, Some("msg_0070".into()), Some("msg_0020".into())]);
    }
}
