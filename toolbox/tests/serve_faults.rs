//! `toolbox serve` under load and faults, through the real binary against the scripted LLM
//! in responder mode (each session's answers are made from its own requests):
//!
//! - 50 sessions each run a turn at once: all finish, every session's events are its own and
//!   numbered without a gap; the throughput is printed (`--nocapture`; set
//!   `TOOLBOX_SERVE_SESSIONS` for another count, or run bench/serve_sessions.sh);
//! - an SSE client that drops mid-turn does not stop the turn, and reconnecting with
//!   `Last-Event-ID` replays exactly what it missed, the approval request included;
//! - a server killed with SIGKILL mid-turn leaves files a new server reads (a torn last line
//!   skipped with a warning) and continues the session from;
//! - a slow tool in one session never holds up another session;
//! - SIGTERM mid-turn cancels the turn cleanly, tells connected clients, and exits 0.

mod common;

mod serve_common;

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{
    assert_seq_from, ends_with_tool_result, first_user_text, last_user_text, request_messages,
    Event, Server, EVENT_LIMIT,
};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(Event::kind).collect()
}

/// Every line of `path` parsed as JSON (panics on one that is not).
fn json_lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {l}", path.display()))
        })
        .collect()
}

/// The one trajectory file of `session`.
fn trajectory_file(ws: &std::path::Path, session: &str) -> std::path::PathBuf {
    let dir = ws.join(".toolbox/trajectories").join(session);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.into_iter().next().unwrap()
}

/// Whether process `pid` still exists (a zombie counts as gone: it runs nothing).
fn alive(pid: i32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state letter follows the command name in parentheses.
    match stat.rsplit_once(')') {
        Some((_, rest)) => !rest.trim_start().starts_with('Z'),
        None => false,
    }
}

