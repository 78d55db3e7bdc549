//! file_manager through the whole executor: the path jail, session routing and permissions.

use serde_json::{json, Value};
use toolbox_executor::{CallStatus, ErrorKind, PermissionMode, ToolRequest};

use toolbox as _;
use toolbox_tests::{assert_error, call, executor};

#[tokio::test]
async fn path_escapes_are_refused_by_every_tool() {
    let (dir, exec) = executor(PermissionMode::Full);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("link_out")).unwrap();
    let abs = outside.path().join("secret.txt").display().to_string();

    let cases: Vec<(&str, Value)> = vec![
        ("file_manager__read", json!({"path": "../secret.txt"})),
        ("file_manager__read", json!({"path": abs})),
        ("file_manager__read", json!({"path": "link_out/secret.txt"})),
        ("file_manager__read", json!({"path": "a\u{0}b"})),
        ("file_manager__list", json!({"path": "link_out"})),
        ("file_manager__list", json!({"path": ".."})),
        (
            "file_manager__write",
            json!({"path": "../evil.txt", "content": "x"}),
        ),
        (
            "file_manager__write",
            json!({"path": "link_out/evil.txt", "content": "x"}),
        ),
        (
            "file_manager__edit",
            json!({"path": "link_out/secret.txt", "old_string": "secret", "new_string": "owned"}),
        ),
        ("file_manager__glob", json!({"pattern": "*", "path": "../"})),
        (
            "file_manager__grep",
            json!({"pattern": "secret", "path": "link_out"}),
        ),
        (
            "file_manager__write",
            json!({"path": "output/../../../../../evil.txt", "content": "x"}),
        ),
    ];
    for (tool, args) in cases {
        let info = call(&exec, tool, args.clone()).await;
        let r = assert_error(&info, ErrorKind::Tool, &[]).to_lowercase();
        assert!(
            r.contains("outside the workspace") || r.contains("nul byte"),
            "{tool} {args}: unclear refusal: {}",
            info.result
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "secret"
    );
    assert!(!outside.path().join("evil.txt").exists());
    assert!(!dir.path().parent().unwrap().join("evil.txt").exists());
}

#[tokio::test]
async fn session_routing_applies_to_file_tools() {
    let (dir, exec) = executor(PermissionMode::Full);
    let info = call(
        &exec,
        "write_file",
        json!({"path": "outputs/report.md", "content": "# r"}),
    )
    .await;
    assert!(info.is_done(), "{}", info.result);
    let routed = dir.path().join(".toolbox/sessions/s1/output/report.md");
    assert_eq!(std::fs::read_to_string(routed).unwrap(), "# r");
    let info = call(&exec, "read_file", json!({"path": "output/report.md"})).await;
    assert!(info.result.contains("# r"), "{}", info.result);
    // Another session does not see it.
    let other = exec
        .run(ToolRequest::new("t", "read_file", json!({"path": "output/report.md"})).session("s2"))
        .await;
    assert_error(&other, ErrorKind::Tool, &[]);
}

/// docs/server.md: a workspace folder named like a logical one (`input/`) is reached by its
/// absolute path, which is never routed; the logical name is the session's folder.
#[tokio::test]
async fn a_workspace_folder_named_input_is_reached_by_its_absolute_path() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::create_dir_all(dir.path().join("input")).unwrap();
    std::fs::write(dir.path().join("input/own.txt"), "the workspace's own\n").unwrap();
    let session = dir.path().join(".toolbox/sessions/s1/input");
    std::fs::create_dir_all(&session).unwrap();
    std::fs::write(session.join("own.txt"), "the session's\n").unwrap();
    let absolute = dir.path().join("input/own.txt");
    let info = call(
        &exec,
        "file_manager__read",
        json!({"path": absolute.to_str().unwrap()}),
    )
    .await;
    assert!(
        info.result.contains("the workspace's own"),
        "{}",
        info.result
    );
    let info = call(
        &exec,
        "file_manager__read",
        json!({"path": "input/own.txt"}),
    )
    .await;
    assert!(info.result.contains("the session's"), "{}", info.result);
}

#[tokio::test]
async fn read_only_refuses_writes_and_edits() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    std::fs::write(dir.path().join("a.txt"), "keep").unwrap();
    for (tool, args) in [
        (
            "file_manager__write",
            json!({"path": "a.txt", "content": "changed"}),
        ),
        (
            "edit_file",
            json!({"path": "a.txt", "old_string": "keep", "new_string": "changed"}),
        ),
    ] {
        assert_error(&call(&exec, tool, args).await, ErrorKind::Denied, &[]);
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "keep"
    );
    assert!(call(&exec, "read_file", json!({"path": "a.txt"}))
        .await
        .is_done());
}

