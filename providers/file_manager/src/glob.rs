//! `file_manager__glob`: find files whose path matches a glob pattern.
//!
//! The pattern is matched against each file's path relative to the search folder, with `*`
//! never crossing a `/`: `*.rs` finds files in the folder itself, `**/*.rs` finds them at any
//! depth. The walk honours `.gitignore` and skips hidden entries (see [`crate::walk`]).

use anyhow::{anyhow, Result};
use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{PathError, ToolContext};

use crate::{blocking, cancelled, walk, FOLDER, PATTERN, TOOLSET};

pub(crate) const NAME: &str = "file_manager__glob";
const DEFAULT_LIMIT: u64 = 1000;
const LIMIT: Arg = Arg::integer("limit", 1, Some(10_000)).default(DEFAULT_LIMIT);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Find files by name pattern. The glob is matched against each file's path relative to \
         `path` (default the workspace root): `*` and `?` do not cross '/', `**` matches any \
         number of folders, `{a,b}` alternates and `[abc]` is a character class — so `*.csv` \
         finds CSV files in the folder itself and `**/*.csv` finds them at any depth. Files \
         listed in .gitignore and hidden files are skipped; folders are not returned. Results \
         are workspace-relative paths, one per line, sorted, at most `limit` (default 1000, \
         max 10000). Use file_manager__grep to search file contents.",
        object(&[
            PATTERN.doc("Glob pattern, e.g. \"**/*.py\" or \"data/*.{csv,tsv}\"."),
            FOLDER.doc("Folder to search below, relative to the workspace (default \".\")."),
            LIMIT.doc("Maximum number of paths to return (default 1000, max 10000)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .aliases(&["glob_search"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "glob_search")
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let pattern = PATTERN.str(&a)?.to_string();
    let path = FOLDER.opt_nonempty_str(&a)?.unwrap_or(".").to_string();
    let limit = LIMIT.u64(&a)? as usize;
    a.finish()?;
    let matcher = compile(NAME, "pattern", &pattern)?;
    let ctx = ctx.clone();
    blocking(NAME, move || {
        glob(&ctx, &pattern, &matcher, &path, limit).map(Value::String)
    })
    .await
}

/// The longest glob accepted, in characters. Real patterns are far shorter; globset's
/// compiled regex has a size limit, and it panics instead of failing when a huge pattern
/// (hundreds of thousands of characters) exceeds it.
pub(crate) const MAX_GLOB_CHARS: usize = 4096;

/// Compiles a glob with `*` confined to one path component; errors name the argument
/// (`pattern` of glob, `glob` of grep) and the pattern.
pub(crate) fn compile(tool: &str, argument: &str, pattern: &str) -> Result<GlobMatcher> {
    if pattern.is_empty() {
        return Err(anyhow!("{tool}: the glob pattern is empty"));
    }
    let chars = pattern.chars().count();
    if chars > MAX_GLOB_CHARS {
        return Err(anyhow!(
            "{tool}: {argument} is {chars} characters; the limit is {MAX_GLOB_CHARS}"
        ));
    }
    // "./x" means "x" relative to the search folder.
    let trimmed = pattern.strip_prefix("./").unwrap_or(pattern);
    let glob = GlobBuilder::new(trimmed)
        .literal_separator(true)
        .build()
        .map_err(|e| anyhow!("{tool}: invalid glob pattern `{pattern}`: {}", e.kind()))?;
    // compile_matcher panics when the regex cannot be built (it exceeds globset's size
    // limit); within MAX_GLOB_CHARS that should not happen, but it must never end a call.
    std::panic::catch_unwind(|| glob.compile_matcher()).map_err(|_| {
        anyhow!("{tool}: the glob pattern in {argument} is too complex to compile; simplify it")
    })
}

fn glob(
    ctx: &ToolContext,
    pattern: &str,
    matcher: &GlobMatcher,
    path: &str,
    limit: usize,
) -> Result<String> {
    let ws = &ctx.workspace;
    let base = ws.locate(path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&base);
    let walk = walk::gitignore_walk(ws, &base).map_err(|e| match e {
        _ if e.is_not_found() => anyhow!("{NAME}: {shown} does not exist"),
        PathError::NotADirectory { .. } => {
            anyhow!("{NAME}: {shown} is a file, not a folder; give the folder to search in `path`")
        }
        other => anyhow!("{NAME}: cannot read {shown}: {other}"),
    })?;

    let mut found = Vec::new();
    let mut capped = false;
    for entry in walk {
        if ctx.cancel.is_cancelled() {
            return Err(cancelled(NAME));
        }
        if !matcher.is_match(&entry.rel) || !entry.is_file_inside(ws, &base) {
            continue;
        }
        if found.len() == limit {
            capped = true;
            break;
        }
        found.push(entry.shown(&shown));
    }
    if found.is_empty() {
        return Ok(if shown == "." {
            format!("No files match {pattern}")
        } else {
            format!("No files match {pattern} under {shown}")
        });
    }
    let mut out = found.join("\n");
    if capped {
        out.push_str(&format!(
            "\n[results capped at {limit}; narrow the pattern or path]"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::test_support::*;
    use serde_json::json;

    fn tree(ctx: &toolbox_host::ToolContext) {
        put(ctx, "top.rs", "");
        put(ctx, "src/lib.rs", "");
        put(ctx, "src/a/b.rs", "");
        put(ctx, "src/notes.md", "");
        put(ctx, "target/debug/gen.rs", "");
        put(ctx, ".hidden/h.rs", "");
        put(ctx, ".gitignore", "target/\n");
    }

    #[tokio::test]
    async fn star_stays_in_one_folder_and_double_star_goes_deep() {
        let (_d, ctx) = setup(NAME);
        tree(&ctx);
        let out = call(&ctx, NAME, json!({"pattern": "*.rs"})).await.unwrap();
        assert_eq!(out, "top.rs");
        let out = call(&ctx, NAME, json!({"pattern": "**/*.rs"}))
            .await
            .unwrap();
        // target/ is git-ignored (no git repository here) and .hidden/ is hidden.
        assert_eq!(out, "src/a/b.rs\nsrc/lib.rs\ntop.rs");
        let out = call(&ctx, NAME, json!({"pattern": "*.rs", "path": "src"}))
            .await
            .unwrap();
        assert_eq!(out, "src/lib.rs");
        let out = call(&ctx, NAME, json!({"pattern": "src/*.{md,rs}"}))
            .await
            .unwrap();
        assert_eq!(out, "src/lib.rs\nsrc/notes.md");
    }

    #[tokio::test]
    async fn a_searched_subfolder_still_honours_the_root_gitignore() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, ".gitignore", "*.log\n");
        put(&ctx, "logs/a.log", "");
        put(&ctx, "logs/b.txt", "");
        let out = call(&ctx, NAME, json!({"pattern": "*", "path": "logs"}))
            .await
            .unwrap();
        assert_eq!(out, "logs/b.txt");
    }

    #[tokio::test]
    async fn caps_no_matches_and_bad_patterns() {
        let (_d, ctx) = setup(NAME);
        for i in 0..5 {
            put(&ctx, &format!("f{i}.txt"), "");
        }
        let out = call(&ctx, NAME, json!({"pattern": "*.txt", "limit": 3}))
            .await
            .unwrap();
        assert_eq!(
            out,
            "f0.txt\nf1.txt\nf2.txt\n[results capped at 3; narrow the pattern or path]"
        );
        let out = call(&ctx, NAME, json!({"pattern": "*.txt", "limit": 5}))
            .await
            .unwrap();
        assert!(!out.contains("capped"), "{out}");
        let out = call(&ctx, NAME, json!({"pattern": "*.xlsx"}))
            .await
            .unwrap();
        assert_eq!(out, "No files match *.xlsx");
        let e = call(&ctx, NAME, json!({"pattern": "a[b"}))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("file_manager__glob: invalid glob pattern `a[b`:"),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({"pattern": "*", "path": "f0.txt"}))
            .await
            .unwrap_err();
        assert!(e.contains("f0.txt is a file, not a folder"), "{e}");
        let e = call(&ctx, NAME, json!({"pattern": "*", "path": "nope"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__glob: nope does not exist");
        let e = call(&ctx, NAME, json!({})).await.unwrap_err();
        assert_eq!(e, "file_manager__glob requires pattern");
    }

    #[tokio::test]
    async fn session_folders_can_be_searched() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, ".toolbox/sessions/s1/output/plot.png", "");
        let out = call(&ctx, NAME, json!({"pattern": "*.png", "path": "output"}))
            .await
            .unwrap();
        assert_eq!(out, "output/plot.png");
        // The hidden .toolbox folder is not searched from the root.
        let out = call(&ctx, NAME, json!({"pattern": "**/*.png"}))
            .await
            .unwrap();
        assert_eq!(out, "No files match **/*.png");
    }

    #[tokio::test]
    async fn cancellation_stops_the_walk() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.txt", "");
        ctx.cancel.cancel();
        let e = call(&ctx, NAME, json!({"pattern": "*"})).await.unwrap_err();
        assert_eq!(e, "file_manager__glob: cancelled");
    }
}
