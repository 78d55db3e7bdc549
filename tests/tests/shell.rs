//! The shell provider through the whole executor: results, timeouts and cancellation that
//! leave no process behind, live streaming, spooling of huge output, background jobs and
//! the OS sandbox.

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{
    CallStatus, ErrorKind, ExecutorConfig, PermissionMode, ToolExecutor, ToolRequest,
};
use toolbox_host::{CancellationToken, EventSink, OutputStream, ToolEvent};

use toolbox as _;
use toolbox_tests::call;

/// An executor in mode full over a fresh workspace, with a `[shell]` table.
fn executor_with(shell: Value, events: EventSink) -> (tempfile::TempDir, ToolExecutor) {
    toolbox_tests::executor_with_events(PermissionMode::Full, &[("shell", shell)], events)
}

fn executor() -> (tempfile::TempDir, ToolExecutor) {
    executor_with(json!({}), EventSink::none())
}

/// Whether a process is still running (a zombie waiting for its reaper counts as gone).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|s| s != "Z" && s != "X"),
        Err(_) => false,
    }
}

/// Whether any live process is left in the process group `pgid`.
fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            return false;
        };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

async fn wait_gone(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what} (pid {pid}) is still running"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn scratch(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join(".toolbox/sessions/s1/scratchpad")
}

