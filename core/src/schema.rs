//! Small builders for the simple JSON Schemas tools declare (objects of strings, numbers,
//! booleans and arrays of strings, which every model backend accepts).

use serde_json::{json, Map, Value};

/// A property of one JSON type with a description, e.g. `prop("string", "File to read.")`.
pub fn prop(kind: &str, description: &str) -> Value {
    json!({ "type": kind, "description": description })
}

/// The closed object schema of a tool's declared arguments (see [`Arg`](crate::Arg)): each
/// property with its type and bounds, and `required` listing the ones declared required.
pub fn object(props: &[crate::arg::Prop]) -> Value {
    let properties: Map<String, Value> = props
        .iter()
        .map(|p| (p.name.to_string(), p.schema.clone()))
        .collect();
    let required: Vec<&str> = props
        .iter()
        .filter(|p| p.required)
        .map(|p| p.name)
        .collect();
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
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

/// An integer property bounded below (and above, when `maximum` is given), e.g.
/// `integer_in("How many images (1-4, default 1).", 1, Some(4))`.
pub fn integer_in(description: &str, minimum: u64, maximum: Option<u64>) -> Value {
    let mut schema = json!({ "type": "integer", "minimum": minimum, "description": description });
    if let Some(maximum) = maximum {
        schema["maximum"] = json!(maximum);
    }
    schema
}

/// A string property that must be one of `choices`.
pub fn string_enum(choices: &[&str], description: &str) -> Value {
    json!({ "type": "string", "enum": choices, "description": description })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_make_the_plain_schemas() {
        assert_eq!(
            object_schema(&[("n", integer_in("How many.", 1, Some(4)))], &["n"]),
            json!({"type": "object", "properties": {
                "n": {"type": "integer", "minimum": 1, "maximum": 4, "description": "How many."}
            }, "required": ["n"], "additionalProperties": false})
        );
        assert_eq!(
            integer_in("At least one.", 1, None),
            json!({"type": "integer", "minimum": 1, "description": "At least one."})
        );
        assert_eq!(
            string_enum(&["a", "b"], "Pick."),
            json!({"type": "string", "enum": ["a", "b"], "description": "Pick."})
        );
    }
}
