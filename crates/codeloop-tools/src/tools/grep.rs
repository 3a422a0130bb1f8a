//! `grep`: regex search over file contents (reference §8.3 grep): ignore files honoured, hidden files
//! searched, `.git` skipped, binary files skipped, the first 100 matches grouped by file.

use std::path::PathBuf;

use async_trait::async_trait;
use grep_regex::RegexMatcher;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::walk::{Hidden, walker};
use crate::paths::{self, PathKind};
use crate::schema::{decode, schema_for};
use crate::text::cut_chars;
use crate::truncate::{Keep, truncate_output};
use crate::{PermissionAsk, Tool, ToolContext, ToolFailure, ToolOutput};

const LIMIT: usize = 100;
const MAX_LINE_CHARS: usize = 2000;

const DESCRIPTION: &str = "Search file contents with a regular expression (ripgrep syntax). Respects .gitignore. \
Returns matching lines grouped by file with line numbers, at most 100 matches. Filter files with include \
(e.g. \"*.rs\", \"*.{ts,tsx}\").";

#[derive(Deserialize, JsonSchema)]
struct Params {
    /// Regular expression to search for.
    pattern: String,
    /// Directory (or file) to search (default: the project directory).
    #[serde(default, deserialize_with = "crate::lenient::opt_text")]
    path: Option<String>,
    /// Glob of files to search.
    #[serde(default, deserialize_with = "crate::lenient::opt_text")]
    include: Option<String>,
}

/// Searches file contents.
pub struct GrepTool {
    parameters: Value,
}

impl GrepTool {
    pub fn new() -> Self {
        Self { parameters: schema_for::<Params>() }
    }
}

impl Default for GrepTool {
    fn default() -> Self {
        Self::new()
    }
}

struct Found {
    path: PathBuf,
    line: u64,
    text: String,
}

#[derive(Default)]
struct Results {
    found: Vec<Found>,
    total: usize,
    errors: bool,
    /// Files that may hold secrets, left out of a directory search.
    secrets: Vec<PathBuf>,
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
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
            permission: "grep".to_string(),
            patterns: vec![params.pattern.clone()],
            always: vec!["*".to_string()],
            metadata: json!({"pattern": params.pattern, "path": params.path, "include": params.include}),
        })
        .await?;
        let root = match &params.path {
            Some(p) => paths::resolve(ctx, p),
            None => ctx.project.directory.clone(),
        };
        paths::check_external(ctx, &root, PathKind::Directory).await?;
        if !root.exists() {
            return Err(ToolFailure::Failed(format!(
                "Path not found: {}. Give a directory or file that exists, or leave path out to search the project.",
                root.display()
            )));
        }
        if root.is_file() {
            let rel = paths::relative(ctx, &root);
            ctx.ask(PermissionAsk {
                grant: Default::default(),
                permission: "read".to_string(),
                patterns: vec![rel],
                always: vec!["*".to_string()],
                metadata: json!({}),
            })
            .await?;
        }
        let matcher = RegexMatcher::new_line_matcher(&params.pattern)
            .map_err(|e| {
                ToolFailure::Failed(format!(
                    "Invalid regex pattern: {e}. Escape special characters with a backslash (\\( \\[ \\. \\{{) or \
                     search for a plainer part of the text."
                ))
            })?;

        let cancel = ctx.cancel.child_token();
        let job = {
            let cancel = cancel.clone();
            let include = params.include.clone();
            tokio::task::spawn_blocking(move || search(root, include, matcher, cancel))
        };
        let results = tokio::select! {
            joined = job => joined.map_err(|e| ToolFailure::Failed(format!("grep failed: {e}")))?.map_err(ToolFailure::Failed)?,
            _ = ctx.cancel.cancelled() => {
                cancel.cancel();
                return Err(ToolFailure::Cancelled);
            }
        };
        let mut output = render(&params.pattern, results);
        // 100 matches of up to 2000 chars can exceed the output limits; this tool sets `truncated` itself,
        // so it applies them too.
        let cut = truncate_output(&output.output, ctx.limits, &ctx.tool_output_dir, Keep::Head).await;
        if cut.truncated {
            output.output = cut.content;
            output.metadata["truncated"] = json!(true);
            if let Some(path) = cut.output_path {
                output.metadata["outputPath"] = json!(path.to_string_lossy());
            }
        }
        Ok(output)
    }
}

