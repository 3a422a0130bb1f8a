//! Parameter schemas and argument decoding shared by every tool.
//!
//! Schemas are generated once per tool (at construction) with schemars and trimmed to what a model needs:
//! no `$schema`, no titles, no `null` in optional types, no non-standard integer formats. The first request
//! carries every schema, so each byte here is paid on every session start.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::ToolFailure;

/// The compact JSON Schema of `T`'s arguments object.
pub fn schema_for<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft07().with(|s| {
        s.meta_schema = None;
        s.inline_subschemas = true;
    });
    let mut value = settings.into_generator().into_root_schema_for::<T>().to_value();
    compact(&mut value);
    value
}

/// Decodes raw call arguments into the tool's parameter struct. A missing arguments object (`null`) is read
/// as `{}` so that a tool whose parameters are all optional still works.
pub fn decode<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolFailure> {
    let args = if args.is_null() { Value::Object(Map::new()) } else { args };
    serde_json::from_value(args)
        .map_err(|e| ToolFailure::InvalidArguments { tool: tool.to_string(), detail: e.to_string() })
}

fn compact(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("$schema");
            map.remove("title");
            if map.get("default").is_some_and(Value::is_null) {
                map.remove("default");
            }
            if map.get("format").and_then(Value::as_str).is_some_and(is_numeric_format) {
                map.remove("format");
            }
            drop_null_type(map);
            for (key, child) in map.iter_mut() {
                if key == "properties" || key == "definitions" {
                    // Keys here are property names, not keywords: compact the values only.
                    if let Value::Object(props) = child {
                        props.values_mut().for_each(compact);
                    }
                } else {
                    compact(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(compact),
        _ => {}
    }
}

fn is_numeric_format(format: &str) -> bool {
    matches!(
        format,
        "uint" | "uint8" | "uint16" | "uint32" | "uint64" | "int" | "int32" | "int64" | "double" | "float"
    )
}

/// `"type": ["string", "null"]` → `"type": "string"`: optional fields are simply not required.
fn drop_null_type(map: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = map.get_mut("type") else { return };
    types.retain(|t| t != "null");
    if types.len() == 1 {
        let single = types.remove(0);
        map.insert("type".to_string(), single);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Params {
        /// The path.
        path: String,
        /// Lines to skip.
        offset: Option<u64>,
    }

    #[test]
    fn schema_is_compact() {
        let schema = schema_for::<Params>();
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "The path."},
                    "offset": {"type": "integer", "description": "Lines to skip.", "minimum": 0}
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn decode_reports_invalid_arguments() {
        let err = decode::<Params>("read", json!({"offset": 1})).err();
        assert!(matches!(err, Some(ToolFailure::InvalidArguments { ref tool, .. }) if tool == "read"));
    }
}
