//! `toolbox mcp` answers every request, however broken, and stays usable afterwards: raw
//! lines on the real binary's stdin, replies read from its stdout, every read bounded so a
//! regression fails instead of hanging. The error shapes are `mcp_shapes`' tables, which
//! `serve_mcp_errors.rs` sends to `/mcp` too.

use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
mod mcp_shapes;

use mcp_shapes::{Shape, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR};

/// Generous for a debug build on a busy machine; only a regression waits this long.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: mpsc::Receiver<String>,
    next_id: i64,
    _ws: tempfile::TempDir,
}

impl Server {
    /// A `toolbox mcp` after the initialize handshake.
    fn start() -> Server {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "still here\n").unwrap();
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
            next_id: 1000,
            _ws: ws,
        };
        server.send_json(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "framing-test", "version": "0" },
            },
        }));
        let init = server.reply();
        assert_eq!(init["id"], 0, "{init}");
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        assert_eq!(init["result"]["serverInfo"]["name"], "toolbox", "{init}");
        server.send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is with a writer thread");
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send_line(&mut self, line: &str) {
        self.send(format!("{line}\n").as_bytes());
    }

    fn send_json(&mut self, message: Value) {
        self.send_line(&message.to_string());
    }

    fn reply(&self) -> Value {
        self.reply_within(REPLY_TIMEOUT)
    }

    fn reply_within(&self, timeout: Duration) -> Value {
        let line = self
            .replies
            .recv_timeout(timeout)
            .unwrap_or_else(|e| panic!("no reply within {timeout:?}: {e}"));
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply is not JSON ({e}): {line}"))
    }

    /// The error of the next reply, checked for its id and code; returns its message.
    fn expect_error(&self, id: Value, code: i64) -> String {
        let reply = self.reply();
        assert_eq!(reply["jsonrpc"], "2.0", "{reply}");
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["error"]["code"], code, "{reply}");
        assert!(reply.get("result").is_none(), "{reply}");
        reply["error"]["message"].as_str().unwrap().to_string()
    }

    /// `tools/list` still answers, with the tools; being the very next reply also proves
    /// nothing before it was answered twice.
    fn assert_lists_tools(&mut self) {
        self.next_id += 1;
        let id = self.next_id;
        self.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let reply = self.reply();
        assert_eq!(reply["id"], id, "{reply}");
        let tools = reply["result"]["tools"].as_array().expect("a tools list");
        assert!(
            tools.iter().any(|t| t["name"] == "file_manager__read"),
            "{reply}"
        );
    }

    /// A valid tool call right after gets its normal answer: the connection survived. Being
    /// the very next reply also proves nothing unanswered was left behind.
    fn assert_usable(&mut self) {
        self.next_id += 1;
        let id = self.next_id;
        self.send_json(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "file_manager__read", "arguments": { "path": "notes.txt" } },
        }));
        let reply = self.reply();
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        let text = reply["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("still here"), "{reply}");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_line_over_16_mib_is_skipped_unbuffered_and_answered() {
    let mut server = Server::start();
    let mut stdin = server.stdin.take().unwrap();
    // In a thread: the server answers as soon as the newline arrives, and a blocked pipe must
    // not deadlock the test.
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'a'; 1024 * 1024];
        for _ in 0..17 {
            stdin.write_all(&chunk).unwrap();
        }
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let reply = server.reply();
    assert_eq!(reply["id"], Value::Null, "{reply}");
    let code = reply["error"]["code"].as_i64().unwrap();
    assert!(code == PARSE_ERROR || code == INVALID_REQUEST, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("16 MiB") || message.contains("16777216"),
        "{message}"
    );
    server.stdin = Some(writer.join().unwrap());
    server.assert_usable();
}

/// Sends every case of `shape`, each as one line: each gets exactly one error reply, with the
/// right code, id and message, and the server then still lists its tools and runs a call.
fn answers_each_case_once(shape: Shape) {
    let mut server = Server::start();
    for case in mcp_shapes::cases(shape) {
        let mut line = case.body.clone();
        line.push(b'\n');
        server.send(&line);
        mcp_shapes::check_error(shape, &case, &server.reply());
    }
    server.assert_lists_tools();
    server.assert_usable();
}

#[test]
fn stdio_answers_parse_errors() {
    answers_each_case_once(Shape::ParseError);
}

#[test]
fn stdio_answers_invalid_requests() {
    answers_each_case_once(Shape::InvalidRequest);
}

#[test]
fn stdio_answers_deep_nesting_with_a_parse_error() {
    answers_each_case_once(Shape::DeepNesting);
}

#[test]
fn stdio_answers_invalid_params() {
    answers_each_case_once(Shape::InvalidParams);
}

#[test]
fn stdio_answers_unknown_methods() {
    answers_each_case_once(Shape::MethodNotFound);
}

#[test]
fn stdio_leaves_notifications_and_responses_unanswered() {
    let mut server = Server::start();
    for (_, line) in mcp_shapes::unanswered() {
        server.send_line(line);
    }
    server.send_line("");
    server.send_line("   ");
    // The next reply is tools/list's: none of the above was answered.
    server.assert_lists_tools();
    server.assert_usable();
}

