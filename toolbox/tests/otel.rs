//! OpenTelemetry export through the real binary, against a stand-in OTLP/HTTP collector
//! written here (std::net on 127.0.0.1; it decodes the protobuf bodies with the OTLP
//! messages the exporter itself is built on):
//!
//! - off by default: nothing is sent;
//! - `toolbox mcp`: an `execute_tool {tool}` span per call with the GenAI attributes, its
//!   risk and permission decision; a `traceparent` in `params._meta` becomes the parent; a
//!   shell command sees `TRACEPARENT` naming the call's own span; the tool-duration histogram;
//! - arguments and results only when the operator opts in, cut and with secrets redacted;
//! - a collector that never answers: calls still finish, spans past the queue are dropped
//!   and the count is said at exit;
//! - `toolbox serve`: MCP over HTTP (`_meta`, or the `traceparent` header) and the REST call;
//! - bad settings are usage errors naming the key; a workspace's `[otel]` is refused.
//!
//! The real collector (Arize Phoenix), `toolbox serve` turns and the router are in
//! `otel_phoenix.rs`.

mod common;
mod serve_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

/// How long a test waits for a reply or an export (a hang detector, not a measurement).
const LIMIT: Duration = Duration::from_secs(30);

/// What the stand-in collector received.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Request headers of the last export, lower-case names.
    headers: HashMap<String, String>,
}

/// An OTLP/HTTP collector on 127.0.0.1: `POST /v1/traces` and `/v1/metrics`, protobuf.
struct Collector {
    addr: std::net::SocketAddr,
    received: Arc<Mutex<Received>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Received>> = Arc::default();
        let shared = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || serve(stream, &shared));
            }
        });
        Collector { addr, received }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Waits until `done` holds for what was received; panics with what came otherwise.
    fn wait(&self, what: &str, done: impl Fn(&Received) -> bool) {
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            if done(&self.received.lock().unwrap()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let names: Vec<String> = self.spans().iter().map(|s| s.name.clone()).collect();
        panic!("the collector never got {what}; spans: {names:?}");
    }

    fn spans(&self) -> Vec<Span> {
        self.received.lock().unwrap().spans.clone()
    }
}

/// One connection: HTTP/1.1 requests with a Content-Length, kept alive.
fn serve(stream: TcpStream, shared: &Mutex<Received>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut headers = HashMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        {
            let mut r = shared.lock().unwrap();
            match path.as_str() {
                "/v1/traces" => {
                    let req = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
                    for rs in req.resource_spans {
                        for ss in rs.scope_spans {
                            r.spans.extend(ss.spans);
                        }
                    }
                }
                "/v1/metrics" => {
                    r.metrics
                        .push(ExportMetricsServiceRequest::decode(body.as_slice()).unwrap());
                }
                _ => {}
            }
            r.headers = headers;
        }
        let _ = writer.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
        );
    }
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| {
            Some(match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => json!(s),
                AnyValue::IntValue(i) => json!(i),
                AnyValue::DoubleValue(d) => json!(d),
                AnyValue::BoolValue(b) => json!(b),
                other => json!(format!("{other:?}")),
            })
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `toolbox mcp --mode full` in `ws` exporting to `collector`, with `env` added.
struct Mcp {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: Receiver<String>,
    next: u64,
}

