//! What the model reads of a server's answers: diagnostics as `path:line:col severity message` lines,
//! locations with the line they point at, hover text, symbol outlines, and a rename as a unified diff.
//! Lines and columns are 1-based and count characters, as the `read` tool shows them; LSP's are 0-based
//! UTF-16 units, converted here both ways.
//!
//! Must not: talk to a server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lsp_types::{
    Diagnostic, DiagnosticSeverity, DocumentSymbol, Hover, HoverContents, Location, MarkedString, Position,
    SymbolInformation, SymbolKind, TextEdit, WorkspaceEdit,
};

/// Which diagnostics are worth the model's attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Errors,
    ErrorsAndWarnings,
}

impl Shown {
    fn includes(self, severity: Option<DiagnosticSeverity>) -> bool {
        match severity {
            // A server that gives no severity means an error (the spec leaves it to the client).
            None | Some(DiagnosticSeverity::ERROR) => true,
            Some(DiagnosticSeverity::WARNING) => self == Shown::ErrorsAndWarnings,
            _ => false,
        }
    }
}

pub fn severity_name(severity: Option<DiagnosticSeverity>) -> &'static str {
    match severity {
        Some(DiagnosticSeverity::WARNING) => "warning",
        Some(DiagnosticSeverity::INFORMATION) => "info",
        Some(DiagnosticSeverity::HINT) => "hint",
        _ => "error",
    }
}

/// One diagnostic as a line (without the path).
pub fn diagnostic_line(d: &Diagnostic, text: Option<&str>) -> String {
    let (line, col) = display_position(text, d.range.start);
    let mut message =
        d.message.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    message = codeloop_types::escape_controls(&message).into_owned();
    let code = match &d.code {
        Some(lsp_types::NumberOrString::String(code)) => format!(" [{code}]"),
        Some(lsp_types::NumberOrString::Number(code)) => format!(" [{code}]"),
        None => String::new(),
    };
    format!("{line}:{col} {} {message}{code}", severity_name(d.severity))
}

/// The shown diagnostics of each file, sorted by position, at most `per_file` each, as
/// `path:line:col severity message` lines (paths relative to `base` where they are inside it).
pub fn diagnostics_lines(
    files: &[(PathBuf, Vec<Diagnostic>)],
    shown: Shown,
    per_file: usize,
    base: &Path,
) -> Vec<String> {
    let mut lines = Vec::new();
    for (path, items) in files {
        let mut items: Vec<&Diagnostic> = items.iter().filter(|d| shown.includes(d.severity)).collect();
        if items.is_empty() {
            continue;
        }
        items.sort_by_key(|d| (d.range.start.line, d.range.start.character));
        let text = std::fs::read_to_string(path).ok();
        let name = relative(path, base);
        for d in items.iter().take(per_file) {
            lines.push(format!("{name}:{}", diagnostic_line(d, text.as_deref())));
        }
        if items.len() > per_file {
            lines.push(format!("{name}: and {} more", items.len() - per_file));
        }
    }
    lines
}

/// `path` relative to `base` when inside it.
pub fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base).unwrap_or(path).display().to_string()
}

/// A 0-based UTF-16 position as 1-based line and character columns (`text` is the file's; without it
/// the UTF-16 column is shown).
pub fn display_position(text: Option<&str>, position: Position) -> (u32, u32) {
    let column = text
        .and_then(|t| t.lines().nth(position.line as usize))
        .map(|line| utf16_to_chars(line, position.character))
        .unwrap_or(position.character);
    (position.line + 1, column + 1)
}

/// A 1-based line and character column as an LSP position in `text`.
pub fn lsp_position(text: &str, line: u32, column: u32) -> Position {
    let line0 = line.saturating_sub(1);
    let col0 = column.saturating_sub(1) as usize;
    let units = text
        .lines()
        .nth(line0 as usize)
        .map(|l| l.chars().take(col0).map(char::len_utf16).sum::<usize>())
        .unwrap_or(col0);
    Position { line: line0, character: units as u32 }
}

