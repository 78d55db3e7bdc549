//! Progress on long data work (issue 39, point 4), through the real binary: a
//! `data__validate` reports rows and bytes as it reads, and each front end shows it:
//! `notifications/progress` with `progress` and `total` to an MCP client that sent a
//! `progressToken`, on stdio (`toolbox mcp`) and over HTTP (`/mcp` of `toolbox serve`);
//! `tool_call_progress` on the session's event stream; a line redrawn in place on
//! `toolbox call`'s stderr when it is a terminal, and nothing when it is not.
//!
//! `TOOLBOX_DATA_PROGRESS_MS=0` takes away the first second's wait and the pace, so a report
//! comes every time the reporter looks at the clock (every 256 rows): what is checked never
//! depends on how fast the machine is.

mod common;
mod serve_common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::{serve_command, Server, TOKEN};

/// Rows in the test file: many reports at one per 256 rows, and a file (about 2 MB) well
/// past the reader's buffer, so the bytes read grow from one report to the next.
const ROWS: u64 = 20_000;
/// Only a guard against a hang.
const LIMIT: Duration = Duration::from_secs(120);
/// What the progress line erases with.
const ERASE: &str = "\r\x1b[2K";

/// The pace variable, at "report whenever you look".
fn every_time() -> (&'static str, &'static str) {
    ("TOOLBOX_DATA_PROGRESS_MS", "0")
}

/// Writes `rows.jsonl` in `ws`; its size in bytes.
fn data_file(ws: &Path) -> u64 {
    let mut text = String::new();
    for i in 0..ROWS {
        text.push_str(&format!(
            "{{\"id\": {i}, \"name\": \"row number {i}\", \"note\": \"{:>60}\"}}\n",
            "padding"
        ));
    }
    std::fs::write(ws.join("rows.jsonl"), &text).unwrap();
    text.len() as u64
}

fn validate_args() -> Value {
    json!({
        "path": "rows.jsonl",
        "schema": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    })
}

/// A JSON number as a whole number (rmcp writes `progress` and `total` as floats: `42.0`).
fn whole(v: &Value) -> u64 {
    let f = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    assert!(f >= 0.0 && f.fract() == 0.0, "not a whole number: {v}");
    f as u64
}

/// The `params` of a run of counted progress reports: each has the total, `progress` grows
/// every time, never past the total, and the last is the whole file, said in words.
fn check_reports(params: &[Value], size: u64) {
    assert!(params.len() >= 3, "too few progress reports: {params:#?}");
    let mut last = 0;
    for p in params {
        let progress = whole(&p["progress"]);
        assert!(progress > last, "progress must grow: {params:#?}");
        assert!(progress <= size, "{p}");
        assert_eq!(whole(&p["total"]), size, "{p}");
        let message = p["message"].as_str().unwrap();
        assert!(message.contains(" rows, "), "{p}");
        last = progress;
    }
    let end = params.last().unwrap();
    assert_eq!(whole(&end["progress"]), size, "{end}");
    let message = end["message"].as_str().unwrap();
    assert!(message.starts_with("20,000 rows, "), "{end}");
    assert!(message.ends_with("(100%)"), "{end}");
}

/// `toolbox mcp` in `ws` with the pace variable, initialized, spoken to line by line.
struct McpStdio {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl McpStdio {
    fn start(ws: &Path) -> McpStdio {
        let mut child = common::mcp_full(ws)
            .env(every_time().0, every_time().1)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = common::line_reader(child.stdout.take().unwrap());
        let mut mcp = McpStdio {
            child,
            stdin,
            lines,
        };
        mcp.send(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "progress-test", "version": "0"}},
        }));
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
            .recv_timeout(LIMIT)
            .expect("a line from toolbox mcp");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// Calls `tool` with `args` (and `_meta`, if any): the notifications before the reply,
    /// and the reply.
    fn call(
        &mut self,
        id: i64,
        tool: &str,
        args: Value,
        meta: Option<Value>,
    ) -> (Vec<Value>, Value) {
        let mut params = json!({"name": tool, "arguments": args});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}));
        let mut notes = Vec::new();
        loop {
            let line = self.next();
            if line.get("method").is_some() {
                notes.push(line);
            } else {
                assert_eq!(line["id"], id, "{line}");
                return (notes, line);
            }
        }
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_mcp_client_with_a_token_gets_counted_progress_on_stdio() {
    let ws = tempfile::tempdir().unwrap();
    let size = data_file(ws.path());
    let mut mcp = McpStdio::start(ws.path());
    let mut call = |id: i64, meta: Option<Value>| -> (Vec<Value>, Value) {
        mcp.call(id, "data__validate", validate_args(), meta)
    };

    let (notes, reply) = call(1, Some(json!({"progressToken": "validate-1"})));
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert_eq!(
        reply["result"]["structuredContent"]["valid"], ROWS,
        "{reply}"
    );
    let params: Vec<Value> = notes
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/progress", "{n}");
            assert_eq!(n["params"]["progressToken"], "validate-1", "{n}");
            n["params"].clone()
        })
        .collect();
    check_reports(&params, size);

    // No token, no logging level: the same call sends nothing before its reply.
    let (notes, reply) = call(2, None);
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    assert!(notes.is_empty(), "{notes:#?}");
}

