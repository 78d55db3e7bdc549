//! Finding skills: the roots, each skill folder held by descriptor, and what was skipped.
//!
//! Roots, in order (the first skill of a name wins):
//!
//! 1. `<workspace>/skills`
//! 2. `<workspace>/.toolbox/skills`
//! 3. each folder of `[skill] dirs` in the operator's configuration (absolute, `~/…`, or
//!    relative to the workspace). An untrusted workspace's `toolbox.toml` cannot add any:
//!    the `[skill]` table declares no workspace rule, so the key is refused there.
//!
//! Every child folder of a root is a candidate skill. It is opened beneath the root with
//! `openat2(RESOLVE_BENEATH)` (a link is followed only while it stays inside the root), and
//! from then on everything of that skill is opened beneath the skill folder's descriptor.
//! A candidate that breaks a rule is skipped with the reasons; nothing here fails a call
//! except an invalid `[skill]` table.

use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Result};
use serde_json::Value;
use toolbox_host::{Dir, EntryKind, Workspace};

use crate::frontmatter::{self, SkillMd, MAX_SKILL_MD_BYTES};
use crate::name::SkillName;
use crate::{DIRS, TABLE};

/// At most this many entries of one root are looked at.
pub const MAX_CANDIDATES_PER_ROOT: usize = 1000;

/// The folders inside the workspace that are skill roots, in order.
pub const WORKSPACE_ROOTS: [&str; 2] = ["skills", ".toolbox/skills"];

/// The `[skill]` table of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillConfig {
    /// `[skill] dirs`: more skill roots, as given (absolute, `~/…` or workspace-relative).
    pub dirs: Vec<String>,
}

impl SkillConfig {
    /// Reads `[skill]` from the whole configuration (`ToolContext::config`).
    pub fn from_config(config: &Value) -> Result<Self> {
        let table = TABLE.read(config)?;
        let dirs = DIRS.string_list(&table)?.unwrap_or_default();
        if let Some(empty) = dirs
            .iter()
            .find(|d| d.trim().is_empty() || d.contains('\0'))
        {
            return Err(anyhow!(
                "[skill] dirs must be folder paths, got {empty:?} among them"
            ));
        }
        Ok(SkillConfig { dirs })
    }
}

/// One loaded skill: what its SKILL.md says, and its folder held by descriptor.
#[derive(Debug, Clone)]
pub struct Skill {
    md: SkillMd,
    location: String,
    dir: Arc<Dir>,
}

impl Skill {
    /// The skill's name (also its folder's name).
    pub fn name(&self) -> &SkillName {
        &self.md.name
    }

    /// The description: what the skill does and when to use it.
    pub fn description(&self) -> &str {
        &self.md.description
    }

    /// Everything its SKILL.md says.
    pub fn skill_md(&self) -> &SkillMd {
        &self.md
    }

    /// Where the folder is, for people and models: `skills/pdf-report` inside the workspace,
    /// the full path for a configured root.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The skill's folder, held by descriptor: open its files beneath it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }
}

/// A candidate skill folder (or a root) that was not loaded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file or folder with the problem: `skills/x/SKILL.md`, `skills/x`, a root.
    pub path: String,
    /// Each rule it breaks, as a sentence.
    pub problems: Vec<String>,
}

impl Skipped {
    /// The problems as one line.
    pub fn reason(&self) -> String {
        self.problems.join("; ")
    }
}

/// Every skill visible from a workspace under a configuration, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct SkillSet {
    skills: Vec<Skill>,
    skipped: Vec<Skipped>,
    roots: Vec<String>,
}

