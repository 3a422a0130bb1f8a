//! The contract between the engine and the tools: what a tool sees of its call ([`ToolContext`]), the
//! services the engine provides ([`ToolHost`]), and what a call returns ([`ToolOutput`], [`ToolFailure`]).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use codeloop_types::{FilePart, MessageId, Question, SessionId, Todo};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use codeloop_types::ToolSpec;

/// What language servers said of a change: text appended to the tool's result, and
/// `metadata.diagnostics` for clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub text: String,
    pub metadata: Value,
}

/// A finished call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub title: String,
    pub output: String,
    pub metadata: Value,
    pub attachments: Vec<FilePart>,
}

/// Why a call failed. The text of each becomes the tool result the model sees.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolFailure {
    /// Arguments did not match the schema; the model is asked to rewrite them.
    #[error(
        "The {tool} tool was called with invalid arguments: {detail}.\nPlease rewrite the input so it satisfies the expected schema."
    )]
    InvalidArguments { tool: String, detail: String },
    /// An ordinary failure (file not found, no match, command could not start…).
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Permission(#[from] PermissionError),
    /// The call was cancelled (turn aborted or timed out by the caller).
    #[error("Tool execution was cancelled")]
    Cancelled,
}

/// The outcome of a permission request that did not allow the call.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PermissionError {
    /// A `deny` rule matched. Fed back to the model; the run continues.
    #[error("{message}")]
    Denied { message: String },
    /// The user rejected the call. Stops the run.
    #[error("The user rejected permission to use this specific tool call.")]
    Rejected,
    /// The user rejected with feedback. Fed back to the model; the run continues.
    #[error(
        "The user rejected permission to use this specific tool call with the following feedback: {message}"
    )]
    Corrected { message: String },
    /// The call needed an answer no one could give (a headless run with `--on-ask deny`, a doom-loop
    /// guard). Stops the run; `message` says what was asked and how to allow it.
    #[error("{message}")]
    Blocked { message: String },
}

/// What a tool asks permission for (reference §9): e.g. `{permission: "bash", patterns: ["git status"],
/// always: ["git status *"]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionAsk {
    pub permission: String,
    pub patterns: Vec<String>,
    /// Patterns an "always" reply approves from now on.
    pub always: Vec<String>,
    pub metadata: Value,
    pub grant: Grant,
}

/// Who may grant an ask (DESIGN.md §5a "Rule precedence").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grant {
    /// The rules as usual: blanket rules, saved approvals, `--on-ask allow`, an "always" answer.
    #[default]
    Rules,
    /// Writes to protected paths and sandbox escapes: only a rule that names the permission and the path
    /// (a pattern that does not start with `*`) or an interactive answer, which is never saved.
    Explicit,
    /// A brake (the doom-loop guard): the rules, saved approvals and a person's answer grant it as usual,
    /// but `--on-ask allow` never does, so a headless run stops where someone at a terminal is asked.
    Brake,
}

/// Identifies the call a tool is running for.
#[derive(Debug, Clone, PartialEq)]
pub struct CallInfo {
    pub session_id: SessionId,
    pub message_id: MessageId,
    pub call_id: String,
    pub agent: String,
}

