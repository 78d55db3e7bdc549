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
//! `catch_unwind` on tokio's blocking pool ([`doc::guarded`]): a corrupt file is an error
//! that names it, never a crash. Files encrypted with a user password are reported by
//! `pdf__info` and refused with a clear error by the text tools.
//!
//! The crate also registers a [`toolbox_core::ContentExtractor`] for `application/pdf`, which
//! `web_fetch` uses to read PDF responses when this provider is linked.

mod doc;
mod pages;

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use serde_json::{json, Value};
use toolbox_core::{Args, ConfigTable, ToolContext, ToolInfo, ToolProvider};

use crate::doc::Pdf;

toolbox_core::register_provider!("pdf", || std::sync::Arc::new(PdfProvider::default()));
toolbox_core::register_extractor!("pdf", &["application/pdf"], doc::extract_all);

const TOOLSET: &str = "documents";
const INFO: &str = "pdf__info";
const READ: &str = "pdf__read";
const SEARCH: &str = "pdf__search";
const DEFAULT_MAX_CHARS: u64 = 40_000;
const DEFAULT_MAX_RESULTS: u64 = 20;
/// Characters of context shown on each side of a search match.
const CONTEXT_CHARS: usize = 80;
/// Files larger than this are refused unless `[pdf] max_file_bytes` says otherwise: the whole
/// file is parsed in memory.
const DEFAULT_MAX_FILE_BYTES: u64 = 200 * 1024 * 1024;

// An untrusted workspace's toolbox.toml may only lower [pdf] max_file_bytes.
toolbox_core::workspace_config_rules!(
    "pdf",
    [(
        "max_file_bytes",
        toolbox_core::trust::Tighten::AtMost(DEFAULT_MAX_FILE_BYTES)
    )]
);

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
        let path =
            json!({"type": "string", "description": "Path of the PDF file in the workspace."});
        let pages = json!({"type": "string", "description": "Pages to use, e.g. \"1-3,7\" or \"10-\" (default: all pages)."});
        vec![
            ToolInfo::new(
                INFO,
                "Describe a PDF file: page count, metadata (title, author, subject, creator, \
                 producer, creation and modification dates) and whether it is encrypted. Cheap; \
                 use it before reading a long document.",
                json!({"type": "object", "properties": {"path": path},
                       "required": ["path"], "additionalProperties": false}),
            )
            .toolsets(&[TOOLSET]),
            ToolInfo::new(
                READ,
                "Extract the text of a PDF file, all pages or the pages you name, with a \
                 `--- page N ---` line before each page. Output is capped at max_chars; the \
                 note at the end says which pages to ask for next.",
                json!({"type": "object", "properties": {
                    "path": path,
                    "pages": pages,
                    "max_chars": {"type": "integer", "minimum": 1,
                        "description": format!("Return at most this many characters (default {DEFAULT_MAX_CHARS}).")}
                }, "required": ["path"], "additionalProperties": false}),
            )
            .toolsets(&[TOOLSET]),
            ToolInfo::new(
                SEARCH,
                "Search the text of a PDF file for a phrase (case-insensitive; line breaks \
                 and runs of spaces in the PDF match a single space). Returns each match with \
                 its page number and the surrounding text.",
                json!({"type": "object", "properties": {
                    "path": path,
                    "query": {"type": "string", "description": "The text to look for."},
                    "pages": pages,
                    "max_results": {"type": "integer", "minimum": 1, "maximum": 500,
                        "description": format!("Show at most this many matches (default {DEFAULT_MAX_RESULTS}).")}
                }, "required": ["path", "query"], "additionalProperties": false}),
            )
            .toolsets(&[TOOLSET]),
        ]
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<Value> {
        match tool {
            INFO => info(args, ctx).await,
            READ => read(args, ctx).await,
            SEARCH => search(args, ctx).await,
            other => Err(anyhow!("pdf has no tool named {other}")),
        }
    }
}

