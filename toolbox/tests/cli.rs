//! The real `toolbox` binary: tools, schema, call (exit codes, stdin, modes, approvals,
//! configuration precedence).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use toolbox_tests::assert_err_contains;

mod common;
use common::toolbox;

fn run(cmd: &mut Command) -> (i32, Value, String) {
    let out: Output = cmd.output().expect("toolbox runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let envelope = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), envelope, stderr)
}

#[test]
fn call_prints_one_envelope_line_and_exits_by_status() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("hello.txt"), "line one\nline two\n").unwrap();

    let out = toolbox(ws.path())
        .args(["call", "file_manager__read", r#"{"path": "hello.txt"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], "done");
    assert!(v["result"].as_str().unwrap().contains("line two"));
    assert_eq!(v.as_object().unwrap().len(), 2, "only status and result");

    // Aliases work; a tool error is exit 1 with status error.
    let (code, v, _) =
        run(toolbox(ws.path()).args(["call", "read_file", r#"{"path": "missing.txt"}"#]));
    assert_eq!(code, 1);
    assert_err_contains(&v, &["missing.txt"]);

    let (code, v, _) = run(toolbox(ws.path()).args(["call", "no_such_tool", "{}"]));
    assert_eq!(code, 1);
    assert_eq!(assert_err_contains(&v, &[]), "unknown tool: no_such_tool");

    // Escapes through the binary.
    let (code, v, _) =
        run(toolbox(ws.path()).args(["call", "read_file", r#"{"path": "../../etc/passwd"}"#]));
    assert_eq!(code, 1);
    assert_err_contains(&v, &["outside the workspace"]);
}

#[test]
fn usage_errors_exit_2() {
    let ws = tempfile::tempdir().unwrap();
    let (code, _, err) = run(toolbox(ws.path()).args(["call", "read_file", "{not json"]));
    assert_eq!(code, 2);
    assert!(err.contains("arguments are not valid JSON"), "{err}");
    let (code, _, err) = run(toolbox(ws.path()).args(["call", "read_file", "[1,2]"]));
    assert_eq!(code, 2);
    assert!(err.contains("must be a JSON object"), "{err}");
    let (code, _, _) = run(toolbox(ws.path()).args(["frobnicate"]));
    assert_eq!(code, 2);
    let (code, _, err) = run(toolbox(ws.path()).args(["schema", "--format", "xml"]));
    assert_eq!(code, 2);
    assert!(
        err.contains("openai, openai-responses, anthropic, mcp"),
        "{err}"
    );
    let (code, _, err) = run(toolbox(ws.path()).args(["tools", "--mode", "yolo"]));
    assert_eq!(code, 2);
    assert!(err.contains("read_only, auto, full"), "{err}");
    let (code, _, err) =
        run(toolbox(ws.path()).args(["call", "read_file", "{}", "--session", "../x"]));
    assert_eq!(code, 2, "an invalid session is a usage error: {err}");
    assert!(err.contains("invalid session id"), "{err}");
    std::fs::write(ws.path().join("toolbox.toml"), "permission_mode = 3").unwrap();
    let (code, _, err) = run(toolbox(ws.path()).args(["tools"]));
    assert_eq!(code, 2);
    assert!(err.contains("toolbox.toml"), "{err}");
}

#[test]
fn arguments_from_stdin() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "from stdin test\n").unwrap();
    let mut child = toolbox(ws.path())
        .args(["call", "file_manager__read", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"path": "a.txt"}"#)
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["result"].as_str().unwrap().contains("from stdin test"));
}

#[test]
fn read_only_mode_hides_and_refuses_writes() {
    let ws = tempfile::tempdir().unwrap();
    let out = toolbox(ws.path())
        .args(["tools", "--mode", "read_only"])
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("file_manager__read"));
    assert!(!table.contains("file_manager__write"), "{table}");

    let (code, v, _) = run(toolbox(ws.path()).args([
        "call",
        "write_file",
        r#"{"path": "x.txt", "content": "hi"}"#,
        "--mode",
        "read_only",
    ]));
    assert_eq!(code, 1);
    assert_err_contains(&v, &["not allowed in permission mode read_only"]);
    assert!(!ws.path().join("x.txt").exists());
}

#[test]
fn auto_mode_approvals_from_the_command_line() {
    let ws = tempfile::tempdir().unwrap();
    let args = r#"{"path": "x.txt", "content": "hi"}"#;
    let (code, v, _) = run(toolbox(ws.path()).args([
        "call",
        "write_file",
        args,
        "--mode",
        "auto",
        "--approve",
        "no",
    ]));
    assert_eq!(code, 1);
    // The refusal says why, and which flags would allow the call.
    assert_err_contains(
        &v,
        &[
            "started with --approve no",
            "use --approve yes or --mode full",
        ],
    );
    assert!(!ws.path().join("x.txt").exists());

    let (code, _, _) = run(toolbox(ws.path()).args([
        "call",
        "write_file",
        args,
        "--mode",
        "auto",
        "--approve",
        "yes",
    ]));
    assert_eq!(code, 0);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("x.txt")).unwrap(),
        "hi"
    );

    // --approve ask with no terminal to ask on: denied, with advice on stderr.
    if Path::new("/usr/bin/setsid").exists() {
        let mut cmd = Command::new("/usr/bin/setsid");
        cmd.current_dir(ws.path()).stdin(Stdio::null()).args([
            "-w",
            env!("CARGO_BIN_EXE_toolbox"),
            "call",
            "write_file",
            r#"{"path": "y.txt", "content": "hi"}"#,
            "--mode",
            "auto",
        ]);
        let (code, v, err) = run(&mut cmd);
        assert_eq!(code, 1, "{v} {err}");
        assert!(err.contains("no terminal to ask"), "{err}");
        // The result says so too, not "the user denied".
        assert_err_contains(&v, &["no terminal to ask", "--approve yes"]);
        assert!(!ws.path().join("y.txt").exists());
    }
}

#[test]
fn config_file_then_environment_then_flags() {
    let ws = tempfile::tempdir().unwrap();
    let operator = tempfile::tempdir().unwrap();
    let operator_file = operator.path().join("operator.toml");
    std::fs::write(&operator_file, "permission_mode = \"read_only\"\n").unwrap();
    let listed = |cmd: &mut Command| String::from_utf8(cmd.output().unwrap().stdout).unwrap();

    // The operator's file says read_only.
    assert!(!listed(
        toolbox(ws.path())
            .args(["tools"])
            .env("TOOLBOX_CONFIG", &operator_file)
    )
    .contains("file_manager__write"));
    // Environment beats the file.
    assert!(listed(
        toolbox(ws.path())
            .args(["tools"])
            .env("TOOLBOX_CONFIG", &operator_file)
            .env("TOOLBOX_MODE", "full")
    )
    .contains("file_manager__write"));
    // The workspace's own file tightens whatever the operator allowed.
    std::fs::write(
        ws.path().join("toolbox.toml"),
        "permission_mode = \"read_only\"\n",
    )
    .unwrap();
    assert!(!listed(
        toolbox(ws.path())
            .args(["tools", "--mode", "full"])
            .env("TOOLBOX_MODE", "full")
    )
    .contains("file_manager__write"));
    std::fs::remove_file(ws.path().join("toolbox.toml")).unwrap();
    // The flag beats the environment.
    assert!(!listed(
        toolbox(ws.path())
            .args(["tools", "--mode", "read_only"])
            .env("TOOLBOX_MODE", "full")
    )
    .contains("file_manager__write"));

    // Spool threshold from the environment.
    std::fs::write(ws.path().join("toolbox.toml"), "").unwrap();
    std::fs::write(ws.path().join("big.txt"), "x".repeat(3000)).unwrap();
    let (code, v, _) = run(toolbox(ws.path())
        .args(["call", "read_file", r#"{"path": "big.txt"}"#])
        .env("TOOLBOX_SPOOL_THRESHOLD_BYTES", "1000"));
    assert_eq!(code, 0);
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("spooled to .toolbox/tool_outputs/"),
        "{v}"
    );
}

#[test]
fn tools_and_schema_listings() {
    let ws = tempfile::tempdir().unwrap();
    let out = toolbox(ws.path())
        .args(["tools", "--json", "--mode", "full"])
        .output()
        .unwrap();
    let tools: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let read = tools
        .iter()
        .find(|t| t["name"] == "file_manager__read")
        .unwrap();
    assert_eq!(read["risk"], "read");
    assert_eq!(read["provider"], "file_manager");
    let write = tools
        .iter()
        .find(|t| t["name"] == "file_manager__write")
        .unwrap();
    assert_eq!(write["risk"], "file_write");

    for format in ["openai", "openai-responses", "anthropic", "mcp"] {
        let out = toolbox(ws.path())
            .args(["schema", "--format", format])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{format}");
        let arr: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(arr.len(), tools.len(), "{format}");
    }
    let out = toolbox(ws.path())
        .args([
            "schema",
            "--format",
            "anthropic",
            "--toolsets",
            "files",
            "--mode",
            "read_only",
        ])
        .output()
        .unwrap();
    let arr: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = arr.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"file_manager__grep") && !names.contains(&"file_manager__edit"),
        "{names:?}"
    );
    let (code, _, err) =
        run(toolbox(ws.path()).args(["schema", "--format", "mcp", "--toolsets", "nope"]));
    assert_eq!(code, 2);
    assert!(err.contains("unknown toolset: nope"), "{err}");
}

#[test]
fn workspace_flag_and_trajectory_on_disk() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "abc\n").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let (code, _, _) = run(toolbox(elsewhere.path()).args([
        "call",
        "read_file",
        r#"{"path": "f.txt"}"#,
        "--workspace",
        ws.path().to_str().unwrap(),
        "--session",
        "cli-test",
    ]));
    assert_eq!(code, 0);
    let log = std::fs::read_to_string(
        ws.path()
            .join(".toolbox/trajectories/cli-test/tool_calls.jsonl"),
    )
    .unwrap();
    let rec: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(rec["tool"], "file_manager__read");
    assert_eq!(rec["status"], "done");
}

