//! Durable state (DESIGN.md §4 "Store and recovery", §5b): the [`Store`] trait and its SQLite and
//! PostgreSQL implementations.
//!
//! Owns: the schema and its migrations, one row per session / message / part updated in place, batched
//! writes (one transaction per batch), per-session run ownership (file locks or leases), saved permission
//! approvals, todo lists, and crash recovery on open.
//! Must not: hold business rules (when to compact, what to retry); it stores what it is given.

mod history;
mod lock;
mod open;
mod pg;
mod private;
mod recovery;
mod redact;
mod rows;
mod schema;
mod sqlite;
mod usage;
mod writer;

pub use lock::SessionLock;
pub use open::{StoreUrl, open};
pub use pg::{DEFAULT_LEASE, PgStore};
pub use redact::redact;
pub use schema::SCHEMA_VERSION;
pub use sqlite::{DB_FILE, DiskUsage, LOCK_DIR, SqliteStore};
pub use usage::StepUsage;
pub use writer::{Flush, StoreWriter};

use codeloop_types::{Job, Message, MessageId, Part, PartId, PermissionRule, Session, SessionId, Todo};

pub use codeloop_types::{Approval, MessageWithParts, Page, SessionFilter};

/// One change in a write batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Session(Session),
    Message(Message),
    Part(Part),
    RemovePart(PartId),
    RemoveMessage(MessageId),
    /// Takes a queued input off its queue (in the batch that records it as a user message).
    RemoveQueued(i64),
    /// A background job's record, and the process that runs it (`host:pid:start`).
    Job {
        job: codeloop_types::Job,
        owner: String,
    },
}

/// Input posted while its session was busy, kept until a run records it (DESIGN.md §5b "durable input").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedInput {
    /// Increasing in the order the inputs were queued.
    pub id: i64,
    pub session_id: SessionId,
    /// The prompt as the caller encoded it (JSON); the store does not read it.
    pub input: String,
    pub created: i64,
}

