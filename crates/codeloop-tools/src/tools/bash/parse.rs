//! Permission analysis of a bash script on the tree-sitter-bash grammar: every command that can run, with
//! its permission pattern.
//!
//! Commands are found wherever bash runs them: lists, pipelines, subshells, groups, function bodies,
//! compound statements, `$(…)` and backticks in any quoting (strings, `${v:-…}`, arithmetic, subscripts,
//! redirection targets, heredoc bodies whose delimiter is unquoted), process substitution, the script of
//! `bash -c`/`eval`/`trap`, a heredoc fed to a shell, and the command a wrapper runs (`env`, `sudo`,
//! `xargs`, `find -exec`…; see [`super::wrappers`]). Whatever cannot be read (a syntax error, a command
//! name only known at run time, too deep a nesting) becomes a command whose pattern is its raw source
//! text, which only a rule such as `"*"` allows. This module never touches the file system.

use std::cell::RefCell;

use tree_sitter::{Node, Parser, Tree};

use super::arity;
use super::words::{self, Form, Word, node_text};
use super::wrappers::{self, Inner};

/// Deepest syntax tree walked; a deeper script cannot be read.
const MAX_TREE_DEPTH: usize = 256;
/// Deepest nesting of script strings (`bash -c "eval '…'"`).
const MAX_NESTED_SCRIPTS: usize = 8;
/// Longest script parsed; a longer one cannot be read.
const MAX_SCRIPT_BYTES: usize = 1 << 20;
/// Marks the pattern of a script or part the parser could not read.
pub(crate) const UNPARSED: &str = "(unparsed) ";
/// Commands that only move the shell: not asked as `bash` when their arguments are literal.
const NOT_ASKED: &[&str] = &["cd", "pushd", "popd"];

/// One command the script can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Command {
    /// The `bash` permission pattern: normalised words (with the assignments that change what runs)
    /// joined by single spaces, or the raw source text of what cannot be read.
    pub pattern: String,
    /// What an "always" answer approves: the arity prefix and ` *`, or the exact raw text.
    pub always: String,
    /// Normalised words, command name first (empty for redirections of a compound statement).
    pub words: Vec<Word>,
    /// Files the command reads or writes through redirections (`> out.txt`).
    pub redirects: Vec<Word>,
    /// Literal `cd`/`pushd` targets in effect when the command runs, oldest first, relative to the
    /// directory the script starts in.
    pub dirs: Vec<String>,
    pub check: Check,
}

/// Whether a command is asked as `bash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Asked as `bash` with its pattern.
    Bash,
    /// Only its paths are checked (`cd dir`, the redirections of a `{ …; } > file` group).
    PathsOnly,
}

/// Every command `script` can run, in the order the shell meets them (substitutions before the
/// command that holds them).
pub(crate) fn analyse(script: &str) -> Vec<Command> {
    let mut out = Vec::new();
    analyse_into(script, 0, Vec::new(), &mut out);
    out
}

thread_local! {
    /// One parser per thread: creating one and loading the grammar costs more than parsing a command.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn parse(script: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut parser = Parser::new();
            parser.set_language(&tree_sitter_bash::LANGUAGE.into()).ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(script, None)
    })
}

fn analyse_into(script: &str, nesting: usize, dirs: Vec<String>, out: &mut Vec<Command>) {
    let raw = script.trim();
    if raw.is_empty() {
        return;
    }
    let script = join_continued_lines(script);
    let tree =
        (nesting <= MAX_NESTED_SCRIPTS && script.len() <= MAX_SCRIPT_BYTES).then(|| parse(&script)).flatten();
    let Some(tree) = tree else {
        push_unparsed(out, raw, dirs);
        return;
    };
    let root = tree.root_node();
    let mut walker = Walker { src: &script, nesting, dirs: dirs.clone(), too_deep: false, out };
    walker.visit(root, 0);
    if walker.too_deep || root.has_error() {
        push_unparsed(out, raw, dirs);
    }
}

/// Removes backslash-newline pairs, as bash does before it splits words (`r\⏎m` is `rm`).
fn join_continued_lines(script: &str) -> String {
    if !script.contains("\\\n") {
        return script.to_string();
    }
    let mut out = String::with_capacity(script.len());
    let mut backslashes = 0usize;
    for c in script.chars() {
        if c == '\n' && backslashes % 2 == 1 {
            out.pop();
            backslashes = 0;
            continue;
        }
        backslashes = if c == '\\' { backslashes + 1 } else { 0 };
        out.push(c);
    }
    out
}

