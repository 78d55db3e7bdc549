//! MCP over streamable HTTP (`toolbox_mcp::http`), driven by the official Python MCP client
//! (`mcp_http_client.py`, run with `TOOLBOX_TEST_PYTHON`, the test venv's python) against the
//! router nested at `/mcp` of an axum server on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use toolbox as _;
use toolbox_core::SessionId;
use toolbox_executor::{ExecutorConfig, PermissionMode, ToolExecutor};
use toolbox_host::CancellationToken;
use toolbox_mcp::http::{self as mcp, McpHttpOptions};
use toolbox_mcp::Fallback;

/// Only a guard against a hang: the script bounds each of its own steps as well.
const SCRIPT_LIMIT: Duration = Duration::from_secs(180);

/// How the router is mounted, both as docs/mcp-http.md says.
#[derive(Clone, Copy)]
enum Mount {
    Nest,
    NestService,
}

struct Server {
    url: String,
    workspace: TempDir,
    shutdown: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Server {
    fn path(&self, rel: &str) -> PathBuf {
        self.workspace.path().join(rel)
    }
}

async fn start(mode: PermissionMode, fallback: Fallback, mount: Mount) -> Server {
    start_with(mode, mount, |options| options.fallback = fallback).await
}

async fn start_with(
    mode: PermissionMode,
    mount: Mount,
    configure: impl FnOnce(&mut McpHttpOptions),
) -> Server {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "hello over http\n").unwrap();
    let mut config = ExecutorConfig::new(workspace.path());
    config.permissions.mode = mode;
    let executor = ToolExecutor::new(config).unwrap();
    let mut options = McpHttpOptions::new(Some(SessionId::parse("mcp").unwrap()));
    configure(&mut options);
    let shutdown = options.shutdown.clone();
    let mcp = mcp::router(executor, options);
    let app = match mount {
        Mount::Nest => axum::Router::new().nest("/mcp", mcp),
        Mount::NestService => axum::Router::new().nest_service("/mcp", mcp),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .unwrap();
    });
    Server {
        url: format!("http://{addr}/mcp"),
        workspace,
        shutdown,
    }
}

fn python() -> PathBuf {
    let python = std::env::var_os("TOOLBOX_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python")
        });
    assert!(
        python.is_file(),
        "these tests need the test venv with the Python `mcp` package (tests/requirements.txt): \
         run scripts/test.sh or set TOOLBOX_TEST_PYTHON (looked at {})",
        python.display()
    );
    python
}

