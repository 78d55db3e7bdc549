//! `toolbox schema`: the visible tools' schemas in one format, loose or strict.

use std::process::ExitCode;

use toolbox::host::EventSink;
use toolbox::SchemaFormat;

use super::{build, load_config, out, toolset_names, usage, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct SchemaArgs {
    #[command(flatten)]
    common: Common,
    /// openai, openai-responses, anthropic or mcp.
    #[arg(long, short = 'f', value_parser = parse_format)]
    format: SchemaFormat,
    /// Only these toolsets (comma separated): a toolset such as files, shell, python, web, or a
    /// provider or tool name. Tools the mode hides stay hidden [default: every tool].
    #[arg(long, value_delimiter = ',')]
    toolsets: Option<Vec<String>>,
    /// Strict schemas: objects closed, optional properties nullable (null means "not
    /// given"); for OpenAI and Anthropic every property required and `strict: true`, for mcp
    /// `required` as the tool declares it (so a model may leave optional ones out). The
    /// default for openai-responses and mcp.
    #[arg(long, overrides_with = "no_strict")]
    strict: bool,
    /// Loose schemas (optional properties left out of `required`), even for openai-responses
    /// and mcp.
    #[arg(long, overrides_with = "strict")]
    no_strict: bool,
}

fn parse_format(s: &str) -> Result<SchemaFormat, String> {
    s.parse().map_err(|e: anyhow::Error| e.to_string())
}

/// `toolbox schema`: the visible tools rendered in one format.
pub(super) fn run(args: SchemaArgs) -> Result<ExitCode, UsageError> {
    let strict = if args.strict || args.no_strict {
        args.strict
    } else {
        args.format.strict_by_default()
    };
    let executor = build(load_config(&args.common)?, EventSink::none())?;
    let sets = toolset_names(&args.toolsets);
    let schemas = executor
        .resolve_agent_tool_schemas(
            sets.as_deref(),
            executor.permissions(),
            args.format.strict(strict),
        )
        .map_err(usage)?;
    let text = serde_json::to_string_pretty(&schemas).map_err(usage)?;
    out(&format!("{text}\n"));
    Ok(ExitCode::SUCCESS)
}
