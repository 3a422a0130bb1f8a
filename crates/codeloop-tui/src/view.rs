//! Drawing the UI: the conversation (only the visible rows are handed to the terminal; each item's
//! lines are cached until it changes), an inline permission or question prompt, the input, and the
//! status line.

use std::collections::HashMap;

use codeloop_types::{Message, PartKind, PermissionRequest, QuestionRequest, ToolPart, ToolState};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use serde_json::Value;
use unicode_width::UnicodeWidthStr;

use crate::app::{App, PermissionMode, RunState};
use crate::convo::{Entry, Item, NoticeKind};
use crate::markdown;
use crate::wrap::{truncate, wrap};

/// Rows of a tool's output shown under its card.
const PREVIEW_ROWS: usize = 4;
/// Rows of a diff shown under an edit's card.
const DIFF_ROWS: usize = 12;
/// Most rows the input grows to.
const INPUT_ROWS: usize = 8;

const DIM: Style = Style::new().fg(Color::DarkGray);
const USER: Style = Style::new().fg(Color::Cyan);
const ERROR: Style = Style::new().fg(Color::Red);
const WARN: Style = Style::new().fg(Color::Yellow);
const OK: Style = Style::new().fg(Color::Green);

/// Rendered lines of conversation items, reused while an item is unchanged.
#[derive(Default)]
pub struct Cache {
    items: HashMap<CacheKey, Vec<Line<'static>>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct CacheKey {
    /// Message id, or the notice's index.
    item: String,
    version: u64,
    width: u16,
    hidden: bool,
    reasoning: bool,
}

pub fn draw(frame: &mut Frame, app: &mut App, cache: &mut Cache) {
    let area = frame.area();
    let width = area.width.max(1);
    let prompt = prompt_lines(app, width);
    let (input_lines, cursor) = input_lines(app, width);
    let input_rows = input_lines.len().clamp(1, INPUT_ROWS) as u16;
    let prompt_rows = if prompt.is_empty() { 0 } else { prompt.len() as u16 + 1 };
    let [convo_area, prompt_area, input_area, status_area] = Layout::vertical([
        Constraint::Min(1),
        Constraint::Length(prompt_rows),
        Constraint::Length(input_rows + 1),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_conversation(frame, app, cache, convo_area);
    if !prompt.is_empty() {
        let block = Block::default().borders(Borders::TOP).border_style(WARN);
        frame.render_widget(Paragraph::new(prompt).block(block), prompt_area);
    }
    draw_input(frame, app, input_area, input_lines, cursor);
    frame.render_widget(Paragraph::new(status_line(app, width)), status_area);
    if app.sessions.is_some() {
        draw_sessions(frame, app, convo_area);
    }
}

fn draw_conversation(frame: &mut Frame, app: &mut App, cache: &mut Cache, area: Rect) {
    let mut fresh: HashMap<CacheKey, Vec<Line<'static>>> = HashMap::new();
    let mut heights = Vec::with_capacity(app.convo.items.len());
    for item in &app.convo.items {
        let key = cache_key(app, item, area.width);
        let lines = match cache.items.remove(&key) {
            Some(lines) => lines,
            None => item_lines(app, item, area.width),
        };
        heights.push(lines.len());
        fresh.insert(key, lines);
    }
    let total: usize = heights.iter().sum();
    let page = usize::from(area.height);
    app.page = page;
    app.total_rows = total;
    let bottom_top = total.saturating_sub(page);
    let top = match app.scroll {
        Some(top) if top < bottom_top => top,
        _ => {
            app.scroll = None;
            bottom_top
        }
    };
    // Hand only the visible rows to the terminal.
    let mut visible: Vec<Line<'static>> = Vec::with_capacity(page);
    let mut row = 0;
    for (index, item) in app.convo.items.iter().enumerate() {
        let height = heights[index];
        if row + height > top && row < top + page {
            let key = cache_key(app, item, area.width);
            if let Some(lines) = fresh.get(&key) {
                let skip = top.saturating_sub(row);
                let take = (top + page).saturating_sub(row.max(top));
                visible.extend(lines.iter().skip(skip).take(take).cloned());
            }
        }
        row += height;
        if row >= top + page {
            break;
        }
    }
    if app.convo.items.is_empty() {
        visible = welcome(app);
    }
    cache.items = fresh;
    frame.render_widget(Paragraph::new(visible), area);
    if app.scroll.is_some() {
        let hint = format!(" ↓ {} more rows · PgDn ", total.saturating_sub(top + page));
        let w = hint.width() as u16;
        if area.width > w && area.height > 0 {
            let r = Rect { x: area.x + area.width - w, y: area.y + area.height - 1, width: w, height: 1 };
            frame.render_widget(
                Paragraph::new(Span::styled(hint, Style::new().fg(Color::Black).bg(Color::Yellow))),
                r,
            );
        }
    }
}

fn welcome(app: &App) -> Vec<Line<'static>> {
    vec![
        Line::styled("codeloop", Style::new().add_modifier(Modifier::BOLD)),
        Line::styled(format!("in {}", app.directory.display()), DIM),
        Line::default(),
        Line::styled("Type a message and press Enter. /help lists commands and keys.", DIM),
    ]
}

fn cache_key(app: &App, item: &Item, width: u16) -> CacheKey {
    match item {
        Item::Message(id) => CacheKey {
            item: id.to_string(),
            version: app.convo.messages.get(id).map_or(0, |e| e.version),
            width,
            hidden: app.convo.is_hidden(id),
            reasoning: app.show_reasoning,
        },
        Item::Notice(version, _) => {
            CacheKey { item: String::new(), version: *version, width, hidden: false, reasoning: false }
        }
    }
}

fn item_lines(app: &App, item: &Item, width: u16) -> Vec<Line<'static>> {
    match item {
        Item::Notice(_, notice) => {
            let (mark, style) = match notice.kind {
                NoticeKind::Info => ("· ", DIM),
                NoticeKind::Warning => ("! ", WARN),
                NoticeKind::Error => ("✗ ", ERROR),
            };
            let mut lines = Vec::new();
            for (i, text) in notice.text.lines().enumerate() {
                let body = text.trim_start();
                let indent = " ".repeat(2 + text.len() - body.len());
                let first = if i == 0 { Span::styled(mark, style) } else { Span::raw(indent.clone()) };
                let rest = Span::raw(indent + "  ");
                lines.extend(wrap(&[first], &[rest], &[Span::styled(body.to_owned(), style)], width));
            }
            lines.push(Line::default());
            lines
        }
        Item::Message(id) => {
            let Some(entry) = app.convo.messages.get(id) else { return Vec::new() };
            if app.convo.is_hidden(id) {
                return match &entry.info {
                    Some(Message::User(_)) => {
                        vec![Line::styled("· a reverted turn (/redo brings it back)", DIM), Line::default()]
                    }
                    _ => Vec::new(),
                };
            }
            message_lines(entry, width, app.show_reasoning)
        }
    }
}