/// Text the parser could not read: its raw text (so a deny rule such as `"rm *"` still sees it) and the
/// same text marked, so a prefix rule (`"git status *"`) does not allow it and only `"*"` does.
/// Besides, each segment of the text between separators is checked as a command of its own (the
/// commands tree-sitter recovered may miss some), so a deny rule still sees `rm x` in `cat <<EOF; rm x`.
fn push_unparsed(out: &mut Vec<Command>, raw: &str, dirs: Vec<String>) {
    for words in rough_commands(raw) {
        let values: Vec<String> = words.iter().map(|w| w.value.clone()).collect();
        let pattern = values.join(" ");
        if out.iter().any(|c| c.pattern == pattern) {
            continue;
        }
        let always = format!("{} *", arity::prefix(&values).join(" "));
        out.push(Command {
            pattern,
            always,
            words,
            redirects: Vec::new(),
            dirs: dirs.clone(),
            check: Check::Bash,
        });
    }
    out.push(Command::unreadable(raw, Vec::new(), dirs.clone()));
    out.push(Command::unreadable(&format!("{UNPARSED}{}", raw.trim()), Vec::new(), dirs));
}

/// Words that open or close a compound command; the command proper follows them.
const KEYWORDS: &[&str] = &[
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "function", "if", "in",
    "select", "then", "time", "until", "while",
];

/// A rough split of text the parser could not read into commands: segments between shell separators
/// and substitution marks, words split on blanks with quotes and escapes removed, leading keywords and
/// assignments dropped, an absolute command name reduced to its basename.
fn rough_commands(raw: &str) -> Vec<Vec<Word>> {
    let mut commands = Vec::new();
    for segment in raw.split(['\n', ';', '&', '|', '(', ')', '`', '<', '>', '$', '{', '}']) {
        let mut words: Vec<Word> = segment
            .split_whitespace()
            .map(|w| {
                Word::synthetic(&w.chars().filter(|c| !matches!(c, '\'' | '"' | '\\')).collect::<String>())
            })
            .filter(|w| !w.value.is_empty())
            .skip_while(|w| {
                KEYWORDS.contains(&w.value.as_str()) || wrappers::assignment_name(&w.value).is_some()
            })
            .collect();
        if let Some(first) = words.first_mut() {
            first.value = words::command_name(&first.value).to_string();
            commands.push(words);
        }
    }
    commands
}

impl Command {
    fn unreadable(raw: &str, words: Vec<Word>, dirs: Vec<String>) -> Self {
        let raw = raw.trim().to_string();
        Self { pattern: raw.clone(), always: raw, words, redirects: Vec::new(), dirs, check: Check::Bash }
    }
}

/// A command as found in the tree or inside a wrapper, before it is turned into [`Command`]s.
struct Invocation {
    /// `NAME=VALUE` words before the command.
    env: Vec<Word>,
    words: Vec<Word>,
    redirects: Vec<Word>,
    /// A script the command gets on standard input (heredoc or here-string), for shells.
    stdin: Option<Word>,
    source: String,
}

struct Walker<'s, 'o> {
    src: &'s str,
    nesting: usize,
    /// `cd` targets in effect at this point of the walk.
    dirs: Vec<String>,
    too_deep: bool,
    out: &'o mut Vec<Command>,
}

impl Walker<'_, '_> {
    fn visit(&mut self, node: Node, depth: usize) {
        if depth > MAX_TREE_DEPTH {
            self.too_deep = true;
            return;
        }
        match node.kind() {
            "command" => self.command(node, Vec::new(), None, depth),
            "redirected_statement" => self.redirected(node, depth),
            // Each runs in a subshell: a `cd` inside does not move the commands after it.
            "subshell" | "command_substitution" | "process_substitution" => {
                let saved = self.dirs.clone();
                self.children(node, depth);
                self.dirs = saved;
                self.substitution_reads(node);
            }
            "pipeline" => {
                let saved = self.dirs.clone();
                for child in named_children(node) {
                    self.dirs = saved.clone();
                    self.visit(child, depth + 1);
                }
                self.dirs = saved;
            }
            "variable_assignment" => self.assignment(node, depth),
            "declaration_command" => self.declaration(node, depth),
            "heredoc_body" => self.heredoc_body(node, depth),
            // tree-sitter leaves backticks inside `${v:-…}` as a plain word.
            "word" if node_text(node, self.src).contains('`') => {
                self.backticks_in(node, node_text(node, self.src))
            }
            "comment" => {}
            _ => self.children(node, depth),
        }
    }

