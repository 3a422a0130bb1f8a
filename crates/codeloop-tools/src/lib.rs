//! Tools the model can call (DESIGN.md §4 "Tools"): the [`Tool`] trait, the registry of built-in tools,
//! output truncation with spill files, and the permission patterns each tool asks for.
//!
//! Owns: what each tool does to the workspace and what it reports back.
//! Must not: decide permissions (it asks through [`ToolHost`]), touch the store or the bus, or run outside
//! the project directory without an `external_directory` permission.

mod context;
pub mod guard;
pub mod jobs;
mod lenient;
mod locks;
mod paths;
mod registry;
mod schema;
mod summary;
mod text;
mod tools;
mod truncate;

pub use context::{
    CallInfo, Checked, Grant, OutputLimits, PermissionAsk, PermissionError, ProjectPaths, SampleRequest,
    Sampled, SeenFiles, Subtask, ToolContext, ToolFailure, ToolHost, ToolOutput, ToolSpec, Walls,
};
pub use lenient::opt_text;
pub use locks::FileLocks;
pub use paths::{
    SESSION_ENV_FILE, expand_home, is_protected, is_secret, real_path, resolve_in, session_temp_dir,
};
pub use registry::{BuiltinConfig, INVALID_TOOL, ToolRegistry};
pub use schema::{decode, schema_for};
pub use summary::{call_summary, patch_files};
pub use text::{cut_chars, ellipsize};
pub use tools::{
    ApplyPatchTool, BashKillTool, BashOutputTool, BashTool, EditTool, GlobTool, GrepTool, InvalidTool,
    QuestionTool, ReadTool, SkillInfo, SkillTool, TodoWriteTool, WebFetchTool, WriteTool, list_skills,
};
pub use truncate::{Keep, TOOL_OUTPUT_RETENTION, Truncation, sweep_tool_output, truncate_output};

use async_trait::async_trait;
pub use codeloop_types::ToolProfile;
use serde_json::Value;

/// What a tool needs before it is worth offering to the model (a tool with nothing behind it invites
/// calls that can only fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Nothing,
    /// At least one installed skill (`skill`).
    Skills,
    /// At least one subagent the calling agent may start (`task`).
    Subagents,
    /// A background job of the session (`bash_output`, `bash_kill`).
    Jobs,
    /// A language server running for the project (`lsp`, `diagnostics`).
    LanguageServer,
}

/// What a tool's call may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    ReadOnly,
    /// Files inside the project: a revert puts them back.
    Project,
    /// Anything: commands, the network, other systems. A revert cannot undo it.
    External,
}

/// One tool. Implementations generate their JSON Schema once, at construction.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters(&self) -> &Value;
    /// The permission this tool asks under and that disables it (`write` and `apply_patch` ask as `edit`).
    fn permission(&self) -> &str {
        self.name()
    }
    /// The name hooks and matchers see when it differs from [`Tool::name`] (an MCP tool's
    /// `mcp__SERVER__TOOL`, DESIGN.md §5d/§5e).
    fn hook_name(&self) -> Option<&str> {
        None
    }
    /// The file-editing style this tool belongs to: a model is offered the tools of its own
    /// [`ToolProfile`] only (`apply_patch` is `Patch`, `edit` and `write` are `Edit`). `None`: every model.
    fn profile(&self) -> Option<ToolProfile> {
        None
    }
    /// What a call may change (DESIGN.md §5m): nothing, the project (undone by a revert), or the world
    /// outside it (never undone). Unknown tools act outside.
    fn effect(&self) -> Effect {
        Effect::External
    }
    /// What must exist for a call to do anything; the tool is not offered without it.
    fn needs(&self) -> Needs {
        Needs::Nothing
    }
    /// How long a call with these arguments may run before the engine's watchdog stops it. `None` means
    /// the engine's default; a tool with its own time limit (bash's `timeout`) answers past that limit.
    fn deadline(&self, args: &Value) -> Option<std::time::Duration> {
        let _ = args;
        None
    }
    /// Runs the call. Arguments are raw JSON: the tool decodes them and reports a schema mismatch as
    /// [`ToolFailure::InvalidArguments`].
    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure>;
}
