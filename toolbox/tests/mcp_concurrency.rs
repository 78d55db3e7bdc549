//! Calls over one `toolbox mcp` connection run side by side: a slow call never holds up the
//! fast ones sent after it, and 64 calls in flight at once are each answered under their own
//! id. Tested on the real binary; every wait is bounded and nothing here measures time: the
//! proofs are the order of the replies and a barrier that only opens once all 64 calls run.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

mod common;

/// Generous for a debug build on a busy machine; only a regression waits this long.
const REPLY_TIMEOUT: Duration = Duration::from_secs(90);

struct Server {
    child: Child,
    /// `None` once the test has closed it (end of input).
    stdin: Option<ChildStdin>,
    replies: mpsc::Receiver<String>,
    ws: tempfile::TempDir,
}

impl Server {
    /// A `toolbox mcp --mode full` after the initialize handshake.
    fn start() -> Server {
        let ws = tempfile::tempdir().unwrap();
        let mut child = common::mcp_full(ws.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let replies = common::line_reader(stdout);
        let mut server = Server {
            stdin: child.stdin.take(),
            child,
            replies,
            ws,
        };
        server.send(&[json!({
            "jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "concurrency-test", "version": "0" },
            },
        })]);
        assert_eq!(server.reply()["id"], "init");
        server.send(&[json!({"jsonrpc": "2.0", "method": "notifications/initialized"})]);
        server
    }

    /// Writes all `messages` with one write, so they reach the server together.
    fn send(&mut self, messages: &[Value]) {
        let mut bytes = Vec::new();
        for message in messages {
            bytes.extend_from_slice(message.to_string().as_bytes());
            bytes.push(b'\n');
        }
        let stdin = self.stdin.as_mut().expect("input still open");
        stdin.write_all(&bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn reply(&self) -> Value {
        let line = self
            .replies
            .recv_timeout(REPLY_TIMEOUT)
            .unwrap_or_else(|e| panic!("no reply within {REPLY_TIMEOUT:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn call(id: Value, tool: &str, arguments: Value) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": arguments },
    })
}

fn text(reply: &Value) -> &str {
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {reply}"))
}

#[test]
fn a_slow_call_does_not_delay_the_fast_calls_sent_after_it() {
    let mut server = Server::start();
    for i in 0..8 {
        std::fs::write(
            server.ws.path().join(format!("n{i}.txt")),
            format!("note {i}\n"),
        )
        .unwrap();
    }
    let mut batch = vec![call(json!("slow"), "sleep", json!({ "seconds": 5 }))];
    for i in 0..8 {
        batch.push(call(
            json!(i),
            "file_manager__read",
            json!({ "path": format!("n{i}.txt") }),
        ));
    }
    batch.push(json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}));
    server.send(&batch);

    // Every fast reply comes before the slow one, each under its own id.
    let mut fast = BTreeSet::new();
    for _ in 0..9 {
        let reply = server.reply();
        match &reply["id"] {
            Value::Number(n) => {
                let i = n.as_u64().unwrap();
                assert!(text(&reply).contains(&format!("note {i}")), "{reply}");
                assert!(fast.insert(i), "two replies for id {i}");
            }
            id if id == "ping" => assert_eq!(reply["result"], json!({}), "{reply}"),
            _ => panic!("a reply before all fast ones were answered: {reply}"),
        }
    }
    assert_eq!(fast, (0..8).collect());
    let slow = server.reply();
    assert_eq!(slow["id"], "slow", "{slow}");
    assert!(text(&slow).starts_with("Slept"), "{slow}");
}

