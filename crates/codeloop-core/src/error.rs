//! The engine's errors, with their causes as data: a run that could not start or finish ([`RunError`]),
//! and an engine operation that was refused ([`EngineError`]). Every message says what to do, and every
//! error says whose fault it is ([`ErrorKind`]): the one thing the HTTP API's statuses and ACP's error
//! codes are chosen from.

use std::sync::Arc;

use codeloop_store::StoreError;
use codeloop_types::SessionId;

/// Whose fault an error is, so every client answers it the same way: the caller's (`Invalid`, `NotFound`,
/// `Conflict`, `Busy`, `Refused`), the configuration's (`Config`), a provider's or server's that codeloop
/// talked to (`Upstream`), or codeloop's own (`Internal`, never a caller's 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed or asks for what cannot be (HTTP 400).
    Invalid,
    /// What the request names does not exist (404).
    NotFound,
    /// The state does not allow it now: answered already, owned elsewhere (409).
    Conflict,
    /// The session runs and this needs it idle (409).
    Busy,
    /// A hook of the user's refused it (403).
    Refused,
    /// The configuration is wrong or incomplete: a missing API key, a config or command file that does not
    /// parse (422).
    Config,
    /// A provider or server codeloop talked to failed (502).
    Upstream,
    /// codeloop's own fault: its storage, a task that was lost (500).
    Internal,
}

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
    /// The configuration cannot be used (a project's config file that does not parse).
    #[error("{0}")]
    Config(String),
    /// codeloop's own fault (stored history it cannot read as it wrote it).
    #[error("internal error: {0}")]
    Internal(String),
}

impl RunError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            RunError::SessionNotFound(_) => ErrorKind::NotFound,
            RunError::Busy(_) => ErrorKind::Busy,
            RunError::Input(_) | RunError::UnknownAgent(_) => ErrorKind::Invalid,
            RunError::Model(model) => model_kind(model),
            RunError::Config(_) => ErrorKind::Config,
            RunError::Store(_) | RunError::Lost | RunError::Internal(_) => ErrorKind::Internal,
        }
    }
}

/// A model the caller named that is not there is theirs; a missing key or a provider that cannot be built
/// is the configuration's.
fn model_kind(error: &crate::models::ModelError) -> ErrorKind {
    use crate::models::ModelError;
    match error {
        ModelError::UnknownProvider(_)
        | ModelError::Invalid(_)
        | ModelError::UnknownBare { .. }
        | ModelError::Ambiguous { .. } => ErrorKind::Invalid,
        ModelError::NoModel | ModelError::MissingKey { .. } | ModelError::Provider(_) => ErrorKind::Config,
    }
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
    /// The request is malformed or asks for what cannot be.
    #[error("{0}")]
    Invalid(String),
    /// A file of the configuration (`origin`: its path, or what it configures) is wrong.
    #[error("{origin}: {reason}")]
    Config { origin: String, reason: String },
    /// A server codeloop talked to (an MCP server, a provider) failed.
    #[error("{0}")]
    Upstream(String),
    /// codeloop's own fault.
    #[error("internal error: {0}")]
    Internal(String),
    /// No command of that name (DESIGN.md §5g): nothing was sent.
    #[error("unknown command `{name}`; the available commands are: {available}")]
    UnknownCommand { name: String, available: String },
    /// A UserPromptSubmit hook refused the prompt; its reason.
    #[error("the prompt was refused by a UserPromptSubmit hook: {0}")]
    PromptRefused(String),
}

impl EngineError {
    /// Whose fault it is ([`ErrorKind`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Run(run) => run.kind(),
            EngineError::Store(codeloop_store::StoreError::SessionBusy(_)) | EngineError::Busy { .. } => {
                ErrorKind::Busy
            }
            EngineError::Store(_) | EngineError::Snapshot(_) | EngineError::Internal(_) => {
                ErrorKind::Internal
            }
            EngineError::SessionNotFound(_) | EngineError::JobNotFound { .. } => ErrorKind::NotFound,
            EngineError::Reply(crate::permission::ReplyError::Unknown(_)) => ErrorKind::NotFound,
            EngineError::Reply(_) | EngineError::Question(_) | EngineError::JobElsewhere { .. } => {
                ErrorKind::Conflict
            }
            EngineError::Agent(_)
            | EngineError::SnapshotsOff
            | EngineError::Invalid(_)
            | EngineError::UnknownCommand { .. } => ErrorKind::Invalid,
            EngineError::Model(model) => model_kind(model),
            EngineError::Config { .. } => ErrorKind::Config,
            EngineError::Upstream(_) => ErrorKind::Upstream,
            EngineError::PromptRefused(_) => ErrorKind::Refused,
        }
    }

    /// A failure of codeloop's own.
    pub(crate) fn internal(what: impl std::fmt::Display) -> Self {
        EngineError::Internal(what.to_string())
    }
}
