//! `pdf__read`: the text of all or some pages, with page markers, capped.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::{doc, open, pages, pages_arg, pages_prop, path_prop, PATH, TOOLSET};

pub(crate) const NAME: &str = "pdf__read";
const DEFAULT_MAX_CHARS: u64 = 40_000;
const MAX_CHARS: Arg = Arg::integer("max_chars", 1, Some(5_000_000)).default(DEFAULT_MAX_CHARS);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Extract the text of a PDF file, all pages or the pages you name, with a \
         `--- page N ---` line before each page. Output is capped at max_chars; the \
         note at the end says which pages to ask for next.",
        object(&[
            path_prop(),
            pages_prop(),
            MAX_CHARS.doc(format!(
                "Return at most this many characters (default {DEFAULT_MAX_CHARS})."
            )),
        ]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    let spec = pages_arg(NAME, &args)?;
    let max_chars = MAX_CHARS.u64(&args)? as usize;
    args.finish()?;
    let (pdf, shown) = open(NAME, given, ctx).await?;
    pdf.ensure_readable(&shown)
        .map_err(|e| anyhow!("{NAME}: {e}"))?;
    let wanted = pages::parse(NAME, spec.as_deref(), pdf.page_count)?;
    let cancel = ctx.cancel.clone();
    let total = pdf.page_count;
    let texts = {
        let wanted = wanted.clone();
        toolbox_host::blocking(format!("{NAME}: the PDF task"), move || {
            pdf.pages_text(&wanted, max_chars, &cancel)
        })
        .await?
    };
    if ctx.cancel.is_cancelled() {
        bail!("{NAME}: cancelled");
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
                "\n\n[truncated at {max_chars} characters (max_chars), in page {stopped_in}; to read on, call {NAME} with pages=\"{}\" or a larger max_chars]",
                pages::describe(&rest).replace(", ", ",")
            ));
        }
    }
    Ok(Value::String(out))
}
