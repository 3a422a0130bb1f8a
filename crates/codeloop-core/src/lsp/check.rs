//! What an edit's result says after a change (DESIGN.md §5n): the files are sent to the servers that
//! serve them, their diagnostics awaited (bounded; longer the first time, while a server starts), and
//! the errors of the changed files and of other files the change broke written as a `<diagnostics>`
//! block, with notes on servers still indexing, stopped or broken.

use std::path::{Path, PathBuf};

use codeloop_lsp::render::{self, Shown};
use codeloop_lsp::{Server, Waited};
use codeloop_tools::{Checked, ProjectPaths};
use codeloop_types::LockExt as _;
use serde_json::{Value, json};

use super::{LanguageServers, Slot, real};

/// Other files' diagnostics an edit's result lists: this many files, this many lines each.
const OTHER_FILES: usize = 5;
const OTHER_PER_FILE: usize = 3;

/// LSP's diagnostic type and the severity that means an error.
mod lsp_diagnostic {
    pub use codeloop_lsp::lsp_types::Diagnostic;
    pub const ERROR: codeloop_lsp::lsp_types::DiagnosticSeverity =
        codeloop_lsp::lsp_types::DiagnosticSeverity::ERROR;
}

impl LanguageServers {
    /// What the servers say of `files` after a change: the `<diagnostics>` block of the errors (and
    /// warnings when `[lsp] warnings`), other files' new errors, and notes on servers that are still
    /// indexing or cannot run. `None` when no server serves the files or there is nothing to say.
    pub async fn check(
        self: &std::sync::Arc<Self>,
        project: &ProjectPaths,
        files: &[PathBuf],
    ) -> Option<Checked> {
        // The usual case costs a lookup: no server serves these files, or (a command) none runs.
        if self.active.is_empty()
            || (!files.is_empty() && !files.iter().any(|f| self.serving(f).next().is_some()))
            || (files.is_empty() && self.slots.locked().is_empty())
        {
            return None;
        }
        let root = real(&project.root);
        let stale;
        let files = match files {
            [] => {
                stale = self.running(&root).iter().flat_map(|s| s.stale_documents()).collect::<Vec<_>>();
                stale.as_slice()
            }
            files => files,
        };
        let mut synced = Vec::new();
        let mut notes = Vec::new();
        for file in files.iter().filter(|f| f.starts_with(&root)) {
            for candidate in self.serving(file) {
                let slot = self.slot(candidate, file, &root);
                match self.ready(&slot).await {
                    Ok(ready) => {
                        let language = codeloop_lsp::language_id(
                            file.extension().and_then(|e| e.to_str()).unwrap_or_default(),
                        );
                        match ready.server.sync(file, language).await {
                            Ok(since) => synced.push((slot, ready, file.clone(), since)),
                            Err(e) => notes.push(format!("{}: {e}", candidate.spec.name)),
                        }
                    }
                    Err(broken) => {
                        let mut state = slot.state.lock().await;
                        if !state.told {
                            state.told = true;
                            notes.push(format!(
                                "Language server {} cannot run: {broken}. `codeloop lsp status` shows it.",
                                candidate.spec.name
                            ));
                        }
                    }
                }
            }
        }
        if synced.is_empty() && notes.is_empty() {
            return None;
        }
        let waits = synced.iter().map(|(_, ready, file, since)| {
            let wait = if ready.fresh { self.config.start_wait() } else { self.config.wait() };
            ready.server.wait_for(file, *since, wait)
        });
        let waited = futures::future::join_all(waits).await;
        let shown = if self.config.warnings == Some(true) { Shown::ErrorsAndWarnings } else { Shown::Errors };
        let mut changed: Vec<(PathBuf, Vec<lsp_diagnostic::Diagnostic>)> = Vec::new();
        for ((slot, ready, file, _), waited) in synced.iter().zip(waited) {
            if let (Waited::Pending { .. }, Some(reason)) = (&waited, ready.server.gone()) {
                notes.push(self.died(slot, &ready.server, &reason).await);
                continue;
            }
            match waited {
                Waited::Published(items) => match changed.iter_mut().find(|(path, _)| path == file) {
                    Some((_, all)) => all.extend(items),
                    None => changed.push((file.clone(), items)),
                },
                Waited::Pending { indexing } => notes.push(format!(
                    "{}: no diagnostics for {} yet{}; the diagnostics tool shows them once they come.",
                    ready.server.name(),
                    render::relative(file, &project.directory),
                    if indexing { " (it is still indexing)" } else { "" }
                )),
            }
        }
        let mut others = Vec::new();
        for (_, ready, _, since) in &synced {
            for (path, items) in ready.server.published_since(*since, files) {
                if !others.iter().any(|(p, _): &(PathBuf, _)| *p == path) {
                    others.push((path, items));
                }
            }
        }
        others
            .retain(|(_, items)| items.iter().any(|d| d.severity.is_none_or(|s| s == lsp_diagnostic::ERROR)));
        others.truncate(OTHER_FILES);
        let lines =
            render::diagnostics_lines(&changed, shown, self.config.max_per_file(), &project.directory);
        let other_lines =
            render::diagnostics_lines(&others, Shown::Errors, OTHER_PER_FILE, &project.directory);
        if lines.is_empty() && other_lines.is_empty() && notes.is_empty() {
            return None;
        }
        let mut text = String::new();
        if !lines.is_empty() || !other_lines.is_empty() {
            text.push_str("<diagnostics>\n");
            for line in &lines {
                text.push_str(line);
                text.push('\n');
            }
            if !other_lines.is_empty() {
                text.push_str("Other files now report:\n");
                for line in &other_lines {
                    text.push_str(line);
                    text.push('\n');
                }
            }
            text.push_str("</diagnostics>");
        }
        for note in notes {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&note);
        }
        let metadata = diagnostics_metadata(changed.iter().chain(&others), shown, &project.directory);
        Some(Checked { text, metadata })
    }

    /// The note for a server that died while a change was checked: it restarts at the next change, or,
    /// when it already had its restart, it is broken from now on.
    async fn died(&self, slot: &Slot, server: &Server, reason: &str) -> String {
        let words = server.last_stderr().map(|l| format!("; its last words: {l}")).unwrap_or_default();
        let name = &slot.candidate.spec.name;
        let mut state = slot.state.lock().await;
        if state.restarts >= 1 {
            let broken = format!("it stopped again after a restart ({reason}{words})");
            state.server = None;
            state.broken = Some(broken.clone());
            state.told = true;
            format!("Language server {name} cannot run: {broken}. `codeloop lsp status` shows it.")
        } else {
            format!("Language server {name} stopped ({reason}{words}); it is restarted at the next change.")
        }
    }
}

fn diagnostics_metadata<'a>(
    files: impl Iterator<Item = &'a (PathBuf, Vec<lsp_diagnostic::Diagnostic>)>,
    shown: Shown,
    base: &Path,
) -> Value {
    let mut out = Vec::new();
    for (path, items) in files {
        let text = std::fs::read_to_string(path).ok();
        for d in items {
            let severity = render::severity_name(d.severity);
            let wanted = match shown {
                Shown::Errors => severity == "error",
                Shown::ErrorsAndWarnings => severity == "error" || severity == "warning",
            };
            if !wanted {
                continue;
            }
            let (line, column) = render::display_position(text.as_deref(), d.range.start);
            out.push(json!({
                "path": render::relative(path, base),
                "line": line,
                "column": column,
                "severity": severity,
                "message": codeloop_types::escape_controls(&d.message),
                "source": d.source,
            }));
        }
    }
    Value::Array(out)
}
