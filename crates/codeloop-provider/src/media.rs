//! Attached files as the wire formats want them: `data:` URLs split into media type and base64 data,
//! and the kind of media a file is.
//!
//! Owns: reading [`FileContent`]. Must not: fetch anything.

use crate::FileContent;

/// What a file is, for choosing its wire representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaKind {
    Image,
    Pdf,
    Other,
}

pub(crate) fn kind(file: &FileContent) -> MediaKind {
    let mime = file.mime.to_ascii_lowercase();
    if mime.starts_with("image/") {
        MediaKind::Image
    } else if mime == "application/pdf" {
        MediaKind::Pdf
    } else {
        MediaKind::Other
    }
}

/// The base64 payload of a `data:…;base64,` URL, with the media type it declares.
pub(crate) fn base64_data(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (header, data) = rest.split_once(',')?;
    let mime = header.strip_suffix(";base64")?;
    Some((mime, data))
}

/// The most of a text file sent as text (the rest is cut with a note).
const MAX_TEXT_FILE: usize = 256 * 1024;

/// A text file (`text/*`, JSON) sent as a `data:` URL, as text with its name — for the APIs that take no
/// text files; anything else as its [`placeholder`].
pub(crate) fn as_text(file: &FileContent) -> String {
    use base64::Engine as _;
    let mime = file.mime.to_ascii_lowercase();
    let textual = mime.starts_with("text/") || mime == "application/json";
    let decoded = textual
        .then(|| base64_data(&file.url))
        .flatten()
        .and_then(|(_, data)| base64::engine::general_purpose::STANDARD.decode(data).ok());
    let Some(bytes) = decoded else { return placeholder(file) };
    let cut = bytes.len() > MAX_TEXT_FILE;
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_TEXT_FILE)]).into_owned();
    if cut {
        text.push_str(&format!("\n[… cut: the file has {} bytes]", bytes.len()));
    }
    let name = file.filename.as_deref().unwrap_or("file");
    format!("{name}:\n```\n{}\n```", text.trim_end_matches('\n'))
}

/// The text a model gets in place of a file its API cannot take: what it was, and that it was not sent
/// (so the model does not answer as if it had seen or heard it).
pub(crate) fn placeholder(file: &FileContent) -> String {
    let what = match &file.filename {
        Some(name) => format!("{}: {name}", file.mime),
        None => file.mime.clone(),
    };
    format!("[Attached {what} — not sent: this model's API does not take this kind of file]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_file_is_sent_as_its_text_and_other_files_as_a_note() {
        let file = |mime: &str, url: &str| FileContent {
            mime: mime.into(),
            url: url.into(),
            filename: Some("notes.md".into()),
        };
        // "remember the milk\n"
        let text = file("text/markdown", "data:text/markdown;base64,cmVtZW1iZXIgdGhlIG1pbGsK");
        assert_eq!(as_text(&text), "notes.md:\n```\nremember the milk\n```");
        let zip = file("application/zip", "data:application/zip;base64,UEsDBA==");
        assert!(
            as_text(&zip).starts_with("[Attached application/zip: notes.md — not sent"),
            "{}",
            as_text(&zip)
        );
        let broken = file("text/plain", "data:text/plain;base64,***");
        assert!(as_text(&broken).starts_with("[Attached text/plain"), "a body that is not base64 is a note");
    }

    #[test]
    fn splits_data_urls() {
        assert_eq!(base64_data("data:image/png;base64,AAAA"), Some(("image/png", "AAAA")));
        assert_eq!(base64_data("https://x/y.png"), None);
        assert_eq!(base64_data("data:text/plain,hello"), None);
    }
}