impl Mcp {
    fn start(ws: &Path, env: &[(&str, &str)]) -> Mcp {
        let mut cmd = common::toolbox(ws);
        cmd.args(["mcp", "--mode", "full", "--workspace"])
            .arg(ws)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = common::line_reader(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            child,
            stdin,
            lines,
            next: 1,
        };
        mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            let line = self
                .lines
                .recv_timeout(LIMIT)
                .expect("toolbox mcp answered nothing");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == json!(id) {
                return v;
            }
        }
        panic!("no answer to {method}");
    }

    fn call(&mut self, name: &str, arguments: Value, meta: Option<Value>) -> String {
        let mut params = json!({"name": name, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        let reply = self.request("tools/call", params);
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{reply}"))
            .to_string()
    }

    /// Closes stdin, waits for the exit and returns stderr.
    fn finish(self) -> String {
        let Mcp {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            if child.try_wait().unwrap().is_some() {
                let mut err = String::new();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                return err;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        panic!("toolbox mcp did not exit after stdin closed");
    }
}

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

#[test]
fn mcp_calls_export_execute_tool_spans_parented_on_meta_with_the_duration_metric() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello\n").unwrap();
    let collector = Collector::start();
    let url = collector.url();
    let mut mcp = Mcp::start(
        ws.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-project=toolbox-test"),
        ],
    );
    let traceparent = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let read = mcp.call(
        "read_file",
        json!({"path": "notes.txt"}),
        Some(json!({"traceparent": traceparent, "tracestate": "vendor=1"})),
    );
    assert!(read.contains("hello"), "{read}");
    let shell = mcp.call(
        "shell",
        json!({"command": "echo \"TP=$TRACEPARENT\""}),
        None,
    );
    // A bad traceparent is ignored: the call starts a trace of its own.
    let missing = mcp.call(
        "file_manager__read",
        json!({"path": "missing.txt"}),
        Some(json!({"traceparent": "00-zz-zz-01"})),
    );
    assert!(missing.contains("missing.txt"), "{missing}");
    collector.wait("three execute_tool spans", |r| r.spans.len() >= 3);
    let stderr = mcp.finish();
    let spans = collector.spans();
    let by_tool = |tool: &str| {
        spans
            .iter()
            .filter(|s| attr(s, "gen_ai.tool.name") == Some(json!(tool)))
            .cloned()
            .collect::<Vec<_>>()
    };

    // read_file is an alias: the span names the canonical tool, the alias is kept.
    let read_spans = by_tool("file_manager__read");
    assert_eq!(read_spans.len(), 2, "{stderr}");
    let read = read_spans
        .iter()
        .find(|s| attr(s, "toolbox.tool.called_as") == Some(json!("read_file")))
        .expect("the read_file call's span");
    assert_eq!(read.name, "execute_tool file_manager__read");
    assert_eq!(hex(&read.trace_id), PARENT_TRACE);
    assert_eq!(hex(&read.parent_span_id), PARENT_SPAN);
    assert_eq!(read.trace_state, "vendor=1");
    assert_eq!(
        attr(read, "gen_ai.operation.name"),
        Some(json!("execute_tool"))
    );
    assert_eq!(attr(read, "gen_ai.tool.type"), Some(json!("function")));
    assert_eq!(attr(read, "gen_ai.tool.call.id"), Some(json!("mcp-0")));
    assert_eq!(attr(read, "toolbox.tool.risk"), Some(json!("read")));
    assert_eq!(
        attr(read, "toolbox.permission.decision"),
        Some(json!("allow"))
    );
    assert_eq!(attr(read, "error.type"), None);
    // Nothing of the content unless the operator opts in.
    assert_eq!(attr(read, "gen_ai.tool.call.arguments"), None);
    assert_eq!(attr(read, "gen_ai.tool.call.result"), None);

    let failed = read_spans
        .iter()
        .find(|s| attr(s, "toolbox.tool.called_as").is_none())
        .unwrap();
    assert_eq!(attr(failed, "error.type"), Some(json!("tool_error")));
    assert_eq!(
        failed.status.as_ref().map(|s| s.code),
        Some(2),
        "status ERROR"
    );
    assert!(failed.parent_span_id.is_empty(), "a root span");
    assert_ne!(hex(&failed.trace_id), PARENT_TRACE);

    // The shell command saw its own call's span as TRACEPARENT.
    let shell_span = &by_tool("shell")[0];
    let expected = format!(
        "TP=00-{}-{}-01",
        hex(&shell_span.trace_id),
        hex(&shell_span.span_id)
    );
    assert!(shell.contains(&expected), "{shell}\nwanted {expected}");
    assert_eq!(
        attr(shell_span, "toolbox.tool.risk"),
        Some(json!("command"))
    );

    // The headers asked for went with the export.
    assert_eq!(
        collector.received.lock().unwrap().headers.get("x-project"),
        Some(&"toolbox-test".to_string())
    );
    // The duration histogram was sent at exit: three calls, by tool.
    let received = collector.received.lock().unwrap();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for request in &received.metrics {
        for rm in &request.resource_metrics {
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    if m.name != "gen_ai.execute_tool.duration" {
                        continue;
                    }
                    assert_eq!(m.unit, "s");
                    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
                    let Some(Data::Histogram(h)) = &m.data else {
                        panic!("not a histogram: {m:?}")
                    };
                    for p in &h.data_points {
                        let tool = p
                            .attributes
                            .iter()
                            .find(|kv| kv.key == "gen_ai.tool.name")
                            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                AnyValue::StringValue(s) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap();
                        *counts.entry(tool).or_default() += p.count;
                    }
                }
            }
        }
    }
    assert_eq!(counts.get("file_manager__read"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("shell"), Some(&1), "{counts:?}");
    assert!(!stderr.contains("dropped"), "{stderr}");
}

