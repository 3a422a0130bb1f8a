//! A tool call as the UI keeps it: only what its card shows (state, tool, what it works on, the first
//! rows of its result and how many more there are). A finished call is kept in this form alone, so a
//! long session costs the UI a few hundred bytes per call, not its whole input, output and metadata.
//!
//! Owns: which rows of a call's result a card shows. Must not: lay them out (the view wraps and styles).

use codeloop_types::{ToolPart, ToolState};
use serde_json::Value;

/// Rows of a tool's output shown under its card.
pub const PREVIEW_ROWS: usize = 4;
/// Rows of a diff shown under an edit's card.
pub const DIFF_ROWS: usize = 12;
/// A row is kept to this many bytes: wider than any terminal, so truncating it to the width at draw
/// time shows the same thing, and a one-line megabyte of output costs nothing.
const ROW_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardState {
    Pending,
    Running,
    Completed,
    Interrupted,
    /// Interrupted after it started: it may have acted (DESIGN.md §5m).
    OutcomeUnknown,
    Failed,
}

/// How a card's result rows look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreviewKind {
    /// Output, dimmed.
    Output,
    /// An error's text.
    Error,
    /// A unified diff, coloured by each row's first character.
    Diff,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCard {
    pub tool: String,
    /// What the call works on (its command, path or pattern).
    pub detail: String,
    pub state: CardState,
    pub kind: PreviewKind,
    pub rows: Vec<String>,
    /// Result rows not shown.
    pub more: usize,
    /// What language servers said of an edit (DESIGN.md §5n): `path:line:col severity message` rows.
    pub diagnostics: Vec<String>,
}

/// Diagnostic rows kept under an edit's card.
pub const DIAGNOSTIC_ROWS: usize = 5;

impl ToolCard {
    pub fn new(tool: &ToolPart) -> ToolCard {
        let state = match &tool.state {
            ToolState::Pending(_) => CardState::Pending,
            ToolState::Running(_) => CardState::Running,
            ToolState::Completed(_) => CardState::Completed,
            ToolState::Error(error) if tool.state.is_interrupted() => {
                let outcome = error.metadata.as_ref().and_then(|m| m.get("outcome")).and_then(|o| o.as_str());
                match outcome {
                    Some(codeloop_types::OUTCOME_UNKNOWN) => CardState::OutcomeUnknown,
                    _ => CardState::Interrupted,
                }
            }
            ToolState::Error(_) => CardState::Failed,
        };
        let mut card = ToolCard {
            tool: tool.tool.clone(),
            detail: codeloop_tools::call_summary(&tool.tool, tool.state.input()),
            state,
            kind: PreviewKind::Output,
            rows: Vec::new(),
            more: 0,
            diagnostics: Vec::new(),
        };
        match &tool.state {
            ToolState::Running(running) => {
                let metadata = running.metadata.as_ref();
                if let Some(output) = metadata.and_then(|m| m.get("output")).and_then(Value::as_str) {
                    let mut tail: Vec<&str> = output.lines().rev().take(PREVIEW_ROWS).collect();
                    tail.reverse();
                    card.show(tail.into_iter(), PREVIEW_ROWS);
                } else if metadata.is_some_and(|m| m.get("progress").is_some())
                    && let Some(title) = &running.title
                {
                    // An MCP server's progress report ("50% · indexing").
                    card.show(std::iter::once(title.as_str()), 1);
                }
            }
            ToolState::Completed(done) => match done.metadata.get("diff").and_then(Value::as_str) {
                Some(diff) if !diff.is_empty() => {
                    card.kind = PreviewKind::Diff;
                    let body = diff.lines().filter(|l| {
                        !l.starts_with("---")
                            && !l.starts_with("+++")
                            && !l.starts_with("Index:")
                            && !l.starts_with("====")
                    });
                    card.show(body, DIFF_ROWS);
                    card.diagnostics = diagnostic_rows(&done.metadata);
                }
                _ if done.time.compacted.is_some() => {
                    card.show(std::iter::once("[output cleared for the model]"), PREVIEW_ROWS)
                }
                // A read's output wraps the file in tags: show the file's lines.
                _ if tool.tool == "read" => {
                    card.show(done.output.lines().filter(|l| !l.starts_with('<')), PREVIEW_ROWS)
                }
                _ => card.show(done.output.lines(), PREVIEW_ROWS),
            },
            ToolState::Error(error) if card.state == CardState::Failed => {
                card.kind = PreviewKind::Error;
                card.show(error.error.lines(), PREVIEW_ROWS);
            }
            _ => {}
        }
        card
    }

    /// A card that will not change again: the call finished.
    pub fn is_final(&self) -> bool {
        matches!(
            self.state,
            CardState::Completed | CardState::Interrupted | CardState::OutcomeUnknown | CardState::Failed
        )
    }

    fn show<'a>(&mut self, lines: impl Iterator<Item = &'a str>, limit: usize) {
        let mut total = 0;
        for line in lines {
            if total < limit {
                self.rows.push(clip(line).to_owned());
            }
            total += 1;
        }
        self.more = total.saturating_sub(limit);
    }
}

