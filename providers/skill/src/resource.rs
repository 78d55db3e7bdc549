//! `skill_resource`: one text file of a skill, jailed to that skill's folder, a window at a
//! time.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::files::{self, SkillPath};
use crate::{discover, find, parse_name, NAME_ARG, NAME_DOC, TOOLSET};

pub const NAME: &str = "skill_resource";
const DEFAULT_LIMIT: u64 = 2000;
/// The skill whose file is read.
const SKILL: Arg = NAME_ARG.aliases(&["skill"]);
const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
/// 0 is read as 1, as it always was.
const OFFSET: Arg = Arg::integer("offset", 0, None).default(1);
const LIMIT: Arg = Arg::integer("limit", 1, Some(20_000)).default(DEFAULT_LIMIT);

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Read one text file of a skill (a reference, a template, a script's source) by the \
         skill's name and the file's path inside the skill's folder, e.g. \
         references/guide.md. Lines are numbered like `cat -n`; the first 2000 lines are \
         shown, use offset and limit to page through longer files. Only files inside the \
         skill's folder can be read; binary files are refused (use them from Python). The \
         skill's own instructions come from the skill tool.",
        object(&[
            SKILL.doc(NAME_DOC),
            PATH.doc("The file, relative to the skill's folder, e.g. references/guide.md."),
            OFFSET.doc("1-based number of the first line to show (default 1)."),
            LIMIT.doc("How many lines to show (default 2000, max 20000)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .toolsets(&[TOOLSET])
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let name = parse_name(NAME, SKILL.str(&a)?)?;
    let raw_path = PATH
        .opt_nonempty_str(&a)?
        .ok_or_else(|| a.missing(PATH.name))?;
    let path = SkillPath::parse(raw_path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    if path.is_skill_md() {
        bail!("{NAME}: SKILL.md is the skill's instructions: load them with skill {{\"name\": \"{name}\"}}");
    }
    let offset = OFFSET.u64(&a)?.max(1);
    let limit = LIMIT.u64(&a)?;
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
