//! The trust boundary through the real binary: session ids on the command line and over MCP,
//! and a workspace's own `toolbox.toml`, which may only tighten what the operator allowed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

mod common;
use common::toolbox;

/// The tool names in `toolbox tools` output (the first column).
fn names(listing: &str) -> Vec<String> {
    listing
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every path under `root` with its type and content (see tests/tests/security.rs).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_dir() {
                stack.push(path.clone());
                "dir".into()
            } else {
                format!("file {}", std::fs::read(&path).unwrap().len())
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    out
}

#[test]
fn invalid_session_ids_on_the_command_line_write_nothing() {
    let top = tempfile::tempdir().unwrap();
    let ws = top.path().join("a/b/c/ws");
    std::fs::create_dir_all(&ws).unwrap();
    let abs = top.path().join("abs").display().to_string();
    let long = "x".repeat(129);
    let before = snapshot(top.path());
    for sid in [
        "..",
        "../x",
        "../../../escape",
        "/abs",
        abs.as_str(),
        "a/b",
        "a\\b",
        &long,
        "",
        ".",
        "é",
    ] {
        let (code, _, err) = run(toolbox(&ws).args([
            "call",
            "file_manager__write",
            r#"{"path": "x.txt", "content": "hi"}"#,
            "--mode",
            "full",
            "--session",
            sid,
        ]));
        assert_eq!(code, 2, "{sid:?}: {err}");
        assert!(err.contains("invalid session id"), "{sid:?}: {err}");
        // MCP refuses to start with such a session, before reading anything.
        let (code, _, err) = run(toolbox(&ws).args(["mcp", "--session", sid]));
        assert_eq!(code, 2, "mcp {sid:?}: {err}");
        assert!(err.contains("invalid session id"), "mcp {sid:?}: {err}");
    }
    assert_eq!(
        snapshot(top.path()),
        before,
        "an invalid session wrote something"
    );
}

#[test]
fn a_workspace_cannot_widen_the_operators_settings() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let marker = dir.path().join("touched");
    let shell = json!({"command": format!("touch {}", marker.display())}).to_string();
    let widening = [
        (
            "allow_shell = true\nallow_file_write = true\n",
            "allow_shell",
        ),
        ("permission_mode = \"full\"\n", "permission_mode"),
        ("trajectory = false\n", "trajectory"),
        ("call_timeout_ms = 99999999\n", "call_timeout_ms"),
        ("[shell]\nsandbox = \"off\"\n", "[shell] sandbox"),
        (
            "[shell]\nsandbox_network = true\n",
            "[shell] sandbox_network",
        ),
        (
            "[shell]\nmax_timeout_ms = 99999999\n",
            "[shell] max_timeout_ms",
        ),
        ("[python]\nvenv = \"../outside\"\n", "[python] venv"),
        (
            "[web]\nallow_ranges = [\"10.0.0.0/8\"]\n",
            "[web] allow_ranges",
        ),
        (
            "[web]\nallow_hosts = [\"metadata.internal\"]\n",
            "[web] allow_hosts",
        ),
        (
            "[image_gen]\nbase_url = \"http://evil.example\"\n",
            "[image_gen] base_url",
        ),
        ("trusted_workspaces = [\".\"]\n", "trusted_workspaces"),
    ];
    for (toml, key) in widening {
        std::fs::write(ws.join("toolbox.toml"), toml).unwrap();
        let (code, out, err) = run(toolbox(&ws).args([
            "call",
            "shell",
            &shell,
            "--mode",
            "read_only",
            "--sandbox",
            "workspace-write",
        ]));
        assert_eq!(code, 2, "{toml}: {out} {err}");
        assert!(
            err.contains(key),
            "{toml}: the message must name {key}: {err}"
        );
        assert!(err.contains("only tighten"), "{err}");
        assert!(!marker.exists(), "{toml} ran the command");
        // Over MCP the server refuses to start rather than serve widened tools.
        let (code, _, err) =
            run(toolbox(&ws).args(["mcp", "--mode", "read_only", "--sandbox", "workspace-write"]));
        assert_eq!(code, 2, "mcp {toml}: {err}");
        assert!(!ws.join(".toolbox").exists(), "{toml} left state behind");
    }
    // A deny list may only grow (`deny_env = []` keeps the defaults); adding is fine.
    std::fs::write(
        ws.join("toolbox.toml"),
        "[shell]\ndeny_env = [\"MY_TOKEN\"]\n",
    )
    .unwrap();
    let (code, _, err) = run(toolbox(&ws).args(["tools", "--mode", "read_only"]));
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_workspace_may_tighten_and_an_operator_may_trust_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(
        ws.join("toolbox.toml"),
        "permission_mode = \"read_only\"\ncall_timeout_ms = 5000\nallow_shell = false\n\
         [shell]\ndefault_timeout_ms = 1000\nsandbox = \"read-only\"\n[web]\ntimeout_ms = 100\n",
    )
    .unwrap();
    let (code, out, err) = run(toolbox(&ws).args(["tools", "--mode", "full"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        !names(&out).contains(&"shell".to_string()),
        "the workspace lowered the mode: {out}"
    );
    assert!(!out.contains("file_manager__write"), "{out}");

    // A widening file, trusted explicitly by flag...
    std::fs::write(ws.join("toolbox.toml"), "allow_shell = true\n").unwrap();
    let (code, out, err) =
        run(toolbox(&ws).args(["tools", "--mode", "read_only", "--trust-workspace-config"]));
    assert_eq!(code, 0, "{err}");
    assert!(names(&out).contains(&"shell".to_string()), "{out}");
    // ...or by the user's trusted_workspaces list.
    let config_home = dir.path().join("config");
    std::fs::create_dir_all(config_home.join("toolbox")).unwrap();
    std::fs::write(
        config_home.join("toolbox/config.toml"),
        format!("trusted_workspaces = [{:?}]\n", ws.display().to_string()),
    )
    .unwrap();
    let (code, out, err) = run(toolbox(&ws)
        .args(["tools", "--mode", "read_only"])
        .env("XDG_CONFIG_HOME", &config_home));
    assert_eq!(code, 0, "{err}");
    assert!(names(&out).contains(&"shell".to_string()), "{out}");
    // Another workspace is not trusted by that list.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("toolbox.toml"), "allow_shell = true\n").unwrap();
    let (code, _, err) = run(toolbox(&other)
        .args(["tools", "--mode", "read_only"])
        .env("XDG_CONFIG_HOME", &config_home));
    assert_eq!(code, 2, "{err}");
}

#[test]
fn mcp_in_read_only_mode_with_a_tightening_workspace_hides_and_refuses_shell() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("toolbox.toml"), "permission_mode = \"read_only\"\n").unwrap();
    let mut child = toolbox(ws)
        .args(["mcp", "--mode", "full"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let marker = ws.join("made-by-shell");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "shell", "arguments": {"command": format!("touch {}", marker.display())}}}),
    ];
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let replies: Vec<Value> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect();
    let _ = child.wait();
    let list = replies.iter().find(|r| r["id"] == 2).expect("tools/list");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"file_manager__read"), "{names:?}");
    assert!(!names.contains(&"shell"), "{names:?}");
    let call = replies.iter().find(|r| r["id"] == 3).expect("tools/call");
    let refused = call["result"]["isError"] == json!(true) || call.get("error").is_some();
    assert!(refused, "{call}");
    assert!(!marker.exists(), "shell ran");
}

