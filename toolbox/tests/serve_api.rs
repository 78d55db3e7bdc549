//! `toolbox serve`'s API through the real binary against the scripted LLM: every endpoint,
//! the errors (each a JSON `{"error"}` with a fitting status), turns and their events,
//! approvals answered over HTTP (approve, deny, too late), cancelling, single tool calls
//! through the same gate, and the paged trajectory.

mod common;
mod serve_common;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::{assert_seq_from, request_messages, Event, Server};
use toolbox_executor::ErrorKind;
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};
use toolbox_tests::{assert_err_contains, assert_json_error};

fn names(schemas: &Value, pick: impl Fn(&Value) -> Option<&str>) -> BTreeSet<String> {
    schemas
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {schemas}"))
        .iter()
        .map(|s| {
            pick(s)
                .unwrap_or_else(|| panic!("no name in {s}"))
                .to_string()
        })
        .collect()
}

fn kinds(events: &[Event]) -> Vec<String> {
    events.iter().map(|e| e.kind().to_string()).collect()
}

#[test]
fn health_tools_and_agents_describe_the_server() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join(".toolbox/agents")).unwrap();
    std::fs::write(
        ws.path().join(".toolbox/agents/reader.md"),
        "---\nname: reader\ndescription: reads files\ntoolsets: [file_manager]\n---\nRead.\n",
    )
    .unwrap();
    let server = Server::start(ws.path(), None, &["--mode", "auto"]);

    let health = server.get("/api/health");
    assert_eq!(health.status, 200, "{}", health.text());
    let health = health.json();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(health["mode"], "auto");
    let providers: Vec<&str> = health["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        providers.contains(&"shell") && providers.contains(&"file_manager"),
        "{providers:?}"
    );

    // OpenAI Chat Completions by default; the process's mode (auto) lists risky tools.
    let all = server.get("/api/tools").json();
    let openai = names(&all, |s| s["function"]["name"].as_str());
    assert!(openai.contains("shell") && openai.contains("file_manager__write"));
    assert!(all[0]["type"] == "function" && all[0]["function"]["parameters"].is_object());

    let sets = server.get("/api/tools?toolsets=file_manager,shell").json();
    let picked = names(&sets, |s| s["function"]["name"].as_str());
    assert!(picked.contains("file_manager__read") && picked.contains("shell"));
    assert!(!picked.contains("web_fetch"), "{picked:?}");
    assert!(picked.len() < openai.len());

    let responses = server
        .get("/api/tools?toolsets=file_manager&format=openai-responses")
        .json();
    let flat = names(&responses, |s| s["name"].as_str());
    assert!(flat.contains("file_manager__read"));
    assert!(responses[0]["type"] == "function" && responses[0]["parameters"].is_object());

    let anthropic = server
        .get("/api/tools?toolsets=file_manager&format=anthropic")
        .json();
    assert!(anthropic
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["input_schema"].is_object() && s["name"].is_string()));

    let mcp = server
        .get("/api/tools?toolsets=file_manager&format=mcp")
        .json();
    assert!(mcp
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["inputSchema"].is_object() && s["annotations"].is_object()));

    let read_only = server.get("/api/tools?mode=read_only").json();
    let visible = names(&read_only, |s| s["function"]["name"].as_str());
    assert!(visible.contains("file_manager__read"));
    assert!(!visible.contains("shell") && !visible.contains("file_manager__write"));

    server
        .get("/api/tools?format=yaml")
        .assert_error(400, "format");
    server.get("/api/tools?mode=root").assert_error(400, "mode");
    server
        .get("/api/tools?toolsets=no_such_set")
        .assert_error(400, "no_such_set");

    let agents = server.get("/api/agents");
    assert_eq!(agents.status, 200);
    let agents = agents.json();
    let listed = names(&agents["agents"], |a| a["name"].as_str());
    assert!(
        listed.contains("default") && listed.contains("reader"),
        "{agents}"
    );

    server
        .get("/api/no/such/endpoint")
        .assert_error(404, "no such API endpoint");
    // A known path with the wrong method is an error in JSON too.
    server
        .get("/api/sessions/s1/turns")
        .assert_error(405, "method");
}

