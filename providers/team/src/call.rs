//! `call_agent`: declared here, served by the agent runtime.
//!
//! The runtime intercepts the call before the executor and runs a sub-turn with the named
//! agent in the same session. The executor refuses intercepted tools, so [`run`] is reached
//! only by a program that calls the provider directly; it says what went wrong.

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::{object_schema, prop};
use toolbox_core::{ToolInfo, ToolRisk};

use crate::TOOLSET;

/// The tool's name.
pub const NAME: &str = "call_agent";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Run another agent on a task in this same session and return its final answer. The \
         agent works with its own instructions and toolsets until it is done, then its last \
         message comes back as this tool's result. Write the task so it stands on its own: the \
         goal, the files or data involved, and what to return. list_agents shows the agents \
         and what each is for.",
        object_schema(
            &[
                (
                    "agent",
                    prop(
                        "string",
                        "The agent's name, as list_agents shows it, e.g. \"reviewer\".",
                    ),
                ),
                (
                    "task",
                    prop(
                        "string",
                        "What the agent should do, self-contained, and what it should answer with.",
                    ),
                ),
            ],
            &["agent", "task"],
        ),
    )
    .risk(ToolRisk::Read)
    .toolsets(&[TOOLSET])
    .intercepted()
}

pub(crate) fn run(_args: Value) -> Result<Value> {
    bail!(
        "{NAME} must be intercepted by the agent runtime: it runs another agent as part of a \
         turn, so it only works inside one (`toolbox chat`, `toolbox serve`), not as a single \
         tool call"
    )
}
