//! toolbox-skill is the `skill` provider: Agent Skills — folders holding a `SKILL.md`
//! (YAML frontmatter with `name` and `description`, then instructions) beside `scripts/`,
//! `references/` and `assets/` — found, loaded and read, each jailed to its own folder.
//!
//! | tool | alias | risk | what it does |
//! |---|---|---|---|
//! | `skill` | `Skill` | read | load a skill by name: its instructions, its files, how to run its scripts |
//! | `skill_lookup` | | read | find skills by words of their name or description, ranked; also what was skipped and why |
//! | `skill_resource` | | read | one text file of a skill, by skill name and path inside its folder, a window at a time |
//!
//! All three are in the `skills` toolset. Skills are found in `<workspace>/skills`,
//! `<workspace>/.toolbox/skills` and the operator's `[skill] dirs` ([`registry`]); an invalid
//! skill is skipped with its reasons, never an error. A skill name from a model is parsed
//! once into a [`SkillName`] before any path is built; a skill's folder is held by
//! descriptor and its files are opened beneath it with `openat2(RESOLVE_BENEATH)`.
//!
//! The crate registers a [`toolbox_host::SkillResolver`], so `run_python_code` runs a
//! skill's script given as `script_path: "skill:<name>/scripts/x.py"` without the two
//! providers depending on each other.
//!
//! For programs: [`SkillSet::discover`] finds the skills, [`render_index`] writes the index
//! for an agent's system prompt, and [`render_check`] is what `toolbox skills --check` says.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod files;
pub mod frontmatter;
mod load;
mod lookup;
mod name;
pub mod registry;
mod resource;
mod script;

use std::sync::{Arc, LazyLock};

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::{Arg, Key, Table, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools, Workspace};

pub use frontmatter::SkillMd;
pub use lookup::rank;
pub use name::{InvalidSkillName, SkillName};
pub use registry::{Skill, SkillConfig, SkillSet, Skipped};

toolbox_host::register_provider!("skill", || Arc::new(SkillProvider::default()));
toolbox_host::register_skill_resolver!("skill", script::resolve);

/// `[skill] dirs`: more skill roots. An untrusted workspace's toolbox.toml may not set it
/// (nor anything in `[skill]`): it would let a repository point toolbox at folders outside it.
const DIRS: Key = Key::strings("dirs");
/// The `[skill]` table.
const TABLE: Table = Table::new("skill", &[DIRS]);
toolbox_core::register_table!(TABLE);

/// The `name` argument of `skill` and `skill_resource` (each adds its own aliases).
const NAME_ARG: Arg = Arg::string("name").required();
/// The description of the `name` argument.
const NAME_DOC: &str = "The skill's name, e.g. \"pdf-report\".";

/// The toolset every skill tool belongs to.
const TOOLSET: &str = "skills";

/// The `skill` provider. It holds no state: every call looks at the skill folders afresh.
#[derive(Debug, Default, Clone)]
pub struct SkillProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for SkillProvider {
    fn name(&self) -> &str {
        "skill"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// The skills visible to a call, found on the blocking pool.
async fn discover(tool: &'static str, ctx: &ToolContext) -> Result<Arc<SkillSet>> {
    let workspace = ctx.workspace.clone();
    let config = ctx.config.clone();
    toolbox_host::blocking(format!("{tool}: looking for skills"), move || {
        SkillSet::discover(&workspace, &config)
    })
    .await?
    .map(Arc::new)
    .map_err(|e| anyhow!("{tool}: invalid configuration: {e:#}"))
}

/// Every skill tool, each listed once.
static TOOLS: LazyLock<Tools<SkillProvider>> = LazyLock::new(|| {
    Tools::<SkillProvider>::new("skill")
        .tool(load::info(), |_, _, args, ctx| output(load::run(args, ctx)))
        .tool(lookup::info(), |_, _, args, ctx| {
            output(lookup::run(args, ctx))
        })
        .tool(resource::info(), |_, _, args, ctx| {
            output(resource::run(args, ctx))
        })
});

/// A skill name from a model, parsed; the error names the tool.
fn parse_name(tool: &str, raw: &str) -> Result<SkillName> {
    SkillName::parse(raw.trim()).map_err(|e| anyhow!("{tool}: {e}"))
}

/// The skill named `name`, or an error naming the tool.
fn find<'a>(tool: &str, set: &'a SkillSet, name: &SkillName) -> Result<&'a Skill> {
    find_skill(set, name).map_err(|e| anyhow!("{tool}: {e}"))
}

