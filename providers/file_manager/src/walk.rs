//! The directory walk behind glob and grep: ripgrep's rules, bounded by the workspace, and
//! held by descriptors so nothing can steer it out.
//!
//! - Every folder is opened by descriptor from its parent's descriptor with `O_NOFOLLOW`: a
//!   folder swapped for a symbolic link mid-walk is refused, never followed, and the walk
//!   cannot wander out of the jail however the tree changes underneath it.
//! - `.gitignore` and `.ignore` files are honoured even outside a git repository (like
//!   ripgrep's `require_git(false)`), and `.git/info/exclude` where there is a `.git` folder;
//!   hidden files and folders are skipped; symbolic links are reported, never descended into.
//! - Ignore files above the workspace root are none of the model's business (and would make
//!   results depend on where the workspace lives): only folders from the root down are read.
//!   The user's global git excludes file is not read, for the same reason.
//! - Entries come out depth first, sorted by name within each folder, so results are stable.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use toolbox_host::{Dir, DirEntryInfo, EntryKind, PathError, Workspace, WsPath};

/// Ignore-file names read in every folder, lowest precedence first.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];
/// An ignore file larger than this is skipped (a real one is a few KiB).
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

/// One thing the walk found.
pub(crate) struct WalkEntry {
    /// The path relative to the walk's base, `/`-separated pieces (for glob matching).
    pub rel: PathBuf,
    /// The entry's own type: a link is a link.
    pub kind: EntryKind,
    /// The folder it is in, held open, and its name there.
    pub dir: Arc<Dir>,
    pub name: OsString,
}

impl WalkEntry {
    /// Whether this is a regular file, or a link that leads to a regular file without
    /// leaving the workspace (checked by opening it beneath the root, not by name).
    pub fn is_file_inside(&self, ws: &Workspace, base: &WsPath) -> bool {
        match self.kind {
            EntryKind::File => true,
            EntryKind::Symlink => ws.open_read(&base.join(self.rel.as_os_str())).is_ok(),
            _ => false,
        }
    }

    /// Opens the file for reading: a regular file by name in its held folder (no link
    /// followed), a link beneath the workspace root.
    pub fn open(&self, ws: &Workspace, base: &WsPath) -> std::io::Result<std::fs::File> {
        match self.kind {
            EntryKind::Symlink => ws
                .open_read(&base.join(self.rel.as_os_str()))
                .map_err(std::io::Error::other),
            _ => self.dir.open_file(&self.name),
        }
    }

    /// The path to show the model: relative to the workspace (session folders by their
    /// short names), with control characters escaped.
    pub fn shown(&self, base_shown: &str) -> String {
        shown_path(base_shown, &self.rel)
    }
}

/// A path below the walk's base as the model sees it (see [`WalkEntry::shown`]).
pub(crate) fn shown_path(base_shown: &str, rel: &Path) -> String {
    let rel = rel.to_string_lossy();
    let full = if base_shown == "." {
        rel.into_owned()
    } else {
        format!("{base_shown}/{rel}")
    };
    crate::text::escape_name(&full).into_owned()
}

struct Frame {
    dir: Arc<Dir>,
    rel: PathBuf,
    entries: std::vec::IntoIter<toolbox_host::DirEntryInfo>,
    /// The ignore rules in force here, deepest first.
    ignores: Arc<Vec<Gitignore>>,
}

/// A sorted, gitignore-aware, descriptor-held walk of a folder inside the workspace.
pub(crate) struct Walk {
    stack: Vec<Frame>,
    /// A made-up absolute path for the base, so ignore rules can be matched by path.
    virtual_base: PathBuf,
    /// Folders that could not be opened or read (skipped, like ripgrep without --debug).
    pub unreadable: usize,
}

/// Opens `base` (which must be a folder) and prepares the walk.
pub(crate) fn gitignore_walk(ws: &Workspace, base: &WsPath) -> Result<Walk, PathError> {
    let dir = Arc::new(ws.open_dir(base)?);
    let entries = dir.entries().map_err(|e| PathError::Io {
        path: base.given().to_string(),
        source: e,
    })?;
    let (virtual_base, ignores) = base_ignores(ws, base, &dir, &entries);
    Ok(Walk {
        stack: vec![Frame {
            dir,
            rel: PathBuf::new(),
            entries: entries.into_iter(),
            ignores: Arc::new(ignores),
        }],
        virtual_base,
        unreadable: 0,
    })
}

