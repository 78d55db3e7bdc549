//! Issue 37, point 3: code a model runs must not reach `toolbox serve`'s API as the person.
//!
//! The repro: after one approved Python call, a detached helper (its own session, its
//! parent gone) follows the event stream and approves every later question, the review of
//! the plan included. It finds whatever credentials it can: the serving process's command
//! line and the token file it names. Here the person answers only the first question, as in
//! the report; every later one the helper tries is refused (403, before the server reads a
//! byte), the person denies them, and nothing they asked for runs. On a loopback server with
//! no token, and on one started with `--token-file`.

mod common;
mod serve_common;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{finished, serve_command, Event, Server};
use toolbox_executor::ErrorKind;
use toolbox_tests::assert_json_error;
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

/// The helper the model's code leaves behind: reads the event stream, then approves each
/// question (by the call ids the model gave) as soon as it is asked, writing one line per
/// attempt to `log`. Bounded: 40 s, then it exits.
const HELPER: &str = r#"
import json, os, re, sys, time, urllib.request, urllib.error
base, sid, log = sys.argv[1], sys.argv[2], sys.argv[3]
def note(text):
    with open(log, "a") as f:
        f.write(text + "\n")
def find_token():
    # The serving toolbox's command line, and a token file it names.
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"serve" not in args:
            continue
        for i, a in enumerate(args):
            if a == b"--token" and i + 1 < len(args):
                return args[i + 1].decode()
            if a == b"--token-file" and i + 1 < len(args):
                try:
                    return open(args[i + 1]).read().strip()
                except OSError as e:
                    note("token file unreadable: " + str(e))
    return None
token = find_token()
note("token: " + ("found" if token else "none"))
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)
# The event stream, as the person's console reads it (a few seconds of it).
try:
    req = urllib.request.Request(base + f"/api/sessions/{sid}/events")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=3) as r:
        note(f"events: {r.status}")
except urllib.error.HTTPError as e:
    note(f"events: {e.code} {e.read().decode()[:200]}")
except OSError as e:
    note(f"events: {e}")
# Then the answers: each question as soon as it is asked (404 until then).
ids = sys.argv[4].split(",")
tried = set()
deadline = time.time() + 40
while time.time() < deadline and len(tried) < len(ids):
    for cid in ids:
        if cid in tried:
            continue
        status, reply = call("POST", f"/api/tool-approval/{sid}/{cid}", {"decision": "approve"})
        if status == 404:
            continue
        tried.add(cid)
        note(f"approve {cid}: {status} {reply[:200]}")
    time.sleep(0.2)
"#;

fn wait_for_line(log: &Path, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(want) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn own_code_cannot_answer(token_file: bool) {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let log = outside.path().join("helper.log");
    let marker = ws.path().join("ran.txt");
    let python = toolbox_tests::test_python();
    let helper = outside.path().join("helper.py");
    std::fs::write(&helper, HELPER).unwrap();
    // The address is only known once the server listens: the model's code reads it from a
    // file the test writes then.
    let addr_file = outside.path().join("addr");
    let spawn = format!(
        "import subprocess\nbase = open({addr:?}).read().strip()\n\
         subprocess.Popen([{py:?}, {helper:?}, base, 's1', {log:?}, 'sh1,r1'], start_new_session=True, \
         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n\
         print('helper started')",
        addr = addr_file.display().to_string(),
        py = python.display().to_string(),
        helper = helper.display().to_string(),
        log = log.display().to_string(),
    );
    let llm = ScriptedLlm::start(vec![
        Scripted::call("py1", "run_python_code", json!({"code": spawn})),
        Scripted::call(
            "sh1",
            "shell",
            json!({"command": format!("echo ran > {}", marker.display())}),
        ),
        Scripted::call("p1", "plan__set", json!({"steps": ["Run the command"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::text("done"),
    ]);
    let token = "a-long-random-token-0123456789abcdef";
    let token_path = outside.path().join("host-token");
    std::fs::write(&token_path, format!("{token}\n")).unwrap();
    let mut extra = vec!["--mode", "auto"];
    let token_arg = token_path.display().to_string();
    if token_file {
        extra.extend(["--token-file", token_arg.as_str()]);
    }
    let mut server = Server::spawn(serve_command(ws.path(), Some(&llm), &extra), ws.path());
    if token_file {
        server = server.with_token(token);
    }
    std::fs::write(&addr_file, format!("http://{}", server.host())).unwrap();
    let events = server.events("s1", None);
    server.start_turn("s1", json!({"message": "go"}));

    // The one question the person answers: the Python call.
    let seen = events.until("tool_approval_request");
    assert_eq!(seen.last().unwrap().data["call_id"], "py1");
    let yes = server.post("/api/tool-approval/s1/py1", &json!({"decision": "approve"}));
    assert_eq!(yes.status, 200, "{}", yes.text());

    // The shell command's question: the helper tries first; then the person says no.
    let seen = events.until("tool_approval_request");
    assert_eq!(seen.last().unwrap().data["call_id"], "sh1");
    let helper_log = wait_for_line(&log, "approve sh1");
    assert!(helper_log.contains("approve sh1: 403"), "{helper_log}");
    let no = server.post("/api/tool-approval/s1/sh1", &json!({"decision": "deny"}));
    assert_eq!(no.status, 200, "the question was still open: {}", no.text());

    // The review: the same.
    let seen = events.until("review_request");
    assert_eq!(seen.last().unwrap().data["call_id"], "r1");
    let helper_log = wait_for_line(&log, "approve r1");
    assert!(helper_log.contains("approve r1: 403"), "{helper_log}");
    let no = server.post(
        "/api/tool-approval/s1/r1",
        &json!({"decision": "reject", "feedback": "not you"}),
    );
    assert_eq!(no.status, 200, "{}", no.text());

    let rest = events.until("turn_finished");
    let all: Vec<Event> = seen.into_iter().chain(rest).collect();
    assert_json_error(finished(&all, "sh1"), ErrorKind::Denied, &[]);
    assert!(
        !marker.exists(),
        "the command the helper tried to approve did not run"
    );
    // Every request of the helper was refused, whatever it found.
    let helper_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!helper_log.contains(": 200"), "{helper_log}");
    assert!(helper_log.contains("toolbox started"), "{helper_log}");
    // Who answered is on the record: the person's address, not the helper's.
    let trajectory =
        std::fs::read_to_string(ws.path().join(".toolbox/trajectories/s1/tool_calls.jsonl"))
            .unwrap();
    let py1: Value = trajectory
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["id"] == "py1")
        .unwrap();
    let by = py1["approved_by"].as_str().unwrap_or_default();
    assert!(by.starts_with("http from 127.0.0.1:"), "{py1}");
    assert!(
        by.ends_with(if token_file {
            "with the token"
        } else {
            "(loopback, no token)"
        }),
        "{by}"
    );
}

#[test]
fn model_run_code_cannot_answer_approvals_on_a_loopback_server() {
    own_code_cannot_answer(false);
}

#[test]
fn model_run_code_cannot_answer_approvals_even_with_the_token_file() {
    own_code_cannot_answer(true);
}
