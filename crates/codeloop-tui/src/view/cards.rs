//! A conversation item's rows: a person's message, an assistant's answer (Markdown, folded reasoning,
//! notes) and tool calls as compact cards with their state and a short result.

use codeloop_types::{Message, PartKind, ToolPart, ToolState};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use super::{DIM, ERROR, OK, USER, WARN};
use crate::convo::Entry;
use crate::markdown;
use crate::wrap::{truncate, wrap};

/// Rows of a tool's output shown under its card.
const PREVIEW_ROWS: usize = 4;
/// Rows of a diff shown under an edit's card.
const DIFF_ROWS: usize = 12;

/// A message's rows: a user's text, or an assistant's answer, reasoning, tool cards and notes.
pub(super) fn message_lines(entry: &Entry, width: u16, show_reasoning: bool) -> Vec<Line<'static>> {
    let Some(info) = &entry.info else { return Vec::new() };
    let mut lines = Vec::new();
    match info {
        Message::User(_) => {
            for part in entry.parts.values() {
                match &part.kind {
                    PartKind::Text(text) if !text.synthetic && !text.ignored => {
                        for line in text.text.lines() {
                            lines.extend(wrap(
                                &[Span::styled("▌ ", USER)],
                                &[Span::styled("▌ ", USER)],
                                &[Span::styled(line.to_owned(), Style::new().add_modifier(Modifier::BOLD))],
                                width,
                            ));
                        }
                    }
                    PartKind::Compaction(c) => {
                        let why = if c.overflow {
                            " (the context was full)"
                        } else if c.auto {
                            " (automatic)"
                        } else {
                            ""
                        };
                        lines.push(Line::styled(format!("⋯ compacting the conversation{why}"), WARN));
                    }
                    PartKind::File(f) => lines.push(Line::styled(
                        format!("▌ [file {}]", f.filename.as_deref().unwrap_or(&f.mime)),
                        USER,
                    )),
                    _ => {}
                }
            }
        }
        Message::Assistant(a) => {
            if a.summary {
                let rows = entry
                    .parts
                    .values()
                    .filter_map(|p| p.as_text())
                    .map(|t| t.text.lines().count())
                    .sum::<usize>();
                lines
                    .push(Line::styled(format!("▸ summary of the earlier conversation ({rows} lines)"), DIM));
            } else {
                for part in entry.parts.values() {
                    part_lines(&part.kind, width, show_reasoning, &mut lines);
                }
            }
            if let Some(error) = &a.error {
                if error.is_aborted() {
                    lines.push(Line::styled("■ interrupted", WARN));
                } else {
                    lines.extend(wrap(
                        &[Span::styled("✗ ", ERROR)],
                        &[Span::raw("  ")],
                        &[Span::styled(error.message().to_owned(), ERROR)],
                        width,
                    ));
                }
            }
        }
    }
    if lines.is_empty() {
        return lines;
    }
    lines.push(Line::default());
    lines
}

fn part_lines(kind: &PartKind, width: u16, show_reasoning: bool, lines: &mut Vec<Line<'static>>) {
    match kind {
        PartKind::Reasoning(r) if !r.text.trim().is_empty() => {
            let style = DIM.add_modifier(Modifier::ITALIC);
            if show_reasoning {
                for line in r.text.lines() {
                    lines.extend(wrap(
                        &[Span::styled("┊ ", DIM)],
                        &[Span::styled("┊ ", DIM)],
                        &[Span::styled(line.to_owned(), style)],
                        width,
                    ));
                }
            } else {
                let first = r.text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
                let head = format!("▸ thinking: {first}");
                lines.push(Line::styled(truncate(&head, usize::from(width)), style));
            }
        }
        PartKind::Text(t) if !t.synthetic && !t.ignored && !t.text.trim().is_empty() => {
            lines.extend(markdown::render(&t.text, width));
        }
        PartKind::Tool(tool) if !tool.ignored => lines.extend(tool_card(tool, width)),
        PartKind::Retry(retry) => lines.extend(wrap(
            &[Span::styled("↻ ", WARN)],
            &[Span::raw("  ")],
            &[Span::styled(format!("attempt {} failed: {}", retry.attempt, retry.error.message()), WARN)],
            width,
        )),
        PartKind::Patch(patch) if !patch.files.is_empty() => {
            let text = format!("files changed: {}", patch.files.join(", "));
            lines.extend(wrap(
                &[Span::styled("± ", DIM)],
                &[Span::raw("  ")],
                &[Span::styled(text, DIM)],
                width,
            ));
        }
        PartKind::Subtask(task) => lines.push(Line::styled(
            truncate(&format!("⤷ subtask ({}): {}", task.agent, task.description), usize::from(width)),
            DIM,
        )),
        _ => {}
    }
}

