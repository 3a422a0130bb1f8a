//! The status line and the sessions list.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use unicode_width::UnicodeWidthStr;

use super::USER;
use crate::app::{App, RunState};
use crate::wrap::truncate;

/// The status line: state, running jobs, model, agent, context used, cost, prompt-cache hit rate, session id. When it does not fit, labels
/// get shorter, then the least needed parts go (the session id goes last).
pub(super) fn status_line(app: &App, width: u16) -> Line<'static> {
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
    let hit = app
        .convo
        .session
        .as_ref()
        .and_then(|s| cache_hit_percent(&s.tokens))
        .map_or("–".to_owned(), |p| format!("{p}%"));
    let id = app.session_id().map_or("no session".to_owned(), ToString::to_string);
    // (text, style, priority: higher stays longer)
    let state_priority = if app.busy() { 9 } else { 5 };
    let mut parts: Vec<(String, Style, u8)> = vec![(state, state_style, state_priority)];
    if app.queued > 0 {
        parts.push((format!("{} queued", app.queued), bar.fg(Color::Yellow), 3));
    }
    let jobs = app.running_jobs();
    if jobs > 0 {
        let noun = if jobs == 1 { "job" } else { "jobs" };
        parts.push((format!("⚙ {jobs} {noun}"), bar.fg(Color::LightCyan), 3));
    }
    if app.quit_armed {
        parts.push(("Ctrl+C again to quit".to_owned(), bar.fg(Color::LightRed), 10));
    }
    let long = [
        (model.clone(), bar.add_modifier(Modifier::BOLD), 7),
        (format!("agent {agent}"), bar, 4),
        (format!("{percent}% context"), bar, 6),
        (cost.clone(), bar, 2),
        (format!("cache hit {hit}"), bar, 1),
        (id.clone(), bar.fg(Color::Gray), 8),
    ];
    let short = [
        (model, bar.add_modifier(Modifier::BOLD), 7),
        (agent, bar, 4),
        (format!("ctx {percent}%"), bar, 6),
        (cost, bar, 2),
        (format!("hit {hit}"), bar, 1),
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

/// The session's prompt-cache hit rate in percent: cache reads over every prompt token (uncached, read
/// and written); `None` before anything was sent.
fn cache_hit_percent(tokens: &codeloop_types::Tokens) -> Option<u64> {
    let input = tokens.input + tokens.cache.read + tokens.cache.write;
    (input > 0).then(|| (tokens.cache.read * 100 + input / 2) / input)
}

pub(super) fn draw_sessions(frame: &mut Frame, app: &App, area: Rect) {
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
            let when = format!("{} ({})", time_of(s.time.updated), ago(now, s.time.updated));
            let text = format!("{current} {}  {when:<29}  ${:.4}  {}", s.id, s.cost, s.title);
            let style =
                if i == list.selected { Style::new().fg(Color::Black).bg(Color::Cyan) } else { Style::new() };
            Line::styled(truncate(&text, w), style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), r);
}

/// "2026-12-01 03:57" (UTC).
fn time_of(ms: i64) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{} {:02}:{:02}", codeloop_types::date_of(ms), secs / 3600, secs % 3600 / 60)
}

/// "just now", "5 min ago", "3 h ago", "4 d ago".
fn ago(now: i64, then: i64) -> String {
    let secs = (now - then).max(0) / 1000;
    match secs {
        0..60 => "just now".to_owned(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86_400),
    }
}