#[test]
fn a_lone_surrogate_in_arguments_is_invalid_params_with_the_id() {
    let mut server = Server::start();
    server.send_line(
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"file_manager__read","arguments":{"path":"\ud800"}}}"#,
    );
    let message = server.expect_error(json!(5), INVALID_PARAMS);
    assert!(message.contains("lone surrogate"), "{message}");
    assert!(message.contains("arguments"), "{message}");
    // A trailing surrogate alone, and a string id.
    server.send_line(
        r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"file_manager__read","arguments":{"path":"a\udc00b"}}}"#,
    );
    server.expect_error(json!("s"), INVALID_PARAMS);
    // A proper pair is a character, not an error: the call runs (and fails as a tool result).
    server.send_line(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"file_manager__read","arguments":{"path":"\ud83d\ude00.txt"}}}"#,
    );
    let reply = server.reply();
    assert_eq!(reply["id"], 6, "{reply}");
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    server.assert_usable();
}

#[test]
fn a_duplicate_in_flight_id_is_refused_and_the_original_still_answered() {
    let mut server = Server::start();
    let started = Instant::now();
    server.send_json(json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "sleep", "arguments": { "seconds": 2 } },
    }));
    server.send_json(json!({
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "file_manager__read", "arguments": { "path": "notes.txt" } },
    }));
    let message = server.expect_error(json!(7), INVALID_REQUEST);
    assert!(message.contains("already in flight"), "{message}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the refusal waited for the slow call"
    );
    // The same number as a string is another id.
    server.send_json(json!({"jsonrpc": "2.0", "id": "7", "method": "ping"}));
    let pong = server.reply();
    assert_eq!(pong["id"], "7", "{pong}");
    assert_eq!(pong["result"], json!({}), "{pong}");

    let slept = server.reply();
    assert_eq!(slept["id"], 7, "{slept}");
    assert_eq!(slept["result"]["isError"], false, "{slept}");
    assert!(started.elapsed() >= Duration::from_secs(2), "{slept}");
    // Once answered, the id is free again.
    server.send_json(json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert_eq!(server.reply()["result"], json!({}));
    server.assert_usable();
}

#[test]
fn a_cancelled_call_stops_unanswered_and_frees_its_id() {
    let mut server = Server::start();
    server.send_json(json!({
        "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "sleep", "arguments": { "seconds": 60 } },
    }));
    // Proves the call is in flight before it is cancelled.
    server.send_json(json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}));
    server.expect_error(json!(9), INVALID_REQUEST);
    server.send_json(json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 9, "reason": "test" },
    }));
    server.send_json(json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}));
    let pong = server.reply();
    assert_eq!(pong["id"], 9, "{pong}");
    assert_eq!(pong["result"], json!({}), "{pong}");
    server.assert_usable();
    // MCP: a cancelled request gets no response.
    if let Ok(line) = server.replies.recv_timeout(Duration::from_secs(1)) {
        panic!("unexpected reply after cancellation: {line}");
    }
}

#[test]
fn calls_in_flight_at_end_of_input_are_still_answered() {
    let mut server = Server::start();
    server.send_json(json!({
        "jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": { "name": "sleep", "arguments": { "seconds": 0.5 } },
    }));
    drop(server.stdin.take());
    let reply = server.reply();
    assert_eq!(reply["id"], 11, "{reply}");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
}

/// Waits (bounded) for `child` to exit after its input ended, and checks it succeeded.
fn exits_cleanly(child: &mut Child) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("toolbox mcp did not exit within {REPLY_TIMEOUT:?} after its input ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

#[test]
fn requests_and_the_end_of_input_sent_in_one_go_are_all_answered() {
    // Everything, the end of input included, is in the pipe before the server reads a byte:
    // the hang-up comes with the last lines, not after them, and must still end the session.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "still here\n").unwrap();
    let mut input = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "burst-test", "version": "0" },
        },
    })
    .to_string();
    input.push('\n');
    for id in 1..=3 {
        let call = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "file_manager__read", "arguments": { "path": "notes.txt" } },
        });
        input.push_str(&format!("{call}\n"));
    }
    let mut child = common::mcp_full(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let replies = common::line_reader(child.stdout.take().unwrap());
    let mut ids = Vec::new();
    for _ in 0..4 {
        let line = replies
            .recv_timeout(REPLY_TIMEOUT)
            .expect("every request is answered");
        let reply: Value = serde_json::from_str(&line).unwrap();
        ids.push(reply["id"].as_i64().unwrap());
    }
    ids.sort();
    assert_eq!(ids, [0, 1, 2, 3]);
    exits_cleanly(&mut child);
}

#[test]
fn requests_read_from_a_file_are_answered_into_a_file() {
    // Regular files cannot be polled: the server reads and writes them on threads of their own.
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "still here\n").unwrap();
    let requests = ws.path().join("requests.jsonl");
    let mut lines = vec![
        json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "file-test", "version": "0" },
            },
        })
        .to_string(),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        "not json".to_string(),
    ];
    for id in 1..=3 {
        lines.push(
            json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": { "name": "file_manager__read", "arguments": { "path": "notes.txt" } },
            })
            .to_string(),
        );
    }
    // The last line has no newline: it still counts.
    std::fs::write(&requests, lines.join("\n")).unwrap();
    let replies = ws.path().join("replies.jsonl");
    let mut child = common::mcp_full(ws.path())
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&replies).unwrap())
        .spawn()
        .unwrap();
    // The end of the file is the end of input: the server answers everything and exits.
    exits_cleanly(&mut child);
    let text = std::fs::read_to_string(&replies).unwrap();
    let replies: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(replies.len(), 5, "{text}");
    assert_eq!(replies[0]["id"], 0, "{text}");
    assert_eq!(replies[1]["error"]["code"], PARSE_ERROR, "{text}");
    let mut ids: Vec<i64> = replies[2..]
        .iter()
        .map(|reply| {
            let content = &reply["result"]["content"][0]["text"];
            assert!(content.as_str().unwrap().contains("still here"), "{reply}");
            reply["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3]);
}
