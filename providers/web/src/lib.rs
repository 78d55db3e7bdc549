//! toolbox-web is the `web` provider: two tools that let a model read the web.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `web_fetch` | read | fetch one URL; HTML becomes Markdown (or text), JSON is pretty-printed, PDFs go through a linked extractor |
//! | `web_search` | read | numbered results (title, URL, snippet) from SearxNG, Brave Search or Tavily |
//!
//! Both are in the `web` toolset. `web_fetch` goes through an SSRF guard ([`guard`]): private,
//! loopback, link-local, metadata and other non-public addresses are refused after DNS
//! resolution, for IP-literal URLs and on every redirect hop, unless `[web] allow_hosts` /
//! `allow_ranges` allow them. `web_search` talks only to the endpoint the operator configured,
//! which is trusted and not guarded (so a SearxNG on localhost works).
//!
//! HTTP is reqwest with rustls (ring provider), no proxies. The clients are built once per
//! provider instance from the `[web]` table and rebuilt only if that table changes. A PDF
//! response is read with the extractor the pdf provider registers
//! ([`toolbox_host::find_extractor`]) — this crate does not depend on it.
//!
//! The crate registers itself with [`toolbox_host::register_provider!`]; a binary gets it by
//! linking the umbrella crate with the `web` feature.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod convert;
mod fetch;
pub mod guard;
mod http;
mod search;

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::{ParsedCache, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

use crate::config::WebConfig;
use crate::http::Clients;

toolbox_host::register_provider!("web", || std::sync::Arc::new(Web::default()));

/// The `web` provider. It keeps the HTTP clients (and their connection pools) between calls.
#[derive(Default)]
pub struct Web {
    /// The clients built from the `[web]` table.
    clients: ParsedCache<Clients>,
}

impl Web {
    /// The clients for this call's configuration: built on first use, reused while the
    /// `[web]` table stays the same.
    fn clients(&self, ctx: &ToolContext) -> Result<Clients> {
        let clients = self
            .clients
            .get_or_build(ctx.provider_config("web"), |table| {
                let config = WebConfig::from_table(table)
                    .map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))?;
                Clients::build(config)
            })?;
        Ok((*clients).clone())
    }
}

#[async_trait]
impl ToolProvider for Web {
    fn name(&self) -> &str {
        "web"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// Every web tool, each listed once.
static TOOLS: LazyLock<Tools<Web>> = LazyLock::new(|| {
    Tools::<Web>::new("web")
        .tool(fetch::info(), |p, _, args, ctx| {
            output(async move { fetch::run(p.clients(ctx)?, args, ctx).await })
        })
        .tool(search::info(), |p, _, args, ctx| {
            output(async move { search::run(p.clients(ctx)?, args, ctx).await })
        })
});