    /// `$(< file)` reads the file without a command.
    fn substitution_reads(&mut self, node: Node) {
        let mut targets = Vec::new();
        let mut stdin = None;
        for redirect in children_by_field(node, "redirect") {
            self.collect_redirect(redirect, &mut targets, &mut stdin);
        }
        if !targets.is_empty() {
            self.push_paths_only(targets);
        }
    }

    fn push_paths_only(&mut self, redirects: Vec<Word>) {
        self.out.push(Command {
            pattern: String::new(),
            always: String::new(),
            words: Vec::new(),
            redirects,
            dirs: self.dirs.clone(),
            check: Check::PathsOnly,
        });
    }

    fn children(&mut self, node: Node, depth: usize) {
        for child in named_children(node) {
            self.visit(child, depth + 1);
        }
    }

    /// A statement with redirections: targets of file redirections belong to the command (or, for a
    /// compound statement, stand alone); a heredoc or here-string is the command's input.
    fn redirected(&mut self, node: Node, depth: usize) {
        let mut targets = Vec::new();
        let mut stdin = None;
        for redirect in children_by_field(node, "redirect") {
            self.visit(redirect, depth + 1);
            self.collect_redirect(redirect, &mut targets, &mut stdin);
        }
        let Some(body) = node.child_by_field_name("body") else { return };
        if body.kind() == "command" {
            self.command(body, targets, stdin, depth + 1);
            return;
        }
        self.visit(body, depth + 1);
        if !targets.is_empty() {
            self.push_paths_only(targets);
        }
    }

    fn collect_redirect(&self, redirect: Node, targets: &mut Vec<Word>, stdin: &mut Option<Word>) {
        match redirect.kind() {
            "file_redirect" => {
                let duplicates = (0..redirect.child_count())
                    .filter_map(|i| redirect.child(i))
                    .any(|c| matches!(c.kind(), ">&" | "<&" | ">&-" | "<&-"));
                for target in children_by_field(redirect, "destination") {
                    let word = words::word(target, self.src);
                    let descriptor = word.value.chars().all(|c| c.is_ascii_digit() || c == '-');
                    if !(duplicates && descriptor) {
                        targets.push(word);
                    }
                }
            }
            "heredoc_redirect" => {
                let body = named_children(redirect).find(|c| c.kind() == "heredoc_body");
                *stdin = body.map(|b| words::word(b, self.src));
            }
            "herestring_redirect" => {
                *stdin =
                    redirect.named_child(redirect.named_child_count().saturating_sub(1) as u32).map(|w| {
                        let mut word = words::word(w, self.src);
                        word.value.push('\n');
                        word
                    });
            }
            _ => {}
        }
    }

    fn command(&mut self, node: Node, mut redirects: Vec<Word>, mut stdin: Option<Word>, depth: usize) {
        let mut env = Vec::new();
        let mut words = Vec::new();
        let mut cursor = node.walk();
        let mut more = cursor.goto_first_child();
        while more {
            let child = cursor.node();
            match (cursor.field_name(), child.kind()) {
                (_, "variable_assignment") => {
                    self.children(child, depth + 1);
                    env.push(self.assignment_word(child));
                }
                (Some("name" | "argument"), _) => {
                    self.visit(child, depth + 1);
                    words.push(words::word(child, self.src));
                }
                (Some("redirect"), _) => {
                    self.visit(child, depth + 1);
                    self.collect_redirect(child, &mut redirects, &mut stdin);
                }
                _ => self.visit(child, depth + 1),
            }
            more = cursor.goto_next_sibling();
        }
        let source = node_text(node, self.src).to_string();
        self.emit(Invocation { env, words, redirects, stdin, source });
    }

