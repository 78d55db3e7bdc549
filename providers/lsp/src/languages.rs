//! Which languages a workspace holds: for `lsp__symbols` with a query and no path, one file
//! of each extension found, so each language's server can be started on its own project.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsStr;

use toolbox_host::{Dir, EntryKind, Workspace};

/// At most this many folder entries are looked at.
const MAX_ENTRIES: usize = 20_000;
/// Folders deeper than this are not opened.
const MAX_DEPTH: usize = 12;
/// Folders that hold tools' output or other people's code, not the project's sources.
const SKIPPED: &[&str] = &[
    "node_modules",
    "target",
    "__pycache__",
    "venv",
    "site-packages",
    "dist",
    "build",
];

/// Extension (lower case, no dot) -> the first file with it, as a workspace-relative path,
/// in breadth-first order (files near the root first). Hidden folders (`.git`, `.toolbox`,
/// `.venv`) and [`SKIPPED`] ones are not entered; links are never followed; names that are
/// not UTF-8 are passed over.
pub fn sample_files(ws: &Workspace) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let Ok(root) = ws.locate(".").and_then(|p| ws.open_dir(&p)) else {
        return found;
    };
    let mut queue: VecDeque<(Dir, String, usize)> = VecDeque::from([(root, String::new(), 0)]);
    let mut seen = 0usize;
    while let Some((dir, prefix, depth)) = queue.pop_front() {
        let Ok(entries) = dir.entries() else {
            continue;
        };
        for entry in entries {
            seen += 1;
            if seen > MAX_ENTRIES {
                return found;
            }
            let Some(name) = entry.name.to_str() else {
                continue;
            };
            let rel = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            match entry.kind {
                EntryKind::File => {
                    if let Some((stem, ext)) = name.rsplit_once('.') {
                        if !stem.is_empty() && !ext.is_empty() {
                            found.entry(ext.to_ascii_lowercase()).or_insert(rel);
                        }
                    }
                }
                EntryKind::Dir => {
                    if depth + 1 > MAX_DEPTH || name.starts_with('.') || SKIPPED.contains(&name) {
                        continue;
                    }
                    if let Ok(child) = dir.open_dir(OsStr::new(name)) {
                        queue.push_back((child, rel, depth + 1));
                    }
                }
                EntryKind::Symlink | EntryKind::Other => {}
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_of_each_language_nearest_the_root_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (rel, text) in [
            ("src/deep/b.py", ""),
            ("a.py", ""),
            ("lib/util.c", ""),
            ("lib/util.H", ""),
            ("node_modules/x/index.js", ""),
            (".git/hooks/pre.sh", ""),
            ("README", ""),
            (".hidden", ""),
        ] {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::os::unix::fs::symlink("/usr/include", root.join("inc")).unwrap();
        let ws = Workspace::new(root).unwrap();
        let found = sample_files(&ws);
        assert_eq!(
            found,
            BTreeMap::from([
                ("py".to_string(), "a.py".to_string()),
                ("c".to_string(), "lib/util.c".to_string()),
                ("h".to_string(), "lib/util.H".to_string()),
            ])
        );
    }
}
