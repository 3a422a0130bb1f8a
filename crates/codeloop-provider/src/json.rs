//! Lenient field readers for stream chunks: OpenAI-compatible servers disagree on types (a `reasoning`
//! that is sometimes an object, `arguments` sent as an object), and one odd field must not fail a chunk.
//!
//! Owns: `deserialize_with` helpers. Must not: know which format uses them.

use std::borrow::Cow;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A string field; any other JSON type (object, number, null…) reads as absent. Borrows from the
/// input when the string has no escapes.
pub(crate) fn text<'de, D>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_any(TextVisitor { mode: Mode::Text })
}

/// Message content: a string, or (Mistral and others) a list of parts whose `text` parts are joined.
pub(crate) fn content<'de, D>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_any(TextVisitor { mode: Mode::Parts })
}

/// Tool-call arguments: a string as is, an object or array as its JSON text.
pub(crate) fn arguments<'de, D>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error>
where
    D: Deserializer<'de>,
{
    deserializer.deserialize_any(TextVisitor { mode: Mode::Json })
}

/// What a non-string value reads as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Absent.
    Text,
    /// Its JSON text.
    Json,
    /// The joined `text` of a list of content parts.
    Parts,
}

struct TextVisitor {
    mode: Mode,
}

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v)))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        if self.mode == Mode::Json {
            let value: serde_json::Value =
                serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
            return Ok(Some(Cow::Owned(value.to_string())));
        }
        let _: IgnoredAny = serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        match self.mode {
            Mode::Json => {
                let value: serde_json::Value =
                    serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                return Ok(Some(Cow::Owned(value.to_string())));
            }
            Mode::Parts => {
                let parts: Vec<serde_json::Value> =
                    serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
                let text: String = parts
                    .iter()
                    .filter(|p| p.get("type").is_none_or(|t| t == "text"))
                    .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
                    .collect();
                return Ok(Some(Cow::Owned(text)));
            }
            Mode::Text => {}
        }
        let _: IgnoredAny = serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(None)
    }
}

/// A token count: a non-negative integer; anything else (null, negative, a float) reads as absent.
pub(crate) fn count<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: Deserializer<'de>,
{
    let value: serde_json::Value = serde::Deserialize::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::Number(n) => {
            n.as_u64().or_else(|| n.as_f64().filter(|f| f.is_finite() && *f >= 0.0).map(|f| f as u64))
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Probe<'a> {
        #[serde(default, borrow, deserialize_with = "text")]
        t: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "arguments")]
        a: Option<Cow<'a, str>>,
        #[serde(default, deserialize_with = "count")]
        n: Option<u64>,
        #[serde(default, borrow, deserialize_with = "content")]
        c: Option<Cow<'a, str>>,
    }

    #[test]
    fn odd_types_read_as_absent_or_json() {
        let p: Probe = serde_json::from_str(r#"{"t":{"x":1},"a":{"k":[1,2]},"n":-3}"#).unwrap();
        assert_eq!(p.t, None);
        assert_eq!(p.a.as_deref(), Some(r#"{"k":[1,2]}"#));
        assert_eq!(p.n, None);
        let p: Probe = serde_json::from_str(r#"{"t":"a\"b","a":"{}","n":12}"#).unwrap();
        assert_eq!(p.t.as_deref(), Some("a\"b"));
        assert_eq!(p.a.as_deref(), Some("{}"));
        assert_eq!(p.n, Some(12));
        let p: Probe = serde_json::from_str(
            r#"{"c":[{"type":"thinking","thinking":[]},{"type":"text","text":"Hel"},{"text":"lo"}]}"#,
        )
        .unwrap();
        assert_eq!(p.c.as_deref(), Some("Hello"));
    }
}