#[test]
fn a_turn_runs_and_its_events_messages_sessions_and_trajectory_show_it() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "the bird is a heron\n").unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("c1", "file_manager__read", json!({"path": "notes.txt"})),
        Scripted::text("It is a heron."),
    ]);
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);
    let events = server.events("s1", None);
    assert_eq!(events.status, 200);
    assert!(events
        .headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/event-stream")));

    let r = server.post("/api/sessions/s1/turns", &json!({"message": "Which bird?"}));
    assert_eq!(r.status, 202, "{}", r.text());
    let body = r.json();
    let turn_id = body["turn_id"].as_str().unwrap().to_string();
    assert_eq!(body["session_id"], "s1");

    let got = events.until("turn_finished");
    assert_seq_from(&got, 1, "s1");
    let kinds = kinds(&got);
    assert_eq!(kinds[0], "turn_started", "{kinds:?}");
    assert_eq!(got[0].data["message"], "Which bird?");
    assert_eq!(got[0].data["permission_mode"], "auto");
    let started = kinds.iter().position(|k| k == "tool_call_started").unwrap();
    let finished = kinds
        .iter()
        .position(|k| k == "tool_call_finished")
        .unwrap();
    assert!(started < finished, "{kinds:?}");
    let call = &got[finished].data;
    assert_eq!(call["id"], "c1");
    assert_eq!(call["status"], "done");
    assert!(call["result_preview"].as_str().unwrap().contains("heron"));
    let text: String = got
        .iter()
        .filter(|e| e.kind() == "text_delta")
        .map(|e| e.data["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, "It is a heron.");
    let last = &got.last().unwrap().data;
    assert_eq!(last["stop_reason"], "end_turn");
    assert_eq!(last["steps"], 2);
    assert!(got
        .iter()
        .all(|e| e.data.get("turn_id").is_none() || e.data["turn_id"] == turn_id.as_str()));
    // The turn no longer counts as running once its last event is out.
    assert!(!server.running("s1"));

    let messages = server.get("/api/sessions/s1/messages");
    assert_eq!(messages.status, 200);
    let messages = messages.json();
    let roles: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(messages["warnings"], json!([]));

    let sessions = server.get("/api/sessions").json();
    assert!(
        sessions["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|row| row["id"] == "s1"
                && row["running"] == false
                && row["pending_approvals"] == 0),
        "{sessions}"
    );

    let trajectory = server.get("/api/sessions/s1/trajectory").json();
    assert_eq!(trajectory["total"], 1, "{trajectory}");
    assert_eq!(trajectory["calls"][0]["id"], "c1");
    assert_eq!(trajectory["calls"][0]["tool"], "file_manager__read");

    // The model got the tool's result.
    let second = &llm.requests()[1];
    assert!(request_messages(second)
        .iter()
        .any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("heron")));

    // A session never used has empty messages and trajectory, not an error.
    let fresh = server.get("/api/sessions/never-used/messages").json();
    assert_eq!(fresh["messages"], json!([]));
    let fresh = server.get("/api/sessions/never-used/trajectory").json();
    assert_eq!(fresh["total"], 0);
}

#[test]
fn events_replay_from_last_event_id_or_after() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![Scripted::text("one two three")]);
    let server = Server::start(ws.path(), Some(&llm), &[]);
    let live = server.events("r1", None);
    server.start_turn("r1", json!({"message": "count"}));
    let all = live.until("turn_finished");
    assert!(all.len() >= 4, "{:?}", kinds(&all));
    let n = all.len() as u64;

    let from_header = server.events("r1", Some(2));
    let replayed: Vec<Event> = (3..=n).map(|_| from_header.next()).collect();
    assert_seq_from(&replayed, 3, "r1");
    for (a, b) in replayed.iter().zip(&all[2..]) {
        assert_eq!(a.data, b.data);
    }
    // Nothing after the last one: the stream stays open, waiting.
    assert!(from_header
        .next_within(Duration::from_millis(300))
        .is_none());

    let from_query = server.req("GET", "/api/sessions/r1/events?after=3");
    let from_query = serve_common::Sse::open(from_query);
    assert_eq!(from_query.next().id, 4);

    let everything = server.events("r1", None);
    assert_eq!(everything.next().id, 1);

    // A Last-Event-ID that is no number is refused.
    server
        .req("GET", "/api/sessions/r1/events")
        .header("Last-Event-ID", "yesterday")
        .send()
        .assert_error(400, "Last-Event-ID");
}

