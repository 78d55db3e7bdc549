//! Small builders for the simple JSON Schemas tools declare (objects of strings, numbers,
//! booleans and arrays of strings, which every model backend accepts).

use serde_json::{json, Map, Value};

/// A property of one JSON type with a description, e.g. `prop("string", "File to read.")`.
pub fn prop(kind: &str, description: &str) -> Value {
    json!({ "type": kind, "description": description })
}

/// A closed object schema (`additionalProperties: false`) of the given properties.
pub fn object_schema(properties: &[(&str, Value)], required: &[&str]) -> Value {
    let props: Map<String, Value> = properties
        .iter()
        .map(|(name, schema)| (name.to_string(), schema.clone()))
        .collect();
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}
