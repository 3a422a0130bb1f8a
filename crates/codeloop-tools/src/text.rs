//! Text helpers shared by the file-changing tools: byte-order marks, line endings, unified diffs.

use std::path::Path;

use similar::{ChangeTag, TextDiff};

use crate::ToolFailure;
use crate::tools::io_failure;

const BOM: char = '\u{feff}';

/// File text split into its byte-order mark and the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileText {
    pub bom: bool,
    pub text: String,
}

impl FileText {
    pub(crate) fn parse(raw: String) -> Self {
        match raw.strip_prefix(BOM) {
            Some(rest) => Self { bom: true, text: rest.to_string() },
            None => Self { bom: false, text: raw },
        }
    }

    /// The text to write back: `text` with the BOM restored when the file had one.
    pub(crate) fn render(bom: bool, text: &str) -> String {
        let text = text.strip_prefix(BOM).unwrap_or(text);
        if bom { format!("{BOM}{text}") } else { text.to_string() }
    }
}

/// The line ending a file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineEnding {
    Lf,
    CrLf,
}

impl LineEnding {
    pub(crate) fn detect(text: &str) -> Self {
        if text.contains("\r\n") { Self::CrLf } else { Self::Lf }
    }

    /// Converts `text` (any endings) to this ending.
    pub(crate) fn apply(self, text: &str) -> String {
        let lf = to_lf(text);
        match self {
            Self::Lf => lf,
            Self::CrLf => lf.replace('\n', "\r\n"),
        }
    }
}

pub(crate) fn to_lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// Reads a file that will be changed in place, `None` when it does not exist. A file that is not UTF-8
/// is refused: its text would be decoded lossily and written back with every invalid byte replaced.
pub(crate) async fn read_for_edit(path: &Path) -> Result<Option<FileText>, ToolFailure> {
    let bytes = match tokio::fs::read(path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_failure("read", path, &e)),
    };
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(FileText::parse(text))),
        Err(e) => Err(not_utf8(path, e.utf8_error().valid_up_to(), e.as_bytes())),
    }
}

fn not_utf8(path: &Path, offset: usize, bytes: &[u8]) -> ToolFailure {
    let byte = bytes.get(offset).copied().unwrap_or_default();
    ToolFailure::Failed(format!(
        "{} is not UTF-8 text (byte 0x{byte:02X} at offset {offset}; Latin-1 or another legacy encoding?). \
         This tool would rewrite those bytes, so it leaves the file alone; edit it with bash (e.g. sed), \
         which keeps the bytes it does not change",
        path.display()
    ))
}

/// Reads a file as text for showing it (invalid UTF-8 replaced), `None` when it does not exist. Never
/// for text that is written back: see [`read_for_edit`].
pub(crate) async fn read_optional(path: &Path) -> std::io::Result<Option<FileText>> {
    match tokio::fs::read(path).await {
        Ok(bytes) => Ok(Some(FileText::parse(String::from_utf8_lossy(&bytes).into_owned()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A unified diff of two texts (line endings normalised), with `path` in both headers.
pub(crate) fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let (old, new) = (to_lf(old), to_lf(new));
    TextDiff::from_lines(&old, &new).unified_diff().context_radius(3).header(path, path).to_string()
}

/// Lines added and removed between two texts.
pub(crate) fn count_changes(old: &str, new: &str) -> (usize, usize) {
    let (old, new) = (to_lf(old), to_lf(new));
    let diff = TextDiff::from_lines(&old, &new);
    diff.iter_all_changes().fold((0, 0), |(add, del), change| match change.tag() {
        ChangeTag::Insert => (add + 1, del),
        ChangeTag::Delete => (add, del + 1),
        ChangeTag::Equal => (add, del),
    })
}

/// Cuts `text` to at most `max` bytes on a char boundary.
pub(crate) fn cut_at_byte(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The first `max` chars of `text`, and whether anything was cut.
pub fn cut_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((idx, _)) => (&text[..idx], true),
        None => (text, false),
    }
}

/// `text` in at most `max` chars: cut ones end with "…".
pub fn ellipsize(text: &str, max: usize) -> String {
    match cut_chars(text, max) {
        (whole, false) => whole.to_owned(),
        (_, true) => format!("{}…", cut_chars(text, max.saturating_sub(1)).0.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ellipsize_keeps_short_text_and_marks_a_cut() {
        assert_eq!(ellipsize("short", 10), "short");
        assert_eq!(ellipsize("ünïcödé text", 6), "ünïcö…");
        assert_eq!(ellipsize("ünïcödé text", 6).chars().count(), 6);
    }

    #[test]
    fn bom_is_split_and_restored() {
        let parsed = FileText::parse("\u{feff}hello".to_string());
        assert!(parsed.bom);
        assert_eq!(parsed.text, "hello");
        assert_eq!(FileText::render(true, "x"), "\u{feff}x");
        assert_eq!(FileText::render(false, "\u{feff}x"), "x");
    }

    #[test]
    fn line_endings_convert() {
        assert_eq!(LineEnding::detect("a\r\nb"), LineEnding::CrLf);
        assert_eq!(LineEnding::CrLf.apply("a\nb\r\nc"), "a\r\nb\r\nc");
        assert_eq!(LineEnding::Lf.apply("a\r\nb"), "a\nb");
    }

    #[test]
    fn diff_counts_changes() {
        assert_eq!(count_changes("a\nb\nc\n", "a\nB\nc\nd\n"), (2, 1));
        let diff = unified_diff("f.txt", "a\n", "b\n");
        assert!(diff.starts_with("--- f.txt\n+++ f.txt\n@@"), "{diff}");
    }

    #[test]
    fn cuts_respect_char_boundaries() {
        assert_eq!(cut_at_byte("héllo", 2), "h");
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(cut_chars("hé", 2), ("hé", false));
    }
}

/// Edit distance between two strings, in chars.
pub(crate) fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.is_empty() || b.is_empty() {
        return a.len().max(b.len());
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod levenshtein_tests {
    use super::levenshtein;

    #[test]
    fn distances() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("same", "same"), 0);
    }
}

/// A suffix for temp file names, unique within this process and unlikely to repeat across processes.
pub(crate) fn random_suffix() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{}-{n}-{nanos:08x}", std::process::id())
}
