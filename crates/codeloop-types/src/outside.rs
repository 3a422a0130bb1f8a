//! Text that comes from outside codeloop — an MCP server's error, an OAuth redirect, a hook's or a job's
//! words, a language server's message — made safe to show on any surface (DESIGN.md §5j "Outside
//! text"): a terminal, a log line, a web page, an editor. Control characters become visible escapes
//! (`\x1b`, `\u{9b}`), so such text cannot write the clipboard, retitle the window, clear the screen or
//! move the cursor to hide what came before, wherever it ends up.
//!
//! Owns: [`escape_controls`], a pure function. Must not: touch the model's or a tool's own text (those
//! keep their exact bytes for pipes and JSON; terminals neutralise them where they are printed).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character but `\n` and `\t` written as a visible escape: C0 controls and
/// DEL as `\xNN` (ESC is `\x1b`), C1 controls (U+0080–U+009F, the one-character CSI and OSC among them)
/// as `\u{NN}`. Borrowed when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let is_control = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match u32::from(c) {
            _ if !is_control(c) => out.push(c),
            code @ (0..=0x1f | 0x7f) => {
                let _ = write!(out, "\\x{code:02x}");
            }
            code => {
                let _ = write!(out, "\\u{{{code:x}}}");
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(escape_controls("a\n\tb ✓"), Cow::Borrowed(_)));
    }

    #[test]
    fn sequences_become_visible_escapes() {
        // OSC 52 clipboard write, a window title, a screen clear, a carriage return over the line.
        assert_eq!(escape_controls("\u{1b}]52;c;ZXZpbA==\u{7}"), "\\x1b]52;c;ZXZpbA==\\x07");
        assert_eq!(escape_controls("\u{1b}]0;owned\u{1b}\\"), "\\x1b]0;owned\\x1b\\");
        assert_eq!(escape_controls("ok\r\u{1b}[2J"), "ok\\x0d\\x1b[2J");
        assert_eq!(escape_controls("\u{9b}2J\u{7f}"), "\\u{9b}2J\\x7f");
    }
}
