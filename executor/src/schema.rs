//! Renders [`ToolInfo`] for the clients toolbox serves.
//!
//! Tools declare loose schemas: optional properties are left out of `required`. Strict
//! clients (OpenAI's Responses API by default, Chat Completions and Anthropic with
//! `strict: true`, openai-agents' `convert_schemas_to_strict`) need every property listed
//! as required instead, so [`strict_schema`] makes each optional property nullable and
//! required, and the tools read `null` as "not given" (`toolbox_core::Args`).

use std::str::FromStr;

use anyhow::bail;
use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolRisk, Vocabulary};

/// A tool-list dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaFormat {
    /// Chat Completions: `{"type":"function","function":{name,description,parameters}}`.
    OpenAi,
    /// Responses API: `{"type":"function",name,description,parameters}`.
    OpenAiResponses,
    /// Messages API: `{name,description,input_schema}`.
    Anthropic,
    /// MCP `tools/list`: `{name,description,inputSchema,annotations}`.
    Mcp,
}

impl SchemaFormat {
    /// Every format, in the order `cargo xtask schema` writes them.
    pub const ALL: [SchemaFormat; 4] = [
        SchemaFormat::OpenAi,
        SchemaFormat::OpenAiResponses,
        SchemaFormat::Anthropic,
        SchemaFormat::Mcp,
    ];

    /// The format's name on the command line and in file names, e.g. `openai-responses`.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemaFormat::OpenAi => "openai",
            SchemaFormat::OpenAiResponses => "openai-responses",
            SchemaFormat::Anthropic => "anthropic",
            SchemaFormat::Mcp => "mcp",
        }
    }
}

impl SchemaFormat {
    /// Whether the format is rendered strict unless asked otherwise: the Responses API,
    /// which treats a function without `strict: false` as strict, and MCP, whose clients
    /// (openai-agents) convert every schema to strict mode themselves: published closed and
    /// with optional fields nullable ([`nullable_schema`]), a schema changes only in
    /// `required` in that conversion, a strict model sends `null` (read as "not given")
    /// instead of `0` or `""`, and a model not in strict mode may leave the field out.
    pub fn strict_by_default(self) -> bool {
        matches!(self, SchemaFormat::OpenAiResponses | SchemaFormat::Mcp)
    }

    /// This format, strict or loose regardless of its default.
    pub fn strict(self, strict: bool) -> SchemaRendering {
        SchemaRendering {
            format: self,
            strict,
            vocabulary: None,
        }
    }

    /// This format at its default strictness, with the tools named in `vocabulary`.
    pub fn vocabulary(self, vocabulary: Vocabulary) -> SchemaRendering {
        SchemaRendering::from(self).vocabulary(vocabulary)
    }
}

/// A format and whether its schemas are strict. A bare [`SchemaFormat`] converts to its
/// default ([`SchemaFormat::strict_by_default`]), so `render(tools, SchemaFormat::Mcp)` and
/// `render(tools, SchemaFormat::OpenAi.strict(true))` both work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaRendering {
    /// The client format the schemas are rendered for.
    pub format: SchemaFormat,
    /// Every property required, optional ones nullable, `additionalProperties: false` on
    /// every object, and `strict: true` where the format has the field.
    pub strict: bool,
    /// Whose names the tools are listed by ([`ToolInfo::name_in`]). `None` is canonical for
    /// [`render`], and the executor's own vocabulary for
    /// `ToolExecutor::resolve_agent_tool_schemas`.
    pub vocabulary: Option<Vocabulary>,
}

impl SchemaRendering {
    /// The same rendering with the tools named in `vocabulary`.
    pub fn vocabulary(mut self, vocabulary: Vocabulary) -> Self {
        self.vocabulary = Some(vocabulary);
        self
    }
}

impl From<SchemaFormat> for SchemaRendering {
    fn from(format: SchemaFormat) -> Self {
        format.strict(format.strict_by_default())
    }
}

