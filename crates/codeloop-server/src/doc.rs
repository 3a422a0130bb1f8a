//! The OpenAPI 3.1 document served at `/doc`, built from the route table (schemas from `schemars`).
//!
//! Owns: what a route documents about itself ([`Op`]) and turning [`Op`]s into `paths` and `components`.
//! Must not: list routes of its own; a route exists in the document because it is registered.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::api::ErrorBody;

pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Verb {
    Get,
    Post,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What a successful response carries.
#[derive(Clone, Copy)]
pub enum Returns {
    /// A schema the server defines.
    Json(SchemaFn),
    /// A `codeloop-types` value (named component with a pointer to the data model).
    Model(&'static str),
    /// A list of `codeloop-types` values.
    List(&'static str),
    /// `text/event-stream`.
    EventStream,
    /// Any JSON (e.g. the OpenAPI document itself).
    AnyJson,
    /// No body (202).
    Accepted,
    /// Prometheus text (`GET /metrics`).
    PrometheusText,
}

/// One documented route.
#[derive(Clone, Copy)]
pub struct Op {
    pub verb: Verb,
    pub path: &'static str,
    pub id: &'static str,
    pub summary: &'static str,
    pub query: Option<SchemaFn>,
    pub body: Option<SchemaFn>,
    pub returns: Returns,
}

impl Op {
    pub(crate) const fn new(verb: Verb, path: &'static str, id: &'static str, summary: &'static str) -> Op {
        Op { verb, path, id, summary, query: None, body: None, returns: Returns::AnyJson }
    }

    pub(crate) fn query<T: JsonSchema>(mut self) -> Op {
        self.query = Some(schema::<T>);
        self
    }

    pub(crate) fn body<T: JsonSchema>(mut self) -> Op {
        self.body = Some(schema::<T>);
        self
    }

    pub(crate) fn json<T: JsonSchema>(mut self) -> Op {
        self.returns = Returns::Json(schema::<T>);
        self
    }

    pub(crate) fn returns(mut self, returns: Returns) -> Op {
        self.returns = returns;
        self
    }
}

/// Where `codeloop-types` values are described (they have no JSON schema of their own).
const DATA_MODEL: &str = "a codeloop-types value serialised as JSON; see DESIGN.md §3 (data model)";

pub fn openapi(ops: &[Op]) -> Value {
    // OpenAPI 3.1 schemas are JSON Schema 2020-12: an optional value is `type: [T, "null"]`, never the
    // 3.0 `nullable` keyword (which 3.1 validators ignore).
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let error = generator.subschema_for::<ErrorBody>();
    let mut paths: Map<String, Value> = Map::new();
    let mut models: Vec<&'static str> = Vec::new();
    for op in ops {
        let mut parameters: Vec<Value> = path_params(op.path)
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        if let Some(query) = op.query {
            let schema = query(&mut generator).to_value();
            parameters.extend(query_params(&resolve(&generator, schema)));
        }
        let mut operation = json!({
            "operationId": op.id,
            "summary": op.summary,
            "parameters": parameters,
            "responses": {
                "default": {
                    "description": "An error: 400 invalid, 401 unauthorized, 404 not found, 409 busy or already answered, 413 too large, 500",
                    "content": {"application/json": {"schema": error.clone()}},
                },
            },
        });
        if let Some(body) = op.body {
            operation["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": body(&mut generator)}}});
        }
        let (status, response) = match op.returns {
            Returns::Json(schema) => ("200", content("OK", schema(&mut generator).to_value())),
            Returns::Model(name) => {
                models.push(name);
                ("200", content("OK", component(name)))
            }
            Returns::List(name) => {
                models.push(name);
                ("200", content("OK", json!({"type": "array", "items": component(name)})))
            }
            Returns::AnyJson => ("200", content("OK", json!({}))),
            Returns::EventStream => (
                "200",
                json!({"description": "text/event-stream: `id: N`, `event: message`, `data: {id, type, properties}`",
                       "content": {"text/event-stream": {"schema": {"type": "string"}}}}),
            ),
            Returns::Accepted => ("202", json!({"description": "Accepted: the run started or was queued"})),
            Returns::PrometheusText => (
                "200",
                json!({"description": "Prometheus text exposition format 0.0.4",
                       "content": {"text/plain": {"schema": {"type": "string"}}}}),
            ),
        };
        operation["responses"][status] = response;
        let item = paths.entry(op.path.to_owned()).or_insert_with(|| json!({}));
        item[op.verb.as_str()] = operation;
    }
    let mut schemas = generator.take_definitions(true);
    for name in models {
        schemas.insert(
            name.to_owned(),
            json!({"type": "object", "description": format!("{name}: {DATA_MODEL}")}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "codeloop",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The codeloop HTTP API. With a token, send `Authorization: Bearer <token>` on every request.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    })
}

/// The schema a `$ref` into the components points at (query structs are described inline).
fn resolve(generator: &schemars::SchemaGenerator, schema: Value) -> Value {
    let name = schema.get("$ref").and_then(Value::as_str).and_then(|r| r.rsplit('/').next());
    match name.and_then(|name| generator.definitions().get(name)) {
        Some(definition) => definition.clone(),
        None => schema,
    }
}

fn component(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn content(description: &str, schema: Value) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": schema}}})
}

/// `{id}` segments of an axum path.
pub fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
}

/// A query struct's properties as OpenAPI parameters.
fn query_params(schema: &Value) -> Vec<Value> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    properties
        .iter()
        .map(|(name, property)| {
            let mut parameter =
                json!({"name": name, "in": "query", "required": required.contains(&name.as_str()), "schema": property});
            if let Some(description) = property.get("description") {
                parameter["description"] = description.clone();
            }
            parameter
        })
        .collect()
}
