//! `skill_resource`: one text file of a skill, jailed to that skill's folder, a window at a
//! time.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::{object_schema, prop};
use toolbox_core::{Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::files::{self, SkillPath};
use crate::{discover, find, parse_name, TOOLSET};

pub const NAME: &str = "skill_resource";
const DEFAULT_LIMIT: u64 = 2000;
const MAX_LIMIT: u64 = 20_000;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Read one text file of a skill (a reference, a template, a script's source) by the \
         skill's name and the file's path inside the skill's folder, e.g. \
         references/guide.md. Lines are numbered like `cat -n`; the first 2000 lines are \
         shown, use offset and limit to page through longer files. Only files inside the \
         skill's folder can be read; binary files are refused (use them from Python). The \
         skill's own instructions come from the skill tool.",
        object_schema(
            &[
                (
                    "name",
                    prop("string", "The skill's name, e.g. \"pdf-report\"."),
                ),
                (
                    "path",
                    prop(
                        "string",
                        "The file, relative to the skill's folder, e.g. references/guide.md.",
                    ),
                ),
                (
                    "offset",
                    prop(
                        "integer",
                        "1-based number of the first line to show (default 1).",
                    ),
                ),
                (
                    "limit",
                    prop(
                        "integer",
                        "How many lines to show (default 2000, max 20000).",
                    ),
                ),
            ],
            &["name", "path"],
        ),
    )
    .risk(ToolRisk::Read)
    .toolsets(&[TOOLSET])
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let name = parse_name(NAME, a.str("name", &["skill"])?)?;
    let raw_path = a
        .opt_nonempty_str("path", &["file_path"])?
        .ok_or_else(|| a.missing("path"))?;
    let path = SkillPath::parse(raw_path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    if path.is_skill_md() {
        bail!("{NAME}: SKILL.md is the skill's instructions: load them with skill {{\"name\": \"{name}\"}}");
    }
    let offset = a.opt_u64("offset", &[])?.unwrap_or(1).max(1);
    let limit = a.u64_in("limit", &[], DEFAULT_LIMIT, 1, MAX_LIMIT)?;
    a.finish()?;
    let set = discover(NAME, ctx).await?;
    let skill = find(NAME, &set, &name)?.clone();
    toolbox_host::blocking(format!("{NAME}: the read"), move || {
        let file = path.open(&skill)?;
        let shown = format!("{}/{}", skill.name(), path.as_str());
        files::read_window(file, &shown, offset, limit).map(Value::String)
    })
    .await?
    .map_err(|e| anyhow!("{NAME}: {e:#}"))
}
