//! The [`toolbox_host::SkillResolver`]: `skill:<name>/<path>` to a real file beneath that
//! skill's folder, for `run_python_code`'s `script_path`.

use anyhow::{anyhow, bail, Result};
use toolbox_host::{SkillFile, ToolContext, SKILL_REF_PREFIX};

use crate::files::SkillPath;
use crate::name::SkillName;
use crate::registry::SkillSet;

/// Resolves `skill:<name>/<path>`: the name is parsed, the skill found among those the
/// call's configuration allows, and the file opened beneath the skill's folder by
/// descriptor; its real path is what the kernel opened.
pub fn resolve(reference: &str, ctx: &ToolContext) -> Result<SkillFile> {
    let (name, path) = parse_ref(reference)?;
    let set = SkillSet::discover(&ctx.workspace, &ctx.config)
        .map_err(|e| anyhow!("invalid configuration: {e:#}"))?;
    let skill = crate::find_skill(&set, &name)?;
    if path.is_skill_md() {
        bail!("{reference} is the skill's instructions, not a script");
    }
    let file = path.open(skill)?;
    let real = real_path_of(&file)
        .map_err(|e| anyhow!("cannot find where {reference} is on disk: {e}"))?;
    let skill_dir = skill
        .dir()
        .real_path()
        .map_err(|e| anyhow!("cannot find where skill {name} is on disk: {e}"))?;
    // The kernel opened it beneath the folder; this only guards the path's spelling.
    if !real.starts_with(&skill_dir) {
        bail!("{reference} leads outside the skill's folder");
    }
    Ok(SkillFile {
        path: real,
        skill_dir,
        shown: format!("{SKILL_REF_PREFIX}{name}/{}", path.as_str()),
    })
}

/// `skill:<name>/<path>` → the parsed name and path.
pub fn parse_ref(reference: &str) -> Result<(SkillName, SkillPath)> {
    let rest = reference
        .strip_prefix(SKILL_REF_PREFIX)
        .ok_or_else(|| anyhow!("{reference:?} does not start with {SKILL_REF_PREFIX}"))?;
    let Some((name, path)) = rest.split_once('/') else {
        bail!(
            "{reference:?} names no file: write {SKILL_REF_PREFIX}<skill name>/<path inside the \
             skill>, e.g. {SKILL_REF_PREFIX}pdf-report/scripts/report.py"
        );
    };
    let name = SkillName::parse(name)?;
    let path = SkillPath::parse(path)?;
    Ok((name, path))
}

fn real_path_of(file: &std::fs::File) -> std::io::Result<std::path::PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_parsed_before_anything_is_opened() {
        let (name, path) = parse_ref("skill:pdf-report/scripts/report.py").unwrap();
        assert_eq!(name.as_str(), "pdf-report");
        assert_eq!(path.as_str(), "scripts/report.py");
        for (raw, want) in [
            ("skill:pdf-report", "names no file"),
            ("skill:../x/y.py", "invalid skill name"),
            ("skill:a/../../etc/passwd", "has `..`"),
            ("skill:a//etc/passwd", "not a path inside the skill"),
            ("skill:A/x.py", "invalid skill name"),
            ("pdf-report/x.py", "does not start with skill:"),
        ] {
            let e = parse_ref(raw).unwrap_err().to_string();
            assert!(e.contains(want), "{raw}: {e}");
        }
    }
}
