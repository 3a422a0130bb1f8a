//! Rendering for `read`: numbered text lines with the 2000-char line cut and 50 KiB cap, and paginated
//! directory listings. A file is streamed, never read whole: what is read is bounded by what is returned.

use std::path::Path;

use std::io::{BufRead, BufReader};

use super::super::io_failure;
use crate::ToolFailure;
use crate::text::cut_chars;

const MAX_LINE_CHARS: usize = 2000;
const LINE_CUT_SUFFIX: &str = "... (line truncated to 2000 chars)";
const MAX_BYTES: usize = 50 * 1024;
const PREVIEW_LINES: usize = 20;

pub(crate) struct Rendered {
    pub text: String,
    pub preview: String,
    pub truncated: bool,
}

/// Bytes kept of one line: room for [`MAX_LINE_CHARS`] characters of up to 4 bytes, plus 3 so a
/// character split by the cap always comes after them. The rest of a longer line is skipped unstored.
const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4 + 3;
/// After the last line returned, how many more bytes are scanned to count the lines left (the "of N"
/// total); a longer rest is announced without a total. Keeps the work bounded by the output, not by
/// the size of the file (a 2 GiB sparse file is not read to the end).
const COUNT_AHEAD_BYTES: usize = 1 << 20;
/// How much of a returned line past its kept bytes is skipped to reach the next line. A longer line
/// (say, a 2 GiB run of NUL bytes in a sparse file) ends the page: it is shown cut, and the next page
/// starts after it.
const LONG_LINE_SKIP: usize = 1 << 20;
/// Read buffer: large enough that a long skip is a few hundred reads.
const READ_BUFFER: usize = 64 * 1024;

/// Lines `offset..offset+limit` (1-based) of a text file. Streams the file: reads up to the last line
/// returned (each line stored up to [`MAX_LINE_BYTES`], skipped up to [`LONG_LINE_SKIP`] more) plus at
/// most [`COUNT_AHEAD_BYTES`]. Only lines before `offset` are skipped whatever their length.
pub(crate) async fn read_lines(path: &Path, offset: usize, limit: usize) -> Result<Rendered, ToolFailure> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_lines_blocking(&owned, offset, limit))
        .await
        .map_err(|e| ToolFailure::Failed(format!("Failed to read {}: {e}", path.display())))?
}

fn read_lines_blocking(path: &Path, offset: usize, limit: usize) -> Result<Rendered, ToolFailure> {
    let fail = |e: std::io::Error| io_failure("read", path, &e);
    let file = std::fs::File::open(path).map_err(fail)?;
    let mut reader = BufReader::with_capacity(READ_BUFFER, file);
    let mut raw = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut bytes = 0usize;
    let mut capped = false;
    let mut unfinished = false;
    while kept.len() < limit {
        let skip = if total + 1 < offset { usize::MAX } else { LONG_LINE_SKIP };
        let Some(read) = next_line(&mut reader, &mut raw, skip).map_err(fail)? else { break };
        total += 1;
        if total < offset {
            continue;
        }
        let long = !matches!(read, LineRead::Whole { cut: false });
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches('\r');
        let line = match cut_chars(line, MAX_LINE_CHARS) {
            (cut, true) => format!("{cut}{LINE_CUT_SUFFIX}"),
            (whole, false) if long => format!("{whole}{LINE_CUT_SUFFIX}"),
            (whole, false) => whole.to_string(),
        };
        let size = line.len() + usize::from(!kept.is_empty());
        if bytes + size > MAX_BYTES {
            capped = true;
            break;
        }
        bytes += size;
        kept.push(line);
        if matches!(read, LineRead::Unfinished) {
            unfinished = true;
            break;
        }
    }
    // Lines after the page: counted (not stored) for the footer, within a budget.
    let rest = if capped || unfinished { None } else { count_rest(&mut reader).map_err(fail)? };
    let more = capped || unfinished || rest != Some(0);
    total += rest.unwrap_or(0);
    if total < offset && !(total == 0 && offset == 1) {
        return Err(ToolFailure::Failed(format!(
            "Offset {offset} is out of range for this file ({total} lines)"
        )));
    }
    let last = offset + kept.len() - usize::from(!kept.is_empty());
    let numbered: Vec<String> =
        kept.iter().enumerate().map(|(i, line)| format!("{}: {line}", i + offset)).collect();
    let mut text =
        format!("<path>{}</path>\n<type>file</type>\n<content>\n{}", path.display(), numbered.join("\n"));
    let next = last + 1;
    if capped {
        text.push_str(&format!(
            "\n\n(Output capped at 50 KB. Showing lines {offset}-{last}. Use offset={next} to continue.)"
        ));
    } else if rest.is_none() {
        text.push_str(&format!("\n\n(Showing lines {offset}-{last}. Use offset={next} to continue.)"));
    } else if more {
        text.push_str(&format!(
            "\n\n(Showing lines {offset}-{last} of {total}. Use offset={next} to continue.)"
        ));
    } else {
        text.push_str(&format!("\n\n(End of file - total {total} lines)"));
    }
    text.push_str("\n</content>");
    let preview = preview_of(kept.iter().take(PREVIEW_LINES));
    Ok(Rendered { text, preview, truncated: more })
}

