//! toolbox-image-gen is the `image_gen` provider: one tool that makes pictures.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `image_gen__generate` | file_write | ask an OpenAI-compatible images endpoint for 1–4 PNGs and save them in the session's `output/` folder |
//!
//! The tool is in the `images` toolset. It POSTs `{base_url}/images/generations` with
//! `{model, prompt, n, size}` and a Bearer key — plus `response_format: "b64_json"` unless the
//! model is a `gpt-image-*` one, which always answers in base64 and rejects the parameter —
//! checks that each image really is a PNG, and writes it under a fresh name in
//! [`Workspace::output_dir`](toolbox_host::Workspace::output_dir), returning the paths as the
//! model sees them (`output/image-….png`). The endpoint is configured by the operator, never
//! by the model, so it is not subject to an address guard (a local server works).
//!
//! Configuration, first match wins (see docs/providers/image_gen.md):
//! - base URL: `[image_gen] base_url`, `TOOLBOX_IMAGE_BASE_URL`, `OPENAI_BASE_URL`, and
//!   `https://api.openai.com/v1` only when an API key is set;
//! - model: `[image_gen] model`, `TOOLBOX_IMAGE_MODEL`, else `gpt-image-1`;
//! - key: the environment variable named by `[image_gen] api_key_env` (default `OPENAI_API_KEY`).
//!
//! `generate` is the tool; `config` resolves the endpoint from the table and the environment.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod generate;

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::{ParsedCache, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

pub use crate::generate::NAME;

toolbox_host::register_provider!("image_gen", || std::sync::Arc::new(ImageGen::default()));

/// The `image_gen` provider. It keeps one HTTP client (and its connection pool) per
/// configuration.
#[derive(Default)]
pub struct ImageGen {
    client: ParsedCache<reqwest::Client>,
}

#[async_trait]
impl ToolProvider for ImageGen {
    fn name(&self) -> &str {
        "image_gen"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

impl ImageGen {
    /// The HTTP client for this `[image_gen]` table, built once per table.
    pub(crate) fn client(
        &self,
        table: Option<&Value>,
        endpoint: &config::Endpoint,
    ) -> Result<reqwest::Client> {
        let client = self.client.get_or_build(table, |_| {
            // reqwest is built with `rustls-no-provider`: install ring unless the embedding
            // program already installed a provider (then theirs is used).
            if rustls::crypto::CryptoProvider::get_default().is_none() {
                let _ = rustls::crypto::ring::default_provider().install_default();
            }
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(30).min(endpoint.timeout))
                .timeout(endpoint.timeout)
                .user_agent(concat!(
                    "toolbox/",
                    env!("CARGO_PKG_VERSION"),
                    " (image_gen)"
                ))
                // The endpoint is configured; a redirect would be a misconfiguration, and
                // following it would resend the prompt somewhere else.
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .map_err(|e| anyhow!("{NAME}: cannot build the HTTP client: {e}"))
        })?;
        Ok((*client).clone())
    }
}

/// Every image_gen tool, each listed once.
static TOOLS: LazyLock<Tools<ImageGen>> = LazyLock::new(|| {
    Tools::<ImageGen>::new("image_gen").tool(generate::info(), |p, _, args, ctx| {
        output(generate::run(p, args, ctx))
    })
});
