//! The plan provider through real front ends: `toolbox serve` with the scripted LLM (both
//! wire formats) sets a plan, has it reviewed over HTTP (rejected with feedback, then
//! approved), and the gate of `[plan] require_confirmed` holds a write back until then and
//! again after the steps change; the plan survives a restart; two sessions keep their own
//! plans; a workspace `toolbox.toml` may tighten the gate but not loosen it, and
//! `toolbox call` is held by the same gate.

mod common;
mod serve_common;

use std::path::Path;

use serde_json::{json, Value};
use serve_common::{finished, request_messages, serve_command, Event, Server};
use toolbox_executor::ErrorKind;
use toolbox_tests::scripted_llm::{RecordedRequest, Scripted, ScriptedLlm};
use toolbox_tests::{assert_err_contains, assert_json_error};

const FEEDBACK: &str = "Write \"hello\" in lower case, please.\nAnd keep it short.";

/// The operator's config file (outside the workspace): the gate on for file writes.
fn operator_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("operator.toml");
    std::fs::write(&path, "[plan]\nrequire_confirmed = [\"file_write\"]\n").unwrap();
    path
}

/// The tool result the model got for call `id`, in either wire format: the `result` of the
/// envelope the content holds.
fn tool_result_text(request: &RecordedRequest, id: &str) -> String {
    let result = |content: &Value| -> String {
        let text = match content {
            Value::String(s) => s.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
            other => other.to_string(),
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(envelope) => envelope["result"].as_str().unwrap_or_default().to_string(),
            Err(_) => text,
        }
    };
    for m in request_messages(request) {
        // OpenAI: {"role": "tool", "tool_call_id", "content"}.
        if m["role"] == "tool" && m["tool_call_id"] == id {
            return result(&m["content"]);
        }
        // Anthropic: a user message with tool_result blocks.
        if let Some(blocks) = m["content"].as_array() {
            for b in blocks {
                if b["type"] == "tool_result" && b["tool_use_id"] == id {
                    return result(&b["content"]);
                }
            }
        }
    }
    panic!("no tool result for {id} in {:?}", request_messages(request));
}

fn script() -> Vec<Scripted> {
    let write = |id: &str| {
        Scripted::call(
            id,
            "file_manager__write",
            json!({"path": "hello.txt", "content": "hello"}),
        )
    };
    vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write hello.txt"]})),
        write("w1"),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        write("w2"),
        Scripted::call("r2", "plan__request_review", json!({"part": "plan"})),
        write("w3"),
        Scripted::call("u1", "plan__update", json!({"add": ["Read it back"]})),
        write("w4"),
        Scripted::text("done"),
    ]
}

