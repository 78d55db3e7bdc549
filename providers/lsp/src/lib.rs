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

mod after_edit;
mod call;
mod config;
mod diagnostics;
mod languages;
mod nav;
mod pool;
mod position;
mod rename;
mod rpc;
mod server;
mod symbols;

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::{Preview, ToolInfo};
use toolbox_host::{ToolContext, ToolProvider};

toolbox_host::register_provider!("lsp", || std::sync::Arc::new(LspProvider::default()));

/// The toolset every lsp tool belongs to.
const TOOLSET: &str = "code";

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
        vec![
            symbols::info(),
            nav::info_definition(),
            nav::info_references(),
            nav::info_hover(),
            diagnostics::info(),
            rename::info(),
        ]
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<Value> {
        match tool {
            symbols::NAME => symbols::run(args, ctx).await,
            nav::DEFINITION => nav::run(nav::DEFINITION, args, ctx).await,
            nav::REFERENCES => nav::run(nav::REFERENCES, args, ctx).await,
            nav::HOVER => nav::run(nav::HOVER, args, ctx).await,
            diagnostics::NAME => diagnostics::run(args, ctx).await,
            rename::NAME => rename::run(args, ctx).await,
            other => Err(anyhow!("lsp has no tool named {other}")),
        }
    }

    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        (tool == rename::NAME)
            .then(|| rename::preview(args, ctx))
            .flatten()
    }
}
