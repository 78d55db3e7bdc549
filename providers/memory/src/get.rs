//! `memory__get`: one memory in full.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::ToolInfo;
use toolbox_host::ToolContext;

use crate::{header, MemoryProvider, ID, TOOLSET};

pub(crate) const NAME: &str = "memory__get";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Read one memory in full by its id (as shown by memory__search or memory__list): \
         title, date, tags and the whole text.",
        object(&[ID.doc("The memory's id, e.g. 12.")]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let memory = p
        .with_memory(NAME, &args, ctx, |store, id| store.get(id))
        .await?;
    Ok(Value::String(format!(
        "{}\n\n{}",
        header(&memory),
        memory.text
    )))
}
