//! A small shell scanner for permission checks: splits a script into simple commands on `&&`, `||`, `;`,
//! `|`, `&`, newlines and parentheses, with quotes, escapes, comments, redirections, here-documents and
//! `$(…)`/backtick substitutions understood well enough to name each command. Not a shell parser: it only
//! has to find every command a script runs, erring towards asking about more.

/// One command of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    /// Source text of the command, redirections included: the permission pattern.
    pub text: String,
    /// Unquoted words without leading keywords, assignments and redirections.
    pub words: Vec<String>,
    /// Files the command redirects to or from (`> out.txt` → `out.txt`).
    pub redirect_targets: Vec<String>,
}

/// Splits `script` into its simple commands, in source order (substitutions first).
pub(crate) fn split_commands(script: &str) -> Vec<SimpleCommand> {
    let mut scanner = Scanner::new(script);
    scanner.run();
    scanner.out
}

/// Words that start or end a compound command; the command proper follows them.
const KEYWORDS: &[&str] =
    &["!", "{", "}", "do", "done", "elif", "else", "esac", "fi", "if", "then", "time", "until", "while"];
/// Compound commands whose first segment names no command (`for x in a b`).
const HEADERS: &[&str] = &["case", "for", "function", "select"];

#[derive(Debug)]
struct Word {
    value: String,
    start: usize,
    end: usize,
    kind: WordKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WordKind {
    Plain,
    Operator,
    Target,
}

struct Scanner<'a> {
    src: &'a str,
    chars: Vec<(usize, char)>,
    pos: usize,
    out: Vec<SimpleCommand>,
    words: Vec<Word>,
    word: Option<Word>,
    /// What the next word is, when a redirection operator decided it.
    next_kind: Option<WordKind>,
    heredocs: Vec<(String, bool)>,
}