#[test]
fn concurrent_sessions_each_run_a_turn_and_see_only_their_own_events() {
    let n: usize = std::env::var("TOOLBOX_SERVE_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let ws = tempfile::tempdir().unwrap();
    // Fixed width, so no marker is a part of another.
    let marker = |i: usize| format!("mark{i:04}");
    for i in 0..n {
        std::fs::write(
            ws.path().join(format!("{}.txt", marker(i))),
            format!("the secret of {}\n", marker(i)),
        )
        .unwrap();
    }
    // The model reads the session's file, then answers with its marker.
    let llm = ScriptedLlm::start_with(|request| {
        let mark = first_user_text(request);
        if ends_with_tool_result(request) {
            Scripted::text(format!("answer for {mark}"))
        } else {
            Scripted::call(
                &format!("call-{mark}"),
                "file_manager__read",
                json!({"path": format!("{mark}.txt")}),
            )
        }
    });
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);
    let streams: Vec<_> = (0..n)
        .map(|i| server.events(&format!("load{i:04}"), None))
        .collect();

    let started = Instant::now();
    let per_session: Vec<(Vec<Event>, Duration, serve_common::Sse)> = std::thread::scope(|scope| {
        let handles: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(i, events)| {
                let server = &server;
                let mark = marker(i);
                scope.spawn(move || {
                    let t = Instant::now();
                    server.start_turn(&format!("load{i:04}"), json!({"message": mark}));
                    let got = events.until("turn_finished");
                    (got, t.elapsed(), events)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total = started.elapsed();

    for (i, (events, _, stream)) in per_session.iter().enumerate() {
        let sid = format!("load{i:04}");
        let mine = marker(i);
        assert_seq_from(events, 1, &sid);
        let kinds = kinds(events);
        assert_eq!(kinds[0], "turn_started", "{sid}: {kinds:?}");
        assert_eq!(events[0].data["message"], mine.as_str());
        let last = &events.last().unwrap().data;
        assert_eq!(last["stop_reason"], "end_turn", "{sid}: {last}");
        let call = events
            .iter()
            .find(|e| e.kind() == "tool_call_finished")
            .unwrap_or_else(|| panic!("{sid}: {kinds:?}"));
        assert_eq!(call.data["id"], format!("call-{mine}"));
        assert_eq!(call.data["status"], "done");
        assert!(call.data["result_preview"]
            .as_str()
            .unwrap()
            .contains(&format!("the secret of {mine}")));
        let text: String = events
            .iter()
            .filter(|e| e.kind() == "text_delta")
            .map(|e| e.data["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, format!("answer for {mine}"));
        // Nothing of another session's leaked in.
        let all: String = events.iter().map(|e| e.data.to_string()).collect();
        for j in (0..n).filter(|&j| j != i) {
            assert!(!all.contains(&marker(j)), "{sid} saw {}", marker(j));
        }
        // Nothing follows the turn's end.
        assert!(stream.next_within(Duration::from_millis(20)).is_none());
    }
    assert_eq!(llm.requests().len(), 2 * n);
    for i in [0, n / 2, n - 1] {
        let messages = server
            .get(&format!("/api/sessions/load{i:04}/messages"))
            .json();
        assert_eq!(messages["messages"].as_array().unwrap().len(), 4);
        assert!(messages
            .to_string()
            .contains(&format!("answer for {}", marker(i))));
    }

    let mut latencies: Vec<Duration> = per_session.iter().map(|(_, d, _)| *d).collect();
    latencies.sort();
    let secs = total.as_secs_f64();
    eprintln!(
        "serve throughput: {n} concurrent sessions, one turn each (2 model requests + 1 tool \
         call): {secs:.2} s in all, {:.1} turns/s; turn latency median {:.0} ms, max {:.0} ms",
        n as f64 / secs,
        latencies[n / 2].as_secs_f64() * 1000.0,
        latencies[n - 1].as_secs_f64() * 1000.0,
    );
}

#[test]
fn an_sse_client_that_drops_mid_turn_reconnects_and_gets_exactly_the_rest() {
    let ws = tempfile::tempdir().unwrap();
    // Step 1 lists the folder; step 2 waits for the test's go-ahead, then asks for a shell
    // command (an approval request, which comes while no client is connected); step 3 answers.
    let (go, wait) = mpsc::channel::<()>();
    let wait = Mutex::new(wait);
    let llm = ScriptedLlm::start_with(move |request| {
        let results = request_messages(request)
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        match results {
            0 => Scripted::ToolCalls {
                text: "Looking first.".into(),
                calls: vec![("d1".into(), "file_manager__list".into(), "{}".into())],
            },
            1 => {
                let _ = wait.lock().unwrap().recv_timeout(EVENT_LIMIT);
                Scripted::call("d2", "shell", json!({"command": "echo after-the-drop"}))
            }
            _ => Scripted::text("finished without you"),
        }
    });
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);
    let first = server.events("drop1", None);
    server.start_turn("drop1", json!({"message": "list, then run"}));
    let seen = first.until("tool_call_finished");
    assert!(seen.len() >= 4, "{:?}", kinds(&seen));
    let last_seen = seen.last().unwrap().id;
    first.disconnect();

    // The model goes on; its shell call waits for an answer nobody is connected to see.
    go.send(()).unwrap();
    let deadline = Instant::now() + EVENT_LIMIT;
    loop {
        let r = server.post(
            "/api/tool-approval/drop1/d2",
            &json!({"decision": "approve"}),
        );
        if r.status == 200 {
            break;
        }
        r.assert_error(404, "no call d2");
        assert!(Instant::now() < deadline, "the approval request never came");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.wait_not_running("drop1");

    let again = server.events("drop1", Some(last_seen));
    let rest = again.until("turn_finished");
    assert_seq_from(&rest, last_seen + 1, "drop1");
    let kinds_rest = kinds(&rest);
    let asked = rest
        .iter()
        .find(|e| e.kind() == "tool_approval_request")
        .unwrap_or_else(|| panic!("the approval request was lost: {kinds_rest:?}"));
    assert_eq!(asked.data["call_id"], "d2");
    let ran = rest
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .unwrap();
    assert_eq!(ran.data["id"], "d2");
    assert!(ran.data["result_preview"]
        .as_str()
        .unwrap()
        .contains("after-the-drop"));
    assert_eq!(rest.last().unwrap().data["stop_reason"], "end_turn");
    // Exactly the rest: nothing more comes.
    assert!(again.next_within(Duration::from_millis(300)).is_none());

    // The same events a client connected all along would have got.
    let whole = server.events("drop1", None);
    let everything = whole.until("turn_finished");
    assert_seq_from(&everything, 1, "drop1");
    let ids = |events: &[Event]| events.iter().map(|e| e.data.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&everything[..seen.len()]), ids(&seen));
    assert_eq!(ids(&everything[seen.len()..]), ids(&rest));
}

#[test]
fn a_server_killed_mid_turn_leaves_readable_files_and_a_new_server_continues() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start_with(|request| {
        match (
            last_user_text(request).as_str(),
            ends_with_tool_result(request),
        ) {
            ("first question", false) => Scripted::call(
                "k1",
                "shell",
                json!({"command": "echo started-k1; sleep 20; echo never"}),
            ),
            ("second question", false) => Scripted::text("picking up where we were"),
            _ => Scripted::text("unexpected"),
        }
    });
    let mut server = Server::start(ws.path(), Some(&llm), &["--mode", "full"]);
    // A call that finished before the crash, so the trajectory has a record.
    let pre = server.post(
        "/api/sessions/crash1/tools/file_manager__list?call_id=pre1",
        &json!({}),
    );
    assert_eq!(pre.json()["status"], "done");
    let events = server.events("crash1", None);
    server.start_turn("crash1", json!({"message": "first question"}));
    let got = events.until("tool_call_output");
    assert!(got.last().unwrap().data["text"]
        .as_str()
        .unwrap()
        .contains("started-k1"));

    server.signal(libc::SIGKILL);
    let status = server.wait_exit(EVENT_LIMIT).expect("SIGKILL ends it");
    assert!(!status.success());
    drop(events);
    // A write cut by the crash, in both files.
    let messages_path = ws.path().join(".toolbox/sessions/crash1/messages.jsonl");
    let mut text = std::fs::read_to_string(&messages_path).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
    text.push_str("{\"role\":\"assistant\",\"content\":\"half a rep");
    std::fs::write(&messages_path, &text).unwrap();
    let trajectory_path = trajectory_file(ws.path(), "crash1");
    let mut traj = std::fs::read_to_string(&trajectory_path).unwrap();
    traj.push_str("{\"id\":\"torn\",\"tool\":\"she");
    std::fs::write(&trajectory_path, &traj).unwrap();

    let server = Server::start(ws.path(), Some(&llm), &["--mode", "full"]);
    let loaded = server.get("/api/sessions/crash1/messages");
    assert_eq!(loaded.status, 200, "{}", loaded.text());
    let loaded = loaded.json();
    let roles: Vec<&str> = loaded["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{loaded}");
    assert!(loaded["messages"][2]["content"]
        .as_str()
        .unwrap()
        .contains("interrupted"));
    let warnings = loaded["warnings"].to_string();
    assert!(warnings.contains("cut short"), "{warnings}");
    assert!(warnings.contains("k1"), "{warnings}");
    let trajectory = server.get("/api/sessions/crash1/trajectory");
    assert_eq!(trajectory.status, 200, "{}", trajectory.text());
    let trajectory = trajectory.json();
    assert_eq!(trajectory["total"], 1, "{trajectory}");
    assert_eq!(trajectory["calls"][0]["id"], "pre1");

    let events = server.events("crash1", None);
    server.start_turn("crash1", json!({"message": "second question"}));
    let got = events.until("turn_finished");
    assert_eq!(got.last().unwrap().data["stop_reason"], "end_turn");
    let warned: Vec<&Value> = got
        .iter()
        .filter(|e| e.kind() == "error")
        .map(|e| &e.data)
        .collect();
    assert!(
        warned
            .iter()
            .any(|w| w["message"].as_str().unwrap().starts_with("warning:")),
        "{warned:?}"
    );
    // The model got the whole story: the first question, the call, its interruption, and
    // the new question.
    let last = llm.requests().pop().unwrap();
    let sent = request_messages(&last);
    let contents: Vec<String> = sent.iter().map(|m| m["content"].to_string()).collect();
    let pos = |needle: &str| {
        contents
            .iter()
            .position(|c| c.contains(needle))
            .unwrap_or_else(|| panic!("{needle} not sent: {contents:?}"))
    };
    assert!(pos("first question") < pos("interrupted"));
    assert!(pos("interrupted") < pos("second question"));
    assert!(sent
        .iter()
        .any(|m| m["tool_calls"].to_string().contains("k1")));
    let after = server.get("/api/sessions/crash1/messages").json();
    let roles: Vec<&str> = after["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user", "assistant"]);
}

#[test]
fn a_slow_tool_in_one_session_never_delays_another() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start_with(|request| {
        match (
            first_user_text(request).as_str(),
            ends_with_tool_result(request),
        ) {
            ("slow", false) => Scripted::call("s1", "shell", json!({"command": "sleep 30"})),
            ("slow", true) => Scripted::text("slow done"),
            _ => Scripted::text("quick done"),
        }
    });
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "full"]);
    let slow = server.events("slowA", None);
    server.start_turn("slowA", json!({"message": "slow"}));
    slow.until("tool_call_started");

    let quick = server.events("quickB", None);
    server.start_turn("quickB", json!({"message": "quick"}));
    let got = quick.until("turn_finished");
    assert_eq!(got.last().unwrap().data["stop_reason"], "end_turn");
    // A single tool call in a third session, too.
    let single = server.post("/api/sessions/thirdC/tools/file_manager__list", &json!({}));
    assert_eq!(single.json()["status"], "done");
    // All while A's tool still runs.
    assert!(server.running("slowA"));
    assert!(!server.running("quickB"));
    assert!(slow
        .next_within(Duration::from_millis(10))
        .is_none_or(|e| e.kind() != "tool_call_finished"));

    let r = server.post("/api/sessions/slowA/cancel", &json!({}));
    assert_eq!(r.json(), json!({"cancelled": true}));
    let rest = slow.until("turn_finished");
    assert_eq!(rest.last().unwrap().data["stop_reason"], "cancelled");
}

#[test]
fn sigterm_mid_turn_cancels_it_cleanly_and_exits_0() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start_with(|request| {
        if ends_with_tool_result(request) {
            Scripted::text("should not be asked")
        } else {
            Scripted::call(
                "t1",
                "shell",
                json!({"command": "echo pid=$$ started-t1; sleep 30; echo never"}),
            )
        }
    });
    let mut server = Server::start(ws.path(), Some(&llm), &["--mode", "full"]);
    let events = server.events("term1", None);
    server.start_turn("term1", json!({"message": "run something long"}));
    // The command runs in the session's scratchpad; it says its pid on stdout.
    let mut output = String::new();
    while !output.contains("started-t1") {
        let event = events.next();
        if event.kind() == "tool_call_output" {
            output.push_str(event.data["text"].as_str().unwrap());
        }
    }
    let shell_pid: i32 = output
        .split("pid=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {output:?}"));
    assert!(alive(shell_pid));

    server.signal(libc::SIGTERM);
    // The connected client sees the turn end, then the stream closes.
    let rest = events.until("turn_finished");
    assert_eq!(rest.last().unwrap().data["stop_reason"], "cancelled");
    let call = rest
        .iter()
        .find(|e| e.kind() == "tool_call_finished")
        .unwrap();
    assert_eq!(call.data["error_kind"], "cancelled");
    assert!(events.ends_within(EVENT_LIMIT), "the stream stayed open");
    let status = server
        .wait_exit(EVENT_LIMIT)
        .unwrap_or_else(|| panic!("still running after SIGTERM: {}", server.stderr()));
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert!(
        server.stderr().contains("SIGTERM: stopping"),
        "{}",
        server.stderr()
    );
    // Stopped, not left behind (a bounded wait: the kernel may take a moment to reap it).
    let deadline = Instant::now() + EVENT_LIMIT;
    while alive(shell_pid) {
        assert!(
            Instant::now() < deadline,
            "the shell command outlived the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        llm.requests().len() == 1,
        "the model was asked again after the cancel"
    );

    // What the turn wrote is whole: every line a message, the call answered.
    let messages = json_lines(&ws.path().join(".toolbox/sessions/term1/messages.jsonl"));
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(messages[2]["tool_call_id"], "t1");
    assert!(messages[2]["content"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
    let calls = json_lines(&trajectory_file(ws.path(), "term1"));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["id"], "t1");
    assert_eq!(calls[0]["error_kind"], "cancelled");
}