impl Walk {
    /// Walks the same tree on `threads` threads, calling `visit` on every entry (in no
    /// particular order) from whichever thread found it. Folders are still opened by
    /// descriptor without following links, and ignore rules apply as in the sequential walk.
    /// Stops early when `stop` returns true.
    pub fn run_parallel<F>(self, threads: usize, stop: &(dyn Fn() -> bool + Sync), visit: F)
    where
        F: Fn(WalkEntry) + Sync,
    {
        use std::sync::{Condvar, Mutex};

        /// Folders waiting to be read, and how many threads are reading one right now.
        struct Queue {
            jobs: Vec<Frame>,
            busy: usize,
        }
        let virtual_base = self.virtual_base;
        let queue = Mutex::new(Queue {
            jobs: self.stack,
            busy: 0,
        });
        let ready = Condvar::new();
        let lock = || queue.lock().unwrap_or_else(|e| e.into_inner());
        let work = || loop {
            // Take a folder, or wait while others may still add some.
            let frame = {
                let mut q = lock();
                loop {
                    if stop() {
                        q.jobs.clear();
                    }
                    if let Some(frame) = q.jobs.pop() {
                        q.busy += 1;
                        break frame;
                    }
                    if q.busy == 0 {
                        ready.notify_all();
                        return;
                    }
                    q = ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            let mut found = Vec::new();
            for info in frame.entries {
                if info.name.as_encoded_bytes().starts_with(b".") {
                    continue;
                }
                let rel = frame.rel.join(&info.name);
                let is_dir = info.kind == EntryKind::Dir;
                if ignored(&frame.ignores, &virtual_base.join(&rel), is_dir) {
                    continue;
                }
                if is_dir {
                    if let Ok((child, entries)) = frame.dir.open_dir(&info.name).and_then(|d| {
                        let entries = d.entries()?;
                        Ok((d, entries))
                    }) {
                        let child = Arc::new(child);
                        let ignores = child_ignores(
                            &frame.ignores,
                            &child,
                            &entries,
                            &virtual_base.join(&rel),
                        );
                        found.push(Frame {
                            dir: child,
                            rel: rel.clone(),
                            entries: entries.into_iter(),
                            ignores,
                        });
                    }
                }
                visit(WalkEntry {
                    rel,
                    kind: info.kind,
                    dir: frame.dir.clone(),
                    name: info.name,
                });
            }
            let mut q = lock();
            q.busy -= 1;
            let added = found.len();
            q.jobs.extend(found);
            // Wake only as many waiters as there is new work, and everyone at the very end.
            match added {
                0 if q.busy == 0 && q.jobs.is_empty() => ready.notify_all(),
                0 => {}
                1 => ready.notify_one(),
                _ => ready.notify_all(),
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads.max(1) {
                scope.spawn(work);
            }
            work();
        });
    }
}

impl Iterator for Walk {
    type Item = WalkEntry;

    fn next(&mut self) -> Option<WalkEntry> {
        loop {
            let frame = self.stack.last_mut()?;
            let Some(info) = frame.entries.next() else {
                self.stack.pop();
                continue;
            };
            if info.name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            let rel = frame.rel.join(&info.name);
            let is_dir = info.kind == EntryKind::Dir;
            if ignored(&frame.ignores, &self.virtual_base.join(&rel), is_dir) {
                continue;
            }
            let dir = frame.dir.clone();
            if is_dir {
                // O_NOFOLLOW: if it became a link since it was listed, it is not entered.
                match frame.dir.open_dir(&info.name).and_then(|d| {
                    let entries = d.entries()?;
                    Ok((d, entries))
                }) {
                    Ok((child, entries)) => {
                        let child = Arc::new(child);
                        let ignores = child_ignores(
                            &frame.ignores,
                            &child,
                            &entries,
                            &self.virtual_base.join(&rel),
                        );
                        self.stack.push(Frame {
                            dir: child,
                            rel: rel.clone(),
                            entries: entries.into_iter(),
                            ignores,
                        });
                    }
                    Err(_) => self.unreadable += 1,
                }
            }
            return Some(WalkEntry {
                rel,
                kind: info.kind,
                dir,
                name: info.name,
            });
        }
    }
}

/// The ignore rules in force in the folder `base` (held open as `dir`): its own and those of
/// the folders above it up to the workspace root, deepest first; and the made-up absolute
/// path the rules match against.
pub(crate) fn base_ignores(
    ws: &Workspace,
    base: &WsPath,
    dir: &Dir,
    entries: &[DirEntryInfo],
) -> (PathBuf, Vec<Gitignore>) {
    let virtual_base = Path::new("/").join(ws.show(base));
    let mut ignores = ancestor_ignores(ws, base);
    if let Some(own) = read_ignores(dir, entries, &virtual_base) {
        ignores.insert(0, own);
    }
    (virtual_base, ignores)
}

/// The rules of a child folder prepended to its parent's (`None` when it has none of its own).
pub(crate) fn child_ignores(
    parent: &Arc<Vec<Gitignore>>,
    child: &Dir,
    entries: &[DirEntryInfo],
    virtual_path: &Path,
) -> Arc<Vec<Gitignore>> {
    match read_ignores(child, entries, virtual_path) {
        Some(own) => {
            let mut v = Vec::with_capacity(parent.len() + 1);
            v.push(own);
            v.extend(parent.iter().cloned());
            Arc::new(v)
        }
        None => parent.clone(),
    }
}

/// Whether the rules (deepest first) ignore `path`.
pub(crate) fn ignored(ignores: &[Gitignore], path: &Path, is_dir: bool) -> bool {
    for gi in ignores {
        match gi.matched(path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

/// The rules of one folder's `.gitignore` and `.ignore` (and `.git/info/exclude`), read
/// through its descriptor without following links. `None` when it has none.
fn read_ignores(dir: &Dir, entries: &[DirEntryInfo], virtual_path: &Path) -> Option<Gitignore> {
    // The listing says which ignore files exist, so no open is tried in vain.
    let has = |name: &str, kind: EntryKind| {
        entries
            .iter()
            .any(|e| e.kind == kind && e.name.as_encoded_bytes() == name.as_bytes())
    };
    let has_git = has(".git", EntryKind::Dir);
    let files: Vec<&str> = IGNORE_FILES
        .into_iter()
        .filter(|n| has(n, EntryKind::File))
        .collect();
    if !has_git && files.is_empty() {
        return None;
    }
    let mut builder = GitignoreBuilder::new(virtual_path);
    let mut any = false;
    let mut add = |text: String| {
        for line in text.lines() {
            // A bad line is skipped; the remaining rules still apply, as in git.
            let _ = builder.add_line(None, line);
        }
    };
    if let Some(git) = has_git
        .then(|| dir.open_dir(OsStr::new(".git")).ok())
        .flatten()
    {
        if let Some(text) = git
            .open_dir(OsStr::new("info"))
            .ok()
            .and_then(|info| read_small(&info, "exclude"))
        {
            add(text);
            any = true;
        }
    }
    for name in files {
        if let Some(text) = read_small(dir, name) {
            add(text);
            any = true;
        }
    }
    if !any {
        return None;
    }
    builder.build().ok()
}

fn read_small(dir: &Dir, name: &str) -> Option<String> {
    let file = dir.open_file(OsStr::new(name)).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_IGNORE_FILE_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// Rules of the folders strictly above `base`, from its parent up to the workspace root,
/// deepest first. Like git, a folder holding `.git` is the last one consulted. A session
/// folder has no ancestors worth reading (they are toolbox's own).
fn ancestor_ignores(ws: &Workspace, base: &WsPath) -> Vec<Gitignore> {
    let mut out = Vec::new();
    if base.base() != toolbox_host::Base::Root {
        return out;
    }
    let shown = ws.show(base);
    if shown == "." {
        return out;
    }
    let parts: Vec<&str> = shown.split('/').collect();
    for depth in (0..parts.len()).rev() {
        let rel = if depth == 0 {
            ".".to_string()
        } else {
            parts[..depth].join("/")
        };
        let Ok(p) = ws.locate(&rel) else { break };
        let Ok(dir) = ws.open_dir(&p) else { break };
        let entries = dir.entries().unwrap_or_default();
        let virtual_path = Path::new("/").join(ws.show(&p));
        if let Some(gi) = read_ignores(&dir, &entries, &virtual_path) {
            out.push(gi);
        }
        if entries
            .iter()
            .any(|e| e.kind == EntryKind::Dir && e.name.as_encoded_bytes() == b".git")
        {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ws: &Workspace, base: &str) -> Vec<String> {
        let p = ws.locate(base).unwrap();
        gitignore_walk(ws, &p)
            .unwrap()
            .map(|e| {
                let shown = ws.show(&p);
                if shown == "." {
                    e.rel.to_string_lossy().into_owned()
                } else {
                    format!("{shown}/{}", e.rel.to_string_lossy())
                }
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
        std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
        std::fs::write(root.join("sub/.gitignore"), "skip/\n").unwrap();
        std::fs::write(root.join("sub/deep/a.txt"), "").unwrap();
        std::fs::write(root.join("sub/deep/b.log"), "").unwrap();
        std::fs::create_dir_all(root.join("sub/deep/skip")).unwrap();
        std::fs::write(root.join("sub/deep/skip/c.txt"), "").unwrap();
        std::fs::write(root.join("sub/deep/.hidden"), "").unwrap();
        let ws = Workspace::new(&root).unwrap();
        assert_eq!(names(&ws, "sub/deep"), ["sub/deep/a.txt"]);
        assert_eq!(names(&ws, "."), ["sub", "sub/deep", "sub/deep/a.txt"]);
    }

    #[test]
    fn negations_and_ignore_files_and_git_exclude() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".gitignore"), "*.gen\n!keep.gen\n").unwrap();
        std::fs::write(root.join(".ignore"), "secret.txt\n").unwrap();
        std::fs::create_dir_all(root.join(".git/info")).unwrap();
        std::fs::write(root.join(".git/info/exclude"), "local/\n").unwrap();
        for f in ["a.gen", "keep.gen", "secret.txt", "x.rs", "local/y.rs"] {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        let ws = Workspace::new(root).unwrap();
        assert_eq!(names(&ws, "."), ["keep.gen", "x.rs"]);
    }

    #[test]
    fn links_are_reported_not_entered() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let p = ws.locate(".").unwrap();
        let all: Vec<_> = gitignore_walk(&ws, &p).unwrap().collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].kind, EntryKind::Symlink);
    }
}
