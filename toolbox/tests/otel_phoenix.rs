//! OpenTelemetry export into a real collector: Arize Phoenix (PyPI `arize-phoenix`,
//! installed by scripts/test.sh into target/phoenix-venv), started on 127.0.0.1 with its
//! database in a temporary folder. toolbox sends OTLP/HTTP to it; the spans are read back
//! through Phoenix's REST API (`GET /v1/projects/default/spans`), as a person would find them.
//!
//! - A scripted turn through `toolbox serve` (two tool calls, a denial, a sub-agent) under a
//!   client's `traceparent`: one trace, with `invoke_agent` → `chat` and `execute_tool`, and
//!   `execute_tool call_agent` → `invoke_agent helper` → `chat`, each with its attributes.
//! - One call through `toolbox router` to a session server: the host's span joins the
//!   client's trace (the router passes `traceparent` on), and the same over gRPC.

mod common;
mod serve_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{file_store, session_server_command, Server, IO_LIMIT};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

/// How long Phoenix may take to start, and an export to show up (hang detectors).
const LIMIT: Duration = Duration::from_secs(90);

/// Where scripts/test.sh installed Phoenix's `phoenix` command.
fn phoenix_command() -> PathBuf {
    let path = std::env::var_os("TOOLBOX_TEST_PHOENIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/phoenix-venv/bin/phoenix")
        });
    assert!(
        path.is_file(),
        "this test needs Arize Phoenix from PyPI: run scripts/test.sh, or set \
         TOOLBOX_TEST_PHOENIX to its `phoenix` command (looked at {})",
        path.display()
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running Phoenix: its HTTP port (UI, REST and OTLP/HTTP) and its gRPC port.
struct Phoenix {
    child: Option<Child>,
    port: u16,
    grpc_port: u16,
    _dir: tempfile::TempDir,
}

impl Phoenix {
    /// A Phoenix of the test's own; or, with `TOOLBOX_TEST_PHOENIX_PORTS=HTTP,GRPC`, the one
    /// already running on those ports of 127.0.0.1 (to look at the test's traces in its UI
    /// afterwards).
    fn start() -> Phoenix {
        let dir = tempfile::tempdir().unwrap();
        if let Ok(ports) = std::env::var("TOOLBOX_TEST_PHOENIX_PORTS") {
            let (http, grpc) = ports.split_once(',').expect("HTTP,GRPC");
            return Phoenix {
                child: None,
                port: http.parse().unwrap(),
                grpc_port: grpc.parse().unwrap(),
                _dir: dir,
            };
        }
        let (port, grpc_port) = (free_port(), free_port());
        let log = std::fs::File::create(dir.path().join("phoenix.log")).unwrap();
        let child = Command::new(phoenix_command())
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let phoenix = Phoenix {
            child: Some(child),
            port,
            grpc_port,
            _dir: dir,
        };
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            if phoenix.get("/healthz").is_some_and(|(s, _)| s == 200) {
                return phoenix;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!("Phoenix did not start: {}", phoenix.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("phoenix.log")).unwrap_or_default()
    }

    fn http(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(IO_LIMIT)).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        Some((status, body))
    }

    /// The spans of `trace_id` Phoenix has stored, once there are at least `count`.
    fn spans(&self, trace_id: &str, count: usize) -> Vec<Value> {
        let start = Instant::now();
        let mut last = Vec::new();
        while start.elapsed() < LIMIT {
            if let Some((200, body)) = self.get(&format!(
                "/v1/projects/default/spans?limit=1000&trace_id={trace_id}"
            )) {
                let page: Value = serde_json::from_str(&body).unwrap();
                last = page["data"].as_array().cloned().unwrap_or_default();
                last.retain(|s| s["context"]["trace_id"] == trace_id);
                if last.len() >= count {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let names: Vec<&Value> = last.iter().map(|s| &s["name"]).collect();
        panic!(
            "Phoenix has {} spans of {trace_id}, not {count}: {names:?}",
            last.len()
        );
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn one<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name}: {found:?}");
    found[0]
}

fn id(span: &Value) -> &Value {
    &span["context"]["span_id"]
}

const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// A trace id of this run's own (a Phoenix kept between runs holds the last run's traces).
fn new_trace_id(n: u8) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{n:02x}{:014x}{:016x}", std::process::id(), nanos as u64)
}

fn write_agent(ws: &Path, name: &str) {
    let dir = ws.join(".toolbox/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.md")),
        format!("---\nname: {name}\ndescription: reads files\ntoolsets: [files]\n---\nYou read files.\n"),
    )
    .unwrap();
}

#[test]
fn phoenix_receives_one_trace_per_turn_and_one_across_the_router() {
    let phoenix = Phoenix::start();
    let endpoint = phoenix.http();
    let client_trace = new_trace_id(0);

    // --- A turn through toolbox serve ------------------------------------------------
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "the notes say hello\n").unwrap();
    write_agent(ws.path(), "helper");
    let llm = ScriptedLlm::start(vec![
        // Two calls that run and one the turn's read_only mode denies.
        Scripted::calls(vec![
            ("c1", "file_manager__list", json!({})),
            ("c2", "file_manager__read", json!({"path": "notes.txt"})),
            ("c3", "shell", json!({"command": "echo denied"})),
        ]),
        // A sub-agent.
        Scripted::call(
            "c4",
            "call_agent",
            json!({"agent": "helper", "task": "what do the notes say?"}),
        ),
        Scripted::text("They say hello."),
        Scripted::text("Done: the notes say hello."),
    ]);
    let mut cmd = serve_common::serve_command(ws.path(), Some(&llm), &["--mode", "auto"]);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let server = Server::spawn(cmd, ws.path());
    let r = server
        .req("POST", "/api/sessions/t1/turns")
        .header(
            "traceparent",
            &format!("00-{client_trace}-{CLIENT_SPAN}-01"),
        )
        .json(&json!({"message": "read the notes", "permission_mode": "read_only"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    server.wait_not_running("t1");
    assert_eq!(llm.remaining(), 0, "{}", server.stderr());

    // 1 invoke_agent default, 3 chat, 3 execute_tool, call_agent, helper, 1 chat = 10.
    let spans = phoenix.spans(&client_trace, 10);
    let turn = one(&spans, "invoke_agent default");
    assert_eq!(
        turn["parent_id"], CLIENT_SPAN,
        "the client's span is the parent"
    );
    assert_eq!(turn["span_kind"], "AGENT");
    let a = &turn["attributes"];
    assert_eq!(a["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(a["gen_ai.agent.name"], "default");
    assert_eq!(a["gen_ai.conversation.id"], "t1");
    assert_eq!(a["gen_ai.provider.name"], "openai");
    assert_eq!(a["gen_ai.request.model"], "scripted-model");

    let chats = named(&spans, "chat scripted-model");
    assert_eq!(chats.len(), 4, "{spans:?}");
    for chat in &chats {
        assert_eq!(chat["span_kind"], "LLM");
        let a = &chat["attributes"];
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert!(
            a["gen_ai.usage.input_tokens"].as_i64().unwrap() > 0,
            "{chat}"
        );
        assert!(a["gen_ai.usage.output_tokens"].as_i64().is_some(), "{chat}");
    }
    let under_turn = chats.iter().filter(|c| c["parent_id"] == *id(turn)).count();
    assert_eq!(under_turn, 3);

    for tool in ["file_manager__list", "file_manager__read"] {
        let span = one(&spans, &format!("execute_tool {tool}"));
        assert_eq!(span["parent_id"], *id(turn));
        assert_eq!(span["span_kind"], "TOOL");
        // Success leaves the status unset, as OTel asks of instrumentation.
        assert_eq!(span["status_code"], "UNSET", "{span}");
        let a = &span["attributes"];
        assert_eq!(a["gen_ai.tool.name"], tool);
        assert_eq!(a["toolbox.tool.risk"], "read");
        assert_eq!(a["toolbox.permission.decision"], "allow");
        assert_eq!(a["toolbox.session.id"], "t1");
        assert!(a.get("gen_ai.tool.call.arguments").is_none(), "{span}");
    }
    let denied = one(&spans, "execute_tool shell");
    assert_eq!(denied["status_code"], "ERROR");
    assert_eq!(denied["attributes"]["error.type"], "denied");
    assert_eq!(denied["attributes"]["toolbox.permission.decision"], "deny");
    assert_eq!(denied["attributes"]["gen_ai.tool.call.id"], "c3");

    let handoff = one(&spans, "execute_tool call_agent");
    assert_eq!(handoff["parent_id"], *id(turn));
    let helper = one(&spans, "invoke_agent helper");
    assert_eq!(
        helper["parent_id"],
        *id(handoff),
        "the sub-agent runs inside the hand-off"
    );
    assert_eq!(helper["attributes"]["gen_ai.agent.name"], "helper");
    let helper_chat = chats.iter().find(|c| c["parent_id"] == *id(helper));
    assert!(
        helper_chat.is_some(),
        "the helper's model request is its child"
    );
    drop(server);

    // --- One call through the router to a session server ------------------------------
    for (protocol, endpoint, trace) in [
        (
            "http/protobuf",
            phoenix.http(),
            "1bf92f3577b34da6a3ce929d0e0e4736",
        ),
        (
            "grpc",
            format!("http://127.0.0.1:{}", phoenix.grpc_port),
            "2bf92f3577b34da6a3ce929d0e0e4736",
        ),
    ] {
        let top = tempfile::tempdir().unwrap();
        let sid = "r1";
        let host_ws = top.path().join("host");
        std::fs::create_dir_all(&host_ws).unwrap();
        std::fs::write(host_ws.join("a.txt"), "through the router\n").unwrap();
        let host_token = "host-token-0123456789abcdef";
        let mut cmd = session_server_command(
            &host_ws,
            None,
            sid,
            1,
            &file_store(&top.path().join("store")),
            None,
        );
        cmd.env("TOOLBOX_SERVE_TOKEN", host_token)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_BSP_SCHEDULE_DELAY", "100");
        let host = Server::spawn(cmd, &host_ws);
        let adapter = stub_adapter(sid, &format!("http://{}", host.addr), host_token);
        let router_ws = top.path().join("router");
        std::fs::create_dir_all(&router_ws).unwrap();
        let mut cmd = common::toolbox(&router_ws);
        cmd.args(["router", "--listen", "127.0.0.1:0", "--placement", &adapter])
            .env("TOOLBOX_ROUTER_TOKEN", "router-token-0123456789abcdef");
        let router = Server::spawn(cmd, &router_ws).with_token("router-token-0123456789abcdef");
        let r = router
            .req(
                "POST",
                &format!("/api/sessions/{sid}/tools/file_manager__read"),
            )
            .header("traceparent", &format!("00-{trace}-{CLIENT_SPAN}-01"))
            .json(&json!({"path": "a.txt"}))
            .send();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["status"], "done");
        let spans = phoenix.spans(trace, 1);
        let span = one(&spans, "execute_tool file_manager__read");
        assert_eq!(span["parent_id"], CLIENT_SPAN, "{protocol}: {span}");
        assert_eq!(span["attributes"]["toolbox.session.id"], sid);
    }
}

/// A placement adapter that places `sid` on the one session server at `url`.
fn stub_adapter(sid: &str, url: &str, token: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = json!({"sid": sid, "url": url, "token": token, "epoch": 1, "node": "n1"});
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(IO_LIMIT));
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut len = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let reply = if line.contains(":ensure") {
                answer.to_string()
            } else {
                json!({"sessions": []}).to_string()
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    format!("http://{addr}")
}
