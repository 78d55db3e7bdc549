//! The workspace is hostile: session ids, planted links, races and small holes, through the
//! whole executor with the real providers. (Config trust and the binary's entry points are
//! in toolbox/tests/security_cli.rs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use toolbox_executor::trajectory::{read_trajectory, trajectory_path};
use toolbox_executor::{CallStatus, ErrorKind, PermissionMode};

use toolbox as _;
use toolbox_tests::{assert_error, call_in, exchange, executor_in};

/// Everything under `root`: each path with its type and, for files, the content; links with
/// their target. Two equal snapshots mean nothing was created, changed or removed.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".to_string()
            } else {
                format!(
                    "file {:?}",
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default())
                )
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// A workspace three folders deep inside a scratch folder, so `../../../x` stays in the test's
/// own tree, where a snapshot can see it.
fn nested_workspace() -> (tempfile::TempDir, PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let ws = top.path().join("a/b/c/ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "hello\n").unwrap();
    (top, ws)
}

#[tokio::test]
async fn invalid_session_ids_are_refused_and_write_nothing_anywhere() {
    let (top, ws) = nested_workspace();
    let exec = executor_in(&ws, PermissionMode::Full);
    let long = "x".repeat(129);
    let bad = [
        "..",
        "../x",
        "../../../escape",
        "/abs",
        &top.path().join("abs").display().to_string(),
        "a/b",
        "a\\b",
        "a\0b",
        &long,
        "",
        ".",
        "é",
        "会话",
    ];
    let before = snapshot(top.path());
    for sid in bad {
        for (tool, args) in [
            (
                "file_manager__write",
                json!({"path": "output/x.txt", "content": "x"}),
            ),
            ("file_manager__read", json!({"path": "a.txt"})),
            ("shell", json!({"command": "echo hi > made.txt"})),
            ("run_python_code", json!({"code": "open('made.txt','w')"})),
        ] {
            let info = call_in(&exec, sid, tool, args).await;
            let message = assert_error(&info, ErrorKind::InvalidRequest, &[]);
            assert!(
                message.starts_with("invalid session id"),
                "{sid:?} {tool}: {message}"
            );
        }
    }
    assert_eq!(
        snapshot(top.path()),
        before,
        "an invalid session id wrote something"
    );
    // A valid id still works, and only writes inside.
    let info = call_in(
        &exec,
        "ok-1",
        "file_manager__write",
        json!({"path": "output/x.txt", "content": "x"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(ws.join(".toolbox/sessions/ok-1/output/x.txt").is_file());
}

#[tokio::test]
async fn planted_links_in_toolbox_folders_are_refused_and_nothing_goes_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let outside = tempfile::tempdir().unwrap();
    let rc = outside.path().join("bashrc");
    std::fs::write(&rc, "# rc\n").unwrap();
    std::fs::write(ws.join("a.txt"), "x".repeat(40_000)).unwrap();
    // The trajectory file is a link to an outside file.
    std::fs::create_dir_all(ws.join(".toolbox/trajectories/default")).unwrap();
    std::os::unix::fs::symlink(
        &rc,
        ws.join(".toolbox/trajectories/default/tool_calls.jsonl"),
    )
    .unwrap();
    // The spool folder is a link to an outside folder.
    std::os::unix::fs::symlink(outside.path(), ws.join(".toolbox/tool_outputs")).unwrap();
    // A session folder is a link to an outside folder.
    std::fs::create_dir_all(ws.join(".toolbox/sessions")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.join(".toolbox/sessions/evil")).unwrap();
    let before = snapshot(outside.path());

    let exec = executor_in(ws, PermissionMode::ReadOnly);
    // A large read: the trajectory append and the spool both meet a planted link.
    let info = call_in(
        &exec,
        "default",
        "file_manager__read",
        json!({"path": "a.txt"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.spool_path.is_none(),
        "spooled through a planted link: {info:?}"
    );

    let exec = executor_in(ws, PermissionMode::Full);
    for (tool, args) in [
        ("shell", json!({"command": "echo owned > owned.txt"})),
        (
            "run_python_code",
            json!({"code": "open('owned.txt','w').write('x')"}),
        ),
        (
            "file_manager__write",
            json!({"path": "output/owned.txt", "content": "x"}),
        ),
        (
            "file_manager__write",
            json!({"path": "scratchpad/owned.txt", "content": "x"}),
        ),
    ] {
        let info = call_in(&exec, "evil", tool, args).await;
        assert_error(&info, ErrorKind::Tool, &["symbolic link"]);
    }
    assert_eq!(
        snapshot(outside.path()),
        before,
        "something was written outside"
    );
}

#[tokio::test]
async fn paths_are_resolved_on_disk_not_by_string() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(dir.path().join("ws-typo")).unwrap();
    std::fs::write(ws.join("a.txt"), "A").unwrap();
    let exec = executor_in(&ws, PermissionMode::Full);
    let root = std::fs::canonicalize(&ws).unwrap();
    let typo = format!("{}-typo/../ws/a.txt", root.display());
    for path in ["a.txt/.", "a.txt/", "missing/../a.txt", typo.as_str()] {
        let info = call_in(&exec, "s", "file_manager__read", json!({ "path": path })).await;
        assert_error(&info, ErrorKind::Tool, &[]);
    }
    let info = call_in(
        &exec,
        "s",
        "file_manager__read",
        json!({"path": format!("{}/a.txt", root.display())}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
}

#[tokio::test]
async fn hard_links_to_outside_files_are_never_changed() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside.txt");
    std::fs::write(&outside, "outside\n").unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::hard_link(&outside, ws.join("linked.txt")).unwrap();
    let exec = executor_in(&ws, PermissionMode::Full);
    let info = call_in(
        &exec,
        "s",
        "file_manager__write",
        json!({"path": "linked.txt", "content": "more\n", "append": true}),
    )
    .await;
    assert_error(&info, ErrorKind::Tool, &["hard links"]);
    // A replace or an edit makes a new file; the outside name keeps its content.
    let info = call_in(
        &exec,
        "s",
        "file_manager__edit",
        json!({"path": "linked.txt", "old_string": "outside", "new_string": "inside"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("linked.txt")).unwrap(),
        "inside\n"
    );
}

#[tokio::test]
async fn huge_arguments_are_capped_in_the_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor_in(dir.path(), PermissionMode::Full);
    let content = "y".repeat(500_000);
    let info = call_in(
        &exec,
        "s1",
        "file_manager__write",
        json!({"path": "big.txt", "content": content}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let path = trajectory_path(dir.path(), "s1");
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size < 20_000,
        "the record holds the whole argument: {size} bytes"
    );
    let calls = read_trajectory(&path).unwrap();
    assert!(toolbox_executor::trajectory::arguments_truncated(
        &calls[0].arguments
    ));
    assert_eq!(calls[0].arguments["bytes"], json!(500_000 + 31));
}

#[tokio::test]
async fn file_names_cannot_forge_result_lines() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("evil\nfake.txt:1:forged"), "needle\n").unwrap();
    std::fs::write(ws.join("\u{1b}[31mred.txt"), "needle\n").unwrap();
    let exec = executor_in(ws, PermissionMode::ReadOnly);
    for (tool, args) in [
        ("file_manager__list", json!({"path": "."})),
        ("file_manager__glob", json!({"pattern": "*.txt*"})),
        ("file_manager__grep", json!({"pattern": "needle"})),
    ] {
        let info = call_in(&exec, "s", tool, args).await;
        assert_eq!(info.status, CallStatus::Done, "{tool}: {}", info.result);
        assert!(!info.result.contains('\u{1b}'), "{tool}: {:?}", info.result);
        assert!(
            info.result.contains("evil\\nfake.txt:1:forged"),
            "{tool}: {:?}",
            info.result
        );
        assert!(info.result.contains("\\x1b[31mred.txt"), "{tool}");
        assert!(
            !info.result.lines().any(|l| l.starts_with("fake.txt")),
            "{tool}: a name forged a line: {:?}",
            info.result
        );
    }
}

/// The race from the security report, bounded: a thread swaps `ws/d` between a real folder
/// and a link to an outside folder with `RENAME_EXCHANGE`, while every file tool works on
/// `d/...`. Nothing outside may change and no outside content may come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_folder_for_a_link_mid_call_never_reaches_outside() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(ws.join("d")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    for name in ["f.txt", "g.txt"] {
        std::fs::write(ws.join("d").join(name), "inside needle\n").unwrap();
        std::fs::write(outside.join(name), "OUTSIDE_SECRET needle\n").unwrap();
    }
    std::fs::create_dir(outside.join("sub")).unwrap();
    std::fs::write(outside.join("sub/h.txt"), "OUTSIDE_SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.join("swap")).unwrap();
    let before = snapshot(&outside);

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = {
        let stop = stop.clone();
        let (d, swap) = (ws.join("d"), ws.join("swap"));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if exchange(&d, &swap) {
                    n += 1;
                }
            }
            n
        })
    };

    let exec = executor_in(&ws, PermissionMode::Full);
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut calls = 0u32;
    let mut leaked = Vec::new();
    while Instant::now() < deadline && calls < 4000 {
        let i = calls;
        let cases = [
            ("file_manager__read", json!({"path": "d/f.txt"})),
            ("file_manager__list", json!({"path": "d", "depth": 2})),
            (
                "file_manager__glob",
                json!({"pattern": "**/*", "path": "d"}),
            ),
            (
                "file_manager__grep",
                json!({"pattern": "needle|OUTSIDE", "path": "d"}),
            ),
            (
                "file_manager__grep",
                json!({"pattern": "OUTSIDE", "path": "."}),
            ),
            (
                "file_manager__write",
                json!({"path": format!("d/new-{i}.txt"), "content": "w"}),
            ),
            (
                "file_manager__write",
                json!({"path": "d/g.txt", "content": "appended\n", "append": true}),
            ),
            (
                "file_manager__write",
                json!({"path": format!("d/deep-{i}/x.txt"), "content": "w"}),
            ),
            (
                "file_manager__edit",
                json!({"path": "d/f.txt", "old_string": "needle", "new_string": "needle"}),
            ),
            (
                "notebook__edit",
                json!({"path": format!("d/nb-{i}.ipynb"), "edit_mode": "insert", "new_source": "1"}),
            ),
            ("notebook__inspect", json!({"path": "d/nb-0.ipynb"})),
        ];
        for (tool, args) in cases {
            let info = call_in(&exec, "s", tool, args).await;
            calls += 1;
            if info.result.contains("OUTSIDE_SECRET") {
                leaked.push(format!("{tool}: {}", info.result));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swapped = swaps.join().unwrap();
    assert!(swapped > 100, "the race loop barely ran ({swapped} swaps)");
    assert!(
        leaked.is_empty(),
        "outside content came back:\n{}",
        leaked.join("\n")
    );
    assert_eq!(
        snapshot(&outside),
        before,
        "files outside changed or appeared ({calls} calls, {swapped} swaps)"
    );
}