fn utf16_to_chars(line: &str, units: u32) -> u32 {
    let mut seen = 0u32;
    let mut chars = 0u32;
    for c in line.chars() {
        if seen >= units {
            break;
        }
        seen += c.len_utf16() as u32;
        chars += 1;
    }
    chars
}

/// Locations as `path:line:col: the line's text`, sorted, duplicates dropped.
pub fn locations(found: &[Location], base: &Path) -> Vec<String> {
    let mut texts: BTreeMap<PathBuf, Option<String>> = BTreeMap::new();
    let mut out = Vec::new();
    let mut sorted: Vec<&Location> = found.iter().collect();
    sorted.sort_by_key(|l| (l.uri.as_str().to_owned(), l.range.start.line, l.range.start.character));
    sorted.dedup_by(|a, b| a.uri == b.uri && a.range.start == b.range.start);
    for location in sorted {
        let Some(path) = crate::uri::to_path(&location.uri) else { continue };
        let text = texts.entry(path.clone()).or_insert_with(|| std::fs::read_to_string(&path).ok());
        let (line, col) = display_position(text.as_deref(), location.range.start);
        let source = text
            .as_deref()
            .and_then(|t| t.lines().nth(location.range.start.line as usize))
            .map(|l| l.trim().chars().take(160).collect::<String>())
            .unwrap_or_default();
        out.push(format!("{}:{line}:{col}: {source}", relative(&path, base)));
    }
    out
}

pub fn hover(found: &Hover) -> String {
    let parts: Vec<String> = match &found.contents {
        HoverContents::Scalar(s) => vec![marked(s)],
        HoverContents::Array(all) => all.iter().map(marked).collect(),
        HoverContents::Markup(m) => vec![m.value.clone()],
    };
    parts.join("\n\n").trim().to_owned()
}

fn marked(s: &MarkedString) -> String {
    match s {
        MarkedString::String(s) => s.clone(),
        MarkedString::LanguageString(l) => format!("```{}\n{}\n```", l.language, l.value),
    }
}

/// A document's outline, indented by nesting.
pub fn document_symbols(symbols: &[DocumentSymbol], text: Option<&str>, depth: usize, out: &mut Vec<String>) {
    for symbol in symbols {
        let (line, col) = display_position(text, symbol.selection_range.start);
        out.push(format!("{}{} {} ({line}:{col})", "  ".repeat(depth), kind_name(symbol.kind), symbol.name));
        if let Some(children) = &symbol.children {
            document_symbols(children, text, depth + 1, out);
        }
    }
}

/// Flat symbols (workspace search, or an older server's document symbols) as `kind name path:line:col`.
#[allow(deprecated)] // `SymbolInformation::deprecated` is a field of the type, not used here.
pub fn flat_symbols(symbols: &[SymbolInformation], base: &Path) -> Vec<String> {
    symbols
        .iter()
        .map(|s| {
            let location = locations(std::slice::from_ref(&s.location), base);
            let place = location.first().and_then(|l| l.split(": ").next()).unwrap_or_default().to_owned();
            let container = s.container_name.as_deref().map(|c| format!(" in {c}")).unwrap_or_default();
            format!("{} {}{container} {place}", kind_name(s.kind), s.name)
        })
        .collect()
}

pub fn kind_name(kind: SymbolKind) -> String {
    format!("{kind:?}").to_lowercase()
}

