//! The lsp provider through the executor, against real language servers (python-lsp-server
//! from tests/requirements.txt, clangd from scripts/test.sh) on small generated projects, and
//! against a fake server (tests/fake_lsp.py) that never answers or dies mid-call.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use toolbox as _;
use toolbox_executor::{ErrorKind, PermissionMode, ToolExecutor};
use toolbox_tests::lsp::{basedpyright, clangd, fake_lsp, pylsp, python3, write_c_project};
use toolbox_tests::{executor_with, fails, ok};

fn lsp_table(servers: Value) -> Value {
    json!({"builtin_servers": false, "servers": servers, "index_wait_s": 20})
}

fn py_exec() -> (tempfile::TempDir, ToolExecutor) {
    let table = lsp_table(json!({"pylsp": {"command": [pylsp()], "extensions": ["py"]}}));
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write_py_project(dir.path());
    (dir, exec)
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap()
}

/// What the approval of `lsp__rename` `args` would show a person in `root`, under `[lsp]`
/// `table` (the provider's preview; it changes nothing).
async fn rename_preview(root: &Path, table: Value, args: Value) -> String {
    let provider = toolbox_host::registered_providers()
        .into_iter()
        .find(|p| p.name == "lsp")
        .map(|p| (p.build)())
        .unwrap();
    let ctx = toolbox_host::ToolContext {
        config: std::sync::Arc::new(json!({ "lsp": table })),
        ..toolbox_host::ToolContext::new(
            toolbox_host::Workspace::new(root).unwrap(),
            "s1",
            "c1",
            "lsp__rename",
        )
    };
    tokio::task::spawn_blocking(move || provider.preview("lsp__rename", &args, &ctx))
        .await
        .unwrap()
        .expect("a preview")
        .to_text(false)
}

fn write_py_project(root: &Path) {
    write(root, "pkg/__init__.py", "");
    write(
        root,
        "pkg/util.py",
        "def helper(x):\n    \"\"\"Adds one to x.\"\"\"\n    return x + 1\n\n\n\
         class Parser:\n    def parse(self, text):\n        return helper(len(text))\n\n\n\
         class Lexer:\n    def parse(self, text):\n        return text.split()\n",
    );
    write(
        root,
        "main.py",
        "from pkg.util import helper\n\n\ndef run():\n    # helper in a comment is no reference\n    \
         return helper(2)\n",
    );
    write(
        root,
        "other.py",
        "from pkg.util import helper\n\nHELPER = \"helper\"\nVALUE = helper(3)\n",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_definition_references_hover_and_symbols() {
    let (dir, exec) = py_exec();
    let root = dir.path();

    // Definition across files, from a use on a hinted line.
    let out = ok(
        &exec,
        "lsp__definition",
        json!({"path": "main.py", "symbol": "helper", "line": 6}),
    )
    .await;
    assert!(out.contains("pkg/util.py\n  1:5: def helper(x):"), "{out}");

    // Line + column addressing gives the same answer.
    let out2 = ok(
        &exec,
        "lsp__definition",
        json!({"path": "main.py", "line": 6, "column": 12}),
    )
    .await;
    assert!(
        out2.contains("pkg/util.py\n  1:5: def helper(x):"),
        "{out2}"
    );

    // References: real uses only, grouped by file; not the comment or the string.
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "pkg/util.py", "symbol": "helper"}),
    )
    .await;
    assert!(out.contains("in 3 files"), "{out}");
    assert!(
        out.contains("main.py\n  1:22: from pkg.util import helper\n  6:12:"),
        "{out}"
    );
    assert!(out.contains("other.py\n  1:22:"), "{out}");
    assert!(!out.contains("# helper in a comment"), "{out}");
    assert!(!out.contains("HELPER = "), "{out}");

    // The cap counts the rest.
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "pkg/util.py", "symbol": "helper", "max_results": 2}),
    )
    .await;
    assert!(out.contains("more location"), "{out}");

    let out = ok(
        &exec,
        "lsp__hover",
        json!({"path": "pkg/util.py", "symbol": "helper"}),
    )
    .await;
    assert!(out.contains("helper(x)"), "{out}");
    assert!(out.contains("Adds one to x."), "{out}");

    // The outline, nested.
    let out = ok(&exec, "lsp__symbols", json!({"path": "pkg/util.py"})).await;
    assert!(out.contains("function helper  lines 1-"), "{out}");
    assert!(out.contains("\nclass Parser  lines 6-"), "{out}");
    assert!(out.contains("\n  method parse  lines 7-"), "{out}");

    // An ambiguous name lists the candidates; a name path or a line picks one.
    let err = fails(
        &exec,
        "lsp__definition",
        json!({"path": "pkg/util.py", "symbol": "parse"}),
        "ambiguous",
    )
    .await;
    assert!(
        err.contains("Parser/parse") && err.contains("Lexer/parse"),
        "{err}"
    );
    let out = ok(
        &exec,
        "lsp__hover",
        json!({"path": "pkg/util.py", "symbol": "Lexer/parse"}),
    )
    .await;
    assert!(out.contains("pkg/util.py:12"), "{out}");
    let out = ok(
        &exec,
        "lsp__hover",
        json!({"path": "pkg/util.py", "symbol": "parse", "line": 8}),
    )
    .await;
    assert!(out.contains("pkg/util.py:7"), "{out}");
    assert_eq!(read(root, "main.py").lines().count(), 6);
}

