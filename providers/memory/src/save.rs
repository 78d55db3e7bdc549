//! `memory__save`: stores a text with an optional title and tags, returns its id.

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::{
    settings, tags_arg, text, MemoryProvider, MAX_TAGS, MAX_TAG_CHARS, MAX_TITLE_BYTES, TAGS,
    TOOLSET,
};

pub(crate) const NAME: &str = "memory__save";
const TEXT: Arg = Arg::string("text").aliases(&["content"]).required();
const TITLE: Arg = Arg::string("title");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Save a note to long-term memory, kept across sessions: a fact, a decision, a user \
         preference, a result worth finding again. Returns the new memory's id. Write the \
         text so it makes sense on its own later; add a short title and tags to find it \
         by (memory__search, memory__list).",
        object(&[
            TEXT.doc("What to remember (any language)."),
            TITLE.doc("A short title (optional)."),
            TAGS.doc(format!(
                "Tags to file it under, e.g. [\"project-x\", \"decision\"] (optional; at \
                 most {MAX_TAGS}, each up to {MAX_TAG_CHARS} characters; they compare exactly)."
            )),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let max = settings(ctx)?.max_text_bytes;
    let body = TEXT.str(&args)?;
    if body.trim().is_empty() {
        bail!(
            "{NAME}: text is empty; a memory needs 1 to {max} bytes of text ([memory] max_text_bytes)"
        );
    }
    if body.len() as u64 > max {
        bail!(
            "{NAME}: text is {} bytes, more than the {max}-byte limit ([memory] max_text_bytes); save a summary, or split it into several memories",
            body.len()
        );
    }
    let title = TITLE
        .opt_str(&args)?
        .map(text::one_line)
        .filter(|t| !t.is_empty());
    if let Some(t) = &title {
        if t.len() > MAX_TITLE_BYTES {
            bail!(
                "{NAME}: title is {} bytes, more than the {MAX_TITLE_BYTES}-byte limit",
                t.len()
            );
        }
    }
    let tags = tags_arg(&args)?;
    args.finish()?;
    let body = body.to_string();
    let id = p
        .with_store(NAME, ctx, true, move |store| {
            let store = store.expect("created");
            store.save(title.as_deref(), &body, &tags)
        })
        .await?;
    Ok(Value::String(format!("Saved memory #{id}.")))
}