impl<'a> Scanner<'a> {
    fn new(src: &'a str) -> Self {
        Self {
            src,
            chars: src.char_indices().collect(),
            pos: 0,
            out: Vec::new(),
            words: Vec::new(),
            word: None,
            next_kind: None,
            heredocs: Vec::new(),
        }
    }

    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.pos + offset).map(|(_, c)| *c)
    }

    fn byte_at(&self, pos: usize) -> usize {
        self.chars.get(pos).map_or(self.src.len(), |(i, _)| *i)
    }

    fn run(&mut self) {
        while let Some(c) = self.peek_at(0) {
            let next = self.peek_at(1);
            match c {
                ' ' | '\t' | '\r' => self.skip(1),
                '\n' => {
                    self.end_command();
                    self.pos += 1;
                    self.skip_heredoc_bodies();
                }
                ';' | '(' | ')' => self.separator(1),
                '&' if next == Some('>') => self.redirect(),
                '&' if next == Some('&') => self.separator(2),
                '&' => self.separator(1),
                '|' if matches!(next, Some('|' | '&')) => self.separator(2),
                '|' => self.separator(1),
                '>' | '<' => self.redirect(),
                '#' if self.word.is_none() => self.skip_comment(),
                '\'' => self.quoted('\''),
                '"' => self.quoted('"'),
                '\\' => self.escape(),
                '$' if next == Some('(') => self.substitution(2),
                '`' => self.substitution(1),
                _ => {
                    self.push_char(c);
                    self.pos += 1;
                }
            }
        }
        self.end_command();
    }

    fn skip(&mut self, n: usize) {
        self.end_word();
        self.pos += n;
    }

    fn separator(&mut self, len: usize) {
        self.end_command();
        self.pos += len;
    }

    fn push_char(&mut self, c: char) {
        let at = self.byte_at(self.pos);
        let word = self.word.get_or_insert_with(|| Word {
            value: String::new(),
            start: at,
            end: at,
            kind: WordKind::Plain,
        });
        word.value.push(c);
        word.end = at + c.len_utf8();
    }

    /// Extends the current word's source span to `pos` (exclusive) without adding to its value.
    fn extend_to(&mut self, pos: usize) {
        let end = self.byte_at(pos);
        let start = self.byte_at(self.pos);
        let word =
            self.word.get_or_insert_with(|| Word { value: String::new(), start, end, kind: WordKind::Plain });
        word.end = end;
    }

    fn end_word(&mut self) {
        if let Some(mut word) = self.word.take() {
            if let Some(kind) = self.next_kind.take() {
                word.kind = kind;
            }
            self.words.push(word);
        }
    }

    fn skip_comment(&mut self) {
        while self.peek_at(0).is_some_and(|c| c != '\n') {
            self.pos += 1;
        }
    }

    fn quoted(&mut self, quote: char) {
        let open = self.pos;
        self.extend_to(open);
        self.pos += 1;
        while let Some(c) = self.peek_at(0) {
            if c == quote {
                break;
            }
            if quote == '"' && c == '\\' && matches!(self.peek_at(1), Some('"' | '\\' | '$' | '`')) {
                self.pos += 1;
            }
            if let Some(c) = self.peek_at(0) {
                self.push_char(c);
            }
            self.pos += 1;
        }
        self.pos += 1;
        self.extend_to(self.pos.min(self.chars.len()));
    }

    fn escape(&mut self) {
        match self.peek_at(1) {
            Some('\n') => self.pos += 2,
            Some(c) => {
                self.extend_to(self.pos);
                self.pos += 1;
                self.push_char(c);
                self.pos += 1;
            }
            None => self.pos += 1,
        }
    }

    /// `$(…)` or a backtick substitution: the inner script's commands are commands too; the substitution
    /// stays part of the current word. `$((…))` is arithmetic and runs nothing.
    fn substitution(&mut self, open_len: usize) {
        let start = self.pos;
        let arithmetic = open_len == 2 && self.peek_at(2) == Some('(');
        let close = if open_len == 1 { self.find_char('`', start + 1) } else { self.find_close(start + 2) };
        let inner_start = self.byte_at(start + open_len);
        let inner_end = self.byte_at(close);
        if !arithmetic && inner_start <= inner_end {
            self.out.extend(split_commands(&self.src[inner_start..inner_end]));
        }
        for pos in start..=close.min(self.chars.len().saturating_sub(1)) {
            let c = self.chars[pos].1;
            self.pos = pos;
            self.push_char(c);
        }
        self.pos = close + 1;
    }

    fn find_char(&self, target: char, from: usize) -> usize {
        (from..self.chars.len()).find(|&i| self.chars[i].1 == target).unwrap_or(self.chars.len())
    }

    /// Index of the `)` closing a `$(` whose body starts at `from`.
    fn find_close(&self, from: usize) -> usize {
        let mut depth = 1;
        let mut quote: Option<char> = None;
        for i in from..self.chars.len() {
            let c = self.chars[i].1;
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(') => depth += 1,
                (None, ')') => {
                    depth -= 1;
                    if depth == 0 {
                        return i;
                    }
                }
                _ => {}
            }
        }
        self.chars.len()
    }

    /// A redirection operator (`>`, `2>>`, `&>`, `<`, `>&2`, `<<EOF`…). Its target word is not a command
    /// word; a here-document's body is skipped at the next newline.
    fn redirect(&mut self) {
        let fd_prefix = self
            .word
            .as_ref()
            .is_some_and(|w| !w.value.is_empty() && w.value.chars().all(|c| c.is_ascii_digit()));
        let start = match (fd_prefix, self.word.take()) {
            (true, Some(word)) => word.start,
            (_, word) => {
                self.word = word;
                self.end_word();
                self.byte_at(self.pos)
            }
        };
        let mut op = String::new();
        while let Some(c) = self.peek_at(0).filter(|c| matches!(c, '<' | '>' | '&' | '|') && op.len() < 3) {
            op.push(c);
            self.pos += 1;
        }
        if op.ends_with('&') && !op.starts_with('&') {
            // `>&2`, `<&-`: duplicates a descriptor, no target word.
            while self.peek_at(0).is_some_and(|c| c.is_ascii_digit() || c == '-') {
                self.pos += 1;
            }
        } else if op == "<<" {
            let strip_tabs = self.peek_at(0) == Some('-');
            if strip_tabs {
                self.pos += 1;
            }
            let delimiter = self.heredoc_delimiter();
            self.heredocs.push((delimiter, strip_tabs));
        } else if op == "<<<" {
            // A here-string's word is data, not a file.
            self.next_kind = Some(WordKind::Operator);
        } else {
            self.next_kind = Some(WordKind::Target);
        }
        let end = self.byte_at(self.pos);
        self.words.push(Word { value: op, start, end, kind: WordKind::Operator });
    }

    fn heredoc_delimiter(&mut self) -> String {
        while matches!(self.peek_at(0), Some(' ' | '\t')) {
            self.pos += 1;
        }
        let mut delimiter = String::new();
        while let Some(c) = self.peek_at(0) {
            if c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | '(' | ')') {
                break;
            }
            if !matches!(c, '\'' | '"' | '\\') {
                delimiter.push(c);
            }
            self.pos += 1;
        }
        delimiter
    }

    fn skip_heredoc_bodies(&mut self) {
        for (delimiter, strip_tabs) in std::mem::take(&mut self.heredocs) {
            while self.pos < self.chars.len() {
                let line_end = self.find_char('\n', self.pos);
                let line = &self.src[self.byte_at(self.pos)..self.byte_at(line_end)];
                let line = if strip_tabs { line.trim_start_matches('\t') } else { line };
                self.pos = line_end + 1;
                if line.trim_end_matches('\r') == delimiter {
                    break;
                }
            }
        }
    }

    fn end_command(&mut self) {
        self.end_word();
        self.next_kind = None;
        let words = std::mem::take(&mut self.words);
        let Some(last) = words.last() else { return };
        let mut first = None;
        let mut command_words = Vec::new();
        let mut redirect_targets = Vec::new();
        for (idx, word) in words.iter().enumerate() {
            match word.kind {
                WordKind::Operator => continue,
                WordKind::Target => {
                    redirect_targets.push(word.value.clone());
                    continue;
                }
                WordKind::Plain => {}
            }
            if first.is_none() {
                if HEADERS.contains(&word.value.as_str()) {
                    return;
                }
                if KEYWORDS.contains(&word.value.as_str()) || is_assignment(&word.value) {
                    continue;
                }
                first = Some(idx);
            }
            command_words.push(word.value.clone());
        }
        let Some(first) = first else { return };
        let text = self.src[words[first].start.min(last.end)..last.end].trim().to_string();
        self.out.push(SimpleCommand { text, words: command_words, redirect_targets });
    }
}