/// `toolbox serve` in `ws` with a token and the pace variable.
fn serve(ws: &Path) -> Server {
    let mut cmd = serve_command(ws, None, &["--token", TOKEN, "--mode", "full"]);
    cmd.env(every_time().0, every_time().1);
    Server::spawn(cmd, ws).with_token(TOKEN)
}

/// POSTs a JSON-RPC message to `/mcp`, in `session` when given.
fn mcp_post(server: &Server, session: Option<&str>, body: &Value) -> serve_common::Response {
    let mut req = server
        .req("POST", "/mcp")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(body.to_string().into_bytes());
    if let Some(session) = session {
        req = req
            .header("Mcp-Session-Id", session)
            .header("MCP-Protocol-Version", "2025-06-18");
    }
    req.send()
}

/// The JSON-RPC messages of a response: its body, or each `data:` of its event stream.
fn messages(response: &serve_common::Response) -> Vec<Value> {
    let text = response.text();
    if response
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        return vec![serde_json::from_str(&text).unwrap()];
    }
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok())
        .collect()
}

#[test]
fn an_mcp_client_with_a_token_gets_counted_progress_over_http() {
    let ws = tempfile::tempdir().unwrap();
    let size = data_file(ws.path());
    let server = serve(ws.path());
    let init = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "progress-test", "version": "0"}},
    });
    let response = mcp_post(&server, None, &init);
    assert_eq!(response.status, 200, "{}", response.text());
    let session = response
        .header("mcp-session-id")
        .expect("an Mcp-Session-Id")
        .to_string();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(mcp_post(&server, Some(&session), &initialized).status, 202);
    let call = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "data__validate", "arguments": validate_args(),
            "_meta": {"progressToken": 41}},
    });
    let response = mcp_post(&server, Some(&session), &call);
    assert_eq!(response.status, 200, "{}", response.text());
    let all = messages(&response);
    let reply = all
        .iter()
        .find(|m| m["id"] == 1)
        .unwrap_or_else(|| panic!("no reply: {all:#?}"));
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    let params: Vec<Value> = all
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|n| {
            assert_eq!(n["params"]["progressToken"], 41, "{n}");
            n["params"].clone()
        })
        .collect();
    check_reports(&params, size);
    // Every notification came before the reply.
    assert_eq!(all.last().unwrap()["id"], 1, "{all:#?}");
}

