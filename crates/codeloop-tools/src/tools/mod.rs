//! The built-in tools, one module each (reference §8.3).

pub(crate) mod apply_patch;
pub(crate) mod bash;
mod edit;
mod glob;
mod grep;
mod invalid;
mod jobs;
mod question;
mod read;
mod skill;
mod todo;
mod walk;
mod webfetch;
mod write;

pub use apply_patch::ApplyPatchTool;
pub use bash::BashTool;
pub use edit::EditTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use invalid::InvalidTool;
pub use jobs::{BashKillTool, BashOutputTool};
pub use question::QuestionTool;
pub use read::ReadTool;
pub use skill::{SkillInfo, SkillTool, list_skills};
pub use todo::TodoWriteTool;
pub use webfetch::WebFetchTool;
pub use write::WriteTool;

use std::path::Path;

use crate::ToolFailure;

/// An I/O error as a tool failure that names the path.
pub(crate) fn io_failure(action: &str, path: &Path, error: &std::io::Error) -> ToolFailure {
    ToolFailure::Failed(format!("Failed to {action} {}: {error}", path.display()))
}
