use std::path::PathBuf;

use crate::{inventory, ToolContext};

/// How a tool argument names a file of a skill instead of a workspace path:
/// `skill:<name>/<path inside the skill folder>`, e.g. `skill:pdf-report/scripts/report.py`.
pub const SKILL_REF_PREFIX: &str = "skill:";

/// Whether `path` is a skill reference (`skill:<name>/<path>`) rather than a workspace path.
pub fn is_skill_ref(path: &str) -> bool {
    path.starts_with(SKILL_REF_PREFIX)
}

/// A file of a skill, found by a [`SkillResolver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillFile {
    /// The real absolute path of the file, resolved by the kernel beneath the skill's folder
    /// (links followed only while they stay inside it). For handing to another program.
    pub path: PathBuf,
    /// The real absolute path of the skill's folder.
    pub skill_dir: PathBuf,
    /// How to show the file to the model: the reference it gave, normalised.
    pub shown: String,
}

/// Finds the files of skills (`skill:<name>/<path>`), registered by the skill provider and
/// usable by others.
///
/// This is how `run_python_code` runs a skill's script (`script_path:
/// "skill:pdf-report/scripts/report.py"`) without the python crate depending on the skill
/// crate (see the Architecture Invariant on [`ContentExtractor`](crate::ContentExtractor)).
/// The resolver parses the name once, finds the skill in the roots the call's
/// configuration allows, and opens the path beneath the skill's folder by descriptor: `..`,
/// absolute paths and links leading out of the folder are refused.
pub struct SkillResolver {
    /// Who registered it, e.g. `skill`.
    pub provider: &'static str,
    /// Resolves `reference` (which starts with [`SKILL_REF_PREFIX`]) to an existing regular
    /// file of a skill visible to the call. The error says what is wrong, for the model.
    pub resolve: fn(reference: &str, ctx: &ToolContext) -> anyhow::Result<SkillFile>,
}

inventory::collect!(SkillResolver);

/// The skill resolver, if the skill provider is linked into this binary.
pub fn find_skill_resolver() -> Option<&'static SkillResolver> {
    inventory::iter::<SkillResolver>.into_iter().next()
}

/// Resolves a skill reference with the linked resolver, or says that no skill provider is
/// built in. `tool` names the caller in the error.
pub fn resolve_skill_file(
    reference: &str,
    ctx: &ToolContext,
    tool: &str,
) -> anyhow::Result<SkillFile> {
    match find_skill_resolver() {
        Some(resolver) => {
            (resolver.resolve)(reference, ctx).map_err(|e| anyhow::anyhow!("{tool}: {e:#}"))
        }
        None => anyhow::bail!(
            "{tool}: {reference:?} names a skill's file, but this toolbox was built without the \
             skill provider (Cargo feature `skill`), so skills cannot be used"
        ),
    }
}

/// Registers a [`SkillResolver`] at link time.
///
/// ```ignore
/// toolbox_host::register_skill_resolver!("skill", resolve);
/// ```
#[macro_export]
macro_rules! register_skill_resolver {
    ($provider:expr, $resolve:expr) => {
        $crate::inventory::submit! {
            $crate::SkillResolver { provider: $provider, resolve: $resolve }
        }
    };
}
