//! The SQLite file: finding and opening it safely, its schema and migrations, and the
//! queries behind each tool.
//!
//! One file holds every memory: the `memories` table (id, title, text, creation time), the
//! `memory_tags` table (exact tags), and the FTS5 index `memory_fts` (see [`crate::text`] for
//! what it indexes). The index is contentless (`content=''`): it keeps only what search
//! needs, not a second copy of every text.
//!
//! Several toolbox processes may share one file (two agents on one workspace, or a user-wide
//! `[memory] path`): the file is in WAL mode, every connection waits up to
//! [`BUSY_TIMEOUT`] for a lock, and every write is one `BEGIN IMMEDIATE` transaction, so a
//! writer waits for the lock up front instead of failing half-way with "database is locked".

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rusqlite::{params, Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior};
use toolbox_host::{EntryKind, Workspace};

use crate::text::{self, Term};

/// The file's name inside `.toolbox/`.
pub const DB_NAME: &str = "memory.sqlite";
/// How long a connection waits for another process's lock before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);
/// `PRAGMA application_id` of a memory store ("tbxm"): tells our file from someone else's.
const APPLICATION_ID: i32 = 0x7462_786d;
/// The files SQLite keeps beside the database; each must be a plain file or absent.
const SIDE_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// The schema, one step per version: `PRAGMA user_version` is how many have run. A step
/// is never edited once released; a change is a new step.
const MIGRATIONS: &[&str] = &[
    // 1: memories, exact tags, and the full-text index (bigrams for CJK, see text.rs).
    //    `tag_keys` holds one opaque token per exact tag (weight 0: it filters, never ranks).
    "CREATE TABLE memories (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         title TEXT,
         text TEXT NOT NULL,
         created_ms INTEGER NOT NULL
     );
     CREATE TABLE memory_tags (
         memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
         tag TEXT NOT NULL,
         PRIMARY KEY (memory_id, tag)
     ) WITHOUT ROWID;
     CREATE INDEX memory_tags_by_tag ON memory_tags(tag, memory_id);
     CREATE VIRTUAL TABLE memory_fts USING fts5(
         title, body, tags, tails, tag_keys,
         content = '', contentless_delete = 1,
         tokenize = 'unicode61 remove_diacritics 2'
     );
     INSERT INTO memory_fts(memory_fts, rank) VALUES ('rank', 'bm25(4.0, 1.0, 2.0, 1.0, 0.0)');",
];

/// Where the database is.
#[derive(Debug, Clone)]
pub enum Location {
    /// `.toolbox/memory.sqlite` in the workspace, opened without following links.
    Workspace(Workspace),
    /// `[memory] path`: a file the operator chose (links there are the operator's business).
    Operator(PathBuf),
}

/// One memory as stored.
#[derive(Debug, Clone)]
pub struct Memory {
    /// The id `memory__save` returned; `memory__get` and `memory__delete` take it.
    pub id: i64,
    /// The title given when it was saved, if any.
    pub title: Option<String>,
    /// The text as saved.
    pub text: String,
    /// Its tags as saved, each once, in sorted order.
    pub tags: Vec<String>,
    /// When it was saved, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// One search result: the memory and how it matched.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The memory, in full.
    pub memory: Memory,
    /// A one-line excerpt around the matches, each match between `**`.
    pub snippet: String,
}

/// A page of [`Store::list`].
#[derive(Debug)]
pub struct Page {
    /// The memories on this page, newest first.
    pub memories: Vec<Memory>,
    /// How many memories carry every tag asked for, across all pages.
    pub total: u64,
}

/// An open database and the name errors use for it.
pub struct Store {
    conn: Connection,
    shown: String,
}

/// Open stores by file, so a call does not pay for opening and checking the file again.
/// The file's identity is checked on every call: a file replaced meanwhile is opened anew.
#[derive(Default)]
pub struct Stores {
    open: Mutex<HashMap<PathBuf, Opened>>,
}

/// A store and the identity (device, inode) of the file it was opened on.
type Opened = ((u64, u64), Arc<Mutex<Store>>);

