//! The replacement strategies of `edit` (reference §8.3 edit), tried in order. Each yields candidate
//! spans of the file that the model's `oldString` may have meant; the first candidate that occurs exactly
//! once (or at all, with `replaceAll`) wins.

use crate::text::levenshtein;

/// Why a replacement could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReplaceError {
    NotFound,
    /// The first text found occurs more than once: the 1-based lines where each occurrence starts.
    Multiple {
        lines: Vec<usize>,
    },
    Disproportionate,
}

/// Lines listed in a "several matches" error, at most.
const LISTED_MATCHES: usize = 10;

impl ReplaceError {
    /// What the model reads: what went wrong and the next thing to try.
    pub(crate) fn message(&self) -> String {
        match self {
            Self::NotFound => "Could not find oldString in the file. It must match exactly, including whitespace, \
                 indentation, and line endings. Read the file again and copy the lines as they are now, without \
                 the `N: ` line-number prefixes."
                .to_string(),
            Self::Multiple { lines } => {
                let mut listed: Vec<String> = lines.iter().take(LISTED_MATCHES).map(usize::to_string).collect();
                if lines.len() > LISTED_MATCHES {
                    listed.push("…".into());
                }
                format!(
                    "Found {} matches for oldString, starting at lines {}. Add surrounding lines to oldString so \
                     that it matches only the place you mean, or set replaceAll to true to replace every match.",
                    lines.len(),
                    listed.join(", ")
                )
            }
            Self::Disproportionate => "Found only an approximate match for oldString that spans far more of the \
                 file than oldString itself; refusing to replace it. Provide oldString exactly as it appears in \
                 the file."
                .to_string(),
        }
    }
}

/// The 1-based line where each occurrence of `needle` in `content` starts.
fn match_lines(content: &str, needle: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut line, mut counted) = (1, 0);
    for (at, _) in content.match_indices(needle) {
        line += content[counted..at].matches('\n').count();
        counted = at;
        lines.push(line);
    }
    lines
}

type Strategy = fn(&str, &str) -> Vec<String>;

/// Strategies in the order they are tried.
pub(crate) const STRATEGIES: &[(&str, Strategy)] = &[
    ("exact", exact),
    ("line-trimmed", line_trimmed),
    ("block-anchor", block_anchor),
    ("whitespace-normalized", whitespace_normalized),
    ("indentation-flexible", indentation_flexible),
    ("escape-normalized", escape_normalized),
    ("trimmed-boundary", trimmed_boundary),
    ("context-aware", context_aware),
];

/// Middle-line similarity a block-anchor candidate needs.
const BLOCK_ANCHOR_SIMILARITY: f64 = 0.65;
/// Share of middle lines a context-aware candidate must match exactly.
const CONTEXT_MATCH_RATIO: f64 = 0.5;

