//! `toolbox tools`: the tools visible in this mode, as a table or JSON.

use std::process::ExitCode;

use serde_json::{json, Value};
use toolbox::host::EventSink;

use super::{build, load_config, out, toolset_names, usage, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct ToolsArgs {
    #[command(flatten)]
    common: Common,
    /// Only these toolsets (comma separated; a toolset, provider or tool name).
    #[arg(long, value_delimiter = ',')]
    toolsets: Option<Vec<String>>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// `toolbox tools`: the visible tools as a table or JSON.
pub(super) fn run(args: ToolsArgs) -> Result<ExitCode, UsageError> {
    let executor = build(load_config(&args.common)?, EventSink::none())?;
    let sets = toolset_names(&args.toolsets);
    let vocabulary = executor.config().vocabulary;
    let mut tools = executor
        .resolve_agent_tools(sets.as_deref(), executor.permissions())
        .map_err(usage)?;
    tools.retain(|t| t.info.listed_in(vocabulary));
    if args.json {
        let rows: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut row = json!({
                    "name": t.info.name_in(vocabulary),
                    "risk": t.info.risk,
                    "provider": t.provider_name(),
                    "aliases": t.info.aliases,
                    "toolsets": t.info.toolsets,
                });
                if t.info.name_in(vocabulary) != t.info.name {
                    row["canonical"] = json!(t.info.name);
                }
                row
            })
            .collect();
        out(&format!("{}\n", Value::Array(rows)));
    } else {
        let width = tools
            .iter()
            .map(|t| t.info.name_in(vocabulary).len())
            .max()
            .unwrap_or(4);
        let mut table = format!("{:width$}  {:10}  PROVIDER\n", "NAME", "RISK");
        for t in &tools {
            table.push_str(&format!(
                "{:width$}  {:10}  {}\n",
                t.info.name_in(vocabulary),
                t.info.risk.as_str(),
                t.provider_name()
            ));
        }
        out(&table);
    }
    Ok(ExitCode::SUCCESS)
}