impl FromStr for SchemaFormat {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "openai" | "openai-chat" => Ok(SchemaFormat::OpenAi),
            "openai-responses" | "responses" => Ok(SchemaFormat::OpenAiResponses),
            "anthropic" => Ok(SchemaFormat::Anthropic),
            "mcp" => Ok(SchemaFormat::Mcp),
            other => bail!("schema format must be one of openai, openai-responses, anthropic, mcp (got {other:?})"),
        }
    }
}

impl std::fmt::Display for SchemaFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// MCP's behaviour hints: read-only and destructive from the risk class, open-world from
/// the tool ([`ToolInfo::open_world_hint`]).
pub fn mcp_annotations(info: &ToolInfo) -> Value {
    let read_only = info.risk == ToolRisk::Read;
    json!({
        "readOnlyHint": read_only,
        "destructiveHint": !read_only,
        "openWorldHint": info.open_world_hint(),
    })
}

/// One tool in one format.
pub fn render_tool(info: &ToolInfo, rendering: impl Into<SchemaRendering>) -> Value {
    let SchemaRendering {
        format,
        strict,
        vocabulary,
    } = rendering.into();
    let name = info.name_in(vocabulary.unwrap_or_default());
    let parameters = match (strict, format) {
        // MCP clients apply `required` themselves (openai-agents refuses a call that leaves
        // out a required argument, which a model not in strict mode does with every
        // optional one), and a strict client converts the schema itself: closed and with
        // nullable optional properties, but only the arguments a tool needs required.
        (true, SchemaFormat::Mcp) => nullable_schema(&info.input_schema),
        (true, _) => strict_schema(&info.input_schema),
        (false, _) => info.input_schema.clone(),
    };
    match format {
        SchemaFormat::OpenAi => {
            let mut function = json!({
                "name": name,
                "description": info.description,
                "parameters": parameters,
            });
            if strict {
                function["strict"] = Value::Bool(true);
            }
            json!({ "type": "function", "function": function })
        }
        // The Responses API defaults to strict, so a loose schema has to say so.
        SchemaFormat::OpenAiResponses => json!({
            "type": "function",
            "name": name,
            "description": info.description,
            "parameters": parameters,
            "strict": strict,
        }),
        SchemaFormat::Anthropic => {
            let mut tool = json!({
                "name": name,
                "description": info.description,
                "input_schema": parameters,
            });
            if strict {
                tool["strict"] = Value::Bool(true);
            }
            tool
        }
        // MCP has no strict flag; the schema itself is what a strict client needs.
        // A tool with a structured result declares its shape (MCP `outputSchema`).
        SchemaFormat::Mcp => {
            let mut tool = json!({
                "name": name,
                "description": info.description,
                "inputSchema": parameters,
                "annotations": mcp_annotations(info),
            });
            if let Some(output) = &info.output_schema {
                tool["outputSchema"] = output.clone();
            }
            tool
        }
    }
}

/// Many tools in one format, in the order given.
pub fn render<'a>(
    tools: impl IntoIterator<Item = &'a ToolInfo>,
    rendering: impl Into<SchemaRendering>,
) -> Vec<Value> {
    let rendering = rendering.into();
    tools
        .into_iter()
        .map(|t| render_tool(t, rendering))
        .collect()
}

/// Many tools in one format, where the descriptions (the tool's and its arguments') also say
/// other tools' names in the rendering's vocabulary: `renames` pairs a canonical name with its
/// word there (see `Registry::render`), replaced as [`rename_text`] does. Tools the
/// vocabulary does not list ([`ToolInfo::listed_in`]) are left out.
pub fn render_renamed<'a>(
    tools: impl IntoIterator<Item = &'a ToolInfo>,
    rendering: impl Into<SchemaRendering>,
    renames: &[(String, String)],
) -> Vec<Value> {
    let rendering = rendering.into();
    let vocabulary = rendering.vocabulary.unwrap_or_default();
    let renames: Vec<&(String, String)> = renames.iter().filter(|(from, to)| from != to).collect();
    tools
        .into_iter()
        .filter(|t| t.listed_in(vocabulary))
        .map(|t| {
            if renames.is_empty() {
                return render_tool(t, rendering);
            }
            let mut info = t.clone();
            info.description = rename_in_text(&info.description, &renames);
            rename_descriptions(&mut info.input_schema, &renames);
            render_tool(&info, rendering)
        })
        .collect()
}