/// basedpyright, the server the docs name first, cold: the first request to a server just
/// started, on files no call has opened, finds every reference, and the first rename preview
/// and the rename itself cover all three files.
#[tokio::test(flavor = "multi_thread")]
async fn basedpyright_cold_references_and_rename_across_files_never_opened() {
    let servers =
        json!({"basedpyright": {"command": [basedpyright(), "--stdio"], "extensions": ["py"]}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", lsp_table(servers.clone()))]);
    let root = dir.path();
    write_py_project(root);
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "pkg/util.py", "symbol": "helper", "line": 1}),
    )
    .await;
    assert!(out.contains("in 3 files"), "{out}");
    for file in ["main.py", "other.py", "pkg/util.py"] {
        assert!(out.contains(file), "{file}: {out}");
    }
    assert!(!out.contains("had stopped"), "{out}");

    // A second workspace, its server cold again: the preview, then the rename.
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", lsp_table(servers.clone()))]);
    let root = dir.path();
    write_py_project(root);
    let preview = rename_preview(
        root,
        lsp_table(servers),
        json!({"path": "pkg/util.py", "symbol": "helper", "new_name": "add_one"}),
    )
    .await;
    assert!(preview.contains("in 3 files"), "{preview}");
    assert!(preview.contains("+VALUE = add_one(3)"), "{preview}");
    let out = ok(
        &exec,
        "lsp__rename",
        json!({"path": "pkg/util.py", "symbol": "helper", "new_name": "add_one"}),
    )
    .await;
    assert!(out.contains("3 files"), "{out}");
    assert!(read(root, "other.py").contains("VALUE = add_one(3)"));
    assert!(read(root, "main.py").contains("return add_one(2)"));
    assert!(read(root, "main.py").contains("# helper in a comment"));
}

/// Issue 44, point 3: the server is started by the call and asked at once, on the largest
/// project of these tests (121 modules, none ever opened): the answer is complete, or says
/// that it may not be.
#[tokio::test(flavor = "multi_thread")]
async fn basedpyright_asked_at_once_on_a_large_project_is_complete_or_says_so() {
    let servers =
        json!({"basedpyright": {"command": [basedpyright(), "--stdio"], "extensions": ["py"]}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", lsp_table(servers))]);
    let root = dir.path();
    write(root, "pkg/__init__.py", "");
    write(root, "pkg/core.py", "def target(n):\n    return n + 1\n");
    for i in 0..120 {
        write(
            root,
            &format!("pkg/m{i:03}.py"),
            &format!("from pkg.core import target\n\n\ndef f{i}():\n    return target({i})\n"),
        );
    }
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "pkg/core.py", "symbol": "target", "line": 1, "max_results": 1000}),
    )
    .await;
    let head = out.lines().next().unwrap_or_default();
    assert!(
        head.contains("241 in 121 files") || out.contains("may be incomplete"),
        "{head}\n{}",
        out.lines().last().unwrap_or_default()
    );
}

