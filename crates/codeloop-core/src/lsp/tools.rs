//! The model's tools over the language servers (DESIGN.md §5n): `diagnostics {path?}` and
//! `lsp {operation, path, line, character, query?, new_name?}`. Offered only while a server runs for the
//! project ([`codeloop_tools::Needs::LanguageServer`]), so they cost no prompt tokens otherwise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use codeloop_lsp::lsp_types::{
    DocumentSymbolResponse, GotoDefinitionResponse, Hover, Location, WorkspaceEdit, WorkspaceSymbolResponse,
};
use codeloop_lsp::render::{self, Shown};
use codeloop_tools::{Effect, Needs, Tool, ToolContext, ToolFailure, ToolOutput, decode, schema_for};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::LanguageServers;

/// How long one navigation request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Lines a navigation answer shows.
const MAX_LINES: usize = 100;

#[derive(Deserialize, JsonSchema)]
struct DiagnosticsParams {
    /// A file (relative to the project directory or absolute); without it, every file the running
    /// servers reported on.
    #[serde(default, deserialize_with = "codeloop_tools::opt_text")]
    path: Option<String>,
}

/// `diagnostics`: the errors and warnings language servers report now.
pub struct DiagnosticsTool {
    servers: Arc<LanguageServers>,
    parameters: Value,
}

impl DiagnosticsTool {
    pub fn new(servers: Arc<LanguageServers>) -> Self {
        Self { servers, parameters: schema_for::<DiagnosticsParams>() }
    }
}

#[async_trait]
impl Tool for DiagnosticsTool {
    fn name(&self) -> &str {
        "diagnostics"
    }
    fn description(&self) -> &str {
        "Errors and warnings the project's language servers report now (type errors, undefined names, syntax \
         errors), as path:line:col severity message. Give a path for one file (it is checked as it is on disk \
         now); without one, every file the servers reported on."
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn effect(&self) -> Effect {
        Effect::ReadOnly
    }
    fn needs(&self) -> Needs {
        Needs::LanguageServer
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: DiagnosticsParams = decode(self.name(), args)?;
        let base = &ctx.project.directory;
        let shown = Shown::ErrorsAndWarnings;
        let max = self.servers.config.max_per_file();
        let (title, lines) = match params.path {
            Some(raw) => {
                let path = inside_project(ctx, &raw)?;
                let ready =
                    self.servers.server_for(&path, &ctx.project.root).await.map_err(ToolFailure::Failed)?;
                let language =
                    codeloop_lsp::language_id(path.extension().and_then(|e| e.to_str()).unwrap_or_default());
                let since = ready
                    .server
                    .sync(&path, language)
                    .await
                    .map_err(|e| ToolFailure::Failed(e.to_string()))?;
                let wait =
                    if ready.fresh { self.servers.config.start_wait() } else { self.servers.config.wait() };
                let items = match ready.server.wait_for(&path, since, wait).await {
                    codeloop_lsp::Waited::Published(items) => items,
                    // Nothing newer came: what it said last, if anything.
                    codeloop_lsp::Waited::Pending { .. } => {
                        ready.server.diagnostics_of(&path).unwrap_or_default()
                    }
                };
                (render::relative(&path, base), render::diagnostics_lines(&[(path, items)], shown, max, base))
            }
            None => {
                let servers = self.servers.running(&ctx.project.root);
                let mut files: Vec<_> = servers.iter().flat_map(|s| s.all_diagnostics()).collect();
                let root = ctx.project.root.canonicalize().unwrap_or_else(|_| ctx.project.root.clone());
                files.retain(|(path, _)| path.starts_with(&root));
                files.sort_by(|a, b| a.0.cmp(&b.0));
                ("project".to_owned(), render::diagnostics_lines(&files, shown, max, base))
            }
        };
        let output = if lines.is_empty() {
            "No errors or warnings.".to_owned()
        } else {
            format!("<diagnostics>\n{}\n</diagnostics>", lines.join("\n"))
        };
        Ok(ToolOutput { title, output, metadata: json!({"count": lines.len()}), attachments: Vec::new() })
    }
}

/// What the `lsp` tool does.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum Operation {
    Definition,
    References,
    Hover,
    Symbols,
    Rename,
}

