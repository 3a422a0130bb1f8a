//! Markdown (the assistant's answers) to wrapped terminal lines: headings, emphasis, inline code, code
//! blocks with a gutter, nested lists, quotes, links, rules and simple tables. Streaming text is
//! rendered as it stands; an unclosed code fence simply reads as a code block until it closes.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use crate::wrap::{wrap, wrap_chars};

pub fn render(text: &str, width: u16) -> Vec<Line<'static>> {
    let mut r = Renderer { width, ..Renderer::default() };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        r.event(event);
    }
    r.flush();
    while r.out.last().is_some_and(|l| l.width() == 0) {
        r.out.pop();
    }
    r.out
}

#[derive(Default)]
struct Renderer {
    width: u16,
    out: Vec<Line<'static>>,
    /// The paragraph (or heading, list item text…) being collected.
    spans: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// One entry per open list: the next number, or `None` for bullets.
    lists: Vec<Option<u64>>,
    /// A list marker waiting for the item's first line.
    marker: Option<String>,
    quote: usize,
    code: Option<String>,
    link: Option<String>,
    table_row: Vec<String>,
    table_cell: String,
    in_table: bool,
}

const CODE: Style = Style::new().fg(Color::Yellow);
const GUTTER: Style = Style::new().fg(Color::DarkGray);

