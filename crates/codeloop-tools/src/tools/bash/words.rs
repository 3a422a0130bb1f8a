//! Words of a command as the shell sees them before it runs the command: quotes and escapes removed when
//! the word is fully literal (`\rm`, `'rm'`, `r""m` and `$'r\x6d'` are all `rm`), else the word's source
//! text. Nothing here expands variables or globs; a word that needs the shell to know its value says so.

use tree_sitter::Node;

/// One word of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The value after quote removal, or the source text when the value is only known at run time.
    pub value: String,
    /// The word's text in the script.
    pub source: String,
    pub form: Form,
}

/// How much of a word's value is known before the shell runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// The value is exactly `value`.
    Literal,
    /// `value` holds unquoted glob or brace characters the shell may expand (`*.txt`, `r{m,}`).
    Glob,
    /// Holds an expansion (`$X`, `$(…)`, `$((…))`): `value` is the source text.
    Dynamic,
}

impl Word {
    /// A literal word that is not in the script (the `rm` that `find -delete` stands for).
    pub(crate) fn synthetic(value: &str) -> Self {
        Self { value: value.to_string(), source: value.to_string(), form: Form::Literal }
    }

    /// Literal words joined the way the shell joins `eval`'s arguments; dynamic if any part is.
    pub(crate) fn joined(words: &[Word]) -> Self {
        let value = words.iter().map(|w| w.value.as_str()).collect::<Vec<_>>().join(" ");
        let source = words.iter().map(|w| w.source.as_str()).collect::<Vec<_>>().join(" ");
        let form = if words.iter().any(|w| w.form == Form::Dynamic) {
            Form::Dynamic
        } else if words.iter().any(|w| w.form == Form::Glob) {
            Form::Glob
        } else {
            Form::Literal
        };
        let value = if form == Form::Dynamic { source.clone() } else { value };
        Self { value, source, form }
    }

    pub(crate) fn is_literal(&self) -> bool {
        self.form == Form::Literal
    }
}

/// The word a syntax node stands for.
pub(crate) fn word(node: Node, src: &str) -> Word {
    let source = node_text(node, src).to_string();
    match literal(node, src) {
        Some((value, glob)) => Word { value, source, form: if glob { Form::Glob } else { Form::Literal } },
        None => Word { value: source.clone(), source, form: Form::Dynamic },
    }
}

pub(crate) fn node_text<'s>(node: Node, src: &'s str) -> &'s str {
    src.get(node.byte_range()).unwrap_or_default()
}

/// The value of a word without expansions, and whether it holds unquoted glob characters.
fn literal(node: Node, src: &str) -> Option<(String, bool)> {
    let raw = node_text(node, src);
    match node.kind() {
        // A `$` or backtick left inside a word is an expansion tree-sitter did not take apart.
        "word" | "number" if node.child_count() == 0 && !has_unescaped(raw, &['`', '$']) => {
            Some(unquoted(raw))
        }
        "raw_string" => Some((raw.strip_prefix('\'')?.strip_suffix('\'')?.to_string(), false)),
        "string" => {
            let mut cursor = node.walk();
            let plain = node.children(&mut cursor).all(|c| matches!(c.kind(), "\"" | "string_content"));
            let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
            plain.then(|| (double_quoted(inner), false))
        }
        "ansi_c_string" => Some((ansi_c(raw.strip_prefix("$'")?.strip_suffix('\'')?)?, false)),
        "translated_string" | "command_name" => literal(node.named_child(0)?, src),
        "concatenation" => {
            let mut cursor = node.walk();
            let mut value = String::new();
            let mut glob = false;
            for child in node.children(&mut cursor) {
                let (part, part_glob) = literal(child, src)?;
                value.push_str(&part);
                glob |= part_glob;
            }
            Some((value, glob))
        }
        _ => None,
    }
}

/// Whether `raw` holds one of `chars` not escaped by a backslash (a trailing `$` expands to itself).
fn has_unescaped(raw: &str, chars: &[char]) -> bool {
    let mut it = raw.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '\\' => {
                it.next();
            }
            '$' if it.peek().is_none() => {}
            c if chars.contains(&c) => return true,
            _ => {}
        }
    }
    false
}

