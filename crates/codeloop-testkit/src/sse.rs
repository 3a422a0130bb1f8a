//! SSE chunk writing shared by the three wire formats: every event is appended to one buffer and cut into
//! `Bytes` slices at the end, so a 20 000-delta reply costs one allocation, not 20 000. Also the text
//! splitting (even split on char boundaries) and the JSON string escaping used by the delta templates.

use bytes::Bytes;
use serde_json::Value;

/// Accumulates SSE events; [`SseWriter::finish`] returns one `Bytes` per event.
#[derive(Default)]
pub(crate) struct SseWriter {
    buf: Vec<u8>,
    ends: Vec<usize>,
}

impl SseWriter {
    pub(crate) fn with_capacity(bytes: usize, events: usize) -> Self {
        SseWriter { buf: Vec::with_capacity(bytes), ends: Vec::with_capacity(events) }
    }

    /// `data: <json>\n\n`
    pub(crate) fn data(&mut self, data: &Value) {
        self.named(None, data);
    }

    /// `event: <name>\ndata: <json>\n\n` (or a data-only record when `name` is `None`).
    pub(crate) fn named(&mut self, name: Option<&str>, data: &Value) {
        if let Some(name) = name {
            self.raw("event: ");
            self.raw(name);
            self.raw("\n");
        }
        self.raw("data: ");
        self.raw(&data.to_string());
        self.raw("\n\n");
        self.end_event();
    }

    /// Appends text to the current event without ending it.
    pub(crate) fn raw(&mut self, text: &str) {
        self.buf.extend_from_slice(text.as_bytes());
    }

    /// Appends `text` as a quoted JSON string.
    pub(crate) fn json_str(&mut self, text: &str) {
        push_json_str(&mut self.buf, text);
    }

    /// Appends a decimal number.
    pub(crate) fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.buf.extend_from_slice(&digits[at..]);
    }

    /// Closes the current event (its text must already end with `\n\n`).
    pub(crate) fn end_event(&mut self) {
        self.ends.push(self.buf.len());
    }

    pub(crate) fn finish(self) -> Vec<Bytes> {
        let all = Bytes::from(self.buf);
        let mut start = 0;
        self.ends
            .into_iter()
            .map(|end| {
                let event = all.slice(start..end);
                start = end;
                event
            })
            .collect()
    }
}

/// `s` quoted and escaped as a JSON string.
pub(crate) fn json_string(text: &str) -> String {
    let mut out = Vec::with_capacity(text.len() + 2);
    push_json_str(&mut out, text);
    String::from_utf8(out).unwrap_or_default()
}

fn push_json_str(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Characters per delta when the script does not say how many deltas to send.
const AUTO_CHARS_PER_DELTA: usize = 8;

/// Splits `text` into `pieces` non-empty parts of near-equal character counts (0 = about 8 characters
/// each). Never more parts than characters; an empty text gives no parts.
pub(crate) fn split_even(text: &str, pieces: usize) -> Vec<&str> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let pieces = match pieces {
        0 => chars.div_ceil(AUTO_CHARS_PER_DELTA),
        n => n.min(chars),
    };
    let mut parts = Vec::with_capacity(pieces);
    let mut start = 0;
    let mut part = 1;
    let mut boundary = chars / pieces;
    for (count, (offset, _)) in text.char_indices().enumerate() {
        if count == boundary && part < pieces {
            parts.push(&text[start..offset]);
            start = offset;
            part += 1;
            boundary = chars * part / pieces;
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_even_covers_the_text_in_the_requested_number_of_parts() {
        let text = "héllo wörld, this is a test";
        for n in 1..=text.chars().count() {
            let parts = split_even(text, n);
            assert_eq!(parts.len(), n);
            assert_eq!(parts.concat(), text);
            assert!(parts.iter().all(|p| !p.is_empty()));
        }
        assert_eq!(split_even("abc", 10), vec!["a", "b", "c"]);
        assert_eq!(split_even("", 3), Vec::<&str>::new());
        assert_eq!(split_even("0123456789abcdefg", 0).len(), 3);
    }

    #[test]
    fn json_str_matches_serde() {
        let text = "a\"b\\c\nd\re\tf\u{1}g\u{1f}h\u{8}\u{c}é✓";
        assert_eq!(json_string(text), serde_json::to_string(text).unwrap());
    }

    #[test]
    fn writer_slices_one_bytes_per_event() {
        let mut w = SseWriter::default();
        w.data(&serde_json::json!({"a": 1}));
        w.raw("data: ");
        w.number(1234);
        w.raw("\n\n");
        w.end_event();
        let events = w.finish();
        assert_eq!(events, vec![Bytes::from("data: {\"a\":1}\n\n"), Bytes::from("data: 1234\n\n")]);
    }
}
