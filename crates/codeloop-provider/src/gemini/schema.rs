//! Tool parameter schemas rewritten into the OpenAPI subset Gemini's `functionDeclarations` accept.
//! Gemini answers 400 to a keyword its `Schema` does not know (`$schema`, `additionalProperties`,
//! `examples`, `$ref`…), to a list of types, to a string `format` other than `enum`/`date-time`, and to an
//! object with empty `properties`; built-in tool schemas are clean, but MCP servers send anything.
//!
//! Owns: that rewrite (an allow-list, as the Gemini SDKs do). Must not: loosen a schema further than
//! Gemini forces (a dropped keyword only stops constraining the model; arguments are still validated by
//! the tool).

use serde_json::{Map, Value, json};

/// Keywords copied as they are. `default` is left out: it is dropped by Gemini's older models and
/// rejected by some endpoints.
const KEPT: &[&str] = &[
    "description",
    "enum",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "nullable",
    "pattern",
    "propertyOrdering",
    "required",
    "title",
];

/// The only string formats Gemini accepts.
const STRING_FORMATS: &[&str] = &["enum", "date-time"];

/// The schema as Gemini accepts it, or `None` when nothing is left to declare (an object without
/// properties: the function then takes no parameters).
pub(crate) fn parameters(schema: &Value) -> Option<Value> {
    let schema = sanitise(schema);
    let empty = schema.get("properties").is_none() && schema.get("type").is_none_or(|t| t == "object");
    (!empty).then_some(schema)
}

/// Rewrites one schema: unknown keywords dropped, `oneOf` read as `anyOf`, a string `const` as a
/// one-value `enum`, `["T", "null"]` as `T` with `nullable`.
pub(crate) fn sanitise(schema: &Value) -> Value {
    // `true` (anything) and other non-object schemas have no Gemini equivalent: no constraint.
    let Value::Object(map) = schema else { return json!({}) };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "type" => set_type(value, &mut out),
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, property)| (name.clone(), sanitise(property)))
                    .collect();
                if !properties.is_empty() {
                    out.insert(key.clone(), Value::Object(properties));
                }
            }
            "items" => {
                out.insert(key.clone(), sanitise(value));
            }
            "anyOf" | "oneOf" => {
                if let Value::Array(options) = value {
                    out.insert("anyOf".into(), options.iter().map(sanitise).collect());
                }
            }
            "const" => {
                if let Value::String(only) = value {
                    out.insert("enum".into(), json!([only]));
                }
            }
            "format" => {
                out.insert(key.clone(), value.clone());
            }
            key if KEPT.contains(&key) => {
                out.insert(key.to_owned(), value.clone());
            }
            _ => {}
        }
    }
    if out.contains_key("enum") && !out.contains_key("type") {
        out.insert("type".into(), json!("string"));
    }
    let string = out.get("type").is_some_and(|t| t == "string");
    if out.get("format").is_some_and(|f| !(string && f.as_str().is_some_and(|f| STRING_FORMATS.contains(&f))))
    {
        // Numeric formats (`int32`, `double`) are accepted but add nothing a model needs.
        out.remove("format");
    }
    Value::Object(out)
}

/// `"type": ["string", "null"]` → `"type": "string", "nullable": true`; several non-null types become
/// an `anyOf`.
fn set_type(value: &Value, out: &mut Map<String, Value>) {
    let Value::Array(types) = value else {
        out.insert("type".into(), value.clone());
        return;
    };
    let concrete: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
    if concrete.len() < types.len() {
        out.insert("nullable".into(), json!(true));
    }
    match concrete.as_slice() {
        [] => {}
        [only] => {
            out.insert("type".into(), (*only).clone());
        }
        several => {
            out.insert("anyOf".into(), several.iter().map(|t| json!({ "type": t })).collect());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn unsupported_keywords_are_dropped_and_the_rest_rewritten() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                // Property names are not keywords: `default` and `const` here stay.
                "default": { "type": "string", "default": "x", "examples": ["y"], "format": "uri" },
                "const": { "const": "fixed" },
                "when": { "type": ["string", "null"], "format": "date-time" },
                "count": { "type": "integer", "format": "uint32", "minimum": 0, "exclusiveMaximum": 9 },
                "either": { "oneOf": [{ "type": "string" }, { "type": "number" }] },
                "mixed": { "type": ["string", "number"] },
                "tags": { "type": "array", "items": { "type": "string", "$comment": "no" }, "uniqueItems": true },
                "options": { "type": "object", "properties": {} },
                "anything": true,
            },
            "required": ["default"],
        });
        assert_eq!(
            sanitise(&schema),
            json!({
                "type": "object",
                "properties": {
                    "default": { "type": "string" },
                    "const": { "type": "string", "enum": ["fixed"] },
                    "when": { "type": "string", "nullable": true, "format": "date-time" },
                    "count": { "type": "integer", "minimum": 0 },
                    "either": { "anyOf": [{ "type": "string" }, { "type": "number" }] },
                    "mixed": { "anyOf": [{ "type": "string" }, { "type": "number" }] },
                    "tags": { "type": "array", "items": { "type": "string" } },
                    "options": { "type": "object" },
                    "anything": {},
                },
                "required": ["default"],
            })
        );
    }

    #[test]
    fn a_function_without_parameters_declares_none() {
        assert_eq!(parameters(&json!({ "type": "object", "properties": {} })), None);
        assert_eq!(parameters(&json!({ "type": "object", "additionalProperties": false })), None);
        assert_eq!(
            parameters(&json!({ "type": "object", "properties": { "a": { "type": "string" } } })),
            Some(json!({ "type": "object", "properties": { "a": { "type": "string" } } }))
        );
    }
}