/// `--approve ask` asks on the terminal: the binary runs on a real terminal (`script`), and
/// the question, which shows what the call will do, is answered there.
#[test]
fn approve_ask_prompts_on_a_terminal() {
    let ws = tempfile::tempdir().unwrap();
    for (answer, file, expect_done) in [("y", "yes.txt", true), ("n", "no.txt", false)] {
        let args = format!(
            "call write_file '{{\"path\": \"{file}\", \"content\": \"hi\\nthere\"}}' --mode auto"
        );
        let mut term = common::Terminal::start(ws.path(), &args, &[]);
        let screen = term.wait_for("toolbox asks: allow ", 1, Duration::from_secs(60));
        term.type_keys(&format!("{answer}\n"));
        let (code, _) = term.finish(Duration::from_secs(60));
        // Named as the call named it.
        assert!(
            screen.contains("allow write_file (risk file_write)"),
            "{screen}"
        );
        // What the call will do: the path, new or replaced, the content as lines.
        assert!(
            screen.contains(&format!("Write 8 bytes to {file}, a new file")),
            "{screen}"
        );
        assert!(screen.contains("  hi\r\n  there"), "{screen:?}");
        assert!(!screen.contains("\\n"), "{screen}");
        assert_eq!(ws.path().join(file).exists(), expect_done, "{screen}");
        assert_eq!(code, Some(if expect_done { 0 } else { 1 }), "{screen}");
    }
}

