//! toolbox-team is the `team` provider: the agents of a workspace, for a model to see and to
//! hand work to.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `list_agents` | read | the agents (name, description, toolsets, model, step limit, where each is defined) and the agent files that were skipped, with reasons |
//! | `call_agent` | read | runs another agent on a task in the same session and returns its final answer; served by the agent runtime, never by the executor |
//!
//! Both are in the `team` toolset. Agent definitions live in core
//! ([`toolbox_core::agent`]), so the agent runtime reads the very same files without
//! depending on this crate: `.toolbox/agents/*.md`, the operator's `[agents] dirs`, and the
//! built-in `default` agent.
//!
//! `call_agent` is declared here so it has one name, one description and one schema, but it
//! is [intercepted](toolbox_core::ToolInfo::intercepted): only a runtime that drives a turn
//! (`toolbox chat`, `toolbox serve`) lists it and runs it, as a sub-turn. The executor
//! refuses it, and plain listings (`toolbox tools`, `toolbox schema`, MCP) leave it out.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod call;
mod list;

use std::sync::{Arc, LazyLock};

use anyhow::Result;
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::{ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

pub use list::NAME as LIST_AGENTS;
pub use toolbox_core::agent::CALL_AGENT;

toolbox_host::register_provider!("team", || Arc::new(TeamProvider::default()));

/// The toolset both tools belong to.
pub const TOOLSET: &str = "team";

/// The `team` provider. It holds no state: every call reads the agent folders afresh.
#[derive(Debug, Default, Clone)]
pub struct TeamProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for TeamProvider {
    fn name(&self) -> &str {
        "team"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// Every team tool, each listed once.
static TOOLS: LazyLock<Tools<TeamProvider>> = LazyLock::new(|| {
    Tools::<TeamProvider>::new("team")
        .tool(list::info(), |_, _, args, ctx| output(list::run(args, ctx)))
        .tool(call::info(), |_, _, args, _| {
            output(std::future::ready(call::run(args)))
        })
});

#[cfg(test)]
mod tests;
