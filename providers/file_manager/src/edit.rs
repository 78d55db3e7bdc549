//! `file_manager__edit`: replace an exact string in a text file, atomically.
//!
//! The edit is refused unless `old_string` picks out exactly one place (or `replace_all` is
//! set), so a model cannot change the wrong occurrence by accident. Files with Windows line
//! endings are matched even when the model (which sees lines without `\r`) writes `\n`.

use std::io::Read;

use anyhow::{anyhow, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Preview, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::ToolContext;

use crate::{blocking, text, write, PATH, TOOLSET};

pub(crate) const NAME: &str = "file_manager__edit";
/// Files larger than this are edited from Python instead.
const MAX_EDIT_BYTES: u64 = 10 * 1024 * 1024;
const OLD_STRING: Arg = Arg::string("old_string").required();
const NEW_STRING: Arg = Arg::string("new_string").required();
const REPLACE_ALL: Arg = Arg::boolean("replace_all");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Change part of an existing UTF-8 text file by replacing an exact string. old_string \
         must match the file exactly, including whitespace and indentation (copy it from \
         file_manager__read output without the line-number prefix), and must occur exactly \
         once unless replace_all=true; include enough surrounding lines to make it unique. \
         new_string may be empty to delete text. The file is rewritten atomically. Files over \
         10 MiB and binary files are refused. To create a file or replace all of it use \
         file_manager__write.",
        object(&[
            PATH.doc(
                "File to edit, relative to the workspace. `output/`, `scratchpad/` and \
                 `input/` name this session's folders.",
            ),
            OLD_STRING.doc("The exact text to replace. Must not be empty."),
            NEW_STRING
                .doc("The text to put in its place (must differ from old_string; may be empty)."),
            REPLACE_ALL
                .doc("Replace every occurrence instead of requiring exactly one (default false)."),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    .aliases(&["edit_file"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "edit_file")
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?.to_string();
    let old = OLD_STRING.str(&a)?.to_string();
    let new = NEW_STRING.str(&a)?.to_string();
    let replace_all = REPLACE_ALL.bool(&a)?;
    a.finish()?;
    if old.is_empty() {
        return Err(anyhow!(
            "{NAME}: old_string is empty; give the exact text to replace (to create or \
             overwrite a whole file use {})",
            ctx.word(write::NAME)
        ));
    }
    if old == new {
        return Err(anyhow!(
            "{NAME}: old_string and new_string are identical; there is nothing to change"
        ));
    }
    let ctx = ctx.clone();
    blocking(NAME, move || {
        edit(&ctx, &path, &old, &new, replace_all).map(Value::String)
    })
    .await
}

/// An edit worked out but not yet written: the folder and name it goes to, the text before
/// and after.
struct Planned {
    dir: toolbox_host::Dir,
    name: std::ffi::OsString,
    shown: String,
    real: String,
    content: String,
    updated: String,
    count: usize,
    first_line: usize,
}

/// Reads the file and works out the edit, refusing what the tool refuses; writes nothing.
fn plan(ctx: &ToolContext, path: &str, old: &str, new: &str, replace_all: bool) -> Result<Planned> {
    let ws = &ctx.workspace;
    let p = ws.locate(path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&p);
    let real = ws.show_real(&p);
    // One folder descriptor for the read and the replace: both see the same file.
    let (dir, name) = ws.parent_of(&p, false).map_err(|e| match e {
        _ if e.is_not_found() => anyhow!(
            "{NAME}: {shown} does not exist; use {} to create it",
            ctx.word(write::NAME)
        ),
        other => anyhow!("{NAME}: cannot read {shown}: {other}"),
    })?;
    let size = match write::existing_size(&dir, &name, &shown) {
        Ok(Some(size)) => size,
        Ok(None) => {
            return Err(anyhow!(
                "{NAME}: {shown} does not exist; use {} to create it",
                ctx.word(write::NAME)
            ))
        }
        Err(e) => return Err(anyhow!(e.to_string().replace(write::NAME, NAME))),
    };
    if size > MAX_EDIT_BYTES {
        return Err(anyhow!(
            "{NAME}: {shown} is {}; files over 10 MiB are edited from Python \
             ({}) instead",
            text::bytes(size),
            ctx.word("run_python_code")
        ));
    }
    let mut bytes = Vec::new();
    dir.open_file(&name)
        .and_then(|f| f.take(MAX_EDIT_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| anyhow!("{NAME}: cannot read {shown}: {e}"))?;
    let head = &bytes[..bytes.len().min(text::SNIFF_BYTES)];
    let content = match std::str::from_utf8(&bytes) {
        Ok(s) if !head.contains(&0) => s,
        _ => {
            return Err(anyhow!(
                "{NAME}: {shown} looks like a binary file ({}); it cannot be edited as text",
                text::bytes(bytes.len() as u64)
            ))
        }
    };

    let mut old = old.to_string();
    let mut new = new.to_string();
    let mut count = content.matches(old.as_str()).count();
    if count == 0 && content.contains("\r\n") && old.contains('\n') && !old.contains("\r\n") {
        // The model saw the lines without their '\r'; match the file's own line endings.
        old = old.replace('\n', "\r\n");
        new = new.replace("\r\n", "\n").replace('\n', "\r\n");
        count = content.matches(old.as_str()).count();
    }
    if count == 0 {
        return Err(anyhow!(
            "{NAME}: old_string was not found in {shown}; it must match exactly, including \
             whitespace and indentation (read the file again to see its current text)"
        ));
    }
    if count > 1 && !replace_all {
        return Err(anyhow!(
            "{NAME}: old_string occurs {count} times in {shown}; give more surrounding context \
             to make it unique, or set replace_all"
        ));
    }
    let first_line = content
        .find(old.as_str())
        .map_or(1, |at| content[..at].matches('\n').count() + 1);
    let updated = if replace_all {
        content.replace(old.as_str(), &new)
    } else {
        content.replacen(old.as_str(), &new, 1)
    };
    Ok(Planned {
        dir,
        name,
        shown,
        real,
        content: content.to_string(),
        updated,
        count,
        first_line,
    })
}

fn edit(ctx: &ToolContext, path: &str, old: &str, new: &str, replace_all: bool) -> Result<String> {
    let plan = plan(ctx, path, old, new, replace_all)?;
    let Planned {
        dir,
        name,
        shown,
        real,
        updated,
        count,
        first_line,
        ..
    } = plan;
    dir.write_atomic(&name, updated.as_bytes())
        .map_err(|e| anyhow!("{NAME}: cannot write {shown}: {e}; the file was not changed"))?;
    Ok(if count == 1 {
        format!("Replaced 1 occurrence in {real} (at line {first_line})")
    } else {
        format!("Replaced {count} occurrences in {real} (the first at line {first_line})")
    })
}

/// What an edit would do: the unified diff of the file, with its real path. An edit the tool
/// would refuse says so and why. Changes nothing.
pub(crate) fn preview(args: &Value, ctx: &ToolContext) -> Option<Preview> {
    let a = Args::new(NAME, args).ok()?;
    let path = PATH.str(&a).ok()?;
    let old = OLD_STRING.str(&a).ok()?;
    let new = NEW_STRING.str(&a).ok()?;
    let replace_all = REPLACE_ALL.bool(&a).ok()?;
    if old.is_empty() || old == new {
        return None;
    }
    Some(match plan(ctx, path, old, new, replace_all) {
        Ok(plan) => {
            let what = if plan.count == 1 {
                format!("1 change at line {}", plan.first_line)
            } else {
                format!(
                    "{} changes, the first at line {}",
                    plan.count, plan.first_line
                )
            };
            Preview::new(format!("Edit {} ({what})", plan.real)).diff(
                &plan.shown,
                &plan.content,
                &plan.updated,
            )
        }
        Err(e) => Preview::new(format!("Edit {path}: this edit will fail: {e:#}")),
    })
}

#[cfg(test)]
mod tests {
    use super::NAME;
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn replaces_a_unique_string() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.py", "x = 1\ny = 2\nz = 3\n");
        let out = call(
            &ctx,
            NAME,
            json!({"path": "a.py", "old_string": "y = 2", "new_string": "y = 20"}),
        )
        .await
        .unwrap();
        assert_eq!(out, "Replaced 1 occurrence in a.py (at line 2)");
        assert_eq!(get(&ctx, "a.py"), "x = 1\ny = 20\nz = 3\n");
        // Deleting text is an edit with an empty new_string.
        call(
            &ctx,
            NAME,
            json!({"file_path": "a.py", "old_string": "z = 3\n", "new_string": ""}),
        )
        .await
        .unwrap();
        assert_eq!(get(&ctx, "a.py"), "x = 1\ny = 20\n");
        let names: Vec<_> = std::fs::read_dir(ctx.workspace.root())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.py"]);
    }

    #[tokio::test]
    async fn ambiguity_and_replace_all() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "t.txt", "a\nfoo\nb\nfoo\nfoo\n");
        let e = call(
            &ctx,
            NAME,
            json!({"path": "t.txt", "old_string": "foo", "new_string": "bar"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            "file_manager__edit: old_string occurs 3 times in t.txt; give more surrounding \
             context to make it unique, or set replace_all"
        );
        assert_eq!(get(&ctx, "t.txt"), "a\nfoo\nb\nfoo\nfoo\n");
        let out = call(
            &ctx,
            NAME,
            json!({"path": "t.txt", "old_string": "foo", "new_string": "bar", "replace_all": true}),
        )
        .await
        .unwrap();
        assert_eq!(out, "Replaced 3 occurrences in t.txt (the first at line 2)");
        assert_eq!(get(&ctx, "t.txt"), "a\nbar\nb\nbar\nbar\n");
    }

    #[tokio::test]
    async fn crlf_files_match_lf_old_strings() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "w.txt", "one\r\ntwo\r\nthree\r\n");
        call(
            &ctx,
            NAME,
            json!({"path": "w.txt", "old_string": "one\ntwo", "new_string": "1\n2"}),
        )
        .await
        .unwrap();
        assert_eq!(get(&ctx, "w.txt"), "1\r\n2\r\nthree\r\n");
    }

    #[tokio::test]
    async fn errors() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.txt", "hello\n");
        put(&ctx, "bin.dat", b"ab\0cd");
        let edit = |path: &str, old: &str, new: &str| json!({"path": path, "old_string": old, "new_string": new});
        let e = call(&ctx, NAME, edit("a.txt", "", "x")).await.unwrap_err();
        assert!(
            e.starts_with("file_manager__edit: old_string is empty"),
            "{e}"
        );
        let e = call(&ctx, NAME, edit("a.txt", "hello", "hello"))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__edit: old_string and new_string are identical; there is nothing to change"
        );
        let e = call(&ctx, NAME, edit("nope.txt", "a", "b"))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__edit: nope.txt does not exist; use file_manager__write to create it"
        );
        let e = call(&ctx, NAME, edit("a.txt", "goodbye", "x"))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("file_manager__edit: old_string was not found in a.txt"),
            "{e}"
        );
        let e = call(&ctx, NAME, edit("bin.dat", "ab", "xy"))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__edit: bin.dat looks like a binary file (5 bytes); it cannot be edited as text"
        );
        assert_eq!(
            std::fs::read(ctx.workspace.root().join("bin.dat")).unwrap(),
            b"ab\0cd"
        );
        let e = call(&ctx, NAME, json!({"path": "a.txt", "old_string": "h"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__edit requires new_string");
        std::fs::create_dir(ctx.workspace.root().join("d")).unwrap();
        let e = call(&ctx, NAME, edit("d", "a", "b")).await.unwrap_err();
        assert_eq!(
            e,
            "file_manager__edit: d is a directory; give the path of a file"
        );
    }

    #[tokio::test]
    async fn session_scratchpad_files_are_edited_in_place() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, ".toolbox/sessions/s1/scratchpad/run.py", "N = 1\n");
        let out = call(
            &ctx,
            NAME,
            json!({"path": "scratchpad/run.py", "old_string": "N = 1", "new_string": "N = 2"}),
        )
        .await
        .unwrap();
        assert_eq!(
            out,
            "Replaced 1 occurrence in .toolbox/sessions/s1/scratchpad/run.py (scratchpad/run.py) \
             (at line 1)"
        );
        assert_eq!(
            get(&ctx, ".toolbox/sessions/s1/scratchpad/run.py"),
            "N = 2\n"
        );
    }
}
