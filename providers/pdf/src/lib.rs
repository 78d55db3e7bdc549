//! toolbox-pdf is the `pdf` provider: three read-only tools for PDF files in the workspace.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `pdf__info` | read | page count, metadata (title, author, producer, dates, …), encrypted or not |
//! | `pdf__read` | read | the text of all or some pages (`pages: "1-3,7"`) with `--- page N ---` markers, capped |
//! | `pdf__search` | read | case-insensitive search; each match with its page number and context |
//!
//! All three are in the `documents` toolset. Text comes from pdf-extract over lopdf (pure
//! Rust). Those libraries can panic on damaged files, so every call into them is wrapped in
//! `catch_unwind` on tokio's blocking pool (`doc::guarded`): a corrupt file is an error
//! that names it, never a crash. Files encrypted with a user password are reported by
//! `pdf__info` and refused with a clear error by the text tools.
//!
//! The crate also registers a [`toolbox_host::ContentExtractor`] for `application/pdf`, which
//! `web_fetch` uses to read PDF responses when this provider is linked.
//!
//! One module per tool (`info`, `read`, `search`); `doc` loads a file and extracts text,
//! `pages` parses page lists. The shared file opening (jail, size cap) lives here.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod doc;
mod info;
mod pages;
mod read;
mod search;

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::trust::Tighten;
use toolbox_core::{Arg, Args, Key, Prop, Table, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

use crate::doc::Pdf;

toolbox_host::register_provider!("pdf", || std::sync::Arc::new(PdfProvider::default()));
toolbox_host::register_extractor!("pdf", &["application/pdf"], doc::extract_all);

/// The toolset every pdf tool belongs to.
const TOOLSET: &str = "documents";
/// Files larger than this are refused unless `[pdf] max_file_bytes` says otherwise: the whole
/// file is parsed in memory.
const DEFAULT_MAX_FILE_BYTES: u64 = 200 * 1024 * 1024;

/// `[pdf] max_file_bytes`: an untrusted workspace's toolbox.toml may only lower it.
const MAX_FILE_BYTES: Key =
    Key::integer("max_file_bytes", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULT_MAX_FILE_BYTES));
/// The `[pdf]` table.
const TABLE: Table = Table::new("pdf", &[MAX_FILE_BYTES]);
toolbox_core::register_table!(TABLE);

/// The `path` argument every pdf tool takes.
const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
/// The `pages` argument of the text tools.
const PAGES: Arg = Arg::string("pages").aliases(&["page"]);

/// The `pdf` provider. It holds no state: every call reads its file afresh.
#[derive(Debug, Default, Clone)]
pub struct PdfProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for PdfProvider {
    fn name(&self) -> &str {
        "pdf"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// The `path` property every pdf tool takes.
fn path_prop() -> Prop {
    PATH.doc("Path of the PDF file in the workspace.")
}

/// Every pdf tool, each listed once.
static TOOLS: LazyLock<Tools<PdfProvider>> = LazyLock::new(|| {
    Tools::<PdfProvider>::new("pdf")
        .tool(info::info(), |_, _, args, ctx| output(info::run(args, ctx)))
        .tool(read::info(), |_, _, args, ctx| output(read::run(args, ctx)))
        .tool(search::info(), |_, _, args, ctx| {
            output(search::run(args, ctx))
        })
});

/// The `pages` property of the text tools.
fn pages_prop() -> Prop {
    PAGES.doc("Pages to use, e.g. \"1-3,7\" or \"10-\" (default: all pages).")
}

/// Resolves, size-checks, reads and parses the file named by `path`, on the blocking pool.
/// Returns the parsed document and the path as the model should see it.
async fn open(tool: &'static str, given: &str, ctx: &ToolContext) -> Result<(Pdf, String)> {
    let ws = ctx.workspace.clone();
    let p = ws.locate(given).map_err(|e| anyhow!("{tool}: {e}"))?;
    let shown = ws.show(&p);
    let max_bytes = max_file_bytes(ctx)?;
    let name = shown.clone();
    let pdf = toolbox_host::blocking(format!("{tool}: the PDF task"), move || -> Result<Pdf> {
        use std::io::Read;
        // Opened beneath the workspace root by descriptor; what is parsed is what was checked.
        let file = ws.open_read(&p).map_err(|e| match e {
            toolbox_host::PathError::Io { ref source, .. }
                if source.kind() == std::io::ErrorKind::IsADirectory =>
            {
                anyhow!("{name} is a directory, not a PDF file")
            }
            other => anyhow!("{other}"),
        })?;
        let meta = file
            .metadata()
            .map_err(|e| anyhow!("cannot read {name}: {e}"))?;
        if meta.len() > max_bytes {
            bail!(
                "{name} is {} bytes, more than the {max_bytes}-byte limit ([pdf] max_file_bytes)",
                meta.len()
            );
        }
        let mut bytes = Vec::new();
        file.take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| anyhow!("cannot read {name}: {e}"))?;
        doc::load(&bytes, &name)
    })
    .await?
    .map_err(|e| anyhow!("{tool}: {e:#}"))?;
    Ok((pdf, shown))
}

/// `[pdf] max_file_bytes`, read through [`TABLE`] on every call (one key).
fn max_file_bytes(ctx: &ToolContext) -> Result<u64> {
    let read = || MAX_FILE_BYTES.u64(&TABLE.read(&ctx.config)?);
    let max = read().map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))?;
    Ok(max.unwrap_or(DEFAULT_MAX_FILE_BYTES))
}

/// The `pages` argument as text; a bare number is accepted too.
fn pages_arg(tool: &str, args: &Args<'_>) -> Result<Option<String>> {
    match PAGES.opt_str(args) {
        Ok(v) => Ok(v.map(str::to_string)),
        Err(_) => match PAGES.opt_value(args).and_then(whole_number) {
            Some(n) => Ok(Some(n.to_string())),
            None => bail!("{tool}: argument `pages` must be a string like \"1-3,7\""),
        },
    }
}

/// A non-negative whole number (`7`, or `7.0`), as `Args` reads an integer.
fn whole_number(value: &Value) -> Option<u64> {
    let n = value.as_number()?;
    n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}