/// A word or bigram in more memories than this is left out of the "any word" tier of a
/// search (see [`text::Tiers::any`]).
const COMMON_TOKEN_DOCUMENTS: u64 = if cfg!(test) { 4 } else { 5_000 };

/// At most this many files stay open; beyond it the cache starts over.
const MAX_OPEN: usize = 16;

impl Stores {
    /// The store at `loc`. With `create` false, `Ok(None)` when there is no file yet (the
    /// read tools never create one).
    pub fn get(&self, loc: &Location, create: bool) -> Result<Option<Arc<Mutex<Store>>>> {
        let Some(found) = locate(loc, create)? else {
            return Ok(None);
        };
        let cached = |open: &HashMap<PathBuf, Opened>| {
            open.get(&found.path)
                .filter(|(identity, _)| *identity == found.identity)
                .map(|(_, store)| store.clone())
        };
        if let Some(store) = cached(&self.lock()) {
            return Ok(Some(store));
        }
        // Opened without holding the map: opening may wait for another process's lock.
        let store = Arc::new(Mutex::new(Store::open(&found)?));
        let mut open = self.lock();
        if let Some(raced) = cached(&open) {
            return Ok(Some(raced));
        }
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        open.insert(found.path, (found.identity, store.clone()));
        Ok(Some(store))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Opened>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A database file found (or created) and checked, about to be opened.
struct Found {
    path: PathBuf,
    shown: String,
    identity: (u64, u64),
    /// Whether SQLite must refuse links (`SQLITE_OPEN_NOFOLLOW`).
    no_follow: bool,
}

fn locate(loc: &Location, create: bool) -> Result<Option<Found>> {
    match loc {
        Location::Workspace(ws) => locate_in_workspace(ws, create),
        Location::Operator(path) => locate_operator(path, create),
    }
}

/// `.toolbox/memory.sqlite`, checked through the folder's descriptor: a regular file with one
/// link, never a symbolic link. Created (mode 0600) when missing and `create` is set.
fn locate_in_workspace(ws: &Workspace, create: bool) -> Result<Option<Found>> {
    let shown = format!("{}/{DB_NAME}", toolbox_host::TOOLBOX_DIR);
    let dir = ws
        .toolbox_subdir(&[])
        .map_err(|e| anyhow!("cannot open the memory store's folder: {e}"))?;
    let name = OsStr::new(DB_NAME);
    for suffix in SIDE_SUFFIXES {
        let mut side = OsString::from(DB_NAME);
        side.push(suffix);
        let side_shown = format!("{shown}{suffix}");
        match dir.symlink_metadata(&side) {
            Ok(st) => check_plain(&side_shown, st.st_mode, st.st_nlink)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("cannot look at {side_shown}: {e}"),
        }
    }
    let st = match dir.symlink_metadata(name) {
        Ok(st) => st,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Ok(None);
            }
            match dir.create_new(name) {
                Ok(file) => {
                    use std::os::unix::fs::PermissionsExt;
                    // Memories can be private: only the owner reads them.
                    file.set_permissions(std::fs::Permissions::from_mode(0o600))
                        .with_context(|| format!("cannot set the mode of {shown}"))?;
                }
                // Another process created it first: use theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => bail!("cannot create {shown}: {e}"),
            }
            dir.symlink_metadata(name)
                .with_context(|| format!("cannot look at {shown}"))?
        }
        Err(e) => bail!("cannot look at {shown}: {e}"),
    };
    check_plain(&shown, st.st_mode, st.st_nlink)?;
    Ok(Some(Found {
        path: ws.toolbox_dir().join(DB_NAME),
        shown,
        identity: (st.st_dev, st.st_ino),
        no_follow: true,
    }))
}

/// A plain file: not a link (toolbox never follows links in its own folder), not a folder or
/// device, and with one name only (writing would change the other names too).
fn check_plain(shown: &str, mode: u32, links: impl Into<u64>) -> Result<()> {
    // nlink_t is 64 bits on some targets and 32 on others.
    let links: u64 = links.into();
    match EntryKind::of_mode(mode) {
        EntryKind::File => {}
        EntryKind::Symlink => bail!(
            "{shown} is a symbolic link; toolbox does not follow links in its own folder (remove it)"
        ),
        EntryKind::Dir => bail!("{shown} is a folder, not a database file"),
        EntryKind::Other => bail!("{shown} is not a regular file"),
    }
    if links > 1 {
        bail!(
            "{shown} has {links} hard links; writing to it would also change the other names, so toolbox refuses"
        );
    }
    Ok(())
}

