//! Word wrapping of styled text to a width, so every rendered line is one screen row and the
//! conversation's height is known exactly (scrolling and "render only what is visible" rely on it).

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Wraps `spans` to `width` columns. The first row starts with `first`, the others with `rest`
/// (indentation, a gutter, a list marker's width). Words longer than a row are broken.
pub fn wrap(
    first: &[Span<'static>],
    rest: &[Span<'static>],
    spans: &[Span<'static>],
    width: u16,
) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut out = Vec::new();
    let mut row = Row::new(first, width);
    for span in spans {
        for token in tokens(&span.content) {
            let style = span.style;
            if token.chars().all(char::is_whitespace) {
                if !row.at_start() {
                    row.push_space(token, style);
                }
                continue;
            }
            let w = token.width();
            if w > row.room() && !row.at_start() {
                out.push(row.finish());
                row = Row::new(rest, width);
            }
            if w <= row.room() {
                row.push(token, style);
                continue;
            }
            // Longer than a whole row: break it by characters.
            for c in token.chars() {
                push_char(&mut out, &mut row, (rest, width), c, style);
            }
        }
    }
    out.push(row.finish());
    out
}

/// Breaks `spans` by characters only (code: whitespace matters).
pub fn wrap_chars(
    first: &[Span<'static>],
    rest: &[Span<'static>],
    spans: &[Span<'static>],
    width: u16,
) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut out = Vec::new();
    let mut row = Row::new(first, width);
    for span in spans {
        for c in span.content.chars() {
            let c = if c == '\t' { ' ' } else { c };
            push_char(&mut out, &mut row, (rest, width), c, span.style);
        }
    }
    out.push(row.finish());
    out
}

/// Adds `c` to `row`, first moving on to a new row (starting with `rest`) when it does not fit.
fn push_char(
    out: &mut Vec<Line<'static>>,
    row: &mut Row,
    (rest, width): (&[Span<'static>], usize),
    c: char,
    style: Style,
) {
    if c.width().unwrap_or(0) > row.room() && !row.at_start() {
        out.push(std::mem::replace(row, Row::new(rest, width)).finish());
    }
    row.push(&c.to_string(), style);
}

/// Cuts `text` to `width` columns, ending with `…` when cut.
pub fn truncate(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let cw = c.width().unwrap_or(0);
        if used + cw + 1 > width {
            break;
        }
        out.push(c);
        used += cw;
    }
    out.push('…');
    out
}

fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut space: Option<bool> = None;
    for (i, c) in text.char_indices() {
        let is_space = c.is_whitespace();
        if space.is_some_and(|s| s != is_space) {
            out.push(&text[start..i]);
            start = i;
        }
        space = Some(is_space);
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

struct Row {
    spans: Vec<Span<'static>>,
    used: usize,
    prefix: usize,
    width: usize,
    /// Spaces held back until a word follows (no trailing blanks).
    pending: Option<(String, Style)>,
}

impl Row {
    fn new(prefix: &[Span<'static>], width: usize) -> Row {
        let used: usize = prefix.iter().map(|s| s.content.width()).sum();
        Row { spans: prefix.to_vec(), used, prefix: used, width, pending: None }
    }

    fn at_start(&self) -> bool {
        self.used == self.prefix
    }

    fn room(&self) -> usize {
        let pending = self.pending.as_ref().map_or(0, |(s, _)| s.width());
        self.width.saturating_sub(self.used + pending)
    }

    fn push_space(&mut self, text: &str, style: Style) {
        let text = text.replace(['\n', '\r', '\t'], " ");
        match &mut self.pending {
            Some((s, _)) => s.push_str(&text),
            None => self.pending = Some((text, style)),
        }
    }

    fn push(&mut self, text: &str, style: Style) {
        if let Some((space, space_style)) = self.pending.take() {
            self.used += space.width();
            self.append(space, space_style);
        }
        self.used += text.width();
        self.append(text.to_owned(), style);
    }

    fn append(&mut self, text: String, style: Style) {
        match self.spans.last_mut() {
            Some(last) if last.style == style => last.content.to_mut().push_str(&text),
            _ => self.spans.push(Span::styled(text, style)),
        }
    }

    fn finish(self) -> Line<'static> {
        Line::from(self.spans)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'static>]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn wraps_words_with_a_hanging_indent() {
        let lines = wrap(&[Span::raw("- ")], &[Span::raw("  ")], &[Span::raw("one two three four")], 10);
        assert_eq!(text(&lines), ["- one two", "  three", "  four"]);
    }

    #[test]
    fn breaks_words_longer_than_a_row() {
        let lines = wrap(&[], &[], &[Span::raw("abcdefghij")], 4);
        assert_eq!(text(&lines), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn truncates_with_an_ellipsis() {
        assert_eq!(truncate("hello world", 6), "hello…");
        assert_eq!(truncate("hi", 6), "hi");
    }
}