#[test]
fn sixty_four_calls_in_flight_are_all_answered_each_with_its_own_id() {
    let mut server = Server::start();
    // Each call waits until all 64 have started: if the server ran fewer than 64 at once,
    // none could finish and each would end in its shell timeout, with an error.
    let batch: Vec<Value> = (0..64)
        .map(|i| {
            let command = format!(
                "mkdir -p started; touch started/{i}; \
                 while [ \"$(ls started | wc -l)\" -lt 64 ]; do sleep 0.05; done; \
                 echo done-{i}"
            );
            call(
                json!(i),
                "shell",
                json!({ "command": command, "timeout_ms": 60_000 }),
            )
        })
        .collect();
    server.send(&batch);
    let mut answered = BTreeSet::new();
    for _ in 0..64 {
        let reply = server.reply();
        let i = reply["id"].as_u64().unwrap_or_else(|| panic!("{reply}"));
        assert!(text(&reply).contains(&format!("done-{i}")), "{reply}");
        assert!(answered.insert(i), "two replies for id {i}");
    }
    assert_eq!(answered, (0..64).collect());
}

#[test]
fn tools_cannot_read_the_protocol_from_stdin() {
    // fd 0 of toolbox (and so of code and processes it starts) is /dev/null: the protocol
    // reads a private copy. The request after this one would otherwise be eaten.
    let mut server = Server::start();
    server.send(&[
        call(
            json!(1),
            "run_python_code",
            json!({ "code": "import os\nos.read(0, 4096)" }),
        ),
        call(json!(2), "sleep", json!({ "seconds": 0 })),
    ]);
    let mut replies = [server.reply(), server.reply()];
    replies.sort_by_key(|r| r["id"].as_u64());
    // (After the note the session's first result starts with: where Python runs.)
    assert!(
        text(&replies[0]).trim_end().ends_with("\n[result]\nb''"),
        "{}",
        replies[0]
    );
    assert!(text(&replies[1]).starts_with("Slept"), "{}", replies[1]);
}

/// Embedded Python answers from its own thread, which writes the call's reply itself (see
/// `toolbox_host::handoff`). The other ways a Python call ends still work over MCP: a fast
/// call sent while a cell sleeps is answered first; a cell that outlives its `timeout_ms` is
/// interrupted and answered; a cancelled cell gets no reply and frees the interpreter; and
/// the session's state carries over between calls.
#[test]
fn embedded_python_calls_end_every_way_over_one_connection() {
    let mut server = Server::start();
    std::fs::write(server.ws.path().join("n.txt"), "note\n").unwrap();
    server.send(&[call(
        json!(1),
        "run_python_code",
        json!({ "code": "x = 41" }),
    )]);
    assert_eq!(server.reply()["id"], 1);
    server.send(&[call(
        json!(2),
        "run_python_code",
        json!({ "code": "x + 1" }),
    )]);
    let reply = server.reply();
    assert_eq!(reply["id"], 2);
    assert!(text(&reply).contains("42"), "{reply}");

    // Timed out: interrupted inside time.sleep, answered with what it printed first.
    server.send(&[
        call(
            json!("slow"),
            "run_python_code",
            json!({ "code": "import time\nprint('before')\ntime.sleep(60)", "timeout_ms": 1000 }),
        ),
        call(
            json!("fast"),
            "file_manager__read",
            json!({ "path": "n.txt" }),
        ),
    ]);
    let fast = server.reply();
    assert_eq!(fast["id"], "fast", "{fast}");
    assert!(text(&fast).contains("note"), "{fast}");
    let slow = server.reply();
    assert_eq!(slow["id"], "slow", "{slow}");
    let slow_text = slow["result"]["content"][0]["text"].as_str().unwrap();
    assert!(slow_text.contains("before"), "{slow}");
    assert!(slow_text.contains("timed out"), "{slow}");

    // Cancelled: no reply under its id, and the next cell runs.
    server.send(&[call(
        json!("doomed"),
        "run_python_code",
        json!({ "code": "import time\ntime.sleep(60)" }),
    )]);
    // Let the cell start before cancelling it (a cancel before the start also gives no reply).
    server.send(&[call(json!("mark"), "sleep", json!({ "seconds": 0.3 }))]);
    assert_eq!(server.reply()["id"], "mark");
    server.send(&[
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": "doomed"}}),
        call(json!(3), "run_python_code", json!({ "code": "x * 2" })),
    ]);
    let reply = server.reply();
    assert_eq!(reply["id"], 3, "{reply}");
    assert!(text(&reply).contains("82"), "{reply}");
}