fn diagnostic_rows(metadata: &Value) -> Vec<String> {
    let Some(found) = metadata.get("diagnostics").and_then(Value::as_array) else { return Vec::new() };
    let text =
        |d: &Value, key: &str| d.get(key).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    let mut rows: Vec<String> = found
        .iter()
        .take(DIAGNOSTIC_ROWS)
        .map(|d| {
            let field = |key| text(d, key).unwrap_or_default();
            let row = format!(
                "{}:{}:{} {} {}",
                field("path"),
                field("line"),
                field("column"),
                field("severity"),
                field("message")
            );
            clip(&codeloop_types::escape_controls(&row)).to_owned()
        })
        .collect();
    if found.len() > DIAGNOSTIC_ROWS {
        rows.push(format!("… and {} more", found.len() - DIAGNOSTIC_ROWS));
    }
    rows
}

fn clip(line: &str) -> &str {
    if line.len() <= ROW_BYTES {
        return line;
    }
    let mut end = ROW_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(value: Value) -> ToolPart {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_finished_call_keeps_only_the_rows_its_card_shows() {
        let output = (1..=10).map(|n| format!("line {n}")).collect::<Vec<_>>().join("\n");
        let card = ToolCard::new(&tool(json!({"call_id": "c", "tool": "bash", "state": {
            "status": "completed", "input": {"command": "seq 10"}, "output": output, "title": "seq",
            "metadata": {"big": "x".repeat(100_000)}, "time": {"start": 0, "end": 1}}})));
        assert_eq!(card.rows, ["line 1", "line 2", "line 3", "line 4"]);
        assert_eq!(card.more, 6);
        assert_eq!((card.state, card.kind), (CardState::Completed, PreviewKind::Output));
        assert!(card.detail.contains("seq 10"), "{}", card.detail);
        assert!(card.is_final());
    }

    #[test]
    fn a_running_mcp_call_shows_its_servers_progress() {
        let card = ToolCard::new(&tool(json!({"call_id": "c", "tool": "web_index", "state": {
            "status": "running", "input": {}, "title": "50% · indexing",
            "metadata": {"server": "web", "progress": {"progress": 1, "total": 2, "message": "indexing"}},
            "time": {"start": 0}}})));
        assert_eq!(card.state, CardState::Running);
        assert_eq!(card.rows, ["50% · indexing"]);
    }

    #[test]
    fn an_interrupted_call_that_had_started_is_told_apart_from_one_that_had_not() {
        let interrupted = |metadata: Value| {
            ToolCard::new(&tool(json!({"call_id": "c", "tool": "bash", "state": {
                "status": "error", "input": {}, "error": "Tool execution aborted", "metadata": metadata,
                "time": {"start": 0, "end": 1}}})))
            .state
        };
        let unknown = interrupted(json!({"interrupted": true, "outcome": "unknown"}));
        assert_eq!(unknown, CardState::OutcomeUnknown);
        let never_ran = interrupted(json!({"interrupted": true, "outcome": "not_started"}));
        assert_eq!(never_ran, CardState::Interrupted);
        assert_eq!(
            interrupted(json!({"interrupted": true})),
            CardState::Interrupted,
            "recorded before outcomes"
        );
    }

    #[test]
    fn an_edit_shows_the_errors_its_language_server_reported_under_its_diff() {
        let card = ToolCard::new(&tool(json!({"call_id": "c", "tool": "edit", "state": {
            "status": "completed", "input": {"filePath": "a.py"}, "output": "ok", "title": "a.py",
            "metadata": {"diff": "@@ -1 +1 @@\n-a\n+b\n", "diagnostics": [
                {"path": "a.py", "line": 2, "column": 12, "severity": "error", "message": "undefined name 'b'"}
            ]}, "time": {"start": 0, "end": 1}}})));
        assert_eq!(card.diagnostics, ["a.py:2:12 error undefined name 'b'"]);
    }

    #[test]
    fn a_huge_single_row_is_clipped_at_a_character_boundary() {
        let output = "é".repeat(5_000);
        let card = ToolCard::new(&tool(json!({"call_id": "c", "tool": "bash", "state": {
            "status": "completed", "input": {}, "output": output, "title": "",
            "metadata": {}, "time": {"start": 0, "end": 1}}})));
        assert!(card.rows[0].len() <= ROW_BYTES && card.rows[0].chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_edit_shows_its_diff_without_headers_and_a_failure_its_error() {
        let diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n";
        let card = ToolCard::new(&tool(json!({"call_id": "c", "tool": "edit", "state": {
            "status": "completed", "input": {"filePath": "x"}, "output": "ok", "title": "x",
            "metadata": {"diff": diff}, "time": {"start": 0, "end": 1}}})));
        assert_eq!(card.kind, PreviewKind::Diff);
        assert_eq!(card.rows, ["@@ -1 +1 @@", "-old", "+new"]);
        let failed = ToolCard::new(&tool(json!({"call_id": "c", "tool": "bash", "state": {
            "status": "error", "input": {}, "error": "exit 2\nno such file", "time": {"start": 0, "end": 1}}})));
        assert_eq!((failed.state, failed.kind), (CardState::Failed, PreviewKind::Error));
        assert_eq!(failed.rows, ["exit 2", "no such file"]);
    }
}
