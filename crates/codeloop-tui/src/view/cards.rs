//! A conversation item's rows: a person's message, an assistant's answer (Markdown, folded reasoning,
//! notes) and tool calls as compact cards with their state and a short result.

use codeloop_types::{Message, PartKind};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthStr;

use super::{DIM, ERROR, OK, USER, WARN};
use crate::card::{CardState, PreviewKind, ToolCard};
use crate::convo::{Entry, Piece};
use crate::markdown;
use crate::wrap::{truncate, wrap};

/// A message's rows: a user's text, or an assistant's answer, reasoning, tool cards and notes.
pub(super) fn message_lines(entry: &Entry, width: u16, show_reasoning: bool) -> Vec<Line<'static>> {
    let Some(info) = &entry.info else { return Vec::new() };
    let mut lines = Vec::new();
    match info {
        Message::User(_) => {
            for part in entry.parts.values().filter_map(Piece::as_part) {
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
                    .filter_map(Piece::as_part)
                    .filter_map(|p| p.as_text())
                    .map(|t| t.text.lines().count())
                    .sum::<usize>();
                lines
                    .push(Line::styled(format!("▸ summary of the earlier conversation ({rows} lines)"), DIM));
                let carried = entry.parts.values().filter_map(Piece::as_part).filter_map(|p| p.as_text());
                for label in carried.filter_map(|t| t.carried_label()) {
                    lines.push(Line::styled(truncate(&format!("  ↳ {label}"), usize::from(width)), DIM));
                }
            } else {
                for piece in entry.parts.values() {
                    match piece {
                        Piece::Part(part) => part_lines(&part.kind, width, show_reasoning, &mut lines),
                        Piece::Card(card) => lines.extend(card_lines(card, width)),
                    }
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
        PartKind::Tool(tool) if !tool.ignored => lines.extend(card_lines(&ToolCard::new(tool), width)),
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
fn card_lines(card: &ToolCard, width: u16) -> Vec<Line<'static>> {
    let w = usize::from(width);
    let (icon, style, state) = match card.state {
        CardState::Pending => ("○", DIM, Some("pending")),
        CardState::Running => ("◐", WARN, Some("running")),
        CardState::Completed => ("✓", OK, None),
        CardState::Interrupted => ("■", WARN, Some("interrupted")),
        CardState::OutcomeUnknown => ("■", WARN, Some("interrupted · may have acted")),
        CardState::Failed => ("✗", ERROR, None),
    };
    let mut head = vec![
        Span::styled(format!("{icon} "), style),
        Span::styled(card.tool.clone(), style.add_modifier(Modifier::BOLD)),
        Span::raw(" "),
    ];
    let state_text = state.map(|s| format!("  {s}")).unwrap_or_default();
    let room = w.saturating_sub(card.tool.width() + 3 + state_text.width());
    if !card.detail.is_empty() {
        head.push(Span::raw(truncate(&card.detail, room.max(1))));
    }
    if !state_text.is_empty() {
        head.push(Span::styled(state_text, DIM));
    }
    let mut lines = vec![Line::from(head)];
    let gutter = Span::styled("  │ ", DIM);
    for row in &card.rows {
        let style = match card.kind {
            PreviewKind::Output => DIM,
            PreviewKind::Error => ERROR,
            PreviewKind::Diff => match row.chars().next() {
                Some('+') => OK,
                Some('-') => ERROR,
                Some('@') => Style::new().fg(Color::Cyan),
                _ => DIM,
            },
        };
        lines.push(Line::from(vec![
            gutter.clone(),
            Span::styled(truncate(row, w.saturating_sub(4).max(1)), style),
        ]));
    }
    if card.more > 0 {
        lines
            .push(Line::from(vec![gutter.clone(), Span::styled(format!("… {} more lines", card.more), DIM)]));
    }
    for row in &card.diagnostics {
        let style = if row.contains(" warning ") { Style::new().fg(Color::Yellow) } else { ERROR };
        lines.push(Line::from(vec![
            gutter.clone(),
            Span::styled(truncate(row, w.saturating_sub(4).max(1)), style),
        ]));
    }
    lines
}
