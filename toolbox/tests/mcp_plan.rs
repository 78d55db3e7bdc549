//! The plan over `toolbox mcp` (stdio, the real binary): the gate of `[plan]
//! require_confirmed` holds a write back; `plan__request_review` is asked by elicitation with
//! a feedback field even in mode full, a rejection's feedback comes back word for word, an
//! approval opens the gate; a client that cannot elicit gets "no person answered", never an
//! approval from `--approve yes`.

use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

mod common;

const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
const FEEDBACK: &str = "Split it in two steps.";

struct Mcp {
    _child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_id: i64,
}

impl Mcp {
    fn start(ws: &std::path::Path, config: &std::path::Path, elicit: bool, extra: &[&str]) -> Mcp {
        let mut child = common::mcp_full(ws)
            .env("TOOLBOX_CONFIG", config)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = common::line_reader(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            stdin: child.stdin.take().unwrap(),
            _child: child,
            lines,
            next_id: 1,
        };
        let capabilities = if elicit {
            json!({"elicitation": {}})
        } else {
            json!({})
        };
        mcp.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": {"name": "plan-test", "version": "0"}}}),
        );
        assert_eq!(mcp.next()["id"], 0);
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(REPLY_TIMEOUT)
            .expect("a line from toolbox mcp");
        serde_json::from_str(&line).unwrap()
    }

    /// Starts a tools/call; returns its id.
    fn call(&mut self, tool: &str, arguments: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}));
        id
    }

    /// The result text of call `id` (skipping notifications).
    fn result(&self, id: i64) -> (String, bool) {
        loop {
            let m = self.next();
            if m["id"] == id && m.get("result").is_some() {
                let text = m["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .to_string();
                return (text, m["result"]["isError"] == true);
            }
        }
    }

    /// Waits for the server's elicitation/create request; answers it with `content`.
    fn answer_elicitation(&mut self, content: Value) -> Value {
        loop {
            let m = self.next();
            if m["method"] == "elicitation/create" {
                let params = m["params"].clone();
                self.send(json!({"jsonrpc": "2.0", "id": m["id"],
                    "result": {"action": "accept", "content": content}}));
                return params;
            }
        }
    }
}

fn setup() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = outside.path().join("operator.toml");
    std::fs::write(&config, "[plan]\nrequire_confirmed = [\"file_write\"]\n").unwrap();
    (ws, outside, config)
}

#[test]
fn a_review_by_elicitation_with_feedback_opens_the_gate() {
    let (ws, _outside, config) = setup();
    let mut mcp = Mcp::start(ws.path(), &config, true, &[]);
    let id = mcp.call("plan__set", json!({"steps": ["Write a.txt"]}));
    assert!(!mcp.result(id).1);
    let write = json!({"path": "a.txt", "content": "a"});
    let id = mcp.call("file_manager__write", write.clone());
    let (text, error) = mcp.result(id);
    assert!(error && text.contains("plan__request_review"), "{text}");

    let id = mcp.call("plan__request_review", json!({"part": "plan"}));
    let form = mcp.answer_elicitation(json!({"decision": "reject", "feedback": FEEDBACK}));
    assert!(
        form["message"].as_str().unwrap().contains("Write a.txt"),
        "{form}"
    );
    assert_eq!(
        form["requestedSchema"]["properties"]["feedback"]["type"], "string",
        "{form}"
    );
    let (text, _) = mcp.result(id);
    assert!(
        text.contains(FEEDBACK) && text.contains("rejected"),
        "{text}"
    );
    let id = mcp.call("file_manager__write", write.clone());
    assert!(mcp.result(id).1, "still held back");

    let id = mcp.call("plan__request_review", json!({"part": "plan"}));
    mcp.answer_elicitation(json!({"decision": "approve"}));
    let (text, _) = mcp.result(id);
    assert!(text.contains("confirmed"), "{text}");
    let id = mcp.call("file_manager__write", write);
    let (text, error) = mcp.result(id);
    assert!(!error, "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "a"
    );
}

#[test]
fn a_client_that_cannot_elicit_leaves_the_review_pending_even_with_approve_yes() {
    let (ws, _outside, config) = setup();
    let mut mcp = Mcp::start(ws.path(), &config, false, &["--approve", "yes"]);
    let id = mcp.call("plan__set", json!({"steps": ["Write b.txt"]}));
    mcp.result(id);
    let id = mcp.call("plan__request_review", json!({"part": "plan"}));
    let (text, _) = mcp.result(id);
    assert!(
        text.contains("Not reviewed: ") && text.contains("stays pending"),
        "{text}"
    );
    let id = mcp.call(
        "file_manager__write",
        json!({"path": "b.txt", "content": "b"}),
    );
    let (text, error) = mcp.result(id);
    assert!(error && text.contains("the plan is pending"), "{text}");
    assert!(!ws.path().join("b.txt").exists());
}
