//! The lsp provider through `toolbox mcp`: real language servers (python-lsp-server from
//! tests/requirements.txt, clangd from scripts/test.sh) on generated Python and C projects,
//! diagnostics appended to an edit, a fake server (tests/fake_lsp.py) that never answers or
//! dies, and no server left running after toolbox is killed with SIGKILL.

use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_tests::assert_err_contains;
use toolbox_tests::lsp::{clangd, fake_lsp, pylsp, python3, write_c_project};

mod common;

const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

struct Mcp {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<String>,
    next: u64,
}

impl Mcp {
    /// `toolbox mcp --mode full` on `ws` with `config` as the operator's config file.
    fn start(ws: &Path, config: &str) -> Mcp {
        let file = ws.join(".operator.toml");
        std::fs::write(&file, config).unwrap();
        let mut child = common::mcp_full(ws)
            .env("TOOLBOX_CONFIG", &file)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let replies = common::line_reader(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            stdin: child.stdin.take().unwrap(),
            child,
            replies,
            next: 0,
        };
        mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "lsp-test", "version": "0"}}),
        );
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .replies
                .recv_timeout(REPLY_TIMEOUT)
                .unwrap_or_else(|e| panic!("no reply to {method} within {REPLY_TIMEOUT:?}: {e}"));
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
    }

    /// A tool call: (is_error, text).
    fn call(&mut self, tool: &str, args: Value) -> (bool, String) {
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let text = r["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text: {r}"))
            .to_string();
        (r["result"]["isError"] == json!(true), text)
    }

    fn ok(&mut self, tool: &str, args: Value) -> String {
        let (err, text) = self.call(tool, args.clone());
        assert!(!err, "{tool} {args}: {text}");
        text
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn py_project(root: &Path) {
    write(root, "pkg/__init__.py", "");
    write(
        root,
        "pkg/util.py",
        "def helper(x):\n    \"\"\"Adds one to x.\"\"\"\n    return x + 1\n",
    );
    write(
        root,
        "main.py",
        "from pkg.util import helper\n\nprint(helper(2))\n",
    );
    write(
        root,
        "other.py",
        "from pkg.util import helper\n\nVALUE = helper(3)\n",
    );
}

fn config(extra: &str) -> String {
    format!(
        "[lsp]\nbuiltin_servers = false\ndiagnostics_after_edit = true\n{extra}\n\
         [lsp.servers.pylsp]\ncommand = [{:?}]\nextensions = [\"py\"]\n",
        pylsp()
    )
}

#[test]
fn python_project_over_mcp() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    py_project(root);
    let mut mcp = Mcp::start(root, &config(""));

    let out = mcp.ok(
        "lsp__definition",
        json!({"path": "main.py", "symbol": "helper", "line": 3}),
    );
    assert!(out.contains("pkg/util.py\n  1:5: def helper(x):"), "{out}");
    let out = mcp.ok(
        "lsp__references",
        json!({"path": "pkg/util.py", "symbol": "helper"}),
    );
    assert!(out.contains("in 3 files"), "{out}");
    let out = mcp.ok(
        "lsp__hover",
        json!({"path": "pkg/util.py", "symbol": "helper"}),
    );
    assert!(out.contains("Adds one to x."), "{out}");
    let out = mcp.ok("lsp__symbols", json!({"path": "pkg/util.py"}));
    assert!(out.contains("function helper"), "{out}");

    // An edit through file_manager gets the running server's verdict appended.
    let out = mcp.ok(
        "file_manager__edit",
        json!({"path": "main.py", "old_string": "print(helper(2))", "new_string": "print(helpr(2))"}),
    );
    assert!(
        out.contains("lsp (pylsp): 1 error in main.py after this edit\nmain.py:3:7: error: undefined name 'helpr'"),
        "{out}"
    );
    let out = mcp.ok(
        "file_manager__edit",
        json!({"path": "main.py", "old_string": "print(helpr(2))", "new_string": "print(helper(2))"}),
    );
    assert!(
        out.contains("lsp (pylsp): no errors in main.py after this edit"),
        "{out}"
    );
    // A file no running server serves gets nothing appended.
    let out = mcp.ok(
        "file_manager__write",
        json!({"path": "notes.txt", "content": "hi\n"}),
    );
    assert!(!out.contains("lsp ("), "{out}");

    let out = mcp.ok(
        "lsp__rename",
        json!({"path": "pkg/util.py", "symbol": "helper", "new_name": "add_one"}),
    );
    assert!(out.contains("3 files"), "{out}");
    for f in ["main.py", "other.py", "pkg/util.py"] {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(
            text.contains("add_one") && !text.contains("helper"),
            "{f}: {text}"
        );
    }
}

#[test]
fn c_project_over_mcp() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    write_c_project(root);
    let cfg = format!(
        "[lsp]\nbuiltin_servers = false\ndiagnostics_after_edit = true\n\
         [lsp.servers.clangd]\ncommand = [{:?}]\nextensions = [\"c\", \"h\"]\n",
        clangd()
    );
    let mut mcp = Mcp::start(root, &cfg);
    let out = mcp.ok(
        "lsp__references",
        json!({"path": "util.c", "symbol": "add"}),
    );
    assert!(
        out.contains("main.c\n  4:12:") && out.contains("util.h\n  2:5:"),
        "{out}"
    );
    let out = mcp.ok(
        "lsp__hover",
        json!({"path": "main.c", "symbol": "add", "line": 4}),
    );
    assert!(out.contains("int add(int a, int b)"), "{out}");
    let out = mcp.ok(
        "file_manager__edit",
        json!({"path": "main.c", "old_string": "add(1, 2)", "new_string": "add(1)"}),
    );
    assert!(
        out.contains("error: Too few arguments to function call"),
        "{out}"
    );
    let out = mcp.ok(
        "file_manager__edit",
        json!({"path": "main.c", "old_string": "add(1)", "new_string": "add(1, 2)"}),
    );
    assert!(out.contains("no errors in main.c"), "{out}");
    let out = mcp.ok(
        "lsp__rename",
        json!({"path": "util.h", "symbol": "add", "new_name": "sum"}),
    );
    assert!(out.contains("3 files"), "{out}");
}

