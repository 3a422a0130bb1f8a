//! `write`: creates or replaces a file (reference §8.3 write). Asks `edit` with the diff before writing;
//! keeps a byte-order mark the old file had.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::io_failure;
use crate::locks::FileLocks;
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::text::{FileText, read_optional, unified_diff};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

const DESCRIPTION: &str = "Write a file, replacing it if it exists and creating parent directories. \
Prefer the edit tool for changes to existing files; read a file before overwriting it.";

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Params {
    /// Absolute path, or relative to the project directory.
    file_path: String,
    /// The complete file content.
    content: String,
}

/// Writes whole files.
pub struct WriteTool {
    parameters: Value,
    locks: FileLocks,
}

impl WriteTool {
    pub fn new(locks: FileLocks) -> Self {
        Self { parameters: schema_for::<Params>(), locks }
    }
}

#[async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::Project
    }

    fn profile(&self) -> Option<crate::ToolProfile> {
        Some(crate::ToolProfile::Edit)
    }

    fn permission(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        let path = paths::resolve(ctx, &params.file_path);
        paths::check_external(ctx, &path, PathKind::File).await?;
        let _guard = self.locks.lock(&path).await;
        if path.is_dir() {
            return Err(ToolFailure::Failed(format!("Path is a directory, not a file: {}", path.display())));
        }
        let old = read_optional(&path).await.map_err(|e| io_failure("read", &path, &e))?;
        let exists = old.is_some();
        let bom = old.as_ref().is_some_and(|o| o.bom);
        let old_text = old.map(|o| o.text).unwrap_or_default();
        let rel = paths::relative(ctx, &path);
        let diff = unified_diff(&rel, &old_text, &params.content);
        ctx.ask(PermissionAsk {
            grant: paths::write_grant(ctx, &path),
            permission: "edit".to_string(),
            patterns: vec![rel.clone()],
            always: vec!["*".to_string()],
            metadata: json!({"filepath": path.to_string_lossy(), "diff": diff}),
        })
        .await?;
        paths::write_atomic(&path, FileText::render(bom, &params.content).into())
            .await
            .map_err(|e| io_failure("write", &path, &e))?;
        // Replacing a file the session never read is said, so the model and the person see it.
        let unread = exists && !old_text.is_empty() && !ctx.has_seen(&path);
        ctx.saw(&path);
        let replaced = old_text.lines().count();
        let output = match unread {
            true => format!(
                "Wrote file successfully. It replaced an existing file of {replaced} lines that was not read first in this session."
            ),
            false => "Wrote file successfully.".to_string(),
        };
        let mut metadata = json!({"filepath": path.to_string_lossy(), "exists": exists, "diff": diff});
        if unread {
            metadata["replaced_unread_lines"] = json!(replaced);
        }
        drop(_guard);
        Ok(ctx
            .with_diagnostics(ToolOutput { title: rel, output, metadata, attachments: Vec::new() }, &[path])
            .await)
    }
}