#[tokio::test]
async fn edit_then_grep_then_glob() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(
        dir.path().join("src/main.rs"),
        "fn main() {\n    println!(\"hi\");\n}\n",
    )
    .unwrap();
    let info = call(
        &exec,
        "edit_file",
        json!({"path": "src/main.rs", "old_string": "\"hi\"", "new_string": "\"hello\""}),
    )
    .await;
    assert!(info.is_done(), "{}", info.result);
    let info = call(&exec, "grep_search", json!({"pattern": "hel+o"})).await;
    assert!(info.result.contains("src/main.rs:2:"), "{}", info.result);
    let info = call(&exec, "glob_search", json!({"pattern": "**/*.rs"})).await;
    assert!(info.result.contains("src/main.rs"), "{}", info.result);
}

#[tokio::test]
async fn a_huge_glob_is_a_clear_error_not_a_panic() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    std::fs::write(dir.path().join("a.txt"), "needle\n").unwrap();
    let huge = "a".repeat(500_000);
    let cases = [
        (
            "file_manager__glob",
            json!({"pattern": huge}),
            "file_manager__glob: pattern is 500000 characters; the limit is 4096",
        ),
        (
            "file_manager__grep",
            json!({"pattern": "needle", "glob": huge}),
            "file_manager__grep: glob is 500000 characters; the limit is 4096",
        ),
        (
            "file_manager__grep",
            json!({"pattern": "needle", "glob": format!("dir/{huge}")}),
            "file_manager__grep: glob is 500004 characters; the limit is 4096",
        ),
    ];
    for (tool, args, message) in cases {
        let info = call(&exec, tool, args).await;
        assert_eq!(assert_error(&info, ErrorKind::Tool, &[]), message);
    }
    // At the limit the glob is accepted, and the executor keeps serving.
    let info = call(
        &exec,
        "file_manager__glob",
        json!({"pattern": "?".repeat(4096)}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let info = call(&exec, "file_manager__glob", json!({"pattern": "*.txt"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.contains("a.txt"), "{}", info.result);
    let info = call(
        &exec,
        "file_manager__grep",
        json!({"pattern": "needle", "glob": "*.txt"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.contains("a.txt"), "{}", info.result);
}

/// grep searches exactly the files ripgrep searches (with `--no-require-git`, since toolbox
/// honours .gitignore outside git repositories), in path order, over a tree with nested
/// ignore files, negations, hidden folders and binary files: the parallel walk changes speed,
/// not semantics. Needs `rg` (scripts/test.sh installs ripgrep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_searches_the_files_ripgrep_searches() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let root = dir.path();
    let files: &[(&str, &[u8])] = &[
        (".gitignore", b"*.log\nbuild/\n!keep.log\n"),
        ("src/.ignore", b"generated.rs\n"),
        ("src/lib.rs", b"fn needle() {}\n"),
        ("src/generated.rs", b"needle\n"),
        ("src/deep/a/b/c.rs", b"// needle\n"),
        ("src/deep/.hidden.rs", b"needle\n"),
        (".secret/x.rs", b"needle\n"),
        ("build/out.rs", b"needle\n"),
        ("app.log", b"needle\n"),
        ("keep.log", b"needle\n"),
        ("data.bin", b"needle\0binary\n"),
        ("docs/guide.md", b"a needle in docs\nand another needle\n"),
        ("docs/nested/.gitignore", b"*.md\n!README.md\n"),
        ("docs/nested/x.md", b"needle\n"),
        ("docs/nested/README.md", b"needle\n"),
        ("z/last.txt", b"needle\n"),
    ];
    for (path, content) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    for i in 0..200 {
        std::fs::write(root.join(format!("z/many-{i:03}.txt")), "needle\n").unwrap();
    }
    let rg = std::process::Command::new("rg")
        .args(["-l", "--no-require-git", "--no-config", "needle", "."])
        .current_dir(root)
        .output()
        .expect("rg (ripgrep) must be installed: scripts/test.sh installs it");
    let mut want: Vec<String> = String::from_utf8(rg.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect();
    want.sort();
    assert!(want.len() > 200, "{want:?}");
    let info = call(
        &exec,
        "file_manager__grep",
        json!({"pattern": "needle", "max_results": 5000}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let paths: Vec<String> = info
        .result
        .lines()
        .map(|l| l.split(':').next().unwrap().to_string())
        .collect();
    let mut got = paths.clone();
    got.dedup();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted, "results are in path order");
    assert_eq!(got, want, "toolbox and rg searched different files");
    // Capped: the first lines in path order, the same on every run.
    for _ in 0..3 {
        let info = call(
            &exec,
            "file_manager__grep",
            json!({"pattern": "needle", "max_results": 7}),
        )
        .await;
        let lines: Vec<&str> = info.result.lines().collect();
        assert_eq!(lines.len(), 8, "{}", info.result);
        let first: Vec<String> = paths.iter().take(7).cloned().collect();
        let shown: Vec<String> = lines[..7]
            .iter()
            .map(|l| l.split(':').next().unwrap().to_string())
            .collect();
        assert_eq!(shown, first);
        assert!(
            lines[7].starts_with("[results capped at 7"),
            "{}",
            info.result
        );
    }
}
