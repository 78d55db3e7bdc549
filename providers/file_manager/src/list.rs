//! `file_manager__list`: what is in a directory, optionally a few levels deep.
//!
//! The listing is breadth-first so that, when it is cut at the limit, the shallow levels are
//! complete and only the deepest one is partial. Symbolic links are shown but never
//! followed, so a link cannot lead the listing out of the workspace. Like glob and grep, list
//! honours `.gitignore` and `.ignore` (a Rust repository's `target/` is not walked); the
//! footer counts what was left out, and `show_ignored` lists it too.

use std::path::PathBuf;
use std::sync::Arc;

use ignore::gitignore::Gitignore;

use anyhow::{anyhow, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{Dir, DirEntryInfo, EntryKind, PathError, ToolContext};

use crate::{blocking, cancelled, text, walk, FOLDER, TOOLSET};

pub(crate) const NAME: &str = "file_manager__list";
const DEFAULT_LIMIT: u64 = 1000;
const MAX_LIMIT: u64 = 10_000;
const DEPTH: Arg = Arg::integer("depth", 1, Some(10)).default(1);
const SHOW_HIDDEN: Arg = Arg::boolean("show_hidden");
const SHOW_IGNORED: Arg = Arg::boolean("show_ignored");
const LIMIT: Arg = Arg::integer("limit", 1, Some(MAX_LIMIT)).default(DEFAULT_LIMIT);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "List the files and folders in a workspace directory. Use it to find your way around \
         before reading or searching. Folders end with '/', files show their size in bytes, \
         symbolic links show their target (they are not followed). depth=1 (default) lists \
         only the directory itself; up to depth=10 lists sub-folders too, one workspace-relative \
         path per line. Hidden entries (names starting with '.') are skipped unless \
         show_hidden=true. Entries excluded by .gitignore or .ignore files are left out (and \
         counted in the footer) unless show_ignored=true. At most `limit` entries are returned (default 1000, max \
         10000); the last line says how many entries were shown and whether the listing was cut.",
        object(&[
            FOLDER.doc(
                "Directory to list, relative to the workspace (default \".\", the workspace \
                 root). `output/`, `scratchpad/` and `input/` name this session's folders.",
            ),
            DEPTH.doc(
                "How many levels to list: 1 (default) for the directory's own entries, up to 10.",
            ),
            SHOW_HIDDEN.doc("Also list entries whose names start with '.' (default false)."),
            SHOW_IGNORED.doc(
                "Also list entries excluded by .gitignore or .ignore files (default false).",
            ),
            LIMIT.doc("Maximum number of entries to return (default 1000, max 10000)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .aliases(&["list_dir"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "list_dir")
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = FOLDER.opt_nonempty_str(&a)?.unwrap_or(".").to_string();
    let depth = DEPTH.u64(&a)? as usize;
    let show_hidden = SHOW_HIDDEN.bool(&a)?;
    let show_ignored = SHOW_IGNORED.bool(&a)?;
    let limit = LIMIT.u64(&a)? as usize;
    a.finish()?;
    let ctx = ctx.clone();
    blocking(NAME, move || {
        let show = Show {
            hidden: show_hidden,
            ignored: show_ignored,
        };
        list(&ctx, &path, depth, show, limit).map(Value::String)
    })
    .await
}

enum Kind {
    Dir,
    File(u64),
    Link(PathBuf),
    Other,
}

struct Entry {
    /// Relative to the listed folder.
    rel: PathBuf,
    kind: Kind,
}

/// Which entries a listing includes besides the ordinary ones.
#[derive(Clone, Copy)]
struct Show {
    hidden: bool,
    ignored: bool,
}

/// What a listing left out, for the footer.
#[derive(Default)]
struct Skipped {
    hidden: usize,
    ignored: usize,
    unreadable: usize,
}

fn list(ctx: &ToolContext, path: &str, depth: usize, show: Show, limit: usize) -> Result<String> {
    let ws = &ctx.workspace;
    let p = ws.locate(path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&p);
    // Every folder is held by descriptor and children are opened without following links,
    // so a folder swapped for a link mid-listing is not entered.
    let top = ws.open_dir(&p).map_err(|e| match e {
        _ if e.is_not_found() => anyhow!("{NAME}: {shown} does not exist"),
        PathError::NotADirectory { .. } => anyhow!(
            "{NAME}: {shown} is a file, not a directory; use {} to read it",
            ctx.word(crate::read::NAME)
        ),
        other => anyhow!("{NAME}: cannot read {shown}: {other}"),
    })?;

    let top_entries = top
        .entries()
        .map_err(|e| anyhow!("{NAME}: cannot read {shown}: {e}"))?;
    let (virtual_base, ignores) = walk::base_ignores(ws, &p, &top, &top_entries);
    let mut entries: Vec<Entry> = Vec::new();
    let mut skipped = Skipped::default();
    let mut cut = false;
    // Each folder of a level, held open, with its entries (read once) and its ignore rules.
    type Level = Vec<(Dir, PathBuf, Vec<DirEntryInfo>, Arc<Vec<Gitignore>>)>;
    let mut level: Level = vec![(top, PathBuf::new(), top_entries, Arc::new(ignores))];
    'levels: for current_depth in 1..=depth {
        let mut next_level: Level = Vec::new();
        for (folder, rel, children, rules) in std::mem::take(&mut level) {
            if ctx.cancel.is_cancelled() {
                return Err(cancelled(NAME));
            }
            for child in children {
                if !show.hidden && child.name.as_encoded_bytes().starts_with(b".") {
                    skipped.hidden += 1;
                    continue;
                }
                let child_rel = rel.join(&child.name);
                let is_dir = child.kind == EntryKind::Dir;
                if !show.ignored && walk::ignored(&rules, &virtual_base.join(&child_rel), is_dir) {
                    skipped.ignored += 1;
                    continue;
                }
                if entries.len() == limit {
                    cut = true;
                    break 'levels;
                }
                let kind = match child.kind {
                    EntryKind::Symlink => Kind::Link(
                        folder
                            .read_link(&child.name)
                            .unwrap_or_else(|_| PathBuf::from("?")),
                    ),
                    EntryKind::Dir => {
                        if current_depth < depth {
                            match folder.open_dir(&child.name).and_then(|d| {
                                let found = d.entries()?;
                                Ok((d, found))
                            }) {
                                Ok((d, found)) => {
                                    let rules = walk::child_ignores(
                                        &rules,
                                        &d,
                                        &found,
                                        &virtual_base.join(&child_rel),
                                    );
                                    next_level.push((d, child_rel.clone(), found, rules));
                                }
                                Err(_) => skipped.unreadable += 1,
                            }
                        }
                        Kind::Dir
                    }
                    EntryKind::File => {
                        Kind::File(folder.size_and_mtime(&child.name).map_or(0, |(len, _)| len))
                    }
                    EntryKind::Other => Kind::Other,
                };
                entries.push(Entry {
                    rel: child_rel,
                    kind,
                });
            }
        }
        level = next_level;
    }
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(render(&shown, &entries, depth, cut, limit, &skipped))
}

#[allow(clippy::too_many_arguments)]
fn render(
    shown: &str,
    entries: &[Entry],
    depth: usize,
    cut: bool,
    limit: usize,
    skipped: &Skipped,
) -> String {
    let Skipped {
        hidden,
        ignored,
        unreadable,
    } = *skipped;
    let label = if shown == "." {
        "the workspace root".to_string()
    } else {
        format!("{shown}/")
    };
    let mut out = String::new();
    let (mut dirs, mut files, mut others) = (0usize, 0usize, 0usize);
    for e in entries {
        let rel = e.rel.to_string_lossy();
        let joined = if shown == "." {
            rel.into_owned()
        } else {
            format!("{shown}/{rel}")
        };
        let p = text::escape_name(&joined);
        match &e.kind {
            Kind::Dir => {
                dirs += 1;
                out.push_str(&format!("{p}/\n"));
            }
            Kind::File(len) => {
                files += 1;
                out.push_str(&format!("{p}  {}\n", text::size(*len)));
            }
            Kind::Link(target) => {
                others += 1;
                out.push_str(&format!(
                    "{p} -> {}  (symbolic link, not followed)\n",
                    text::escape_name(&target.to_string_lossy())
                ));
            }
            Kind::Other => {
                others += 1;
                out.push_str(&format!("{p}  (special file)\n"));
            }
        }
    }
    if entries.is_empty() {
        out.push_str(&format!("{label} is empty"));
    } else {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut summary = format!(
            "{} ({}, {}",
            plural(entries.len(), "entry", "entries"),
            plural(dirs, "folder", "folders"),
            plural(files, "file", "files"),
        );
        if others > 0 {
            summary.push_str(&format!(", {}", plural(others, "other", "others")));
        }
        summary.push_str(&format!(") in {label}"));
        if depth > 1 {
            summary.push_str(&format!(", depth {depth}"));
        }
        out.push_str(&format!("[{summary}"));
        if cut {
            out.push_str(&format!(
                "; cut at limit={limit}: there are more entries — list a sub-folder, lower depth \
                 or raise limit (max {MAX_LIMIT})"
            ));
        } else {
            out.push_str("; complete");
        }
        out.push(']');
    }
    if ignored > 0 {
        out.push_str(&format!(
            "\n[{ignored} {} excluded by .gitignore/.ignore not shown; set show_ignored=true to see them]",
            if ignored == 1 { "entry" } else { "entries" }
        ));
    }
    if hidden > 0 {
        out.push_str(&format!(
            "\n[{hidden} hidden {} not shown; set show_hidden=true to see them]",
            if hidden == 1 { "entry" } else { "entries" }
        ));
    }
    if unreadable > 0 {
        out.push_str(&format!(
            "\n[{unreadable} sub-folder(s) could not be read and are not listed]"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn ignored_entries_are_left_out_and_counted() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, ".gitignore", "target/\n*.log\n");
        put(&ctx, "Cargo.toml", "");
        put(&ctx, "src/main.rs", "");
        put(&ctx, "src/debug.log", "");
        put(&ctx, "target/debug/app", "");
        put(&ctx, "src/gen/.gitignore", "*.rs\n");
        put(&ctx, "src/gen/out.rs", "");
        let out = call(&ctx, super::NAME, json!({"path": ".", "depth": 3}))
            .await
            .unwrap();
        assert!(!out.contains("target"), "{out}");
        assert!(!out.contains("debug.log"), "{out}");
        assert!(
            !out.contains("out.rs"),
            "a nested .gitignore applies: {out}"
        );
        assert!(out.contains("src/main.rs"), "{out}");
        assert!(
            out.contains(
                "[3 entries excluded by .gitignore/.ignore not shown; set show_ignored=true to see them]"
            ),
            "{out}"
        );
        let out = call(
            &ctx,
            super::NAME,
            json!({"path": ".", "depth": 3, "show_ignored": true}),
        )
        .await
        .unwrap();
        assert!(out.contains("target/debug/app"), "{out}");
        assert!(out.contains("src/gen/out.rs"), "{out}");
        assert!(!out.contains("excluded by"), "{out}");
        // Listing inside an ignored folder by name shows it, like ripgrep searching it.
        let out = call(&ctx, super::NAME, json!({"path": "target"}))
            .await
            .unwrap();
        assert!(out.contains("target/debug/"), "{out}");
    }

    #[tokio::test]
    async fn depth_one_lists_sorted_entries_with_sizes() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "b.txt", "hello");
        put(&ctx, "a/inner.txt", "x");
        put(&ctx, "big.bin", vec![b'x'; 1300]);
        put(&ctx, ".secret", "s");
        let out = call(&ctx, "file_manager__list", json!({})).await.unwrap();
        assert_eq!(
            out,
            "a/\nb.txt  5 bytes\nbig.bin  1300 bytes (1.3 KiB)\n\
             [3 entries (1 folder, 2 files) in the workspace root; complete]\n\
             [1 hidden entry not shown; set show_hidden=true to see them]"
        );
        let out = call(&ctx, super::NAME, json!({"path": ".", "show_hidden": true}))
            .await
            .unwrap();
        assert!(out.starts_with(".secret  1 byte\na/\n"), "{out}");
        assert!(out.contains("[4 entries"), "{out}");
        assert!(!out.contains("hidden entr"), "{out}");
    }

    #[tokio::test]
    async fn deeper_listings_use_workspace_relative_paths() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "src/lib.rs", "fn x() {}");
        put(&ctx, "src/sub/deep/z.rs", "");
        put(&ctx, "README.md", "# hi");
        let out = call(&ctx, "file_manager__list", json!({"depth": 2}))
            .await
            .unwrap();
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(
            lines,
            [
                "README.md  4 bytes",
                "src/",
                "src/lib.rs  9 bytes",
                "src/sub/",
                "[4 entries (2 folders, 2 files) in the workspace root, depth 2; complete]"
            ]
        );
        let out = call(
            &ctx,
            "file_manager__list",
            json!({"path": "src", "depth": "10"}),
        )
        .await
        .unwrap();
        assert!(out.contains("src/sub/deep/z.rs  0 bytes\n"), "{out}");
        assert!(out.contains("in src/, depth 10; complete]"), "{out}");
    }

    #[tokio::test]
    async fn limit_cuts_the_deepest_level_first() {
        let (_d, ctx) = setup(super::NAME);
        for i in 0..5 {
            put(&ctx, &format!("d{i}/f.txt"), "");
        }
        let out = call(&ctx, "file_manager__list", json!({"depth": 2, "limit": 7}))
            .await
            .unwrap();
        // All five top-level folders, then two of their files.
        assert_eq!(out.lines().filter(|l| l.ends_with('/')).count(), 5, "{out}");
        assert_eq!(out.lines().filter(|l| l.contains("f.txt")).count(), 2);
        assert!(out.contains("[7 entries"), "{out}");
        assert!(out.contains("cut at limit=7"), "{out}");
    }

    #[tokio::test]
    async fn errors_and_empty_folders() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "f.txt", "x");
        std::fs::create_dir(ctx.workspace.root().join("empty")).unwrap();
        let e = call(&ctx, "file_manager__list", json!({"path": "f.txt"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__list: f.txt is a file, not a directory; use file_manager__read to read it"
        );
        let e = call(&ctx, "file_manager__list", json!({"path": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__list: nope does not exist");
        let e = call(&ctx, "file_manager__list", json!({"depth": 0}))
            .await
            .unwrap_err();
        assert!(e.contains("`depth` must be between 1 and 10, got 0"), "{e}");
        let e = call(&ctx, "file_manager__list", json!({"limit": 10001}))
            .await
            .unwrap_err();
        assert!(e.contains("between 1 and 10000"), "{e}");
        let out = call(&ctx, "file_manager__list", json!({"path": "empty"}))
            .await
            .unwrap();
        assert_eq!(out, "empty/ is empty");
    }

    #[tokio::test]
    async fn session_folders_are_routed() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, ".toolbox/sessions/s1/output/chart.png", "png");
        let out = call(&ctx, "file_manager__list", json!({"path": "output"}))
            .await
            .unwrap();
        assert!(out.starts_with("output/chart.png  3 bytes\n"), "{out}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn symlinks_are_shown_not_followed() {
        let (_d, ctx) = setup(super::NAME);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), ctx.workspace.root().join("out")).unwrap();
        let out = call(&ctx, "file_manager__list", json!({"depth": 3}))
            .await
            .unwrap();
        assert!(out.contains("out -> "), "{out}");
        assert!(out.contains("(symbolic link, not followed)"), "{out}");
        assert!(!out.contains("secret.txt"), "{out}");
    }
}
