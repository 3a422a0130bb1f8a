//! What a run hands back to every caller that started or joined it: why it stopped, and its last
//! answer. Plain values, so tests and clients match variants, not text.

use codeloop_types::{AssistantError, AssistantMessage, LimitReached, SessionId};

/// Why a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// The model finished its answer.
    Completed,
    /// The run was interrupted.
    Interrupted,
    /// A permission was rejected or could not be asked, the doom-loop brake held, or the model called a
    /// tool while summarising.
    Blocked(Blocked),
    /// An error was recorded on the last message (provider, overflow, circuit breaker…).
    Error(AssistantError),
    /// The agent's step limit was reached.
    StepLimit(u32),
    /// A `[limits]` limit was reached before a model request (DESIGN.md §5h): nothing more was sent.
    Limit(LimitReached),
    /// A hook answered `continue: false`; its `stopReason`.
    HookStopped(String),
}

/// The result every caller of a run receives.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub session_id: SessionId,
    /// The last assistant message of the run.
    pub message: Option<AssistantMessage>,
    pub stop: StopReason,
}

/// Why a run was stopped before the model was done (what [`StopReason::Blocked`] carries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// A person rejected the permission of a call to `tool` (and `continue_on_reject` is off).
    Rejected { tool: String },
    /// A permission needed an answer no one could give here (a headless run, an explicit-only grant);
    /// `message` says what was asked and how to allow it.
    Unanswerable { message: String },
    /// The doom-loop brake: the model kept making the same calls. `message` says what to do.
    DoomLoop { message: String },
    /// The model called `tool` while writing a summary, which has no tools.
    ToolCallDuringSummary { tool: String },
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected { tool } => write!(f, "Stopped: permission for `{tool}` was rejected."),
            Self::Unanswerable { message } => write!(f, "Stopped: {message}"),
            Self::DoomLoop { message } => f.write_str(message),
            Self::ToolCallDuringSummary { tool } => {
                write!(f, "Tool call not allowed while generating summary: {tool}")
            }
        }
    }
}
