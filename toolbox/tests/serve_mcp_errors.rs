//! `/mcp` on a real `toolbox serve` (127.0.0.1, with a token) answers every broken message
//! with the JSON-RPC error `toolbox mcp` gives on stdio: the tables of `mcp_shapes`, one test
//! per error shape, each POSTed inside an initialized MCP session, the session still usable
//! after. A last test sends every case to both transports and compares the errors. Every
//! read is bounded (`serve_common::IO_LIMIT`, `mcp_shapes` on stdio).

mod common;
mod mcp_shapes;
mod serve_common;

use std::io::Write;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Duration;

use mcp_shapes::Shape;
use serde_json::{json, Value};
use serve_common::{Response, Server, TOKEN};

/// An MCP session on `/mcp`: the server, and the `Mcp-Session-Id` it gave at `initialize`.
struct Session {
    server: Server,
    id: String,
    _ws: tempfile::TempDir,
}

impl Session {
    fn start() -> Session {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "still here\n").unwrap();
        let server =
            Server::start(ws.path(), None, &["--token", TOKEN, "--mode", "full"]).with_token(TOKEN);
        let init = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "error-shapes-test", "version": "0" },
            },
        });
        let response = post(&server, None, init.to_string().into_bytes());
        assert_eq!(response.status, 200, "{}", response.text());
        let id = response
            .header("mcp-session-id")
            .unwrap_or_else(|| panic!("no Mcp-Session-Id: {:?}", response.headers))
            .to_string();
        let reply = rpc_reply(&response);
        assert_eq!(reply["result"]["serverInfo"]["name"], "toolbox", "{reply}");
        let mut session = Session {
            server,
            id,
            _ws: ws,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = session.post(initialized.to_string().into_bytes());
        assert_eq!(response.status, 202, "{}", response.text());
        session.assert_lists_tools();
        session
    }

    fn post(&mut self, body: Vec<u8>) -> Response {
        post(&self.server, Some(&self.id), body)
    }

    /// `tools/list` in the session answers with the tools: the session survived.
    fn assert_lists_tools(&mut self) {
        let response = self.post(
            json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"})
                .to_string()
                .into_bytes(),
        );
        assert_eq!(response.status, 200, "{}", response.text());
        let reply = rpc_reply(&response);
        assert_eq!(reply["id"], "list", "{reply}");
        let tools = reply["result"]["tools"].as_array().expect("a tools list");
        assert!(
            tools.iter().any(|t| t["name"] == "file_manager__read"),
            "{reply}"
        );
    }

    /// A tool call in the session runs.
    fn assert_usable(&mut self) {
        let call = json!({
            "jsonrpc": "2.0", "id": "read", "method": "tools/call",
            "params": { "name": "file_manager__read", "arguments": { "path": "notes.txt" } },
        });
        let response = self.post(call.to_string().into_bytes());
        assert_eq!(response.status, 200, "{}", response.text());
        let reply = rpc_reply(&response);
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        let text = reply["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("still here"), "{reply}");
    }
}

/// POSTs `body` to `/mcp` as an MCP client does (token, `Accept`, `Content-Type`, the
/// session when there is one).
fn post(server: &Server, session: Option<&str>, body: Vec<u8>) -> Response {
    let mut req = server
        .req("POST", "/mcp")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body);
    if let Some(session) = session {
        req = req
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", "2025-06-18");
    }
    req.send()
}

/// The JSON-RPC message a POST was answered with: the body itself (`application/json`), or
/// the one `data:` event that is a response (`text/event-stream`).
fn rpc_reply(response: &Response) -> Value {
    let kind = response.header("content-type").unwrap_or("");
    if kind.starts_with("application/json") {
        return response.json();
    }
    assert!(
        kind.starts_with("text/event-stream"),
        "status {}, content type {kind:?}: {}",
        response.status,
        response.text()
    );
    let text = response.text();
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("result").is_some() || message.get("error").is_some())
        .unwrap_or_else(|| panic!("no response in the stream: {text}"))
}

