//! Drawing the UI: the conversation (only the visible rows are handed to the terminal; each item's
//! lines are cached until it changes), an inline permission or question prompt, the input, and the
//! status line.

mod cards;
mod status;

use std::collections::HashMap;

use codeloop_types::{Message, MessageId, PermissionRequest, QuestionRequest};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use unicode_width::UnicodeWidthStr;

use cards::message_lines;
use status::{draw_sessions, status_line};

use crate::app::{App, PermissionMode, Scroll};
use crate::convo::{Item, NoticeKind};
use crate::wrap::{truncate, wrap};

/// Most rows the input grows to.
const INPUT_ROWS: usize = 8;

const DIM: Style = Style::new().fg(Color::DarkGray);
const USER: Style = Style::new().fg(Color::Cyan);
const ERROR: Style = Style::new().fg(Color::Red);
const WARN: Style = Style::new().fg(Color::Yellow);
const OK: Style = Style::new().fg(Color::Green);

/// What the view keeps between frames: where the conversation is scrolled and what it already
/// rendered.
#[derive(Default)]
pub struct View {
    viewport: Viewport,
    rows: RowCache,
}

impl View {
    /// How many items were rendered afresh so far: what a frame costs beyond the visible rows.
    pub fn rendered(&self) -> u64 {
        self.rows.rendered
    }
}

/// Where the conversation is scrolled. The person's scrolling reaches it as [`Scroll`]s from the app;
/// the page and the conversation's height are the last draw's.
#[derive(Debug, Default)]
struct Viewport {
    /// Top row when scrolled back; `None` follows the end.
    top: Option<usize>,
    page: usize,
    total: usize,
}

impl Viewport {
    fn scroll(&mut self, scroll: Scroll) {
        let bottom = self.total.saturating_sub(self.page);
        let page = self.page.saturating_sub(2).max(1);
        match scroll {
            Scroll::Up(rows) => self.top = Some(self.top.unwrap_or(bottom).saturating_sub(rows)),
            Scroll::Down(rows) => {
                self.top = self.top.map(|top| top + rows).filter(|top| *top < bottom);
            }
            Scroll::PageUp => self.scroll(Scroll::Up(page)),
            Scroll::PageDown => self.scroll(Scroll::Down(page)),
            Scroll::End => self.top = None,
        }
    }

    /// The top row for a conversation of `total` rows in a page of `page`.
    fn place(&mut self, total: usize, page: usize) -> usize {
        (self.total, self.page) = (total, page);
        let bottom = total.saturating_sub(page);
        match self.top {
            Some(top) if top < bottom => top,
            _ => {
                self.top = None;
                bottom
            }
        }
    }
}

/// Each item's height for every item, and rendered lines only for the items on screen: a long
/// session keeps a number per item, not its rows.
#[derive(Default)]
struct RowCache {
    heights: HashMap<CacheKey, usize>,
    lines: HashMap<CacheKey, Vec<Line<'static>>>,
    /// Items rendered afresh (cache misses) since the view was made.
    rendered: u64,
}

/// An item's rendering depends on its content (its version is unique across every item and change),
/// the width, whether a revert hides it, and whether reasoning is shown.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct CacheKey {
    version: u64,
    width: u16,
    hidden: bool,
    reasoning: bool,
}