#[test]
fn serve_takes_the_parent_from_mcp_meta_the_http_header_and_the_rest_call() {
    use serve_common::{Server, TOKEN};
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello\n").unwrap();
    let collector = Collector::start();
    let mut cmd =
        serve_common::serve_command(ws.path(), None, &["--token", TOKEN, "--mode", "full"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url())
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("OTEL_METRICS_EXPORTER", "none");
    let server = Server::spawn(cmd, ws.path()).with_token(TOKEN);
    let post = |session: Option<&str>, extra: Option<(&str, &str)>, body: Value| {
        let mut req = server
            .req("POST", "/mcp")
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            req = req
                .header("Mcp-Session-Id", session)
                .header("MCP-Protocol-Version", "2025-06-18");
        }
        if let Some((name, value)) = extra {
            req = req.header(name, value);
        }
        req.send()
    };
    let init = post(
        None,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "otel-test", "version": "0"}}}),
    );
    assert_eq!(init.status, 200, "{}", init.text());
    let session = init.header("mcp-session-id").unwrap().to_string();
    let done = post(
        Some(&session),
        None,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(done.status, 202);
    let trace = |n: u8| format!("{n}bf92f3577b34da6a3ce929d0e0e4736");
    let call = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "file_manager__read", "arguments": {"path": "notes.txt"}}})
    };
    let mut by_meta = call("meta");
    by_meta["params"]["_meta"] =
        json!({"traceparent": format!("00-{}-{PARENT_SPAN}-01", trace(1))});
    assert_eq!(post(Some(&session), None, by_meta).status, 200);
    let by_header = format!("00-{}-{PARENT_SPAN}-01", trace(2));
    assert_eq!(
        post(
            Some(&session),
            Some(("traceparent", &by_header)),
            call("header")
        )
        .status,
        200
    );
    let rest = server
        .req("POST", "/api/sessions/s1/tools/file_manager__read")
        .header("traceparent", &format!("00-{}-{PARENT_SPAN}-01", trace(3)))
        .json(&json!({"path": "notes.txt"}))
        .send();
    assert_eq!(rest.status, 200, "{}", rest.text());
    // A call that asks a person: its span says so, and how long it waited. Someone must
    // follow the session's events for a question to be asked at all.
    let events = server.events("s1", None);
    assert_eq!(events.status, 200);
    let asking = {
        let req = server
            .req(
                "POST",
                "/api/sessions/s1/tools/shell?mode=auto&call_id=ask1",
            )
            .json(&json!({"command": "echo approved"}));
        std::thread::spawn(move || req.send())
    };
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let ok = server.post(
            "/api/tool-approval/s1/ask1",
            &json!({"decision": "approve"}),
        );
        if ok.status == 200 {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the approval was never asked: {}",
            ok.text()
        );
    }
    let ran = asking.join().unwrap();
    assert!(ran.text().contains("approved"), "{}", ran.text());
    collector.wait("four spans", |r| r.spans.len() >= 4);
    let spans = collector.spans();
    // The health endpoint counts them too.
    let health = server.get("/api/health").json();
    assert!(health["otel"]["spans"].as_u64().unwrap() >= 4, "{health}");
    assert_eq!(health["otel"]["dropped"], 0, "{health}");
    let asked = spans
        .iter()
        .find(|s| s.name == "execute_tool shell")
        .unwrap();
    assert_eq!(
        attr(asked, "toolbox.permission.decision"),
        Some(json!("ask"))
    );
    assert_eq!(attr(asked, "gen_ai.tool.call.id"), Some(json!("ask1")));
    let waited = attr(asked, "toolbox.approval.wait_s").and_then(|v| v.as_f64());
    assert!(waited.is_some_and(|w| w > 0.0), "{asked:?}");
    assert!(
        attr(asked, "toolbox.approval.answered_by").is_some(),
        "{asked:?}"
    );
    for n in 1..=3 {
        let span = spans
            .iter()
            .find(|s| hex(&s.trace_id) == trace(n))
            .unwrap_or_else(|| panic!("no span in trace {n}"));
        assert_eq!(span.name, "execute_tool file_manager__read");
        assert_eq!(hex(&span.parent_span_id), PARENT_SPAN);
    }
}

