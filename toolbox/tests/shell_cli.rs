//! The shell provider through the real `toolbox` binary: live streaming on stderr with the
//! envelope on stdout, a stderr nobody reads, `--sandbox`, and commands that die with a killed
//! toolbox.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolbox_tests::assert_err_contains;

mod common;
use common::toolbox;

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

fn wait_for_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_gone(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) outlived toolbox"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn call_streams_output_live_on_stderr_and_prints_the_envelope_on_stdout() {
    let ws = tempfile::tempdir().unwrap();
    let mut child = toolbox(ws.path())
        .args([
            "call",
            "--mode",
            "full",
            "shell",
            r#"{"command": "echo first; echo to-stderr >&2; sleep 3; echo second"}"#,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("first") {
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "stderr closed before the first line arrived");
        seen.extend_from_slice(&buf[..n]);
    }
    // The first line arrived while the command still sleeps: streamed, not printed at the end.
    assert!(
        child.try_wait().unwrap().is_none(),
        "toolbox had already finished"
    );
    stderr.read_to_end(&mut seen).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&seen);
    assert!(
        stderr.contains("to-stderr") && stderr.contains("second"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "only the envelope on stdout: {stdout}"
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], "done");
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains("first\nsecond\n") && result.starts_with("exit code 0"),
        "{result}"
    );
}

#[test]
fn a_timeout_is_an_error_envelope_with_the_output_so_far() {
    let ws = tempfile::tempdir().unwrap();
    let out = toolbox(ws.path())
        .args([
            "call",
            "--mode",
            "full",
            "bash",
            r#"{"command": "echo partial; sleep 30", "timeout_ms": 300}"#,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let result = assert_err_contains(&v, &["partial"]);
    assert!(
        result.starts_with("command timed out after 300 ms"),
        "{result}"
    );
}

/// Runs `toolbox call` with stderr piped and never read; returns the envelope, or fails if
/// none comes within a minute.
fn call_with_unread_stderr(ws: &Path, args: &str) -> Value {
    let mut child = toolbox(ws)
        .args(["call", "--mode", "full", "shell", args])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _unread = child.stderr.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, envelope) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = envelope.recv_timeout(Duration::from_secs(60));
    // Exits by itself too: at most a bounded wait for the stderr nobody reads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let line = line.expect("no envelope: the call hung on the unread stderr");
    assert!(status.is_some(), "toolbox did not exit after the call");
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line}"))
}

#[test]
fn an_unread_stderr_never_blocks_a_call() {
    let ws = tempfile::tempdir().unwrap();
    // Far more than the 64 KiB a pipe holds, streamed live to stderr.
    let v = call_with_unread_stderr(
        ws.path(),
        r#"{"command": "seq 1 200000; seq 1 200000 >&2"}"#,
    );
    assert_eq!(v["status"], "done", "{v}");
    assert!(v["result"].as_str().unwrap().contains("200000"), "{v}");

    let v = call_with_unread_stderr(
        ws.path(),
        r#"{"command": "seq 1 200000; sleep 60", "timeout_ms": 3000}"#,
    );
    let result = assert_err_contains(&v, &[]);
    assert!(
        result.starts_with("command timed out after 3000 ms"),
        "{result}"
    );
}

#[test]
fn the_sandbox_flag_confines_commands() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::Builder::new()
        .prefix("toolbox-shell-cli-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let target = outside.path().join("x");
    let args = format!(
        r#"{{"command": "touch {} || echo refused; touch inside && echo ok", "cwd": "."}}"#,
        target.display()
    );
    let out = toolbox(ws.path())
        .args([
            "call",
            "--mode",
            "full",
            "--sandbox",
            "workspace-write",
            "shell",
            &args,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains("refused") && result.contains("ok"),
        "{result}"
    );
    assert!(!target.exists());
    assert!(ws.path().join("inside").exists());

    let out = toolbox(ws.path())
        .args([
            "call",
            "--mode",
            "full",
            "--sandbox",
            "read-only",
            "shell",
            r#"{"command": "touch inside2 || echo refused", "cwd": "."}"#,
        ])
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    assert!(v["result"].as_str().unwrap().contains("refused"), "{v}");
    assert!(!ws.path().join("inside2").exists());
}

#[test]
fn commands_die_with_a_killed_toolbox() {
    // SIGKILL gives toolbox no chance to clean up: PR_SET_PDEATHSIG takes bash, the janitor
    // takes the grandchild.
    let ws = tempfile::tempdir().unwrap();
    let bash_pid = ws.path().join("bash.pid");
    let sleep_pid = ws.path().join("sleep.pid");
    let args = format!(
        r#"{{"command": "echo $$ > {}; sleep 300 & echo $! > {}; wait", "timeout_ms": 60000}}"#,
        bash_pid.display(),
        sleep_pid.display()
    );
    let mut child = toolbox(ws.path())
        .args(["call", "--mode", "full", "shell", &args])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bash = wait_for_pid(&bash_pid);
    let sleep = wait_for_pid(&sleep_pid);
    assert!(alive(bash) && alive(sleep));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_gone(bash, "bash");
    wait_gone(sleep, "the grandchild");
}

/// toolbox turns off the backtraces its own errors would capture under `RUST_BACKTRACE=1`
/// (they are never shown and made every failed call slower), without leaking that setting
/// into the commands it runs: they see the user's environment as it was.
#[test]
fn commands_see_the_users_backtrace_settings_unchanged() {
    let ws = tempfile::tempdir().unwrap();
    let run = |lib: Option<&str>| {
        let mut cmd = toolbox(ws.path());
        cmd.env("RUST_BACKTRACE", "1");
        match lib {
            Some(value) => cmd.env("RUST_LIB_BACKTRACE", value),
            None => cmd.env_remove("RUST_LIB_BACKTRACE"),
        };
        let out = cmd
            .args([
                "call",
                "--mode",
                "full",
                "shell",
                r#"{"command": "echo \"[${RUST_BACKTRACE-unset} ${RUST_LIB_BACKTRACE-unset}]\""}"#,
            ])
            .output()
            .unwrap();
        let envelope: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(envelope["status"], "done", "{envelope}");
        envelope["result"].as_str().unwrap().to_string()
    };
    let shown = run(None);
    assert!(shown.contains("[1 unset]"), "{shown}");
    let shown = run(Some("1"));
    assert!(shown.contains("[1 1]"), "{shown}");
}