/// Issue 38, point 8: `lsp__symbols` with a query and no path searched nothing ("requires
/// path") when more than one language could answer. Now every language the workspace holds
/// is searched by its own server: a project of Python (pylsp, which has no workspace symbol
/// search: a note says so) and C (clangd, which finds `add`).
#[test]
fn a_symbol_query_without_path_searches_every_language() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    py_project(root);
    write_c_project(&root.join("csrc"));
    let cfg = format!(
        "{}[lsp.servers.clangd]\ncommand = [{:?}]\nextensions = [\"c\", \"h\"]\n",
        config(""),
        clangd()
    );
    let mut mcp = Mcp::start(root, &cfg);
    let out = mcp.ok("lsp__symbols", json!({"query": "add"}));
    assert!(out.contains("(searched with clangd)"), "{out}");
    assert!(out.contains("csrc/util.c:3: function add"), "{out}");
    assert!(
        out.contains(
            "note: lsp__symbols: the language server `pylsp` does not search workspace symbols"
        ),
        "{out}"
    );
    // With path, only that file's language is asked, as before.
    assert_err_contains(
        mcp.call("lsp__symbols", json!({"query": "add", "path": "main.py"})),
        &["`pylsp` does not search workspace symbols"],
    );
    // Neither argument: the error names both.
    assert_err_contains(
        mcp.call("lsp__symbols", json!({})),
        &["requires path", "or query"],
    );
}

#[test]
fn broken_servers_over_mcp() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    write(root, "a.py", "x = 1\n");
    write(root, "b.pyw", "x = 1\n");
    let python = python3();
    let cfg = format!(
        "[lsp]\nbuiltin_servers = false\ninit_timeout_s = 1\n\
         [lsp.servers.mute]\ncommand = [{python:?}, {f:?}, \"silent\"]\nextensions = [\"py\"]\n\
         [lsp.servers.crashy]\ncommand = [{python:?}, {f:?}, \"crash\"]\nextensions = [\"pyw\"]\n",
        f = fake_lsp()
    );
    let mut mcp = Mcp::start(root, &cfg);
    assert_err_contains(
        mcp.call("lsp__symbols", json!({"path": "a.py"})),
        &["did not answer `initialize` within 1 s"],
    );
    assert_err_contains(
        mcp.call(
            "lsp__definition",
            json!({"path": "b.pyw", "line": 1, "column": 1}),
        ),
        &["crashed during the call, and again after a restart: it exited with status 3"],
    );
    // toolbox still serves.
    assert_err_contains(mcp.call("lsp__symbols", json!({"path": "../a.py"})), &[]);
}

/// Processes whose working folder is `root` and whose command line mentions `needle`.
fn processes_in(root: &Path, needle: &str) -> Vec<i32> {
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
            && String::from_utf8_lossy(&cmdline).contains(needle)
            && !zombie
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn no_server_outlives_a_killed_toolbox() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    py_project(root);
    let mut mcp = Mcp::start(root, &config(""));
    mcp.ok("lsp__symbols", json!({"path": "main.py"}));
    assert_eq!(processes_in(root, "pylsp").len(), 1);
    // SIGKILL: no clean shutdown, only the containment (cgroup or janitor) can act.
    mcp.child.kill().unwrap();
    mcp.child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_in(root, "pylsp").is_empty() {
        assert!(
            Instant::now() < deadline,
            "pylsp outlived toolbox: {:?}",
            processes_in(root, "pylsp")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_workspace_may_disable_servers_but_never_add_one() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    py_project(&ws);
    let operator = dir.path().join("operator.toml");
    std::fs::write(&operator, config("")).unwrap();
    let marker = dir.path().join("ran");
    let call = |toml: &str| {
        std::fs::write(ws.join("toolbox.toml"), toml).unwrap();
        let out = common::toolbox(&ws)
            .env("TOOLBOX_CONFIG", &operator)
            .args(["call", "lsp__symbols", r#"{"path": "main.py"}"#])
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Adding or changing a command is refused before anything runs.
    for toml in [
        format!(
            "[lsp.servers.evil]\ncommand = [\"touch\", {:?}]\nextensions = [\"py\"]\n",
            marker.display().to_string()
        ),
        "[lsp]\nallow_network = true\n".to_string(),
        "[lsp]\nbuiltin_servers = true\n".to_string(),
    ] {
        let (code, out, err) = call(&toml);
        assert_eq!(code, 2, "{toml}: {out} {err}");
        assert!(
            err.contains("[lsp]") && err.contains("only tighten"),
            "{toml}: {err}"
        );
        assert!(!marker.exists(), "{toml} ran the command");
    }
    // Disabling one is allowed.
    let (code, out, err) = call("[lsp]\ndisabled = [\"pylsp\"]\n");
    assert_eq!(code, 1, "{out} {err}");
    assert!(
        out.contains("no language server is configured for `.py` files"),
        "{out} {err}"
    );
}
