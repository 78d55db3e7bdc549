//! The directory walk behind glob and grep: ripgrep's rules, bounded by the workspace.
//!
//! - `.gitignore` (and `.ignore`) files are honoured even outside a git repository
//!   (`require_git(false)`); hidden files and folders are skipped; symbolic links are listed
//!   but never followed, so a link cannot lead the walk out of the jail.
//! - The ignore crate would read ignore files from *every* ancestor of the starting folder,
//!   up to `/`. Rules above the workspace root are none of the model's business (and make
//!   results depend on where the workspace happens to live), so that is switched off and the
//!   ancestors between the workspace root and the starting folder are applied here instead.
//! - The user's global git excludes file is not read, for the same reason.
//! - Entries come out sorted by name within each folder, so results are stable.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::{DirEntry, Match, WalkBuilder};

/// Ignore-file names read in every folder, lowest precedence first.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];

/// A sorted, gitignore-aware walk of `base` (a file or folder inside `root`).
pub(crate) fn gitignore_walk(root: &Path, base: &Path) -> ignore::Walk {
    let ancestors = ancestor_ignores(root, base);
    let mut builder = WalkBuilder::new(base);
    builder
        .standard_filters(true)
        .require_git(false)
        .parents(false)
        .git_global(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b));
    if !ancestors.is_empty() {
        builder.filter_entry(move |entry| !ignored_by_ancestors(&ancestors, entry));
    }
    builder.build()
}

/// Whether a symlink found by the walk points at a regular file inside the workspace.
///
/// Returns the real path to read; links that lead out of the jail or to folders are skipped.
pub(crate) fn linked_file_inside(root: &Path, link: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(link).ok()?;
    (real.starts_with(root) && real.is_file()).then_some(real)
}

/// Matchers for the folders strictly above `base`, up to and including `root`, deepest
/// first. Like git, a folder holding `.git` is the last one consulted.
fn ancestor_ignores(root: &Path, base: &Path) -> Vec<Gitignore> {
    let mut out = Vec::new();
    if base == root || !base.starts_with(root) {
        return out;
    }
    let mut dir = base.parent();
    while let Some(d) = dir {
        if !d.starts_with(root) {
            break;
        }
        let mut builder = GitignoreBuilder::new(d);
        let mut any = false;
        for name in IGNORE_FILES {
            let file = d.join(name);
            if file.is_file() {
                // A bad line is skipped; the remaining rules still apply, as in git.
                let _ = builder.add(file);
                any = true;
            }
        }
        if any {
            if let Ok(gi) = builder.build() {
                out.push(gi);
            }
        }
        if d == root || d.join(".git").exists() {
            break;
        }
        dir = d.parent();
    }
    out
}

fn ignored_by_ancestors(ancestors: &[Gitignore], entry: &DirEntry) -> bool {
    if entry.depth() == 0 {
        // The folder the model asked for is searched even if it is ignored, like ripgrep.
        return false;
    }
    let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
    for gi in ancestors {
        match gi.matched(entry.path(), is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(root: &Path, base: &Path) -> Vec<String> {
        gitignore_walk(root, base)
            .filter_map(Result::ok)
            .filter(|e| e.depth() > 0)
            .map(|e| {
                e.path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    #[test]
    fn root_ignore_rules_apply_to_a_subfolder_walk_and_nothing_above_root_does() {
        let outer = tempfile::tempdir().unwrap();
        // An ignore file above the workspace must not matter.
        std::fs::write(outer.path().join(".gitignore"), "*.txt\n").unwrap();
        let root = outer.path().join("ws");
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        let root = std::fs::canonicalize(root).unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(root.join("sub/.gitignore"), "skip/\n").unwrap();
        std::fs::write(root.join("sub/deep/a.txt"), "").unwrap();
        std::fs::write(root.join("sub/deep/b.log"), "").unwrap();
        std::fs::create_dir_all(root.join("sub/deep/skip")).unwrap();
        std::fs::write(root.join("sub/deep/skip/c.txt"), "").unwrap();
        std::fs::write(root.join("sub/deep/.hidden"), "").unwrap();
        assert_eq!(names(&root, &root.join("sub/deep")), ["sub/deep/a.txt"]);
        assert_eq!(names(&root, &root), ["sub", "sub/deep", "sub/deep/a.txt"]);
    }
}
