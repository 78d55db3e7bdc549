//! What a sync reads from the workspace: the walk (through descriptors, links never
//! followed), the rules of what is stored, and the SQLite databases providers declare as
//! their state (`toolbox_host::state_files`, the memory store) through SQLite's backup API.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::Value;
use toolbox_core::{Key, Table};
use toolbox_host::{Dir, EntryKind};

/// What is never stored unless `[store] include` names it: folders that are rebuilt, not
/// kept (a venv, node modules, build output) and git's object database.
pub const DEFAULT_EXCLUDES: [&str; 4] = [".venv", "node_modules", "target", ".git/objects"];

/// The state files the linked-in providers declared that are SQLite databases: copied
/// through SQLite's backup API rather than as files, and their side files never stored (the
/// backup holds their content). The store names no provider's file itself.
struct Databases {
    paths: Vec<&'static str>,
    side_files: Vec<String>,
}

impl Databases {
    fn declared() -> Databases {
        let databases: Vec<_> = toolbox_host::state_files()
            .into_iter()
            .filter(|f| f.kind == toolbox_host::StateKind::SqliteDatabase)
            .collect();
        Databases {
            paths: databases.iter().map(|f| f.path).collect(),
            side_files: databases.iter().flat_map(|f| f.side_files()).collect(),
        }
    }
}

/// Which files a sync stores: the `[store]` table (`include`, `exclude`, `max_file_mb`).
#[derive(Debug, Clone)]
pub struct StoreRules {
    excludes: GlobSet,
    includes: GlobSet,
    has_includes: bool,
    /// Files larger than this are not stored (and are listed as skipped).
    pub max_file_bytes: u64,
}

impl Default for StoreRules {
    fn default() -> Self {
        StoreRules::from_table(None).expect("the defaults parse")
    }
}

fn globs(table: &str, key: &str, patterns: &[String]) -> Result<GlobSet> {
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let trimmed = pattern.trim_matches('/');
        if trimmed.is_empty() {
            anyhow::bail!("[{table}] {key}: an empty pattern");
        }
        // A pattern without '/' names a file or folder at any depth, as in .gitignore.
        let full = if trimmed.contains('/') {
            trimmed.to_string()
        } else {
            format!("**/{trimmed}")
        };
        let glob = GlobBuilder::new(&full)
            .literal_separator(true)
            .build()
            .with_context(|| format!("[{table}] {key}: {pattern:?} is not a valid pattern"))?;
        set.add(glob);
    }
    set.build()
        .with_context(|| format!("[{table}] {key}: the patterns do not build"))
}

const INCLUDE: Key = Key::strings("include");
const EXCLUDE: Key = Key::strings("exclude");
const MAX_FILE_MB: Key = Key::integer("max_file_mb", 1, 64 * 1024);
/// The `[store]` table: the operator's alone (not registered, so a workspace may set none of
/// it).
const TABLE: Table = Table::new("store", &[INCLUDE, EXCLUDE, MAX_FILE_MB]);

impl StoreRules {
    /// Reads the `[store]` table: `exclude` (patterns added to [`DEFAULT_EXCLUDES`]),
    /// `include` (patterns stored even when excluded), `max_file_mb` (default 1024).
    pub fn from_table(table: Option<&Value>) -> Result<Self> {
        let t = TABLE.read_value(table)?;
        let mut exclude: Vec<String> = DEFAULT_EXCLUDES.iter().map(|s| s.to_string()).collect();
        exclude.extend(EXCLUDE.string_list(&t)?.unwrap_or_default());
        let include = INCLUDE.string_list(&t)?.unwrap_or_default();
        let max_mb = MAX_FILE_MB.u64(&t)?.unwrap_or(1024);
        Ok(StoreRules {
            excludes: globs("store", "exclude", &exclude)?,
            has_includes: !include.is_empty(),
            includes: globs("store", "include", &include)?,
            max_file_bytes: max_mb * 1024 * 1024,
        })
    }

    fn excluded(&self, rel: &str) -> bool {
        self.excludes.is_match(rel)
    }