    /// `NAME=VALUE` with its value normalised like a word.
    fn assignment_word(&self, node: Node) -> Word {
        let source = node_text(node, self.src).to_string();
        let name = node.child_by_field_name("name").map(|n| node_text(n, self.src)).unwrap_or_default();
        let operator = if source.contains("+=") && !source.contains("=+=") { "+=" } else { "=" };
        match node.child_by_field_name("value").map(|v| words::word(v, self.src)) {
            Some(value) if value.form != Form::Dynamic => {
                Word { value: format!("{name}{operator}{}", value.value), source, form: value.form }
            }
            Some(_) => Word { value: source.clone(), source, form: Form::Dynamic },
            None => Word { value: format!("{name}{operator}"), source, form: Form::Literal },
        }
    }

    /// A statement-level `NAME=VALUE`: its substitutions run; an assignment that changes what later
    /// commands run (`PATH=…`, `GIT_DIR=…`) is a command of its own.
    fn assignment(&mut self, node: Node, depth: usize) {
        self.children(node, depth);
        let name = node.child_by_field_name("name").map(|n| node_text(n, self.src)).unwrap_or_default();
        if wrappers::changes_what_runs(name) {
            let word = self.assignment_word(node);
            self.push_command(word.value.clone(), format!("{} *", word.value), vec![word], Vec::new());
        }
    }

    /// `export`/`declare`/`local`/`readonly`/`typeset`: a command of its own when it sets or exports a
    /// variable that changes what runs.
    fn declaration(&mut self, node: Node, depth: usize) {
        for child in named_children(node) {
            match child.kind() {
                // Checked here as a whole, not as statement-level assignments.
                "variable_assignment" => self.children(child, depth + 1),
                _ => self.visit(child, depth + 1),
            }
        }
        let mut sensitive = false;
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            let name = match child.kind() {
                "variable_assignment" => child.child_by_field_name("name"),
                "variable_name" => Some(child),
                _ => None,
            };
            sensitive |= name.is_some_and(|n| wrappers::changes_what_runs(node_text(n, self.src)));
            words.push(match child.kind() {
                "variable_assignment" => self.assignment_word(child),
                _ => words::word(child, self.src),
            });
        }
        if sensitive {
            let pattern = join(&words);
            let always = format!("{} *", words.first().map(|w| w.value.as_str()).unwrap_or_default());
            self.push_command(pattern, always, words, Vec::new());
        }
    }

    /// A heredoc body expands like a double-quoted string unless its delimiter is quoted. tree-sitter
    /// finds its `$(…)` but not its backticks, so those are read here.
    fn heredoc_body(&mut self, node: Node, depth: usize) {
        let start = node.parent().and_then(|p| named_children(p).find(|c| c.kind() == "heredoc_start"));
        let quoted = start.is_some_and(|s| node_text(s, self.src).contains(['\'', '"', '\\']));
        if quoted {
            return;
        }
        self.children(node, depth);
        // tree-sitter leaves backticks (and the text around its first expansion) as plain content:
        // read the body with the expansions it found blanked out.
        let body = node_text(node, self.src);
        let mut plain = body.to_string();
        for child in named_children(node).filter(|c| c.kind() != "heredoc_content") {
            let start = child.start_byte().saturating_sub(node.start_byte());
            let end = child.end_byte().saturating_sub(node.start_byte());
            if let Some(range) = plain.get(start..end) {
                let blank = " ".repeat(range.len());
                plain.replace_range(start..end, &blank);
            }
        }
        self.backticks_in(node, &plain);
    }

    /// Parses the backtick substitutions of `text`, which tree-sitter did not (a heredoc body, a word).
    fn backticks_in(&mut self, node: Node, text: &str) {
        match backtick_scripts(text) {
            Some(scripts) => {
                for script in scripts {
                    self.nested(&script);
                }
            }
            None => push_unparsed(self.out, node_text(node, self.src), self.dirs.clone()),
        }
    }

    /// Parses a script string found in the script (`bash -c`, `eval`, backticks in a heredoc).
    fn nested(&mut self, script: &str) {
        analyse_into(script, self.nesting + 1, self.dirs.clone(), self.out);
    }

    /// Turns an invocation into its command, then the commands it runs.
    fn emit(&mut self, invocation: Invocation) {
        let Invocation { mut env, mut words, redirects, stdin, source } = invocation;
        // A wrapper's command may start with assignments (`sudo FOO=1 rm x`).
        while words.len() > 1 && words[0].is_literal() && wrappers::assignment_name(&words[0].value).is_some()
        {
            env.push(words.remove(0));
        }
        let Some(name) = words.first() else { return };
        if name.form != Form::Literal {
            self.out.push(Command { redirects, ..Command::unreadable(&source, words, self.dirs.clone()) });
            return;
        }
        let name = words::command_name(&name.value).to_string();
        words[0].value.clone_from(&name);
        let kept: Vec<Word> = env
            .into_iter()
            .filter(|w| wrappers::assignment_name(&w.value).is_some_and(wrappers::changes_what_runs))
            .collect();
        let values: Vec<String> = words.iter().map(|w| w.value.clone()).collect();
        let prefix: Vec<&str> = kept.iter().map(|w| w.value.as_str()).collect();
        let pattern =
            prefix.iter().copied().chain(values.iter().map(String::as_str)).collect::<Vec<_>>().join(" ");
        let always = prefix
            .iter()
            .copied()
            .chain(arity::prefix(&values).iter().map(String::as_str))
            .chain(["*"])
            .collect::<Vec<_>>()
            .join(" ");
        let moves_only =
            NOT_ASKED.contains(&name.as_str()) && words[1..].iter().all(|w| w.is_literal() && w.value != "-");
        self.out.push(Command {
            pattern,
            always,
            words: words.clone(),
            redirects,
            dirs: self.dirs.clone(),
            check: if moves_only { Check::PathsOnly } else { Check::Bash },
        });
        if matches!(name.as_str(), "cd" | "pushd") && moves_only {
            self.change_dir(&words[1..]);
        }
        for inner in wrappers::inner(&words) {
            match inner {
                Inner::Command { env, words } => {
                    let source =
                        env.iter().chain(&words).map(|w| w.source.as_str()).collect::<Vec<_>>().join(" ");
                    self.emit(Invocation { env, words, redirects: Vec::new(), stdin: stdin.clone(), source });
                }
                Inner::Script(script) if script.is_literal() => self.nested(&script.value),
                Inner::Script(_) => {
                    self.out.push(Command::unreadable(&source, Vec::new(), self.dirs.clone()))
                }
                // A heredoc or here-string fed to a shell: its text (with any expansion left as written,
                // which reads as an unreadable command) is the script.
                Inner::Stdin => {
                    if let Some(input) = &stdin {
                        self.nested(&input.value);
                    }
                }
            }
        }
    }

    fn change_dir(&mut self, args: &[Word]) {
        let target = args.iter().find(|w| !w.value.starts_with('-'));
        match target {
            Some(dir) if dir.value.starts_with('/') => self.dirs = vec![dir.value.clone()],
            Some(dir) => self.dirs.push(dir.value.clone()),
            None => self.dirs = vec!["~".to_string()],
        }
    }

    fn push_command(&mut self, pattern: String, always: String, words: Vec<Word>, redirects: Vec<Word>) {
        self.out.push(Command {
            pattern,
            always,
            words,
            redirects,
            dirs: self.dirs.clone(),
            check: Check::Bash,
        });
    }
}

