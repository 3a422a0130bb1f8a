//! `apply_patch`: applies a multi-file patch (reference §8.3 apply_patch). Every hunk is validated and
//! every new file content computed before anything is written, so a patch that fails anywhere changes
//! nothing. One `edit` ask covers all files.

mod apply;
mod parse;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::io_failure;
use crate::locks::FileLocks;
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::text::{FileText, count_changes, read_for_edit, read_optional, unified_diff};
use crate::{Grant, PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};
use parse::Hunk;

/// A real patch a model can copy, and the rules in prose: a format line with an inline remark ("(optional)")
/// gets copied remark and all by small models.
const DESCRIPTION: &str = "Edit files with a patch: add, update, delete or rename several files in one call. Example:

*** Begin Patch
*** Add File: docs/hello.md
+# Hello
+A new file: every line starts with +.
*** Update File: src/greet.py
@@ def greet(name):
     greeting = \"Hello\"
-    print(greeting + name)
+    print(greeting + \", \" + name)
     return greeting
*** Delete File: old_notes.txt
*** End Patch

In an update, each change starts with a line `@@` followed by a nearby line that identifies the place (a \
function or class line), or a bare `@@`. Then lines starting with a space (unchanged context, about 3 before and \
after the change), - (removed) and + (added). To rename a file, put `*** Move to: new/path.py` on the line after \
its `*** Update File:` line. For a change at the very end of a file, put the line `*** End of File` after its \
last line. Paths are relative to the project directory.";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Params {
    /// The full patch text.
    patch_text: String,
}

/// Applies patches.
pub struct ApplyPatchTool {
    parameters: Value,
    locks: FileLocks,
}

impl ApplyPatchTool {
    pub fn new(locks: FileLocks) -> Self {
        Self { parameters: schema_for::<Params>(), locks }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Add,
    Update,
    Delete,
    Move,
}

/// One planned file change.
struct Planned {
    kind: Kind,
    path: PathBuf,
    move_to: Option<PathBuf>,
    bom: bool,
    before: String,
    after: String,
}

#[async_trait]
impl Tool for ApplyPatchTool {
    fn name(&self) -> &str {
        "apply_patch"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::Project
    }

    fn permission(&self) -> &str {
        "edit"
    }

    fn profile(&self) -> Option<crate::ToolProfile> {
        Some(crate::ToolProfile::Patch)
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let hunks = parse::parse(&params.patch_text)
            .map_err(|e| ToolFailure::Failed(format!("apply_patch verification failed: {e}")))?;
        if hunks.is_empty() {
            return Err(ToolFailure::Failed(
                "patch rejected: empty patch. Put at least one '*** Add File:', '*** Update File:' or \
                 '*** Delete File:' section between '*** Begin Patch' and '*** End Patch'."
                    .into(),
            ));
        }
        let touched = touched_paths(ctx, &hunks);
        for path in &touched {
            paths::check_external(ctx, path, PathKind::File).await?;
        }
        let mut guards = Vec::with_capacity(touched.len());
        for path in &touched {
            guards.push(self.locks.lock(path).await);
        }
        let plan = plan(ctx, &hunks).await?;

        let rel = |p: &Path| paths::relative(ctx, p);
        let patterns: Vec<String> = touched.iter().map(|p| rel(p)).collect();
        let diff: String = plan.iter().map(|c| unified_diff(&rel(c.target()), &c.before, &c.after)).collect();
        let files: Vec<Value> = plan.iter().map(|c| file_metadata(c, &rel)).collect();
        let protected = touched.iter().any(|p| paths::write_grant(ctx, p) == Grant::Explicit);
        ctx.ask(PermissionAsk {
            grant: if protected { Grant::Explicit } else { Grant::Rules },
            permission: "edit".to_string(),
            patterns: patterns.clone(),
            always: vec!["*".to_string()],
            metadata: json!({"filepath": patterns.join(", "), "diff": diff, "files": files}),
        })
        .await?;

        for change in &plan {
            write(change).await?;
        }
        let summary: Vec<String> =
            plan.iter().map(|c| format!("{} {}", c.letter(), rel(c.target()))).collect();
        drop(guards);
        let output = ToolOutput {
            title: summary.join(", "),
            output: format!("Success. Updated the following files:\n{}", summary.join("\n")),
            metadata: json!({"diff": diff, "files": files}),
            attachments: Vec::new(),
        };
        // A moved file's old path is gone: the server hears it closed.
        let changed: Vec<PathBuf> =
            plan.iter().flat_map(|c| [Some(c.path.clone()), c.move_to.clone()]).flatten().collect();
        Ok(ctx.with_diagnostics(output, &changed).await)
    }
}

impl Planned {
    fn target(&self) -> &Path {
        self.move_to.as_deref().unwrap_or(&self.path)
    }