/// An explicit `--approve ask` with no terminal to ask on is a usage error at start-up, not
/// a silent `no` later.
#[test]
fn approve_ask_without_a_terminal_is_refused_at_start_up() {
    use std::os::unix::process::CommandExt;
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = toolbox(ws.path());
    cmd.args(["call", "write_file", r#"{"path": "x.txt", "content": "x"}"#])
        .args(["--mode", "auto", "--approve", "ask"]);
    // SAFETY: setsid is async-signal-safe; it gives the child a session of its own, with no
    // controlling terminal, so /dev/tty cannot be opened (as under CI or a service manager).
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--approve ask needs a terminal"),
        "{stderr}"
    );
    assert!(!ws.path().join("x.txt").exists());
    for command in [["mcp", "--approve"], ["serve", "--approve"]] {
        let out = toolbox(ws.path())
            .args(command)
            .arg("ask")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        assert!(
            stderr.contains("must be yes (run risky tools) or no"),
            "{stderr}"
        );
    }
}

#[test]
fn logs_have_no_colour_when_stderr_is_no_terminal() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f.txt"), "abc\n").unwrap();
    let (code, _, err) = run(toolbox(ws.path())
        .args(["call", "read_file", r#"{"path": "f.txt"}"#])
        .env("RUST_LOG", "toolbox=debug"));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("tool execution finished"), "{err}");
    assert!(!err.contains('\x1b'), "ANSI escapes in {err:?}");
}

#[test]
fn schema_help_describes_toolsets() {
    let ws = tempfile::tempdir().unwrap();
    let out = toolbox(ws.path())
        .args(["schema", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help
        .lines()
        .find(|l| l.contains("--toolsets"))
        .unwrap_or_else(|| panic!("{help}"));
    assert!(line.contains("Only these toolsets"), "{help}");
}

/// `toolbox tools | head -1` (a reader that goes away) ends quietly: no "Broken pipe" panic,
/// no exit code 101.
#[test]
fn a_reader_that_goes_away_ends_the_output_quietly() {
    let ws = tempfile::tempdir().unwrap();
    for args in [
        &["tools"][..],
        &["schema", "--format", "openai"],
        &["call", "file_manager__list", "{}"],
    ] {
        let mut child = toolbox(ws.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader is gone before toolbox writes a byte (it is still starting), as when
        // `head` has exited: every write gets EPIPE.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{stderr}"
        );
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}

/// A weak `toolbox serve` token is refused before anything listens: spaces, too few distinct
/// characters, too short; a token file is read like the flag.
#[test]
fn weak_serve_tokens_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let file = ws.path().join("token");
    std::fs::write(&file, "aaaaaaaaaaaaaaaaaaaaaaaa\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--token".into(), " ".repeat(20)],
            "spaces or control characters",
        ),
        (
            vec!["--token".into(), "abababababababababab".into()],
            "too weak",
        ),
        (vec!["--token".into(), "short".into()], "too short"),
        (
            vec!["--token-file".into(), file.display().to_string()],
            "too weak",
        ),
        (
            vec!["--token-file".into(), "/nonexistent/token".into()],
            "--token-file",
        ),
    ];
    for (args, said) in cases {
        let out = toolbox(ws.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
}

/// `toolbox doctor` says which Python and backend the python tools use (the embedded
/// interpreter really started, with the libpython it loaded) and which language servers are
/// installed: a configured server whose program is missing is named as missing, and one
/// that is installed by its path. It changes nothing in the workspace.
#[test]
fn doctor_says_which_python_which_language_servers_and_which_tools() {
    let ws = tempfile::tempdir().unwrap();
    let operator_file = ws.path().join("operator.toml");
    let found = std::env::current_exe().unwrap();
    std::fs::write(
        &operator_file,
        format!(
            "[lsp.servers.nothere]\ncommand = [\"toolbox-no-such-server\"]\nextensions = [\"zzz\"]\n\
             [lsp.servers.here]\ncommand = [{:?}]\nextensions = [\"yyy\"]\n",
            found.display().to_string()
        ),
    )
    .unwrap();
    let out = toolbox(ws.path())
        .args(["doctor", "--json"])
        .env("TOOLBOX_CONFIG", &operator_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |provider: &str, subject: &str| -> Value {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| {
                r["provider"] == provider && r["subject"].as_str().unwrap().starts_with(subject)
            })
            .cloned()
            .unwrap_or_else(|| panic!("no {provider} {subject} in {rows}"))
    };
    let embedded = row("python", "embedded interpreter");
    assert_eq!(embedded["ok"], true, "{embedded}");
    assert!(
        embedded["detail"].as_str().unwrap().contains("libpython"),
        "{embedded}"
    );
    assert_eq!(row("python", "backend")["detail"], "embedded");
    let interpreter = row("python", "interpreter");
    assert_eq!(interpreter["ok"], true, "{interpreter}");
    assert!(
        interpreter["detail"]
            .as_str()
            .unwrap()
            .contains("(Python 3."),
        "{interpreter}"
    );
    assert_eq!(row("shell", "bash")["ok"], true);
    assert!(row("shell", "OS sandbox")["detail"].is_string());
    let missing = row("lsp", "language server nothere");
    assert_eq!(missing["ok"], false);
    assert!(
        missing["detail"]
            .as_str()
            .unwrap()
            .contains("toolbox-no-such-server"),
        "{missing}"
    );
    let here = row("lsp", "language server here");
    assert_eq!(here["ok"], true);
    assert_eq!(here["detail"], found.display().to_string());
    let left: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.iter()
            .all(|name| name == "operator.toml" || name == ".no-user-config"),
        "doctor wrote {left:?}"
    );

    // The table names each provider, subject and status.
    let out = toolbox(ws.path())
        .arg("doctor")
        .env("TOOLBOX_CONFIG", &operator_file)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("PROVIDER"), "{table}");
    assert!(
        table.contains("language server nothere (.zzz)") && table.contains("missing"),
        "{table}"
    );
}
