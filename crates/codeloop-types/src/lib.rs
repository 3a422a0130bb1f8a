//! Pure data model of codeloop (DESIGN.md §3): ids, sessions, messages, every part kind, the tool-state
//! machine, token counts, assistant errors and bus events.
//!
//! Owns: the shapes that are stored, exported and sent to clients, the rules that belong to the data
//! itself (which tool-state transitions are legal), and how outside text is made safe to show.
//! Must not: do I/O, know about providers, storage or the run loop.

mod effort;
mod error;
mod event;
mod history;
mod ids;
mod job;
mod limit;
mod message;
mod outside;
mod part;
mod permission;
mod session;
mod sync;
mod tool_state;

pub use effort::{Effort, EffortError};
pub use error::AssistantError;
pub use event::{
    Event, EventPayload, PermissionReply, SessionStatus, Todo, TodoPriority, TodoStatus, WorkerRequest,
};
pub use history::{Approval, MessageWithParts, Page, SessionFilter, ToolSpec};
pub use ids::{
    ElicitationId, JobId, MessageId, PartId, PermissionId, QuestionId, SessionId, ascending_id, descending_id,
};
pub use job::{Job, JobState};
pub use limit::{CacheReason, Limit, LimitReached};
pub use message::{AssistantMessage, Finish, Message, MessagePath, MessageTime, UserMessage};
pub use outside::escape_controls;
pub use part::{
    AgentPart, CompactionPart, FilePart, Part, PartKind, PartTime, PatchPart, ReasoningPart, RetryPart,
    StepFinishPart, StepStartPart, SubtaskPart, TextPart, ToolPart,
};
pub use permission::{
    ElicitationAction, ElicitationAsk, ElicitationMode, ElicitationReply, ElicitationRequest,
    PermissionAction, PermissionRequest, PermissionRule, Question, QuestionOption, QuestionRequest,
    ToolCallRef,
};
pub use session::{
    ModelRef, ModelRefError, NotUndone, Revert, Session, SessionTime, ToolProfile, date_of, iso8601,
};
pub use sync::LockExt;
pub use tool_state::{
    INTERRUPTED_ERROR, OUTCOME_NOT_STARTED, OUTCOME_UNKNOWN, ToolCompleted, ToolError, ToolPending,
    ToolRunning, ToolState, ToolTime, TransitionError,
};

/// Milliseconds since the Unix epoch: the one time unit of the data model.
pub type Millis = i64;

/// The current wall-clock time in milliseconds.
pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Token counts of one provider step, normalised across providers: `input` excludes cached tokens and
/// `output` excludes reasoning (DESIGN.md §3, reference §4.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub cache: CacheTokens,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// The provider sent no usage: the counts are estimates (request chars / 4, streamed chars / 4). In a
    /// total, set when any step was estimated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CacheTokens {
    pub read: u64,
    pub write: u64,
}

impl Tokens {
    /// The size of the request plus its answer, as used by the overflow check: the provider's total when it
    /// sent one, else the sum of the parts.
    pub fn count(&self) -> u64 {
        match self.total {
            Some(total) if total > 0 => total,
            _ => self.input + self.output + self.reasoning + self.cache.read + self.cache.write,
        }
    }

    /// Adds another step's tokens into a running total (session totals).
    pub fn accumulate(&mut self, other: &Tokens) {
        self.input += other.input;
        self.output += other.output;
        self.reasoning += other.reasoning;
        self.cache.read += other.cache.read;
        self.cache.write += other.cache.write;
        self.total = Some(self.total.unwrap_or(0) + other.count());
        self.estimated |= other.estimated;
    }
}