/// The operator's `[memory] path`; its folders are created when `create` is set.
fn locate_operator(path: &Path, create: bool) -> Result<Option<Found>> {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Ok(None);
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).with_context(|| {
                    format!("cannot create the folder of {shown} ([memory] path)")
                })?;
            }
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true);
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            options
                .open(path)
                .with_context(|| format!("cannot create {shown} ([memory] path)"))?;
            std::fs::metadata(path).with_context(|| format!("cannot look at {shown}"))?
        }
        Err(e) => bail!("cannot look at {shown} ([memory] path): {e}"),
    };
    if !meta.is_file() {
        bail!("{shown} ([memory] path) is not a regular file");
    }
    use std::os::unix::fs::MetadataExt;
    Ok(Some(Found {
        path: path.to_path_buf(),
        shown,
        identity: (meta.dev(), meta.ino()),
        no_follow: false,
    }))
}

/// Whether every descriptor of this process open on `path` is the file `identity` names.
/// SQLite opens by name, so this is how we know the file it opened is the one we checked:
/// a swap between the check and the open is caught here. Without /proc, the file is looked
/// at again by name.
fn opened_file_is(path: &Path, identity: (u64, u64)) -> bool {
    use std::os::unix::fs::MetadataExt;
    let same = |m: &std::fs::Metadata| (m.dev(), m.ino()) == identity;
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return std::fs::symlink_metadata(path).is_ok_and(|m| same(&m));
    };
    let mut seen = false;
    for fd in fds.flatten() {
        if std::fs::read_link(fd.path()).is_ok_and(|target| target == path) {
            seen = true;
            // The magic link leads to the open file itself, whatever its name is now.
            if !std::fs::metadata(fd.path()).is_ok_and(|m| same(&m)) {
                return false;
            }
        }
    }
    seen || std::fs::symlink_metadata(path).is_ok_and(|m| same(&m))
}

/// The number of memories, for the benchmark and tests.
pub fn count(store: &Store) -> Result<u64> {
    store
        .conn
        .query_row("SELECT count(*) FROM memories", [], |r| r.get::<_, i64>(0))
        .map(|n| n as u64)
        .map_err(|e| store.err(e))
}