#[test]
fn request_errors_are_json_with_fitting_statuses() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![]);
    let server = Server::start(ws.path(), Some(&llm), &[]);
    let turns = "/api/sessions/e1/turns";
    let raw = |body: &str| server.req("POST", turns).body(body).send();

    let message = raw("{\"message\": ").assert_error(400, "not valid JSON");
    assert!(message.contains("EOF"), "{message}");
    raw("{\"message\": \"hi\",}").assert_error(400, "trailing comma");
    raw("").assert_error(400, "empty");
    raw("[1, 2]").assert_error(400, "invalid type");
    raw("{\"message\": 5}").assert_error(400, "invalid type");
    raw("{}").assert_error(400, "missing field `message`");
    server
        .post(turns, &json!({"message": "hi", "permission_mode": "root"}))
        .assert_error(400, "unknown variant");
    server
        .post(turns, &json!({"message": "   "}))
        .assert_error(400, "message is empty");
    server
        .post(turns, &json!({"message": "hi", "agent": "nobody"}))
        .assert_error(404, "unknown agent: nobody");

    // Over the body limit (4 MiB): 413, for a turn and for a single tool call.
    let big = json!({"message": "x".repeat(5 * 1024 * 1024)});
    server.post(turns, &big).assert_error(413, "larger than");
    server
        .post("/api/sessions/e1/tools/file_manager__list", &big)
        .assert_error(413, "larger than");

    // Query strings that do not parse.
    server
        .get("/api/sessions/e1/trajectory?limit=lots")
        .assert_error(400, "limit");
    server
        .get("/api/sessions/e1/trajectory?limit=0")
        .assert_error(400, "limit must be");
    server
        .get("/api/sessions/e1/trajectory?limit=1001")
        .assert_error(400, "limit must be");
    server
        .get("/api/sessions/e1/events?after=soon")
        .assert_error(400, "after");

    // Single tool calls take an object of arguments.
    server
        .post("/api/sessions/e1/tools/file_manager__list", &json!([1]))
        .assert_error(400, "JSON object");
    server
        .post(
            "/api/sessions/e1/tools/file_manager__list?call_id=a%20b",
            &json!({}),
        )
        .assert_error(400, "call_id");
    server
        .post(
            "/api/sessions/e1/tools/file_manager__list?mode=root",
            &json!({}),
        )
        .assert_error(400, "mode");

    // An approval answer must be one of the decisions.
    server
        .post("/api/tool-approval/e1/c1", &json!({"decision": "maybe"}))
        .assert_error(400, "unknown variant");
    server
        .post("/api/tool-approval/e1/c1", &json!({}))
        .assert_error(400, "decision");

    // None of this reached the model or left a turn behind.
    assert!(llm.requests().is_empty());
    assert!(!server.running("e1"));
}