#[derive(Deserialize, JsonSchema)]
struct LspParams {
    operation: Operation,
    /// The file (relative to the project directory or absolute).
    path: String,
    /// 1-based line, as `read` shows it (not needed for `symbols`).
    #[serde(default)]
    line: Option<u32>,
    /// 1-based character column on that line.
    #[serde(default)]
    character: Option<u32>,
    /// `symbols` only: a name to search the whole workspace for; without it, the file's outline.
    #[serde(default, deserialize_with = "codeloop_tools::opt_text")]
    query: Option<String>,
    /// `rename` only: the new name.
    #[serde(default, deserialize_with = "codeloop_tools::opt_text")]
    new_name: Option<String>,
}

/// `lsp`: navigation through the language server.
pub struct LspTool {
    servers: Arc<LanguageServers>,
    parameters: Value,
}

impl LspTool {
    pub fn new(servers: Arc<LanguageServers>) -> Self {
        Self { servers, parameters: schema_for::<LspParams>() }
    }
}

#[async_trait]
impl Tool for LspTool {
    fn name(&self) -> &str {
        "lsp"
    }
    fn description(&self) -> &str {
        "Ask the project's language server about code. operation: `definition` (where the symbol at \
         path:line:character is defined), `references` (every use of it), `hover` (its type and docs), \
         `symbols` (the file's outline; with `query`, symbols of that name across the workspace), `rename` \
         (the edits that rename it to `new_name`, as a diff: nothing is changed — apply it with the edit tools). \
         line and character are 1-based, as `read` shows them."
    }
    fn parameters(&self) -> &Value {
        &self.parameters
    }
    fn effect(&self) -> Effect {
        Effect::ReadOnly
    }
    fn needs(&self) -> Needs {
        Needs::LanguageServer
    }