/// POSTs every case of `shape` in one session: each gets the shape's HTTP status and one
/// JSON-RPC error with the right code, id and message (a message that is no request as an
/// `application/json` body); the session then still lists its tools and runs a call.
fn answers_each_case(shape: Shape) {
    let mut session = Session::start();
    for case in mcp_shapes::cases(shape) {
        let response = session.post(case.body.clone());
        let what = case.what;
        assert_eq!(
            response.status,
            shape.http_status(),
            "{what}: {}",
            response.text()
        );
        if shape.http_status() == 400 {
            assert!(
                response
                    .header("content-type")
                    .is_some_and(|t| t.starts_with("application/json")),
                "{what}: {:?}",
                response.headers
            );
        }
        mcp_shapes::check_error(shape, &case, &rpc_reply(&response));
    }
    session.assert_lists_tools();
    session.assert_usable();
}

#[test]
fn http_answers_parse_errors() {
    answers_each_case(Shape::ParseError);
}

#[test]
fn http_answers_invalid_requests() {
    answers_each_case(Shape::InvalidRequest);
}

#[test]
fn http_answers_deep_nesting_with_a_parse_error() {
    answers_each_case(Shape::DeepNesting);
}

#[test]
fn http_answers_invalid_params() {
    answers_each_case(Shape::InvalidParams);
}

#[test]
fn http_answers_unknown_methods() {
    answers_each_case(Shape::MethodNotFound);
}

#[test]
fn http_accepts_notifications_and_responses_without_an_answer() {
    let mut session = Session::start();
    for (what, body) in mcp_shapes::unanswered() {
        let response = session.post(body.as_bytes().to_vec());
        assert_eq!(response.status, 202, "{what}: {}", response.text());
        assert!(response.body.is_empty(), "{what}: {}", response.text());
    }
    // An empty body is no message: a parse error, not silence.
    let response = session.post(Vec::new());
    assert_eq!(response.status, 400, "{}", response.text());
    let reply = response.json();
    assert_eq!(reply["error"]["code"], mcp_shapes::PARSE_ERROR, "{reply}");
    assert!(reply["id"].is_null(), "{reply}");
    session.assert_lists_tools();
    session.assert_usable();
}

#[test]
fn http_names_rmcps_reason_for_params_only_rmcp_refuses() {
    let mut session = Session::start();
    // stdio takes this; rmcp's schema wants capabilities and clientInfo too. Alone, rmcp
    // would answer "method not found".
    let body = json!({
        "jsonrpc": "2.0", "id": 40, "method": "initialize",
        "params": { "protocolVersion": "2025-06-18" },
    });
    let response = session.post(body.to_string().into_bytes());
    assert_eq!(response.status, 200, "{}", response.text());
    let reply = rpc_reply(&response);
    assert_eq!(reply["id"], 40, "{reply}");
    assert_eq!(
        reply["error"]["code"],
        mcp_shapes::INVALID_PARAMS,
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Invalid params: initialize params do not fit the MCP schema")
            && message.contains("capabilities"),
        "{message}"
    );
    session.assert_lists_tools();
}

/// `toolbox mcp` on stdio after `initialize`, for comparing its answers with `/mcp`'s.
struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    replies: Receiver<String>,
    _ws: tempfile::TempDir,
}

impl StdioServer {
    fn start() -> StdioServer {
        let ws = tempfile::tempdir().unwrap();
        let mut child = common::mcp_full(ws.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let replies = common::line_reader(child.stdout.take().unwrap());
        let stdin = child.stdin.take().unwrap();
        let mut stdio = StdioServer {
            child,
            stdin,
            replies,
            _ws: ws,
        };
        let init = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "error-shapes-test", "version": "0" },
            },
        });
        let reply = stdio.ask(init.to_string().as_bytes());
        assert_eq!(reply["id"], 0, "{reply}");
        stdio
    }

    /// Sends one line and reads the one reply.
    fn ask(&mut self, line: &[u8]) -> Value {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
        let limit = Duration::from_secs(30);
        let reply = self
            .replies
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no stdio reply within {limit:?}: {e}"));
        serde_json::from_str(&reply).unwrap()
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn both_transports_give_the_same_errors() {
    let mut http = Session::start();
    let mut stdio = StdioServer::start();
    for shape in Shape::ALL {
        for case in mcp_shapes::cases(shape) {
            let over_http = rpc_reply(&http.post(case.body.clone()));
            let over_stdio = stdio.ask(&case.body);
            let what = case.what;
            assert_eq!(over_http["id"], over_stdio["id"], "{what}");
            assert_eq!(
                mcp_shapes::check_error(shape, &case, &over_http),
                mcp_shapes::check_error(shape, &case, &over_stdio),
                "{what}: the transports disagree"
            );
        }
    }
}
