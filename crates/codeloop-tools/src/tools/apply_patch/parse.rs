//! Parser for the patch envelope (`*** Begin Patch` … `*** End Patch`) with add, delete and update hunks,
//! `*** Move to:`, `@@` chunks and `*** End of File`. Lenient where models commonly slip and the intent
//! is unambiguous: surrounding whitespace, a heredoc wrapper, unified-diff `@@ -a,b +c,d @@` headers, and a
//! remark or different case after a marker that takes no argument (`*** End of File (optional)`,
//! `*** end patch`).

/// One file operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hunk {
    Add { path: String, contents: String },
    Delete { path: String },
    Update { path: String, move_to: Option<String>, chunks: Vec<Chunk> },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Chunk {
    /// The line after `@@ `, located before the chunk's old lines.
    pub context: Option<String>,
    pub old_lines: Vec<String>,
    pub new_lines: Vec<String>,
    /// The chunk is anchored at the end of the file.
    pub end_of_file: bool,
}

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
const ADD: &str = "*** Add File: ";
const DELETE: &str = "*** Delete File: ";
const UPDATE: &str = "*** Update File: ";
const MOVE: &str = "*** Move to: ";
const EOF_MARKER: &str = "*** End of File";

/// Whether `line` is the marker `marker` (one that takes no argument): exactly, in another case, or
/// followed by a remark that does not continue a word (`*** End Patch (end)`, `*** End of File.`).
fn is_marker(line: &str, marker: &str) -> bool {
    let line = line.trim();
    let Some(head) = line.get(..marker.len()) else { return false };
    head.eq_ignore_ascii_case(marker) && !line[marker.len()..].starts_with(char::is_alphanumeric)
}

/// Parses a whole patch.
pub(crate) fn parse(text: &str) -> Result<Vec<Hunk>, String> {
    let lines: Vec<&str> = text.lines().map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let begin = lines.iter().position(|l| is_marker(l, BEGIN)).ok_or(
        "The first line of the patch must be '*** Begin Patch': start the patch text with that line",
    )?;
    let end = lines
        .iter()
        .rposition(|l| is_marker(l, END))
        .ok_or("The last line of the patch must be '*** End Patch': add that line after the last change")?;
    if end <= begin {
        return Err(
            "'*** End Patch' must come after '*** Begin Patch': put the changes between the two".into()
        );
    }
    let body = &lines[begin + 1..end];
    let mut hunks = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let line = body[i].trim_end();
        if line.trim().is_empty() {
            i += 1;
        } else if let Some(path) = line.strip_prefix(ADD) {
            i += 1;
            let mut contents = String::new();
            while let Some(added) = body.get(i).and_then(|l| l.strip_prefix('+')) {
                contents.push_str(added);
                contents.push('\n');
                i += 1;
            }
            hunks.push(Hunk::Add { path: path.trim().to_string(), contents });
        } else if let Some(path) = line.strip_prefix(DELETE) {
            hunks.push(Hunk::Delete { path: path.trim().to_string() });
            i += 1;
        } else if let Some(path) = line.strip_prefix(UPDATE) {
            let path = path.trim().to_string();
            i += 1;
            let move_to = body.get(i).and_then(|l| l.strip_prefix(MOVE)).map(|p| p.trim().to_string());
            if move_to.is_some() {
                i += 1;
            }
            let (chunks, next) = parse_chunks(body, i, &path)?;
            if chunks.is_empty() {
                return Err(format!("Update file hunk for path '{path}' is empty"));
            }
            i = next;
            hunks.push(Hunk::Update { path, move_to, chunks });
        } else {
            return Err(format!(
                "'{line}' is not a valid hunk header. Start each file's section with one of \
                 '*** Add File: PATH', '*** Delete File: PATH' or '*** Update File: PATH', and begin every \
                 line of an added file with +"
            ));
        }
    }
    Ok(hunks)
}