#[tokio::test]
async fn runs_through_the_executor_under_its_name_and_alias() {
    let (dir, exec) = executor();
    let info = call(
        &exec,
        "bash",
        json!({"command": "echo hello; echo warn >&2; exit 2"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert_eq!(info.tool, "shell");
    assert!(info.result.starts_with("exit code 2 · "), "{}", info.result);
    assert!(info.result.contains("--- stdout (6 bytes) ---\nhello\n"));
    assert!(info.result.contains("--- stderr (5 bytes) ---\nwarn\n"));
    // Runs in the session scratchpad by default.
    let info = call(&exec, "shell", json!({"command": "pwd"})).await;
    let pwd = std::fs::canonicalize(scratch(&dir)).unwrap();
    assert!(
        info.result.contains(&format!("{}\n", pwd.display())),
        "{}",
        info.result
    );
    // Recorded in the trajectory like any call.
    let log = std::fs::read_to_string(dir.path().join(".toolbox/trajectories/s1/tool_calls.jsonl"))
        .unwrap();
    assert_eq!(log.lines().count(), 2);
}

#[tokio::test]
async fn a_timeout_stops_the_command_and_its_sleeping_grandchild() {
    let (dir, exec) = executor_with(json!({"kill_grace_ms": 500}), EventSink::none());
    let started = Instant::now();
    let info = call(
        &exec,
        "shell",
        json!({"command": "echo $$ > bash.pid; echo before; (sleep 300 & echo $! > pid.txt; wait)", "timeout_ms": 500}),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(20), "the call hung");
    assert_eq!(info.status, CallStatus::Error);
    assert_eq!(info.error_kind, Some(ErrorKind::Tool));
    assert!(
        info.result.starts_with("command timed out after 500 ms"),
        "{}",
        info.result
    );
    assert!(
        info.result.contains("--- stdout (7 bytes) ---\nbefore\n"),
        "{}",
        info.result
    );
    let pid = read_pid(&scratch(&dir).join("pid.txt"));
    // Gone when the call returns, not merely signalled: the call waits for it.
    assert!(!alive(pid), "the grandchild {pid} survived the timeout");
    // bash's pid is the process group id: the whole group is gone.
    assert!(!group_alive(read_pid(&scratch(&dir).join("bash.pid"))));
}

#[tokio::test]
async fn a_finished_command_does_not_wait_for_what_it_left_behind_nor_leave_it_running() {
    let (dir, exec) = executor_with(json!({"kill_grace_ms": 300}), EventSink::none());
    // 1. A straggler holding stdout: bash exits at once, the call must not wait 1000 s.
    let started = Instant::now();
    let info = call(
        &exec,
        "shell",
        json!({"command": "sleep 1000 & echo $! > a.pid; echo done"}),
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the call waited for the straggler"
    );
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.starts_with("exit code 0"), "{}", info.result);
    assert!(info.result.contains("done"));
    assert!(!alive(read_pid(&scratch(&dir).join("a.pid"))));

    // 2. One that ignores SIGTERM gets SIGKILL after the grace.
    let info = call(
        &exec,
        "shell",
        json!({"command": "(trap '' TERM; exec sleep 1000) & echo $! > b.pid; echo done"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(!alive(read_pid(&scratch(&dir).join("b.pid"))));

    // 3. One that let go of the pipes is found through the process group all the same.
    let info = call(
        &exec,
        "shell",
        json!({"command": "sleep 1000 >/dev/null 2>&1 & echo $! > c.pid"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(!alive(read_pid(&scratch(&dir).join("c.pid"))));

    // 4. One that moved to another process group of the session (coreutils timeout does).
    let info = call(
        &exec,
        "shell",
        json!({"command": "python3 -c 'import os,time; os.setpgid(0,0); time.sleep(1000)' & echo $! > d.pid; sleep 0.3"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(!alive(read_pid(&scratch(&dir).join("d.pid"))));
}

#[tokio::test]
async fn the_executors_own_timeout_drops_the_call_and_the_group_dies_with_it() {
    let (dir, exec) = executor();
    let request = ToolRequest::new(
        "t",
        "shell",
        json!({"command": "echo before-the-timeout; sleep 300 & echo $! > pid.txt; wait", "timeout_ms": 600000}),
    )
    .session("s1")
    .timeout(Duration::from_millis(400));
    let info = exec.run(request).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Timeout), "{}", info.result);
    // The executor let the shell stop gently, so the output so far is kept.
    assert!(
        info.result.starts_with("tool shell timed out after 400 ms"),
        "{}",
        info.result
    );
    assert!(
        info.result.contains("before-the-timeout"),
        "{}",
        info.result
    );
    wait_gone(read_pid(&scratch(&dir).join("pid.txt")), "the grandchild").await;
}

#[tokio::test]
async fn cancelling_the_call_kills_the_group() {
    let (dir, exec) = executor();
    let token = CancellationToken::new();
    let cancel = token.clone();
    let pid_file = scratch(&dir).join("pid.txt");
    let watcher = pid_file.clone();
    tokio::spawn(async move {
        let _ = tokio::task::spawn_blocking(move || read_pid(&watcher)).await;
        cancel.cancel();
    });
    let info = exec
        .run_cancellable(
            ToolRequest::new(
                "t",
                "shell",
                json!({"command": "echo before-the-cancel; sleep 300 & echo $! > pid.txt; wait"}),
            )
            .session("s1"),
            token,
        )
        .await;
    assert_eq!(
        info.error_kind,
        Some(ErrorKind::Cancelled),
        "{}",
        info.result
    );
    assert!(
        info.result.starts_with("tool shell was cancelled"),
        "{}",
        info.result
    );
    assert!(info.result.contains("before-the-cancel"), "{}", info.result);
    wait_gone(read_pid(&pid_file), "the grandchild").await;
}

#[tokio::test]
async fn output_streams_live_tagged_by_stream_and_utf8_safe() {
    let events: Arc<Mutex<Vec<(OutputStream, String, Instant)>>> = Arc::default();
    let seen = events.clone();
    let sink = EventSink::new(move |event| {
        if let ToolEvent::Output {
            stream, text, tool, ..
        } = event
        {
            assert_eq!(tool, "shell");
            seen.lock().unwrap().push((stream, text, Instant::now()));
        }
    });
    let (_dir, exec) = executor_with(json!({}), sink);
    let started = Instant::now();
    // 'é' is C3 A9: its two bytes arrive in separate chunks.
    let info = call(
        &exec,
        "shell",
        json!({"command": "echo first; sleep 0.5; echo oops >&2; printf '\\xc3'; sleep 0.2; printf '\\xa9\\n'"}),
    )
    .await;
    let ended = Instant::now();
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let events = events.lock().unwrap();
    let first = events
        .iter()
        .find(|(_, t, _)| t.contains("first"))
        .expect("first streamed");
    assert_eq!(first.0, OutputStream::Stdout);
    // Delivered while the command was still running, not at the end.
    assert!(
        ended.duration_since(first.2) >= Duration::from_millis(400),
        "not live"
    );
    assert!(first.2.duration_since(started) < ended.duration_since(started));
    let stderr: String = events
        .iter()
        .filter(|e| e.0 == OutputStream::Stderr)
        .map(|e| e.1.as_str())
        .collect();
    assert_eq!(stderr, "oops\n");
    let stdout: String = events
        .iter()
        .filter(|e| e.0 == OutputStream::Stdout)
        .map(|e| e.1.as_str())
        .collect();
    assert_eq!(stdout, "first\né\n");
    assert!(info.result.contains("first\né\n"), "{}", info.result);
}

#[tokio::test]
async fn huge_output_reaches_the_spool_file_byte_exact_in_arrival_order() {
    let (dir, exec) = executor_with(json!({"max_capture_bytes": 65536}), EventSink::none());
    let info = call(
        &exec,
        "shell",
        json!({"command": "seq 1 300000; echo ERR >&2"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let path = info.spool_path.clone().expect("spooled");
    let on_disk = std::fs::read(dir.path().join(&path)).unwrap();
    let expected: Vec<u8> = (1..=300000)
        .flat_map(|n| format!("{n}\n").into_bytes())
        .collect();
    // Both streams, in the order they arrived: stderr's line comes once, somewhere after
    // stdout started, as one piece.
    let at = on_disk
        .windows(4)
        .position(|w| w == b"ERR\n")
        .expect("stderr in the spool file");
    let mut without_err = on_disk.clone();
    without_err.drain(at..at + 4);
    assert_eq!(without_err.len(), expected.len());
    assert!(
        without_err == expected,
        "stdout in the spool file is not byte-exact"
    );
    // The model sees a preview naming the file and the registry's file reader; the footer
    // gives the exit code at the end.
    assert!(
        info.result.contains(&format!(
            "spooled to {path}. Use file_manager__read if you need more."
        )),
        "{}",
        info.result
    );
    assert!(
        info.result
            .contains(&format!("Full output ({} bytes)", on_disk.len())),
        "{}",
        info.result
    );
    assert!(info.result.starts_with("exit code 0"), "{}", info.result);
    assert!(
        info.result
            .contains("stdout 1988895 bytes · stderr 4 bytes"),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn background_dev_server_read_kill_and_drop() {
    let (dir, exec) = executor();
    let started = call(
        &exec,
        "shell",
        json!({"command": "exec python3 -u -m http.server 0 --bind 127.0.0.1", "run_in_background": true}),
    )
    .await;
    assert_eq!(started.status, CallStatus::Done, "{}", started.result);
    assert!(
        started
            .result
            .starts_with("Started background job job-1 (pid "),
        "{}",
        started.result
    );
    let pid: i32 = started.result["Started background job job-1 (pid ".len()..]
        .split(')')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap();

    // Wait until it says where it listens.
    let mut port = None;
    let mut seen = String::new();
    for _ in 0..20 {
        let out = call(
            &exec,
            "shell_output",
            json!({"job_id": "job-1", "wait_ms": 2000}),
        )
        .await;
        assert_eq!(out.status, CallStatus::Done, "{}", out.result);
        seen.push_str(&out.result);
        port = seen
            .split(" port ")
            .nth(1)
            .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|s| s.parse::<u16>().ok());
        if port.is_some() {
            break;
        }
    }
    let port = port.unwrap_or_else(|| panic!("no port in {seen}"));
    assert!(seen.contains("· running · pid"), "{seen}");

    // Talk to it from a foreground command; its access log shows up in the job's stderr.
    std::fs::write(dir.path().join("index.html"), "hi").unwrap();
    let fetched = call(
        &exec,
        "shell",
        json!({"command": format!("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/').status)\"")}),
    )
    .await;
    assert!(fetched.result.contains("---\n200\n"), "{}", fetched.result);
    let log = call(
        &exec,
        "bash_output",
        json!({"job_id": "job-1", "wait_ms": 3000}),
    )
    .await;
    assert!(
        log.result.contains("\"GET / HTTP/1.1\" 200"),
        "{}",
        log.result
    );

    let killed = call(&exec, "shell_kill", json!({"job_id": "job-1"})).await;
    assert_eq!(killed.status, CallStatus::Done, "{}", killed.result);
    assert!(
        killed.result.contains("killed by signal 15 (SIGTERM)"),
        "{}",
        killed.result
    );
    wait_gone(pid, "the server").await;
    assert!(
        !group_alive(pid),
        "something of the job's process group is still running"
    );

    // A job still running when the executor goes away goes with it.
    let started = call(
        &exec,
        "shell",
        json!({"command": "sleep 300 & echo $! > job.pid; wait", "run_in_background": true}),
    )
    .await;
    assert!(started.result.contains("job-2"), "{}", started.result);
    let grandchild = read_pid(&scratch(&dir).join("job.pid"));
    assert!(alive(grandchild));
    drop(exec);
    wait_gone(grandchild, "the job's grandchild").await;
}

#[tokio::test]
async fn sleep_is_capped_and_cancellable() {
    let (_dir, exec) = executor_with(json!({"max_sleep_seconds": 1}), EventSink::none());
    let info = call(&exec, "sleep", json!({"seconds": 0.1})).await;
    assert_eq!(info.result, "Slept 100 ms.");
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let info = exec
        .run_cancellable(
            ToolRequest::new("t", "sleep", json!({"seconds": 30})),
            token,
        )
        .await;
    assert_eq!(info.error_kind, Some(ErrorKind::Cancelled));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn read_only_mode_hides_and_refuses_the_shell_but_not_its_readers() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::ReadOnly;
    let exec = ToolExecutor::new(config).unwrap();
    let info = call(&exec, "shell", json!({"command": "true"})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    let visible: Vec<_> = exec
        .visible_tools()
        .iter()
        .map(|t| t.info.name.clone())
        .collect();
    assert!(!visible.contains(&"shell".to_string()));
    assert!(!visible.contains(&"shell_kill".to_string()));
    assert!(visible.contains(&"shell_output".to_string()));
    assert!(visible.contains(&"sleep".to_string()));
}

// ---- [limits] ----

/// An executor in mode full with a `[limits]` table (and no `[shell]` table).
fn executor_with_limits(limits: Value) -> (tempfile::TempDir, ToolExecutor) {
    toolbox_tests::executor_with(PermissionMode::Full, &[("limits", limits)])
}

/// Whether containment here runs in cgroup mode with `controller` available for limits.
fn cgroup_offers(controller: &str) -> bool {
    let c = toolbox_host::containment::ensure();
    c.mode() == toolbox_host::containment::Mode::Cgroup
        && c.cgroups().iter().any(|g| g.has(controller))
}

#[tokio::test]
async fn a_command_over_the_memory_limit_is_stopped_and_says_so() {
    let (_dir, exec) = executor_with_limits(json!({"memory_mb": 200}));
    let info = call(
        &exec,
        "shell",
        json!({"command": "python3 -c 'x = bytearray(1024**3); print(len(x))'"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result
            .starts_with("the command exceeded the memory limit of 200 MiB ([limits] memory_mb)\n"),
        "{}",
        info.result
    );
    assert!(info.result.contains("MemoryError"), "{}", info.result);
    // The same for a background job, in its status.
    let started = call(
        &exec,
        "shell",
        json!({"command": "python3 -c 'x = bytearray(1024**3)'", "run_in_background": true}),
    )
    .await;
    assert_eq!(started.status, CallStatus::Done, "{}", started.result);
    let mut report = String::new();
    for _ in 0..20 {
        let out = call(
            &exec,
            "shell_output",
            json!({"job_id": "job-1", "wait_ms": 2000}),
        )
        .await;
        report.push_str(&out.result);
        if report.contains(" after ") {
            break;
        }
    }
    assert!(
        report.contains("the job exceeded the memory limit of 200 MiB ([limits] memory_mb)"),
        "{report}"
    );
    // The executor is fine, and a command within the limits runs as usual.
    let info = call(&exec, "shell", json!({"command": "echo still here"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.contains("still here"), "{}", info.result);
}

#[tokio::test]
async fn the_memory_limit_binds_a_command_as_a_whole_where_cgroups_allow() {
    // Three processes of 120 MiB each: every one is within RLIMIT_AS, together they are not.
    let (_dir, exec) = executor_with_limits(json!({"memory_mb": 200}));
    let info = call(
        &exec,
        "shell",
        json!({"command": "for i in 1 2 3; do python3 -c 'import time; x = b\"x\" * (120 * 1024**2); time.sleep(3)' & done; wait; echo done"}),
    )
    .await;
    if !cgroup_offers("memory") {
        // The documented limit of the fallback: without a memory cgroup the limit binds each
        // process (RLIMIT_AS), not the command as a whole, so this command runs to the end.
        assert_eq!(info.status, CallStatus::Done, "{}", info.result);
        assert!(info.result.contains("done"), "{}", info.result);
        return;
    }
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result
            .starts_with("the command exceeded the memory limit of 200 MiB ([limits] memory_mb)\n"),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn a_command_over_the_process_limit_is_stopped_and_says_so() {
    let (_dir, exec) = executor_with_limits(json!({"processes": 20}));
    let info = call(
        &exec,
        "shell",
        json!({"command": "python3 -c \"import subprocess\nfor _ in range(60): subprocess.Popen(['sleep', '30'])\""}),
    )
    .await;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !cgroup_offers("pids") && root {
        // The documented limit of the fallback: without a pids cgroup only RLIMIT_NPROC is
        // left, which does not bind root, so the command runs; toolbox still stops every
        // process it started when the call ends.
        assert_eq!(info.status, CallStatus::Done, "{}", info.result);
        return;
    }
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result
            .starts_with("the command hit the process limit of 20 ([limits] processes)"),
        "{}",
        info.result
    );
    let info = call(&exec, "shell", json!({"command": "echo fine"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
}

#[tokio::test]
async fn a_command_over_the_cpu_limit_is_stopped_and_says_so() {
    let (_dir, exec) = executor_with_limits(json!({"cpu_seconds": 1}));
    let info = call(&exec, "shell", json!({"command": "while :; do :; done"})).await;
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result.starts_with(
            "the command exceeded the CPU time limit of 1 s ([limits] cpu_seconds) and was stopped\n"
        ),
        "{}",
        info.result
    );
    assert!(info.result.contains("SIGXCPU"), "{}", info.result);
}

#[tokio::test]
async fn bad_limits_are_refused_naming_the_key() {
    let (_dir, exec) = executor_with_limits(json!({"memory_mb": "lots"}));
    let info = call(&exec, "shell", json!({"command": "true"})).await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result
            .contains("[limits] memory_mb must be a whole number, got \"lots\""),
        "{}",
        info.result
    );
}

// ---- the OS sandbox ----

/// A folder outside both the workspace and the temp dir (both are writable in
/// workspace-write), so a write there must be refused.
fn outside_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("toolbox-shell-outside-")
        .tempdir_in("/var/tmp")
        .expect("/var/tmp is writable")
}

#[tokio::test]
async fn workspace_write_allows_the_workspace_and_temp_and_refuses_elsewhere() {
    let (dir, exec) = executor_with(json!({"sandbox": "workspace-write"}), EventSink::none());
    let outside = outside_dir();
    let target = outside.path().join("escaped.txt");
    let temp = tempfile::tempdir().unwrap();
    let in_temp = temp.path().join("t.txt");
    let info = call(
        &exec,
        "shell",
        json!({"command": format!(
            "echo in > ../../../../inside.txt && echo ok-inside; echo x > {} || echo refused-outside; \
             echo t > {} && echo ok-temp; echo quiet > /dev/null && echo ok-null; \
             cat <(echo procsub) | tr a-z A-Z",
            target.display(), in_temp.display()
        )}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let r = &info.result;
    assert!(
        r.contains("sandbox: workspace-write (writes allowed only in"),
        "{r}"
    );
    assert!(r.contains("network refused"), "{r}");
    assert!(
        r.contains("ok-inside") && r.contains("ok-temp") && r.contains("ok-null"),
        "{r}"
    );
    assert!(r.contains("PROCSUB"), "{r}");
    assert!(
        r.contains("refused-outside") && r.contains("Permission denied"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(
        !target.exists(),
        "a write outside the workspace got through"
    );
    assert!(in_temp.exists());

    // Reading outside is allowed; so is a background job, which is sandboxed too.
    std::fs::write(outside.path().join("readme"), "readable").unwrap();
    let info = call(
        &exec,
        "shell",
        json!({"command": format!("cat {}/readme", outside.path().display())}),
    )
    .await;
    assert!(info.result.contains("readable"), "{}", info.result);
    let started = call(
        &exec,
        "shell",
        json!({"command": format!("touch {}/job.txt; echo rc=$?", outside.path().display()), "run_in_background": true}),
    )
    .await;
    assert!(
        started.result.contains("sandbox: workspace-write"),
        "{}",
        started.result
    );
    let mut out = String::new();
    for _ in 0..20 {
        let r = call(
            &exec,
            "shell_output",
            json!({"job_id": "job-1", "wait_ms": 2000}),
        )
        .await;
        out.push_str(&r.result);
        if r.result.contains("exit code") {
            break;
        }
    }
    assert!(
        out.contains("rc=1") && out.contains("Permission denied"),
        "{out}"
    );
    assert!(!outside.path().join("job.txt").exists());
}

#[tokio::test]
async fn workspace_write_keeps_toolboxs_own_files_read_only() {
    let (dir, exec) = executor_with(json!({"sandbox": "workspace-write"}), EventSink::none());
    let root = dir.path();
    std::fs::write(root.join("toolbox.toml"), "# operator settings\n").unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    let info = call(
        &exec,
        "shell",
        json!({"command": "echo '[shell]' >> toolbox.toml || echo refused-toml; \
                           touch .toolbox/planted || echo refused-toolbox; \
                           touch .git/planted || echo refused-git; \
                           mv .git .git-moved || echo refused-move; \
                           mount -o remount,rw,bind .git 2>/dev/null || echo refused-remount; \
                           echo fine > normal.txt && echo wrote-normal; \
                           echo note > .toolbox/sessions/s1/scratchpad/note && echo wrote-scratch; \
                           echo out > .toolbox/sessions/s1/output/result.txt && echo wrote-output",
               "cwd": "."}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let r = &info.result;
    for word in [
        "refused-toml",
        "refused-toolbox",
        "refused-git",
        "refused-move",
        "refused-remount",
        "wrote-normal",
        "wrote-scratch",
        "wrote-output",
    ] {
        assert!(r.contains(word), "{word}: {r}");
    }
    assert!(r.contains("Read-only file system"), "{r}");
    assert!(
        r.contains("except read-only toolbox.toml, .toolbox/, .git/"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("toolbox.toml")).unwrap(),
        "# operator settings\n"
    );
    assert!(!root.join(".toolbox/planted").exists());
    assert!(!root.join(".git/planted").exists());
    assert!(root.join(".git").is_dir());
    assert_eq!(
        std::fs::read_to_string(root.join("normal.txt")).unwrap(),
        "fine\n"
    );
    // A working directory inside a protected folder is read-only as well.
    let info = call(
        &exec,
        "shell",
        json!({"command": "touch planted-from-inside || echo refused-inside", "cwd": ".git/hooks"}),
    )
    .await;
    assert!(info.result.contains("refused-inside"), "{}", info.result);
    assert!(!root.join(".git/hooks/planted-from-inside").exists());
}

#[tokio::test]
async fn read_only_refuses_writes_even_inside_the_workspace() {
    let (dir, exec) = executor_with(json!({"sandbox": "read-only"}), EventSink::none());
    std::fs::write(dir.path().join("existing.txt"), "keep").unwrap();
    let info = call(
        &exec,
        "shell",
        json!({"command": "echo x > new.txt || echo refused-new; : > existing.txt || echo refused-trunc; \
                           truncate -s 0 existing.txt || echo refused-truncate; mkdir d || echo refused-mkdir; \
                           rm -f existing.txt || echo refused-rm; echo fine > /dev/null && echo ok-null; cat existing.txt",
               "cwd": "."}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let r = &info.result;
    for word in [
        "refused-new",
        "refused-trunc",
        "refused-truncate",
        "refused-mkdir",
        "refused-rm",
        "ok-null",
        "keep",
    ] {
        assert!(r.contains(word), "{word}: {r}");
    }
    assert!(r.contains("sandbox: read-only (no writes allowed"), "{r}");
    assert!(!dir.path().join("new.txt").exists());
    assert!(!dir.path().join("d").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("existing.txt")).unwrap(),
        "keep"
    );
}

#[tokio::test]
async fn network_is_refused_under_the_sandbox_unless_allowed() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = json!({"command": format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected; \
         python3 -c 'import socket; socket.socket(socket.AF_UNIX).close(); print(\"unix-ok\")'"
    )});

    let (_d, sandboxed) = executor_with(json!({"sandbox": "workspace-write"}), EventSink::none());
    let info = call(&sandboxed, "shell", connect.clone()).await;
    assert!(!info.result.contains("connected"), "{}", info.result);
    assert!(info.result.contains("Permission denied"), "{}", info.result);
    assert!(
        info.result.contains("unix-ok"),
        "AF_UNIX must still work: {}",
        info.result
    );

    let (_d, open) = executor();
    let info = call(&open, "shell", connect.clone()).await;
    assert!(info.result.contains("connected"), "{}", info.result);

    let (_d, allowed) = executor_with(
        json!({"sandbox": "read-only", "sandbox_network": true}),
        EventSink::none(),
    );
    let info = call(&allowed, "shell", connect).await;
    assert!(info.result.contains("connected"), "{}", info.result);
    assert!(info.result.contains("network allowed"), "{}", info.result);
}

#[tokio::test]
async fn nothing_escapes_the_process_group_under_the_sandbox() {
    let (_d, exec) = executor_with(json!({"sandbox": "workspace-write"}), EventSink::none());
    let info = call(
        &exec,
        "shell",
        json!({"command": "python3 -c 'import os; os.setsid()' 2>&1 | tail -1; setsid true || echo no-setsid"}),
    )
    .await;
    assert!(info.result.contains("PermissionError"), "{}", info.result);
    assert!(info.result.contains("no-setsid"), "{}", info.result);
}