/// clangd cold, as basedpyright above: references asked first thing find the header and
/// both sources; on another fresh server the first rename preview and the rename cover all
/// three files.
#[tokio::test(flavor = "multi_thread")]
async fn clangd_cold_references_and_rename_across_files_never_opened() {
    let servers = json!({"clangd": {"command": [clangd()], "extensions": ["c", "h"]}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", lsp_table(servers.clone()))]);
    write_c_project(dir.path());
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "util.h", "symbol": "add"}),
    )
    .await;
    for place in ["main.c\n  4:12:", "util.h\n  2:5:", "util.c\n  3:5:"] {
        assert!(out.contains(place), "{place}: {out}");
    }

    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", lsp_table(servers.clone()))]);
    let root = dir.path();
    write_c_project(root);
    let preview = rename_preview(
        root,
        lsp_table(servers),
        json!({"path": "util.h", "symbol": "add", "new_name": "sum"}),
    )
    .await;
    assert!(preview.contains("in 3 files"), "{preview}");
    assert!(preview.contains("+    return sum(1, 2);"), "{preview}");
    let out = ok(
        &exec,
        "lsp__rename",
        json!({"path": "util.h", "symbol": "add", "new_name": "sum"}),
    )
    .await;
    assert!(out.contains("3 files"), "{out}");
    assert!(read(root, "main.c").contains("return sum(1, 2);"));
    assert!(read(root, "util.c").contains("int sum(int a, int b)"));
}

