//! `call_agent`: declared here, served by the agent runtime.
//!
//! The runtime intercepts the call before the executor and runs a sub-turn with the named
//! agent in the same session. The executor refuses intercepted tools, so [`run`] is reached
//! only by a program that calls the provider directly; it says what went wrong.

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::agent::{call_agent_info, CALL_AGENT as NAME};
use toolbox_core::ToolInfo;

use crate::TOOLSET;

/// The tool's name, schema and argument rules are core's (`toolbox_core::agent`), beside the
/// agent definitions; this provider lists it so it has a toolset.
pub(crate) fn info() -> ToolInfo {
    call_agent_info(TOOLSET)
}

pub(crate) fn run(_args: Value) -> Result<Value> {
    bail!(
        "{NAME} must be intercepted by the agent runtime: it runs another agent as part of a \
         turn, so it only works inside one (`toolbox chat`, `toolbox serve`), not as a single \
         tool call"
    )
}
