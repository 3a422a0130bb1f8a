//! `edit`: replaces `oldString` with `newString` in a file (reference §8.3 edit). Exact match first, then
//! the fuzzy strategies in [`replacers`]; line endings follow the file and a byte-order mark is kept. One
//! call at a time per file. A file that is not UTF-8 is refused, never rewritten with replaced bytes.

mod replacers;

use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::io_failure;
use crate::locks::FileLocks;
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::text::{FileText, LineEnding, count_changes, read_for_edit, unified_diff};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

const DESCRIPTION: &str = "Replace oldString with newString in a file. Read the file first. oldString must match the file \
(including indentation) and be unique unless replaceAll is set; add surrounding lines to make it unique. \
Do not include the `N: ` line-number prefixes from read output. An empty oldString creates a new file.";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Params {
    /// Absolute path, or relative to the project directory.
    file_path: String,
    /// The text to replace.
    old_string: String,
    /// The replacement (must differ from oldString).
    new_string: String,
    /// Replace every occurrence (default false).
    #[serde(default, deserialize_with = "crate::lenient::opt_bool")]
    replace_all: Option<bool>,
}

/// Edits files in place.
pub struct EditTool {
    parameters: Value,
    locks: FileLocks,
}

impl EditTool {
    pub fn new(locks: FileLocks) -> Self {
        Self { parameters: schema_for::<Params>(), locks }
    }
}

/// The text before and after an edit, and whether the file had a byte-order mark.
struct Change {
    bom: bool,
    before: String,
    after: String,
}

#[async_trait]
impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::Project
    }

    fn profile(&self) -> Option<crate::ToolProfile> {
        Some(crate::ToolProfile::Edit)
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        if params.old_string == params.new_string {
            return Err(ToolFailure::Failed(
                "No changes to apply: oldString and newString are identical.".into(),
            ));
        }
        let path = paths::resolve(ctx, &params.file_path);
        paths::check_external(ctx, &path, PathKind::File).await?;
        let _guard = self.locks.lock(&path).await;
        let change = if params.old_string.is_empty() {
            create(&path, &params.new_string).await?
        } else {
            modify(&path, &params).await.map_err(|failure| unread_hint(ctx, &path, failure))?
        };

        let rel = paths::relative(ctx, &path);
        let diff = unified_diff(&rel, &change.before, &change.after);
        ctx.ask(PermissionAsk {
            grant: paths::write_grant(ctx, &path),
            permission: "edit".to_string(),
            patterns: vec![rel.clone()],
            always: vec!["*".to_string()],
            metadata: json!({"filepath": path.to_string_lossy(), "diff": diff}),
        })
        .await?;
        paths::write_atomic(&path, FileText::render(change.bom, &change.after).into())
            .await
            .map_err(|e| io_failure("write", &path, &e))?;

        ctx.saw(&path);
        drop(_guard);
        let (additions, deletions) = count_changes(&change.before, &change.after);
        let output = ToolOutput {
            title: rel,
            output: "Edit applied successfully.".to_string(),
            metadata: json!({
                "diff": diff,
                "filediff": {"file": path.to_string_lossy(), "additions": additions, "deletions": deletions},
            }),
            attachments: Vec::new(),
        };
        Ok(ctx.with_diagnostics(output, &[path]).await)
    }
}

/// An edit that missed on a file the session never read: the model is told to read it first (a real
/// model followed "create it" or "replace it" hints into damage; DESIGN.md §5l).
fn unread_hint(ctx: &ToolContext, path: &Path, failure: ToolFailure) -> ToolFailure {
    match failure {
        ToolFailure::Failed(message) if path.is_file() && !ctx.has_seen(path) => {
            ToolFailure::Failed(format!(
                "{message}\nYou have not read {} in this session: read it first, then copy oldString from it exactly.",
                paths::relative(ctx, path)
            ))
        }
        other => other,
    }
}

/// An empty `oldString` creates a file; an existing non-empty file is refused.
async fn create(path: &Path, content: &str) -> Result<Change, ToolFailure> {
    let existing = read_for_edit(path).await?;
    match existing {
        Some(file) if !file.text.is_empty() => Err(ToolFailure::Failed(format!(
            "File already exists: {}. Nothing was changed. Read it, then edit it with a non-empty oldString copied from it.",
            path.display()
        ))),
        existing => Ok(Change {
            bom: existing.is_some_and(|f| f.bom),
            before: String::new(),
            after: content.to_string(),
        }),
    }
}

async fn modify(path: &Path, params: &Params) -> Result<Change, ToolFailure> {
    if path.is_dir() {
        return Err(ToolFailure::Failed(format!("Path is a directory, not a file: {}", path.display())));
    }
    let Some(file) = read_for_edit(path).await? else {
        let nearest = paths::nearest(path).await;
        let nearest = match nearest.is_empty() {
            true => String::new(),
            false => format!(" Existing paths with similar names:\n{}\n", nearest.join("\n")),
        };
        return Err(ToolFailure::Failed(format!(
            "File not found: {}. Nothing was changed.{nearest} Check the path: glob finds files by name, grep by content.",
            path.display()
        )));
    };
    let ending = LineEnding::detect(&file.text);
    let old = ending.apply(&params.old_string);
    let new = ending.apply(&params.new_string);
    let after = replacers::replace(&file.text, &old, &new, params.replace_all.unwrap_or(false))
        .map_err(|e| ToolFailure::Failed(e.message()))?;
    Ok(Change { bom: file.bom, before: file.text, after })
}