/// Chunks of an update hunk starting at `start`; returns them and the index of the next hunk header.
fn parse_chunks(body: &[&str], start: usize, path: &str) -> Result<(Vec<Chunk>, usize), String> {
    let mut chunks = Vec::new();
    let mut current: Option<Chunk> = None;
    let mut i = start;
    while let Some(&line) = body.get(i) {
        if is_marker(line, EOF_MARKER) {
            let mut chunk = current.take().unwrap_or_default();
            chunk.end_of_file = true;
            chunks.push(chunk);
            i += 1;
            continue;
        }
        if line.starts_with("*** ") {
            break;
        }
        if let Some(header) = line.strip_prefix("@@") {
            if let Some(chunk) = current.take().filter(|c| !is_empty(c)) {
                chunks.push(chunk);
            }
            current = Some(Chunk { context: chunk_context(header), ..Chunk::default() });
            i += 1;
            continue;
        }
        let chunk = current.get_or_insert_with(Chunk::default);
        match line.chars().next() {
            None => {
                chunk.old_lines.push(String::new());
                chunk.new_lines.push(String::new());
            }
            Some(' ') => {
                chunk.old_lines.push(line[1..].to_string());
                chunk.new_lines.push(line[1..].to_string());
            }
            Some('-') => chunk.old_lines.push(line[1..].to_string()),
            Some('+') => chunk.new_lines.push(line[1..].to_string()),
            Some('\\') => {} // "\ No newline at end of file"
            Some(_) => {
                return Err(format!(
                    "Unexpected line in update hunk for '{path}': '{line}'. Start every line of a change with \
                     ' ' (unchanged context), '-' (removed) or '+' (added), and each change with an '@@' line"
                ));
            }
        }
        i += 1;
    }
    if let Some(chunk) = current.filter(|c| !is_empty(c)) {
        chunks.push(chunk);
    }
    Ok((chunks, i))
}

fn is_empty(chunk: &Chunk) -> bool {
    chunk.old_lines.is_empty() && chunk.new_lines.is_empty() && chunk.context.is_none()
}

/// The context after `@@`: none for a bare `@@` or a unified-diff range header.
fn chunk_context(header: &str) -> Option<String> {
    let text = header.trim();
    let is_range = text.starts_with('-') && text.contains('+');
    if text.is_empty() || is_range { None } else { Some(text.to_string()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_hunk_kind() {
        let patch = "*** Begin Patch\n*** Add File: new.txt\n+hello\n+world\n*** Delete File: old.txt\n\
                     *** Update File: src/a.rs\n*** Move to: src/b.rs\n@@ fn main\n ctx\n-old\n+new\n*** End of File\n*** End Patch";
        let hunks = parse(patch).expect("parses");
        assert_eq!(
            hunks,
            vec![
                Hunk::Add { path: "new.txt".into(), contents: "hello\nworld\n".into() },
                Hunk::Delete { path: "old.txt".into() },
                Hunk::Update {
                    path: "src/a.rs".into(),
                    move_to: Some("src/b.rs".into()),
                    chunks: vec![Chunk {
                        context: Some("fn main".into()),
                        old_lines: vec!["ctx".into(), "old".into()],
                        new_lines: vec!["ctx".into(), "new".into()],
                        end_of_file: true,
                    }],
                },
            ]
        );
    }

    #[test]
    fn first_chunk_may_omit_its_header_and_range_headers_carry_no_context() {
        let hunks =
            parse("*** Begin Patch\n*** Update File: a\n-x\n+y\n@@ -3,2 +3,2 @@\n-p\n+q\n*** End Patch")
                .expect("parses");
        let Hunk::Update { chunks, .. } = &hunks[0] else { panic!("update expected") };
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks[1].context, None);
    }

    #[test]
    fn markers_take_a_trailing_remark_or_another_case() {
        let patch = "*** Begin Patch (start)\n*** Update File: a\n@@\n-x\n+y\n*** End of File (optional)\n*** end patch (end)";
        let hunks = parse(patch).expect("parses");
        let Hunk::Update { chunks, .. } = &hunks[0] else { panic!("update expected") };
        assert!(chunks[0].end_of_file);
        assert!(is_marker("*** End Patch.", END));
        assert!(!is_marker("*** End Patchwork", END), "a longer word is not the marker");
        assert!(!is_marker("*** End", END));
    }

    #[test]
    fn rejects_bad_envelopes_and_headers() {
        assert!(parse("*** Update File: a\n").is_err());
        assert!(parse("*** Begin Patch\n*** Frobnicate: a\n*** End Patch").is_err());
        assert!(parse("*** Begin Patch\n*** Update File: a\n*** End Patch").is_err());
    }
}
