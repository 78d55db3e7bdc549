//! `plan__show`: the plan as a checklist, with each part's review state.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Args, ToolInfo, Vocabulary};
use toolbox_host::ToolContext;

use crate::{state, TOOLSET};

pub(crate) const NAME: &str = "plan__show";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Show this session's goal and plan as a checklist ([ ] pending, [>] in progress, \
         [x] completed, [!] blocked), with the review state of each (draft, pending, \
         confirmed, and by whom).",
        object(&[]),
    )
    .toolsets(&[TOOLSET, crate::data_agent::TOOLSET])
    .named(Vocabulary::DataAgent, crate::data_agent::SHOW)
}

pub(crate) fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    Args::new(NAME, &args)?.finish()?;
    let mut plan = state::load(&ctx.workspace)?;
    plan.said_in = ctx.vocabulary();
    Ok(Value::String(plan.render()))
}