    async fn execute(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolFailure> {
        let params: LspParams = decode(self.name(), args)?;
        let path = inside_project(ctx, &params.path)?;
        let ready = self.servers.server_for(&path, &ctx.project.root).await.map_err(ToolFailure::Failed)?;
        let server = ready.server;
        let language =
            codeloop_lsp::language_id(path.extension().and_then(|e| e.to_str()).unwrap_or_default());
        server.sync(&path, language).await.map_err(failed)?;
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| ToolFailure::Failed(format!("cannot read {}: {e}", path.display())))?;
        let uri = codeloop_lsp::uri::from_path(&path)
            .ok_or_else(|| ToolFailure::Failed(format!("{} cannot be named as a URI", path.display())))?;
        let document = json!({ "uri": uri.as_str() });
        let base = ctx.project.directory.clone();
        let rel = render::relative(&path, &base);
        let at = |params: &LspParams| -> Result<Value, ToolFailure> {
            let (Some(line), Some(character)) = (params.line, params.character) else {
                return Err(invalid("`line` and `character` are required for this operation"));
            };
            Ok(json!({"textDocument": document, "position": render::lsp_position(&text, line, character)}))
        };
        let (title, output) = match params.operation {
            Operation::Definition => {
                let found: Option<GotoDefinitionResponse> = server
                    .call("textDocument/definition", at(&params)?, REQUEST_TIMEOUT)
                    .await
                    .map_err(failed)?;
                let locations = definition_locations(found);
                (
                    format!("definition {rel}"),
                    listed(render::locations(&locations, &base), "No definition found."),
                )
            }
            Operation::References => {
                let mut request = at(&params)?;
                request["context"] = json!({"includeDeclaration": true});
                let found: Option<Vec<Location>> =
                    server.call("textDocument/references", request, REQUEST_TIMEOUT).await.map_err(failed)?;
                let lines = render::locations(&found.unwrap_or_default(), &base);
                (format!("references {rel}"), listed(lines, "No references found."))
            }
            Operation::Hover => {
                let found: Option<Hover> =
                    server.call("textDocument/hover", at(&params)?, REQUEST_TIMEOUT).await.map_err(failed)?;
                let text = found.map(|h| render::hover(&h)).filter(|t| !t.is_empty());
                (format!("hover {rel}"), text.unwrap_or_else(|| "Nothing to show here.".into()))
            }
            Operation::Symbols => match &params.query {
                Some(query) => {
                    let found: Option<WorkspaceSymbolResponse> = server
                        .call("workspace/symbol", json!({"query": query}), REQUEST_TIMEOUT)
                        .await
                        .map_err(failed)?;
                    let lines = match found {
                        Some(WorkspaceSymbolResponse::Flat(symbols)) => render::flat_symbols(&symbols, &base),
                        Some(WorkspaceSymbolResponse::Nested(symbols)) => symbols
                            .iter()
                            .map(|s| format!("{} {}", render::kind_name(s.kind), s.name))
                            .collect(),
                        None => Vec::new(),
                    };
                    (format!("symbols {query}"), listed(lines, "No symbols found."))
                }
                None => {
                    let found: Option<DocumentSymbolResponse> = server
                        .call(
                            "textDocument/documentSymbol",
                            json!({"textDocument": document}),
                            REQUEST_TIMEOUT,
                        )
                        .await
                        .map_err(failed)?;
                    let mut lines = Vec::new();
                    match found {
                        Some(DocumentSymbolResponse::Nested(symbols)) => {
                            render::document_symbols(&symbols, Some(&text), 0, &mut lines)
                        }
                        Some(DocumentSymbolResponse::Flat(symbols)) => {
                            lines = render::flat_symbols(&symbols, &base)
                        }
                        None => {}
                    }
                    (format!("symbols {rel}"), listed(lines, "No symbols in this file."))
                }
            },
            Operation::Rename => {
                let Some(new_name) = params.new_name.clone() else {
                    return Err(invalid("`new_name` is required for rename"));
                };
                let mut request = at(&params)?;
                request["newName"] = json!(new_name);
                let found: Option<WorkspaceEdit> =
                    server.call("textDocument/rename", request, REQUEST_TIMEOUT).await.map_err(failed)?;
                let Some(edit) = found else {
                    return Err(ToolFailure::Failed("The server cannot rename the symbol there.".into()));
                };
                let (diff, count) = render::workspace_edit_diff(&edit, &base);
                let output = format!(
                    "Renaming to `{new_name}` takes {count} edits. Nothing was changed yet: apply this with the edit tools.\n\n{diff}"
                );
                (format!("rename to {new_name}"), output)
            }
        };
        Ok(ToolOutput { title, output, metadata: json!({"server": server.name()}), attachments: Vec::new() })
    }
}

fn definition_locations(found: Option<GotoDefinitionResponse>) -> Vec<Location> {
    match found {
        Some(GotoDefinitionResponse::Scalar(location)) => vec![location],
        Some(GotoDefinitionResponse::Array(locations)) => locations,
        Some(GotoDefinitionResponse::Link(links)) => links
            .into_iter()
            .map(|l| Location { uri: l.target_uri, range: l.target_selection_range })
            .collect(),
        None => Vec::new(),
    }
}

fn listed(mut lines: Vec<String>, empty: &str) -> String {
    if lines.is_empty() {
        return empty.to_owned();
    }
    if lines.len() > MAX_LINES {
        let more = lines.len() - MAX_LINES;
        lines.truncate(MAX_LINES);
        lines.push(format!("… and {more} more"));
    }
    lines.join("\n")
}

fn failed(error: codeloop_lsp::LspError) -> ToolFailure {
    ToolFailure::Failed(format!("The language server failed: {error}"))
}

fn invalid(detail: &str) -> ToolFailure {
    ToolFailure::InvalidArguments { tool: "lsp".into(), detail: detail.into() }
}

/// A path inside the project (language servers see only the project).
fn inside_project(ctx: &ToolContext, raw: &str) -> Result<PathBuf, ToolFailure> {
    let path = codeloop_tools::resolve_in(&ctx.project.directory, raw);
    if !path.starts_with(ctx.project.root.canonicalize().unwrap_or_else(|_| ctx.project.root.clone())) {
        return Err(ToolFailure::Failed(format!(
            "{} is outside the project: language servers only know the project's files.",
            path.display()
        )));
    }
    if !path.is_file() {
        return Err(ToolFailure::Failed(format!("File not found: {}", Path::new(raw).display())));
    }
    Ok(path)
}
