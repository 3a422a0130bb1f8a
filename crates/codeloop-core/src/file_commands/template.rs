//! A command's template (DESIGN.md §5g "Exact rules"): `$ARGUMENTS`, `$1`…`$9` split as a shell would,
//! arguments appended after a blank line to a template that takes none, and the pieces the engine fills
//! in afterwards — `@path` (a file inside the project) and `` !`cmd` `` (a command's output).
//! Pure text work: reading files and running commands is the caller's.

use std::path::Path;

/// What replaces a shell part of an untrusted project's command.
pub const NOT_TRUSTED: &str = "[not run: the project is not trusted]";

/// Splits `arguments` as a shell would: blanks separate, quotes keep words together (and are removed),
/// a backslash outside single quotes takes the next character as it is.
pub fn split_args(arguments: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = arguments.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                if let Some(next) = chars.next() {
                    word.push(next);
                }
                in_word = true;
            }
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The template with its arguments in: `$ARGUMENTS` is `arguments` as given, `$N` the N-th word (empty
/// when there is none). A template with no placeholder gets the arguments after a blank line.
pub fn fill_arguments(template: &str, arguments: &str) -> String {
    let arguments = arguments.trim();
    let words = split_args(arguments);
    let mut out = String::with_capacity(template.len() + arguments.len());
    let mut placeholders = false;
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(arguments);
            placeholders = true;
            rest = tail;
        } else if let Some(digit) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
            let index = digit as usize - '1' as usize;
            out.push_str(words.get(index).map_or("", String::as_str));
            placeholders = true;
            rest = &after[1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    if !placeholders && !arguments.is_empty() {
        let body = out.trim_end();
        out = format!("{body}\n\n{arguments}");
    }
    out
}

/// A piece of a filled-in template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `` !`cmd` ``: the command.
    Shell(String),
    /// `@path`: the path as written.
    File(String),
}

/// Splits a filled-in template into text, shell parts and file references. `@` counts at the start of
/// the text or after a blank (so `me@example.com` stays text); a trailing `.`, `,`, `;`, `:`, `)` or `!`
/// ends the path.
pub fn pieces(text: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut plain = String::new();
    let mut rest = text;
    let mut after_blank = true;
    while let Some(c) = rest.chars().next() {
        if c == '!'
            && let Some(body) = rest.strip_prefix("!`")
            && let Some(end) = body.find('`')
            && !body[..end].trim().is_empty()
        {
            flush(&mut pieces, &mut plain);
            pieces.push(Piece::Shell(body[..end].trim().to_owned()));
            rest = &body[end + 1..];
            after_blank = false;
            continue;
        }
        if c == '@' && after_blank {
            let token_end = rest[1..].find(char::is_whitespace).map_or(rest.len(), |i| i + 1);
            let token = rest[1..token_end].trim_end_matches(['.', ',', ';', ':', ')', '!', '?', '"', '\'']);
            if !token.is_empty() {
                flush(&mut pieces, &mut plain);
                pieces.push(Piece::File(token.to_owned()));
                rest = &rest[1 + token.len()..];
                after_blank = false;
                continue;
            }
        }
        plain.push(c);
        after_blank = c.is_whitespace();
        rest = &rest[c.len_utf8()..];
    }
    flush(&mut pieces, &mut plain);
    pieces
}

fn flush(pieces: &mut Vec<Piece>, plain: &mut String) {
    if !plain.is_empty() {
        pieces.push(Piece::Text(std::mem::take(plain)));
    }
}

/// Files larger than this are not inlined whole.
const MAX_FILE_BYTES: usize = 256 * 1024;

/// What `@path` becomes: the file's text when it lies inside `root` (resolved from `cwd`, links
/// followed), else a note in its place. `readable` says whether the rules let the file be read without
/// asking (`*.env` files ask). A path that names nothing stays as written (an `@mention`).
pub fn inline_file(path: &str, cwd: &Path, root: &Path, readable: impl Fn(&Path) -> bool) -> String {
    let joined = cwd.join(path);
    let Ok(real) = joined.canonicalize() else { return format!("@{path}") };
    let inside = root.canonicalize().is_ok_and(|root| real.starts_with(root));
    if !inside {
        return format!("[@{path} left out: it is outside the project]");
    }
    if !readable(&real) {
        return format!("[@{path} left out: the permission rules do not let it be read without asking]");
    }
    if real.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(&real)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if e.path().is_dir() { format!("{name}/") } else { name }
                    })
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        return format!("{path}/ (directory):\n{}\n", names.join("\n"));
    }
    let bytes = match std::fs::read(&real) {
        Ok(bytes) => bytes,
        Err(e) => return format!("[@{path} left out: {e}]"),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return format!("[@{path} left out: it is not a text file]");
    };
    let mut text = text;
    let cut = text.len() > MAX_FILE_BYTES;
    if cut {
        let mut end = MAX_FILE_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    let note = if cut { "\n[… cut: the file is larger than 256 KiB]" } else { "" };
    format!("{path}:\n```\n{}\n```{note}\n", text.trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_split_as_a_shell_would() {
        assert_eq!(
            split_args(r#"one "two words" 'three "x"' fo\ ur"#),
            ["one", "two words", "three \"x\"", "fo ur"]
        );
        assert!(split_args("   ").is_empty());
    }

    #[test]
    fn placeholders_are_filled_and_plain_templates_get_the_arguments_appended() {
        assert_eq!(fill_arguments("Fix $1 in $2 ($ARGUMENTS)", "12 \"a b\""), "Fix 12 in a b (12 \"a b\")");
        assert_eq!(fill_arguments("Review.\n", "x y"), "Review.\n\nx y");
        assert_eq!(fill_arguments("Review.\n", ""), "Review.\n");
        assert_eq!(fill_arguments("cost $5 $", "a"), "cost  $");
    }

    #[test]
    fn shell_parts_and_files_are_found() {
        assert_eq!(
            pieces("see @src/a.rs. and !`git status` me@x.org"),
            [
                Piece::Text("see ".into()),
                Piece::File("src/a.rs".into()),
                Piece::Text(". and ".into()),
                Piece::Shell("git status".into()),
                Piece::Text(" me@x.org".into()),
            ]
        );
    }
}
