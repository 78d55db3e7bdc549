//! `memory__list`: memories newest first, optionally only those with some tags, a page at a
//! time.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::store::Page;
use crate::{header, tags_arg, tags_note, text, MemoryProvider, TAGS, TOOLSET};

pub(crate) const NAME: &str = "memory__list";
const DEFAULT_LIMIT: u64 = 20;
const LIMIT: Arg = Arg::integer("limit", 1, Some(100)).default(DEFAULT_LIMIT);
const OFFSET: Arg = Arg::integer("offset", 0, None).default(0);
/// Characters of each memory's text shown in a listing.
const PREVIEW_CHARS: usize = 160;

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "List memories, newest first: id, title, date, tags and the start of the text. \
         Filter by tags (a memory must carry every tag given); page with offset. To find \
         memories about something, use memory__search instead.",
        object(&[
            TAGS.doc("Only memories carrying all of these tags (exact match)."),
            LIMIT.doc(format!("How many to show (default {DEFAULT_LIMIT}).")),
            OFFSET.doc("How many of the newest to skip (default 0)."),
        ]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let tags = tags_arg(&args)?;
    let limit = LIMIT.u64(&args)?;
    // The store counts in i64: an offset past that skips everything either way.
    let offset = OFFSET.u64(&args)?.min(i64::MAX as u64);
    args.finish()?;
    let filter = tags.clone();
    let page = p
        .with_store(NAME, ctx, false, move |store| match store {
            None => Ok(Page {
                memories: Vec::new(),
                total: 0,
            }),
            Some(store) => store.list(&filter, limit, offset),
        })
        .await?;
    Ok(Value::String(render(&page, &tags, offset)))
}

fn render(page: &Page, tags: &[String], offset: u64) -> String {
    let which = tags_note(tags);
    if page.total == 0 {
        return format!("No memories{which} yet.");
    }
    if page.memories.is_empty() {
        return format!(
            "No memories at offset {offset}: there are {} memories{which}.",
            page.total
        );
    }
    let last = offset + page.memories.len() as u64;
    let mut out = format!(
        "Memories{which} {}–{last} of {}, newest first:\n",
        offset + 1,
        page.total
    );
    for m in &page.memories {
        out.push_str(&format!(
            "\n{}\n  {}\n",
            header(m),
            text::preview(&m.text, PREVIEW_CHARS)
        ));
    }
    if last < page.total {
        out.push_str(&format!(
            "\n{} more: call memory__list with offset {last}.",
            page.total - last
        ));
    }
    out
}