#[test]
fn without_a_model_turns_are_503_and_single_tools_still_run() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let server = Server::start(ws.path(), None, &[]);
    assert!(server.stderr().contains("no model"), "{}", server.stderr());
    server
        .post("/api/sessions/m1/turns", &json!({"message": "hi"}))
        .assert_error(503, "no model is configured");
    let r = server.post(
        "/api/sessions/m1/tools/file_manager__read",
        &json!({"path": "a.txt"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "done");
}

#[test]
fn approvals_over_http_approve_and_deny_and_a_second_turn_is_409() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("c1", "shell", json!({"command": "echo approved-run"})),
        Scripted::text("it ran"),
        Scripted::call("c2", "shell", json!({"command": "echo never > never.txt"})),
        Scripted::text("it was refused"),
    ]);
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);
    let events = server.events("a1", None);

    server.start_turn("a1", json!({"message": "run it"}));
    let asked = events.until("tool_approval_request");
    let request = &asked.last().unwrap().data;
    assert_eq!(request["session_id"], "a1");
    assert_eq!(request["call_id"], "c1");
    assert_eq!(request["tool"], "shell");
    assert_eq!(request["risk"], "command");
    assert_eq!(request["arguments"]["command"], "echo approved-run");

    // One turn per session at a time.
    server
        .post("/api/sessions/a1/turns", &json!({"message": "again"}))
        .assert_error(409, "already has a turn running");
    assert!(server.running("a1"));
    // Another session is not held up.
    let other = server.get("/api/sessions/a2/messages");
    assert_eq!(other.status, 200);

    server
        .post(
            "/api/tool-approval/a1/nope",
            &json!({"decision": "approve"}),
        )
        .assert_error(404, "no call nope");
    server
        .post("/api/tool-approval/a2/c1", &json!({"decision": "approve"}))
        .assert_error(404, "no call c1");
    let ok = server.post("/api/tool-approval/a1/c1", &json!({"decision": "approve"}));
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json(), json!({"ok": true}));
    server
        .post("/api/tool-approval/a1/c1", &json!({"decision": "deny"}))
        .assert_error(409, "already answered");

    let rest = events.until("turn_finished");
    let done = rest
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .unwrap();
    assert_eq!(done.data["status"], "done", "{:?}", done.data);
    assert!(done.data["result_preview"]
        .as_str()
        .unwrap()
        .contains("approved-run"));
    assert_eq!(rest.last().unwrap().data["stop_reason"], "end_turn");

    // Right after turn_finished the session takes a new turn; this one is denied.
    server.start_turn("a1", json!({"message": "and now this"}));
    let asked = events.until("tool_approval_request");
    assert_eq!(asked.last().unwrap().data["call_id"], "c2");
    let no = server.post("/api/tool-approval/a1/c2", &json!({"decision": "deny"}));
    assert_eq!(no.status, 200, "{}", no.text());
    let rest = events.until("turn_finished");
    let refused = rest
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .unwrap();
    assert_json_error(&refused.data, ErrorKind::Denied, &[]);
    assert!(!ws.path().join("never.txt").exists());
    let last_request = llm.requests().pop().unwrap();
    let denial = request_messages(&last_request)
        .into_iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap();
    // The model got the envelope of a failed call.
    let envelope: Value = serde_json::from_str(denial["content"].as_str().unwrap()).unwrap();
    assert_err_contains(&envelope, &["denied"]);
}

#[test]
fn an_unanswered_approval_times_out_and_a_late_answer_is_409() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("slow1", "shell", json!({"command": "echo late"})),
        Scripted::text("nobody answered"),
    ]);
    let mut cmd = serve_common::serve_command(ws.path(), Some(&llm), &["--mode", "auto"]);
    cmd.env("TOOLBOX_APPROVAL_TIMEOUT_MS", "300");
    let server = Server::spawn(cmd, ws.path());
    let events = server.events("t1", None);
    server.start_turn("t1", json!({"message": "go"}));
    let got = events.until("tool_call_finished");
    let finished = &got.last().unwrap().data;
    assert_json_error(finished, ErrorKind::Denied, &["none came within 300 ms"]);
    server
        .post(
            "/api/tool-approval/t1/slow1",
            &json!({"decision": "approve"}),
        )
        .assert_error(409, "stopped waiting");
    events.until("turn_finished");
}

