//! Text from the model and from tools, made safe to write to a terminal: control characters are
//! replaced by visible stand-ins, so an answer cannot write the clipboard (OSC 52), clear the screen,
//! move the cursor to hide what came before, or retitle the window.
//!
//! Owns: [`neutralise`], a pure function, and the helpers that apply it only when the target is a
//! terminal. Must not: touch text that goes to a pipe or a file, or `--format json` (those keep the
//! exact text).

use std::borrow::Cow;
use std::io::IsTerminal;

/// `text` with every control character except `\n` and `\t` replaced: C0 controls (ESC, which starts
/// CSI, OSC and every other sequence; BEL; backspace; …) and DEL by their Unicode control pictures
/// (`␛`, `␇`, …), C1 controls (U+0080–U+009F, among them the one-character CSI and OSC) by `�`. A
/// carriage return before a line feed is dropped (the line feed ends the line either way); a lone one,
/// which would let later text overwrite the line, is shown as `␍`.
pub fn neutralise(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            c if is_control(c) => out.push(stand_in(c)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn is_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}'
}

fn stand_in(c: char) -> char {
    match u32::from(c) {
        // U+2400 is the picture of NUL; the C0 pictures follow in order.
        code @ 0..=0x1f => char::from_u32(0x2400 + code).unwrap_or('\u{fffd}'),
        0x7f => '\u{2421}',
        _ => '\u{fffd}',
    }
}

/// Where a piece of text is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A terminal: control sequences are neutralised.
    Terminal,
    /// A pipe or a file: the text is kept exactly.
    Other,
}

impl Target {
    pub fn stdout() -> Target {
        if std::io::stdout().is_terminal() { Target::Terminal } else { Target::Other }
    }

    pub fn stderr() -> Target {
        if std::io::stderr().is_terminal() { Target::Terminal } else { Target::Other }
    }

    /// `text` as it may be written to this target.
    pub fn show<'a>(self, text: &'a str) -> Cow<'a, str> {
        match self {
            Target::Terminal => neutralise(text),
            Target::Other => Cow::Borrowed(text),
        }
    }
}

/// A writer that neutralises what passes through it when it writes to a terminal, and passes everything
/// else through exactly: `writeln!` calls stay as they are, and a closed pipe is still an error to them.
pub struct Neutralising<W> {
    inner: W,
    target: Target,
}

impl Neutralising<std::io::StdoutLock<'static>> {
    pub fn stdout() -> Self {
        Neutralising { inner: std::io::stdout().lock(), target: Target::stdout() }
    }
}

impl<W: std::io::Write> std::io::Write for Neutralising<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match (self.target, std::str::from_utf8(buf)) {
            (Target::Terminal, Ok(text)) => self.inner.write_all(neutralise(text).as_bytes())?,
            // Formatting writes whole `str` pieces; anything else is not text to interpret.
            _ => self.inner.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `text` as it may be written to stderr (a check per call: for prompts and one-off messages).
pub fn for_stderr(text: &str) -> Cow<'_, str> {
    Target::stderr().show(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "fn main() {\n\tprintln!(\"héllo ✓\");\n}\n";
        assert!(matches!(neutralise(text), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn escape_sequences_become_visible_text() {
        // OSC 52 clipboard write, screen clear, cursor home, window title.
        assert_eq!(neutralise("a\u{1b}]52;c;ZXZpbA==\u{7}b"), "a␛]52;c;ZXZpbA==␇b");
        assert_eq!(neutralise("\u{1b}[2J\u{1b}[H\u{1b}[31mred"), "␛[2J␛[H␛[31mred");
        assert_eq!(neutralise("\u{1b}]0;owned\u{1b}\\"), "␛]0;owned␛\\");
    }

    #[test]
    fn other_c0_controls_and_del_are_replaced_but_newline_and_tab_stay() {
        assert_eq!(neutralise("x\u{8}\u{8}y\u{0}\u{7f}\n\tz"), "x␈␈y␀␡\n\tz");
    }

    #[test]
    fn c1_controls_are_replaced() {
        // U+009B is a one-character CSI, U+009D a one-character OSC.
        assert_eq!(neutralise("\u{9b}2J\u{9d}52;c;x\u{9c}"), "\u{fffd}2J\u{fffd}52;c;x\u{fffd}");
    }

    #[test]
    fn carriage_returns_end_lines_but_cannot_overwrite_them() {
        assert_eq!(neutralise("one\r\ntwo\r\n"), "one\ntwo\n");
        assert_eq!(neutralise("rm -rf ~\rls"), "rm -rf ~␍ls");
    }

    #[test]
    fn other_targets_keep_the_exact_text() {
        let text = "\u{1b}[2Jclear";
        assert_eq!(Target::Other.show(text), text);
        assert_eq!(Target::Terminal.show(text), "␛[2Jclear");
    }
}
