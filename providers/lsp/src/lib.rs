//! toolbox-lsp is the `lsp` provider: code intelligence from real language servers.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `lsp__symbols` | read | a file's outline, or workspace symbols matching a query |
//! | `lsp__definition` | read | where a symbol is defined |
//! | `lsp__references` | read | every use of a symbol, grouped by file |
//! | `lsp__hover` | read | a symbol's type, signature and documentation |
//! | `lsp__diagnostics` | read | errors and warnings, once the server settles |
//! | `lsp__rename` | file write | a scope-aware rename; all files or none |
//!
//! All are in the `code` toolset. Servers come from `[lsp.servers.<name>]` (the operator's
//! alone) or the built-in defaults found on PATH (`config`); one runs per workspace and
//! server name, shared by every session, started on first use and stopped when idle
//! (`pool`). `server` holds the process (inside toolbox's containment) and its messages,
//! framed by `rpc`; `call` is what every tool does around its request (files read through
//! the workspace, `didOpen`/`didChange`, indexing wait, one restart after a crash);
//! `position` turns `symbol` / `line` / `column` into LSP positions.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod after_edit;
mod call;
mod config;
mod diagnostics;
mod doctor;
mod languages;
mod nav;
mod pool;
mod position;
mod rename;
mod rpc;
mod server;
mod symbols;

use anyhow::Result;
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::{Arg, Preview, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

toolbox_host::register_provider!("lsp", || std::sync::Arc::new(LspProvider::default()));

/// The toolset every lsp tool belongs to.
const TOOLSET: &str = "code";

/// The `path` argument of every tool: a source file in the workspace (required by the tools
/// that point at a position, [`position::PATH`]).
const PATH: Arg = Arg::string("path").aliases(&["file"]);

/// The `lsp` provider. Its servers live in a process-wide pool keyed by workspace root.
#[derive(Debug, Default, Clone)]
pub struct LspProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for LspProvider {
    fn name(&self) -> &str {
        "lsp"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }

    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        (tool == rename::NAME)
            .then(|| rename::preview(args, ctx))
            .flatten()
    }
}

/// Every lsp tool, each listed once.
static TOOLS: LazyLock<Tools<LspProvider>> = LazyLock::new(|| {
    Tools::<LspProvider>::new("lsp")
        .tool(symbols::info(), |_, _, args, ctx| {
            output(symbols::run(args, ctx))
        })
        .tool(nav::info_definition(), |_, _, args, ctx| {
            output(nav::run(nav::DEFINITION, args, ctx))
        })
        .tool(nav::info_references(), |_, _, args, ctx| {
            output(nav::run(nav::REFERENCES, args, ctx))
        })
        .tool(nav::info_hover(), |_, _, args, ctx| {
            output(nav::run(nav::HOVER, args, ctx))
        })
        .tool(diagnostics::info(), |_, _, args, ctx| {
            output(diagnostics::run(args, ctx))
        })
        .tool(rename::info(), |_, _, args, ctx| {
            output(rename::run(args, ctx))
        })
});