fn review_then_gate(wire: &str) {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = operator_config(outside.path());
    let llm = ScriptedLlm::start(script());
    let mut cmd = serve_command(ws.path(), Some(&llm), &["--mode", "full"]);
    cmd.env("TOOLBOX_CONFIG", &config);
    if wire == "anthropic" {
        cmd.env("TOOLBOX_LLM_PROVIDER", "anthropic")
            .env("TOOLBOX_LLM_BASE_URL", llm.anthropic_base_url());
    }
    let server = Server::spawn(cmd, ws.path());
    let events = server.events("s1", None);
    server.start_turn("s1", json!({"message": "write hello.txt"}));

    // The first review: asked even in mode full, with the checklist; rejected with feedback.
    let seen = events.until("review_request");
    let asked = &seen.last().unwrap().data;
    assert_eq!(asked["call_id"], "r1");
    let shown = serde_json::to_string(&asked["preview"]).unwrap();
    assert!(shown.contains("Write hello.txt"), "{shown}");
    let updated: Vec<&Event> = seen.iter().filter(|e| e.kind() == "plan_updated").collect();
    assert!(!updated.is_empty(), "plan_updated before the review");
    assert_eq!(
        updated[0].data["plan"]["steps"][0]["title"],
        "Write hello.txt"
    );
    // Before the review the write was refused by the gate, without any question.
    assert_json_error(
        finished(&seen, "w1"),
        ErrorKind::Denied,
        &["plan__request_review"],
    );
    assert!(!seen.iter().any(|e| e.kind() == "tool_approval_request"));
    let no = server.post(
        "/api/tool-approval/s1/r1",
        &json!({"decision": "reject", "feedback": FEEDBACK}),
    );
    assert_eq!(no.status, 200, "{}", no.text());

    // The second review: approved over HTTP.
    let seen = events.until("review_request");
    let answered = seen.iter().find(|e| e.kind() == "review_answered").unwrap();
    assert_eq!(answered.data["answer"], "rejected");
    assert_eq!(answered.data["feedback"], FEEDBACK);
    // Still refused after the rejection.
    assert_json_error(finished(&seen, "w2"), ErrorKind::Denied, &[]);
    assert!(!ws.path().join("hello.txt").exists());
    let yes = server.post("/api/tool-approval/s1/r2", &json!({"decision": "approve"}));
    assert_eq!(yes.status, 200, "{}", yes.text());

    let rest = events.until("turn_finished");
    let w3 = finished(&rest, "w3");
    assert_eq!(w3["status"], "done", "{w3}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        "hello"
    );
    // A step added: the plan is a draft again, and the gate closed.
    assert_json_error(
        finished(&rest, "w4"),
        ErrorKind::Denied,
        &["plan__request_review"],
    );
    let u1 = finished(&rest, "u1");
    assert!(
        u1["result_preview"]
            .as_str()
            .unwrap()
            .contains("draft again"),
        "{u1}"
    );

    // The model read the person's feedback word for word, in the request after r1.
    let requests = llm.requests();
    let after_r1 = requests
        .iter()
        .find(|r| {
            request_messages(r)
                .iter()
                .any(|m| m.to_string().contains("r1") && m.to_string().contains("tool"))
                && !request_messages(r)
                    .iter()
                    .any(|m| m.to_string().contains("\"w2\""))
        })
        .expect("the request that carries r1's result");
    let r1 = tool_result_text(after_r1, "r1");
    assert!(r1.contains(FEEDBACK), "the feedback word for word: {r1}");
    let plan: Value = serde_json::from_slice(
        &std::fs::read(ws.path().join(".toolbox/sessions/s1/plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["plan_review"]["state"], "draft");
    assert_eq!(plan["steps"].as_array().unwrap().len(), 2);
}

#[test]
fn a_review_rejected_then_approved_over_http_opens_the_gate_openai() {
    review_then_gate("openai");
}

#[test]
fn a_review_rejected_then_approved_over_http_opens_the_gate_anthropic() {
    review_then_gate("anthropic");
}

fn call_tool(server: &Server, sid: &str, tool: &str, args: Value) -> Value {
    let r = server.post(&format!("/api/sessions/{sid}/tools/{tool}"), &args);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn the_plan_survives_a_restart_and_sessions_keep_their_own() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = operator_config(outside.path());
    let start = || {
        let mut cmd = serve_command(ws.path(), None, &["--mode", "full"]);
        cmd.env("TOOLBOX_CONFIG", &config);
        Server::spawn(cmd, ws.path())
    };
    let server = start();
    let set = call_tool(
        &server,
        "a",
        "plan__set",
        json!({"goal": "alpha goal", "steps": ["one"]}),
    );
    assert_eq!(set["status"], "done", "{set}");
    call_tool(&server, "b", "plan__set", json!({"goal": "beta goal"}));
    // Over HTTP's single-call endpoint a review is asked like in a turn, and answered.
    let events = server.events("a", None);
    let review = {
        let req = server
            .req(
                "POST",
                "/api/sessions/a/tools/plan__request_review?call_id=rv1",
            )
            .json(&json!({"part": "goal"}));
        std::thread::spawn(move || req.send())
    };
    events.until("review_request");
    let ok = server.post(
        "/api/tool-approval/a/rv1",
        &json!({"decision": "approve", "feedback": "fine"}),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let result = review.join().unwrap().json();
    assert!(
        result["result"].as_str().unwrap().contains("confirmed"),
        "{result}"
    );
    drop(events);
    drop(server);

    let server = start();
    let a = call_tool(&server, "a", "plan__show", json!({}));
    let a = a["result"].as_str().unwrap();
    assert!(
        a.contains("alpha goal") && a.contains("confirmed by http"),
        "{a}"
    );
    assert!(a.contains("[ ] 1. one") && !a.contains("beta"), "{a}");
    let b = call_tool(&server, "b", "plan__show", json!({}));
    let b = b["result"].as_str().unwrap();
    assert!(
        b.contains("beta goal") && b.contains("Goal (not yet reviewed)") && !b.contains("alpha"),
        "{b}"
    );
    // The gate, after the restart, over the single-call endpoint: the plan is still a draft.
    let w = call_tool(
        &server,
        "a",
        "file_manager__write",
        json!({"path": "x.txt", "content": "x"}),
    );
    assert_json_error(&w, ErrorKind::Denied, &["the plan is draft"]);
    let info = call_tool(&server, "a", "session__info", json!({}));
    let info: Value = serde_json::from_str(info["result"].as_str().unwrap()).unwrap();
    assert_eq!(info["plan"]["goal"], "confirmed");
    assert_eq!(info["plan"]["gate"]["open"], false);
    assert_eq!(info["permission_mode"], "full");
    assert!(!ws.path().join("x.txt").exists());
}

#[test]
fn a_workspace_may_tighten_the_gate_never_loosen_it_and_toolbox_call_obeys() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = operator_config(outside.path());
    // Loosening the part: the operator wants the plan confirmed, the workspace only the
    // goal. Refused at start, naming the key.
    std::fs::write(
        ws.path().join("toolbox.toml"),
        "[plan]\nrequire = \"goal\"\n",
    )
    .unwrap();
    let out = common::toolbox(ws.path())
        .env("TOOLBOX_CONFIG", &config)
        .args(["call", "plan__show", "{}", "--mode", "full"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("plan.require") || stderr.contains("[plan] require"),
        "{stderr}"
    );
    // Emptying the list: a workspace's list only adds to the operator's, so the gate holds.
    std::fs::write(
        ws.path().join("toolbox.toml"),
        "[plan]\nrequire_confirmed = []\n",
    )
    .unwrap();
    let out = common::toolbox(ws.path())
        .env("TOOLBOX_CONFIG", &config)
        .args([
            "call",
            "file_manager__write",
            r#"{"path": "z.txt", "content": "z"}"#,
            "--mode",
            "full",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("plan__request_review"), "{stdout}");
    assert!(!ws.path().join("z.txt").exists());

    // Tightening: no operator gate, the workspace adds one; `toolbox call` is held by it.
    std::fs::write(
        ws.path().join("toolbox.toml"),
        "[plan]\nrequire_confirmed = [\"file_write\"]\n",
    )
    .unwrap();
    let out = common::toolbox(ws.path())
        .args([
            "call",
            "file_manager__write",
            r#"{"path": "y.txt", "content": "y"}"#,
            "--mode",
            "full",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("plan__request_review"), "{stdout}");
    assert!(!ws.path().join("y.txt").exists());
    // And a review cannot be answered by --approve yes: it says no one was asked.
    common::toolbox(ws.path())
        .args([
            "call",
            "plan__set",
            r#"{"steps": ["x"]}"#,
            "--session",
            "c1",
        ])
        .output()
        .unwrap();
    let out = common::toolbox(ws.path())
        .args([
            "call",
            "plan__request_review",
            r#"{"part": "plan"}"#,
            "--session",
            "c1",
            "--approve",
            "yes",
            "--mode",
            "full",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Not reviewed: ") && stdout.contains("stays pending"),
        "{stdout}"
    );
}

/// The JSON-RPC response a POST to `/mcp` was answered with (JSON, or the SSE event that
/// holds it).
fn rpc_reply(response: &serve_common::Response) -> Value {
    let kind = response.header("content-type").unwrap_or("");
    if kind.starts_with("application/json") {
        return response.json();
    }
    let text = response.text();
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("result").is_some() || message.get("error").is_some())
        .unwrap_or_else(|| panic!("no response in: {text}"))
}

#[test]
fn over_slash_mcp_the_gate_holds_and_a_review_with_no_one_to_ask_stays_pending() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = operator_config(outside.path());
    let token = serve_common::TOKEN;
    let mut cmd = serve_command(ws.path(), None, &["--token", token, "--mode", "full"]);
    cmd.env("TOOLBOX_CONFIG", &config);
    let server = Server::spawn(cmd, ws.path()).with_token(token);
    let post = |session: Option<&str>, body: Value| {
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
    };
    let init = post(
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "plan-test", "version": "0"}}}),
    );
    assert_eq!(init.status, 200, "{}", init.text());
    let session = init.header("mcp-session-id").unwrap().to_string();
    post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    // The tool result as (is_error, text).
    let call = |id: u64, tool: &str, arguments: Value| {
        let r = post(
            Some(&session),
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": tool, "arguments": arguments}}),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let result = &rpc_reply(&r)["result"];
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        (result["isError"] == true, text.to_string())
    };
    call(1, "plan__set", json!({"steps": ["Write m.txt"]}));
    let held = call(
        2,
        "file_manager__write",
        json!({"path": "m.txt", "content": "m"}),
    );
    assert_err_contains(held, &["plan__request_review"]);
    let (_, review) = call(3, "plan__request_review", json!({"part": "plan"}));
    assert!(
        review.contains("Not reviewed: ") && review.contains("stays pending"),
        "{review}"
    );
    assert!(!ws.path().join("m.txt").exists());
}

/// Issue 37, point 1: a scripted model that forges a confirmed plan, as a file tool and as
/// code, then asks for `bash`, runs no command, over HTTP in mode full with `shell` held.
#[test]
fn a_model_cannot_confirm_its_own_plan_over_http() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = outside.path().join("operator.toml");
    std::fs::write(&config, "[plan]\nrequire_confirmed = [\"shell\"]\n").unwrap();
    let plan = ".toolbox/sessions/s1/plan.json";
    let forged = json!({
        "steps": [{"id": "1", "title": "Run anything", "status": "pending"}],
        "plan_review": {"state": "confirmed", "by": "http", "at": "2026-12-04T10:00:00Z",
                        "revision": 1, "seal": "ab".repeat(32)},
        "next_id": 1
    })
    .to_string();
    let marker = ws.path().join("ran.txt");
    let bash = |id: &str| {
        Scripted::call(
            id,
            "bash",
            json!({"command": format!("echo ran > {}", marker.display())}),
        )
    };
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Look around"]})),
        Scripted::call("f1", "write_file", json!({"path": plan, "content": forged})),
        Scripted::call(
            "f2",
            "edit_file",
            json!({"path": plan, "old_string": "\"draft\"", "new_string": "\"confirmed\""}),
        ),
        bash("b1"),
        Scripted::call(
            "y1",
            "python_exec",
            json!({"code": format!("open('../plan.json', 'w').write({forged:?})")}),
        ),
        bash("b2"),
        Scripted::text("done"),
    ]);
    let mut cmd = serve_command(ws.path(), Some(&llm), &["--mode", "full"]);
    cmd.env("TOOLBOX_CONFIG", &config);
    let server = Server::spawn(cmd, ws.path());
    let events = server.events("s1", None);
    server.start_turn("s1", json!({"message": "go"}));
    let seen = events.until("turn_finished");
    for id in ["f1", "f2"] {
        assert_json_error(
            finished(&seen, id),
            ErrorKind::Tool,
            &["toolbox's own folder"],
        );
    }
    // The code's write lands (the file is the session's, and code can write it), but what it
    // wrote carries no seal toolbox made: the plan reads as a draft.
    assert_eq!(finished(&seen, "y1")["status"], "done");
    let on_disk = std::fs::read_to_string(ws.path().join(plan)).unwrap();
    assert!(on_disk.contains("Run anything"), "{on_disk}");
    for id in ["b1", "b2"] {
        assert_json_error(finished(&seen, id), ErrorKind::Denied, &[]);
    }
    assert!(!seen.iter().any(|e| e.kind() == "review_request"));
    assert!(!marker.exists(), "no command ran");
    let shown = call_tool(&server, "s1", "plan__show", json!({}));
    assert!(
        shown["result"]
            .as_str()
            .unwrap()
            .contains("claimed more than toolbox recorded"),
        "{shown}"
    );
}

#[test]
fn an_unknown_require_confirmed_entry_stops_every_front_end() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let config = outside.path().join("operator.toml");
    std::fs::write(&config, "[plan]\nrequire_confirmed = [\"bsh\"]\n").unwrap();
    for args in [
        &["call", "shell", r#"{"command": "true"}"#, "--mode", "full"][..],
        &["mcp"][..],
        &["serve", "--listen", "127.0.0.1:0"][..],
    ] {
        let out = common::toolbox(ws.path())
            .env("TOOLBOX_CONFIG", &config)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("\"bsh\"") && err.contains("neither a risk class"),
            "{args:?}: {err}"
        );
    }
}