fn rename_descriptions(schema: &mut Value, renames: &[&(String, String)]) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(text) if key == "description" => {
                        *text = rename_in_text(text, renames);
                    }
                    other => rename_descriptions(other, renames),
                }
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| rename_descriptions(item, renames)),
        _ => {}
    }
}

/// `text` (written by toolbox: a description, the built-in prompt) with the tools it names
/// said in another vocabulary: `renames` pairs a canonical name with its word there. A name
/// with an `_` is replaced wherever it stands as a whole identifier (`file_manager__edit`
/// becomes `edit_file`); a plain word such as `shell` or `skill` only inside backticks
/// (`` `shell` `` becomes `` `bash` ``), since text uses it as an English word too.
pub fn rename_text(text: &str, renames: &[(String, String)]) -> String {
    let renames: Vec<&(String, String)> = renames.iter().filter(|(from, to)| from != to).collect();
    rename_in_text(text, &renames)
}

fn rename_in_text(text: &str, renames: &[&(String, String)]) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(is_ident) {
        out.push_str(&rest[..start]);
        let word_len = rest[start..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        let quoted = out.ends_with('`') && rest[start + word_len..].starts_with('`');
        match renames
            .iter()
            .find(|(from, _)| from == word && (quoted || from.contains('_')))
        {
            Some((_, to)) => out.push_str(to),
            None => out.push_str(word),
        }
        rest = &rest[start + word_len..];
    }
    out.push_str(rest);
    out
}

/// The strict form of a JSON Schema: in every object (the top level, nested properties,
/// array items, `anyOf`/`oneOf` branches) every property is listed in `required`, the ones
/// that were optional accept `null` as well, and `additionalProperties` is `false`.
///
/// An optional `{"type": "string"}` becomes `{"type": ["string", "null"]}`; an `enum` gains
/// `null`; a schema without a `type` is wrapped as `anyOf: [schema, {"type": "null"}]`.
pub fn strict_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    make_strict(&mut schema, true);
    schema
}

/// [`strict_schema`] with each object's `required` left as the tool declared it: closed
/// (`additionalProperties: false`) and with optional properties nullable, so a model may
/// leave an optional argument out or send `null`, and a client's own strict conversion
/// (which lists every property as required) changes nothing else. The MCP form.
pub fn nullable_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    make_strict(&mut schema, false);
    schema
}

fn make_strict(schema: &mut Value, require_all: bool) {
    let Value::Object(map) = schema else {
        return;
    };
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(branches)) = map.get_mut(key) {
            branches
                .iter_mut()
                .for_each(|b| make_strict(b, require_all));
        }
    }
    if let Some(items) = map.get_mut("items") {
        match items {
            Value::Array(each) => each.iter_mut().for_each(|i| make_strict(i, require_all)),
            one => make_strict(one, require_all),
        }
    }
    let is_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => map.contains_key("properties"),
    };
    if !is_object {
        return;
    }
    let required: Vec<String> = match map.get("required") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let properties = map
        .entry("properties")
        .or_insert_with(|| Value::Object(Default::default()));
    let mut all = Vec::new();
    if let Value::Object(properties) = properties {
        for (name, property) in properties.iter_mut() {
            make_strict(property, require_all);
            if !required.contains(name) {
                make_nullable(property);
            }
            if require_all || required.contains(name) {
                all.push(Value::String(name.clone()));
            }
        }
    }
    // Sorted, so the output does not depend on how serde_json orders a map.
    all.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
    if all.is_empty() && !require_all {
        map.remove("required");
    } else {
        map.insert("required".into(), Value::Array(all));
    }
    map.insert("additionalProperties".into(), Value::Bool(false));
}