/// Runs the client script on `scenario` and returns the JSON it printed.
async fn client(server: &Server, scenario: &str, extra: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_http_client.py");
    let run = tokio::process::Command::new(python())
        .arg(script)
        .arg(&server.url)
        .arg(scenario)
        .args(extra)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(SCRIPT_LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the MCP client ({scenario}) did not finish"))
        .expect("cannot run the test python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP client ({scenario}) failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn text(value: &Value) -> &str {
    value["text"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_the_stdio_tools_and_reads_a_file() {
    let server = start(PermissionMode::Auto, Fallback::Deny, Mount::Nest).await;
    let out = client(&server, "plain", &[]).await;
    assert_eq!(out["server"], "toolbox", "{out}");
    assert!(
        out["capabilities"]
            .as_array()
            .unwrap()
            .contains(&"tools".into()),
        "{out}"
    );
    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tools.contains(&"file_manager__read"), "{tools:?}");
    assert!(tools.contains(&"file_manager__write"), "{tools:?}");
    assert!(!tools.contains(&"call_agent"), "{tools:?}");
    assert!(
        !tools.contains(&"read_file"),
        "aliases are not listed: {tools:?}"
    );
    let read = &out["annotations"]["file_manager__read"];
    assert_eq!(read["readOnlyHint"], true, "{read}");
    assert_eq!(
        out["annotations"]["file_manager__write"]["destructiveHint"],
        true
    );

    assert_eq!(out["read"]["is_error"], false, "{out}");
    assert!(text(&out["read"]).contains("hello over http"), "{out}");

    // A name that is no tool is a protocol error, as on stdio.
    assert_eq!(out["unknown"]["code"], -32602, "{out}");
    assert!(
        out["unknown"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unknown tool: no_such_tool"),
        "{out}"
    );

    // The call ran in the session `mcp`.
    let trajectory = server.path(".toolbox/trajectories/mcp/tool_calls.jsonl");
    let lines = std::fs::read_to_string(&trajectory).unwrap();
    assert!(lines.contains("file_manager__read"), "{lines}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nest_service_mount_works_too() {
    let server = start(PermissionMode::Full, Fallback::Deny, Mount::NestService).await;
    let out = client(&server, "plain", &[]).await;
    assert!(text(&out["read"]).contains("hello over http"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approving_elicitation_runs_the_call() {
    let server = start(PermissionMode::Auto, Fallback::Deny, Mount::Nest).await;
    let out = client(&server, "approve", &[]).await;
    assert_eq!(out["write"]["is_error"], false, "{out}");
    assert_eq!(
        std::fs::read_to_string(server.path("approved.txt")).unwrap(),
        "from mcp"
    );
    let asked = out["elicitations"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{out}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("file_manager__write"), "{message}");
    assert!(message.contains("approved.txt"), "{message}");
    let schema = &asked[0]["requestedSchema"];
    assert_eq!(
        schema["required"],
        serde_json::json!(["decision"]),
        "{schema}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answered_deny_refuses_the_call() {
    let server = start(PermissionMode::Auto, Fallback::Approve, Mount::Nest).await;
    let out = client(&server, "deny", &[]).await;
    assert_eq!(out["write"]["is_error"], true, "{out}");
    assert!(text(&out["write"]).contains("denied"), "{out}");
    assert_eq!(out["elicitations"].as_array().unwrap().len(), 1, "{out}");
    assert!(!server.path("denied.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_elicitation_refuses_the_call() {
    let server = start(PermissionMode::Auto, Fallback::Approve, Mount::Nest).await;
    let out = client(&server, "decline", &[]).await;
    assert_eq!(out["write"]["is_error"], true, "{out}");
    assert!(
        text(&out["write"]).contains("the MCP client's user denied tool file_manager__write"),
        "{out}"
    );
    assert!(!server.path("declined.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_gets_the_deny_fallback() {
    let server = start(PermissionMode::Auto, Fallback::Deny, Mount::Nest).await;
    let out = client(&server, "no-elicit", &[]).await;
    assert_eq!(out["write"]["is_error"], true, "{out}");
    let message = text(&out["write"]);
    assert!(message.contains("cannot be asked"), "{message}");
    assert!(message.contains("--mode full"), "{message}");
    assert!(out["elicitations"].as_array().unwrap().is_empty(), "{out}");
    assert!(!server.path("fallback.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_gets_the_approve_fallback() {
    let server = start(PermissionMode::Auto, Fallback::Approve, Mount::Nest).await;
    let out = client(&server, "no-elicit", &[]).await;
    assert_eq!(out["write"]["is_error"], false, "{out}");
    assert_eq!(
        std::fs::read_to_string(server.path("fallback.txt")).unwrap(),
        "from mcp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_output_arrives_as_progress() {
    let server = start(PermissionMode::Full, Fallback::Deny, Mount::Nest).await;
    let arguments = r#"{"command": "echo first-line; sleep 0.3; echo second-line"}"#;
    let out = client(&server, "progress", &["shell", arguments]).await;
    assert_eq!(out["call"]["is_error"], false, "{out}");
    assert!(text(&out["call"]).contains("second-line"), "{out}");
    let progress: String = out["progress"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(progress.contains("first-line"), "{out}");
    assert!(progress.contains("second-line"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_stops_its_call() {
    let server = start(PermissionMode::Full, Fallback::Deny, Mount::Nest).await;
    let arguments = r#"{"command": "sleep 120", "timeout_ms": 600000}"#;
    let out = client(&server, "cancel", &["shell", arguments, "2"]).await;
    assert_eq!(out["cancelled"], true, "{out}");
    assert!(text(&out["after"]).contains("hello over http"), "{out}");
    // The call ends (and is recorded) as cancelled, long before its command would have.
    let trajectory = server.path(".toolbox/trajectories/mcp/tool_calls.jsonl");
    let mut recorded = None;
    for _ in 0..600 {
        let lines = std::fs::read_to_string(&trajectory).unwrap_or_default();
        if let Some(line) = lines.lines().find(|l| l.contains("\"tool\":\"shell\"")) {
            recorded = Some(serde_json::from_str::<Value>(line).unwrap());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recorded = recorded.expect("the shell call was not recorded: it was not cancelled");
    assert_eq!(recorded["error_kind"], "cancelled", "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_an_error_not_a_hang() {
    let server = start(PermissionMode::Full, Fallback::Deny, Mount::Nest).await;
    // reqwest is built with `rustls-no-provider`; plain HTTP still needs a provider installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let post = |body: &'static str| {
        http.post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
            .send()
    };

    // Not JSON at all: a parse error, as on stdio.
    let reply = post("this is not json").await.unwrap();
    assert_eq!(reply.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700, "{body}");
    assert!(body["id"].is_null(), "{body}");

    // JSON, but no message: a bare number.
    let reply = post("3").await.unwrap();
    assert_eq!(reply.status(), reqwest::StatusCode::BAD_REQUEST);
    let body: Value = reply.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");

    // An object that is no JSON-RPC message: rmcp refuses it.
    let reply = post(r#"{"hello": "world"}"#).await.unwrap();
    let status = reply.status();
    let body = reply.text().await.unwrap();
    assert!(status.is_client_error(), "{status}: {body}");

    // A well-formed request without a session (no initialize first).
    let reply = post(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await
        .unwrap();
    let status = reply.status();
    let body = reply.text().await.unwrap();
    assert!(status.is_client_error(), "{status}: {body}");

    // Nothing is served below /mcp.
    let reply = http
        .get(format!("{}/other", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), reqwest::StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_refuse_other_hosts() {
    let server = start_with(PermissionMode::Full, Mount::Nest, |options| {
        options.allowed_hosts = vec!["toolbox.test".into()];
    })
    .await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let post = |host: &'static str| {
        http.post(&server.url)
            .header("host", host)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize)
            .send()
    };
    let refused = post("127.0.0.1").await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
    let allowed = post("toolbox.test").await.unwrap();
    assert_eq!(allowed.status(), reqwest::StatusCode::OK);
    assert!(allowed.headers().contains_key("mcp-session-id"));
}

/// Each MCP session gets a toolbox session of its own by default: one client's files in
/// `output/` (and its Python state, trajectory, spool) are not another's. Naming a session
/// shares it on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mcp_session_has_its_own_toolbox_session_unless_one_is_named() {
    let write = r#"{"path": "output/who.txt", "content": "client A"}"#;
    let read = r#"{"path": "output/who.txt"}"#;
    for shared in [false, true] {
        let server = start_with(PermissionMode::Full, Mount::Nest, |options| {
            options.session = shared.then(|| SessionId::parse("team").unwrap());
        })
        .await;
        let a = client(&server, "call", &["file_manager__write", write]).await;
        assert_eq!(a["call"]["is_error"], false, "{a}");
        let b = client(&server, "call", &["file_manager__read", read]).await;
        let sessions: Vec<String> = std::fs::read_dir(server.path(".toolbox/sessions"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        if shared {
            assert_eq!(b["call"]["is_error"], false, "{b}");
            assert!(text(&b["call"]).contains("client A"), "{b}");
            assert_eq!(sessions, ["team"], "{sessions:?}");
        } else {
            assert_eq!(b["call"]["is_error"], true, "{b}");
            assert!(text(&b["call"]).contains("does not exist"), "{b}");
            assert!(
                sessions.iter().all(|s| s.starts_with("mcp-")),
                "{sessions:?}"
            );
            let holding: Vec<_> = sessions
                .iter()
                .filter(|s| {
                    server
                        .path(&format!(".toolbox/sessions/{s}/output/who.txt"))
                        .exists()
                })
                .collect();
            assert_eq!(holding.len(), 1, "{sessions:?}");
            let trajectories = std::fs::read_dir(server.path(".toolbox/trajectories"))
                .unwrap()
                .count();
            assert_eq!(trajectories, 2, "one trajectory per MCP session");
        }
    }
}

/// Sessions are bounded: at the cap, a new `initialize` gets 503 with a JSON-RPC error while
/// no open session is idle, and ending one (`DELETE`) makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_a_closed_one_makes_room() {
    let server = start_with(PermissionMode::Full, Mount::Nest, |options| {
        options.max_sessions = 3;
    })
    .await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let open = || {
        http.post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize)
            .send()
    };
    let mut ids = Vec::new();
    for _ in 0..3 {
        let reply = open().await.unwrap();
        assert_eq!(reply.status(), reqwest::StatusCode::OK);
        ids.push(
            reply.headers()["mcp-session-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
        let _ = reply.bytes().await;
    }
    let full = open().await.unwrap();
    assert_eq!(full.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert!(full.headers().contains_key("retry-after"));
    let body: Value = full.json().await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32000, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("3 MCP sessions open"), "{message}");
    assert!(message.contains("DELETE /mcp"), "{message}");

    // A request in an open session still works at the cap.
    let listed = http
        .post(&server.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &ids[1])
        .header("mcp-protocol-version", "2025-06-18")
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await
        .unwrap();
    assert!(listed.status().is_success(), "{}", listed.status());

    let closed = http
        .delete(&server.url)
        .header("mcp-session-id", &ids[0])
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let again = open().await.unwrap();
    assert_eq!(again.status(), reqwest::StatusCode::OK);
}