/// The skill named `name`; otherwise why not: skipped (with the reasons) or unknown (with
/// the names there are).
fn find_skill<'a>(set: &'a SkillSet, name: &SkillName) -> Result<&'a Skill> {
    if let Some(skill) = set.get(name) {
        return Ok(skill);
    }
    let folder = format!("/{name}");
    let file = format!("/{name}/SKILL.md");
    if let Some(skipped) = set
        .skipped()
        .iter()
        .find(|s| s.path.ends_with(&folder) || s.path.ends_with(&file))
    {
        return Err(anyhow!(
            "skill {name} cannot be used: {}: {}",
            skipped.path,
            skipped.reason()
        ));
    }
    let names: Vec<&str> = set.skills().iter().map(|s| s.name().as_str()).collect();
    if names.is_empty() {
        return Err(anyhow!(
            "there is no skill named {name}: no skills were found (looked in {})",
            set.roots().join(", ")
        ));
    }
    let mut shown = names
        .iter()
        .take(30)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 30 {
        shown.push_str(", …");
    }
    Err(anyhow!(
        "there is no skill named {name} (skills: {shown}; skill_lookup finds them by words)"
    ))
}

/// The skill index for an agent's system prompt: what skills are and how to load one, then
/// each skill's name and description, one line each. Empty when there are no skills, so a
/// prompt builder can leave the section out.
///
/// ```no_run
/// # fn demo() -> anyhow::Result<()> {
/// let workspace = toolbox_host::Workspace::new(".")?;
/// let set = toolbox_skill::SkillSet::discover(&workspace, &serde_json::Value::Null)?;
/// let section = toolbox_skill::render_index(&set);
/// # Ok(()) }
/// ```
pub fn render_index(set: &SkillSet) -> String {
    if set.skills().is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Skills\n\nSkills are folders of instructions, scripts and references for particular \
         tasks. When a task matches a skill's description, load the skill with the `skill` tool \
         ({\"name\": \"<name>\"}) before starting, and follow its instructions.\n\n",
    );
    for skill in set.skills() {
        out.push_str(&format!(
            "- {}: {}\n",
            skill.name(),
            lookup::one_line(skill.description())
        ));
    }
    out
}

/// [`render_index`] for a workspace and a configuration (the executor's provider tables,
/// as `ToolContext::config` holds them).
pub fn system_prompt_index(workspace: &Workspace, config: &Value) -> Result<String> {
    Ok(render_index(&SkillSet::discover(workspace, config)?))
}

/// What `toolbox skills` prints: one line per skill (name, location, description), then the
/// skipped folders.
pub fn render_listing(set: &SkillSet) -> String {
    let mut out = String::new();
    if set.skills().is_empty() {
        out.push_str(&format!(
            "no skills (looked in {})\n",
            set.roots().join(", ")
        ));
    }
    let width = set
        .skills()
        .iter()
        .map(|s| s.name().as_str().len())
        .max()
        .unwrap_or(0);
    for skill in set.skills() {
        let description = lookup::one_line(skill.description());
        let short: String = description.chars().take(100).collect();
        let more = if short.len() < description.len() {
            "…"
        } else {
            ""
        };
        out.push_str(&format!(
            "{:width$}  {short}{more}  [{}]\n",
            skill.name().as_str(),
            skill.location()
        ));
    }
    for s in set.skipped() {
        out.push_str(&format!("skipped {}: {}\n", s.path, s.reason()));
    }
    out
}

/// What `toolbox skills --check` prints, and whether every skill folder is valid: each
/// problem on its own line as `<file>: <rule>`, then a summary.
pub fn render_check(set: &SkillSet) -> (String, bool) {
    let mut out = String::new();
    for s in set.skipped() {
        for problem in &s.problems {
            out.push_str(&format!("{}: {problem}\n", s.path));
        }
    }
    for skill in set.skills() {
        let other = &skill.skill_md().other_keys;
        if !other.is_empty() {
            out.push_str(&format!(
                "note: {}/SKILL.md: keys the Agent Skills format does not define are ignored: {}\n",
                skill.location(),
                other.join(", ")
            ));
        }
    }
    let ok = set.skipped().is_empty();
    let problems: usize = set.skipped().iter().map(|s| s.problems.len()).sum();
    if ok {
        out.push_str(&format!(
            "ok: {} skill{} valid (looked in {})\n",
            set.skills().len(),
            if set.skills().len() == 1 { "" } else { "s" },
            set.roots().join(", ")
        ));
    } else {
        out.push_str(&format!(
            "{problems} problem{} in {} skill folder{}; {} skill{} valid\n",
            if problems == 1 { "" } else { "s" },
            set.skipped().len(),
            if set.skipped().len() == 1 { "" } else { "s" },
            set.skills().len(),
            if set.skills().len() == 1 {
                " is"
            } else {
                "s are"
            },
        ));
    }
    (out, ok)
}