/// A rename's edits, applied in memory, as a unified diff per file (paths relative to `base`); files
/// that cannot be read are named.
pub fn workspace_edit_diff(edit: &WorkspaceEdit, base: &Path) -> (String, usize) {
    let mut by_file: BTreeMap<PathBuf, Vec<TextEdit>> = BTreeMap::new();
    if let Some(changes) = &edit.changes {
        for (uri, edits) in changes {
            if let Some(path) = crate::uri::to_path(uri) {
                by_file.entry(path).or_default().extend(edits.iter().cloned());
            }
        }
    }
    if let Some(lsp_types::DocumentChanges::Edits(docs)) = &edit.document_changes {
        for doc in docs {
            if let Some(path) = crate::uri::to_path(&doc.text_document.uri) {
                let edits = doc.edits.iter().map(|e| match e {
                    lsp_types::OneOf::Left(e) => e.clone(),
                    lsp_types::OneOf::Right(annotated) => annotated.text_edit.clone(),
                });
                by_file.entry(path).or_default().extend(edits);
            }
        }
    }
    let mut diff = String::new();
    let mut count = 0;
    for (path, edits) in &by_file {
        let name = relative(path, base);
        let Ok(before) = std::fs::read_to_string(path) else {
            diff.push_str(&format!("# {name}: cannot be read; {} edits not shown\n", edits.len()));
            continue;
        };
        let after = apply_edits(&before, edits);
        count += edits.len();
        let unified = similar::TextDiff::from_lines(&before, &after)
            .unified_diff()
            .header(&format!("a/{name}"), &format!("b/{name}"))
            .to_string();
        diff.push_str(&unified);
    }
    (diff, count)
}

/// Applies non-overlapping edits (LSP positions) to `text`.
pub fn apply_edits(text: &str, edits: &[TextEdit]) -> String {
    let mut edits: Vec<&TextEdit> = edits.iter().collect();
    // From the end, so earlier offsets stay valid.
    edits.sort_by_key(|e| std::cmp::Reverse((e.range.start.line, e.range.start.character)));
    let mut out = text.to_owned();
    for edit in edits {
        let (Some(start), Some(end)) =
            (byte_offset(&out, edit.range.start), byte_offset(&out, edit.range.end))
        else {
            continue;
        };
        if start <= end {
            out.replace_range(start..end, &edit.new_text);
        }
    }
    out
}

fn byte_offset(text: &str, position: Position) -> Option<usize> {
    let mut offset = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if n == position.line as usize {
            let mut units = 0u32;
            for (i, c) in line.char_indices() {
                if units >= position.character || c == '\n' {
                    return Some(offset + i);
                }
                units += c.len_utf16() as u32;
            }
            return Some(offset + line.len());
        }
        offset += line.len();
    }
    (position.line as usize == text.split_inclusive('\n').count()).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsp_types::Range;

    fn at(line: u32, character: u32) -> Position {
        Position { line, character }
    }

    #[test]
    fn positions_count_characters_for_the_model_and_utf16_for_the_server() {
        let text = "a = 1\nπ😀x = 2\n";
        // '😀' is two UTF-16 units: the model's column 3 ('x' after "π😀") is unit 3.
        assert_eq!(lsp_position(text, 2, 3), at(1, 3));
        assert_eq!(display_position(Some(text), at(1, 3)), (2, 3));
    }

    #[test]
    fn edits_apply_from_the_end_and_diff_names_the_file() {
        let text = "def old():\n    return old\n";
        let edits = vec![
            TextEdit { range: Range { start: at(0, 4), end: at(0, 7) }, new_text: "new".into() },
            TextEdit { range: Range { start: at(1, 11), end: at(1, 14) }, new_text: "new".into() },
        ];
        assert_eq!(apply_edits(text, &edits), "def new():\n    return new\n");
    }

    #[test]
    fn errors_sorted_and_capped_per_file() {
        let d = |line, message: &str, severity| Diagnostic {
            range: Range { start: at(line, 0), end: at(line, 1) },
            severity: Some(severity),
            message: message.into(),
            ..Default::default()
        };
        let files = vec![(
            PathBuf::from("/p/a.py"),
            vec![
                d(5, "late", DiagnosticSeverity::ERROR),
                d(1, "early\nsecond line", DiagnosticSeverity::ERROR),
                d(2, "warned", DiagnosticSeverity::WARNING),
                d(9, "last", DiagnosticSeverity::ERROR),
            ],
        )];
        assert_eq!(
            diagnostics_lines(&files, Shown::Errors, 2, Path::new("/p")),
            vec!["a.py:2:1 error early; second line", "a.py:6:1 error late", "a.py: and 1 more",]
        );
        assert_eq!(diagnostics_lines(&files, Shown::ErrorsAndWarnings, 9, Path::new("/p")).len(), 4);
    }
}
