//! `list_agents`: the agents a model may hand work to, and the agent files that were skipped.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::TOOLSET;

/// The tool's name.
pub const NAME: &str = "list_agents";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "List the agents defined for this workspace (where call_agent is offered, it hands a \
         task to one of them): each agent's name, what it is for (description), the toolsets \
         it may use (\"all\" for every toolset), its model and step limit when set, and the \
         file that defines it. Invalid agent files are listed under \"skipped\" with the \
         reason. Takes no arguments.",
        object(&[]),
    )
    .risk(ToolRisk::Read)
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    Args::new(NAME, &args)?.finish()?;
    let workspace = ctx.workspace.clone();
    let config = ctx.config.clone();
    // Reading folders blocks; keep it off the async threads.
    let set = toolbox_host::blocking(format!("{NAME}: looking for agents"), move || {
        toolbox_host::discover_agents(&workspace, &config)
    })
    .await?;
    Ok(set.summary())
}
