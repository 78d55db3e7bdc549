//! `memory__get`: one memory in full.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object_schema;
use toolbox_core::{Args, ToolContext, ToolInfo};

use crate::{header, id_arg, id_prop, unknown_id, MemoryProvider, TOOLSET};

pub(crate) const NAME: &str = "memory__get";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Read one memory in full by its id (as shown by memory__search or memory__list): \
         title, date, tags and the whole text.",
        object_schema(&[("id", id_prop("The memory's id, e.g. 12."))], &["id"]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    args.reject_unknown(&["id", "memory_id"])?;
    let id = id_arg(&args)?;
    let memory = p
        .with_store(NAME, ctx, false, move |store| match store {
            None => Err(unknown_id(id)),
            Some(store) => store.get(id)?.ok_or_else(|| unknown_id(id)),
        })
        .await?;
    Ok(Value::String(format!(
        "{}\n\n{}",
        header(&memory),
        memory.text
    )))
}