/// Removes backslash escapes from unquoted text; notes unescaped glob and brace characters.
fn unquoted(raw: &str) -> (String, bool) {
    let mut value = String::with_capacity(raw.len());
    let mut glob = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(escaped) => value.push(escaped),
            },
            '*' | '?' | '{' => {
                glob = true;
                value.push(c);
            }
            '[' if raw != "[" && raw != "[[" => {
                glob = true;
                value.push(c);
            }
            _ => value.push(c),
        }
    }
    (value, glob)
}

/// Removes the escapes that double quotes honour (`\"`, `\\`, `\$`, `` \` ``, backslash-newline).
fn double_quoted(inner: &str) -> String {
    let mut value = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('\n') => {
                    chars.next();
                    continue;
                }
                Some(&next @ ('"' | '\\' | '$' | '`')) => {
                    chars.next();
                    value.push(next);
                    continue;
                }
                _ => {}
            }
        }
        value.push(c);
    }
    value
}

/// Decodes the body of `$'…'`; `None` for escapes it does not know (then the word counts as dynamic).
fn ansi_c(inner: &str) -> Option<String> {
    let mut value = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            value.push(c);
            continue;
        }
        let escaped = chars.next()?;
        let decoded = match escaped {
            'n' => '\n',
            't' => '\t',
            'r' => '\r',
            'a' => '\x07',
            'b' => '\x08',
            'e' | 'E' => '\x1b',
            'f' => '\x0c',
            'v' => '\x0b',
            '\\' | '\'' | '"' | '?' => escaped,
            'x' | 'u' | 'U' | '0'..='7' => {
                let (radix, max) = match escaped {
                    'x' => (16, 2),
                    'u' => (16, 4),
                    'U' => (16, 8),
                    _ => (8, 2),
                };
                let mut digits = if radix == 8 { escaped.to_string() } else { String::new() };
                while digits.len() < max + usize::from(radix == 8)
                    && chars.peek().is_some_and(|d| d.is_digit(radix))
                {
                    digits.extend(chars.next());
                }
                char::from_u32(u32::from_str_radix(&digits, radix).ok()?)?
            }
            _ => return None,
        };
        value.push(decoded);
    }
    Some(value)
}

/// A command name as the permission rules see it: a name given by absolute path (`/bin/rm`, `~/bin/rm`)
/// is reduced to its basename; a relative path (`./x`, project scripts) stays as written.
pub(crate) fn command_name(value: &str) -> &str {
    if value.starts_with('/') || (value.starts_with('~') && value.contains('/')) {
        match value.rsplit('/').next() {
            Some(base) if !base.is_empty() => base,
            _ => value,
        }
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_c_strings_decode() {
        assert_eq!(ansi_c(r"r\x6d").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"\162m").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"r\u006d").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"a\'b\n").as_deref(), Some("a'b\n"));
        assert_eq!(ansi_c(r"\cA"), None);
    }

    #[test]
    fn unquoted_text_loses_escapes_and_notes_globs() {
        assert_eq!(unquoted(r"\rm"), ("rm".to_string(), false));
        assert_eq!(unquoted(r"\*.txt"), ("*.txt".to_string(), false));
        assert_eq!(unquoted("*.txt"), ("*.txt".to_string(), true));
        assert_eq!(unquoted("["), ("[".to_string(), false));
        assert_eq!(double_quoted(r#"a\"b\$c\d"#), r#"a"b$c\d"#);
    }

    #[test]
    fn absolute_command_names_reduce_to_their_basename() {
        assert_eq!(command_name("/bin/rm"), "rm");
        assert_eq!(command_name("/usr/local/bin/git"), "git");
        assert_eq!(command_name("~/bin/rm"), "rm");
        assert_eq!(command_name("./rm"), "./rm");
        assert_eq!(command_name("bin/rm"), "bin/rm");
        assert_eq!(command_name("/"), "/");
    }
}
