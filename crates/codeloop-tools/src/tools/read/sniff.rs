//! Recognising what a file is before reading it as text: images and PDFs by magic bytes, binaries by
//! extension or content; and the base64 encoding for attachments.

use std::path::Path;

/// Extensions that are never text.
const BINARY_EXTENSIONS: &[&str] = &[
    "7z", "a", "bin", "bz2", "class", "dat", "dll", "doc", "docx", "dylib", "exe", "gz", "iso", "jar", "lib",
    "o", "obj", "odp", "ods", "odt", "ppt", "pptx", "pyc", "pyo", "so", "tar", "war", "wasm", "xls", "xlsx",
    "xz", "zip", "zst",
];

/// The MIME type of an image or PDF recognised by its first bytes.
pub(crate) fn media_type(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else if head.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

/// Whether a file is binary: a known binary extension, a NUL byte, or more than 30 % control characters in
/// its first bytes (`head`, up to 4 KiB).
pub(crate) fn is_binary(path: &Path, head: &[u8]) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    if ext.is_some_and(|e| BINARY_EXTENSIONS.contains(&e.as_str())) {
        return true;
    }
    if head.is_empty() {
        return false;
    }
    if head.contains(&0) {
        return true;
    }
    let control = head.iter().filter(|&&b| b < 9 || (b > 13 && b < 32)).count();
    control * 10 > head.len() * 3
}

/// Standard base64 with padding.
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextets = [(n >> 18) & 63, (n >> 12) & 63, (n >> 6) & 63, n & 63];
        for (i, s) in sextets.iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[*s as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    #[test]
    fn binary_detection() {
        assert!(is_binary(Path::new("a.zip"), b"text"));
        assert!(is_binary(Path::new("a"), b"ab\0cd"));
        assert!(is_binary(Path::new("a"), &[1, 2, 3, b'a']));
        assert!(!is_binary(Path::new("a.rs"), b"fn main() {}\n\t\r\n"));
        assert!(!is_binary(Path::new("empty"), b""));
    }

    #[test]
    fn media_types_by_magic() {
        assert_eq!(media_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(media_type(b"RIFF\0\0\0\0WEBPVP8"), Some("image/webp"));
        assert_eq!(media_type(b"hello"), None);
    }
}
