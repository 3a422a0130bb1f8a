//! `glob`: file paths matching a glob (reference §8.3 glob): ignore files honoured, dot-files skipped,
//! the first 100 absolute paths.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::walk::{Hidden, walker};
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

const LIMIT: usize = 100;

const DESCRIPTION: &str = "Find files by glob pattern (e.g. \"**/*.rs\", \"src/**/*.ts\"). Respects .gitignore; skips \
hidden files. Returns up to 100 absolute paths.";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// Glob to match file paths against.
    pattern: String,
    /// Directory to search (default: the project directory).
    #[serde(default, deserialize_with = "crate::lenient::opt_text")]
    path: Option<String>,
}

/// Finds files by name.
pub struct GlobTool {
    parameters: Value,
}

impl GlobTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for GlobTool {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn effect(&self) -> crate::Effect {
        crate::Effect::ReadOnly
    }

    fn description(&self) -> &str {
        DESCRIPTION
    }

    fn parameters(&self) -> &Value {
        &self.parameters
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: Params = decode(self.name(), args)?;
        ctx.ask(PermissionAsk {
            grant: Default::default(),
            permission: "glob".to_string(),
            patterns: vec![params.pattern.clone()],
            always: vec!["*".to_string()],
            metadata: json!({"pattern": params.pattern, "path": params.path}),
        })
        .await?;
        let root = match &params.path {
            Some(p) => paths::resolve(ctx, p),
            None => ctx.project.directory.clone(),
        };
        paths::check_external(ctx, &root, PathKind::Directory).await?;
        if !root.is_dir() {
            return Err(ToolFailure::Failed(format!(
                "glob path must be a directory: {}. Give a directory, or leave path out to search the project.",
                root.display()
            )));
        }
        let pattern = relative_pattern(&root, &params.pattern);
        let cancel = ctx.cancel.child_token();
        let job = {
            let (root, cancel) = (root.clone(), cancel.clone());
            tokio::task::spawn_blocking(move || find(&root, &pattern, &cancel))
        };
        let (files, truncated) = tokio::select! {
            joined = job => joined.map_err(|e| ToolFailure::Failed(format!("glob failed: {e}")))?.map_err(ToolFailure::Failed)?,
            _ = ctx.cancel.cancelled() => {
                cancel.cancel();
                return Err(ToolFailure::Cancelled);
            }
        };
        let mut output = if files.is_empty() {
            "No files found".to_string()
        } else {
            files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join("\n")
        };
        if truncated {
            output.push_str(&format!(
                "\n\n(Results are truncated: showing first {LIMIT} results. Consider using a more specific path or pattern.)"
            ));
        }
        Ok(ToolOutput {
            title: paths::relative(ctx, &root),
            output,
            metadata: json!({"count": files.len(), "truncated": truncated}),
            attachments: Vec::new(),
        })
    }
}

/// A pattern written as an absolute path under the search root is made relative to it.
fn relative_pattern(root: &Path, pattern: &str) -> String {
    let root = root.to_string_lossy();
    match pattern.strip_prefix(root.as_ref()) {
        Some(rest) if rest.starts_with('/') => rest.trim_start_matches('/').to_string(),
        _ => pattern.to_string(),
    }
}

fn find(root: &Path, pattern: &str, cancel: &CancellationToken) -> Result<(Vec<PathBuf>, bool), String> {
    let mut files = Vec::new();
    for entry in walker(root, Some(pattern), Hidden::Skip)?.flatten() {
        if cancel.is_cancelled() {
            break;
        }
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if files.len() == LIMIT {
            return Ok((files, true));
        }
        files.push(entry.into_path());
    }
    Ok((files, false))
}