fn is_assignment(word: &str) -> bool {
    let Some((name, _)) = word.split_once('=') else { return false };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(script: &str) -> Vec<String> {
        split_commands(script).into_iter().map(|c| c.text).collect()
    }

    fn words(script: &str) -> Vec<Vec<String>> {
        split_commands(script).into_iter().map(|c| c.words).collect()
    }

    #[test]
    fn splits_on_operators() {
        assert_eq!(
            texts("git status && npm test || echo no; ls | wc -l & sleep 1"),
            vec!["git status", "npm test", "echo no", "ls", "wc -l", "sleep 1"]
        );
        assert_eq!(texts("a\nb\n\nc"), vec!["a", "b", "c"]);
    }

    #[test]
    fn quotes_and_escapes_do_not_split() {
        assert_eq!(texts("echo 'a && b' \"c; d\" e\\;f"), vec!["echo 'a && b' \"c; d\" e\\;f"]);
        assert_eq!(words("echo 'a && b' \"c; d\""), vec![vec!["echo", "a && b", "c; d"]]);
    }

    #[test]
    fn redirections_stay_in_text_but_not_in_words() {
        let cmds = split_commands("cargo test 2>&1 > out.txt");
        assert_eq!(cmds[0].text, "cargo test 2>&1 > out.txt");
        assert_eq!(cmds[0].words, vec!["cargo", "test"]);
        assert_eq!(cmds[0].redirect_targets, vec!["out.txt"]);
        assert_eq!(words("ls &> /dev/null"), vec![vec!["ls"]]);
        let here = split_commands("bc <<< /abs");
        assert_eq!(
            (here[0].words.clone(), here[0].redirect_targets.clone()),
            (vec!["bc".to_string()], vec![])
        );
    }

    #[test]
    fn heredoc_bodies_are_not_commands() {
        let script = "cat <<'EOF' > notes.txt\nrm -rf /\nEOF\necho done";
        assert_eq!(words(script), vec![vec!["cat"], vec!["echo", "done"]]);
    }

    #[test]
    fn substitutions_are_commands_too() {
        assert_eq!(
            texts("echo $(rm -rf x) `whoami`"),
            vec!["rm -rf x", "whoami", "echo $(rm -rf x) `whoami`"]
        );
        assert_eq!(texts("echo $((1 + 2))"), vec!["echo $((1 + 2))"]);
    }

    #[test]
    fn keywords_assignments_and_comments_are_skipped() {
        assert_eq!(texts("FOO=1 make build # comment"), vec!["make build"]);
        assert_eq!(texts("if test -f x; then cat x; fi"), vec!["test -f x", "cat x"]);
        assert_eq!(texts("for f in a b; do echo $f; done"), vec!["echo $f"]);
        assert_eq!(texts("(cd sub && make)"), vec!["cd sub", "make"]);
    }

    #[test]
    fn malformed_scripts_do_not_panic() {
        let samples = [
            "echo 'unterminated",
            "echo \"open",
            "echo $(unclosed",
            "echo `tick",
            "trailing\\",
            "cat <<",
            "cat <<EOF",
            "a >",
            "2>&",
            "é ü > ö && ß",
            "$(",
            "`",
            ")(",
            "&&||;;|&",
            "echo ${x",
            "<<<",
            "'",
            "\\\n",
        ];
        for script in samples {
            let _ = split_commands(script);
        }
        let bytes: Vec<char> = "a'b\"c$(d)e`f`g\\h>i<j&k|l;m\n#n(o)p{q}r é".chars().collect();
        for start in 0..bytes.len() {
            for end in start..=bytes.len() {
                let script: String = bytes[start..end].iter().collect();
                let _ = split_commands(&script);
            }
        }
    }
}
