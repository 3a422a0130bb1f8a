//! `file://` URIs from paths and back (LSP names every document by URI).

use std::path::{Path, PathBuf};

use lsp_types::Uri;
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

/// What a path segment must escape in a URI (RFC 3986 pchar, `/` kept as the separator).
const PATH: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The URI of an absolute path; `None` for one a URI cannot hold (not UTF-8).
pub fn from_path(path: &Path) -> Option<Uri> {
    let text = path.to_str()?;
    format!("file://{}", utf8_percent_encode(text, PATH)).parse().ok()
}

/// The path of a `file://` URI; `None` for other schemes.
pub fn to_path(uri: &Uri) -> Option<PathBuf> {
    let rest = uri.as_str().strip_prefix("file://")?;
    // `file://host/path` is not ours; `file:///path` has an empty host.
    let path = rest.strip_prefix("localhost").unwrap_or(rest);
    let decoded = percent_decode_str(path).decode_utf8().ok()?;
    Some(PathBuf::from(decoded.into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_with_spaces_and_hashes_round_trip() {
        let path = Path::new("/tmp/my project/a#b%c.py");
        let uri = from_path(path).unwrap();
        assert_eq!(uri.as_str(), "file:///tmp/my%20project/a%23b%25c.py");
        assert_eq!(to_path(&uri).unwrap(), path);
        assert!(to_path(&"https://example.com/x".parse().unwrap()).is_none());
    }
}