/// A message's rows: a user's text, or an assistant's answer, reasoning, tool cards and notes.
pub fn message_lines(entry: &Entry, width: u16, show_reasoning: bool) -> Vec<Line<'static>> {
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
pub fn tool_card(tool: &ToolPart, width: u16) -> Vec<Line<'static>> {
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
pub fn summarize_input(tool: &str, input: &Value) -> String {
    let field = |name: &str| input.get(name).and_then(Value::as_str).map(str::to_owned);
    let text = match tool {
        "bash" => field("command"),
        "read" | "write" | "edit" => field("filePath"),
        "grep" | "glob" => field("pattern"),
        "skill" => field("name"),
        "webfetch" => field("url"),
        "task" => field("description"),
        "todowrite" => Some("todo list".into()),
        _ => None,
    };
    let text = match text {
        Some(text) => text,
        None if input.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => input.to_string(),
    };
    text.lines().next().unwrap_or("").to_owned()
}

fn prompt_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    if let Some(request) = app.permissions.front() {
        return permission_lines(request, app.permission_mode, app.permissions.len(), width);
    }
    if let Some(request) = app.questions.front() {
        return question_lines(request, app.answers.len(), width);
    }
    Vec::new()
}

pub fn permission_lines(
    request: &PermissionRequest,
    mode: PermissionMode,
    waiting: usize,
    width: u16,
) -> Vec<Line<'static>> {
    let what = request.patterns.join(", ");
    let mut lines = wrap(
        &[Span::styled("⚠ permission ", WARN.add_modifier(Modifier::BOLD))],
        &[Span::raw("  ")],
        &[
            Span::styled(request.permission.clone(), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(" "),
            Span::raw(what),
        ],
        width,
    );
    lines.truncate(4);
    let key = |k: &'static str| Span::styled(k, Style::new().fg(Color::Black).bg(Color::Yellow));
    let line = match mode {
        PermissionMode::Choosing => {
            let always = if request.always.is_empty() {
                String::new()
            } else {
                format!(" ({})", request.always.join(", "))
            };
            Line::from(vec![
                key(" y "),
                Span::raw(" once  "),
                key(" a "),
                Span::raw(format!(" always{}  ", truncate(&always, 30))),
                key(" n "),
                Span::raw(" reject  "),
                key(" m "),
                Span::raw(" reject with a message"),
            ])
        }
        PermissionMode::Message => Line::from(vec![Span::styled(
            "message for the model: type it below · Enter sends the rejection · Esc goes back",
            WARN,
        )]),
    };
    lines.push(line);
    if waiting > 1 {
        lines.push(Line::styled(format!("({} more waiting)", waiting - 1), DIM));
    }
    lines
}

