//! Unit tests of the workspace jail: escapes, links, session routing, toolbox's own folder.

use std::ffi::OsStr;

use super::*;

fn ws() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    (dir, ws)
}

fn read(ws: &Workspace, path: &str) -> Result<String, PathError> {
    let p = ws.locate(path)?;
    let mut f = ws.open_read(&p)?;
    let mut s = String::new();
    io::Read::read_to_string(&mut f, &mut s).unwrap();
    Ok(s)
}

#[test]
fn plain_and_nested_paths_resolve_inside() {
    let (_d, ws) = ws();
    std::fs::create_dir(ws.root().join("a")).unwrap();
    assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
    assert_eq!(ws.resolve("./a/../c").unwrap(), ws.root().join("c"));
    assert_eq!(ws.resolve(".").unwrap(), ws.root());
    assert_eq!(ws.show(&ws.locate("./a/../c").unwrap()), "c");
}

#[test]
fn escapes_are_refused() {
    let (_d, ws) = ws();
    assert!(matches!(ws.resolve("../x"), Err(PathError::Outside(_))));
    assert!(matches!(
        ws.resolve("a/../../x"),
        Err(PathError::Outside(_))
    ));
    assert!(matches!(
        ws.resolve("/etc/passwd"),
        Err(PathError::Outside(_))
    ));
    assert!(matches!(ws.resolve("a\0b"), Err(PathError::Nul)));
    assert!(matches!(ws.resolve(""), Err(PathError::Empty)));
}

#[test]
fn paths_are_resolved_on_disk_not_lexically() {
    let (_d, ws) = ws();
    std::fs::write(ws.root().join("a.txt"), "A").unwrap();
    // A file is not a folder, even with a trailing '.' or '/'.
    read(&ws, "a.txt").unwrap();
    let e = read(&ws, "a.txt/.").unwrap_err();
    assert!(matches!(e, PathError::NotADirectory { .. }), "{e}");
    assert!(read(&ws, "a.txt/").is_err());
    // A missing folder cannot be climbed out of with '..'.
    let e = read(&ws, "typo/../a.txt").unwrap_err();
    assert!(e.is_not_found(), "{e}");
    // An absolute path must spell the root exactly.
    let root = ws.root().to_str().unwrap().to_string();
    let parent = ws.root().parent().unwrap().to_str().unwrap().to_string();
    let name = ws.root().file_name().unwrap().to_str().unwrap().to_string();
    let typo = format!("{parent}/{name}-typo/../{name}/a.txt");
    assert!(matches!(read(&ws, &typo), Err(PathError::Outside(_))));
    assert_eq!(read(&ws, &format!("{root}/a.txt")).unwrap(), "A");
}

#[test]
fn absolute_inside_is_fine() {
    let (_d, ws) = ws();
    let abs = ws.root().join("x/y");
    assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap(), abs);
}

#[cfg(unix)]
#[test]
fn symlinks_out_are_refused_and_in_are_followed() {
    let (_d, ws) = ws();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root().join("out")).unwrap();
    std::fs::create_dir(ws.root().join("real")).unwrap();
    std::fs::write(ws.root().join("real/f"), "in").unwrap();
    std::os::unix::fs::symlink("real", ws.root().join("in")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
    let e = read(&ws, "out/secret").unwrap_err();
    assert!(matches!(e, PathError::LeadsOutside(_)), "{e}");
    let e = ws.resolve("out/secret").unwrap_err();
    assert!(matches!(e, PathError::LeadsOutside(_)), "{e}");
    assert_eq!(read(&ws, "in/f").unwrap(), "in");
    assert_eq!(ws.resolve("in/f").unwrap(), ws.root().join("real/f"));
    assert!(read(&ws, "dangling").is_err());
}