#[tokio::test(flavor = "multi_thread")]
async fn python_diagnostics_after_an_edit() {
    let (dir, exec) = py_exec();
    let out = ok(
        &exec,
        "lsp__diagnostics",
        json!({"path": "main.py", "severity": "error"}),
    )
    .await;
    assert!(out.contains("main.py: no errors or warnings"), "{out}");
    // The edit introduces an undefined name; the next call sees the new text.
    write(
        dir.path(),
        "main.py",
        "from pkg.util import helper\n\n\ndef run():\n    return helpr(2)\n",
    );
    let out = ok(
        &exec,
        "lsp__diagnostics",
        json!({"path": "main.py", "severity": "error"}),
    )
    .await;
    assert!(
        out.contains("main.py:5:12: error: undefined name 'helpr'"),
        "{out}"
    );
    // Every open file.
    let out = ok(&exec, "lsp__diagnostics", json!({})).await;
    assert!(out.contains("undefined name 'helpr'"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_rename_across_three_files() {
    let (dir, exec) = py_exec();
    let root = dir.path();
    let before_other = read(root, "other.py");
    // The approval preview shows the diff, and changes nothing.
    let preview = rename_preview(
        root,
        lsp_table(json!({"pylsp": {"command": [pylsp()], "extensions": ["py"]}})),
        json!({"path": "pkg/util.py", "symbol": "helper", "new_name": "add_one"}),
    )
    .await;
    assert!(preview.contains("in 3 files"), "{preview}");
    assert!(
        preview.contains("-VALUE = helper(3)") && preview.contains("+VALUE = add_one(3)"),
        "{preview}"
    );
    assert_eq!(read(root, "other.py"), before_other);

    let out = ok(
        &exec,
        "lsp__rename",
        json!({"path": "pkg/util.py", "symbol": "helper", "new_name": "add_one"}),
    )
    .await;
    assert!(out.contains("3 files"), "{out}");
    assert!(out.contains("main.py: 2 lines"), "{out}");
    assert!(out.contains("pkg/util.py: 2 lines"), "{out}");
    assert!(read(root, "pkg/util.py").starts_with("def add_one(x):"));
    assert!(read(root, "pkg/util.py").contains("return add_one(len(text))"));
    assert_eq!(
        read(root, "other.py"),
        "from pkg.util import add_one\n\nHELPER = \"helper\"\nVALUE = add_one(3)\n"
    );
    assert!(read(root, "main.py").contains("# helper in a comment"));
    // The server saw the new text: the new name resolves.
    let out = ok(
        &exec,
        "lsp__definition",
        json!({"path": "other.py", "symbol": "add_one", "line": 4}),
    )
    .await;
    assert!(out.contains("pkg/util.py\n  1:5: def add_one(x):"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn c_with_clangd() {
    let table = lsp_table(json!({"clangd": {"command": [clangd()], "extensions": ["c", "h"]}}));
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    let root = dir.path();
    write_c_project(root);

    let out = ok(
        &exec,
        "lsp__definition",
        json!({"path": "main.c", "symbol": "add", "line": 4}),
    )
    .await;
    assert!(
        out.contains("util.c\n  3:5: int add(int a, int b)") || out.contains("util.h\n  2:5:"),
        "{out}"
    );

    let out = ok(&exec, "lsp__symbols", json!({"path": "util.c"})).await;
    assert!(out.contains("function add  lines 3-3"), "{out}");

    let out = ok(
        &exec,
        "lsp__hover",
        json!({"path": "util.c", "symbol": "add"}),
    )
    .await;
    assert!(out.contains("int add(int a, int b)"), "{out}");

    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "util.c", "symbol": "add"}),
    )
    .await;
    assert!(out.contains("main.c\n  4:12:"), "{out}");
    assert!(out.contains("util.h\n  2:5:"), "{out}");

    // An edit with a type error: the diagnostics say so.
    write(
        root,
        "main.c",
        "#include \"util.h\"\n\nint main(void) {\n    return add(1);\n}\n",
    );
    let out = ok(&exec, "lsp__diagnostics", json!({"path": "main.c"})).await;
    assert!(
        out.contains("main.c:4:") && out.contains("error: Too few arguments"),
        "{out}"
    );
    write(
        root,
        "main.c",
        "#include \"util.h\"\n\nint main(void) {\n    return add(1, 2);\n}\n",
    );

    let out = ok(
        &exec,
        "lsp__rename",
        json!({"path": "util.h", "symbol": "add", "new_name": "sum"}),
    )
    .await;
    assert!(out.contains("3 files"), "{out}");
    assert!(read(root, "main.c").contains("return sum(1, 2);"));
    assert!(read(root, "util.c").contains("int sum(int a, int b)"));
    assert!(read(root, "util.h").contains("int sum(int a, int b);"));
}

#[tokio::test]
async fn bad_cases_are_clear_errors() {
    let table = lsp_table(json!({
        "pylsp": {"command": [pylsp()], "extensions": ["py"]},
        "gone": {"command": ["/nonexistent/zig-language-server"], "extensions": ["zig"]},
    }));
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    let root = dir.path();
    write(root, "a.rb", "puts 1\n");
    write(root, "a.zig", "const x = 1;\n");
    std::fs::write(root.join("blob.py"), b"\x00\x01\x02binary").unwrap();
    write(root, "ok.py", "x = 1\n");

    let err = fails(
        &exec,
        "lsp__symbols",
        json!({"path": "a.rb"}),
        "no language server is configured for `.rb` files (a.rb)",
    )
    .await;
    assert!(
        err.contains("[lsp.servers.NAME]") && err.contains("extensions = [\"rb\"]"),
        "{err}"
    );
    let err = fails(
        &exec,
        "lsp__symbols",
        json!({"path": "a.zig"}),
        "its program `/nonexistent/zig-language-server` is not installed",
    )
    .await;
    assert!(err.contains("`gone`"), "{err}");
    fails(
        &exec,
        "lsp__symbols",
        json!({"path": "../x.py"}),
        "outside the workspace",
    )
    .await;
    fails(
        &exec,
        "lsp__symbols",
        json!({"path": "blob.py"}),
        "blob.py is a binary file",
    )
    .await;
    fails(
        &exec,
        "lsp__hover",
        json!({"path": "ok.py"}),
        "requires symbol",
    )
    .await;
    fails(
        &exec,
        "lsp__hover",
        json!({"path": "ok.py", "line": 9, "column": 1}),
        "line 9 is past the end of ok.py (1 lines)",
    )
    .await;
    fails(
        &exec,
        "lsp__hover",
        json!({"path": "ok.py", "symbol": "nothere"}),
        "`nothere` is not a symbol of ok.py",
    )
    .await;
    fails(
        &exec,
        "lsp__rename",
        json!({"path": "ok.py", "symbol": "x", "new_name": "a b"}),
        "new_name must be one identifier",
    )
    .await;
}

#[tokio::test]
async fn a_server_that_never_answers_initialize() {
    let table = json!({"builtin_servers": false, "init_timeout_s": 1,
        "servers": {"mute": {"command": [python3(), fake_lsp(), "silent"], "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "x = 1\n");
    fails(
        &exec,
        "lsp__symbols",
        json!({"path": "a.py"}),
        "the language server `mute` did not answer `initialize` within 1 s ([lsp] init_timeout_s)",
    )
    .await;
}

#[tokio::test]
async fn a_server_that_crashes_mid_request() {
    let table = json!({"builtin_servers": false,
        "servers": {"crashy": {"command": [python3(), fake_lsp(), "crash"], "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "x = 1\n");
    let err = fails(
        &exec,
        "lsp__definition",
        json!({"path": "a.py", "line": 1, "column": 1}),
        "the language server `crashy` crashed during the call, and again after a restart: it exited with status 3",
    )
    .await;
    assert!(err.contains("fake server: giving up on"), "{err}");
}

#[tokio::test]
async fn a_server_killed_mid_call_is_restarted_once() {
    // A name in the server's own home, which survives its restart (its only writable folder).
    let marker = format!("killed-once-{}", std::process::id());
    let table = json!({"builtin_servers": false,
        "servers": {"flaky": {"command": [python3(), fake_lsp(), "killed", marker], "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "def hello():\n    pass\n");
    let out = ok(
        &exec,
        "lsp__definition",
        json!({"path": "a.py", "line": 1, "column": 5}),
    )
    .await;
    assert!(out.contains("a.py\n  1:5: def hello():"), "{out}");
    assert!(
        out.contains("note: the language server `flaky` crashed during this call (it was killed by signal 9) and was restarted"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_pylsp_is_started_again_on_the_next_call() {
    let (dir, exec) = py_exec();
    ok(&exec, "lsp__symbols", json!({"path": "main.py"})).await;
    // Kill every pylsp serving this workspace (found by its working directory).
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cwd.as_deref() == Some(root.as_path())
            && String::from_utf8_lossy(&cmdline).contains("pylsp")
        {
            std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status()
                .unwrap();
            killed += 1;
        }
    }
    assert_eq!(killed, 1);
    // Let toolbox see the end of the server's output (a symbols call on an unchanged file
    // may be answered from the outline it keeps, without asking the server).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let out = ok(&exec, "lsp__symbols", json!({"path": "main.py"})).await;
    assert!(out.contains("function run"), "{out}");
    // Found dead before the call, or by the call itself (the kill may not have been seen yet).
    assert!(
        out.contains("note: the language server `pylsp` had stopped (it was killed by signal 9")
            || out.contains("note: the language server `pylsp` crashed during this call (it was killed by signal 9"),
        "{out}"
    );
}

/// pylsp processes serving `root` (found by their working directory), zombies left out.
fn pylsp_in(root: &Path) -> Vec<i32> {
    let root = std::fs::canonicalize(root).unwrap();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cwd = std::fs::read_link(entry.path().join("cwd")).ok();
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit(')')
            .next()
            .is_some_and(|s| s.trim_start().starts_with('Z'));
        if cwd.as_deref() == Some(root.as_path())
            && String::from_utf8_lossy(&cmdline).contains("pylsp")
            && !zombie
        {
            out.push(pid);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_server_is_stopped() {
    let table = json!({"builtin_servers": false, "idle_shutdown_s": 1,
        "servers": {"pylsp": {"command": [pylsp()], "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write_py_project(dir.path());
    ok(&exec, "lsp__symbols", json!({"path": "main.py"})).await;
    assert_eq!(pylsp_in(dir.path()).len(), 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !pylsp_in(dir.path()).is_empty() {
        assert!(std::time::Instant::now() < deadline, "pylsp still running");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The next call starts it again.
    let out = ok(&exec, "lsp__symbols", json!({"path": "main.py"})).await;
    assert!(out.contains("function run"), "{out}");
}

/// vscode-languageserver (pyright, basedpyright) exits when the `processId` of `initialize`
/// fails `kill(pid, 0)`, which it does inside the sandbox: basedpyright died two seconds after
/// every start, and each call met a cold server. toolbox sends no pid to watch.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_watches_its_parent_stays_up_in_the_sandbox() {
    let table = json!({"builtin_servers": false,
        "servers": {"watcher": {"command": [python3(), fake_lsp(), "watch-parent"],
                                "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "x = 1\n");
    let hover = json!({"path": "a.py", "line": 1, "column": 1});
    let first = ok(&exec, "lsp__hover", hover.clone()).await;
    assert!(first.contains("processId=None"), "{first}");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let second = ok(&exec, "lsp__hover", hover).await;
    assert!(!second.contains("had stopped"), "{second}");
}

#[tokio::test]
async fn servers_run_without_network_and_with_the_workspace_read_only() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // A folder outside the workspace, standing for the user's home.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "OUTSIDE-SECRET-42").unwrap();
    let table = json!({"builtin_servers": false,
        "servers": {"probe": {"command": [python3(), fake_lsp(), "probe", port, outside.path()],
                              "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "x = 1\n");
    let out = ok(
        &exec,
        "lsp__hover",
        json!({"path": "a.py", "line": 1, "column": 1}),
    )
    .await;
    assert!(out.contains("write: denied"), "{out}");
    assert!(out.contains("net: denied"), "{out}");
    assert!(!dir.path().join("written-by-the-server").exists());
    // Nothing outside the workspace, its system folders and its installation: the secret
    // is not read, nothing is written there, and its $HOME is a private folder of its own.
    assert!(out.contains("outside-read: denied"), "{out}");
    assert!(!out.contains("OUTSIDE-SECRET-42"), "{out}");
    assert!(out.contains("outside-write: denied"), "{out}");
    assert_eq!(
        std::fs::read_dir(outside.path()).unwrap().count(),
        1,
        "only secret.txt"
    );
    assert!(out.contains("home-write: allowed in "), "{out}");
    let real_home = std::env::var("HOME").unwrap_or_default();
    assert!(!out.contains(&format!("allowed in {real_home};")), "{out}");
    assert!(!std::path::Path::new(&real_home)
        .join("server-home-file")
        .exists());
    assert!(
        out.contains("tmp: denied") || out.contains("tmp: 0 entries"),
        "{out}"
    );
}

/// Issue 37, point 2: clangd, in a read tool, must not quote a file outside the workspace in
/// its diagnostics, however the workspace names it: an absolute `#include` of the user's
/// credentials (with a macro that makes the secret an identifier clangd quotes), a `../`
/// include, and a `compile_commands.json` that adds an outside folder and forces an include.
#[tokio::test(flavor = "multi_thread")]
async fn clangd_never_quotes_a_file_outside_the_workspace() {
    // With the sandbox (the default) clangd cannot open the files at all; without it (the
    // operator's `[lsp] sandbox = false`), the second line withholds what it says of them.
    // Each run has a workspace of its own, so each starts its own clangd.
    for sandbox in [true, false] {
        let top = tempfile::tempdir().unwrap();
        let ws = top.path().join("ws");
        let home = top.path().join("home");
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(
            home.join(".aws/credentials"),
            "aws_secret_access_key = wJalrXUtnFEMIK7SECRETKEYxyz\n",
        )
        .unwrap();
        std::fs::write(home.join("token.h"), "ghp_FIRSTTOKENSECRET123 x;\n").unwrap();
        let creds = home.join(".aws/credentials").display().to_string();
        write(
            &ws,
            "creds.c",
            &format!("#define aws_secret_access_key int k\n#include \"{creds}\"\n"),
        );
        write(&ws, "dotdot.c", "#include \"../home/token.h\"\n");
        write(&ws, "db.c", "#include \"token.h\"\nint y;\n");
        write(&ws, "forced.c", "int z;\n");
        let dir = ws.display().to_string();
        let inc = home.display().to_string();
        let db = json!([
            {"directory": dir, "file": format!("{dir}/db.c"), "arguments": ["cc", "-c", format!("-I{inc}"), "db.c"]},
            {"directory": dir, "file": format!("{dir}/forced.c"), "arguments": ["cc", "-c", "-include", format!("{inc}/token.h"), "forced.c"]},
            {"directory": dir, "file": format!("{dir}/creds.c"), "arguments": ["cc", "-c", "creds.c"]},
            {"directory": dir, "file": format!("{dir}/dotdot.c"), "arguments": ["cc", "-c", "dotdot.c"]}
        ]);
        write(&ws, "compile_commands.json", &db.to_string());
        let mut config = toolbox_executor::ExecutorConfig::new(&ws);
        config.permissions.mode = PermissionMode::ReadOnly;
        let mut table =
            lsp_table(json!({"clangd": {"command": [clangd()], "extensions": ["c", "h"]}}));
        table["sandbox"] = json!(sandbox);
        config.providers.insert("lsp".into(), table);
        let exec = ToolExecutor::new(config).unwrap();
        for file in ["creds.c", "dotdot.c", "db.c", "forced.c"] {
            let out = ok(&exec, "lsp__diagnostics", json!({"path": file})).await;
            for secret in ["wJalrXUtnFEMIK7SECRETKEYxyz", "ghp_FIRSTTOKENSECRET123"] {
                assert!(
                    !out.contains(secret),
                    "sandbox {sandbox}: {file} leaked {secret}: {out}"
                );
            }
            // (clangd says nothing of a header forced in with -include.)
            if !sandbox && file != "forced.c" {
                assert!(out.contains("withheld"), "{file}: {out}");
            }
        }
    }
}

/// Diagnostics after a `notebook__edit` (point 5), through the same host hook as
/// file_manager's: a server that serves notebooks (the fake one, which reports each line
/// saying CELL_ERROR) is running, and the edit's result ends with its new error.
#[tokio::test]
async fn a_notebook_edit_gets_the_running_servers_new_errors() {
    // A generous bound on waiting for the server's diagnostics: the suite runs many servers
    // at once, and the hook gives up silently when the bound is hit.
    let table = json!({"builtin_servers": false, "diagnostics_after_edit": true,
        "diagnostics_wait_ms": 30000,
        "servers": {"nbfake": {"command": [python3(), fake_lsp(), "diagnose"], "extensions": ["ipynb"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(
        dir.path(),
        "nb.ipynb",
        r#"{"cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": ["x = 1"],
  "outputs": [], "execution_count": null}],
 "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}"#,
    );
    // The hook never starts a server: start it by asking for the notebook's diagnostics.
    let out = ok(&exec, "lsp__diagnostics", json!({"path": "nb.ipynb"})).await;
    assert!(!out.contains("CELL_ERROR"), "{out}");
    let out = ok(
        &exec,
        "notebook__edit",
        json!({"path": "nb.ipynb", "index": 0, "source": "y = CELL_ERROR"}),
    )
    .await;
    assert!(
        out.contains("lsp (nbfake): 1 error in nb.ipynb after this edit"),
        "{out}"
    );
    assert!(out.contains("CELL_ERROR is not allowed here"), "{out}");
    // An edit that removes it is told there are none left.
    let out = ok(
        &exec,
        "notebook__edit",
        json!({"path": "nb.ipynb", "index": 0, "source": "y = 2"}),
    )
    .await;
    assert!(
        out.contains("lsp (nbfake): no errors in nb.ipynb after this edit"),
        "{out}"
    );
}

/// Issue 44: a server just started may answer before it has read the workspace. Its
/// references count once two answers in a row agree; one whose answers keep changing past
/// `[lsp] index_wait_s` gets a result that says it may be incomplete, and a rename from it
/// is refused with nothing changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_still_reading_gets_no_silent_answer_and_no_rename() {
    let table = json!({"builtin_servers": false, "index_wait_s": 1,
        "servers": {"warming": {"command": [python3(), fake_lsp(), "warming"], "extensions": ["py"]}}});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("lsp", table)]);
    write(dir.path(), "a.py", "hello = 1\n");
    let out = ok(
        &exec,
        "lsp__references",
        json!({"path": "a.py", "line": 1, "column": 1}),
    )
    .await;
    assert!(out.contains("may be incomplete"), "{out}");
    assert!(out.contains("ask again in a few seconds"), "{out}");
    let got = toolbox_tests::call(
        &exec,
        "lsp__rename",
        json!({"path": "a.py", "line": 1, "column": 1, "new_name": "world"}),
    )
    .await;
    toolbox_tests::assert_error(
        &got,
        ErrorKind::Tool,
        &["kept changing", "Nothing was changed"],
    );
    assert_eq!(read(dir.path(), "a.py"), "hello = 1\n");
}

/// Issue 37, point 8: the rename that runs is the rename the person approved. The preview
/// and the run used to ask the server twice; a server whose answer changed in between (the
/// fake `shifty` one adds a second file the second time) changed a file nobody saw. Now the
/// previewed edit is kept and run, and a file changed since the preview refuses the call.
#[tokio::test]
async fn the_rename_that_runs_is_the_one_approved() {
    use std::sync::{Arc, Mutex, OnceLock};
    use toolbox_executor::ApprovalDecision;
    use toolbox_host::{EventSink, ToolEvent};
    for change_before_answer in [false, true] {
        let table = json!({"builtin_servers": false,
            "servers": {"shifty": {"command": [python3(), fake_lsp(), "shifty"], "extensions": ["py"]}}});
        let shown: Arc<Mutex<Vec<String>>> = Arc::default();
        let slot: Arc<OnceLock<(ToolExecutor, PathBuf)>> = Arc::default();
        let events = {
            let (shown, slot) = (shown.clone(), slot.clone());
            EventSink::new(move |event| {
                if let ToolEvent::ApprovalRequested(request) = event {
                    shown.lock().unwrap().push(request.preview.to_text(false));
                    let slot = slot.clone();
                    std::thread::spawn(move || {
                        let (exec, root) = slot.get().unwrap();
                        if change_before_answer {
                            std::fs::write(root.join("a.py"), "hello = 2\n").unwrap();
                        }
                        exec.respond_approval(
                            &request.session_id,
                            &request.call_id,
                            ApprovalDecision::Approve,
                        );
                    });
                }
            })
        };
        let (dir, exec) =
            toolbox_tests::executor_with_events(PermissionMode::Auto, &[("lsp", table)], events);
        let _ = slot.set((exec.clone(), dir.path().to_path_buf()));
        write(dir.path(), "a.py", "hello = 1\n");
        write(dir.path(), "other.py", "hello\n");
        let got = toolbox_tests::call(
            &exec,
            "lsp__rename",
            json!({"path": "a.py", "line": 1, "column": 1, "new_name": "world"}),
        )
        .await;
        let preview = shown.lock().unwrap().join("\n");
        assert!(preview.contains("in 1 file"), "{preview}");
        assert!(!preview.contains("other.py"), "{preview}");
        assert_eq!(read(dir.path(), "other.py"), "hello\n", "a file nobody saw");
        if change_before_answer {
            toolbox_tests::assert_error(&got, ErrorKind::Tool, &["changed since"]);
            assert_eq!(read(dir.path(), "a.py"), "hello = 2\n");
        } else {
            assert!(got.result.contains("1 file"), "{}", got.result);
            assert_eq!(read(dir.path(), "a.py"), "world = 1\n");
        }
    }
}