pub fn question_lines(request: &QuestionRequest, answered: usize, width: u16) -> Vec<Line<'static>> {
    let Some(question) = request.questions.get(answered) else { return Vec::new() };
    let mut lines = wrap(
        &[Span::styled("? ", WARN.add_modifier(Modifier::BOLD))],
        &[Span::raw("  ")],
        &[Span::styled(question.question.clone(), Style::new().add_modifier(Modifier::BOLD))],
        width,
    );
    for (n, option) in question.options.iter().enumerate() {
        let text = match &option.description {
            Some(description) => format!("{}. {} — {description}", n + 1, option.label),
            None => format!("{}. {}", n + 1, option.label),
        };
        lines.push(Line::raw(truncate(&format!("  {text}"), usize::from(width))));
    }
    let several = if question.multiple { "numbers (1,3)" } else { "a number" };
    lines
        .push(Line::styled(format!("type {several} or your own answer · Enter answers · Esc declines"), DIM));
    lines
}

/// The input's rows and where the cursor is in them (row, column).
fn input_lines(app: &App, width: u16) -> (Vec<Line<'static>>, (u16, u16)) {
    let text = app.editor.text();
    let cursor = app.editor.cursor();
    let prefix = "› ";
    let inner = usize::from(width).saturating_sub(2).max(1);
    let mut lines = Vec::new();
    let mut position = (0u16, 2u16);
    let mut offset = 0;
    for (n, line) in text.split('\n').enumerate() {
        // Character wrapping keeps the cursor arithmetic simple and exact.
        let chars: Vec<char> = line.chars().collect();
        let mut rows: Vec<String> = Vec::new();
        let mut row = String::new();
        let mut row_width = 0;
        let mut cursor_at: Option<(usize, usize)> = None;
        let mut byte = offset;
        for c in chars.iter().copied() {
            let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if row_width + cw > inner {
                rows.push(std::mem::take(&mut row));
                row_width = 0;
            }
            if byte == cursor {
                cursor_at = Some((rows.len(), row_width));
            }
            row.push(c);
            row_width += cw;
            byte += c.len_utf8();
        }
        if byte == cursor && cursor_at.is_none() {
            if row_width >= inner {
                rows.push(std::mem::take(&mut row));
                row_width = 0;
            }
            cursor_at = Some((rows.len(), row_width));
        }
        rows.push(row);
        if let Some((r, c)) = cursor_at {
            position = ((lines.len() + r) as u16, (c + 2) as u16);
        }
        for (i, row) in rows.into_iter().enumerate() {
            let lead = if n == 0 && i == 0 { prefix } else { "  " };
            lines.push(Line::from(vec![Span::styled(lead, USER), Span::raw(row)]));
        }
        offset = byte + 1;
    }
    (lines, position)
}

fn draw_input(frame: &mut Frame, app: &App, area: Rect, lines: Vec<Line<'static>>, cursor: (u16, u16)) {
    let title = if !app.permissions.is_empty() && app.permission_mode == PermissionMode::Choosing {
        " answer the permission prompt above "
    } else if app.busy() {
        " Enter queues · Esc interrupts "
    } else {
        " Enter sends · Alt+Enter new line · /help "
    };
    let block = Block::default().borders(Borders::TOP).border_style(DIM).title(Span::styled(title, DIM));
    let rows = usize::from(area.height.saturating_sub(1)).max(1);
    // Keep the cursor's row in view when the draft is taller than the box.
    let skip = usize::from(cursor.0).saturating_sub(rows - 1);
    let visible: Vec<Line<'static>> = lines.into_iter().skip(skip).collect();
    frame.render_widget(Paragraph::new(visible).block(block), area);
    let typing = app.permissions.is_empty() || app.permission_mode == PermissionMode::Message;
    if typing && app.sessions.is_none() {
        let y = area.y + 1 + cursor.0.saturating_sub(skip as u16);
        let x = area.x + cursor.1.min(area.width.saturating_sub(1));
        if y < area.y + area.height {
            frame.set_cursor_position((x, y));
        }
    }
}

