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

/// The template's pieces with its arguments in (DESIGN.md §5j "Commands"): `` !`cmd` `` and `@path` are
/// found in the template as written, then `$ARGUMENTS` (the arguments as given) and `$1`…`$9` (the N-th
/// word, empty when there is none) are filled in — as text in text, as one shell-quoted word inside a
/// template's `` !`cmd` ``. Nothing an argument holds is run or inlined: an `@path` whose path takes a
/// placeholder stays text. A template with no placeholder gets the arguments after a blank line, as text.
pub fn fill(template: &str, arguments: &str) -> Vec<Piece> {
    let arguments = arguments.trim();
    let words = split_args(arguments);
    let values = Values { all: arguments, words: &words };
    let mut placeholders = false;
    let mut out: Vec<Piece> = pieces(template)
        .into_iter()
        .map(|piece| match piece {
            Piece::Text(text) => {
                Piece::Text(values.substitute(&text, &mut placeholders, |v, _| v.to_owned()))
            }
            Piece::Shell(command) => Piece::Shell(values.substitute(&command, &mut placeholders, shell_word)),
            Piece::File(path) if has_placeholder(&path) => {
                Piece::Text(format!("@{}", values.substitute(&path, &mut placeholders, |v, _| v.to_owned())))
            }
            file @ Piece::File(_) => file,
        })
        .collect();
    if !placeholders && !arguments.is_empty() {
        if let Some(Piece::Text(last)) = out.last_mut() {
            last.truncate(last.trim_end().len());
        }
        out.push(Piece::Text(format!("\n\n{arguments}")));
    }
    out
}

/// The arguments a template's placeholders take.
struct Values<'a> {
    all: &'a str,
    words: &'a [String],
}

impl Values<'_> {
    /// `text` with each placeholder replaced by `put(value, quoting at that place)`.
    fn substitute(&self, text: &str, placeholders: &mut bool, put: impl Fn(&str, Quote) -> String) -> String {
        let mut out = String::with_capacity(text.len() + self.all.len());
        let mut quote = Quote::None;
        // A backslash of the template's own (outside single quotes) escapes the next character.
        let mut escaped = false;
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            let value = if c != '$' {
                None
            } else if let Some(tail) = rest[1..].strip_prefix("ARGUMENTS") {
                Some((self.all, tail))
            } else if let Some(digit) = rest[1..].chars().next().filter(|c| ('1'..='9').contains(c)) {
                let index = digit as usize - '1' as usize;
                Some((self.words.get(index).map_or("", String::as_str), &rest[2..]))
            } else {
                None
            };
            match value {
                Some((value, tail)) => {
                    *placeholders = true;
                    out.push_str(&put(value, quote));
                    escaped = false;
                    rest = tail;
                }
                None => {
                    quote = quote.after(c, escaped);
                    escaped = c == '\\' && !escaped && quote != Quote::Single;
                    out.push(c);
                    rest = &rest[c.len_utf8()..];
                }
            }
        }
        out
    }
}

fn has_placeholder(text: &str) -> bool {
    text.contains("$ARGUMENTS")
        || text.as_bytes().windows(2).any(|w| w[0] == b'$' && (b'1'..=b'9').contains(&w[1]))
}

/// Where a placeholder stands in a shell command: which quotes it is inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Single,
    Double,
}

impl Quote {
    /// The quoting after character `c` (`escaped`: a backslash came before it).
    fn after(self, c: char, escaped: bool) -> Quote {
        match (self, c) {
            (Quote::None, '\'') if !escaped => Quote::Single,
            (Quote::None, '"') if !escaped => Quote::Double,
            (Quote::Single, '\'') => Quote::None,
            (Quote::Double, '"') if !escaped => Quote::None,
            (quote, _) => quote,
        }
    }
}