    fn included(&self, rel: &str) -> bool {
        self.has_includes && self.includes.is_match(rel)
    }
}

/// What decides whether a file changed since it was last read: no change in these, no read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StatKey {
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    /// For the memory store: the same of its `-wal` file (zero when there is none).
    wal: (u64, i64, i64),
}

fn stat_key(st: &rustix::fs::Stat) -> StatKey {
    StatKey {
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        ino: st.st_ino,
        wal: (0, 0, 0),
    }
}

/// A file the walk found.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// Relative, `/`-separated.
    pub rel: String,
    pub key: StatKey,
    pub size: u64,
    pub executable: bool,
    /// A declared SQLite database: read through SQLite's backup API.
    pub sqlite: bool,
}

/// What the walk found, and what it left out and why.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    pub files: Vec<Found>,
    pub skipped: Vec<String>,
}

/// Walks the workspace beneath `root`, never following a link.
pub(crate) fn walk(root: &Dir, rules: &StoreRules) -> Result<Walked> {
    let databases = Databases::declared();
    let mut out = Walked::default();
    let mut stack: Vec<(Dir, String, bool)> = Vec::new();
    let top = root
        .open_dir_beneath(Path::new("."))
        .context("cannot open the workspace")?;
    stack.push((top, String::new(), false));
    while let Some((dir, prefix, under_excluded)) = stack.pop() {
        let entries = dir
            .entries()
            .with_context(|| format!("cannot list {:?}", display(&prefix)))?;
        for entry in entries {
            let Some(name) = std::str::from_utf8(entry.name.as_bytes()).ok() else {
                out.skipped.push(format!(
                    "{}{} (not a UTF-8 name)",
                    prefix,
                    entry.name.to_string_lossy()
                ));
                continue;
            };
            let rel = format!("{prefix}{name}");
            // The rule restore applies: what it would refuse is not stored.
            if let Err(why) = crate::manifest::check_path(&rel) {
                out.skipped.push(format!("{} ({why})", display(&rel)));
                continue;
            }
            match entry.kind {
                EntryKind::Dir => {
                    let excluded = under_excluded || rules.excluded(&rel);
                    if excluded && !rules.has_includes {
                        continue;
                    }
                    match dir.open_dir(&entry.name) {
                        Ok(child) => stack.push((child, format!("{rel}/"), excluded)),
                        Err(e) => out.skipped.push(format!("{rel}/ ({e})")),
                    }
                }
                EntryKind::File => {
                    if databases.side_files.contains(&rel) {
                        continue;
                    }
                    let excluded = under_excluded || rules.excluded(&rel);
                    if excluded && !rules.included(&rel) {
                        continue;
                    }
                    let st = match dir.symlink_metadata(&entry.name) {
                        Ok(st) => st,
                        Err(e) => {
                            out.skipped.push(format!("{rel} ({e})"));
                            continue;
                        }
                    };
                    if EntryKind::of_mode(st.st_mode) != EntryKind::File {
                        continue;
                    }
                    let mut key = stat_key(&st);
                    let sqlite = databases.paths.contains(&rel.as_str());
                    if sqlite {
                        let mut wal_name = entry.name.clone();
                        wal_name.push("-wal");
                        if let Ok(wal) = dir.symlink_metadata(&wal_name) {
                            key.wal = (wal.st_size as u64, wal.st_mtime, wal.st_mtime_nsec as i64);
                        }
                    }
                    if key.size > rules.max_file_bytes && !sqlite {
                        out.skipped.push(format!(
                            "{rel} ({} bytes, over [store] max_file_mb)",
                            key.size
                        ));
                        continue;
                    }
                    out.files.push(Found {
                        rel,
                        size: key.size,
                        key,
                        executable: st.st_mode & 0o111 != 0,
                        sqlite,
                    });
                }
                EntryKind::Symlink => out.skipped.push(format!("{rel} (a link: not stored)")),
                EntryKind::Other => {}
            }
        }
    }
    out.files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

fn display(prefix: &str) -> &str {
    if prefix.is_empty() {
        "."
    } else {
        prefix
    }
}

/// Reads a found file's content: a regular file opened beneath `root` (a link planted
/// meanwhile leads nowhere outside it), or a declared database's backup.
pub(crate) fn read(root: &Dir, root_path: &Path, found: &Found, max: u64) -> Result<Vec<u8>> {
    if found.sqlite {
        return backup_sqlite(root, root_path, &found.rel);
    }
    let file = root
        .open_file_beneath(Path::new(&found.rel))
        .with_context(|| format!("cannot open {}", found.rel))?;
    let mut bytes = Vec::with_capacity(found.size.min(max) as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read {}", found.rel))?;
    if bytes.len() as u64 > max {
        anyhow::bail!(
            "{} grew over [store] max_file_mb while it was read",
            found.rel
        );
    }
    Ok(bytes)
}

/// A consistent copy of the database at `rel` (a declared state file, e.g.
/// `.toolbox/memory.sqlite`) through SQLite's online backup API: what a committed transaction
/// wrote is in it, whether it still sits in the `-wal` file or not. Copying the file alone
/// after a crash loses what the `-wal` file held.
fn backup_sqlite(root: &Dir, root_path: &Path, rel: &str) -> Result<Vec<u8>> {
    use rusqlite::{Connection, OpenFlags};
    // Checked through descriptors first (real folders, a regular file), then opened by path
    // without following a link, as the provider that keeps it opens it.
    let (folders, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let mut dir: Option<Dir> = None;
    for folder in folders.split('/').filter(|f| !f.is_empty()) {
        let parent = dir.as_ref().unwrap_or(root);
        dir = Some(
            parent
                .open_dir(OsStr::new(folder))
                .with_context(|| format!("cannot open the folder of {rel}"))?,
        );
    }
    let st = dir
        .as_ref()
        .unwrap_or(root)
        .symlink_metadata(OsStr::new(name))
        .with_context(|| format!("cannot stat {rel}"))?;
    if EntryKind::of_mode(st.st_mode) != EntryKind::File {
        anyhow::bail!("{rel} is not a regular file");
    }
    let path = root_path.join(rel);
    let source = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("cannot open {}", path.display()))?;
    source.busy_timeout(std::time::Duration::from_secs(5))?;
    let copy = tempfile::NamedTempFile::new().context("cannot make a temporary file")?;
    {
        let mut target = Connection::open(copy.path())?;
        let backup = rusqlite::backup::Backup::new(&source, &mut target)?;
        backup
            .run_to_completion(1024, std::time::Duration::from_millis(2), None)
            .with_context(|| format!("the backup of {rel} failed"))?;
    }
    std::fs::read(copy.path()).with_context(|| format!("cannot read the backup of {rel}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_paths(dir: &Path, rules: &StoreRules) -> Vec<String> {
        let root = Dir::open_path(dir).unwrap();
        walk(&root, rules)
            .unwrap()
            .files
            .into_iter()
            .map(|f| f.rel)
            .collect()
    }

    #[test]
    fn default_excludes_and_the_store_table() {
        let dir = tempfile::tempdir().unwrap();
        for path in [
            "a.txt",
            "src/main.rs",
            ".venv/lib/x.py",
            "web/node_modules/m/i.js",
            "target/debug/bin",
            ".git/objects/ab/cd",
            ".git/HEAD",
            "logs/x.log",
            ".toolbox/memory.sqlite-wal",
        ] {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, path).unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        assert_eq!(
            rel_paths(dir.path(), &StoreRules::default()),
            [".git/HEAD", "a.txt", "logs/x.log", "src/main.rs"]
        );
        let table = serde_json::json!({"exclude": ["*.log"], "include": ["target/debug/bin"]});
        let rules = StoreRules::from_table(Some(&table)).unwrap();
        assert_eq!(
            rel_paths(dir.path(), &rules),
            [".git/HEAD", "a.txt", "src/main.rs", "target/debug/bin"]
        );
        let bad = serde_json::json!({"exlude": ["x"]});
        let e = StoreRules::from_table(Some(&bad)).unwrap_err().to_string();
        assert!(e.contains("exlude"), "{e}");
    }
}