fn join(words: &[Word]) -> String {
    words.iter().map(|w| w.value.as_str()).collect::<Vec<_>>().join(" ")
}

fn named_children<'t>(node: Node<'t>) -> impl Iterator<Item = Node<'t>> {
    (0..node.named_child_count()).filter_map(move |i| node.named_child(i as u32))
}

fn children_by_field<'t>(node: Node<'t>, field: &'static str) -> Vec<Node<'t>> {
    let mut cursor = node.walk();
    node.children_by_field_name(field, &mut cursor).collect()
}

/// The scripts of the backtick substitutions in expanding text (a heredoc body); `None` when a backtick
/// is not closed.
fn backtick_scripts(text: &str) -> Option<Vec<String>> {
    let mut scripts = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, current.as_mut()) {
            ('\\', Some(script)) => {
                // Inside backticks, `\` escapes `$`, `` ` `` and `\`.
                match chars.next() {
                    Some(next @ ('$' | '`' | '\\')) => script.push(next),
                    Some(next) => {
                        script.push('\\');
                        script.push(next);
                    }
                    None => return None,
                }
            }
            ('\\', None) => {
                chars.next();
            }
            ('`', Some(_)) => scripts.extend(current.take()),
            ('`', None) => current = Some(String::new()),
            (c, Some(script)) => script.push(c),
            (_, None) => {}
        }
    }
    current.is_none().then_some(scripts)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
