//! Nothing a tool started outlives `toolbox mcp` (issue point 6): processes started by
//! embedded Python — a plain child, one in a new session, and an orphan whose parent already
//! exited — are gone after toolbox ends by closing stdin, by SIGTERM and by SIGKILL, with
//! cgroups (when this machine has them) and with the subreaper fallback.
//!
//! Each run uses its own `sleep` durations so its processes can be told apart in /proc.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_tests::assert_err_contains;

/// How toolbox is ended.
#[derive(Clone, Copy, Debug)]
enum End {
    CloseStdin,
    Term,
    Kill,
}

/// Kills, on drop, any of the test's own sleeps that are still running (a failed test must
/// not leave strays). A pid is only killed while its command line is still that sleep.
struct Strays(Vec<(i32, String)>);

impl Drop for Strays {
    fn drop(&mut self) {
        for (pid, duration) in &self.0 {
            if is_our_sleep(*pid, duration) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe {
                    libc::kill(*pid, libc::SIGKILL);
                }
            }
        }
    }
}

fn is_our_sleep(pid: i32, duration: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with(['Z', 'X']))
        })
        .is_some_and(|zombie| !zombie);
    running && cmdline == format!("sleep\0{duration}\0").as_bytes()
}

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(ws: &std::path::Path, containment: &str) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
        for (key, _) in std::env::vars() {
            if key.starts_with("TOOLBOX_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .env("TOOLBOX_CONTAINMENT", containment)
            .args(["mcp", "--mode", "full", "--workspace"])
            .arg(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("toolbox starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{message}").expect("toolbox reads its stdin");
        stdin.flush().expect("flush");
    }

    /// The response to request `id` (bounded wait).
    fn response(&self, id: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response {id} from toolbox: {e}"));
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "toolbox did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Starts three sleeps from embedded Python, ends toolbox as told, and checks they are gone.
fn run(end: End, containment: &str, base: u32) {
    let ws = tempfile::tempdir().unwrap();
    let durations: Vec<String> = (0..3).map(|k| (base + k).to_string()).collect();
    let code = format!(
        "import subprocess\n\
         plain = subprocess.Popen(['sleep', '{}'])\n\
         own_session = subprocess.Popen(['sleep', '{}'], start_new_session=True)\n\
         orphan = subprocess.run(['sh', '-c', 'sleep {} >/dev/null 2>&1 & echo $!'], capture_output=True, text=True).stdout.strip()\n\
         print(plain.pid, own_session.pid, orphan)",
        durations[0], durations[1], durations[2]
    );
    let mut server = Server::start(ws.path(), containment);
    server.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "containment-test", "version": "0"}}}),
    );
    server.response(1);
    server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "run_python_code", "arguments": {"code": code}}}),
    );
    let answer = server.response(2);
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pids: Vec<i32> = text
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(pids.len(), 3, "three pids expected: {answer}");
    let _strays = Strays(pids.iter().copied().zip(durations.clone()).collect());
    for (pid, duration) in pids.iter().zip(&durations) {
        assert!(
            is_our_sleep(*pid, duration),
            "sleep {duration} (pid {pid}) is not running before the test ends toolbox"
        );
    }
    if containment == "subreaper" {
        // The fallback must really be the fallback: no cgroup of toolbox's.
        let cgroups = std::fs::read_to_string(format!("/proc/{}/cgroup", pids[0])).unwrap();
        assert!(!cgroups.contains("toolbox-"), "{cgroups}");
    }
    let pid = server.child.id() as i32;
    match end {
        End::CloseStdin => drop(server.stdin.take()),
        // SAFETY: signalling our own child, which has not been reaped.
        End::Term => unsafe {
            libc::kill(pid, libc::SIGTERM);
        },
        // SAFETY: as above.
        End::Kill => unsafe {
            libc::kill(pid, libc::SIGKILL);
        },
    }
    let status = server.wait_exit();
    match end {
        End::Kill => {}
        _ => assert!(status.success(), "{end:?}: toolbox exited with {status}"),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for (pid, duration) in pids.iter().zip(&durations) {
        while is_our_sleep(*pid, duration) {
            assert!(
                Instant::now() < deadline,
                "{end:?} ({containment}): sleep {duration} (pid {pid}) outlived toolbox"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn closing_stdin_stops_what_python_started() {
    run(End::CloseStdin, "auto", 4151);
}

#[test]
fn sigterm_stops_what_python_started() {
    run(End::Term, "auto", 4154);
}

#[test]
fn sigkill_leaves_nothing_python_started() {
    run(End::Kill, "auto", 4157);
}

#[test]
fn without_cgroups_closing_stdin_stops_what_python_started() {
    run(End::CloseStdin, "subreaper", 4161);
}

#[test]
fn without_cgroups_sigterm_stops_what_python_started() {
    run(End::Term, "subreaper", 4164);
}

#[test]
fn without_cgroups_sigkill_leaves_nothing_python_started() {
    run(End::Kill, "subreaper", 4167);
}

#[test]
fn toolbox_call_stops_cleanly_on_sigint_and_sigterm() {
    for (signal, duration) in [(libc::SIGINT, "4171"), (libc::SIGTERM, "4172")] {
        let ws = tempfile::tempdir().unwrap();
        let pid_file = ws.path().join("pid");
        let code = format!(
            "import subprocess, time\n\
             p = subprocess.Popen(['sleep', '{duration}'])\n\
             open({:?}, 'w').write(str(p.pid))\n\
             time.sleep(60)",
            pid_file.display()
        );
        let args = json!({ "code": code }).to_string();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
        for (key, _) in std::env::vars() {
            if key.starts_with("TOOLBOX_") || key == "RUST_LOG" {
                cmd.env_remove(key);
            }
        }
        let child = cmd
            .current_dir(ws.path())
            .args(["call", "--mode", "full", "run_python_code", &args])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = Server {
            child,
            stdin: None,
            lines: mpsc::channel().1,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let pid: i32 = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the code did not start");
            std::thread::sleep(Duration::from_millis(20));
        };
        let _strays = Strays(vec![(pid, duration.to_string())]);
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe {
            libc::kill(server.child.id() as i32, signal);
        }
        let status = server.wait_exit();
        let mut out = String::new();
        std::io::Read::read_to_string(&mut server.child.stdout.take().unwrap(), &mut out).unwrap();
        // The call was cancelled: an error envelope, exit code 1, not a death by signal.
        assert_eq!(status.code(), Some(1), "signal {signal}: {status} {out}");
        let envelope: Value = serde_json::from_str(out.trim()).unwrap_or_default();
        assert_err_contains(&envelope, &["cancelled"]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_our_sleep(pid, duration) {
            assert!(
                Instant::now() < deadline,
                "signal {signal}: sleep {duration} outlived toolbox call"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