/// How [`next_line`] left a line.
enum LineRead {
    /// The line ended (newline or end of file); `cut` if it was longer than what was kept.
    Whole { cut: bool },
    /// Longer than what was kept plus the skip allowed: the reader is still inside it.
    Unfinished,
}

/// The next line into `line` without its `\n`, at most [`MAX_LINE_BYTES`] of it, skipping at most
/// `skip` more bytes to reach its end; `None` at the end of the file.
fn next_line(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    skip: usize,
) -> std::io::Result<Option<LineRead>> {
    line.clear();
    let mut started = false;
    let mut skipped = 0usize;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(started.then_some(LineRead::Whole { cut: skipped > 0 }));
        }
        started = true;
        let end = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..end.unwrap_or(buf.len())];
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        let keep = chunk.len().min(room);
        line.extend_from_slice(&chunk[..keep]);
        skipped = skipped.saturating_add(chunk.len() - keep);
        let used = end.map_or(buf.len(), |i| i + 1);
        reader.consume(used);
        if end.is_some() {
            return Ok(Some(LineRead::Whole { cut: skipped > 0 }));
        }
        if skipped > skip {
            return Ok(Some(LineRead::Unfinished));
        }
    }
}

/// Lines left in `reader`, or `None` if more than [`COUNT_AHEAD_BYTES`] are left.
fn count_rest(reader: &mut impl BufRead) -> std::io::Result<Option<usize>> {
    let mut lines = 0;
    let mut scanned = 0;
    let mut open_line = false;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(Some(lines + usize::from(open_line)));
        }
        if scanned >= COUNT_AHEAD_BYTES {
            return Ok(None);
        }
        lines += buf.iter().filter(|&&b| b == b'\n').count();
        open_line = buf.last() != Some(&b'\n');
        scanned += buf.len();
        let n = buf.len();
        reader.consume(n);
    }
}

/// Entries of a directory, sorted, `/` after directories (and links to them), `offset..offset+limit`.
pub(crate) async fn list_directory(
    path: &Path,
    offset: usize,
    limit: usize,
) -> Result<Rendered, ToolFailure> {
    let mut reader = tokio::fs::read_dir(path).await.map_err(|e| io_failure("list", path, &e))?;
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry().await.map_err(|e| io_failure("list", path, &e))? {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = match entry.file_type().await {
            Ok(t) if t.is_symlink() => tokio::fs::metadata(entry.path()).await.is_ok_and(|m| m.is_dir()),
            Ok(t) => t.is_dir(),
            Err(_) => false,
        };
        entries.push(if is_dir { format!("{name}/") } else { name });
    }
    entries.sort();
    let start = offset - 1;
    let mut bytes = 0;
    let page: Vec<String> = entries
        .iter()
        .skip(start)
        .take(limit)
        .take_while(|name| {
            bytes += name.len() + 1;
            bytes <= MAX_BYTES
        })
        .cloned()
        .collect();
    let truncated = start + page.len() < entries.len();
    let footer = if truncated {
        format!(
            "(Showing entries {offset}-{} of {}. Use offset={} to continue.)",
            start + page.len(),
            entries.len(),
            start + page.len() + 1
        )
    } else {
        format!("({} entries)", entries.len())
    };
    let text = format!(
        "<path>{}</path>\n<type>directory</type>\n<entries>\n{}\n\n{footer}\n</entries>",
        path.display(),
        page.join("\n")
    );
    let preview = preview_of(page.iter().take(PREVIEW_LINES));
    Ok(Rendered { text, preview, truncated })
}

/// Characters of the preview kept in metadata: it is for displays, and it is stored with every read, so
/// it stays short instead of repeating the output.
const PREVIEW_CHARS: usize = 500;

fn preview_of<'a>(lines: impl Iterator<Item = &'a String>) -> String {
    crate::text::ellipsize(&lines.map(String::as_str).collect::<Vec<_>>().join("\n"), PREVIEW_CHARS)
}