/// The Python the tests use (scripts/test.sh's venv), for the embedded interpreter and the
/// fake language server.
fn python() -> String {
    std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

#[test]
fn python_code_its_children_and_a_language_server_get_the_calls_traceparent() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.py"), "x = 1\n").unwrap();
    let collector = Collector::start();
    let fake = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fake_lsp.py");
    let config = ws.path().join("operator.toml");
    std::fs::write(
        &config,
        format!(
            "[otel]\nendpoint = \"{}\"\nschedule_delay_ms = 50\nmetrics = false\n\
             [python]\ninterpreter = {:?}\n\
             [lsp]\nbuiltin_servers = false\n\
             [lsp.servers.envy]\ncommand = [{:?}, {fake:?}, \"env\", \"TRACEPARENT\"]\nextensions = [\"py\"]\n",
            collector.url(),
            python(),
            python(),
        ),
    )
    .unwrap();
    let mut mcp = Mcp::start(ws.path(), &[("TOOLBOX_CONFIG", config.to_str().unwrap())]);
    let code = "import os, subprocess\n\
                print('code', os.environ.get('TRACEPARENT'))\n\
                print(subprocess.run(['sh', '-c', 'echo child $TRACEPARENT'], capture_output=True, text=True).stdout)";
    let first = mcp.call("run_python_code", json!({"code": code}), None);
    let second = mcp.call("run_python_code", json!({"code": code}), None);
    let hover = mcp.call(
        "lsp__hover",
        json!({"path": "a.py", "line": 1, "column": 1}),
        None,
    );
    collector.wait("three spans", |r| r.spans.len() >= 3);
    mcp.finish();
    let spans = collector.spans();
    let own = |span: &Span| format!("00-{}-{}-01", hex(&span.trace_id), hex(&span.span_id));
    let python_spans: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name == "execute_tool run_python_code")
        .collect();
    assert_eq!(python_spans.len(), 2);
    // Each run sees its own call's span, in os.environ and in what it starts.
    for (out, span) in [(&first, python_spans[0]), (&second, python_spans[1])] {
        let tp = own(span);
        assert!(out.contains(&format!("code {tp}")), "{out}\nwanted {tp}");
        assert!(out.contains(&format!("child {tp}")), "{out}\nwanted {tp}");
    }
    let lsp = spans
        .iter()
        .find(|s| s.name == "execute_tool lsp__hover")
        .unwrap();
    assert!(
        hover.contains(&format!("TRACEPARENT={}", own(lsp))),
        "{hover}"
    );
}

