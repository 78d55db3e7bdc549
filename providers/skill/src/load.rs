//! `skill` (alias `Skill`): load one skill — its instructions, its files and how to use them.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{ToolContext, SKILL_REF_PREFIX};

use crate::files::{self, human_size};
use crate::registry::Skill;
use crate::{discover, find, parse_name, NAME_ARG, NAME_DOC, TOOLSET};

pub const NAME: &str = "skill";
/// The skill to load.
const SKILL: Arg = NAME_ARG.aliases(&["skill", "command"]);

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Load a skill by name: a folder of instructions (SKILL.md), scripts and references \
         for one kind of task. Returns the skill's instructions, the list of its files and \
         how to use them. Load a skill before doing a task its description matches, then \
         follow its instructions. Paths in the instructions are relative to the skill's \
         folder: read those files with skill_resource, and run its Python scripts with \
         run_python_code and script_path \"skill:<name>/<path>\". skill_lookup finds skills.",
        object(&[SKILL.doc(NAME_DOC)]),
    )
    .risk(ToolRisk::Read)
    .aliases(&["Skill"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "Skill")
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let name = parse_name(NAME, SKILL.str(&a)?)?;
    a.finish()?;
    let set = discover(NAME, ctx).await?;
    let skill = find(NAME, &set, &name)?.clone();
    // The tool that runs a skill's scripts, by the name the model knows it.
    let python = toolbox_host::find_code_runner("python")
        .is_some()
        .then(|| ctx.word("run_python_code").to_string());
    toolbox_host::blocking(format!("{NAME}: listing the skill's files"), move || {
        let (listed, cut) = files::list(skill.dir());
        Value::String(render(&skill, &listed, cut, python.as_deref()))
    })
    .await
}

/// The text the model gets for a loaded skill; `python` is the name of the tool that runs
/// Python (as the model knows it), `None` when this toolbox has none.
pub fn render(
    skill: &Skill,
    listed: &[files::ListedFile],
    cut: bool,
    python: Option<&str>,
) -> String {
    let md = skill.skill_md();
    let name = skill.name();
    let mut out = format!("skill {name} ({})\n{}\n", skill.location(), md.description);
    if let Some(license) = &md.license {
        out.push_str(&format!("license: {license}\n"));
    }
    if let Some(c) = &md.compatibility {
        out.push_str(&format!("compatibility: {c}\n"));
    }
    if !md.allowed_tools.is_empty() {
        out.push_str(&format!("allowed tools: {}\n", md.allowed_tools.join(", ")));
    }
    for (k, v) in &md.metadata {
        out.push_str(&format!("metadata {k}: {v}\n"));
    }
    out.push_str("\n--- instructions (SKILL.md) ---\n");
    if md.body.is_empty() {
        out.push_str("(SKILL.md has no instructions beyond its description)\n");
    } else {
        out.push_str(&md.body);
        out.push('\n');
    }
    out.push_str("\n--- files ---\n");
    if listed.is_empty() {
        out.push_str("(none besides SKILL.md)\n");
    }
    for f in listed {
        match f.size {
            Some(size) => out.push_str(&format!("{} ({})\n", f.path, human_size(size))),
            None => out.push_str(&format!("{} (link)\n", f.path)),
        }
    }
    if cut {
        out.push_str(&format!(
            "… (only the first {} files are listed)\n",
            files::MAX_LISTED_FILES
        ));
    }
    out.push_str("\n--- using its files ---\n");
    out.push_str("Paths above and in the instructions are relative to the skill's folder.");
    let example = listed
        .iter()
        .find(|f| !f.path.starts_with("scripts/"))
        .or(listed.first());
    if let Some(example) = example {
        let args = serde_json::json!({"name": name.as_str(), "path": example.path});
        out.push_str(&format!(" Read a file with skill_resource {args}."));
    }
    out.push('\n');
    let scripts: Vec<&str> = listed
        .iter()
        .map(|f| f.path.as_str())
        .filter(|p| p.ends_with(".py"))
        .collect();
    if let Some(first) = scripts.first() {
        if let Some(python) = python {
            out.push_str(&format!(
                "Run a Python script with {python} {{\"script_path\": \
                 \"{SKILL_REF_PREFIX}{name}/{first}\", \"args\": [...]}}: it runs as __main__ \
                 in this session's interpreter with args as sys.argv[1:], and its working \
                 directory is the session scratchpad. Write results to OUTPUT_DIR (the \
                 session's output/ folder; ../output/ from the working directory) so the \
                 user gets them.\n"
            ));
        } else {
            out.push_str(
                "This toolbox has no Python provider, so the skill's Python scripts cannot \
                 be run here; read them with skill_resource.\n",
            );
        }
    }
    if listed
        .iter()
        .any(|f| f.path.starts_with("scripts/") && !f.path.ends_with(".py"))
    {
        out.push_str(&format!(
            "Only .py scripts run through {}; read the others with skill_resource and do \
             what they do another way.\n",
            python.unwrap_or("run_python_code")
        ));
    }
    out.pop();
    out
}
