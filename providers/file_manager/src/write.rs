//! `file_manager__write`: create, replace or append to a small text file — and the atomic
//! replace that edit shares.
//!
//! A replace never leaves a half-written file behind: the new content goes to a temporary
//! file in the same folder, is flushed to disk, takes over the old file's permissions and is
//! then renamed over the target in one step. If anything fails before the rename, the old
//! file is untouched and the temporary file is removed.

use std::ffi::OsStr;
use std::io::{self, Write};

use anyhow::{anyhow, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Preview, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{Dir, EntryKind, PathError, ToolContext};

use crate::{blocking, text, PATH, TOOLSET};

pub(crate) const NAME: &str = "file_manager__write";
/// The largest content one call may write.
pub(crate) const MAX_WRITE_BYTES: usize = 1024 * 1024;
const CONTENT: Arg = Arg::string("content").aliases(&["text"]).required();
const APPEND: Arg = Arg::boolean("append");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Write a SMALL UTF-8 text file in the workspace: a short markdown note, a config file, \
         a small JSON or CSV. Creates the file (and any missing parent folders) or replaces it \
         completely and atomically; with append=true adds the content to the end instead. \
         Content is limited to 1 MiB. For long or complex content — generated data, large \
         tables, anything you would build in a loop, binary formats — write the file from \
         Python with run_python_code instead; large JSON, JSONL or CSV goes through \
         data__convert, or Python with pathlib/json/csv. To change part of an existing file use \
         file_manager__edit. Files meant for the user go under output/.",
        object(&[
            PATH.doc(
                "File to write, relative to the workspace. `output/`, `scratchpad/` and \
                 `input/` name this session's folders.",
            ),
            CONTENT.doc("The complete text to write (or to append). At most 1 MiB."),
            APPEND.doc(
                "Add content to the end of the file instead of replacing it (default false). \
                 The file is created if missing.",
            ),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    .aliases(&["write_file"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "write_file")
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?.to_string();
    let content = CONTENT.str(&a)?;
    let append = APPEND.bool(&a)?;
    a.finish()?;
    if content.len() > MAX_WRITE_BYTES {
        return Err(anyhow!(
            "{NAME}: content is {} bytes; the limit is 1 MiB ({MAX_WRITE_BYTES} bytes). \
             Write large or complex files from Python ({}) instead",
            content.len(),
            ctx.word("run_python_code")
        ));
    }
    let content = content.to_string();
    let ctx = ctx.clone();
    blocking(NAME, move || {
        write(&ctx, &path, &content, append).map(Value::String)
    })
    .await
}

/// What a write would do: the real path, whether it creates, replaces or appends, the size,
/// and the content's first lines. Changes nothing.
pub(crate) fn preview(args: &Value, ctx: &ToolContext) -> Option<Preview> {
    let a = Args::new(NAME, args).ok()?;
    let path = PATH.str(&a).ok()?;
    let content = CONTENT.str(&a).ok()?;
    let append = APPEND.bool(&a).ok()?;
    let ws = &ctx.workspace;
    let p = ws.locate(path).ok()?;
    let real = ws.show_real(&p);
    let before = match ws.parent_of(&p, false) {
        Ok((dir, name)) => match existing_size(&dir, &name, &real) {
            Ok(before) => before,
            Err(e) => {
                return Some(Preview::new(format!(
                    "Write to {real}: this will fail: {e}"
                )))
            }
        },
        Err(_) => None,
    };
    let size = text::bytes(content.len() as u64);
    let summary = match (append, before) {
        (true, None) => format!("Append {size} to {real}, a new file"),
        (true, Some(old)) => format!(
            "Append {size} to {real} (now {}, it becomes {})",
            text::bytes(old),
            text::bytes(old + content.len() as u64)
        ),
        (false, None) => format!("Write {size} to {real}, a new file"),
        (false, Some(old)) => {
            format!(
                "Write {size} to {real}, replacing all of its {}",
                text::bytes(old)
            )
        }
    };
    let preview = Preview::new(summary);
    Some(if content.is_empty() {
        preview.text("(no content: the file will be empty)")
    } else {
        preview.text(content)
    })
}

fn write(ctx: &ToolContext, path: &str, content: &str, append: bool) -> Result<String> {
    let ws = &ctx.workspace;
    let p = ws.locate(path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&p);
    let real = ws.show_real(&p);
    // The folder is created and held by descriptor; the name is then used only inside it.
    let (dir, name) = ws.parent_of(&p, true).map_err(|e| match e {
        PathError::NotAFileName(_) | PathError::NotADirectory { file: Some(_), .. } => {
            anyhow!("{NAME}: {e}")
        }
        other => anyhow!("{NAME}: cannot create the folder for {shown}: {other}"),
    })?;
    let before = existing_size(&dir, &name, &shown)?;
    let written = text::bytes(content.len() as u64);
    if append {
        let mut file = dir
            .open_append(&name)
            .map_err(|e| anyhow!("{NAME}: cannot open {shown} for appending: {e}"))?;
        file.write_all(content.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| anyhow!("{NAME}: cannot append to {shown}: {e}"))?;
        return Ok(match before {
            None => format!("Appended {written} to {real}, a new file"),
            Some(old) => format!(
                "Appended {written} to {real} (now {})",
                text::bytes(old + content.len() as u64)
            ),
        });
    }
    dir.write_atomic(&name, content.as_bytes())
        .map_err(|e| anyhow!("{NAME}: cannot write {shown}: {e}; the file was not changed"))?;
    Ok(match before {
        None => format!("Wrote {written} to {real}, a new file"),
        Some(old) => format!(
            "Wrote {written} to {real}, replacing the previous {}",
            text::bytes(old)
        ),
    })
}

/// The size of the regular file `name` in `dir`, `None` if nothing is there; anything but a
/// regular file is refused with a message for the model.
pub(crate) fn existing_size(dir: &Dir, name: &OsStr, shown: &str) -> Result<Option<u64>> {
    match dir.symlink_metadata(name) {
        Ok(st) => match EntryKind::of_mode(st.st_mode) {
            EntryKind::File => Ok(Some(st.st_size as u64)),
            EntryKind::Dir => Err(anyhow!(
                "{NAME}: {shown} is a directory; give the path of a file"
            )),
            EntryKind::Symlink => Err(anyhow!(
                "{NAME}: {shown} is a symbolic link; toolbox does not write through links \
                 (write to the file it points to)"
            )),
            EntryKind::Other => Err(anyhow!("{NAME}: {shown} is not a regular file")),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow!("{NAME}: cannot write {shown}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;
    use std::fs::{self, File};
    use std::path::Path;
    use toolbox_host::Workspace;

    /// The atomic replace of a file in a real folder, as write and edit use it.
    fn atomic_replace_with(
        target: &Path,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let ws = Workspace::new(target.parent().unwrap()).unwrap();
        let dir = ws.open_dir(&ws.locate(".").unwrap()).unwrap();
        dir.replace_with(target.file_name().unwrap(), fill)
    }

    fn atomic_replace(target: &Path, data: &[u8]) -> io::Result<()> {
        atomic_replace_with(target, |f| f.write_all(data))
    }

    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[tokio::test]
    async fn creates_overwrites_and_appends() {
        let (_d, ctx) = setup(NAME);
        let out = call(
            &ctx,
            NAME,
            json!({"path": "notes/a.md", "content": "# Hi\n"}),
        )
        .await
        .unwrap();
        assert_eq!(out, "Wrote 5 bytes to notes/a.md, a new file");
        assert_eq!(get(&ctx, "notes/a.md"), "# Hi\n");
        let out = call(&ctx, NAME, json!({"file_path": "notes/a.md", "text": "x"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            "Wrote 1 byte to notes/a.md, replacing the previous 5 bytes"
        );
        assert_eq!(get(&ctx, "notes/a.md"), "x");
        let out = call(
            &ctx,
            NAME,
            json!({"path": "notes/a.md", "content": "yz", "append": true}),
        )
        .await
        .unwrap();
        assert_eq!(out, "Appended 2 bytes to notes/a.md (now 3 bytes)");
        assert_eq!(get(&ctx, "notes/a.md"), "xyz");
        let out = call(
            &ctx,
            NAME,
            json!({"path": "log.txt", "content": "1\n", "append": "true"}),
        )
        .await
        .unwrap();
        assert_eq!(out, "Appended 2 bytes to log.txt, a new file");
        // Nothing but the files themselves is left in the folder.
        assert_eq!(names_in(&ctx.workspace.root().join("notes")), ["a.md"]);
    }

    #[tokio::test]
    async fn session_output_is_routed() {
        let (_d, ctx) = setup(NAME);
        let out = call(&ctx, NAME, json!({"path": "output/x.txt", "content": "ok"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            "Wrote 2 bytes to .toolbox/sessions/s1/output/x.txt (output/x.txt), a new file"
        );
        assert_eq!(get(&ctx, ".toolbox/sessions/s1/output/x.txt"), "ok");
        assert!(!ctx.workspace.root().join("output").exists());
    }

    #[tokio::test]
    async fn refusals() {
        let (_d, ctx) = setup(NAME);
        std::fs::create_dir(ctx.workspace.root().join("dir")).unwrap();
        let e = call(&ctx, NAME, json!({"path": "dir", "content": "x"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__write: dir is a directory; give the path of a file"
        );
        let big = "x".repeat(MAX_WRITE_BYTES + 1);
        let e = call(&ctx, NAME, json!({"path": "big.txt", "content": big}))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("file_manager__write: content is 1048577 bytes; the limit is 1 MiB"),
            "{e}"
        );
        assert!(e.contains("run_python_code"), "{e}");
        assert!(!ctx.workspace.root().join("big.txt").exists());
        let e = call(&ctx, NAME, json!({"path": "a.txt"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__write requires content");
        let e = call(&ctx, NAME, json!({"path": "a.txt", "content": 5}))
            .await
            .unwrap_err();
        assert!(
            e.contains("`content` must be a string, got a number 5"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_parent_that_is_a_file_fails_cleanly() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "afile", "original");
        let e = call(&ctx, NAME, json!({"path": "afile/x.txt", "content": "new"}))
            .await
            .unwrap_err();
        // The jail notices first: the path cannot exist below a file.
        assert_eq!(
            e,
            "file_manager__write: path \"afile/x.txt\" goes through \"afile\", which is a file, not a directory"
        );
        assert_eq!(get(&ctx, "afile"), "original");
        assert_eq!(names_in(ctx.workspace.root()), ["afile"]);
    }

    #[test]
    fn a_failed_replace_leaves_the_original_and_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("data.json");
        fs::write(&target, "{\"v\": 1}").unwrap();
        let err = atomic_replace_with(&target, |f| {
            f.write_all(b"{\"v\": 2, \"half")?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read_to_string(&target).unwrap(), "{\"v\": 1}");
        assert_eq!(names_in(dir.path()), ["data.json"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_read_only_folder_leaves_the_original_intact() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("locked");
        fs::create_dir(&sub).unwrap();
        let target = sub.join("a.txt");
        fs::write(&target, "original").unwrap();
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o555)).unwrap();
        // Privileged users (root in a container) can write anyway; nothing to show then.
        let privileged = File::create(sub.join("probe")).is_ok();
        if !privileged {
            assert!(atomic_replace(&target, b"new").is_err());
            assert_eq!(fs::read_to_string(&target).unwrap(), "original");
            assert_eq!(names_in(&sub), ["a.txt"]);
        }
        fs::set_permissions(&sub, fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn permissions_are_kept_and_read_only_files_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, ctx) = setup(NAME);
        put(&ctx, "script.sh", "echo 1\n");
        let path = ctx.workspace.root().join("script.sh");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o750)).unwrap();
        call(
            &ctx,
            NAME,
            json!({"path": "script.sh", "content": "echo 2\n"}),
        )
        .await
        .unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        assert_eq!(get(&ctx, "script.sh"), "echo 2\n");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
        let e = call(
            &ctx,
            NAME,
            json!({"path": "script.sh", "content": "echo 3\n"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            "file_manager__write: cannot write script.sh: the file is read-only; the file was not changed"
        );
        assert_eq!(get(&ctx, "script.sh"), "echo 2\n");
        assert_eq!(names_in(ctx.workspace.root()), ["script.sh"]);
    }
}
