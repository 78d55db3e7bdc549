//! `memory__delete`: removes one memory.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object_schema;
use toolbox_core::{Args, ToolContext, ToolInfo, ToolRisk};

use crate::{header, id_arg, id_prop, unknown_id, MemoryProvider, TOOLSET};

pub(crate) const NAME: &str = "memory__delete";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Delete one memory by its id, for a note that is wrong or no longer true (save \
         the corrected note first). This cannot be undone.",
        object_schema(&[("id", id_prop("The memory's id, e.g. 12."))], &["id"]),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&[TOOLSET])
}

pub(crate) async fn run(p: &MemoryProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    args.reject_unknown(&["id", "memory_id"])?;
    let id = id_arg(&args)?;
    let memory = p
        .with_store(NAME, ctx, false, move |store| match store {
            None => Err(unknown_id(id)),
            Some(store) => store.delete(id)?.ok_or_else(|| unknown_id(id)),
        })
        .await?;
    Ok(Value::String(format!("Deleted {}", header(&memory))))
}
