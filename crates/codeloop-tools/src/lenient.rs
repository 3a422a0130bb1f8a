//! Lenient decoding for scalar arguments models often send in the wrong JSON type: `"120000"` or
//! `120000.0` for an integer, `"true"` for a boolean, `""` for an optional text left out. The schema still
//! says integer/boolean/string.

use serde::{Deserialize, Deserializer, de::Error};
use serde_json::Value;

/// An optional non-negative integer given as a number, an integral float or a numeric string.
pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_u64(), n.as_f64()) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(f)) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
            _ => Err(D::Error::custom(format!("expected a non-negative integer, got {n}"))),
        },
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("expected a non-negative integer, got \"{s}\""))),
        Some(other) => Err(D::Error::custom(format!("expected a non-negative integer, got {other}"))),
    }
}

/// An optional text argument where `""` (what models send for "not given") is absent.
pub fn opt_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.filter(|text| !text.trim().is_empty()))
}

/// [`opt_u64`] as a `usize`.
pub(crate) fn opt_usize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<usize>, D::Error> {
    opt_u64(deserializer)?.map(|v| usize::try_from(v).map_err(D::Error::custom)).transpose()
}

/// An optional boolean given as a boolean or `"true"`/`"false"`.
pub(crate) fn opt_bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(b)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(Value::String(s)) if s.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(other) => Err(D::Error::custom(format!("expected a boolean, got {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, Debug, PartialEq)]
    struct P {
        #[serde(default, deserialize_with = "super::opt_u64")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "super::opt_bool")]
        b: Option<bool>,
    }

    fn p(v: serde_json::Value) -> Result<P, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn accepts_near_miss_types() {
        assert_eq!(p(json!({"n": 5, "b": true})).unwrap(), P { n: Some(5), b: Some(true) });
        assert_eq!(p(json!({"n": "7", "b": "false"})).unwrap(), P { n: Some(7), b: Some(false) });
        assert_eq!(p(json!({"n": 3.0})).unwrap(), P { n: Some(3), b: None });
        assert_eq!(p(json!({})).unwrap(), P { n: None, b: None });
        assert_eq!(p(json!({"n": null})).unwrap(), P { n: None, b: None });
    }

    #[test]
    fn rejects_real_mistakes() {
        assert!(p(json!({"n": -1})).is_err());
        assert!(p(json!({"n": 1.5})).is_err());
        assert!(p(json!({"n": "many"})).is_err());
        assert!(p(json!({"b": 1})).is_err());
    }
}
