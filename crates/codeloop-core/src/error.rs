//! The engine's errors, with their causes as data: a run that could not start or finish ([`RunError`]),
//! and an engine operation that was refused ([`EngineError`]). Every message says what to do.

use std::sync::Arc;

use codeloop_store::StoreError;
use codeloop_types::SessionId;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RunError {
    #[error(
        "session {0} not found: `codeloop session list --all` (or GET /session) shows the sessions in this data directory"
    )]
    SessionNotFound(SessionId),
    #[error("{0}")]
    Busy(String),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    UnknownAgent(#[from] crate::agents::UnknownAgent),
    /// The model cannot be used (unknown provider, missing key…); the cause says which.
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// A store failure; shared, as a run's outcome is cloned to every caller that joined it.
    #[error("storage error: {0}")]
    Store(#[source] SharedStoreError),
    /// The run's task ended without handing back a result (it panicked or was cancelled).
    #[error("the run ended without reporting a result")]
    Lost,
}

/// A store error every caller of a run shares (they all get a clone of its outcome; store errors hold
/// I/O and database errors that cannot be cloned). Equal when they say the same.
#[derive(Debug, Clone)]
pub struct SharedStoreError(pub Arc<StoreError>);

impl std::fmt::Display for SharedStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for SharedStoreError {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

impl From<StoreError> for RunError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::SessionBusy(_) => RunError::Busy(error.to_string()),
            other => RunError::Store(SharedStoreError(Arc::new(other))),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(
        "session {0} not found: `codeloop session list --all` (or GET /session) shows the sessions in this data directory"
    )]
    SessionNotFound(SessionId),
    /// The session is running and `action` needs it idle.
    #[error("session {session} is running; wait for it or abort it before {action}")]
    Busy { session: SessionId, action: &'static str },
    /// A person may not pick this agent (the one agent rule of every client).
    #[error(transparent)]
    Agent(#[from] crate::agents::AgentRefused),
    /// The model cannot be used (unknown provider, missing key…).
    #[error(transparent)]
    Model(#[from] crate::models::ModelError),
    /// Reverting needs snapshots, and this session's project has none.
    #[error("snapshots are off for this session (not a git repository, or `snapshot = false` in config)")]
    SnapshotsOff,
    /// The shadow repository failed.
    #[error(transparent)]
    Snapshot(#[from] crate::snapshot::SnapshotError),
    /// A permission answer that found no request waiting for it.
    #[error(transparent)]
    Reply(#[from] crate::permission::ReplyError),
    /// A question answer that found no question waiting for it.
    #[error(transparent)]
    Question(#[from] crate::question::QuestionError),
    /// No such background job in the session.
    #[error(
        "session {session} has no background job {job}: `codeloop session jobs {session}` (or GET /session/{session}/job) lists them"
    )]
    JobNotFound { session: SessionId, job: codeloop_types::JobId },
    /// The job runs in another codeloop process, which alone can end it.
    #[error(
        "background job {job} runs in another codeloop process ({owner}); end it there, or end that process"
    )]
    JobElsewhere { job: codeloop_types::JobId, owner: String },
    #[error("{0}")]
    Invalid(String),
    /// No command of that name (DESIGN.md §5g): nothing was sent.
    #[error("unknown command `{name}`; the available commands are: {available}")]
    UnknownCommand { name: String, available: String },
    /// A UserPromptSubmit hook refused the prompt; its reason.
    #[error("the prompt was refused by a UserPromptSubmit hook: {0}")]
    PromptRefused(String),
}