#[test]
fn the_session_event_stream_carries_tool_call_progress() {
    let ws = tempfile::tempdir().unwrap();
    let size = data_file(ws.path());
    let server = serve(ws.path());
    let events = server.events("progress", None);
    assert_eq!(events.status, 200);
    let response = server.post(
        "/api/sessions/progress/tools/data__validate?call_id=v1",
        &validate_args(),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let mut reports = Vec::new();
    loop {
        let event = events.next();
        if event.kind() != "tool_call_progress" {
            continue;
        }
        let data = event.data;
        assert_eq!(data["call_id"], "v1", "{data}");
        assert_eq!(data["tool"], "data__validate", "{data}");
        let end = data["done"] == json!(size);
        reports.push(json!({
            "progress": data["done"], "total": data["total"], "message": data["message"],
        }));
        if end {
            break;
        }
    }
    check_reports(&reports, size);
}

#[test]
fn toolbox_call_draws_no_progress_line_when_stderr_is_no_terminal() {
    let ws = tempfile::tempdir().unwrap();
    data_file(ws.path());
    let out = common::toolbox(ws.path())
        .env(every_time().0, every_time().1)
        .args(["call", "data__validate", &validate_args().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let envelope: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(envelope["status"], "done", "{envelope}");
    assert!(!stderr.contains("rows"), "{stderr:?}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
}

#[test]
fn toolbox_call_on_a_terminal_redraws_one_progress_line_and_clears_it() {
    let ws = tempfile::tempdir().unwrap();
    data_file(ws.path());
    let args = format!("call data__validate '{}'", validate_args());
    let terminal = common::Terminal::start(ws.path(), &args, &[every_time()]);
    let (code, screen) = terminal.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen:?}");
    // Each report erases the line and draws the next over it: never a new line.
    let drawn = format!("{ERASE}data__validate: ");
    assert!(screen.matches(&drawn).count() >= 3, "{screen:?}");
    assert!(
        screen.contains(&format!("{drawn}20,000 rows, ")),
        "{screen:?}"
    );
    let first = screen.find(&drawn).unwrap();
    let envelope = screen.find("{\"").expect("the envelope");
    let between = &screen[first..envelope];
    assert!(
        !between.contains('\n'),
        "a report went on a new line: {between:?}"
    );
    // The last line is erased before the envelope is printed.
    assert!(between.ends_with(ERASE), "{between:?}");
    assert!(
        screen[envelope..].contains("\"status\":\"done\""),
        "{screen:?}"
    );
}

/// Rows of `rows.csv`: past the 20,480 rows read ahead to type its columns.
const CSV_ROWS: u64 = 100_000;

/// Writes `rows.csv` in `ws`; its size in bytes.
fn csv_file(ws: &Path) -> u64 {
    let mut text = String::from("id,name,note\n");
    for i in 0..CSV_ROWS {
        text.push_str(&format!("{i},row number {i},{:>60}\n", "padding"));
    }
    std::fs::write(ws.join("rows.csv"), &text).unwrap();
    text.len() as u64
}

#[test]
fn inspect_and_convert_report_progress_too() {
    let ws = tempfile::tempdir().unwrap();
    let jsonl = data_file(ws.path());
    let csv = csv_file(ws.path());
    let mut mcp = McpStdio::start(ws.path());
    let calls = [
        ("data__inspect", json!({"path": "rows.csv"}), csv, CSV_ROWS),
        ("data__inspect", json!({"path": "rows.jsonl"}), jsonl, ROWS),
        // CSV to Parquet in parallel chunks, CSV to JSONL on the fast path, and the
        // general path (a rename).
        (
            "data__convert",
            json!({"path": "rows.csv", "output": "out/r.parquet"}),
            csv,
            CSV_ROWS,
        ),
        (
            "data__convert",
            json!({"path": "rows.csv", "output": "out/r.jsonl"}),
            csv,
            CSV_ROWS,
        ),
        (
            "data__convert",
            json!({"path": "rows.jsonl", "output": "out/g.csv", "rename": ["id=key"]}),
            jsonl,
            ROWS,
        ),
    ];
    for (id, (tool, args, size, rows)) in calls.into_iter().enumerate() {
        let id = id as i64 + 1;
        let token = format!("p-{id}");
        let meta = json!({"progressToken": token});
        let (notes, reply) = mcp.call(id, tool, args.clone(), Some(meta));
        let params: Vec<Value> = notes
            .iter()
            .map(|n| {
                assert_eq!(n["params"]["progressToken"], json!(token), "{n}");
                n["params"].clone()
            })
            .collect();
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["result"]["isError"], false, "{tool} {args}: {reply}");
        // Reports grow to the whole file, with the rows in words.
        assert!(
            params.len() >= 3,
            "{tool} {args}: too few reports: {params:#?}"
        );
        let mut last = 0;
        for p in &params {
            let progress = whole(&p["progress"]);
            assert!(progress > last && progress <= size, "{tool}: {params:#?}");
            assert_eq!(whole(&p["total"]), size, "{p}");
            last = progress;
        }
        let end = params.last().unwrap();
        assert_eq!(whole(&end["progress"]), size, "{end}");
        let want = format!("{} rows, ", common_thousands(rows));
        let message = end["message"].as_str().unwrap();
        assert!(
            message.starts_with(&want) && message.ends_with("(100%)"),
            "{end}"
        );
    }
}

/// `n` with thousands separated by commas, as the reports write it.
fn common_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