/// Secrets in toolbox's environment never reach the code it runs for a model: not through
/// the child's environment, not through `/proc/<toolbox>/environ`, not through embedded
/// Python's `os.environ`, on every Python backend and in the shell.
#[test]
fn secrets_in_the_environment_do_not_reach_model_run_code() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    let secrets = [
        ("EXAMPLE_API_KEY", "sk-example-0123456789abcdef"),
        ("GITHUB_TOKEN", "ghp_example0123456789abcdef"),
        ("TOOLBOX_SERVE_TOKEN", "serve-token-0123456789abcdef"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-0123456789abcdef"),
        // Not a secret by name: the operator's `[shell] deny_env` below names it.
        ("CORP_LOGIN", "corp-login-0123456789abcdef"),
    ];
    let shell = r#"{"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ"}"#;
    // Also what a process started by the Python code inherits (embedded Python shares
    // toolbox's own process, so that is toolbox's environment).
    let python = r#"{"code": "import os, subprocess\nprint(dict(os.environ))\nprint(subprocess.run(['env'], capture_output=True, text=True).stdout)\nfor pid in (os.getpid(), os.getppid()):\n    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n    except OSError as e:\n        print('unreadable', pid, e)"}"#;
    for (tool, args, backend) in [
        ("shell", shell, "embedded"),
        ("run_python_code", python, "embedded"),
        ("run_python_code", python, "isolated"),
    ] {
        let config = ws.join(".no-user-config").join(format!("{backend}.toml"));
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(
            &config,
            format!("[python]\nbackend = \"{backend}\"\n[shell]\ndeny_env = [\"CORP_*\"]\n"),
        )
        .unwrap();
        let out = toolbox(&ws)
            .envs(secrets)
            .env("TOOLBOX_CONFIG", &config)
            .args(["call", "--mode", "full", tool, args])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let envelope: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|_| panic!("{tool} {backend}: {stdout}"));
        let result = envelope["result"].as_str().unwrap();
        assert_eq!(envelope["status"], "done", "{tool} {backend}: {result}");
        // The code did run and read its environment.
        assert!(result.contains("PATH"), "{tool} {backend}: {result}");
        for (name, value) in secrets {
            assert!(
                !result.contains(value),
                "{tool} ({backend}) saw {name}: {result}"
            );
        }
    }
}
