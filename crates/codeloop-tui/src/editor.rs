//! The input editor: multi-line text with a cursor, and a history of sent messages browsed with
//! Up/Down while the input is empty (or while browsing it).

#[derive(Debug, Default)]
pub struct Editor {
    text: String,
    /// Byte offset of the cursor in `text` (always on a char boundary).
    cursor: usize,
    history: Vec<String>,
    /// The history entry shown, while browsing.
    browsing: Option<usize>,
}

/// Entries kept in the history.
const HISTORY: usize = 500;

impl Editor {
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    pub fn set(&mut self, text: &str) {
        self.text = text.to_owned();
        self.cursor = self.text.len();
    }

    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.browsing = None;
    }

    /// Takes the text out (to send it) and remembers it.
    pub fn take(&mut self) -> String {
        let text = std::mem::take(&mut self.text);
        self.cursor = 0;
        self.browsing = None;
        if !text.trim().is_empty() && self.history.last() != Some(&text) {
            self.history.push(text.clone());
            if self.history.len() > HISTORY {
                self.history.remove(0);
            }
        }
        text
    }

    pub fn insert(&mut self, c: char) {
        self.browsing = None;
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    pub fn insert_str(&mut self, s: &str) {
        self.browsing = None;
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        self.text.insert_str(self.cursor, &s);
        self.cursor += s.len();
    }

    pub fn backspace(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
            self.text.remove(self.cursor);
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    /// Ctrl+W: deletes the word before the cursor.
    pub fn delete_word(&mut self) {
        let before = &self.text[..self.cursor];
        let trimmed = before.trim_end();
        let start = trimmed.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    pub fn left(&mut self) {
        if let Some(c) = self.text[..self.cursor].chars().next_back() {
            self.cursor -= c.len_utf8();
        }
    }

    pub fn right(&mut self) {
        if let Some(c) = self.text[self.cursor..].chars().next() {
            self.cursor += c.len_utf8();
        }
    }

    pub fn home(&mut self) {
        self.cursor = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
    }

    pub fn end(&mut self) {
        self.cursor += self.text[self.cursor..].find('\n').unwrap_or(self.text.len() - self.cursor);
    }

    /// Up: the previous history entry when empty or browsing, else the line above. False when it
    /// did nothing.
    pub fn up(&mut self) -> bool {
        if self.text.is_empty() || self.browsing.is_some() {
            let next = match self.browsing {
                None => self.history.len().checked_sub(1),
                Some(i) => i.checked_sub(1),
            };
            let Some(i) = next else { return false };
            self.browsing = Some(i);
            self.text = self.history[i].clone();
            self.cursor = self.text.len();
            return true;
        }
        self.vertical(-1)
    }

    /// Down: the next history entry while browsing (past the newest: empty), else the line below.
    pub fn down(&mut self) -> bool {
        if let Some(i) = self.browsing {
            if i + 1 < self.history.len() {
                self.browsing = Some(i + 1);
                self.text = self.history[i + 1].clone();
            } else {
                self.browsing = None;
                self.text.clear();
            }
            self.cursor = self.text.len();
            return true;
        }
        self.vertical(1)
    }

    fn vertical(&mut self, direction: i32) -> bool {
        let line_start = self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1);
        let column = self.text[line_start..self.cursor].chars().count();
        let target_start = if direction < 0 {
            if line_start == 0 {
                return false;
            }
            self.text[..line_start - 1].rfind('\n').map_or(0, |i| i + 1)
        } else {
            match self.text[self.cursor..].find('\n') {
                Some(i) => self.cursor + i + 1,
                None => return false,
            }
        };
        let line_end = self.text[target_start..].find('\n').map_or(self.text.len(), |i| target_start + i);
        let line = &self.text[target_start..line_end];
        let offset: usize = line.chars().take(column).map(char::len_utf8).sum();
        self.cursor = target_start + offset;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_browsed_when_the_input_is_empty() {
        let mut editor = Editor::default();
        editor.insert_str("first");
        editor.take();
        editor.insert_str("second");
        editor.take();
        assert!(editor.up());
        assert_eq!(editor.text(), "second");
        assert!(editor.up());
        assert_eq!(editor.text(), "first");
        assert!(editor.down());
        assert_eq!(editor.text(), "second");
        assert!(editor.down());
        assert_eq!(editor.text(), "");
    }

    #[test]
    fn up_and_down_move_between_lines_of_a_draft() {
        let mut editor = Editor::default();
        editor.insert_str("abc\nde");
        assert!(editor.up());
        assert_eq!(editor.cursor(), 2);
        assert!(editor.down());
        assert_eq!(editor.cursor(), 6);
        editor.delete_word();
        assert_eq!(editor.text(), "abc\n");
    }
}