impl Renderer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, f: impl FnOnce(Style) -> Style) {
        let style = f(self.style());
        self.styles.push(style);
    }

    fn indent(&self) -> String {
        let depth = self.lists.len();
        "  ".repeat(depth.saturating_sub(1)) + if depth > 0 { "  " } else { "" }
    }

    fn quote_prefix(&self) -> Vec<Span<'static>> {
        (0..self.quote).map(|_| Span::styled("▌ ", GUTTER)).collect()
    }

    /// Ends the current block of text: wrapped with the list marker or indentation in front.
    fn flush(&mut self) {
        if self.spans.is_empty() && self.marker.is_none() {
            return;
        }
        let spans = std::mem::take(&mut self.spans);
        let mut first = self.quote_prefix();
        let mut rest = self.quote_prefix();
        let indent = self.indent();
        match self.marker.take() {
            Some(marker) => {
                let base = indent.len().saturating_sub(2);
                first.push(Span::raw(" ".repeat(base)));
                first.push(Span::styled(marker.clone(), Style::new().fg(Color::Cyan)));
                rest.push(Span::raw(" ".repeat(base + marker.chars().count())));
            }
            None => {
                first.push(Span::raw(indent.clone()));
                rest.push(Span::raw(indent));
            }
        }
        self.out.extend(wrap(&first, &rest, &spans, self.width));
    }

    fn blank(&mut self) {
        if self.out.last().is_some_and(|l| l.width() > 0) {
            self.out.push(Line::default());
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => self.text(&text),
            Event::Code(code) => {
                if self.in_table {
                    self.table_cell.push_str(&code);
                } else {
                    self.spans.push(Span::styled(code.into_string(), CODE));
                }
            }
            Event::SoftBreak => self.spans.push(Span::raw(" ")),
            Event::HardBreak => self.flush(),
            Event::Rule => {
                self.flush();
                self.blank();
                let width = usize::from(self.width).min(40);
                self.out.push(Line::styled("─".repeat(width), GUTTER));
                self.out.push(Line::default());
            }
            Event::TaskListMarker(done) => {
                self.spans.push(Span::raw(if done { "[x] " } else { "[ ] " }));
            }
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::FootnoteReference(_) | Event::InlineMath(_) | Event::DisplayMath(_) => {}
        }
    }

    fn text(&mut self, text: &str) {
        if let Some(code) = &mut self.code {
            code.push_str(text);
        } else if self.in_table {
            self.table_cell.push_str(text);
        } else {
            self.spans.push(Span::styled(text.to_owned(), self.style()));
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph if self.marker.is_none() => self.flush(),
            Tag::Heading { level, .. } => {
                self.flush();
                self.blank();
                let hashes = match level {
                    HeadingLevel::H1 => "# ",
                    HeadingLevel::H2 => "## ",
                    _ => "### ",
                };
                self.push_style(|_| Style::new().fg(Color::Magenta).add_modifier(Modifier::BOLD));
                self.spans.push(Span::styled(hashes, self.style()));
            }
            Tag::BlockQuote(_) => {
                self.flush();
                self.quote += 1;
            }
            Tag::CodeBlock(kind) => {
                self.flush();
                if let CodeBlockKind::Fenced(lang) = &kind
                    && !lang.is_empty()
                {
                    let mut first = self.quote_prefix();
                    first.push(Span::raw(self.indent()));
                    first.push(Span::styled(format!("╭ {lang}"), GUTTER));
                    self.out.push(Line::from(first));
                }
                self.code = Some(String::new());
            }
            Tag::List(start) => {
                self.flush();
                self.lists.push(start);
            }
            Tag::Item => {
                self.flush();
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let marker = format!("{n}. ");
                        *n += 1;
                        marker
                    }
                    _ => "• ".to_owned(),
                };
                self.marker = Some(marker);
            }
            Tag::Emphasis => self.push_style(|s| s.add_modifier(Modifier::ITALIC)),
            Tag::Strong => self.push_style(|s| s.add_modifier(Modifier::BOLD)),
            Tag::Strikethrough => self.push_style(|s| s.add_modifier(Modifier::CROSSED_OUT)),
            Tag::Link { dest_url, .. } => {
                self.link = Some(dest_url.into_string());
                self.push_style(|s| s.fg(Color::Blue).add_modifier(Modifier::UNDERLINED));
            }
            Tag::Table(_) => {
                self.flush();
                self.in_table = true;
            }
            Tag::TableHead | Tag::TableRow => self.table_row.clear(),
            Tag::TableCell => self.table_cell.clear(),
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph => {
                self.flush();
                if self.lists.is_empty() {
                    self.blank();
                }
            }
            TagEnd::Heading(_) => {
                self.styles.pop();
                self.flush();
                self.out.push(Line::default());
            }
            TagEnd::BlockQuote(_) => {
                self.flush();
                self.quote = self.quote.saturating_sub(1);
                self.blank();
            }
            TagEnd::CodeBlock => self.code_block(),
            TagEnd::List(_) => {
                self.flush();
                self.lists.pop();
                if self.lists.is_empty() {
                    self.blank();
                }
            }
            TagEnd::Item => self.flush(),
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                self.styles.pop();
            }
            TagEnd::Link => {
                self.styles.pop();
                if let Some(url) = self.link.take() {
                    let shown: String = self.spans.last().map(|s| s.content.to_string()).unwrap_or_default();
                    if shown != url && !url.is_empty() {
                        self.spans.push(Span::styled(format!(" ({url})"), GUTTER));
                    }
                }
            }
            TagEnd::TableCell => {
                let cell = std::mem::take(&mut self.table_cell);
                self.table_row.push(cell.trim().to_owned());
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                let row = self.table_row.join(" │ ");
                let head = matches!(tag, TagEnd::TableHead);
                let style = if head { Style::new().add_modifier(Modifier::BOLD) } else { Style::new() };
                let mut first = self.quote_prefix();
                first.push(Span::raw(self.indent()));
                self.out.extend(wrap(&first, &first, &[Span::styled(row, style)], self.width));
            }
            TagEnd::Table => {
                self.in_table = false;
                self.blank();
            }
            _ => {}
        }
    }

    fn code_block(&mut self) {
        let code = self.code.take().unwrap_or_default();
        let mut gutter = self.quote_prefix();
        gutter.push(Span::raw(self.indent()));
        gutter.push(Span::styled("│ ", GUTTER));
        for line in code.trim_end_matches('\n').split('\n') {
            self.out.extend(wrap_chars(&gutter, &gutter, &[Span::styled(line.to_owned(), CODE)], self.width));
        }
        self.blank();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(text: &str, width: u16) -> Vec<String> {
        render(text, width).iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn renders_lists_code_and_headings() {
        let lines = plain(
            "# Title\n\nSome *text* and `code`.\n\n- one\n- two\n  1. nested\n\n```rust\nfn main() {}\n```\n",
            40,
        );
        assert_eq!(
            lines,
            [
                "# Title",
                "",
                "Some text and code.",
                "",
                "• one",
                "• two",
                "  1. nested",
                "",
                "╭ rust",
                "│ fn main() {}"
            ]
        );
    }

    #[test]
    fn an_unclosed_fence_reads_as_code() {
        let lines = plain("Look:\n\n```\nlet x = 1;", 40);
        assert_eq!(lines, ["Look:", "", "│ let x = 1;"]);
    }
}