fn search(
    root: PathBuf,
    include: Option<String>,
    matcher: RegexMatcher,
    cancel: CancellationToken,
) -> Result<Results, String> {
    let mut searcher =
        SearcherBuilder::new().binary_detection(BinaryDetection::quit(0)).line_number(true).build();
    let mut results = Results::default();
    for entry in walker(&root, include.as_deref(), Hidden::Include)? {
        if cancel.is_cancelled() {
            break;
        }
        let Ok(entry) = entry else {
            results.errors = true;
            continue;
        };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        // A directory search never reads `.env` files or keys; naming one as the path asks `read` instead.
        if path != root.as_path() && crate::paths::is_secret(path) {
            results.secrets.push(path.to_path_buf());
            continue;
        }
        let sink = Lossy(|line, text: &str| {
            results.total += 1;
            if results.found.len() < LIMIT {
                let text = text.trim_end_matches(['\n', '\r']);
                let text = match cut_chars(text, MAX_LINE_CHARS) {
                    (cut, true) => format!("{cut}..."),
                    (whole, false) => whole.to_string(),
                };
                results.found.push(Found { path: path.to_path_buf(), line, text });
            }
            Ok(true)
        });
        if searcher.search_path(&matcher, path, sink).is_err() {
            results.errors = true;
        }
    }
    Ok(results)
}

/// Says which files that may hold secrets were not searched, and how to read one.
fn secrets_note(lines: &mut Vec<String>, secrets: &[PathBuf]) {
    if secrets.is_empty() {
        return;
    }
    let names: Vec<String> = secrets.iter().take(5).map(|p| p.display().to_string()).collect();
    let more = if secrets.len() > 5 { format!(" and {} more", secrets.len() - 5) } else { String::new() };
    lines.push(String::new());
    lines.push(format!(
        "(Not searched, as they may hold secrets: {}{more}. Search one by naming it as the path; that asks the user.)",
        names.join(", ")
    ));
}

fn render(pattern: &str, results: Results) -> ToolOutput {
    let truncated = results.total > results.found.len();
    if results.found.is_empty() {
        let mut lines = vec!["No files found".to_string()];
        secrets_note(&mut lines, &results.secrets);
        return ToolOutput {
            title: pattern.to_string(),
            output: lines.join("\n"),
            metadata: json!({"matches": 0, "truncated": false}),
            attachments: Vec::new(),
        };
    }
    let mut lines = vec![if truncated {
        format!("Found {} matches (showing first {LIMIT})", results.total)
    } else {
        format!("Found {} matches", results.total)
    }];
    let mut current: Option<&PathBuf> = None;
    for found in &results.found {
        if current != Some(&found.path) {
            if current.is_some() {
                lines.push(String::new());
            }
            lines.push(format!("{}:", found.path.display()));
            current = Some(&found.path);
        }
        lines.push(format!("  Line {}: {}", found.line, found.text));
    }
    if truncated {
        lines.push(String::new());
        lines.push(format!(
            "(Results truncated: showing {LIMIT} of {} matches ({} hidden). Consider using a more specific path or pattern.)",
            results.total,
            results.total - LIMIT
        ));
    }
    if results.errors {
        lines.push(String::new());
        lines.push("(Some paths were inaccessible and skipped)".to_string());
    }
    secrets_note(&mut lines, &results.secrets);
    ToolOutput {
        title: pattern.to_string(),
        output: lines.join("\n"),
        metadata: json!({"matches": results.total, "truncated": truncated}),
        attachments: Vec::new(),
    }
}