/// Once embedded Python has started, its thread reads requests itself while it is idle (see
/// `toolbox_host::handoff::IdleWork`). While it runs a cell, the server still reads: fast
/// calls and pings sent after a cell started are answered before the cell ends, as are the
/// requests that came in the same write as the cell.
#[test]
fn requests_that_come_while_python_runs_a_cell_are_still_answered_first() {
    let mut server = Server::start();
    std::fs::write(server.ws.path().join("n.txt"), "note\n").unwrap();
    server.send(&[call(
        json!(0),
        "run_python_code",
        json!({ "code": "x = 1" }),
    )]);
    assert_eq!(server.reply()["id"], 0);
    for round in 0..2 {
        let slow = format!("slow-{round}");
        server.send(&[
            call(
                json!(slow),
                "run_python_code",
                json!({ "code": "import time\ntime.sleep(2)\nprint('woke')" }),
            ),
            call(
                json!("same-write"),
                "file_manager__read",
                json!({ "path": "n.txt" }),
            ),
        ]);
        let reply = server.reply();
        assert_eq!(reply["id"], "same-write", "{reply}");
        // The cell is running now (it sleeps 2 s): the next requests come in a write of
        // their own, while the Python thread is busy.
        std::thread::sleep(Duration::from_millis(200));
        server.send(&[
            call(
                json!("later"),
                "file_manager__read",
                json!({ "path": "n.txt" }),
            ),
            json!({"jsonrpc": "2.0", "id": "ping", "method": "ping"}),
        ]);
        let mut first = vec![server.reply(), server.reply()];
        first.sort_by_key(|r| r["id"].to_string());
        assert_eq!(first[0]["id"], "later", "{first:?}");
        assert!(text(&first[0]).contains("note"), "{first:?}");
        assert_eq!(first[1]["id"], "ping", "{first:?}");
        let reply = server.reply();
        assert_eq!(reply["id"], slow, "{reply}");
        assert!(text(&reply).contains("woke"), "{reply}");
    }
}

/// Python cells queued when the input ends still run, and each is answered before the server
/// exits; and an end of input that the idle Python thread reads itself ends the server
/// cleanly too.
#[test]
fn python_calls_queued_at_the_end_of_input_are_answered_before_exit() {
    let mut server = Server::start();
    server.send(&[call(
        json!(0),
        "run_python_code",
        json!({ "code": "x = 1" }),
    )]);
    assert_eq!(server.reply()["id"], 0);
    // The Python thread is idle now, watching the input.
    std::thread::sleep(Duration::from_millis(100));
    let cells: Vec<Value> = (1..=3)
        .map(|i| {
            call(
                json!(i),
                "run_python_code",
                json!({ "code": format!("import time\ntime.sleep(0.2)\n{i} * 10") }),
            )
        })
        .collect();
    server.send(&cells);
    // End of input.
    drop(server.stdin.take());
    let mut answered = BTreeSet::new();
    for _ in 0..3 {
        let reply = server.reply();
        let i = reply["id"].as_u64().unwrap_or_else(|| panic!("{reply}"));
        assert!(text(&reply).contains(&format!("{}", i * 10)), "{reply}");
        answered.insert(i);
    }
    assert_eq!(answered, (1..=3).collect());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "{status}");

    // The end of input read by the idle Python thread itself ends the server as cleanly.
    let mut idle = Server::start();
    idle.send(&[call(
        json!(0),
        "run_python_code",
        json!({ "code": "x = 1" }),
    )]);
    assert_eq!(idle.reply()["id"], 0);
    std::thread::sleep(Duration::from_millis(100));
    drop(idle.stdin.take());
    let deadline = std::time::Instant::now() + REPLY_TIMEOUT;
    let status = loop {
        if let Some(status) = idle.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not exit at the end of input"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
}
