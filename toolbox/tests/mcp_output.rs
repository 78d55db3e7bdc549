//! Where a tool's output goes under `toolbox mcp`: progress or log notifications, bounded,
//! never a stderr that can block. Every server here has its stderr piped and never read, and
//! every wait is bounded, so a call that hangs fails the test instead of hanging it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

/// Generous for a debug build on a busy machine; only a regression waits this long.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    stdin: ChildStdin,
    /// Piped and never read: a client that ignores stderr.
    _stderr: ChildStderr,
    lines: mpsc::Receiver<String>,
    /// While true the test reads nothing from the server's stdout.
    paused: Arc<(Mutex<bool>, Condvar)>,
    ws: tempfile::TempDir,
}

impl Server {
    /// A `toolbox mcp` with these extra flags, after the initialize handshake.
    fn start(flags: &[&str]) -> Server {
        Self::start_with_env(flags, &[])
    }

    fn start_with_env(flags: &[&str], env: &[(&str, &str)]) -> Server {
        Self::start_as(flags, env, json!({}))
    }

    /// A server whose client declared `capabilities` at initialize.
    fn start_as(flags: &[&str], env: &[(&str, &str)], capabilities: Value) -> Server {
        let ws = tempfile::tempdir().unwrap();
        let mut cmd = common::toolbox(ws.path());
        let mut child = cmd
            .env("XDG_CONFIG_HOME", ws.path().join(".no-user-config"))
            // Logs too go to the unread stderr.
            .env("RUST_LOG", "toolbox=debug")
            .envs(env.iter().copied())
            .arg("mcp")
            .args(flags)
            .arg("--workspace")
            .arg(ws.path())
            .current_dir(ws.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let paused: Arc<(Mutex<bool>, Condvar)> = Arc::default();
        let pause = paused.clone();
        std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            loop {
                {
                    let (held, resume) = &*pause;
                    let mut held = held.lock().unwrap();
                    while *held {
                        held = resume.wait(held).unwrap();
                    }
                }
                let mut line = String::new();
                match stdout.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                if tx.send(line.trim_end().to_string()).is_err() {
                    return;
                }
            }
        });
        let mut server = Server {
            stdin: child.stdin.take().unwrap(),
            _stderr: child.stderr.take().unwrap(),
            child,
            lines,
            paused,
            ws,
        };
        server.send(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": capabilities,
                "clientInfo": { "name": "output-test", "version": "0" },
            },
        }));
        let init = server.next_line();
        assert_eq!(init["id"], 0, "{init}");
        assert!(
            init["result"]["capabilities"]["logging"].is_object(),
            "{init}"
        );
        server.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    /// Stops or resumes reading the server's stdout (a line already being read still comes).
    fn pause_reading(&self, pause: bool) {
        let (held, resume) = &*self.paused;
        *held.lock().unwrap() = pause;
        resume.notify_all();
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn next_line(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(REPLY_TIMEOUT)
            .unwrap_or_else(|e| panic!("nothing from the server within {REPLY_TIMEOUT:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Calls `tool` and returns the notifications that came before the reply, and the reply.
    fn call(&mut self, id: i64, tool: &str, arguments: Value, meta: Option<Value>) -> Exchange {
        let mut params = json!({ "name": tool, "arguments": arguments });
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        self.collect(id)
    }

    fn collect(&self, id: i64) -> Exchange {
        let mut notifications = Vec::new();
        loop {
            let line = self.next_line();
            if line.get("method").is_some() {
                notifications.push(line);
                continue;
            }
            assert_eq!(line["id"], id, "{line}");
            return Exchange {
                notifications,
                reply: line,
            };
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Exchange {
    notifications: Vec<Value>,
    reply: Value,
}

impl Exchange {
    fn text(&self) -> &str {
        self.reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text: {}", self.reply))
    }

    fn is_error(&self) -> bool {
        self.reply["result"]["isError"] == true
    }
}

#[test]
fn a_flood_of_shell_output_returns_with_stderr_unread() {
    let mut server = Server::start(&["--mode", "full"]);
    let got = server.call(
        1,
        "shell",
        json!({ "command": "seq 1 200000; seq 1 200000 >&2" }),
        None,
    );
    assert!(!got.is_error(), "{}", got.reply);
    assert!(got.text().contains("200000"), "{}", got.text());
    // No progress token and no logging level: the output went nowhere but the result.
    assert!(got.notifications.is_empty(), "{:?}", got.notifications);

    // The shell's own timeout still fires in the middle of a flood.
    let got = server.call(
        2,
        "shell",
        json!({ "command": "seq 1 200000; sleep 60", "timeout_ms": 3000 }),
        None,
    );
    assert!(got.is_error(), "{}", got.reply);
    assert!(
        got.text().starts_with("command timed out after 3000 ms"),
        "{}",
        got.text()
    );
}

#[test]
fn code_writing_to_file_descriptors_1_and_2_cannot_block_a_call() {
    // os.system's child inherits toolbox's own fd 1 (pointed at stderr) and fd 2.
    let mut server = Server::start(&["--mode", "full"]);
    let got = server.call(
        1,
        "run_python_code",
        json!({ "code": "import os\nos.system('seq 1 200000; seq 1 200000 >&2')\n'survived'" }),
        None,
    );
    assert!(!got.is_error(), "{}", got.reply);
    assert!(got.text().contains("survived"), "{}", got.text());
}

#[test]
fn the_call_timeout_holds_during_a_flood() {
    let mut server =
        Server::start_with_env(&["--mode", "full"], &[("TOOLBOX_CALL_TIMEOUT_MS", "3000")]);
    let got = server.call(
        1,
        "shell",
        json!({ "command": "seq 1 200000; sleep 60", "timeout_ms": 60000 }),
        None,
    );
    assert!(got.is_error(), "{}", got.reply);
    assert!(
        got.text().starts_with("tool shell timed out after 3000 ms"),
        "{}",
        got.text()
    );
}

#[test]
fn output_streams_as_progress_when_the_client_sends_a_token() {
    let mut server = Server::start(&["--mode", "full"]);
    let got = server.call(
        1,
        "shell",
        json!({ "command": "echo first-line; echo second-line >&2" }),
        Some(json!({ "progressToken": "tok-1" })),
    );
    assert!(!got.is_error(), "{}", got.reply);
    let mut last = 0;
    let mut streamed = String::new();
    for n in &got.notifications {
        assert_eq!(n["method"], "notifications/progress", "{n}");
        assert_eq!(n["params"]["progressToken"], "tok-1", "{n}");
        let progress = n["params"]["progress"].as_u64().unwrap();
        assert!(progress > last, "progress must grow: {n}");
        last = progress;
        streamed.push_str(n["params"]["message"].as_str().unwrap());
    }
    assert!(
        streamed.contains("first-line") && streamed.contains("second-line"),
        "{streamed:?}"
    );
}

#[test]
fn output_is_logged_once_the_client_sets_a_level() {
    let mut server = Server::start(&["--mode", "full"]);
    server.send(json!({
        "jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": { "level": "nope" },
    }));
    let bad = server.collect(1).reply;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");

    server.send(json!({
        "jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": { "level": "info" },
    }));
    assert_eq!(server.collect(2).reply["result"], json!({}));
    let got = server.call(3, "shell", json!({ "command": "echo logged-line" }), None);
    let logged: String = got
        .notifications
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/message", "{n}");
            assert_eq!(n["params"]["level"], "info", "{n}");
            assert_eq!(n["params"]["logger"], "shell", "{n}");
            n["params"]["data"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(logged.contains("logged-line"), "{logged:?}");

    // A level above info turns tool output off again.
    server.send(json!({
        "jsonrpc": "2.0", "id": 4, "method": "logging/setLevel", "params": { "level": "warning" },
    }));
    server.collect(4);
    let got = server.call(5, "shell", json!({ "command": "echo quiet" }), None);
    assert!(got.notifications.is_empty(), "{:?}", got.notifications);
}

#[test]
fn notifications_to_a_client_that_does_not_read_are_bounded() {
    let mut server = Server::start(&["--mode", "full"]);
    // About 7 MB of output while the client reads nothing; the call's record in the
    // trajectory shows when it has finished.
    server.pause_reading(true);
    server.send(json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "shell",
            "arguments": { "command": "seq 1 1000000" },
            "_meta": { "progressToken": 7 },
        },
    }));
    let record = server
        .ws
        .path()
        .join(".toolbox/trajectories/default/tool_calls.jsonl");
    wait_for(&record);
    server.pause_reading(false);
    let got = server.collect(1);
    assert!(!got.is_error(), "{}", got.reply);
    let bytes: usize = got
        .notifications
        .iter()
        .map(|n| n.to_string().len() + 1)
        .sum();
    // The queue's cap plus what the stdout pipe held: far less than the output.
    assert!(bytes < 2 * 1024 * 1024, "{bytes} bytes of notifications");
    let last = got.notifications.last().expect("some output was streamed");
    let note = last["params"]["message"].as_str().unwrap();
    assert!(note.contains("bytes of output were not streamed"), "{note}");
    assert_eq!(last["params"]["progressToken"], 7, "{last}");
}

/// Waits (bounded) until `path` exists.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client without elicitation cannot be asked: by default (`--approve no`) a risky call is
/// refused, and the refusal names the flags that would allow it, as `toolbox serve`'s /mcp
/// does. (Before, stdio approved such calls unasked by default; now both transports follow
/// one rule.) `--approve ask` is no choice for a server and is refused at start-up.
#[test]
fn refusals_say_what_happened_and_how_to_allow_the_call() {
    for flags in [
        &["--mode", "auto"][..],
        &["--mode", "auto", "--approve", "no"],
    ] {
        let mut server = Server::start(flags);
        let got = server.call(1, "shell", json!({ "command": "echo hi" }), None);
        assert!(got.is_error(), "{}", got.reply);
        let text = got.text();
        assert!(
            text.contains("tool shell needs approval")
                && text.contains("cannot be asked")
                && text.contains("--approve no (the default)")
                && text.contains("--approve yes")
                && text.contains("--mode full"),
            "{text}"
        );
        assert!(!text.contains("the user denied"), "{text}");
    }

    let mut server = Server::start(&["--mode", "auto", "--approve", "yes"]);
    let got = server.call(1, "shell", json!({ "command": "echo ran" }), None);
    assert!(!got.is_error(), "{}", got.reply);
    assert!(got.text().contains("ran"), "{}", got.text());
}

/// A client that declared elicitation is asked, with what the call will do; only an accepted
/// `approve` runs it. Two calls in flight are asked one at a time, in the order they came.
#[test]
fn a_client_with_elicitation_is_asked_one_question_at_a_time() {
    let mut server = Server::start_as(&["--mode", "auto"], &[], json!({"elicitation": {}}));
    let write = |path: &str| json!({"path": path, "content": "hi\nthere"});
    server.send(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "write_file", "arguments": write("a.txt")}}));
    server.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                       "params": {"name": "write_file", "arguments": write("b.txt")}}));
    let question = server.next_line();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let message = question["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("allow write_file (risk file_write)"),
        "{message}"
    );
    assert!(
        message.contains("Write 8 bytes to a.txt, a new file"),
        "{message}"
    );
    assert!(message.contains("  hi\n  there"), "{message}");
    assert!(
        !message.contains("\\n") && !message.contains("{\""),
        "{message}"
    );
    let schema = &question["params"]["requestedSchema"];
    assert_eq!(schema["required"], json!(["decision"]), "{question}");
    // The second call waits: no second question while the first is open.
    assert!(
        server
            .lines
            .recv_timeout(Duration::from_millis(500))
            .is_err(),
        "a second line came while the first question was open"
    );
    server.send(json!({"jsonrpc": "2.0", "id": question["id"],
                       "result": {"action": "accept", "content": {"decision": "approve"}}}));
    // The first call runs once approved; the second is asked about meanwhile.
    let (mut first, mut second) = (None, None);
    while first.is_none() || second.is_none() {
        let line = server.next_line();
        if line["method"] == "elicitation/create" {
            assert!(second.is_none(), "two questions: {line}");
            second = Some(line);
        } else {
            assert_eq!(line["id"], 1, "{line}");
            first = Some(line);
        }
    }
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert!(
        second["params"]["message"]
            .as_str()
            .unwrap()
            .contains("b.txt"),
        "{second}"
    );
    server.send(json!({"jsonrpc": "2.0", "id": second["id"], "result": {"action": "decline"}}));
    let reply = server.next_line();
    assert_eq!(reply["id"], 2, "{reply}");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("denied"), "{text}");
    assert!(server.ws.path().join("a.txt").exists());
    assert!(!server.ws.path().join("b.txt").exists());
}

#[test]
fn a_client_that_stops_reading_stdout_holds_up_no_call() {
    let mut server = Server::start(&["--mode", "full"]);
    server.pause_reading(true);
    // Replies far beyond what the stdout pipe holds, while nobody reads them...
    for id in 1..=100 {
        server.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
    }
    // ...and a call after them still runs.
    server.send(json!({
        "jsonrpc": "2.0", "id": 101, "method": "tools/call",
        "params": {
            "name": "file_manager__write",
            "arguments": { "path": "ran.txt", "content": "ran while stdout was full\n" },
        },
    }));
    wait_for(&server.ws.path().join("ran.txt"));
    // Nothing was lost or reordered on the way.
    server.pause_reading(false);
    for id in 1..=100 {
        let got = server.collect(id);
        assert!(got.reply["result"]["tools"].is_array(), "{}", got.reply);
    }
    let got = server.collect(101);
    assert!(!got.is_error(), "{}", got.reply);
}