/// Lets a property schema accept `null`, which the tools read as "not given".
fn make_nullable(schema: &mut Value) {
    let null = Value::String("null".into());
    let Value::Object(map) = schema else {
        return;
    };
    match map.get_mut("type") {
        Some(Value::String(kind)) => {
            if kind != "null" {
                let kind = std::mem::take(kind);
                map.insert("type".into(), json!([kind, "null"]));
            }
        }
        Some(Value::Array(kinds)) => {
            if !kinds.contains(&null) {
                kinds.push(null);
            }
        }
        _ => {
            let inner = std::mem::take(map);
            map.insert(
                "anyOf".into(),
                json!([Value::Object(inner), {"type": "null"}]),
            );
            return;
        }
    }
    if let Some(Value::Array(values)) = map.get_mut("enum") {
        if !values.contains(&Value::Null) {
            values.push(Value::Null);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_form_is_closed_and_nullable_but_requires_only_what_is_required() {
        let loose = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer"},
                "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}}
            },
            "required": ["path"]
        });
        let got = nullable_schema(&loose);
        assert_eq!(got["required"], json!(["path"]));
        assert_eq!(got["additionalProperties"], false);
        assert_eq!(got["properties"]["path"]["type"], "string");
        assert_eq!(
            got["properties"]["limit"]["type"],
            json!(["integer", "null"])
        );
        assert_eq!(got["properties"]["opts"]["additionalProperties"], false);
        assert!(got["properties"]["opts"].get("required").is_none());
        // What a strict client's own conversion makes of it is exactly the strict form.
        let mut converted = got.clone();
        converted["required"] = json!(["limit", "opts", "path"]);
        converted["properties"]["opts"]["required"] = json!(["deep"]);
        converted["properties"]["opts"]["properties"]["deep"]["type"] = json!(["boolean", "null"]);
        assert_eq!(converted, strict_schema(&loose));
    }

    #[test]
    fn strict_makes_every_property_required_and_optional_ones_nullable() {
        let loose = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A file."},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "depth": {"type": "integer", "minimum": 1},
                "tags": {"type": "array", "items": {"type": "string"}},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                "opts": {
                    "type": "object",
                    "properties": {
                        "deep": {"type": "boolean"},
                        "name": {"type": "string"}
                    },
                    "required": ["name"]
                },
                "rows": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"x": {"type": "number"}}}
                }
            },
            "required": ["path"],
        });
        let strict = strict_schema(&loose);
        assert_eq!(
            strict,
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "A file."},
                    "mode": {"type": ["string", "null"], "enum": ["a", "b", null]},
                    "depth": {"type": ["integer", "null"], "minimum": 1},
                    "tags": {"type": ["array", "null"], "items": {"type": "string"}},
                    "either": {"anyOf": [
                        {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                        {"type": "null"}
                    ]},
                    "opts": {
                        "type": ["object", "null"],
                        "properties": {
                            "deep": {"type": ["boolean", "null"]},
                            "name": {"type": "string"}
                        },
                        "required": ["deep", "name"],
                        "additionalProperties": false
                    },
                    "rows": {
                        "type": ["array", "null"],
                        "items": {
                            "type": "object",
                            "properties": {"x": {"type": ["number", "null"]}},
                            "required": ["x"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["depth", "either", "mode", "opts", "path", "rows", "tags"],
                "additionalProperties": false
            })
        );
        // Idempotent: a strict schema stays as it is.
        assert_eq!(strict_schema(&strict), strict);
    }

    #[test]
    fn an_object_without_properties_gets_empty_ones() {
        assert_eq!(
            strict_schema(&json!({"type": "object"})),
            json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false})
        );
    }

    fn tool() -> ToolInfo {
        ToolInfo::new(
            "t",
            "A tool.",
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": []}),
        )
    }

    #[test]
    fn formats_say_strict_where_they_can() {
        let t = tool();
        let loose = |format: SchemaFormat| render_tool(&t, format.strict(false));
        let strict = |format: SchemaFormat| render_tool(&t, format.strict(true));
        assert!(loose(SchemaFormat::OpenAi)["function"]
            .get("strict")
            .is_none());
        assert_eq!(strict(SchemaFormat::OpenAi)["function"]["strict"], true);
        assert_eq!(
            strict(SchemaFormat::OpenAi)["function"]["parameters"]["required"],
            json!(["a"])
        );
        assert_eq!(loose(SchemaFormat::OpenAiResponses)["strict"], false);
        assert_eq!(strict(SchemaFormat::OpenAiResponses)["strict"], true);
        assert!(loose(SchemaFormat::Anthropic).get("strict").is_none());
        assert_eq!(strict(SchemaFormat::Anthropic)["strict"], true);
        assert!(strict(SchemaFormat::Mcp).get("strict").is_none());
        assert_eq!(
            strict(SchemaFormat::Mcp)["inputSchema"]["properties"]["a"]["type"],
            json!(["string", "null"])
        );
        // Only the Responses API is strict by default.
        assert_eq!(
            render_tool(&t, SchemaFormat::OpenAiResponses)["strict"],
            true
        );
        assert_eq!(
            render_tool(&t, SchemaFormat::OpenAi)["function"]["parameters"]["required"],
            json!([])
        );
    }

    #[test]
    fn a_vocabulary_renames_the_tool_and_an_output_schema_shows_in_mcp_only() {
        let t = tool()
            .named(Vocabulary::DataAgent, "other")
            .output_schema(json!({"type": "object"}));
        for format in SchemaFormat::ALL {
            let canonical = render_tool(&t, format);
            let renamed = render_tool(&t, format.vocabulary(Vocabulary::DataAgent));
            let name = |v: &Value| match format {
                SchemaFormat::OpenAi => v["function"]["name"].clone(),
                _ => v["name"].clone(),
            };
            assert_eq!(name(&canonical), "t");
            assert_eq!(name(&renamed), "other");
            assert_eq!(
                renamed.get("outputSchema").is_some(),
                format == SchemaFormat::Mcp
            );
        }
    }

    #[test]
    fn descriptions_name_other_tools_in_the_vocabulary_but_plain_words_stay() {
        let renames = vec![
            ("file_manager__edit".to_string(), "edit_file".to_string()),
            ("shell".to_string(), "bash".to_string()),
        ];
        let t = ToolInfo::new(
            "t",
            "Use file_manager__edit, not file_manager__editor or a shell (`shell`); file_manager__edit.",
            json!({"type": "object", "properties": {"a": {"type": "string", "description": "see file_manager__edit"}}}),
        );
        let out = render_renamed([&t], SchemaFormat::Anthropic, &renames);
        assert_eq!(
            out[0]["description"],
            "Use edit_file, not file_manager__editor or a shell (`bash`); edit_file."
        );
        assert_eq!(
            out[0]["input_schema"]["properties"]["a"]["description"],
            "see edit_file"
        );
        assert_eq!(
            render_renamed([&t], SchemaFormat::Anthropic, &[]),
            render([&t], SchemaFormat::Anthropic)
        );
    }

    #[test]
    fn open_world_hint_comes_from_the_tool() {
        let t = tool();
        assert_eq!(mcp_annotations(&t)["openWorldHint"], false);
        assert_eq!(
            mcp_annotations(&t.clone().open_world(true))["openWorldHint"],
            true
        );
        let shell = tool().risk(ToolRisk::Command);
        assert_eq!(mcp_annotations(&shell)["openWorldHint"], true);
        assert_eq!(mcp_annotations(&shell)["destructiveHint"], true);
    }
}