#[test]
fn writes_never_follow_links() {
    let (_d, ws) = ws();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("t");
    std::fs::write(&target, "keep").unwrap();
    std::os::unix::fs::symlink(&target, ws.root().join("link")).unwrap();
    let e = ws
        .write_atomic(&ws.locate("link").unwrap(), b"new", false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(ws.open_append(&ws.locate("link").unwrap(), false).is_err());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    // Hard links: the atomic replace leaves the other name alone; append refuses.
    std::fs::write(outside.path().join("h"), "outside").unwrap();
    std::fs::hard_link(outside.path().join("h"), ws.root().join("hl")).unwrap();
    let e = ws
        .open_append(&ws.locate("hl").unwrap(), false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hard links"), "{e}");
    ws.write_atomic(&ws.locate("hl").unwrap(), b"mine", false)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.path().join("h")).unwrap(),
        "outside"
    );
    // Folders are created beneath the root only.
    std::os::unix::fs::symlink(outside.path(), ws.root().join("outdir")).unwrap();
    assert!(ws
        .write_atomic(&ws.locate("outdir/new/x").unwrap(), b"x", true)
        .is_err());
    assert!(!outside.path().join("new").exists());
    ws.write_atomic(&ws.locate("deep/er/x").unwrap(), b"x", true)
        .unwrap();
    assert_eq!(std::fs::read(ws.root().join("deep/er/x")).unwrap(), b"x");
}