/// A tool call as a compact card: state icon, tool, what it works on, and a short result.
fn tool_card(tool: &ToolPart, width: u16) -> Vec<Line<'static>> {
    let w = usize::from(width);
    let input = tool.state.input();
    let detail = summarize_input(&tool.tool, input);
    let (icon, style, state) = match &tool.state {
        ToolState::Pending(_) => ("○", DIM, Some("pending")),
        ToolState::Running(_) => ("◐", WARN, Some("running")),
        ToolState::Completed(_) => ("✓", OK, None),
        ToolState::Error(_) if tool.state.is_interrupted() => ("■", WARN, Some("interrupted")),
        ToolState::Error(_) => ("✗", ERROR, None),
    };
    let mut head = vec![
        Span::styled(format!("{icon} "), style),
        Span::styled(tool.tool.clone(), style.add_modifier(Modifier::BOLD)),
        Span::raw(" "),
    ];
    let state_text = state.map(|s| format!("  {s}")).unwrap_or_default();
    let room = w.saturating_sub(tool.tool.width() + 3 + state_text.width());
    if !detail.is_empty() {
        head.push(Span::raw(truncate(&detail, room.max(1))));
    }
    if !state_text.is_empty() {
        head.push(Span::styled(state_text, DIM));
    }
    let mut lines = vec![Line::from(head)];
    let gutter = [Span::styled("  │ ", DIM)];
    let preview = |text: &str, rows: usize, style: Style, lines: &mut Vec<Line<'static>>| {
        let all: Vec<&str> = text.lines().collect();
        for line in all.iter().take(rows) {
            lines.push(Line::from(vec![
                gutter[0].clone(),
                Span::styled(truncate(line, w.saturating_sub(4).max(1)), style),
            ]));
        }
        if all.len() > rows {
            lines.push(Line::from(vec![
                gutter[0].clone(),
                Span::styled(format!("… {} more lines", all.len() - rows), DIM),
            ]));
        }
    };
    match &tool.state {
        ToolState::Running(running) => {
            if let Some(output) =
                running.metadata.as_ref().and_then(|m| m.get("output")).and_then(Value::as_str)
            {
                let tail: Vec<&str> = output.lines().rev().take(PREVIEW_ROWS).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                preview(&tail.join("\n"), PREVIEW_ROWS, DIM, &mut lines);
            }
        }
        ToolState::Completed(done) => match done.metadata.get("diff").and_then(Value::as_str) {
            Some(diff) if !diff.is_empty() => diff_lines(diff, w, &mut lines),
            _ if done.time.compacted.is_some() => {
                preview("[output cleared for the model]", PREVIEW_ROWS, DIM, &mut lines)
            }
            // A read's output wraps the file in tags: show the file's lines.
            _ if tool.tool == "read" => {
                let body: Vec<&str> = done.output.lines().filter(|l| !l.starts_with('<')).collect();
                preview(&body.join("\n"), PREVIEW_ROWS, DIM, &mut lines);
            }
            _ => preview(&done.output, PREVIEW_ROWS, DIM, &mut lines),
        },
        ToolState::Error(error) if !tool.state.is_interrupted() => {
            preview(&error.error, PREVIEW_ROWS, ERROR, &mut lines)
        }
        _ => {}
    }
    lines
}

fn diff_lines(diff: &str, width: usize, lines: &mut Vec<Line<'static>>) {
    let body: Vec<&str> = diff
        .lines()
        .filter(|l| {
            !l.starts_with("---")
                && !l.starts_with("+++")
                && !l.starts_with("Index:")
                && !l.starts_with("====")
        })
        .collect();
    for line in body.iter().take(DIFF_ROWS) {
        let style = match line.chars().next() {
            Some('+') => OK,
            Some('-') => ERROR,
            Some('@') => Style::new().fg(Color::Cyan),
            _ => DIM,
        };
        lines.push(Line::from(vec![
            Span::styled("  │ ", DIM),
            Span::styled(truncate(line, width.saturating_sub(4).max(1)), style),
        ]));
    }
    if body.len() > DIFF_ROWS {
        lines.push(Line::from(vec![
            Span::styled("  │ ", DIM),
            Span::styled(format!("… {} more lines", body.len() - DIFF_ROWS), DIM),
        ]));
    }
}

/// A short description of a call's input: the command, path or pattern.
fn summarize_input(tool: &str, input: &Value) -> String {
    codeloop_tools::call_summary(tool, input)
}