impl SkillSet {
    /// Finds the skills of `workspace` and of the configuration's `[skill] dirs`. Only an
    /// invalid `[skill]` table is an error; a broken skill or root is [`skipped`](Self::skipped).
    /// Blocking: run it off the async threads.
    pub fn discover(workspace: &Workspace, config: &Value) -> Result<SkillSet> {
        let config = SkillConfig::from_config(config)?;
        let mut set = SkillSet::default();
        for rel in WORKSPACE_ROOTS {
            set.roots.push(rel.to_string());
            match open_workspace_dir(workspace, rel) {
                Ok(Some(dir)) => set.scan_root(&dir, rel),
                Ok(None) => {}
                Err(e) => set.skip(rel, format!("cannot open this skill folder: {e}")),
            }
        }
        for given in &config.dirs {
            let (dir, shown) = match configured_root(workspace, given) {
                Ok(found) => found,
                Err((shown, e)) => {
                    set.roots.push(shown.clone());
                    set.skip(&shown, format!("[skill] dirs names {given:?}: {e}"));
                    continue;
                }
            };
            set.roots.push(shown.clone());
            set.scan_root(&dir, &shown);
        }
        set.skills.sort_by(|a, b| a.md.name.cmp(&b.md.name));
        Ok(set)
    }

    /// The loaded skills, sorted by name.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// The candidates that were not loaded, in the order they were found.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The roots that were searched, in order, as shown.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }

    /// The skill named `name`, if one was loaded.
    pub fn get(&self, name: &SkillName) -> Option<&Skill> {
        self.skills.iter().find(|s| s.md.name == *name)
    }

    fn skip(&mut self, path: &str, problem: String) {
        self.skipped.push(Skipped {
            path: path.to_string(),
            problems: vec![problem],
        });
    }

    fn scan_root(&mut self, root: &Dir, shown_root: &str) {
        let entries = match root.entries() {
            Ok(entries) => entries,
            Err(e) => return self.skip(shown_root, format!("cannot list this skill folder: {e}")),
        };
        let mut seen = 0;
        for entry in entries {
            if !matches!(entry.kind, EntryKind::Dir | EntryKind::Symlink) {
                continue; // A README beside the skills, say.
            }
            if entry.name.as_encoded_bytes().starts_with(b".") {
                continue; // .git, .DS_Store folders and the like.
            }
            seen += 1;
            if seen > MAX_CANDIDATES_PER_ROOT {
                self.skip(
                    shown_root,
                    format!("only the first {MAX_CANDIDATES_PER_ROOT} folders are read"),
                );
                break;
            }
            let shown = format!("{shown_root}/{}", show_name(&entry.name));
            let Some(folder) = entry.name.to_str() else {
                self.skip(&shown, "the folder name is not UTF-8".to_string());
                continue;
            };
            let dir = match root.open_dir_beneath(Path::new(&entry.name)) {
                Ok(dir) => dir,
                Err(e) if entry.kind == EntryKind::Symlink && is_not_dir(&e) => continue,
                Err(e) => {
                    self.skip(&shown, explain_open(&e, shown_root));
                    continue;
                }
            };
            match load(&dir, folder) {
                Ok(md) => {
                    if let Some(first) = self.skills.iter().find(|s| s.md.name == md.name) {
                        let problem = format!(
                            "a skill named {} was already found in {}; this one is ignored",
                            md.name, first.location
                        );
                        self.skip(&shown, problem);
                        continue;
                    }
                    self.skills.push(Skill {
                        md,
                        location: shown,
                        dir: Arc::new(dir),
                    });
                }
                Err(Problem::Folder(problem)) => self.skip(&shown, problem),
                Err(Problem::SkillMd(problems)) => self.skipped.push(Skipped {
                    path: format!("{shown}/SKILL.md"),
                    problems,
                }),
            }
        }
    }
}

enum Problem {
    /// About the folder (no SKILL.md, unreadable).
    Folder(String),
    /// About what SKILL.md says.
    SkillMd(Vec<String>),
}

