//! Applying update chunks to a file's text: locate each chunk (context line, then its old lines) with a
//! four-pass fuzzy seek, collect the replacements, then apply them back to front.

use super::parse::Chunk;

/// The new text of a file after `chunks`. `original` may use CRLF; the result keeps its line ending.
pub(crate) fn apply_chunks(original: &str, path: &str, chunks: &[Chunk]) -> Result<String, String> {
    let crlf = original.contains("\r\n");
    let lf = original.replace("\r\n", "\n");
    let mut lines: Vec<String> = lf.split('\n').map(String::from).collect();
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, Vec<String>)> = Vec::new();
    let mut cursor = 0;
    for chunk in chunks {
        if let Some(context) = &chunk.context {
            let idx = seek(&lines, std::slice::from_ref(context), cursor, false).ok_or_else(|| {
                format!(
                    "Failed to find context '{context}' in {path}. The text after @@ must be a line of the \
                         file as it is now: read the file and copy one exactly, or write a bare @@"
                )
            })?;
            cursor = idx + 1;
        }
        if chunk.old_lines.is_empty() {
            // Pure addition: right after its `@@` context line, or at the end of the file.
            let at = if chunk.context.is_some() { cursor } else { lines.len() };
            replacements.push((at, 0, chunk.new_lines.clone()));
            cursor = at;
            continue;
        }
        let mut old: &[String] = &chunk.old_lines;
        let mut new: &[String] = &chunk.new_lines;
        let mut found = seek(&lines, old, cursor, chunk.end_of_file);
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            // A trailing blank line in the chunk often stands for the file's final newline.
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, cursor, chunk.end_of_file);
        }
        let start = found.ok_or_else(|| {
            format!(
                "Failed to find expected lines in {path}:\n{}\nThe ' ' and '-' lines must match the file as it is \
                 now: read the file again and copy them exactly",
                chunk.old_lines.join("\n")
            )
        })?;
        replacements.push((start, old.len(), new.to_vec()));
        cursor = start + old.len();
    }
    replacements.sort_by_key(|(start, _, _)| *start);
    for (start, len, new) in replacements.into_iter().rev() {
        lines.splice(start..start + len, new);
    }
    lines.push(String::new());
    let text = lines.join("\n");
    Ok(if crlf { text.replace('\n', "\r\n") } else { text })
}

/// Index where `pattern` occurs in `lines` at or after `start`: exact, then ignoring trailing whitespace,
/// then ignoring surrounding whitespace, then with Unicode punctuation normalised. An end-of-file chunk
/// is tried at the end first.
pub(crate) fn seek(lines: &[String], pattern: &[String], start: usize, end_of_file: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let passes: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| normalize(a.trim()) == normalize(b.trim()),
    ];
    let matches_at = |i: usize, eq: fn(&str, &str) -> bool| {
        lines[i..i + pattern.len()].iter().zip(pattern).all(|(a, b)| eq(a, b))
    };
    for eq in passes {
        if end_of_file && last_start >= start && matches_at(last_start, eq) {
            return Some(last_start);
        }
        if let Some(i) = (start.min(last_start + 1)..=last_start).find(|&i| matches_at(i, eq)) {
            return Some(i);
        }
    }
    None
}

/// Typographic dashes, quotes and spaces as their ASCII forms.
fn normalize(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(context: Option<&str>, old: &[&str], new: &[&str]) -> Chunk {
        Chunk {
            context: context.map(String::from),
            old_lines: old.iter().map(|s| s.to_string()).collect(),
            new_lines: new.iter().map(|s| s.to_string()).collect(),
            end_of_file: false,
        }
    }

    #[test]
    fn replaces_lines_and_keeps_the_final_newline() {
        let out = apply_chunks("a\nb\nc\n", "f", &[chunk(None, &["b"], &["B", "B2"])]);
        assert_eq!(out, Ok("a\nB\nB2\nc\n".to_string()));
    }

    #[test]
    fn context_line_disambiguates() {
        let text = "fn a() {\n  x\n}\nfn b() {\n  x\n}\n";
        let out = apply_chunks(text, "f", &[chunk(Some("fn b() {"), &["  x"], &["  y"])]);
        assert_eq!(out, Ok("fn a() {\n  x\n}\nfn b() {\n  y\n}\n".to_string()));
    }

    #[test]
    fn fuzzy_passes_find_near_matches() {
        let lines: Vec<String> = ["let s = \u{201C}hi\u{201D};  "].iter().map(|s| s.to_string()).collect();
        assert_eq!(seek(&lines, &["let s = \"hi\";".to_string()], 0, false), Some(0));
    }

    #[test]
    fn pure_additions_go_after_their_context_or_at_the_end() {
        let after_context = apply_chunks("a\nb\n", "f", &[chunk(Some("a"), &[], &["x"])]);
        assert_eq!(after_context, Ok("a\nx\nb\n".to_string()));
        let at_end = apply_chunks("a\nb\n", "f", &[chunk(None, &[], &["x"])]);
        assert_eq!(at_end, Ok("a\nb\nx\n".to_string()));
    }

    #[test]
    fn crlf_files_stay_crlf() {
        let out = apply_chunks("a\r\nb\r\n", "f", &[chunk(None, &["a"], &["A"])]);
        assert_eq!(out, Ok("A\r\nb\r\n".to_string()));
    }

    #[test]
    fn missing_lines_fail() {
        assert!(apply_chunks("a\n", "f", &[chunk(None, &["zzz"], &["y"])]).is_err());
    }
}
