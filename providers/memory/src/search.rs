//! `memory__search`: full-text search, best first, with a highlighted snippet per result.

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::{header, tags_arg, tags_note, MemoryProvider, TAGS, TOOLSET};

pub(crate) const NAME: &str = "memory__search";
const DEFAULT_LIMIT: u64 = 10;
const QUERY: Arg = Arg::string("query").aliases(&["q"]).required();
const LIMIT: Arg = Arg::integer("limit", 1, Some(50)).default(DEFAULT_LIMIT);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search long-term memory. Type words or a phrase in any language (Chinese works; \
         no special syntax: quotes, AND, * and the like are plain text). Memories with the \
         exact phrase come first, then those with every word, then those with some; the \
         title counts most. Each result has its id, title, date, tags and an excerpt with \
         the matches in **bold**; read a whole memory with memory__get.",
        object(&[
            QUERY.doc("Words or a phrase to look for."),
            TAGS.doc("Only memories carrying all of these tags (exact match)."),
            LIMIT.doc(format!(
                "How many results at most (default {DEFAULT_LIMIT})."
            )),
        ]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let query = QUERY.str(&args)?.to_string();
    if query.trim().is_empty() {
        bail!("{NAME}: argument `query` is empty");
    }
    let tags = tags_arg(&args)?;
    let limit = LIMIT.u64(&args)? as usize;
    args.finish()?;
    let (q, filter) = (query.clone(), tags.clone());
    let hits = p
        .with_store(NAME, ctx, false, move |store| match store {
            None => Ok(None),
            Some(store) => store.search(&q, &filter, limit).map(Some),
        })
        .await?;
    let which = tags_note(&tags);
    let Some(hits) = hits else {
        return Ok(Value::String("No memories saved yet.".into()));
    };
    if hits.is_empty() {
        return Ok(Value::String(format!(
            "No memories{which} match {query:?}."
        )));
    }
    let mut out = format!(
        "Found {} memor{}{which} for {query:?}, best first:\n",
        hits.len(),
        if hits.len() == 1 { "y" } else { "ies" }
    );
    for hit in &hits {
        out.push_str(&format!("\n{}\n  {}\n", header(&hit.memory), hit.snippet));
    }
    Ok(Value::String(out))
}