/// Reads and parses the SKILL.md of a skill folder held open.
fn load(dir: &Dir, folder: &str) -> Result<SkillMd, Problem> {
    let file = match dir.open_file_beneath(Path::new("SKILL.md")) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Problem::Folder(
                "there is no SKILL.md in this folder".to_string(),
            ))
        }
        Err(e) => {
            return Err(Problem::SkillMd(vec![format!(
                "cannot read SKILL.md: {}",
                explain_open(&e, "the skill's folder")
            )]))
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_SKILL_MD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Problem::SkillMd(vec![format!("cannot read SKILL.md: {e}")]))?;
    frontmatter::parse(&bytes, folder).map_err(Problem::SkillMd)
}

/// Opens a folder of the workspace; `None` when it does not exist.
fn open_workspace_dir(workspace: &Workspace, rel: &str) -> Result<Option<Dir>> {
    let p = workspace.locate(rel).map_err(|e| anyhow!("{e}"))?;
    match workspace.open_dir(&p) {
        Ok(dir) => Ok(Some(dir)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(anyhow!("{e}")),
    }
}

/// Opens a configured root: absolute, `~/…` (the operator's home) or workspace-relative.
fn configured_root(workspace: &Workspace, given: &str) -> Result<(Dir, String), (String, String)> {
    let expanded = toolbox_host::operator_path(given).map_err(|why| (given.to_string(), why))?;
    match expanded {
        Some(path) => {
            let shown = path.display().to_string();
            match Dir::open_path(&path) {
                Ok(dir) => Ok((dir, shown)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    Err((shown, "the folder does not exist".to_string()))
                }
                Err(e) => Err((shown, format!("cannot open it: {e}"))),
            }
        }
        None => match open_workspace_dir(workspace, given) {
            Ok(Some(dir)) => Ok((dir, given.to_string())),
            Ok(None) => Err((
                given.to_string(),
                "the folder does not exist in the workspace".into(),
            )),
            Err(e) => Err((given.to_string(), e.to_string())),
        },
    }
}

fn is_not_dir(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotADirectory
}

/// EXDEV / ELOOP from `openat2(RESOLVE_BENEATH)` mean a path or link leads out.
pub(crate) fn leads_out(e: &io::Error) -> bool {
    const EXDEV: i32 = 18;
    const ELOOP: i32 = 40;
    matches!(e.raw_os_error(), Some(EXDEV | ELOOP))
}

/// An open error in words, naming what it leads out of.
pub(crate) fn explain_open(e: &io::Error, inside: &str) -> String {
    if leads_out(e) {
        format!("it is a link that leads out of {inside}, which is not followed")
    } else if e.kind() == io::ErrorKind::NotFound {
        "it does not exist (or is a broken link)".to_string()
    } else {
        e.to_string()
    }
}

pub(crate) use toolbox_host::show_name;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn skill_md(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nDo the thing.\n")
    }

    fn names(set: &SkillSet) -> Vec<&str> {
        set.skills().iter().map(|s| s.name().as_str()).collect()
    }

    #[test]
    fn skills_are_found_in_every_root_and_broken_ones_are_skipped_with_reasons() {
        let ws_dir = tempfile::tempdir().unwrap();
        let root = ws_dir.path();
        write(
            &root.join("skills/pdf-report/SKILL.md"),
            &skill_md("pdf-report", "PDF reports."),
        );
        write(
            &root.join("skills/cn-report/SKILL.md"),
            &skill_md("cn-report", "生成中文报告"),
        );
        write(
            &root.join("skills/bad-yaml/SKILL.md"),
            "---\nname: bad-yaml\ndescription: [\n---\n",
        );
        write(
            &root.join("skills/other/SKILL.md"),
            &skill_md("not-other", "x"),
        );
        std::fs::create_dir_all(root.join("skills/empty")).unwrap();
        write(&root.join("skills/README.md"), "not a skill");
        write(
            &root.join("skills/.hidden/SKILL.md"),
            &skill_md(".hidden", "x"),
        );
        // The same name again, in the second root: the first one wins.
        write(
            &root.join(".toolbox/skills/pdf-report/SKILL.md"),
            &skill_md("pdf-report", "again"),
        );
        write(
            &root.join(".toolbox/skills/tb-only/SKILL.md"),
            &skill_md("tb-only", "in .toolbox"),
        );
        // A configured root outside the workspace.
        let user = tempfile::tempdir().unwrap();
        write(
            &user.path().join("user-skill/SKILL.md"),
            &skill_md("user-skill", "user-wide"),
        );
        // A skill folder that is a link out of its root.
        std::os::unix::fs::symlink(
            user.path().join("user-skill"),
            root.join("skills/linked-out"),
        )
        .unwrap();

        let ws = Workspace::new(root).unwrap();
        let config = json!({"skill": {"dirs": [user.path().to_str().unwrap(), "missing-dir"]}});
        let set = SkillSet::discover(&ws, &config).unwrap();
        assert_eq!(
            names(&set),
            ["cn-report", "pdf-report", "tb-only", "user-skill"]
        );
        assert_eq!(
            set.get(&SkillName::parse("pdf-report").unwrap())
                .unwrap()
                .description(),
            "PDF reports."
        );
        assert_eq!(
            set.get(&SkillName::parse("cn-report").unwrap())
                .unwrap()
                .location(),
            "skills/cn-report"
        );
        let skipped: Vec<(String, String)> = set
            .skipped()
            .iter()
            .map(|s| (s.path.clone(), s.reason()))
            .collect();
        let reason = |path: &str| {
            skipped
                .iter()
                .find(|(p, _)| p == path)
                .unwrap_or_else(|| panic!("{path} not skipped: {skipped:?}"))
                .1
                .clone()
        };
        assert!(reason("skills/bad-yaml/SKILL.md").contains("frontmatter is not valid"));
        assert!(reason("skills/other/SKILL.md")
            .contains("`name` is \"not-other\" but the folder is \"other\""));
        assert!(reason("skills/empty").contains("no SKILL.md"));
        assert!(
            reason("skills/linked-out").contains("leads out of skills"),
            "{skipped:?}"
        );
        assert!(reason(".toolbox/skills/pdf-report").contains("already found in skills/pdf-report"));
        assert!(reason("missing-dir").contains("does not exist"));
        assert_eq!(skipped.len(), 6, "{skipped:?}");
        assert_eq!(set.roots()[..2], ["skills", ".toolbox/skills"]);
    }

    #[test]
    fn no_roots_no_skills_and_bad_config_is_an_error() {
        let ws_dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(ws_dir.path()).unwrap();
        let set = SkillSet::discover(&ws, &Value::Null).unwrap();
        assert!(set.skills().is_empty() && set.skipped().is_empty());
        let e = SkillSet::discover(&ws, &json!({"skill": {"dirs": "x"}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "[skill] dirs must be a list of strings, got \"x\""
        );
        let e = SkillSet::discover(&ws, &json!({"skill": {"dir": ["x"]}})).unwrap_err();
        assert!(e.to_string().contains("unknown key `dir`"), "{e}");
    }

    #[test]
    fn a_skills_file_that_is_a_link_out_is_not_read() {
        let ws_dir = tempfile::tempdir().unwrap();
        let root = ws_dir.path();
        let outside = tempfile::tempdir().unwrap();
        write(
            &outside.path().join("SKILL.md"),
            &skill_md("leak", "secret"),
        );
        std::fs::create_dir_all(root.join("skills/leak")).unwrap();
        std::os::unix::fs::symlink(
            outside.path().join("SKILL.md"),
            root.join("skills/leak/SKILL.md"),
        )
        .unwrap();
        let ws = Workspace::new(root).unwrap();
        let set = SkillSet::discover(&ws, &Value::Null).unwrap();
        assert!(set.skills().is_empty());
        assert!(
            set.skipped()[0]
                .reason()
                .contains("leads out of the skill's folder"),
            "{:?}",
            set.skipped()
        );
    }
}
