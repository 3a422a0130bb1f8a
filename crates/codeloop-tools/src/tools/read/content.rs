//! Rendering for `read`: numbered text lines with the 2000-char line cut and 50 KiB cap, and paginated
//! directory listings.

use std::path::Path;

use tokio::io::{AsyncBufReadExt, BufReader};

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

/// Lines `offset..offset+limit` (1-based) of a text file.
pub(crate) async fn read_lines(path: &Path, offset: usize, limit: usize) -> Result<Rendered, ToolFailure> {
    let file = tokio::fs::File::open(path).await.map_err(|e| io_failure("read", path, &e))?;
    let mut reader = BufReader::new(file);
    let mut raw = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    let mut total = 0usize;
    let mut bytes = 0usize;
    let mut more = false;
    let mut capped = false;
    loop {
        raw.clear();
        let n = reader.read_until(b'\n', &mut raw).await.map_err(|e| io_failure("read", path, &e))?;
        if n == 0 {
            break;
        }
        total += 1;
        if total < offset {
            continue;
        }
        if kept.len() >= limit {
            more = true;
            continue;
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches('\n').trim_end_matches('\r');
        let line = match cut_chars(line, MAX_LINE_CHARS) {
            (cut, true) => format!("{cut}{LINE_CUT_SUFFIX}"),
            (whole, false) => whole.to_string(),
        };
        let size = line.len() + usize::from(!kept.is_empty());
        if bytes + size > MAX_BYTES {
            capped = true;
            more = true;
            break;
        }
        bytes += size;
        kept.push(line);
    }
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