#[test]
fn cancel_stops_a_running_turn_and_keeps_the_conversation_whole() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![Scripted::call(
        "k1",
        "shell",
        json!({"command": "echo waiting"}),
    )]);
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);
    let events = server.events("k1", None);
    server.start_turn("k1", json!({"message": "wait for me"}));
    events.until("tool_approval_request");

    let r = server.post("/api/sessions/k1/cancel", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"cancelled": true}));
    let rest = events.until("turn_finished");
    assert_eq!(rest.last().unwrap().data["stop_reason"], "cancelled");
    let call = rest
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .unwrap();
    assert_json_error(&call.data, ErrorKind::Cancelled, &[]);
    assert_eq!(
        server.post("/api/sessions/k1/cancel", &json!({})).json(),
        json!({"cancelled": false})
    );
    // The late answer finds nobody waiting.
    server
        .post("/api/tool-approval/k1/k1", &json!({"decision": "approve"}))
        .assert_error(409, "stopped waiting");

    let messages = server.get("/api/sessions/k1/messages").json();
    assert_eq!(messages["warnings"], json!([]), "{messages}");
    let roles: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
}

#[test]
fn one_tool_call_over_http_passes_the_same_gate() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "alpha\n").unwrap();
    let server = Server::start(ws.path(), None, &["--mode", "auto"]);

    // A Read tool runs at once and answers with the envelope.
    let r = server.post(
        "/api/sessions/o1/tools/file_manager__read",
        &json!({"path": "a.txt"}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let envelope = r.json();
    assert_eq!(envelope["status"], "done");
    assert!(envelope["result"].as_str().unwrap().contains("alpha"));
    assert_eq!(envelope["tool"], "file_manager__read");
    assert!(envelope["call_id"].as_str().unwrap().starts_with("http-"));
    assert!(envelope["elapsed_ms"].is_u64());

    // An unknown tool is an envelope with an error, like any failed call.
    let unknown = server
        .post("/api/sessions/o1/tools/no_such_tool", &json!({}))
        .json();
    assert_json_error(&unknown, ErrorKind::UnknownTool, &["no_such_tool"]);
    // call_agent needs a turn.
    let agent = server
        .post(
            "/api/sessions/o1/tools/call_agent",
            &json!({"agent": "default", "task": "x"}),
        )
        .json();
    assert_json_error(&agent, ErrorKind::InvalidRequest, &["inside a turn"]);

    // A risky tool asks over the session's events, and the answer comes over HTTP.
    let events = server.events("o1", None);
    for (call_id, decision) in [("one-yes", "approve"), ("one-no", "deny")] {
        let call = {
            let req = server
                .req(
                    "POST",
                    &format!("/api/sessions/o1/tools/shell?call_id={call_id}"),
                )
                .json(&json!({"command": format!("echo ran-{call_id}")}));
            std::thread::spawn(move || req.send())
        };
        let asked = events.until("tool_approval_request");
        let request = &asked.last().unwrap().data;
        assert_eq!(request["call_id"], call_id);
        assert_eq!(request["tool"], "shell");
        assert_eq!(request["agent"], "");
        let answer = server.post(
            &format!("/api/tool-approval/o1/{call_id}"),
            &json!({"decision": decision}),
        );
        assert_eq!(answer.status, 200, "{}", answer.text());
        let envelope = call.join().unwrap();
        assert_eq!(envelope.status, 200, "{}", envelope.text());
        let envelope = envelope.json();
        assert_eq!(envelope["call_id"], call_id);
        if decision == "approve" {
            assert_eq!(envelope["status"], "done", "{envelope}");
            assert!(envelope["result"]
                .as_str()
                .unwrap()
                .contains(&format!("ran-{call_id}")));
        } else {
            assert_json_error(&envelope, ErrorKind::Denied, &[]);
        }
    }

    // A request may lower the mode, never raise it: read_only refuses without asking.
    let refused = server
        .post(
            "/api/sessions/o1/tools/shell?mode=read_only",
            &json!({"command": "echo no"}),
        )
        .json();
    assert_json_error(&refused, ErrorKind::Denied, &["read_only"]);
    let raised = {
        let req = server
            .req(
                "POST",
                "/api/sessions/o1/tools/shell?mode=full&call_id=raised",
            )
            .json(&json!({"command": "echo raised"}));
        std::thread::spawn(move || req.send())
    };
    // mode=full over an auto server still asks.
    let asked = events.until("tool_approval_request");
    assert_eq!(asked.last().unwrap().data["call_id"], "raised");
    server.post("/api/tool-approval/o1/raised", &json!({"decision": "deny"}));
    assert_json_error(&raised.join().unwrap().json(), ErrorKind::Denied, &[]);

    // approve_for_session: this call runs, and the next shell call of the session does not
    // ask (it would wait for an answer that never comes, and the request would time out).
    let first = {
        let req = server
            .req("POST", "/api/sessions/o1/tools/shell?call_id=sess-1")
            .json(&json!({"command": "echo first"}));
        std::thread::spawn(move || req.send())
    };
    let asked = events.until("tool_approval_request");
    assert_eq!(asked.last().unwrap().data["call_id"], "sess-1");
    server.post(
        "/api/tool-approval/o1/sess-1",
        &json!({"decision": "approve_for_session"}),
    );
    assert_eq!(first.join().unwrap().json()["status"], "done");
    let second = server.post(
        "/api/sessions/o1/tools/shell?call_id=sess-2",
        &json!({"command": "echo second"}),
    );
    assert_eq!(second.json()["status"], "done", "{}", second.text());
    // Another session still asks (someone follows it: a call nobody could see is refused).
    let other_events = server.events("o2", None);
    let elsewhere = {
        let req = server
            .req("POST", "/api/sessions/o2/tools/shell?call_id=other-1")
            .json(&json!({"command": "echo other"}));
        std::thread::spawn(move || req.send())
    };
    let asked = other_events.until("tool_approval_request");
    assert_eq!(asked.last().unwrap().data["call_id"], "other-1");
    server.post(
        "/api/tool-approval/o2/other-1",
        &json!({"decision": "deny"}),
    );
    assert_json_error(&elsewhere.join().unwrap().json(), ErrorKind::Denied, &[]);

    let trajectory = server.get("/api/sessions/o1/trajectory").json();
    let ids: Vec<&str> = trajectory["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert!(
        ["one-yes", "one-no", "raised", "sess-1", "sess-2"]
            .iter()
            .all(|id| ids.contains(id)),
        "{ids:?}"
    );
}

#[test]
fn the_trajectory_is_paged() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(ws.path(), None, &["--mode", "full"]);
    for i in 0..5 {
        let r = server.post(
            &format!("/api/sessions/p1/tools/file_manager__list?call_id=p{i}"),
            &json!({"path": "."}),
        );
        assert_eq!(r.json()["status"], "done", "{}", r.text());
    }
    let ids = |v: &Value| -> Vec<String> {
        v["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = server.get("/api/sessions/p1/trajectory").json();
    assert_eq!(all["total"], 5);
    assert_eq!(ids(&all), ["p0", "p1", "p2", "p3", "p4"]);
    assert_eq!(all["offset"], 0);
    assert_eq!(all["limit"], 100);

    let page = server
        .get("/api/sessions/p1/trajectory?offset=1&limit=2")
        .json();
    assert_eq!(ids(&page), ["p1", "p2"]);
    assert_eq!(page["total"], 5);
    assert_eq!(
        (page["offset"].as_u64(), page["limit"].as_u64()),
        (Some(1), Some(2))
    );
    let tail = server
        .get("/api/sessions/p1/trajectory?offset=4&limit=2")
        .json();
    assert_eq!(ids(&tail), ["p4"]);
    let past = server.get("/api/sessions/p1/trajectory?offset=50").json();
    assert_eq!(ids(&past), Vec::<String>::new());
    assert_eq!(past["total"], 5);
}

/// `toolbox serve --vocabulary data-agent`: `GET /api/tools` lists the data agent's names, a
/// call by one of them answers with the canonical `tool` and `called_as`, and a tool with a
/// structured result adds it under `"structured"` beside the unchanged `result`.
#[test]
fn the_data_agent_vocabulary_and_structured_results_over_http() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(
        ws.path(),
        None,
        &["--mode", "full", "--vocabulary", "data-agent"],
    );
    let tools = server.get("/api/tools?format=anthropic").json();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"bash") && names.contains(&"read_file"),
        "{names:?}"
    );
    assert!(!names.contains(&"shell"), "{names:?}");

    let r = server
        .post(
            "/api/sessions/v1/tools/bash",
            &json!({"command": "echo structured; exit 2"}),
        )
        .json();
    assert_eq!(r["status"], "done", "{r}");
    assert_eq!(r["tool"], "shell");
    assert_eq!(r["called_as"], "bash");
    assert!(r["result"].as_str().unwrap().starts_with("exit code 2 · "));
    assert_eq!(r["structured"]["exit_code"], 2, "{r}");
    assert_eq!(r["structured"]["stdout"], "structured\n", "{r}");
    // A tool without one has no "structured".
    let plain = server
        .post("/api/sessions/v1/tools/list_dir", &json!({}))
        .json();
    assert_eq!(plain["status"], "done", "{plain}");
    assert!(plain.get("structured").is_none(), "{plain}");
}