/// Replaces `old` with `new` in `content`.
pub(crate) fn replace(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<String, ReplaceError> {
    let mut found: Option<Vec<usize>> = None;
    let mut oversized = false;
    for (_, strategy) in STRATEGIES {
        for candidate in strategy(content, old) {
            if candidate.is_empty() {
                continue;
            }
            let Some(index) = content.find(&candidate) else { continue };
            if is_disproportionate(&candidate, old) {
                oversized = true;
                continue;
            }
            let new = reindent(new, old, &candidate);
            if replace_all {
                return Ok(content.replace(&candidate, &new));
            }
            if content.rfind(&candidate) != Some(index) {
                found.get_or_insert_with(|| match_lines(content, &candidate));
                continue;
            }
            return Ok(format!("{}{new}{}", &content[..index], &content[index + candidate.len()..]));
        }
    }
    Err(match (found, oversized) {
        (Some(lines), _) => ReplaceError::Multiple { lines },
        (None, true) => ReplaceError::Disproportionate,
        (None, false) => ReplaceError::NotFound,
    })
}

/// A fuzzy match found `candidate` where the model wrote `old`: `new` moves by the same indentation, so a
/// model that got the indentation wrong does not write its mistake into the file. Lines of `new` keep
/// their indentation relative to `old`'s. A `new` already at the block's indentation (only `old` was
/// off) is left as it is.
fn reindent(new: &str, old: &str, candidate: &str) -> String {
    let (from, to) = (common_indent(old), common_indent(candidate));
    if from == to || common_indent(new) == to {
        return new.to_string();
    }
    split_lines(new)
        .iter()
        .map(|line| {
            if line.trim().is_empty() {
                return (*line).to_string();
            }
            let rest = line.strip_prefix(from).unwrap_or_else(|| line.trim_start_matches([' ', '\t']));
            format!("{to}{rest}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The leading spaces and tabs every non-blank line of `text` starts with.
fn common_indent(text: &str) -> &str {
    let mut lines = split_lines(text).into_iter().filter(|l| !l.trim().is_empty());
    let Some(first) = lines.next() else { return "" };
    let mut indent = &first[..first.len() - first.trim_start_matches([' ', '\t']).len()];
    for line in lines {
        let shared = indent.bytes().zip(line.bytes()).take_while(|(a, b)| a == b).count();
        // Spaces and tabs are ASCII, so `shared` is a char boundary.
        indent = &indent[..shared];
    }
    indent
}

/// A fuzzy match much larger than what the model wrote is more likely wrong than right.
fn is_disproportionate(candidate: &str, old: &str) -> bool {
    let (cand_lines, old_lines) = (candidate.lines().count(), old.lines().count().max(1));
    if cand_lines >= (old_lines + 3).max(2 * old_lines) {
        return true;
    }
    let (cand_chars, old_chars) = (candidate.chars().count(), old.chars().count());
    old_lines > 1 && cand_chars > (old_chars + 500).max(4 * old_chars)
}

fn split_lines(text: &str) -> Vec<&str> {
    text.split('\n').collect()
}

/// Search lines without a trailing empty line (a final newline in `oldString`).
fn search_lines(find: &str) -> Vec<&str> {
    let mut lines = split_lines(find);
    if lines.len() > 1 && lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// Every window of `n` consecutive lines, joined back into text.
fn windows(lines: &[&str], n: usize) -> impl Iterator<Item = String> {
    lines.windows(n.max(1)).map(|w| w.join("\n"))
}

fn exact(_content: &str, find: &str) -> Vec<String> {
    vec![find.to_string()]
}

/// Lines equal after trimming each.
fn line_trimmed(content: &str, find: &str) -> Vec<String> {
    let lines = split_lines(content);
    let search = search_lines(find);
    lines
        .windows(search.len())
        .filter(|w| w.iter().zip(&search).all(|(a, b)| a.trim() == b.trim()))
        .map(|w| w.join("\n"))
        .collect()
}

/// At least three lines; first and last equal after trimming; a block of about the same length whose
/// middle lines are similar enough. Only the most similar block is offered.
fn block_anchor(content: &str, find: &str) -> Vec<String> {
    let search = search_lines(find);
    if search.len() < 3 {
        return Vec::new();
    }
    let lines = split_lines(content);
    let (first, last) = (search[0].trim(), search[search.len() - 1].trim());
    let slack = (search.len() / 4).max(1);
    let mut best: Option<(f64, String)> = None;
    for start in 0..lines.len() {
        if lines[start].trim() != first {
            continue;
        }
        let min_end = start + search.len().saturating_sub(slack + 1).max(2);
        let max_end = (start + search.len() - 1 + slack).min(lines.len().saturating_sub(1));
        for end in min_end..=max_end {
            if lines.get(end).is_none_or(|l| l.trim() != last) {
                continue;
            }
            let block = &lines[start..=end];
            let score = middle_similarity(block, &search);
            if score >= BLOCK_ANCHOR_SIMILARITY && best.as_ref().is_none_or(|(s, _)| score > *s) {
                best = Some((score, block.join("\n")));
            }
        }
    }
    best.map(|(_, block)| vec![block]).unwrap_or_default()
}

fn middle_similarity(block: &[&str], search: &[&str]) -> f64 {
    let pairs: Vec<(&str, &str)> = block[1..block.len() - 1]
        .iter()
        .zip(&search[1..search.len() - 1])
        .map(|(a, b)| (a.trim(), b.trim()))
        .collect();
    if pairs.is_empty() {
        return 1.0;
    }
    let total: f64 = pairs
        .iter()
        .map(|(a, b)| {
            let longest = a.chars().count().max(b.chars().count());
            if longest == 0 { 1.0 } else { 1.0 - levenshtein(a, b) as f64 / longest as f64 }
        })
        .sum();
    total / pairs.len() as f64
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Equal once runs of whitespace are collapsed: whole lines, a span inside one line, or a block of lines.
fn whitespace_normalized(content: &str, find: &str) -> Vec<String> {
    let wanted = collapse_whitespace(find);
    if wanted.is_empty() {
        return Vec::new();
    }
    let lines = split_lines(content);
    let words: Vec<&str> = find.split_whitespace().collect();
    let mut out = Vec::new();
    for line in &lines {
        let collapsed = collapse_whitespace(line);
        if collapsed == wanted {
            out.push(line.to_string());
        } else if collapsed.contains(&wanted)
            && let Some(span) = find_words(line, &words)
        {
            out.push(span.to_string());
        }
    }
    let n = split_lines(find).len();
    if n > 1 {
        out.extend(windows(&lines, n).filter(|block| collapse_whitespace(block) == wanted));
    }
    out
}

/// The first span of `line` made of `words` separated by whitespace.
fn find_words<'a>(line: &'a str, words: &[&str]) -> Option<&'a str> {
    let first = words.first()?;
    for (start, _) in line.match_indices(first) {
        let mut pos = start + first.len();
        let mut ok = true;
        for word in &words[1..] {
            let rest = &line[pos..];
            let trimmed = rest.trim_start();
            if trimmed.len() == rest.len() || !trimmed.starts_with(word) {
                ok = false;
                break;
            }
            pos += rest.len() - trimmed.len() + word.len();
        }
        if ok {
            return Some(&line[start..pos]);
        }
    }
    None
}

fn strip_common_indent(text: &str) -> String {
    let lines = split_lines(text);
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    // Indentation is counted in ASCII spaces and tabs, so `indent` is a char boundary of every line.
    lines
        .iter()
        .map(|l| if l.trim().is_empty() { *l } else { l.get(indent..).unwrap_or(l) })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Equal once the common indentation of each side is removed.
fn indentation_flexible(content: &str, find: &str) -> Vec<String> {
    let wanted = strip_common_indent(find);
    let lines = split_lines(content);
    windows(&lines, split_lines(find).len()).filter(|block| strip_common_indent(block) == wanted).collect()
}

/// `\n`, `\t`, quotes, backslashes and `$` written escaped, as models do inside JSON strings.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(e @ ('\'' | '"' | '`' | '\\' | '\n' | '$')) => out.push(e),
            _ => {
                out.push(c);
                continue;
            }
        }
        chars.next();
    }
    out
}

fn escape_normalized(content: &str, find: &str) -> Vec<String> {
    let wanted = unescape(find);
    let mut out = Vec::new();
    if content.contains(&wanted) {
        out.push(wanted.clone());
    }
    let lines = split_lines(content);
    out.extend(windows(&lines, split_lines(&wanted).len()).filter(|block| unescape(block) == wanted));
    out
}

/// `oldString` with leading/trailing blank space removed.
fn trimmed_boundary(content: &str, find: &str) -> Vec<String> {
    let trimmed = find.trim();
    if trimmed == find {
        return Vec::new();
    }
    let mut out = Vec::new();
    if content.contains(trimmed) {
        out.push(trimmed.to_string());
    }
    let lines = split_lines(content);
    out.extend(windows(&lines, split_lines(find).len()).filter(|block| block.trim() == trimmed));
    out
}

/// First and last lines as anchors, same line count, and at least half of the non-empty middle lines equal
/// after trimming.
fn context_aware(content: &str, find: &str) -> Vec<String> {
    let search = search_lines(find);
    if search.len() < 3 {
        return Vec::new();
    }
    let lines = split_lines(content);
    let (first, last) = (search[0].trim(), search[search.len() - 1].trim());
    let mut out = Vec::new();
    for block in lines.windows(search.len()) {
        if block[0].trim() != first || block[block.len() - 1].trim() != last {
            continue;
        }
        let middle = block[1..block.len() - 1].iter().zip(&search[1..search.len() - 1]);
        let (mut compared, mut equal) = (0usize, 0usize);
        for (a, b) in middle {
            if !a.trim().is_empty() || !b.trim().is_empty() {
                compared += 1;
                equal += usize::from(a.trim() == b.trim());
            }
        }
        if compared == 0 || equal as f64 / compared as f64 >= CONTEXT_MATCH_RATIO {
            out.push(block.join("\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name of the first strategy that yields a usable candidate.
    fn winner(content: &str, find: &str) -> Option<&'static str> {
        STRATEGIES
            .iter()
            .find(|(_, s)| s(content, find).iter().any(|c| !c.is_empty() && content.contains(c.as_str())))
            .map(|(name, _)| *name)
    }

    #[test]
    fn exact_match_replaces_once() {
        assert_eq!(replace("a b c", "b", "X", false), Ok("a X c".to_string()));
    }

    #[test]
    fn line_trimmed_ignores_indentation_differences() {
        let content = "fn main() {\n    let x = 1;\n    let y = 2;\n}\n";
        let find = "let x = 1;\nlet y = 2;";
        assert_eq!(winner(content, find), Some("line-trimmed"));
        assert_eq!(
            replace(content, find, "let z = 3;", false),
            Ok("fn main() {\n    let z = 3;\n}\n".to_string())
        );
    }

    #[test]
    fn a_fuzzy_replacement_takes_the_indentation_of_the_matched_block() {
        let content = "impl A {\n\tfn a() {\n\t\tone();\n\t}\n}\n";
        // The model lost the tabs; its replacement nests one level deeper than its oldString.
        let find = "fn a() {\n    one();\n}";
        let new = "fn a() {\n    one();\n\n    two();\n}";
        assert_eq!(
            replace(content, find, new, false),
            Ok("impl A {\n\tfn a() {\n\t    one();\n\n\t    two();\n\t}\n}\n".to_string())
        );
        // Indented too far: moved back to the block's column.
        let content = "fn main() {\n    let x = 1;\n}\n";
        assert_eq!(
            replace(content, "        let x = 1;", "        let x = 2;\n        let y = 3;", false),
            Ok("fn main() {\n    let x = 2;\n    let y = 3;\n}\n".to_string())
        );
        // An exact match is written as given.
        assert_eq!(replace("a\n  b\n", "  b", "c", false), Ok("a\nc\n".to_string()));
    }

    #[test]
    fn block_anchor_tolerates_a_changed_middle() {
        let content = "start\nfn a() {\n    one();\n    two_point_five();\n}\nend";
        let find = "fn a() {\n    one();\n    two_point_five(x);\n}";
        assert_eq!(winner(content, find), Some("block-anchor"));
        assert_eq!(replace(content, find, "gone", false), Ok("start\ngone\nend".to_string()));
    }

    #[test]
    fn block_anchor_rejects_dissimilar_middles() {
        let content = "fn a() {\n    completely();\n    different();\n}";
        let find = "fn a() {\n    xyz();\n    qqq();\n}";
        assert!(block_anchor(content, find).is_empty());
    }

    #[test]
    fn whitespace_normalized_matches_collapsed_runs() {
        let content = "let  x =   1;\n";
        assert_eq!(winner(content, "let x = 1;"), Some("whitespace-normalized"));
        assert_eq!(replace(content, "let x = 1;", "let x = 2;", false), Ok("let x = 2;\n".to_string()));
        assert_eq!(find_words("call(a,   b) // c", &["a,", "b)"]), Some("a,   b)"));
    }

    #[test]
    fn indentation_flexible_matches_reindented_blocks() {
        let content = "    if x:\n        y()\n    z";
        let find = "if x:\n    y()";
        // line-trimmed comes first and also matches this; indentation-flexible alone must too.
        assert_eq!(indentation_flexible(content, find), vec!["    if x:\n        y()".to_string()]);
    }

    #[test]
    fn escape_normalized_unescapes_the_search() {
        let content = "print(\"a\tb\")\n";
        let find = "print(\\\"a\\tb\\\")";
        assert_eq!(winner(content, find), Some("escape-normalized"));
        assert_eq!(replace(content, find, "ok", false), Ok("ok\n".to_string()));
    }

    #[test]
    fn trimmed_boundary_drops_surrounding_blank_space() {
        assert_eq!(trimmed_boundary("x = 1\ny = 2", "\n  y = 2  \n"), vec!["y = 2".to_string()]);
    }

    #[test]
    fn context_aware_needs_half_the_middle() {
        let content = "begin\n  a\n  b\n  c\n  d\nend";
        let find = "begin\na\nb\nX\nY\nend";
        assert_eq!(context_aware(content, find), vec![content.to_string()]);
        assert!(context_aware(content, "begin\nP\nQ\nR\nd\nend").is_empty());
    }

    #[test]
    fn multiple_matches_need_replace_all() {
        assert_eq!(replace("x x", "x", "y", false), Err(ReplaceError::Multiple { lines: vec![1, 1] }));
        assert_eq!(match_lines("a\nx\nb\nx\n\nx", "x"), vec![2, 4, 6]);
        assert_eq!(replace("x x", "x", "y", true), Ok("y y".to_string()));
    }

    #[test]
    fn missing_text_is_not_found() {
        assert_eq!(replace("abc", "zzz", "y", false), Err(ReplaceError::NotFound));
    }

    #[test]
    fn oversized_fuzzy_matches_are_refused() {
        let middle = "x\n".repeat(10);
        let content = format!("head\n{middle}tail");
        // whitespace-normalized over a single collapsed line cannot produce this, but a 3-line search
        // anchored on head/tail could only match a 12-line block: refused as disproportionate.
        assert!(is_disproportionate(&content, "head\nx\ntail"));
    }

    #[test]
    fn unicode_indentation_does_not_panic() {
        let content = "\u{3000}x\n  y\n";
        let _ = replace(content, "  x\n\u{3000}y", "z", false);
        let _ = indentation_flexible(content, "\u{3000}x\n  y");
    }
}
