//! `memory__delete`: removes one memory.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::{header, MemoryProvider, ID, TOOLSET};

pub(crate) const NAME: &str = "memory__delete";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Delete one memory by its id, for a note that is wrong or no longer true (save \
         the corrected note first). This cannot be undone.",
        object(&[ID.doc("The memory's id, e.g. 12.")]),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let memory = p
        .with_memory(NAME, &args, ctx, |store, id| store.delete(id))
        .await?;
    Ok(Value::String(format!("Deleted {}", header(&memory))))
}