/// Draws the UI. The app's pending scrolls are taken here: only the view knows the page they move by.
pub fn draw(frame: &mut Frame, app: &mut App, view: &mut View) {
    for scroll in app.take_scrolls() {
        view.viewport.scroll(scroll);
    }
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
    draw_conversation(frame, app, view, convo_area);
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

fn draw_conversation(frame: &mut Frame, app: &App, view: &mut View, area: Rect) {
    let cache = &mut view.rows;
    let mut heights = HashMap::with_capacity(app.convo.items.len());
    let mut keys = Vec::with_capacity(app.convo.items.len());
    let reverted = app.convo.reverted_from();
    let page = usize::from(area.height);
    // Items rendered for their height are kept for this frame up to a few pages, so a changed item on
    // screen (a streaming answer) is rendered once per frame, while a first frame of a long session
    // does not hold every item's rows at once.
    let mut spare: HashMap<CacheKey, Vec<Line<'static>>> = HashMap::new();
    let mut spare_rows = 0;
    for item in &app.convo.items {
        let key = cache_key(app, reverted.as_ref(), item, area.width);
        let height = match cache.heights.get(&key) {
            Some(height) => *height,
            None => {
                cache.rendered += 1;
                let rendered = item_lines(app, item, area.width);
                let height = rendered.len();
                if spare_rows + height <= 4 * page {
                    spare_rows += height;
                    spare.insert(key, rendered);
                }
                height
            }
        };
        heights.insert(key, height);
        keys.push((key, height));
    }
    cache.heights = heights;
    let total: usize = keys.iter().map(|(_, height)| height).sum();
    let top = view.viewport.place(total, page);
    // Hand only the visible rows to the terminal, and keep only their lines.
    let mut lines = HashMap::new();
    let mut visible: Vec<Line<'static>> = Vec::with_capacity(page);
    let mut row = 0;
    for (item, (key, height)) in app.convo.items.iter().zip(keys) {
        if row + height > top && row < top + page {
            let rendered = match cache.lines.remove(&key).or_else(|| spare.remove(&key)) {
                Some(rendered) => rendered,
                None => item_lines(app, item, area.width),
            };
            let skip = top.saturating_sub(row);
            let take = (top + page).saturating_sub(row.max(top));
            visible.extend(rendered.iter().skip(skip).take(take).cloned());
            lines.insert(key, rendered);
        }
        row += height;
        if row >= top + page {
            break;
        }
    }
    cache.lines = lines;
    if app.convo.items.is_empty() {
        visible = welcome(app);
    }
    frame.render_widget(Paragraph::new(visible), area);
    if view.viewport.top.is_some() {
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

fn cache_key(app: &App, reverted: Option<&MessageId>, item: &Item, width: u16) -> CacheKey {
    match item {
        Item::Message(id) => CacheKey {
            version: app.convo.messages.get(id).map_or(0, |e| e.version),
            width,
            hidden: reverted.is_some_and(|from| id >= from),
            reasoning: app.show_reasoning,
        },
        Item::Notice(version, _) => CacheKey { version: *version, width, hidden: false, reasoning: false },
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

fn prompt_lines(app: &App, width: u16) -> Vec<Line<'static>> {
    if let Some(request) = app.permissions.front() {
        return permission_lines(request, app.permission_mode, app.permissions.len(), width);
    }
    if let Some(request) = app.questions.front() {
        return question_lines(request, app.answers.len(), width);
    }
    if let Some(request) = app.elicitations.front() {
        return elicitation_lines(request, app.fields.len(), width);
    }
    Vec::new()
}

/// An MCP server's request: what it asks, then the link or the form's current field.
fn elicitation_lines(
    request: &codeloop_types::ElicitationRequest,
    filled: usize,
    width: u16,
) -> Vec<Line<'static>> {
    let ask = &request.ask;
    let escape = |t: &str| codeloop_types::escape_controls(t).into_owned();
    let mut lines = wrap(
        &[Span::styled(
            format!("⚑ MCP server {} asks ", escape(&ask.server)),
            WARN.add_modifier(Modifier::BOLD),
        )],
        &[Span::raw("  ")],
        &[Span::styled(escape(&ask.message), Style::new().add_modifier(Modifier::BOLD))],
        width,
    );
    lines.truncate(4);
    if let Some(url) = &ask.url {
        lines.push(Line::raw(truncate(&format!("  open: {}", escape(url)), usize::from(width))));
        lines.push(Line::styled(
            "d: done there · n: decline · Esc: cancel (codeloop opens nothing itself)",
            DIM,
        ));
        return lines;
    }
    let fields = crate::app::form_fields(ask.schema.as_ref());
    if let Some((name, kind)) = fields.get(filled).filter(|(name, _)| !name.is_empty()) {
        let spec = ask.schema.as_ref().and_then(|s| s.get("properties")).and_then(|p| p.get(name));
        let title = spec.and_then(|s| s.get("title").or(s.get("description"))).and_then(|t| t.as_str());
        let default =
            spec.and_then(|s| s.get("default")).map(|d| format!(" [default {d}]")).unwrap_or_default();
        let choices = spec.and_then(|s| s.get("enum")).map(|e| format!(" one of {e}")).unwrap_or_default();
        let field = format!(
            "  {}/{}: {} ({kind}{choices}){default}",
            filled + 1,
            fields.len(),
            escape(title.unwrap_or(name))
        );
        lines.push(Line::raw(truncate(&field, usize::from(width))));
    }
    lines.push(Line::styled("type the value · Enter next (empty: its default) · Esc declines", DIM));
    lines
}

fn permission_lines(
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

fn question_lines(request: &QuestionRequest, answered: usize, width: u16) -> Vec<Line<'static>> {
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

/// While a command's name is typed (`/re`), the commands it may become: completion as you type.
fn command_hint(app: &App) -> Option<String> {
    let typed = app.editor.text().strip_prefix('/')?;
    if typed.contains(char::is_whitespace) || !app.permissions.is_empty() || !app.questions.is_empty() {
        return None;
    }
    let matches = app.matching_commands(typed);
    if matches.is_empty() {
        return Some(" no such command · /help lists them ".to_owned());
    }
    let shown: Vec<String> = matches.iter().take(8).map(|n| format!("/{n}")).collect();
    let more = if matches.len() > 8 { " …" } else { "" };
    Some(format!(" {}{more} · Tab completes ", shown.join("  ")))
}

fn draw_input(frame: &mut Frame, app: &App, area: Rect, lines: Vec<Line<'static>>, cursor: (u16, u16)) {
    let title = if !app.permissions.is_empty() && app.permission_mode == PermissionMode::Choosing {
        " answer the permission prompt above "
    } else if !app.permissions.is_empty() {
        " message for the model · Enter rejects with it · Esc goes back "
    } else if !app.questions.is_empty() {
        " your answer · Enter answers · Esc declines "
    } else if app.busy() {
        " Enter queues · Esc interrupts "
    } else {
        " Enter sends · Alt+Enter new line · /help "
    };
    let title = command_hint(app).unwrap_or_else(|| title.to_owned());
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

#[cfg(test)]
pub(crate) mod tests_support {
    /// The rows shown above the input, as text.
    pub fn prompt_text(app: &crate::app::App, width: u16) -> String {
        super::prompt_lines(app, width)
            .iter()
            .map(|line| line.spans.iter().map(|s| s.content.as_ref()).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    }
}