#[test]
fn content_is_exported_only_when_opted_in_cut_and_with_secrets_redacted() {
    let ws = tempfile::tempdir().unwrap();
    let collector = Collector::start();
    let config = ws.path().join("operator.toml");
    std::fs::write(
        &config,
        format!(
            "[otel]\nendpoint = \"{}\"\nrecord_content = true\ncontent_max_chars = 300\nschedule_delay_ms = 50\nmetrics = false\n",
            collector.url()
        ),
    )
    .unwrap();
    let secret = "sk-live-0123456789abcdef";
    let config_path = config.to_str().unwrap();
    let mut mcp = Mcp::start(
        ws.path(),
        &[("TOOLBOX_CONFIG", config_path), ("DEMO_API_KEY", secret)],
    );
    let out = mcp.call(
        "shell",
        json!({"command": format!("echo {secret}; printf 'x%.0s' $(seq 1 400)")}),
        None,
    );
    assert!(out.contains(secret), "{out}");
    collector.wait("the shell span", |r| !r.spans.is_empty());
    mcp.finish();
    let span = &collector.spans()[0];
    let args = attr(span, "gen_ai.tool.call.arguments")
        .unwrap()
        .to_string();
    let result = attr(span, "gen_ai.tool.call.result").unwrap().to_string();
    for text in [&args, &result] {
        assert!(!text.contains(secret), "{text}");
        assert!(text.contains("<redacted>"), "{text}");
    }
    assert!(result.contains("[cut at 300 characters]"), "{result}");
    assert!(result.chars().count() < 400, "{result}");
}

#[test]
fn a_collector_that_never_answers_costs_the_calls_nothing_and_the_drops_are_counted() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "a\n").unwrap();
    // Accepts connections and never reads or answers.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", hole.local_addr().unwrap());
    let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for s in hole.incoming().flatten() {
                held.lock().unwrap().push(s);
            }
        });
    }
    let mut mcp = Mcp::start(
        ws.path(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
            ("OTEL_BSP_SCHEDULE_DELAY", "10"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
    );
    for _ in 0..40 {
        let out = mcp.call("file_manager__read", json!({"path": "a.txt"}), None);
        assert!(out.contains('a'), "{out}");
    }
    let started = Instant::now();
    let stderr = mcp.finish();
    // The exit waits for the exporter at most about a second, not for the collector.
    assert!(started.elapsed() < Duration::from_secs(15), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("OpenTelemetry:"))
        .unwrap_or_else(|| panic!("no count of lost spans at exit: {stderr}"));
    let number = |word: &str| -> u64 {
        let before = line.split(word).next().unwrap();
        before
            .split_whitespace()
            .last()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    let spans: u64 = line
        .split("of ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    let (exported, dropped) = (number(" exported"), number(" dropped"));
    let (failed, unsent) = (number(" not accepted"), number(" still unsent"));
    // Every span is accounted for, and the full queue dropped some.
    assert_eq!(spans, 40, "{line}");
    assert_eq!(exported, 0, "{line}");
    assert_eq!(exported + dropped + failed + unsent, spans, "{line}");
    assert!(dropped > 0, "{line}");
    assert!(line.contains(&url), "{line}");
}

#[test]
fn bad_settings_are_usage_errors_and_a_workspace_may_not_set_otel() {
    let ws = tempfile::tempdir().unwrap();
    let run = |env: &[(&str, &str)]| {
        let out = common::toolbox(ws.path())
            .args(["call", "file_manager__list", "{}"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL") && err.contains("not supported"),
        "{err}"
    );
    let config = ws.path().join("op.toml");
    std::fs::write(&config, "[otel]\nendpoint = \"ftp://collector\"\n").unwrap();
    let (code, err) = run(&[("TOOLBOX_CONFIG", config.to_str().unwrap())]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[otel] endpoint"), "{err}");
    // doctor says where spans go, or that they go nowhere.
    let doctor = |env: &[(&str, &str)]| {
        let out = common::toolbox(ws.path())
            .arg("doctor")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let on = doctor(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ]);
    assert!(on.contains("spans to http://127.0.0.1:9 over grpc"), "{on}");
    assert!(
        doctor(&[]).contains("OpenTelemetry export"),
        "doctor names it when off too"
    );
    // Off by default, and nothing is said.
    let (code, err) = run(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("OpenTelemetry"), "{err}");
    // A repository's own toolbox.toml may not send its user's traces anywhere.
    std::fs::write(
        ws.path().join("toolbox.toml"),
        "[otel]\nendpoint = \"http://evil.example:4318\"\n",
    )
    .unwrap();
    let (code, err) = run(&[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("[otel] endpoint"), "{err}");
}