#[test]
fn toolbox_folders_refuse_planted_links() {
    let (_d, ws) = ws();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(ws.root().join(TOOLBOX_DIR)).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root().join(".toolbox/tool_outputs")).unwrap();
    let e = ws
        .toolbox_subdir(&[OsStr::new("tool_outputs")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
    let s = ws.with_session("s1").unwrap();
    std::fs::create_dir_all(ws.root().join(".toolbox/sessions")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root().join(".toolbox/sessions/s1")).unwrap();
    assert!(s.scratchpad().is_err());
    assert!(s.resolve("output/x").is_err());
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
}

#[test]
fn a_session_folder_held_open_is_walked_again_once_deleted() {
    let (_d, ws) = ws();
    let outside = tempfile::tempdir().unwrap();
    let s = ws.with_session("s1").unwrap();
    let base = ws.root().join(".toolbox/sessions/s1");
    assert_eq!(s.scratchpad().unwrap(), base.join("scratchpad"));
    // The folder alone deleted: made again, not the deleted one handed out.
    std::fs::remove_dir(base.join("scratchpad")).unwrap();
    let fd = s.hold_folder(SessionFolder::Scratchpad).unwrap();
    assert!(rustix::fs::fstat(&fd).unwrap().st_nlink > 0);
    assert!(base.join("scratchpad").is_dir());
    // The whole session deleted behind toolbox's back: made again where it belongs.
    std::fs::remove_dir_all(&base).unwrap();
    s.scratchpad().unwrap();
    assert!(base.join("scratchpad").is_dir());
    std::fs::write(base.join("scratchpad/x"), "x").unwrap();
    // Another Workspace value of the same root (a later call) sees the same folder.
    let again = ws.with_session("s1").unwrap();
    assert_eq!(
        std::fs::read_to_string(again.resolve("scratchpad/x").unwrap()).unwrap(),
        "x"
    );
    // Deleted and replaced by a link to elsewhere: refused, nothing made through it.
    std::fs::remove_dir_all(&base).unwrap();
    std::os::unix::fs::symlink(outside.path(), &base).unwrap();
    let e = s.scratchpad().unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(s.output_dir().is_err());
    assert!(s.resolve("output/x").is_err());
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    // A session folder's own folder planted as a link is refused too.
    std::fs::remove_file(&base).unwrap();
    s.scratchpad().unwrap();
    std::os::unix::fs::symlink(outside.path(), base.join("output")).unwrap();
    let e = s.output_dir().unwrap_err().to_string();
    assert!(
        e.contains("symbolic link") && e.contains("sessions/s1/output"),
        "{e}"
    );
    assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
}

#[test]
fn session_routing() {
    let (_d, ws) = ws();
    let s = ws.with_session("s1").unwrap();
    let base = ws.root().join(".toolbox/sessions/s1");
    assert_eq!(
        s.resolve("output/a.png").unwrap(),
        base.join("output/a.png")
    );
    assert_eq!(
        s.resolve("outputs/a.png").unwrap(),
        base.join("output/a.png")
    );
    assert_eq!(
        s.resolve("./scratch/t.py").unwrap(),
        base.join("scratchpad/t.py")
    );
    assert_eq!(s.resolve("scratchpad").unwrap(), base.join("scratchpad"));
    assert_eq!(s.resolve("inputs/d.csv").unwrap(), base.join("input/d.csv"));
    assert_eq!(
        s.resolve("outputs2/x").unwrap(),
        ws.root().join("outputs2/x")
    );
    // Without a session nothing is routed.
    assert_eq!(ws.resolve("output/a").unwrap(), ws.root().join("output/a"));
    // Session folders are shown by their short names.
    assert_eq!(s.display(&base.join("output/a.png")), "output/a.png");
    assert_eq!(s.display(&base.join("scratchpad")), "scratchpad");
    assert_eq!(s.display(&ws.root().join("src/x.rs")), "src/x.rs");
    assert_eq!(
        s.show(&s.locate("outputs/./a.png").unwrap()),
        "output/a.png"
    );
    assert_eq!(
        ws.display(&base.join("output/a.png")),
        ".toolbox/sessions/s1/output/a.png"
    );
    // Routing cannot be used to climb out.
    assert!(s.resolve("output/../../../../../x").is_err());
    assert!(s.resolve("output/../x").is_err());
}

#[test]
fn tools_never_write_in_toolbox_own_folder_but_the_sessions_folders() {
    let (_d, ws) = ws();
    let s1 = ws.with_session("s1").unwrap();
    let write = |w: &Workspace, path: &str| {
        let p = w.locate(path)?;
        w.write_atomic(&p, b"forged", true)
    };
    // Before `.toolbox` exists, a tool cannot create it, as a folder or as a file.
    for path in [".toolbox/sessions/s1/plan.json", ".toolbox", "./.toolbox/x"] {
        let e = write(&s1, path).unwrap_err();
        assert!(matches!(e, PathError::Protected(_)), "{path}: {e}");
    }
    assert!(!ws.root().join(".toolbox").exists() || ws.root().join(".toolbox").is_dir());
    // Once it exists (the session's folders made by toolbox), every spelling of a path
    // in it is refused: plain, with `..`, through a relative link to the folder, to a
    // folder inside it, and for another session's own folders.
    s1.resolve("output/x").unwrap();
    s1.resolve("scratchpad/x").unwrap();
    s1.resolve("input/x").unwrap();
    ws.with_session("s2").unwrap().resolve("output/x").unwrap();
    let root = ws.root().to_path_buf();
    std::os::unix::fs::symlink(".toolbox", root.join("tb")).unwrap();
    std::os::unix::fs::symlink(".toolbox/sessions/s1", root.join("sess")).unwrap();
    std::os::unix::fs::symlink(".toolbox/sessions/s1/output", root.join("out1")).unwrap();
    std::fs::create_dir(root.join("src")).unwrap();
    for path in [
        ".toolbox/sessions/s1/plan.json",
        ".toolbox/x",
        "src/../.toolbox/sessions/s1/plan.json",
        "tb/sessions/s1/plan.json",
        "tb/new/deep/file",
        "sess/plan.json",
        "sess/output/../plan.json",
        ".toolbox/sessions/s2/output/x.txt",
        ".toolbox/trajectories/s1/tool_calls.jsonl",
        ".toolbox",
        &format!("{}/.toolbox/sessions/s1/plan.json", root.display()),
    ] {
        let e = write(&s1, path).unwrap_err();
        assert!(matches!(e, PathError::Protected(_)), "{path}: {e}");
        assert!(e.to_string().contains("output/"), "{e}");
        let p = s1.locate(path).unwrap();
        assert!(
            matches!(s1.open_append(&p, true), Err(PathError::Protected(_))),
            "{path}: append"
        );
    }
    assert!(!root.join(".toolbox/sessions/s1/plan.json").exists());
    assert!(!root.join(".toolbox/new").exists());
    // This session's own folders stay open, however they are spelled.
    for path in [
        "output/a.txt",
        ".toolbox/sessions/s1/output/b.txt",
        ".toolbox/sessions/s1/scratchpad/deep/c.txt",
        "sess/input/d.txt",
        "out1/e.txt",
        "src/f.txt",
    ] {
        write(&s1, path).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    // Without a session, nothing in `.toolbox/` is a tool's to write.
    assert!(matches!(
        write(&ws, ".toolbox/sessions/s1/output/g.txt"),
        Err(PathError::Protected(_))
    ));
    // Reading is not writing: spool files and plans stay readable.
    std::fs::write(root.join(".toolbox/sessions/s1/plan.json"), "{}").unwrap();
    assert_eq!(read(&s1, ".toolbox/sessions/s1/plan.json").unwrap(), "{}");
}

#[test]
fn session_ids_are_checked() {
    let (_d, ws) = ws();
    for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(129)] {
        assert!(ws.with_session(bad).is_err(), "{bad:?}");
    }
    assert!(ws.with_session("default").is_ok());
    assert!(ws.with_session("chat-2026_11.29").is_ok());
}
