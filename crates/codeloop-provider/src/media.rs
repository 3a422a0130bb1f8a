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
    fn splits_data_urls() {
        assert_eq!(base64_data("data:image/png;base64,AAAA"), Some(("image/png", "AAAA")));
        assert_eq!(base64_data("https://x/y.png"), None);
        assert_eq!(base64_data("data:text/plain,hello"), None);
    }
}