/// What recovery changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Tool parts left pending/running that became interrupted errors.
    pub interrupted_parts: usize,
    /// Assistant messages without `time.completed` that became `Aborted`.
    pub aborted_messages: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL error: {}", pg::describe(.0))]
    Postgres(#[from] tokio_postgres::Error),
    /// The store URL cannot be used; `url` has its password hidden.
    #[error("invalid store URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The database cannot be reached; `url` has its password hidden.
    #[error(
        "cannot reach the PostgreSQL store at {url}: {reason}; check that the server is running and that the \
         store URL (`serve --store`, CODELOOP_DATABASE_URL or `[store] url`) is right"
    )]
    Unavailable { url: String, reason: String },
    /// A TLS connection to the database failed (see `sslmode` in the store URL); `advice` says what to change.
    #[error("cannot open a TLS connection to the PostgreSQL store at {url}: {reason}; {advice}")]
    Tls { url: String, reason: String, advice: String },
    /// The CA certificates `sslrootcert` names in the store URL cannot be used.
    #[error(
        "cannot use sslrootcert {} from the store URL {url}: {reason}; point sslrootcert at the PEM file of the \
         certificate authority that signed the server's certificate",
        path.display()
    )]
    RootCert { url: String, path: std::path::PathBuf, reason: String },
    #[error("corrupt stored JSON in {table} {id}: {source}")]
    Corrupt { table: &'static str, id: String, source: serde_json::Error },
    #[error("cannot open the data directory {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(
        "session {0} is already running in another codeloop process; wait for it to finish or stop it first"
    )]
    SessionBusy(SessionId),
    /// This worker's lease on the session expired and another worker took it over: its writes to the
    /// session are refused (the other worker settles and continues the run).
    #[error(
        "session {0} was taken over by another worker after this worker's lease expired; its writes are refused"
    )]
    LeaseLost(SessionId),
    #[error(
        "the database schema version {found} is newer than this codeloop understands ({supported}); upgrade codeloop"
    )]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("the store writer has stopped: {0}")]
    WriterStopped(String),
    /// Writes queued through the [`StoreWriter`] failed since the previous flush (each was logged).
    #[error("{count} queued store write(s) failed; first error: {first}")]
    WriteFailed { count: usize, first: String },
    /// A store call on the blocking pool did not finish (the runtime is shutting down, or it panicked).
    #[error("a store call was cut short: {0}")]
    Interrupted(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Durable state. Implementations are safe to share between threads; reads never block on a writer.
pub trait Store: Send + Sync {
    /// Applies every write in one transaction, in order.
    fn apply(&self, batch: &[Write]) -> Result<()>;

    fn get_session(&self, id: &SessionId) -> Result<Option<Session>>;
    /// Most recently updated first.
    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>>;
    /// Deletes the session, its children, messages, parts and todos. Returns false if it did not exist.
    fn delete_session(&self, id: &SessionId) -> Result<bool>;

    fn get_message(&self, id: &MessageId) -> Result<Option<MessageWithParts>>;
    /// A page of messages, newest first (parts in id order within each message).
    fn list_messages(&self, session: &SessionId, page: &Page) -> Result<Vec<MessageWithParts>>;
    /// The whole history of a session, oldest first.
    fn load_history(&self, session: &SessionId) -> Result<Vec<MessageWithParts>>;

    fn get_todos(&self, session: &SessionId) -> Result<Vec<Todo>>;
    fn set_todos(&self, session: &SessionId, todos: &[Todo]) -> Result<()>;

    /// Saves an "always" approval for a project (no duplicates).
    fn add_approval(&self, project: &str, rule: &PermissionRule) -> Result<Approval>;
    /// Approvals of one project, or of every project.
    fn list_approvals(&self, project: Option<&str>) -> Result<Vec<Approval>>;
    fn revoke_approval(&self, id: i64) -> Result<bool>;

    /// Settles what a crashed run left open, for sessions no live process holds a lock on (or one
    /// session): pending/running tool parts become interrupted errors, assistant messages without
    /// `time.completed` become `Aborted`.
    fn recover(&self, session: Option<&SessionId>) -> Result<RecoveryReport>;

    /// Queues input behind a session's run; returns its id (increasing). Removed by [`Write::RemoveQueued`].
    fn enqueue_input(&self, session: &SessionId, input: &str) -> Result<i64>;
    /// A session's queued input, oldest first.
    fn queued_inputs(&self, session: &SessionId) -> Result<Vec<QueuedInput>>;
    /// Sessions that need a run and that no live process or worker owns: queued input waiting, or a run
    /// left open by a dead one. What a worker picks up to take over (failover).
    fn orphaned_sessions(&self) -> Result<Vec<SessionId>>;
    /// Sessions whose runs were left open by a dead process and settled when this store opened (SQLite:
    /// a serving process takes them up again). Empty where runs are settled when taken over instead.
    fn settled_at_open(&self) -> Vec<SessionId> {
        Vec::new()
    }
    /// Root sessions updated since `since` (epoch ms) whose newest message is a person's prompt with no
    /// answer, not reverted, and that no live process or worker runs: a process died between recording
    /// the prompt and starting its answer. With the prompt's id, so a taker runs each one once.
    fn unanswered(&self, since: codeloop_types::Millis) -> Result<Vec<(SessionId, MessageId)>>;
    /// Queued inputs waiting, over every session (`GET /metrics`).
    fn queue_depth(&self) -> Result<u64>;
    /// Run-lease figures of this process since it opened the store (PostgreSQL; zero elsewhere).
    fn lease_figures(&self) -> LeaseFigures {
        LeaseFigures::default()
    }
    /// Every provider step (step-finish part) of an assistant message created at or after `since`
    /// (epoch ms), oldest first: what `codeloop stats` adds up.
    fn step_usage(&self, since: codeloop_types::Millis) -> Result<Vec<StepUsage>>;

    /// Records a background job (new or changed), with `owner` naming the process that runs it.
    fn save_job(&self, job: &Job, owner: &str) -> Result<()>;
    /// A session's jobs, oldest first; with `None`, every job still recorded as running. Each with its
    /// owner.
    fn list_jobs(&self, session: Option<&SessionId>) -> Result<Vec<(Job, String)>>;

    /// Takes the run ownership of a session for as long as the guard lives; `SessionBusy` if any process
    /// or worker (this one included) already holds it. Never waits for another holder.
    fn lock_session(&self, id: &SessionId) -> Result<RunGuard>;

    /// The store's shared event log, if it has one (PostgreSQL); SQLite events stay in their process.
    fn event_log(&self) -> Option<&dyn EventLog> {
        None
    }
}

/// A worker's events on their way to the shared log, and how many of them are not written yet (the
/// appender takes written ones off), so the sender can bound what waits while the database is away.
pub struct Outbox {
    pub events: tokio::sync::mpsc::UnboundedReceiver<String>,
    pub pending: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// Events shared by every worker on one store (DESIGN.md §5b): each worker appends its bus events and
/// receives everyone's, with store-wide ids that increase in commit order.
pub trait EventLog: Send + Sync {
    /// Starts relaying until the store is dropped: JSON events from `outbox` are appended in batches, and
    /// every event appended from now on, by any worker, is handed to `deliver` (id, JSON) in id order.
    /// Returns the newest id already in the log: events up to it are only read back through
    /// [`EventLog::events_between`].
    fn relay(&self, outbox: Outbox, deliver: EventSink) -> Result<u64>;
    /// The logged events with `after < id < before`, oldest first (JSON). `None` when the log no longer
    /// holds the events right after `after` (pruned by age) or there are more than a replay may carry:
    /// the reader must refetch state instead.
    fn events_between(&self, after: u64, before: u64) -> Result<Option<Vec<(u64, String)>>>;
    /// The newest `limit` logged events with `id < before`, oldest first (JSON): what a worker that
    /// starts reads to learn what other workers' runs are doing.
    fn recent_events(&self, before: u64, limit: usize) -> Result<Vec<(u64, String)>>;
}

/// Where [`EventLog::relay`] hands the events it reads.
pub type EventSink = Box<dyn Fn(u64, String) + Send + Sync>;

/// What a process's run leases did (PostgreSQL workers): renewals that succeeded, and leases lost
/// (taken over by another worker, or expired before a renewal got through).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseFigures {
    pub renewals: u64,
    pub lost: u64,
}

/// Proof that this process owns the run of one session: an OS file lock (SQLite) or a lease row that a
/// background task renews (PostgreSQL). Dropping it gives the run up.
pub trait RunOwnership: Send + Sync + std::fmt::Debug {
    fn session_id(&self) -> &SessionId;
    /// False once ownership was lost: a lease that could not be renewed before it expired, so another
    /// worker may have taken the session over. The holder should stop writing and end the run.
    fn is_held(&self) -> bool;
}

/// What [`Store::lock_session`] hands out.
pub type RunGuard = Box<dyn RunOwnership>;