/// Services the engine provides to tools.
#[async_trait]
pub trait ToolHost: Send + Sync {
    /// Resolves when the call may go ahead.
    async fn ask(&self, call: &CallInfo, ask: PermissionAsk) -> Result<(), PermissionError>;
    /// Live progress of a running call (title and metadata of the running part).
    fn progress(&self, call: &CallInfo, title: Option<String>, metadata: Option<Value>);
    /// Whether the rules allow `permission` for `pattern` without asking anyone (nothing is shown or
    /// published). Hosts without rules allow nothing.
    fn allows(&self, call: &CallInfo, permission: &str, pattern: &str) -> bool {
        let _ = (call, permission, pattern);
        false
    }
    /// The engine's background jobs (`bash` with `run_in_background`, `bash_output`, `bash_kill`); `None`
    /// where jobs cannot run.
    fn jobs(&self) -> Option<Arc<crate::jobs::Jobs>> {
        None
    }
    /// Replaces the session's todo list.
    async fn set_todos(&self, call: &CallInfo, todos: Vec<Todo>) -> Result<(), String>;
    /// Asks the person at the keyboard; resolves with one list of answers per question.
    async fn ask_questions(
        &self,
        call: &CallInfo,
        questions: Vec<Question>,
    ) -> Result<Vec<Vec<String>>, PermissionError> {
        let _ = (call, questions);
        Err(PermissionError::Blocked { message: "no one can answer questions in this session".into() })
    }
    /// Asks the person for what an MCP server wants mid-call (elicitation, DESIGN.md §5o). Hosts where
    /// no one can answer decline.
    async fn elicit(
        &self,
        call: &CallInfo,
        ask: codeloop_types::ElicitationAsk,
    ) -> codeloop_types::ElicitationReply {
        let _ = (call, ask);
        codeloop_types::ElicitationReply::decline()
    }
    /// Answers an MCP server's `sampling/createMessage` with the session's model (DESIGN.md §5o), after
    /// the caller got the person's approval. Hosts without a model say so.
    async fn sample(&self, call: &CallInfo, request: SampleRequest) -> Result<Sampled, String> {
        let _ = (call, request);
        Err("no model can answer sampling requests here".into())
    }
    /// What the project's language servers say of files a call just changed (DESIGN.md §5n): the
    /// `<diagnostics>` block for the model and the same as data for clients. Empty `files` (a command,
    /// which does not say what it changed): the files the servers have open that changed on disk. Hosts
    /// without language servers say nothing.
    async fn check_changes(
        &self,
        call: &CallInfo,
        project: &ProjectPaths,
        files: &[PathBuf],
    ) -> Option<Checked> {
        let _ = (call, project, files);
        None
    }
    /// Runs a subagent in a child session (the `task` tool) and returns its answer; ends early when
    /// `cancel` fires. Hosts that cannot start runs say so.
    async fn run_subtask(
        &self,
        call: &CallInfo,
        task: Subtask,
        cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolFailure> {
        let _ = (call, task, cancel);
        Err(ToolFailure::Failed("subagents cannot run here".into()))
    }
}

/// A server's sampling request, as text (images are named, not sent).
#[derive(Debug, Clone, PartialEq)]
pub struct SampleRequest {
    pub system: Option<String>,
    /// `(role, text)`: `user` or `assistant`.
    pub messages: Vec<(String, String)>,
    pub max_tokens: u64,
}

/// The model's answer to a sampling request, and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    pub text: String,
    /// `provider/model`.
    pub model: String,
    /// `endTurn` or `maxTokens`, as MCP names them.
    pub stop: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost: f64,
}

/// What the `task` tool asks the host to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Subtask {
    /// A short (3-5 words) description, the call's title.
    pub description: String,
    /// Everything the subagent needs to know, and what to report back.
    pub prompt: String,
    /// Which subagent runs it.
    pub agent: String,
    /// Continue an earlier task's child session instead of starting a new one.
    pub task_id: Option<String>,
}

/// Where the project is: tools act inside `root` (and `directory`, and the session's temp dir) unless
/// `external_directory` allows.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectPaths {
    /// The working directory of the session.
    pub directory: PathBuf,
    /// The worktree root (the git root, or `directory` when not in a repository).
    pub root: PathBuf,
    /// The session's own temp dir (bash's `TMPDIR`), usable without asking.
    pub temp_dir: Option<PathBuf>,
    /// Directories outside the project that no tool writes without an explicit grant: the user's config
    /// dir and codeloop's data dir. (Inside the project, `codeloop.toml`, `.codeloop/` and `.git/` are
    /// always protected.)
    pub protected: Vec<PathBuf>,
}