/// Issue 38, point 5: a single call in mode `auto` that needs an approval waited the whole
/// approval timeout (five minutes) when no one could see its question. With no console open
/// and nothing following the session's events, it is now refused at once, and the refusal
/// says how to get it answered. With the console's feed open, the same call asks.
#[test]
fn a_single_call_nobody_could_answer_is_refused_at_once() {
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = serve_common::serve_command(ws.path(), None, &["--mode", "auto"]);
    // Far longer than the request's own read limit (30 s): an answer at all means no wait.
    cmd.env("TOOLBOX_APPROVAL_TIMEOUT_MS", "600000");
    let server = Server::spawn(cmd, ws.path());

    let refused = server.post(
        "/api/sessions/n1/tools/shell?call_id=lonely",
        &json!({"command": "echo ran > made.txt"}),
    );
    assert_eq!(refused.status, 200, "{}", refused.text());
    let envelope = refused.json();
    assert_json_error(
        &envelope,
        ErrorKind::Denied,
        &[
            "nobody can be asked",
            "GET /api/sessions/n1/events",
            "POST /api/tool-approval/n1/<call_id>",
            "--mode full",
        ],
    );
    // The shell's folder is the session's scratchpad.
    let made = ws.path().join(".toolbox/sessions/n1/scratchpad/made.txt");
    assert!(!made.exists(), "the call ran");
    // A Read tool still runs: only questions need someone.
    std::fs::write(ws.path().join("a.txt"), "alpha").unwrap();
    let read = server.post(
        "/api/sessions/n1/tools/file_manager__read",
        &json!({"path": "a.txt"}),
    );
    assert_eq!(read.json()["status"], "done", "{}", read.text());

    // The console follows the session list: a question is seen there, so it is asked.
    let mut req = server.req("GET", "/api/sessions/events");
    req.headers
        .push(("Accept".into(), "text/event-stream".into()));
    let console = serve_common::Sse::open(req);
    assert_eq!(console.status, 200);
    let call = {
        let req = server
            .req("POST", "/api/sessions/n1/tools/shell?call_id=seen")
            .json(&json!({"command": "echo ran > made.txt"}));
        std::thread::spawn(move || req.send())
    };
    let events = server.events("n1", None);
    let asked = events.until("tool_approval_request");
    assert_eq!(asked.last().unwrap().data["call_id"], "seen");
    let answer = server.post(
        "/api/tool-approval/n1/seen",
        &json!({"decision": "approve"}),
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let envelope = call.join().unwrap().json();
    assert_eq!(envelope["status"], "done", "{envelope}");
    assert!(made.exists(), "{envelope}");
    console.disconnect();
}