impl Store {
    fn open(found: &Found) -> Result<Store> {
        let shown = found.shown.clone();
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_EXRESCODE;
        if found.no_follow {
            // Refuses a link anywhere in the path (SQLite looks at every component), on top
            // of the descriptor check above.
            flags |= OpenFlags::SQLITE_OPEN_NOFOLLOW;
        }
        let conn = Connection::open_with_flags(&found.path, flags)
            .map_err(|e| anyhow!("cannot open {shown}: {}", describe(&e)))?;
        if found.no_follow && !opened_file_is(&found.path, found.identity) {
            bail!("{shown} was replaced while it was being opened; try again");
        }
        let store = Store { conn, shown };
        store
            .conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| store.err(e))?;
        store.prepare()?;
        Ok(store)
    }

    /// Checks the file is ours (or empty), then sets WAL and runs the migrations it lacks.
    /// A file that is not a SQLite database, or is someone else's, is an error naming it and
    /// is left exactly as it was.
    fn prepare(&self) -> Result<()> {
        let state = self.schema_state(&self.conn)?;
        self.check_ours(state)?;
        // WAL: readers never wait for a writer, and writers wait for each other (busy timeout).
        let mode = self.set_wal()?;
        if !mode.eq_ignore_ascii_case("wal") {
            // A file system without shared memory keeps the old journal; it still works.
            tracing::warn!(target: "toolbox", "{}: journal mode is {mode}, not wal", self.shown);
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| self.err(e))?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(|e| self.err(e))?;
        if state.version < MIGRATIONS.len() as i64 {
            self.migrate()?;
        }
        Ok(())
    }

    /// Switches a new file to WAL (a no-op read on a file that is in WAL already); returns
    /// the journal mode in force.
    ///
    /// The switch needs the file to itself. When two connections make it at once, each
    /// holding a read lock and waiting for the other's, SQLite answers one of them "busy" at
    /// once instead of calling the busy handler (it would wait forever), so that one tries
    /// again here, within the same [`BUSY_TIMEOUT`].
    fn set_wal(&self) -> Result<String> {
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        loop {
            match self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
            {
                Err(e)
                    if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                other => return other.map_err(|e| self.err(e)),
            }
        }
    }

    /// `application_id`, `user_version`, and how many schema objects the file has.
    ///
    /// One statement, so one snapshot: read one at a time, another process's migration could
    /// commit in between and make a store being created look like someone else's file.
    fn schema_state(&self, conn: &Connection) -> Result<SchemaState> {
        conn.query_row(
            "SELECT (SELECT application_id FROM pragma_application_id),
                    (SELECT user_version FROM pragma_user_version),
                    (SELECT count(*) FROM sqlite_schema)",
            [],
            |r| {
                Ok(SchemaState {
                    application_id: r.get(0)?,
                    version: r.get(1)?,
                    objects: r.get(2)?,
                })
            },
        )
        .map_err(|e| self.err(e))
    }

    fn check_ours(&self, s: SchemaState) -> Result<()> {
        let shown = &self.shown;
        let fresh = s.application_id == 0 && s.version == 0 && s.objects == 0;
        if !fresh && s.application_id != APPLICATION_ID {
            bail!(
                "{shown} is a SQLite database, but not a toolbox memory store (application_id {}, {} schema objects); toolbox leaves it as it is: move it away, or set [memory] path to another file",
                s.application_id,
                s.objects
            );
        }
        if s.version > MIGRATIONS.len() as i64 {
            bail!(
                "{shown} was written by a newer toolbox (memory schema version {}, this one knows up to {}); upgrade toolbox to use it",
                s.version,
                MIGRATIONS.len()
            );
        }
        Ok(())
    }

    /// Runs the missing migrations in one transaction. The state is read again under the
    /// write lock: another process may have migrated the file meanwhile.
    fn migrate(&self) -> Result<()> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let state = self.schema_state(&tx)?;
        self.check_ours(state)?;
        for step in MIGRATIONS.iter().skip(state.version as usize) {
            tx.execute_batch(step).map_err(|e| self.err(e))?;
        }
        tx.pragma_update(None, "user_version", MIGRATIONS.len() as i64)
            .map_err(|e| self.err(e))?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// An SQLite error as the model should read it: naming the file, and saying what a
    /// damaged or foreign file means.
    fn err(&self, e: rusqlite::Error) -> anyhow::Error {
        let shown = &self.shown;
        match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => anyhow!(
                "{shown} is not a SQLite database ({}); toolbox leaves it as it is: move it away, or set [memory] path to another file",
                describe(&e)
            ),
            Some(ErrorCode::DatabaseCorrupt) => anyhow!(
                "{shown} is damaged ({}); toolbox leaves it as it is: restore it from a backup or move it away",
                describe(&e)
            ),
            _ => anyhow!("{shown}: {}", describe(&e)),
        }
    }

    /// Saves a memory; returns its id.
    pub fn save(&mut self, title: Option<&str>, text: &str, tags: &[String]) -> Result<i64> {
        let created_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut tails = String::new();
        let title_form = title.map(|t| text::index_form(t, &mut tails));
        let body_form = text::index_form(text, &mut tails);
        let tags_form = text::index_form(&tags.join(" "), &mut tails);
        let tag_keys: Vec<String> = tags.iter().map(|t| text::tag_key(t)).collect();
        let tag_keys = tag_keys.join(" ");
        let write = |conn: &mut Connection| -> rusqlite::Result<i64> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.prepare_cached(
                "INSERT INTO memories (title, text, created_ms) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![title, text, created_ms])?;
            let id = tx.last_insert_rowid();
            {
                let mut tag = tx.prepare_cached(
                    "INSERT OR IGNORE INTO memory_tags (memory_id, tag) VALUES (?1, ?2)",
                )?;
                for t in tags {
                    tag.execute(params![id, t])?;
                }
                tx.prepare_cached(
                    "INSERT INTO memory_fts (rowid, title, body, tags, tails, tag_keys) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )?
                .execute(params![id, title_form, body_form, tags_form, tails, tag_keys])?;
            }
            tx.commit()?;
            Ok(id)
        };
        write(&mut self.conn).map_err(|e| self.err(e))
    }

    /// The memory `id`, or `None`.
    pub fn get(&self, id: i64) -> Result<Option<Memory>> {
        let row = self
            .conn
            .prepare_cached("SELECT id, title, text, created_ms FROM memories WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id], |r| {
                    Ok(Memory {
                        id: r.get(0)?,
                        title: r.get(1)?,
                        text: r.get(2)?,
                        tags: Vec::new(),
                        created_ms: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        let Some(mut memory) = row else {
            return Ok(None);
        };
        memory.tags = self.tags_of(id)?;
        Ok(Some(memory))
    }

    fn tags_of(&self, id: i64) -> Result<Vec<String>> {
        self.conn
            .prepare_cached("SELECT tag FROM memory_tags WHERE memory_id = ?1 ORDER BY tag")
            .and_then(|mut s| {
                s.query_map([id], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))
    }

    /// Deletes the memory `id`; returns it, or `None` when there is none.
    pub fn delete(&mut self, id: i64) -> Result<Option<Memory>> {
        let Some(memory) = self.get(id)? else {
            return Ok(None);
        };
        let delete = |conn: &mut Connection| -> rusqlite::Result<usize> {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute("DELETE FROM memory_fts WHERE rowid = ?1", [id])?;
            tx.execute("DELETE FROM memory_tags WHERE memory_id = ?1", [id])?;
            let n = tx.execute("DELETE FROM memories WHERE id = ?1", [id])?;
            tx.commit()?;
            Ok(n)
        };
        // Another process may have deleted it between the read and the write.
        let n = delete(&mut self.conn).map_err(|e| self.err(e))?;
        Ok((n > 0).then_some(memory))
    }

    /// Memories newest first, carrying every tag in `tags`, `limit` from `offset`.
    pub fn list(&self, tags: &[String], limit: u64, offset: u64) -> Result<Page> {
        let filter = tag_filter("m.id", tags.len(), 1);
        let n = tags.len();
        let mut values: Vec<rusqlite::types::Value> =
            tags.iter().map(|t| t.clone().into()).collect();
        let total: i64 = self
            .conn
            .prepare_cached(&format!("SELECT count(*) FROM memories m WHERE 1 {filter}"))
            .and_then(|mut s| s.query_row(rusqlite::params_from_iter(values.iter()), |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        values.push((limit as i64).into());
        values.push((offset as i64).into());
        let ids: Vec<i64> = self
            .conn
            .prepare_cached(&format!(
                "SELECT m.id FROM memories m WHERE 1 {filter} ORDER BY m.id DESC LIMIT ?{} OFFSET ?{}",
                n + 1,
                n + 2
            ))
            .and_then(|mut s| {
                s.query_map(rusqlite::params_from_iter(values.iter()), |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))?;
        let mut memories = Vec::with_capacity(ids.len());
        for id in ids {
            // Deleted by another process between the two reads: skip it.
            if let Some(m) = self.get(id)? {
                memories.push(m);
            }
        }
        Ok(Page {
            memories,
            total: total as u64,
        })
    }

    /// The best `limit` memories for `query` carrying every tag in `tags`: exact phrase
    /// matches first, then memories with every term, then with any (each group ranked by
    /// bm25, the title weighing most). A query with no words or CJK characters at all
    /// (only symbols) is looked up as a plain substring instead.
    pub fn search(&self, query: &str, tags: &[String], limit: usize) -> Result<Vec<Hit>> {
        let terms = text::terms(query);
        let ids = if terms.is_empty() {
            self.search_substring(query.trim(), tags, limit)?
        } else {
            self.search_index(&terms, tags, limit)?
        };
        let mut hits = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(memory) = self.get(id)? {
                let snippet = if terms.is_empty() {
                    text::snippet_literal(&memory.text, query.trim())
                } else {
                    text::snippet(&memory.text, &terms)
                };
                hits.push(Hit { memory, snippet });
            }
        }
        Ok(hits)
    }

    fn search_index(&self, terms: &[Term], tags: &[String], limit: usize) -> Result<Vec<i64>> {
        // Tags are tokens of the index too, so FTS5 intersects them with the query and
        // ranks only the memories that carry them.
        let with_tags = |expr: String| -> String {
            let mut out = format!("({expr})");
            for t in tags {
                out.push_str(&format!(" AND tag_keys : \"{}\"", text::tag_key(t)));
            }
            out
        };
        let sql = "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?1 ORDER BY rank LIMIT ?2";
        let tiers = text::tiers(terms);
        let mut found: Vec<i64> = Vec::with_capacity(limit);
        let run = |query: String, found: &mut Vec<i64>| -> Result<()> {
            // Earlier tiers' rows come back again here; ask for enough to fill up after them.
            let want = (limit + found.len()) as i64;
            let ids: Vec<i64> = self
                .conn
                .prepare_cached(sql)
                .and_then(|mut s| {
                    s.query_map(params![with_tags(query), want], |r| r.get(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| self.err(e))?;
            for id in ids {
                if found.len() < limit && !found.contains(&id) {
                    found.push(id);
                }
            }
            Ok(())
        };
        for tier in tiers.strict {
            if found.len() >= limit {
                return Ok(found);
            }
            run(tier, &mut found)?;
        }
        if found.len() >= limit || tiers.any.is_empty() {
            return Ok(found);
        }
        let mut rare = Vec::with_capacity(tiers.any.len());
        for expr in tiers.any {
            if self.matches_at_most(&expr, COMMON_TOKEN_DOCUMENTS)? {
                rare.push(expr);
            }
        }
        if !rare.is_empty() {
            run(rare.join(" OR "), &mut found)?;
        }
        Ok(found)
    }

    /// Whether the FTS5 expression `expr` matches at most `n` memories. Reads at most `n + 1`
    /// rowids of the index, unranked, so it costs little even for "the".
    fn matches_at_most(&self, expr: &str, n: u64) -> Result<bool> {
        self.conn
            .prepare_cached(
                "SELECT count(*) FROM (SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?1 LIMIT ?2)",
            )
            .and_then(|mut s| s.query_row(params![expr, n as i64 + 1], |r| r.get::<_, i64>(0)))
            .map(|count| count as u64 <= n)
            .map_err(|e| self.err(e))
    }

    /// Memories whose title or text contains `needle` (ASCII letters compared without
    /// case), newest first: a scan, for queries the index cannot take.
    fn search_substring(&self, needle: &str, tags: &[String], limit: usize) -> Result<Vec<i64>> {
        if needle.is_empty() {
            return Ok(Vec::new());
        }
        let pattern = format!(
            "%{}%",
            needle
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let filter = tag_filter("m.id", tags.len(), 3);
        let mut values: Vec<rusqlite::types::Value> = vec![pattern.into(), (limit as i64).into()];
        values.extend(tags.iter().map(|t| t.clone().into()));
        self.conn
            .prepare_cached(&format!(
                "SELECT m.id FROM memories m
                 WHERE (m.text LIKE ?1 ESCAPE '\\' OR m.title LIKE ?1 ESCAPE '\\') {filter}
                 ORDER BY m.id DESC LIMIT ?2"
            ))
            .and_then(|mut s| {
                s.query_map(rusqlite::params_from_iter(values.iter()), |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))
    }
}

/// `AND <id> IN (SELECT … WHERE tag = ?k)` for each of `n` tags, numbered from `first`.
fn tag_filter(id: &str, n: usize, first: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                " AND {id} IN (SELECT memory_id FROM memory_tags WHERE tag = ?{})",
                first + i
            )
        })
        .collect()
}

#[derive(Debug, Clone, Copy)]
struct SchemaState {
    application_id: i32,
    version: i64,
    objects: i64,
}

/// An SQLite error's message without rusqlite's wrapping.
fn describe(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(code, Some(msg)) => {
            format!("{msg} (SQLite error {})", code.extended_code)
        }
        other => other.to_string(),
    }
}