impl ProjectPaths {
    /// A project without a temp dir or extra protected paths.
    pub fn new(directory: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Self {
        Self { directory: directory.into(), root: root.into(), temp_dir: None, protected: Vec::new() }
    }
}

/// Output limits (`[tool_output]` in config): over either, the output is cut and the full text spilled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    pub max_lines: usize,
    pub max_bytes: usize,
    /// The most of one output saved to a spill file (DESIGN.md §5c `[tool_output] max_saved_bytes`).
    pub max_saved_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self { max_lines: 2000, max_bytes: 50 * 1024, max_saved_bytes: 64 * 1024 * 1024 }
    }
}

/// The OS walls a tool's child processes run inside (DESIGN.md §5a "The sandbox").
#[derive(Debug, Clone, PartialEq)]
pub struct Walls {
    /// The executable whose `__sandbox` mode puts the walls up and execs the command (codeloop itself).
    pub helper: PathBuf,
    pub policy: codeloop_sandbox::SandboxPolicy,
    /// `[sandbox] git_write`: commands may write `.git` (so a repository they create stays).
    pub git_write: bool,
}

/// Everything one call gets.
#[derive(Clone)]
pub struct ToolContext {
    pub call: CallInfo,
    pub project: ProjectPaths,
    /// Where truncated outputs are saved in full (`<data>/tool-output`).
    pub tool_output_dir: PathBuf,
    pub limits: OutputLimits,
    pub cancel: CancellationToken,
    pub host: Arc<dyn ToolHost>,
    /// `None`: child processes run with permission rules only (`[sandbox] mode = "off"`, or no helper).
    pub walls: Option<Arc<Walls>>,
    /// The files the session has read or written (`None`: not known, as for a command template's
    /// `` !`cmd` ``).
    pub seen: Option<Arc<SeenFiles>>,
}

/// The files a session has read or written, by real path: an edit of a file the model never read, or a
/// write over one, is answered differently from an informed one (DESIGN.md §5l).
#[derive(Debug, Default)]
pub struct SeenFiles(std::sync::Mutex<std::collections::HashSet<PathBuf>>);

impl SeenFiles {
    pub fn saw(&self, path: &std::path::Path) {
        use codeloop_types::LockExt;
        self.0.locked().insert(path.to_owned());
    }

    pub fn has(&self, path: &std::path::Path) -> bool {
        use codeloop_types::LockExt;
        self.0.locked().contains(path)
    }
}

impl ToolContext {
    /// Notes that the session has now seen `path`.
    pub fn saw(&self, path: &std::path::Path) {
        if let Some(seen) = &self.seen {
            seen.saw(path);
        }
    }

    /// False only when the session is known not to have read or written `path`.
    pub fn has_seen(&self, path: &std::path::Path) -> bool {
        self.seen.as_ref().is_none_or(|seen| seen.has(path))
    }

    pub async fn ask(&self, ask: PermissionAsk) -> Result<(), PermissionError> {
        self.host.ask(&self.call, ask).await
    }

    pub fn progress(&self, title: Option<String>, metadata: Option<Value>) {
        self.host.progress(&self.call, title, metadata);
    }

    /// `output` with what the language servers say of `files` appended (after the files' locks are
    /// released: the wait is bounded but not short). A cancelled call returns it as it is.
    pub async fn with_diagnostics(&self, mut output: ToolOutput, files: &[PathBuf]) -> ToolOutput {
        let checked = tokio::select! {
            checked = self.host.check_changes(&self.call, &self.project, files) => checked,
            () = self.cancel.cancelled() => None,
        };
        if let Some(checked) = checked {
            output.output.push_str("\n\n");
            output.output.push_str(&checked.text);
            if let Some(metadata) = output.metadata.as_object_mut() {
                metadata.insert("diagnostics".into(), checked.metadata);
            }
        }
        output
    }
}
