//! Output truncation and spill files (reference §8.1 "Truncation").
//!
//! An output over `max_lines` or `max_bytes` is cut to what fits; the full text goes to
//! `<tool_output_dir>/tool_<ascending id>` and the model is told where it is. Spill files older than
//! [`TOOL_OUTPUT_RETENTION`] are removed by [`sweep_tool_output`], which the engine calls periodically.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::OutputLimits;
use crate::text::cut_at_byte;

/// How long spill files are kept (reference: 7 days, hourly sweep).
pub const TOOL_OUTPUT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Which end of an over-long output to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    Head,
    Tail,
}

/// A possibly cut output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    pub content: String,
    /// Whether anything was cut.
    pub truncated: bool,
    /// Where the full text was saved, when it was cut.
    pub output_path: Option<PathBuf>,
}

/// Whether `text` exceeds either limit.
pub fn exceeds(text: &str, limits: OutputLimits) -> bool {
    text.len() > limits.max_bytes || text.lines().count() > limits.max_lines
}

/// Cuts `text` to the limits, saving the full text in `dir` when it does not fit.
pub async fn truncate_output(text: &str, limits: OutputLimits, dir: &Path, keep: Keep) -> Truncation {
    if !exceeds(text, limits) {
        return Truncation { content: text.to_string(), truncated: false, output_path: None };
    }
    let (preview, removed) = cut(text, limits, keep);
    let (path, hint) = match spill(dir, text, limits.max_saved_bytes).await {
        Ok(path) => {
            let hint = format!(
                "The tool call succeeded but the output was truncated. Full output saved to: {}\n\
                 Use Grep to search the full content or Read with offset/limit to view specific sections.",
                path.display()
            );
            (Some(path), hint)
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not save truncated tool output");
            (
                None,
                format!(
                    "The tool call succeeded but the output was truncated (the full output could not be saved: {e})."
                ),
            )
        }
    };
    let content = match keep {
        Keep::Head => format!("{preview}\n\n...{removed} truncated...\n\n{hint}"),
        Keep::Tail => format!("...{removed} truncated...\n\n{hint}\n\n{preview}"),
    };
    Truncation { content, truncated: true, output_path: path }
}

/// Writes `text` to a new spill file in `dir`: at most `cap` bytes of it, then a "cut" note.
pub(crate) async fn spill(dir: &Path, text: &str, cap: u64) -> std::io::Result<PathBuf> {
    tokio::fs::create_dir_all(dir).await?;
    let path = spill_path(dir);
    if text.len() as u64 <= cap {
        tokio::fs::write(&path, text).await?;
    } else {
        let kept = cut_at_byte(text, usize::try_from(cap).unwrap_or(usize::MAX));
        let note = format!(
            "\n\n[cut: the output was {} bytes; only the first {} are saved ([tool_output] max_saved_bytes)]\n",
            text.len(),
            kept.len()
        );
        tokio::fs::write(&path, [kept, &note].concat()).await?;
    }
    Ok(path)
}

/// A fresh spill file name in `dir`.
pub(crate) fn spill_path(dir: &Path) -> PathBuf {
    dir.join(codeloop_types::ascending_id("tool"))
}

/// Keeps whole lines from one end while both limits hold; returns the kept text and a "N lines" / "N bytes"
/// description of what was dropped.
pub(crate) fn cut(text: &str, limits: OutputLimits, keep: Keep) -> (String, String) {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0;
    let mut hit_bytes = false;
    let ordered: Box<dyn Iterator<Item = &&str>> = match keep {
        Keep::Head => Box::new(lines.iter()),
        Keep::Tail => Box::new(lines.iter().rev()),
    };
    for line in ordered.take(limits.max_lines) {
        let size = line.len() + usize::from(!kept.is_empty());
        if bytes + size > limits.max_bytes {
            hit_bytes = true;
            break;
        }
        kept.push(line);
        bytes += size;
    }
    if keep == Keep::Tail {
        kept.reverse();
    }
    let mut preview = kept.join("\n");
    if kept.is_empty() {
        // A single line longer than the byte limit: keep a slice of it rather than nothing.
        preview = match keep {
            Keep::Head => cut_at_byte(text, limits.max_bytes).to_string(),
            Keep::Tail => tail_at_byte(text, limits.max_bytes).to_string(),
        };
        bytes = preview.len();
    }
    let removed = if hit_bytes {
        format!("{} bytes", text.len().saturating_sub(bytes))
    } else {
        format!("{} lines", lines.len().saturating_sub(kept.len()))
    };
    (preview, removed)
}

fn tail_at_byte(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while start < text.len() && !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Deletes spill files (`tool_*`) in `dir` older than `max_age`; returns how many were removed. A missing
/// directory counts as empty. Blocking: call it from `spawn_blocking` on a runtime.
pub fn sweep_tool_output(dir: &Path, max_age: Duration) -> std::io::Result<usize> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with("tool_") {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let age = meta.modified().ok().and_then(|m| now.duration_since(m).ok());
        if meta.is_file()
            && age.is_some_and(|age| age > max_age)
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: OutputLimits = OutputLimits { max_lines: 3, max_bytes: 20, max_saved_bytes: 1 << 20 };

    #[test]
    fn head_cut_keeps_whole_lines_within_line_limit() {
        let (preview, removed) = cut("a\nb\nc\nd\ne", LIMITS, Keep::Head);
        assert_eq!(preview, "a\nb\nc");
        assert_eq!(removed, "2 lines");
    }

    #[test]
    fn tail_cut_keeps_the_end() {
        let (preview, removed) = cut("a\nb\nc\nd\ne", LIMITS, Keep::Tail);
        assert_eq!(preview, "c\nd\ne");
        assert_eq!(removed, "2 lines");
    }

    #[test]
    fn byte_limit_reports_bytes() {
        let text = "0123456789\n0123456789\n0123456789";
        let (preview, removed) = cut(text, LIMITS, Keep::Head);
        assert_eq!(preview, "0123456789");
        assert_eq!(removed, format!("{} bytes", text.len() - 10));
    }

    #[test]
    fn one_huge_line_keeps_a_slice() {
        let text = "x".repeat(100);
        let (preview, _) = cut(&text, LIMITS, Keep::Head);
        assert_eq!(preview.len(), 20);
    }
}