/// The status line: state, model, agent, context used, cost, session id. When it does not fit, labels
/// get shorter, then the least needed parts go (the session id goes last).
pub fn status_line(app: &App, width: u16) -> Line<'static> {
    let bar = Style::new().fg(Color::White).bg(Color::DarkGray);
    let w = usize::from(width);
    let (state, state_style) = match &app.state {
        RunState::Idle => ("idle".to_owned(), bar),
        RunState::Busy => ("● busy".to_owned(), bar.fg(Color::Yellow)),
        RunState::Retry { attempt, max_attempts, next, .. } => {
            let wait = (*next - codeloop_types::now_ms()).max(0) as f64 / 1000.0;
            (format!("retrying in {wait:.0} s (attempt {attempt}/{max_attempts})"), bar.fg(Color::LightRed))
        }
    };
    let model = app.current_model().map_or("no model".to_owned(), ToString::to_string);
    let agent = app.current_agent().unwrap_or("build").to_owned();
    let percent = app.context_percent().map_or("–".to_owned(), |p| p.to_string());
    let cost = format!("${:.4}", app.convo.session.as_ref().map_or(0.0, |s| s.cost));
    let id = app.session_id().map_or("no session".to_owned(), ToString::to_string);
    // (text, style, priority: higher stays longer)
    let state_priority = if app.busy() { 9 } else { 5 };
    let mut parts: Vec<(String, Style, u8)> = vec![(state, state_style, state_priority)];
    if app.queued > 0 {
        parts.push((format!("{} queued", app.queued), bar.fg(Color::Yellow), 3));
    }
    if app.quit_armed {
        parts.push(("Ctrl+C again to quit".to_owned(), bar.fg(Color::LightRed), 10));
    }
    let long = [
        (model.clone(), bar.add_modifier(Modifier::BOLD), 7),
        (format!("agent {agent}"), bar, 4),
        (format!("{percent}% context"), bar, 6),
        (cost.clone(), bar, 2),
        (id.clone(), bar.fg(Color::Gray), 8),
    ];
    let short = [
        (model, bar.add_modifier(Modifier::BOLD), 7),
        (agent, bar, 4),
        (format!("ctx {percent}%"), bar, 6),
        (cost, bar, 2),
        (id, bar.fg(Color::Gray), 8),
    ];
    let sep = " · ";
    let fits = |parts: &[(String, Style, u8)]| {
        1 + parts.iter().map(|(t, _, _)| t.width()).sum::<usize>()
            + sep.width() * parts.len().saturating_sub(1)
            <= w
    };
    let mut chosen: Vec<(String, Style, u8)> = parts.iter().cloned().chain(long).collect();
    if !fits(&chosen) {
        chosen = parts.into_iter().chain(short).collect();
    }
    while !fits(&chosen) && chosen.len() > 1 {
        let lowest = chosen.iter().enumerate().min_by_key(|(_, p)| p.2).map_or(0, |(i, _)| i);
        chosen.remove(lowest);
    }
    let mut spans = vec![Span::styled(" ", bar)];
    let mut used = 1;
    for (i, (text, style, _)) in chosen.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::styled(sep, bar));
            used += sep.width();
        }
        let text = truncate(&text, w.saturating_sub(used));
        used += text.width();
        spans.push(Span::styled(text, style));
    }
    spans.push(Span::styled(" ".repeat(w.saturating_sub(used)), bar));
    Line::from(spans)
}

fn draw_sessions(frame: &mut Frame, app: &App, area: Rect) {
    let Some(list) = &app.sessions else { return };
    let height = (list.sessions.len() as u16 + 2).min(area.height);
    let r = Rect { x: area.x, y: area.y + area.height - height, width: area.width, height };
    frame.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(USER)
        .title(" sessions · ↑↓ choose · Enter opens · Esc closes ");
    let rows = usize::from(height.saturating_sub(2));
    let first = list.selected.saturating_sub(rows.saturating_sub(1));
    let now = codeloop_types::now_ms();
    let w = usize::from(area.width.saturating_sub(2));
    let lines: Vec<Line<'static>> = list
        .sessions
        .iter()
        .enumerate()
        .skip(first)
        .take(rows)
        .map(|(i, s)| {
            let current = if Some(&s.id) == app.session_id() { "*" } else { " " };
            let text =
                format!("{current} {}  {:>9}  ${:.4}  {}", s.id, ago(now, s.time.updated), s.cost, s.title);
            let style =
                if i == list.selected { Style::new().fg(Color::Black).bg(Color::Cyan) } else { Style::new() };
            Line::styled(truncate(&text, w), style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), r);
}

/// "just now", "5 min ago", "3 h ago", "4 d ago".
pub fn ago(now: i64, then: i64) -> String {
    let secs = (now - then).max(0) / 1000;
    match secs {
        0..60 => "just now".to_owned(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86_400),
    }
}
