//! `plan__show`: the plan as a checklist, with each part's review state.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object_schema;
use toolbox_core::{Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::{state, TOOLSET};

pub(crate) const NAME: &str = "plan__show";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Show this session's goal and plan as a checklist ([ ] pending, [>] in progress, \
         [x] completed, [!] blocked), with the review state of each (draft, pending, \
         confirmed, and by whom).",
        object_schema(&[], &[]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    Args::new(NAME, &args)?.finish()?;
    Ok(Value::String(state::load(&ctx.workspace)?.render()))
}