/// `value` as one shell word that nothing in it can break out of, for where it stands.
fn shell_word(value: &str, quote: Quote) -> String {
    match quote {
        Quote::None => format!("'{}'", value.replace('\'', "'\\''")),
        Quote::Single => value.replace('\'', "'\\''"),
        Quote::Double => {
            let mut out = String::with_capacity(value.len());
            for c in value.chars() {
                if matches!(c, '\\' | '"' | '$' | '`') {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
    }
}

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `` !`cmd` ``: the command.
    Shell(String),
    /// `@path`: the path as written.
    File(String),
}

/// Splits a template into text, shell parts and file references. `@` counts at the start of
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

/// At most [`MAX_FILE_BYTES`] + 1 bytes of a regular file (the one more says it was cut): a FIFO would
/// block, a device or a huge sparse file would never end. Opened without blocking, then checked on the
/// open handle, so nothing swapped in after the check is read.
fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_NOCTTY.bits())
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1).read_to_end(&mut bytes)?;
    Ok(bytes)
}

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
    let bytes = match read_bounded(&real) {
        Ok(bytes) => bytes,
        Err(e) => return format!("[@{path} left out: {e}]"),
    };
    let mut bytes = bytes;
    let cut = bytes.len() > MAX_FILE_BYTES;
    bytes.truncate(MAX_FILE_BYTES);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // Cut in the middle of a character: what is whole is kept.
        Err(e) if cut && e.utf8_error().error_len().is_none() => {
            let whole = e.utf8_error().valid_up_to();
            String::from_utf8_lossy(&e.into_bytes()[..whole]).into_owned()
        }
        Err(_) => return format!("[@{path} left out: it is not a text file]"),
    };
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
    fn arguments_are_data_whatever_they_hold() {
        // Pasted into an argument, neither a command nor a file reference is found.
        assert_eq!(
            fill("Fix issue: $ARGUMENTS", "!`touch /tmp/pwned` and @/etc/passwd"),
            [Piece::Text("Fix issue: !`touch /tmp/pwned` and @/etc/passwd".into())]
        );
        assert_eq!(
            fill("Review the change.", "!`id` @~/.ssh/id_rsa"),
            [Piece::Text("Review the change.".into()), Piece::Text("\n\n!`id` @~/.ssh/id_rsa".into())]
        );
        // Inside a template's command, an argument is one word, in every quoting.
        assert_eq!(
            fill(
                "!`gh issue view $1` then !`grep \"$2\" x` and !`echo '$ARGUMENTS'`",
                "1; rm -rf ~ \"a$(id)`b`\""
            ),
            [
                Piece::Shell("gh issue view '1;'".into()),
                Piece::Text(" then ".into()),
                Piece::Shell("grep \"rm\" x".into()),
                Piece::Text(" and ".into()),
                Piece::Shell("echo '1; rm -rf ~ \"a$(id)`b`\"'".into()),
            ]
        );
        assert_eq!(fill("!`cat $1`", "\"it's\""), [Piece::Shell("cat 'it'\\''s'".into())]);
        assert_eq!(fill("!`echo \"$1\"`", "$(id)`x`"), [Piece::Shell("echo \"\\$(id)\\`x\\`\"".into())]);
        // An @path that takes an argument stays text.
        assert_eq!(
            fill("see @$1", "/etc/passwd"),
            [Piece::Text("see ".into()), Piece::Text("@/etc/passwd".into())]
        );
        // The template's own parts are still found.
        assert_eq!(
            fill("!`git status` @src/a.rs $1", "x"),
            [
                Piece::Shell("git status".into()),
                Piece::Text(" ".into()),
                Piece::File("src/a.rs".into()),
                Piece::Text(" x".into())
            ]
        );
    }

    /// The text of pieces that are all text.
    fn fill_arguments(template: &str, arguments: &str) -> String {
        fill(template, arguments)
            .into_iter()
            .map(|piece| match piece {
                Piece::Text(text) => text,
                other => panic!("not text: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn placeholders_are_filled_and_plain_templates_get_the_arguments_appended() {
        assert_eq!(fill_arguments("Fix $1 in $2 ($ARGUMENTS)", "12 \"a b\""), "Fix 12 in a b (12 \"a b\")");
        assert_eq!(fill_arguments("Review.\n", "x y"), "Review.\n\nx y");
        assert_eq!(fill_arguments("Review.\n", ""), "Review.\n");
        assert_eq!(fill_arguments("cost $5 $", "a"), "cost  $");
    }

    #[test]
    fn a_file_reference_reads_only_a_bounded_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Nobody writes the FIFO: reading it would wait forever.
        let out = inline_file("pipe", root, root, |_| true);
        assert_eq!(out, "[@pipe left out: it is not a regular file]");
        let big = std::fs::File::create(root.join("big.txt")).unwrap();
        big.set_len(1 << 30).unwrap();
        let out = inline_file("big.txt", root, root, |_| true);
        assert!(out.len() < MAX_FILE_BYTES + 200, "{}", out.len());
        assert!(out.ends_with("[… cut: the file is larger than 256 KiB]\n"));
        std::fs::write(root.join("a.txt"), "é".repeat(MAX_FILE_BYTES)).unwrap();
        let out = inline_file("a.txt", root, root, |_| true);
        assert!(
            out.contains("éé") && out.contains("cut"),
            "a character cut in two is not a reason to leave it out"
        );
        assert_eq!(
            inline_file("/dev/zero", root, root, |_| true),
            "[@/dev/zero left out: it is outside the project]"
        );
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