/// Resolves, size-checks, reads and parses the file named by `path`, on the blocking pool.
/// Returns the parsed document and the path as the model should see it.
async fn open(tool: &'static str, args: &Args<'_>, ctx: &ToolContext) -> Result<(Pdf, String)> {
    let given = args.str("path", &["file_path"])?;
    let ws = ctx.workspace.clone();
    let p = ws.locate(given).map_err(|e| anyhow!("{tool}: {e}"))?;
    let shown = ws.show(&p);
    let max_bytes = max_file_bytes(ctx)?;
    let name = shown.clone();
    let pdf = tokio::task::spawn_blocking(move || -> Result<Pdf> {
        use std::io::Read;
        // Opened beneath the workspace root by descriptor; what is parsed is what was checked.
        let file = ws.open_read(&p).map_err(|e| match e {
            toolbox_core::PathError::Io { ref source, .. }
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
    .await
    .map_err(|e| anyhow!("{tool}: the PDF task stopped unexpectedly: {e}"))?
    .map_err(|e| anyhow!("{tool}: {e:#}"))?;
    Ok((pdf, shown))
}

/// `[pdf] max_file_bytes`, read through [`ConfigTable`] on every call (one key).
fn max_file_bytes(ctx: &ToolContext) -> Result<u64> {
    let read = || {
        ConfigTable::from_config(&ctx.config, "pdf", &["max_file_bytes"])?.u64_in(
            "max_file_bytes",
            1,
            u64::MAX,
        )
    };
    let max = read().map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))?;
    Ok(max.unwrap_or(DEFAULT_MAX_FILE_BYTES))
}

/// The `pages` argument as text; a bare number is accepted too.
fn pages_arg(tool: &str, args: &Args<'_>) -> Result<Option<String>> {
    match args.opt_str("pages", &["page"]) {
        Ok(v) => Ok(v.map(str::to_string)),
        Err(_) => match args.opt_u64("pages", &["page"]) {
            Ok(n) => Ok(n.map(|n| n.to_string())),
            Err(_) => bail!("{tool}: argument `pages` must be a string like \"1-3,7\""),
        },
    }
}

async fn info(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(INFO, &args)?;
    args.reject_unknown(&["path", "file_path"])?;
    let (pdf, shown) = open(INFO, &args, ctx).await?;
    let mut out = format!("file: {shown}\n");
    if pdf.locked {
        out.push_str("pages: unknown (the file is encrypted)\n");
        out.push_str(
            "encrypted: yes, with a password — its text and metadata cannot be read without it\n",
        );
    } else {
        out.push_str(&format!("pages: {}\n", pdf.page_count));
        out.push_str(if pdf.encrypted {
            "encrypted: yes, but it opens without a password (owner password only), so it can be read\n"
        } else {
            "encrypted: no\n"
        });
    }
    out.push_str(&format!("PDF version: {}\n", pdf.doc.version));
    if !pdf.locked {
        let meta = tokio::task::spawn_blocking(move || {
            doc::guarded("reading metadata", || Ok(pdf.metadata()))
        })
        .await
        .map_err(|e| anyhow!("{INFO}: the PDF task stopped unexpectedly: {e}"))??;
        if meta.is_empty() {
            out.push_str("metadata: none\n");
        }
        for (label, value) in meta {
            out.push_str(&format!("{label}: {value}\n"));
        }
    }
    Ok(Value::String(out.trim_end().to_string()))
}

async fn read(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(READ, &args)?;
    args.reject_unknown(&["path", "file_path", "pages", "page", "max_chars"])?;
    let spec = pages_arg(READ, &args)?;
    let max_chars = args.u64_in("max_chars", &[], DEFAULT_MAX_CHARS, 1, 5_000_000)? as usize;
    let (pdf, shown) = open(READ, &args, ctx).await?;
    pdf.ensure_readable(&shown)
        .map_err(|e| anyhow!("{READ}: {e}"))?;
    let wanted = pages::parse(READ, spec.as_deref(), pdf.page_count)?;
    let cancel = ctx.cancel.clone();
    let total = pdf.page_count;
    let texts = {
        let wanted = wanted.clone();
        tokio::task::spawn_blocking(move || pdf.pages_text(&wanted, max_chars, &cancel))
            .await
            .map_err(|e| anyhow!("{READ}: the PDF task stopped unexpectedly: {e}"))?
    };
    if ctx.cancel.is_cancelled() {
        bail!("{READ}: cancelled");
    }

    let mut body = String::new();
    for (page, text) in &texts {
        doc::push_page(&mut body, *page, text);
    }
    let header = format!(
        "{shown}: page{} {} of {total}\n",
        if wanted.len() == 1 { "" } else { "s" },
        pages::describe(&wanted)
    );
    let mut out = header;
    match body.char_indices().nth(max_chars) {
        None if texts.len() == wanted.len() => out.push_str(&body),
        cut => {
            let (shown_body, stopped_in) = match cut {
                Some((byte, _)) => {
                    let shown_body = &body[..byte];
                    // The last page marker before the cut is the page the cut fell in.
                    let page = texts
                        .iter()
                        .map(|(p, _)| *p)
                        .rfind(|p| shown_body.contains(&format!("--- page {p} ---")))
                        .unwrap_or(wanted[0]);
                    (shown_body, page)
                }
                None => (
                    body.as_str(),
                    texts.last().map(|(p, _)| *p).unwrap_or(wanted[0]),
                ),
            };
            out.push_str(shown_body);
            let rest: Vec<u32> = wanted
                .iter()
                .copied()
                .filter(|p| *p >= stopped_in)
                .collect();
            out.push_str(&format!(
                "\n\n[truncated at {max_chars} characters (max_chars), in page {stopped_in}; to read on, call {READ} with pages=\"{}\" or a larger max_chars]",
                pages::describe(&rest).replace(", ", ",")
            ));
        }
    }
    Ok(Value::String(out))
}

async fn search(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(SEARCH, &args)?;
    args.reject_unknown(&["path", "file_path", "query", "pages", "page", "max_results"])?;
    let query = args.str("query", &["pattern"])?;
    let needle = fold(&normalize_space(query));
    if needle.is_empty() {
        bail!("{SEARCH}: argument `query` is empty");
    }
    let spec = pages_arg(SEARCH, &args)?;
    let max_results = args.u64_in("max_results", &[], DEFAULT_MAX_RESULTS, 1, 500)? as usize;
    let (pdf, shown) = open(SEARCH, &args, ctx).await?;
    pdf.ensure_readable(&shown)
        .map_err(|e| anyhow!("{SEARCH}: {e}"))?;
    let wanted = pages::parse(SEARCH, spec.as_deref(), pdf.page_count)?;
    let cancel = ctx.cancel.clone();
    let searched = wanted.len();
    let (matches, total, failed) = tokio::task::spawn_blocking(move || {
        let mut matches = Vec::new();
        let mut total = 0usize;
        let mut failed = Vec::new();
        for (page, text) in pdf.pages_text(&wanted, usize::MAX, &cancel) {
            let Ok(text) = text else {
                failed.push(page);
                continue;
            };
            let hay: Vec<char> = normalize_space(&text).chars().collect();
            for at in find_all(&hay, &needle) {
                total += 1;
                if matches.len() < max_results {
                    matches.push((page, context(&hay, at, needle.len())));
                }
            }
        }
        (matches, total, failed)
    })
    .await
    .map_err(|e| anyhow!("{SEARCH}: the PDF task stopped unexpectedly: {e}"))?;
    if ctx.cancel.is_cancelled() {
        bail!("{SEARCH}: cancelled");
    }

    let pages_note = format!(
        "{searched} page{} searched",
        if searched == 1 { "" } else { "s" }
    );
    let mut out = if total == 0 {
        format!("No matches for {query:?} in {shown} ({pages_note}).")
    } else {
        let mut out = format!(
            "{total} match{} for {query:?} in {shown} ({pages_note}){}:\n",
            if total == 1 { "" } else { "es" },
            if total > matches.len() {
                format!(", showing the first {}", matches.len())
            } else {
                String::new()
            }
        );
        for (page, ctx_text) in &matches {
            out.push_str(&format!("\npage {page}: {ctx_text}"));
        }
        out
    };
    if !failed.is_empty() {
        out.push_str(&format!(
            "\n\nNote: the text of page{} {} could not be extracted, so {} not searched.",
            if failed.len() == 1 { "" } else { "s" },
            pages::describe(&failed),
            if failed.len() == 1 {
                "it was"
            } else {
                "they were"
            }
        ));
    }
    Ok(Value::String(out))
}

/// Collapses every run of whitespace (line breaks included) to one space, so a phrase that
/// wraps across lines in the PDF is still found.
fn normalize_space(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Case folding one char at a time, so positions in the folded text are positions in the
/// original (a char whose lower case is several chars keeps its first).
fn fold_char(c: char) -> char {
    c.to_lowercase().next().unwrap_or(c)
}

fn fold(text: &str) -> Vec<char> {
    text.chars().map(fold_char).collect()
}

/// Start positions (in chars) of non-overlapping matches of `needle` in `hay`.
fn find_all(hay: &[char], needle: &[char]) -> Vec<usize> {
    let mut found = Vec::new();
    if needle.is_empty() || needle.len() > hay.len() {
        return found;
    }
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if hay[i..i + needle.len()]
            .iter()
            .zip(needle)
            .all(|(h, n)| fold_char(*h) == *n)
        {
            found.push(i);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    found
}

/// The match with up to [`CONTEXT_CHARS`] on each side, the match itself in `**`.
fn context(hay: &[char], at: usize, len: usize) -> String {
    let from = at.saturating_sub(CONTEXT_CHARS);
    let to = (at + len + CONTEXT_CHARS).min(hay.len());
    let s = |a: usize, b: usize| hay[a..b].iter().collect::<String>();
    format!(
        "{}{}**{}**{}{}",
        if from > 0 { "…" } else { "" },
        s(from, at),
        s(at, at + len),
        s(at + len, to),
        if to < hay.len() { "…" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_is_case_insensitive_and_spans_lines() {
        let hay: Vec<char> = normalize_space("Café  NAÏVE\nZürich café")
            .chars()
            .collect();
        assert_eq!(find_all(&hay, &fold("café naïve zürich")), vec![0]);
        assert_eq!(find_all(&hay, &fold("CAFÉ")), vec![0, 18]);
        assert!(find_all(&hay, &fold("tea")).is_empty());
        let at = find_all(&hay, &fold("naïve"))[0];
        assert_eq!(context(&hay, at, 5), "Café **NAÏVE** Zürich café");
    }

    #[test]
    fn context_is_cut_with_ellipses() {
        let text = format!("{}needle{}", "a".repeat(200), "b".repeat(200));
        let hay: Vec<char> = text.chars().collect();
        let at = find_all(&hay, &fold("NEEDLE"))[0];
        let c = context(&hay, at, 6);
        assert!(c.starts_with('…') && c.ends_with('…'), "{c}");
        assert_eq!(c.chars().count(), 2 + 80 + 10 + 80);
    }
}
