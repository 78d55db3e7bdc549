//! Renders [`ToolInfo`] for the clients toolbox serves.

use std::str::FromStr;

use anyhow::bail;
use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolRisk};

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

/// MCP's behaviour hints, derived from the risk class.
pub fn mcp_annotations(risk: ToolRisk) -> Value {
    let read_only = risk == ToolRisk::Read;
    json!({
        "readOnlyHint": read_only,
        "destructiveHint": !read_only,
        // Code and commands can reach anything the host can.
        "openWorldHint": matches!(risk, ToolRisk::Python | ToolRisk::Shell),
    })
}

/// One tool in one format.
pub fn render_tool(info: &ToolInfo, format: SchemaFormat) -> Value {
    match format {
        SchemaFormat::OpenAi => json!({
            "type": "function",
            "function": {
                "name": info.name,
                "description": info.description,
                "parameters": info.input_schema,
            }
        }),
        SchemaFormat::OpenAiResponses => json!({
            "type": "function",
            "name": info.name,
            "description": info.description,
            "parameters": info.input_schema,
        }),
        SchemaFormat::Anthropic => json!({
            "name": info.name,
            "description": info.description,
            "input_schema": info.input_schema,
        }),
        SchemaFormat::Mcp => json!({
            "name": info.name,
            "description": info.description,
            "inputSchema": info.input_schema,
            "annotations": mcp_annotations(info.risk),
        }),
    }
}

/// Many tools in one format, in the order given.
pub fn render<'a>(
    tools: impl IntoIterator<Item = &'a ToolInfo>,
    format: SchemaFormat,
) -> Vec<Value> {
    tools.into_iter().map(|t| render_tool(t, format)).collect()
}
