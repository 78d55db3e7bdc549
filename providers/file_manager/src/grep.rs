//! `file_manager__grep`: search file contents with a regular expression, ripgrep-style.
//!
//! Built on ripgrep's own crates: the regex is compiled by grep-regex, files are searched line
//! by line by grep-searcher, and the walk honours `.gitignore` and skips hidden entries (see
//! [`crate::walk`]). A file with a NUL byte is treated as binary and skipped entirely, even if
//! a match was seen before the NUL.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use globset::GlobMatcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkMatch};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{EntryKind, PathError, ToolContext, WsPath};

use crate::{blocking, cancelled, glob, text, walk, FOLDER, PATTERN, TOOLSET};

pub(crate) const NAME: &str = "file_manager__grep";
const DEFAULT_MAX_RESULTS: u64 = 200;
const GLOB: Arg = Arg::string("glob");
const IGNORE_CASE: Arg = Arg::boolean("ignore_case");
const SMART_CASE: Arg = Arg::boolean("smart_case");
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(5000)).default(DEFAULT_MAX_RESULTS);
/// Matched lines are cut to this many characters.
const MAX_TEXT_CHARS: usize = 500;

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search the contents of text files for a regular expression (Rust regex syntax, like \
         ripgrep: escape literal characters such as '.', '(' or '[' with a backslash). \
         Returns one `path:line:text` line per matching line, sorted by path and line, with \
         workspace-relative paths; matched text is cut at 500 characters. Searches every file \
         below `path` (a folder, or a single file), skipping binary files, hidden files and \
         anything listed in .gitignore. Narrow the search with `glob` (e.g. \"*.py\"). \
         Matches do not span lines. At most max_results lines are returned (default 200, max \
         5000). Use file_manager__glob to find files by name.",
        object(&[
            PATTERN
                .doc("Regular expression to search for, e.g. \"def \\w+\\(\" or \"TODO|FIXME\"."),
            FOLDER.doc("Folder or file to search, relative to the workspace (default \".\")."),
            GLOB.doc(
                "Only search files matching this glob. Without a '/' it matches the file name \
                 (\"*.py\", \"*.{csv,tsv}\"); with one it matches the path relative to \
                 `path` (\"src/**/*.rs\").",
            ),
            IGNORE_CASE.doc("Match without regard to case (default false)."),
            SMART_CASE.doc(
                "Ignore case unless the pattern contains an upper-case letter (default false).",
            ),
            MAX_RESULTS.doc("Maximum number of matching lines to return (default 200, max 5000)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .aliases(&["grep_search"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "grep_search")
}

/// Which files to search, when the model narrowed it with `glob`.
enum FileFilter {
    All,
    /// A glob without '/' is matched against the file name alone.
    Name(GlobMatcher),
    /// A glob with '/' is matched against the path relative to the search folder.
    Path(GlobMatcher),
}

struct Query {
    pattern: String,
    path: String,
    filter: FileFilter,
    matcher: RegexMatcher,
    max_results: usize,
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let pattern = PATTERN.str(&a)?.to_string();
    let path = FOLDER.opt_nonempty_str(&a)?.unwrap_or(".").to_string();
    let glob = GLOB.opt_nonempty_str(&a)?;
    let ignore_case = IGNORE_CASE.bool(&a)?;
    let smart_case = SMART_CASE.bool(&a)?;
    let max_results = MAX_RESULTS.u64(&a)? as usize;
    a.finish()?;
    if pattern.is_empty() {
        return Err(anyhow!("{NAME}: the pattern is empty"));
    }
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(ignore_case)
        .case_smart(smart_case)
        // Refuses patterns that could only match across lines, instead of never matching.
        .line_terminator(Some(b'\n'))
        .build(&pattern)
        .map_err(|e| anyhow!("{NAME}: invalid regex `{pattern}`: {e}"))?;
    let filter = match glob {
        None | Some("") => FileFilter::All,
        Some(g) if g.contains('/') => FileFilter::Path(glob::compile(NAME, "glob", g)?),
        Some(g) => FileFilter::Name(glob::compile(NAME, "glob", g)?),
    };
    let query = Query {
        pattern,
        path,
        filter,
        matcher,
        max_results,
    };
    let ctx = ctx.clone();
    blocking(NAME, move || grep(&ctx, &query).map(Value::String)).await
}

fn grep(ctx: &ToolContext, q: &Query) -> Result<String> {
    let ws = &ctx.workspace;
    let base = ws.locate(&q.path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&base);
    let mut searcher = new_searcher();
    let mut lines: Vec<String> = Vec::new();
    let mut capped = false;
    let not_found = || anyhow!("{NAME}: {shown} does not exist");

    // A single file: searched as it is, opened beneath the root.
    let walk = match walk::gitignore_walk(ws, &base) {
        Ok(walk) => Some(walk),
        Err(PathError::NotADirectory { .. }) => None,
        Err(e) if e.is_not_found() => return Err(not_found()),
        Err(e) => return Err(anyhow!("{NAME}: cannot read {shown}: {e}")),
    };
    let Some(walk) = walk else {
        let file = ws.open_read(&base).map_err(|e| match e {
            _ if e.is_not_found() => not_found(),
            other => anyhow!("{NAME}: cannot read {shown}: {other}"),
        })?;
        let name = Path::new(&shown)
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        if wanted(&q.filter, Path::new(&name)) {
            let mut sink = FileMatches {
                want: q.max_results + 1,
                found: Vec::new(),
                binary: false,
            };
            if searcher.search_file(&q.matcher, &file, &mut sink).is_ok() && !sink.binary {
                let display = text::escape_name(&shown);
                capped = sink.found.len() > q.max_results;
                for (line_no, text) in sink.found.iter().take(q.max_results) {
                    lines.push(format!("{display}:{line_no}:{text}"));
                }
            }
        }
        return Ok(finish(q, &shown, lines, capped));
    };

    let (lines, capped) = search_tree(ctx, q, &base, &shown, walk)?;
    Ok(finish(q, &shown, lines, capped))
}

/// How many threads walk and search at once: the machine's cores, at most 8.
fn search_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
}

/// The matches found so far, by file path in walk order, pruned to the first ones: only as
/// many files are kept as it takes to hold `cap` matches.
struct Collected {
    files: BTreeMap<PathBuf, Vec<(u64, String)>>,
    matches: usize,
    cap: usize,
}

impl Collected {
    /// Whether a file at `rel` could still contribute (it sorts before the last file kept,
    /// or fewer than `cap` matches are known).
    fn wants(&self, rel: &Path) -> bool {
        self.matches < self.cap || self.files.keys().next_back().is_some_and(|last| rel < last)
    }

    fn add(&mut self, rel: PathBuf, found: Vec<(u64, String)>) {
        self.matches += found.len();
        self.files.insert(rel, found);
        // Drop files at the end that are not needed to reach `cap` matches.
        while let Some(last) = self.files.last_key_value().map(|(_, v)| v.len()) {
            if self.matches - last >= self.cap {
                self.files.pop_last();
                self.matches -= last;
            } else {
                break;
            }
        }
    }
}

/// Searches every file below the base on several threads, like ripgrep: the walk itself is
/// parallel (every folder still opened by descriptor without following links) and each file
/// is searched by the thread that found it, through the folder descriptor that listed it.
/// Results are put back in path order and cut at `max_results`, so the output is exactly
/// what a sequential search gives; a file that sorts after enough matches is not searched.
fn search_tree(
    ctx: &ToolContext,
    q: &Query,
    base: &WsPath,
    shown: &str,
    walk: walk::Walk,
) -> Result<(Vec<String>, bool)> {
    use std::cell::RefCell;
    use std::sync::Mutex;

    thread_local! {
        static SEARCHER: RefCell<Searcher> = RefCell::new(new_searcher());
    }
    let ws = &ctx.workspace;
    // One match more than shown tells whether the result was capped.
    let collected = Mutex::new(Collected {
        files: BTreeMap::new(),
        matches: 0,
        cap: q.max_results + 1,
    });
    let lock = || collected.lock().unwrap_or_else(|e| e.into_inner());
    let stop = || ctx.cancel.is_cancelled();
    walk.run_parallel(search_threads(), &stop, |entry| {
        if !matches!(entry.kind, EntryKind::File | EntryKind::Symlink)
            || !wanted(&q.filter, &entry.rel)
            || !lock().wants(&entry.rel)
        {
            return;
        }
        let found = SEARCHER.with(|s| search_entry(&mut s.borrow_mut(), q, ws, base, &entry));
        if let Some(found) = found {
            lock().add(entry.rel, found);
        }
    });
    if ctx.cancel.is_cancelled() {
        return Err(cancelled(NAME));
    }
    let collected = collected.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut lines: Vec<String> = Vec::new();
    for (rel, found) in &collected.files {
        let entry_shown = walk::shown_path(shown, rel);
        let remaining = q.max_results - lines.len();
        for (line_no, text) in found.iter().take(remaining) {
            lines.push(format!("{entry_shown}:{line_no}:{text}"));
        }
        if found.len() > remaining {
            return Ok((lines, true));
        }
    }
    Ok((lines, false))
}

/// The searcher every file goes through: line numbers, and a NUL byte means binary.
fn new_searcher() -> Searcher {
    SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .line_number(true)
        .build()
}

/// Searches one file the walk found: its matches (at most `max_results + 1`), or `None`
/// when it has none or is not a readable text file.
fn search_entry(
    searcher: &mut Searcher,
    q: &Query,
    ws: &toolbox_host::Workspace,
    base: &WsPath,
    entry: &walk::WalkEntry,
) -> Option<Vec<(u64, String)>> {
    // Opened through the held folder (a file) or beneath the root (a link): what is read is
    // inside the workspace, whatever was swapped meanwhile.
    let file = entry.open(ws, base).ok()?;
    let mut sink = FileMatches {
        want: q.max_results + 1,
        found: Vec::new(),
        binary: false,
    };
    // Unreadable files are skipped rather than failing the whole search.
    if searcher.search_file(&q.matcher, &file, &mut sink).is_err() || sink.binary {
        return None;
    }
    (!sink.found.is_empty()).then_some(sink.found)
}

/// The result text: the match lines, or a sentence saying there were none.
fn finish(q: &Query, shown: &str, lines: Vec<String>, capped: bool) -> String {
    if lines.is_empty() {
        return if shown == "." {
            format!("No matches for {}", q.pattern)
        } else {
            format!("No matches for {} in {shown}", q.pattern)
        };
    }
    let mut out = lines.join("\n");
    if capped {
        out.push_str(&format!(
            "\n[results capped at {}; narrow the pattern or path]",
            q.max_results
        ));
    }
    out
}

/// Whether a file passes the `glob` filter; `rel` is its path relative to the searched
/// folder (its name alone when a single file is searched).
fn wanted(filter: &FileFilter, rel: &Path) -> bool {
    match filter {
        FileFilter::All => true,
        FileFilter::Name(g) => rel.file_name().is_some_and(|n| g.is_match(n)),
        FileFilter::Path(g) => g.is_match(rel),
    }
}

/// Collects one file's matches, so a file that turns out to be binary can be dropped whole.
struct FileMatches {
    /// Keep at most this many matches.
    want: usize,
    found: Vec<(u64, String)>,
    binary: bool,
}

impl Sink for FileMatches {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        if self.found.len() >= self.want {
            // Keep reading (without keeping) so a NUL further on still marks the file binary.
            return Ok(true);
        }
        let raw = String::from_utf8_lossy(mat.bytes());
        let line = raw.trim_end_matches(['\n', '\r']);
        let (cut, was_cut) = text::cut_chars(line, MAX_TEXT_CHARS);
        let shown = if was_cut {
            format!("{cut}…")
        } else {
            cut.to_string()
        };
        self.found.push((mat.line_number().unwrap_or(0), shown));
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _offset: u64) -> Result<bool, std::io::Error> {
        self.binary = true;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn finds_lines_sorted_by_path_and_line() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "b.py", "def b():\n    return 1\ndef c():\n");
        put(&ctx, "a/x.py", "import os\ndef x():\n");
        put(&ctx, "a/y.txt", "def in text\n");
        let out = call(&ctx, NAME, json!({"pattern": r"^def \w+\("}))
            .await
            .unwrap();
        assert_eq!(out, "a/x.py:2:def x():\nb.py:1:def b():\nb.py:3:def c():");
        let out = call(&ctx, NAME, json!({"pattern": "def", "glob": "*.txt"}))
            .await
            .unwrap();
        assert_eq!(out, "a/y.txt:1:def in text");
        let out = call(&ctx, NAME, json!({"pattern": "def", "glob": "a/*.py"}))
            .await
            .unwrap();
        assert_eq!(out, "a/x.py:2:def x():");
        let out = call(&ctx, NAME, json!({"pattern": "return", "path": "b.py"}))
            .await
            .unwrap();
        assert_eq!(out, "b.py:2:    return 1");
    }

    #[tokio::test]
    async fn case_options() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "c.txt", "Error one\nerror two\n");
        let out = call(&ctx, NAME, json!({"pattern": "error"})).await.unwrap();
        assert_eq!(out, "c.txt:2:error two");
        let out = call(&ctx, NAME, json!({"pattern": "error", "ignore_case": true}))
            .await
            .unwrap();
        assert_eq!(out, "c.txt:1:Error one\nc.txt:2:error two");
        let out = call(&ctx, NAME, json!({"pattern": "error", "smart_case": true}))
            .await
            .unwrap();
        assert_eq!(out, "c.txt:1:Error one\nc.txt:2:error two");
        let out = call(&ctx, NAME, json!({"pattern": "Error", "smart_case": true}))
            .await
            .unwrap();
        assert_eq!(out, "c.txt:1:Error one");
    }

    #[tokio::test]
    async fn gitignore_hidden_and_binary_files_are_skipped() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, ".gitignore", "build/\n*.log\n");
        put(&ctx, "build/out.txt", "needle\n");
        put(&ctx, "run.log", "needle\n");
        put(&ctx, ".env", "needle\n");
        put(&ctx, "src/main.rs", "// needle\n");
        let mut bin = b"needle\n".to_vec();
        bin.extend_from_slice(&[0u8; 16]);
        put(&ctx, "data.bin", &bin);
        // A NUL far into the file: the early match must not leak out either.
        let mut late = "needle\n".repeat(20_000).into_bytes();
        late.push(0);
        put(&ctx, "late.bin", &late);
        let out = call(&ctx, NAME, json!({"pattern": "needle"}))
            .await
            .unwrap();
        assert_eq!(out, "src/main.rs:1:// needle");
        // Searching an ignored folder by name works, like ripgrep.
        let out = call(&ctx, NAME, json!({"pattern": "needle", "path": "build"}))
            .await
            .unwrap();
        assert_eq!(out, "build/out.txt:1:needle");
    }

    #[tokio::test]
    async fn caps_and_long_lines() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "many.txt", "hit\n".repeat(10));
        put(&ctx, "more.txt", "hit\n");
        let out = call(&ctx, NAME, json!({"pattern": "hit", "max_results": 3}))
            .await
            .unwrap();
        assert_eq!(
            out,
            "many.txt:1:hit\nmany.txt:2:hit\nmany.txt:3:hit\n\
             [results capped at 3; narrow the pattern or path]"
        );
        let out = call(&ctx, NAME, json!({"pattern": "hit", "max_results": 11}))
            .await
            .unwrap();
        assert!(out.ends_with("more.txt:1:hit"), "{out}");
        assert!(!out.contains("capped"), "{out}");
        let e = call(&ctx, NAME, json!({"pattern": "hit", "max_results": 5001}))
            .await
            .unwrap_err();
        assert!(e.contains("between 1 and 5000"), "{e}");

        put(&ctx, "wide.txt", format!("{}\n", "ü".repeat(800)));
        let out = call(&ctx, NAME, json!({"pattern": "ü", "path": "wide.txt"}))
            .await
            .unwrap();
        assert_eq!(out, format!("wide.txt:1:{}…", "ü".repeat(500)));
    }

    #[tokio::test]
    async fn no_matches_and_bad_input() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.txt", "text\n");
        let out = call(&ctx, NAME, json!({"pattern": "absent"}))
            .await
            .unwrap();
        assert_eq!(out, "No matches for absent");
        let e = call(&ctx, NAME, json!({"pattern": "(unclosed"}))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("file_manager__grep: invalid regex `(unclosed`:"),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({"pattern": "x", "glob": "[z"}))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("file_manager__grep: invalid glob pattern `[z`"),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({"pattern": "x", "path": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__grep: nope does not exist");
        let e = call(&ctx, NAME, json!({"pattern": "x", "ignore_case": "yes"}))
            .await
            .unwrap_err();
        assert!(e.contains("`ignore_case` must be a boolean"), "{e}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlinks_out_of_the_workspace_are_not_searched() {
        let (_d, ctx) = setup(NAME);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "needle\n").unwrap();
        let root = ctx.workspace.root();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("leak.txt"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("leakdir")).unwrap();
        put(&ctx, "real.txt", "needle\n");
        std::os::unix::fs::symlink("real.txt", root.join("alias.txt")).unwrap();
        // An absolute link is not followed, even into the workspace: the kernel resolves
        // links beneath the root only, and an absolute target starts outside it.
        std::os::unix::fs::symlink(root.join("real.txt"), root.join("abs.txt")).unwrap();
        let out = call(&ctx, NAME, json!({"pattern": "needle"}))
            .await
            .unwrap();
        assert_eq!(out, "alias.txt:1:needle\nreal.txt:1:needle");
    }
}
