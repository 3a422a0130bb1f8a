//! The engine's one vocabulary for what clients ask of a session (DESIGN.md §1; codex-rs's
//! `Submission { id, op }` is the model): every client — the TUI, the ACP agent, the HTTP server, the
//! CLI — translates its input into a [`SessionCommand`] and the engine's [`CommandOutcome`] back into
//! its own output. The engine validates a command once (agent under one rule, model, empty prompt, busy);
//! no client decides these.

use codeloop_types::{Job, JobId, MessageId, PermissionId, QuestionId, Session, SessionId};

use crate::input::{Delivery, PromptInput};
use crate::outcome::RunOutcome;

/// Something a client asks of a session or of a request its run waits on.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionCommand {
    /// Input for the session: it starts a run, or joins the active one (steer) or waits behind it (queue).
    Prompt { session: SessionId, input: PromptInput, delivery: Delivery },
    /// Stop the session's run (with many workers, also one another worker owns).
    Abort { session: SessionId },
    /// Summarise the session now; `focus` tells the summariser what matters most.
    Compact { session: SessionId, focus: Option<String> },
    /// Put the files back as they were before `message`, and hide the messages from it on.
    Revert { session: SessionId, message: MessageId },
    /// Undo the last revert.
    Unrevert { session: SessionId },
    /// Run command `name` (DESIGN.md §5g: a Markdown file, an MCP prompt, `compact` or `init`) with
    /// `arguments` (as typed: `$ARGUMENTS`, split for `$1`…`$9`); its expanded text is sent as a prompt.
    /// `effort`: how hard the model thinks for the command's turn (`None`: the agent's or model's).
    RunCommand {
        session: SessionId,
        name: String,
        arguments: String,
        delivery: Delivery,
        effort: Option<codeloop_types::Effort>,
    },
    /// Answer a pending permission request.
    AnswerPermission { request: PermissionId, answer: PermissionAnswer },
    /// Answer a pending question (one list of answers per question asked), or reject it (`None`).
    AnswerQuestion { request: QuestionId, answers: Option<Vec<Vec<String>>> },
    /// End one of the session's background jobs (TERM, then KILL after 2 s; DESIGN.md §5f).
    KillJob { session: SessionId, job: JobId },
}

/// A person's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionAnswer {
    /// Allow this call.
    Once,
    /// Allow it, and save the request's "always" patterns for the project.
    Always,
    /// Refuse it: the run stops, unless `message` tells the model what to do instead.
    Reject { message: Option<String> },
    /// Refuse it, and every request like it in this session from now on (in this process).
    RejectAlways,
}

/// What a command came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CommandOutcome {
    /// The run a prompt or a compaction started or joined, as it ended.
    Ran(RunOutcome),
    /// Whether an abort stopped a run (false: none was running).
    Aborted(bool),
    /// The session after a revert or an unrevert.
    Session(Session),
    /// The answer was taken.
    Answered,
    /// The job after a kill (`killed`, or how it had ended already).
    Job(Job),
}

impl CommandOutcome {
    /// The run's outcome, for commands that run.
    pub fn into_run(self) -> Option<RunOutcome> {
        match self {
            Self::Ran(outcome) => Some(outcome),
            Self::Aborted(_) | Self::Session(_) | Self::Answered | Self::Job(_) => None,
        }
    }
}