    fn letter(&self) -> char {
        match self.kind {
            Kind::Add => 'A',
            Kind::Update | Kind::Move => 'M',
            Kind::Delete => 'D',
        }
    }
}

/// Every path the patch touches (move destinations included), sorted so locks are taken in one order.
fn touched_paths(ctx: &ToolContext, hunks: &[Hunk]) -> Vec<PathBuf> {
    let mut set = BTreeSet::new();
    for hunk in hunks {
        match hunk {
            Hunk::Add { path, .. } | Hunk::Delete { path } => {
                set.insert(paths::resolve(ctx, path));
            }
            Hunk::Update { path, move_to, .. } => {
                set.insert(paths::resolve(ctx, path));
                if let Some(dest) = move_to {
                    set.insert(paths::resolve(ctx, dest));
                }
            }
        }
    }
    set.into_iter().collect()
}

/// Computes every change without writing. Later hunks see the planned content of earlier ones.
async fn plan(ctx: &ToolContext, hunks: &[Hunk]) -> Result<Vec<Planned>, ToolFailure> {
    let mut staged: HashMap<PathBuf, Option<FileText>> = HashMap::new();
    let mut plan = Vec::with_capacity(hunks.len());
    for hunk in hunks {
        let change = match hunk {
            Hunk::Add { path, contents } => {
                let path = paths::resolve(ctx, path);
                let existing = current(&staged, &path, Purpose::Show).await?;
                Planned {
                    kind: Kind::Add,
                    bom: existing.as_ref().is_some_and(|f| f.bom),
                    before: existing.map(|f| f.text).unwrap_or_default(),
                    after: contents.clone(),
                    path,
                    move_to: None,
                }
            }
            Hunk::Delete { path } => {
                let path = paths::resolve(ctx, path);
                let existing =
                    current(&staged, &path, Purpose::Show).await?.ok_or_else(|| missing("delete", &path))?;
                Planned {
                    kind: Kind::Delete,
                    bom: existing.bom,
                    before: existing.text,
                    after: String::new(),
                    path,
                    move_to: None,
                }
            }
            Hunk::Update { path: raw, move_to, chunks } => {
                let path = paths::resolve(ctx, raw);
                let existing = current(&staged, &path, Purpose::Rewrite)
                    .await?
                    .ok_or_else(|| missing("update", &path))?;
                let after = apply::apply_chunks(&existing.text, raw, chunks)
                    .map_err(|e| ToolFailure::Failed(format!("apply_patch verification failed: {e}")))?;
                let move_to = move_to.as_ref().map(|dest| paths::resolve(ctx, dest));
                let kind = if move_to.is_some() { Kind::Move } else { Kind::Update };
                Planned { kind, bom: existing.bom, before: existing.text, after, path, move_to }
            }
        };
        if change.kind == Kind::Delete || change.kind == Kind::Move {
            staged.insert(change.path.clone(), None);
        }
        staged.insert(
            change.target().to_path_buf(),
            match change.kind {
                Kind::Delete => None,
                _ => Some(FileText { bom: change.bom, text: change.after.clone() }),
            },
        );
        plan.push(change);
    }
    Ok(plan)
}

async fn current(
    staged: &HashMap<PathBuf, Option<FileText>>,
    path: &Path,
    purpose: Purpose,
) -> Result<Option<FileText>, ToolFailure> {
    if let Some(planned) = staged.get(path) {
        return Ok(planned.clone());
    }
    if path.is_dir() {
        return Err(ToolFailure::Failed(format!(
            "apply_patch verification failed: {} is a directory",
            path.display()
        )));
    }
    match purpose {
        Purpose::Rewrite => read_for_edit(path).await,
        Purpose::Show => read_optional(path).await.map_err(|e| io_failure("read", path, &e)),
    }
}

/// What a hunk does with the current text of its file.
#[derive(Debug, Clone, Copy)]
enum Purpose {
    /// Changes it in place: the text must be exactly the file's bytes, so a file that is not UTF-8 is
    /// refused (a lossy decode would be written back with every invalid byte replaced).
    Rewrite,
    /// Only shows it in the diff: the file is replaced whole or deleted.
    Show,
}

fn missing(action: &str, path: &Path) -> ToolFailure {
    ToolFailure::Failed(format!(
        "apply_patch verification failed: Failed to read file to {action}: {}. Check the path (glob finds \
         files by name); to create a file, use '*** Add File:'.",
        path.display()
    ))
}

fn file_metadata(change: &Planned, rel: &dyn Fn(&Path) -> String) -> Value {
    let (additions, deletions) = count_changes(&change.before, &change.after);
    let kind = match change.kind {
        Kind::Add => "add",
        Kind::Update => "update",
        Kind::Delete => "delete",
        Kind::Move => "move",
    };
    let mut meta = json!({
        "filePath": change.path.to_string_lossy(),
        "relativePath": rel(change.target()),
        "type": kind,
        "additions": additions,
        "deletions": deletions,
    });
    if let Some(dest) = &change.move_to {
        meta["movePath"] = json!(dest.to_string_lossy());
    }
    meta
}

async fn write(change: &Planned) -> Result<(), ToolFailure> {
    if change.kind == Kind::Delete {
        return tokio::fs::remove_file(&change.path)
            .await
            .map_err(|e| io_failure("delete", &change.path, &e));
    }
    let target = change.target();
    paths::write_atomic(target, FileText::render(change.bom, &change.after).into())
        .await
        .map_err(|e| io_failure("write", target, &e))?;
    if change.kind == Kind::Move && change.path != target {
        tokio::fs::remove_file(&change.path).await.map_err(|e| io_failure("remove", &change.path, &e))?;
    }
    Ok(())
}
