//! Session server mode (`toolbox serve --session SID --epoch N --state-store URL`) through the real
//! binary, a local state store, and real kills:
//!
//! - a session server killed with SIGKILL mid-turn, while a shell command runs, resumes in another
//!   folder with the next epoch: files, messages, trajectory and memory equal the last sync,
//!   the client sees `session_resumed` and the lost turn ends `interrupted`, and a
//!   `Last-Event-ID` of the old epoch replays the old session server's events after it;
//! - a session server stopped with SIGSTOP while another resumes the session: after SIGCONT its
//!   uploads never become HEAD, its turn ends `superseded`, and it exits;
//! - park, then resume: nothing lost; a reused epoch is refused;
//! - a corrupted blob makes the resume fail cleanly, serving nothing.

mod common;

mod serve_common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{
    ends_with_tool_result, file_store, last_user_text, session_server_args, session_server_command,
    wait_until, Server, EVENT_LIMIT,
};
use toolbox_tests::assert_err_contains;
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

const SID: &str = "moving";

fn session_server(
    ws: &Path,
    store: &Path,
    epoch: impl ToString,
    llm: Option<&ScriptedLlm>,
) -> Server {
    session_server_every(ws, store, epoch, llm, "300ms")
}

/// [`session_server`] with another `--sync-every`.
fn session_server_every(
    ws: &Path,
    store: &Path,
    epoch: impl ToString,
    llm: Option<&ScriptedLlm>,
    every: &str,
) -> Server {
    let cmd = session_server_command(ws, llm, SID, epoch, &file_store(store), Some(every));
    Server::spawn(cmd, ws)
}

/// The newest head of the session's chain in the store, and its place.
fn latest_head(store: &Path) -> (u64, Value) {
    let dir = store.join("sessions").join(SID).join("heads");
    let newest = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse::<u64>().ok())
        .max()
        .expect("a head");
    let text = std::fs::read_to_string(dir.join(format!("{newest:020}"))).unwrap();
    (newest, serde_json::from_str(&text).unwrap())
}

/// Every head of the chain, oldest first.
fn heads(store: &Path) -> Vec<Value> {
    let dir = store.join("sessions").join(SID).join("heads");
    let mut names: Vec<u64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse::<u64>().ok())
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{n:020}"))).unwrap())
                .unwrap()
        })
        .collect()
}

/// The manifest HEAD names.
fn head_manifest(store: &Path) -> Value {
    let (_, head) = latest_head(store);
    match head["manifest"].as_str() {
        Some(key) => {
            serde_json::from_str(&std::fs::read_to_string(store.join(key)).unwrap()).unwrap()
        }
        None => Value::Null,
    }
}

/// Every file under `root` with its content, but the session's events file (which each session
/// server appends to) and SQLite's memory store and its side files (compared through the memory
/// tools instead).
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let events = format!(".toolbox/sessions/{SID}/events.jsonl");
    let mut all = tree_all(root);
    all.retain(|(p, _)| *p != events);
    all
}

/// [`tree`] with the events file.
fn tree_all(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else if !rel.starts_with(".toolbox/memory.sqlite") {
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let top = tempfile::tempdir().unwrap();
    let store = top.path().join("store");
    let (a, b) = (top.path().join("node-a"), top.path().join("node-b"));
    (top, store, a, b)
}

#[test]
fn a_session_server_killed_mid_turn_resumes_elsewhere_from_its_last_sync() {
    let (_top, store, node_a, node_b) = dirs();
    let llm = ScriptedLlm::start_with(|request| {
        match (
            last_user_text(request).as_str(),
            ends_with_tool_result(request),
        ) {
            ("build it", false) => Scripted::call(
                "k1",
                "shell",
                json!({"command": "echo started-k1; sleep 30; echo never"}),
            ),
            _ => Scripted::text("unexpected"),
        }
    });
    let mut old = session_server(&node_a, &store, 1, Some(&llm));
    // Other sessions are not served here.
    let other = old.get("/api/sessions/elsewhere/messages");
    assert_eq!(other.status, 404, "{}", other.text());
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "notes/plan.md", "content": "1. build\n"}),
    );
    old.call_done(
        SID,
        "memory__save",
        json!({"title": "port", "text": "the service listens on 8123"}),
    );
    let events = old.events(SID, None);
    let turn = old.start_turn(SID, json!({"message": "build it"}));
    let old_events = events.until("tool_call_output");
    // Mid-call: a periodic sync records the open turn and everything written so far.
    wait_until("a sync naming the open turn", || {
        let manifest = head_manifest(&store);
        let synced: Vec<(String, u64)> = manifest["files"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["path"] != ".toolbox/memory.sqlite")
            .map(|f| {
                (
                    f["path"].as_str().unwrap().to_string(),
                    f["size"].as_u64().unwrap(),
                )
            })
            .collect();
        let on_disk: Vec<(String, u64)> = tree_all(&node_a)
            .into_iter()
            .map(|(p, c)| (p, c.len() as u64))
            .collect();
        manifest["open_turn"] == turn.as_str() && synced == on_disk
    });
    let manifest = head_manifest(&store);
    let files: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"notes/plan.md"), "{files:?}");
    assert!(files.contains(&".toolbox/memory.sqlite"), "{files:?}");
    old.signal(libc::SIGKILL);
    old.wait_exit(EVENT_LIMIT).expect("SIGKILL ends it");
    drop(events);
    let before = tree(&node_a);

    let new = session_server(&node_b, &store, 2, Some(&llm));
    assert_eq!(
        tree(&node_b),
        before,
        "the restored files differ from the last sync"
    );
    let events = new.events(SID, None);
    let resumed = events.until("session_resumed");
    let resumed = &resumed.last().unwrap().data;
    assert_eq!(resumed["epoch"], 2, "{resumed}");
    assert!(resumed["restored_bytes"].as_u64().unwrap() > 0, "{resumed}");
    assert_eq!(
        resumed["lost"],
        json!(["python", "background_jobs", "pending_approvals"])
    );
    let finished = events.until("turn_finished");
    let finished = &finished.last().unwrap().data;
    assert_eq!(finished["turn_id"], turn.as_str(), "{finished}");
    assert_eq!(finished["stop_reason"], "interrupted", "{finished}");
    // SSE ids are epoch:seq. An id from the old session server's epoch gets this session server's
    // whole history (session_resumed first); one of this epoch gets what came after it.
    let mut req = new.req("GET", &format!("/api/sessions/{SID}/events"));
    req = req.header("Last-Event-ID", "1:41");
    let replay = serve_common::Sse::open(req);
    assert_eq!(replay.next().kind(), "session_resumed");
    // One of epoch 1 that the old session server had sent more after: those, from its synced events
    // file, with their old ids, then this session server's history.
    let started = old_events
        .iter()
        .position(|e| e.kind() == "turn_started")
        .unwrap();
    let mut req = new.req("GET", &format!("/api/sessions/{SID}/events"));
    req = req.header("Last-Event-ID", &format!("1:{}", old_events[started].id));
    let replay = serve_common::Sse::open(req);
    for expected in &old_events[started + 1..] {
        let got = replay.next();
        assert_eq!((got.id, got.kind()), (expected.id, expected.kind()));
        assert_eq!(got.data, expected.data);
    }
    assert_eq!(replay.next().kind(), "session_resumed");
    let events_file = format!(".toolbox/sessions/{SID}/events.jsonl");
    let old_file = std::fs::read(node_a.join(&events_file)).unwrap();
    assert!(std::fs::read(node_b.join(&events_file))
        .unwrap()
        .starts_with(&old_file));
    let mut req = new.req("GET", &format!("/api/sessions/{SID}/events"));
    req = req.header("Last-Event-ID", "2:1");
    let replay = serve_common::Sse::open(req);
    assert_eq!(replay.next().kind(), "turn_finished");
    // An MCP session of the old session server is unknown here: 404, so the client initialises
    // again.
    let r = new
        .req("POST", "/mcp")
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", "a-session-of-the-old-session-server")
        .header("MCP-Protocol-Version", "2025-06-18")
        .body(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec())
        .send();
    assert_eq!(r.status, 404, "{}", r.text());
    // The dangling shell call is answered as interrupted, and the memory is there.
    let messages = new.get(&format!("/api/sessions/{SID}/messages")).json();
    let last = messages["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool", "{messages}");
    assert!(
        last["content"].as_str().unwrap().contains("interrupted"),
        "{last}"
    );
    let found = new.call_done(SID, "memory__search", json!({"query": "service listens"}));
    assert!(
        found["result"].as_str().unwrap().contains("8123"),
        "{found}"
    );
    let trajectory = new.get(&format!("/api/sessions/{SID}/trajectory")).json();
    assert_eq!(
        trajectory["total"], 3,
        "the two calls before the kill, and the search: {trajectory}"
    );
}

#[test]
fn a_stopped_session_server_resumed_elsewhere_never_moves_head_and_exits() {
    let (_top, store, node_a, node_b) = dirs();
    let llm = ScriptedLlm::start_with(|request| {
        match (
            last_user_text(request).as_str(),
            ends_with_tool_result(request),
        ) {
            ("wait", false) => Scripted::call(
                "z1",
                "shell",
                json!({"command": "echo zombie-started; sleep 30"}),
            ),
            _ => Scripted::text("done"),
        }
    });
    let mut old = session_server(&node_a, &store, 1, Some(&llm));
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "a.txt", "content": "before"}),
    );
    let events = old.events(SID, None);
    old.start_turn(SID, json!({"message": "wait"}));
    events.until("tool_call_output");
    wait_until("a sync of a.txt", || {
        head_manifest(&store)["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["path"] == "a.txt"))
    });
    old.signal(libc::SIGSTOP);
    let new = session_server(&node_b, &store, 2, Some(&llm));
    let (fence, head) = latest_head(&store);
    assert_eq!(head["epoch"], 2);
    // The stopped session server's workspace changes; when it wakes it tries to sync.
    std::fs::write(node_a.join("a.txt"), "written by the zombie").unwrap();
    old.signal(libc::SIGCONT);
    let finished = events.until("turn_finished");
    assert_eq!(finished.last().unwrap().data["stop_reason"], "superseded");
    let status = old
        .wait_exit(EVENT_LIMIT)
        .expect("the superseded session server exits");
    assert_eq!(status.code(), Some(3), "{}", old.stderr());
    assert!(old.stderr().contains("epoch 2"), "{}", old.stderr());
    for head in &heads(&store)[fence as usize - 1..] {
        assert_eq!(head["epoch"], 2, "a head past the fence: {head}");
    }
    // The new session server serves the state as of the fence.
    assert_eq!(
        std::fs::read_to_string(node_b.join("a.txt")).unwrap(),
        "before"
    );
    let r = new.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
}

#[test]
fn park_then_resume_loses_nothing_and_an_epoch_is_used_once() {
    let (_top, store, node_a, node_b) = dirs();
    let llm = ScriptedLlm::start_with(|_| Scripted::text("hello back"));
    let mut old = session_server(&node_a, &store, 1, Some(&llm));
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "src/main.py", "content": "print(1)\n"}),
    );
    old.call_done(
        SID,
        "memory__save",
        json!({"title": "owner", "text": "ask Ada about the cache"}),
    );
    let events = old.events(SID, None);
    old.start_turn(SID, json!({"message": "hello"}));
    events.until("turn_finished");
    let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    let status = old
        .wait_exit(EVENT_LIMIT)
        .expect("a parked session server exits");
    assert!(status.success(), "{}", old.stderr());
    let before = tree(&node_a);

    // The same epoch again: refused, nothing served.
    let out = session_server_command(&node_b, None, SID, 1, &file_store(&store), None)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("epoch 1 was claimed already"), "{stderr}");
    assert!(!stderr.contains("listening"), "{stderr}");

    let new = session_server(&node_b, &store, 2, Some(&llm));
    assert_eq!(tree(&node_b), before);
    let events = new.events(SID, None);
    let resumed = events.until("session_resumed");
    assert_eq!(resumed.last().unwrap().data["epoch"], 2);
    assert!(
        events.next_within(Duration::from_millis(300)).is_none(),
        "a parked session has no turn to end"
    );
    let messages = new.get(&format!("/api/sessions/{SID}/messages")).json();
    assert_eq!(
        messages["messages"].as_array().unwrap().len(),
        2,
        "{messages}"
    );
    let found = new.call_done(SID, "memory__search", json!({"query": "Ada"}));
    assert!(
        found["result"].as_str().unwrap().contains("cache"),
        "{found}"
    );
}

#[test]
fn epoch_next_claims_the_lowest_free_epoch_and_a_bad_epoch_is_a_usage_error() {
    let (_top, store, node_a, node_b) = dirs();
    let mut old = session_server(&node_a, &store, "next", None);
    assert!(
        old.stderr().contains(&format!("session {SID} at epoch 1")),
        "{}",
        old.stderr()
    );
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "kept.txt", "content": "from epoch 1"}),
    );
    let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    assert!(old.wait_exit(EVENT_LIMIT).expect("parked").success());

    let new = session_server(&node_b, &store, "next", None);
    let health = new.get("/api/health").json();
    assert_eq!(health["session_server"]["epoch"], 2, "{health}");
    // `host`, its old name, stays as an alias for adapters that read it.
    assert_eq!(health["host"], health["session_server"], "{health}");
    assert!(
        new.stderr().contains("resumed at epoch 2"),
        "{}",
        new.stderr()
    );
    assert_eq!(
        std::fs::read_to_string(node_b.join("kept.txt")).unwrap(),
        "from epoch 1"
    );

    for bad in ["0", "soon", "1.5"] {
        let out = session_server_command(&node_a, None, SID, bad, &file_store(&store), None)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--epoch {bad}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--epoch") && stderr.contains("`next`"),
            "--epoch {bad}: {stderr}"
        );
    }
}

#[test]
fn a_park_lets_the_calls_in_flight_finish_and_their_effects_are_in_the_last_sync() {
    let (_top, store, node_a, node_b) = dirs();
    // No periodic sync: only the park's last one can store what the slow call writes.
    let mut old = session_server_every(&node_a, &store, 1, None, "1h");
    let answer = std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            old.post(
                &format!("/api/sessions/{SID}/tools/shell"),
                &json!({
                    "command": "touch started.txt; sleep 1.5; echo landed > slow.txt",
                    "cwd": "."
                }),
            )
        });
        wait_until("the slow call to start", || {
            node_a.join("started.txt").exists()
        });
        let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
        assert_eq!(r.status, 202, "{}", r.text());
        slow.join().unwrap()
    });
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["status"], "done", "{}", answer.text());
    let status = old
        .wait_exit(EVENT_LIMIT)
        .expect("a parked session server exits");
    assert!(status.success(), "{}", old.stderr());

    let _new = session_server(&node_b, &store, 2, None);
    assert_eq!(
        std::fs::read_to_string(node_b.join("slow.txt")).unwrap(),
        "landed\n"
    );
}

#[test]
fn a_corrupted_blob_refuses_the_resume_and_serves_nothing() {
    let (_top, store, node_a, node_b) = dirs();
    // No periodic sync: only the one on SIGTERM can store late.txt.
    let mut old = session_server_every(&node_a, &store, 1, None, "1h");
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "data.csv", "content": "a,b\n1,2\n"}),
    );
    wait_until("the sync after the call", || {
        head_manifest(&store)["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["path"] == "data.csv"))
    });
    std::fs::write(
        node_a.join("late.txt"),
        "written behind the session server's back",
    )
    .unwrap();
    old.signal(libc::SIGTERM);
    let status = old.wait_exit(EVENT_LIMIT).expect("SIGTERM ends it");
    assert!(status.success(), "{}", old.stderr());
    let manifest = head_manifest(&store);
    let entry = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "data.csv")
        .expect("data.csv was synced")
        .clone();
    assert!(
        manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "late.txt"),
        "the sync on SIGTERM stored late.txt: {manifest}"
    );
    let sha = entry["sha256"].as_str().unwrap();
    std::fs::write(
        store.join(format!("blobs/{}/{sha}", &sha[..2])),
        "a,b\n1,3\n",
    )
    .unwrap();
    let out = session_server_command(&node_b, None, SID, 2, &file_store(&store), None)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("data.csv") && stderr.contains("damaged"),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
    assert_eq!(std::fs::read_dir(&node_b).unwrap().count(), 0);
}

/// moto's S3 server on loopback (tests/requirements.txt: `moto[server]`), killed when dropped.
struct Moto {
    child: std::process::Child,
    port: u16,
}

impl Moto {
    fn start() -> Moto {
        let python = toolbox_tests::test_python();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = std::process::Command::new(&python)
                .args([
                    "-m",
                    "moto.server",
                    "-H",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start moto's server (pip install 'moto[server]')");
            let deadline = Instant::now() + EVENT_LIMIT;
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                    // Make the bucket: moto takes unsigned requests.
                    use std::io::{Read, Write};
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    write!(
                        s,
                        "PUT /toolbox-test HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    .unwrap();
                    let mut answer = String::new();
                    let _ = s.read_to_string(&mut answer);
                    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                    return Moto { child, port };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("moto's server did not start");
    }

    fn session_server(&self, ws: &Path, epoch: u64, llm: Option<&ScriptedLlm>) -> Server {
        Server::spawn(self.command(ws, epoch, llm), ws)
    }

    fn command(&self, ws: &Path, epoch: u64, llm: Option<&ScriptedLlm>) -> std::process::Command {
        let mut cmd =
            session_server_command(ws, llm, SID, epoch, "s3://toolbox-test/stores/one", None);
        cmd.env(
            "AWS_ENDPOINT_URL",
            format!("http://127.0.0.1:{}", self.port),
        )
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing");
        cmd
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn park_then_resume_through_s3_and_an_epoch_is_claimed_once_there_too() {
    let (top, _store, node_a, node_b) = dirs();
    let moto = Moto::start();
    let mut old = moto.session_server(&node_a, 1, None);
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "report.md", "content": "# done\n"}),
    );
    old.call_done(
        SID,
        "memory__save",
        json!({"title": "s3", "text": "stored in moto"}),
    );
    let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    let status = old
        .wait_exit(EVENT_LIMIT)
        .expect("a parked session server exits");
    assert!(status.success(), "{}", old.stderr());
    let before = tree(&node_a);
    let new = moto.session_server(&node_b, 2, None);
    assert_eq!(tree(&node_b), before);
    assert_eq!(new.events(SID, None).until("session_resumed").len(), 1);
    let found = new.call_done(SID, "memory__search", json!({"query": "moto"}));
    assert!(
        found["result"].as_str().unwrap().contains("stored in"),
        "{found}"
    );
    let health = new.get("/api/health").json();
    assert_eq!(health["session_server"]["epoch"], 2, "{health}");
    // `host`, its old name, stays as an alias for adapters that read it.
    assert_eq!(health["host"], health["session_server"], "{health}");
    // If-None-Match: * on S3 refuses a second claim of an epoch.
    let out = moto
        .command(&top.path().join("node-c"), 2, None)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("epoch 2 was claimed already"), "{stderr}");
}

#[test]
fn an_mcp_client_whose_session_server_moves_gets_404_then_a_new_session_works() {
    use std::io::{BufRead, Write};
    let (_top, store, node_a, node_b) = dirs();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let url = file_store(&store);
    // On the same port each time (the client reconnects to it), so not session_server_command's.
    let start = |ws: &Path, epoch: u64| {
        std::fs::create_dir_all(ws).unwrap();
        let mut cmd = common::toolbox(ws);
        cmd.args(["serve", "--listen", &listen])
            .args(session_server_args(SID, epoch, &url, Some("300ms")));
        Server::spawn(cmd, ws)
    };
    let mut old = start(&node_a, 1);
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "notes/plan.md", "content": "1. move\n"}),
    );
    let mut client = std::process::Command::new(toolbox_tests::test_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp_move_client.py"
        ))
        .arg(format!("http://{listen}/mcp"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(client.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "READY");
    wait_until("a sync of notes/plan.md", || {
        head_manifest(&store)["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["path"] == "notes/plan.md"))
    });
    old.signal(libc::SIGKILL);
    old.wait_exit(EVENT_LIMIT).expect("SIGKILL ends it");
    let _new = start(&node_b, 2);
    writeln!(client.stdin.as_mut().unwrap(), "moved").unwrap();
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(client.wait().unwrap().success());
    eprintln!("the MCP client across the move: {answer}");
    assert!(answer["tools_before"].as_u64().unwrap() > 10, "{answer}");
    assert_ne!(answer["old_session"], "answered", "{answer}");
    assert!(
        answer["after"].as_str().unwrap().contains("1. move"),
        "{answer}"
    );
}

/// A call over `/mcp` is a sync point like one over the HTTP API: with the periodic sync an
/// hour away, a file written through MCP reaches the store right after the call.
#[test]
fn a_call_over_mcp_is_synced_without_waiting_for_the_timer() {
    let (_top, store, node_a, _node_b) = dirs();
    let server = session_server_every(&node_a, &store, 1, None, "1h");
    let protocol = "2025-06-18";
    let r = server
        .req("POST", "/mcp")
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": protocol, "capabilities": {},
                       "clientInfo": {"name": "serve_session_server.rs", "version": "0"}},
        }))
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r.header("mcp-session-id").expect("a session").to_string();
    let mcp = |body: Value| {
        server
            .req("POST", "/mcp")
            .header("Accept", "application/json, text/event-stream")
            .header("Mcp-Session-Id", &session)
            .header("MCP-Protocol-Version", protocol)
            .json(&body)
            .send()
    };
    let r = mcp(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(r.status, 202, "{}", r.text());
    let r = mcp(json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "file_manager__write",
                   "arguments": {"path": "via-mcp.txt", "content": "synced\n"}},
    }));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("Wrote"), "{}", r.text());
    wait_until("via-mcp.txt in the store", || {
        head_manifest(&store)["files"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["path"] == "via-mcp.txt"))
    });
}

/// Issue 37, point 4: the workspace's own `toolbox.toml` arrives with the restore; it may
/// only tighten, and it does so from the first call after the resume, not from the next
/// start.
#[test]
fn a_restored_workspace_config_holds_from_the_first_call() {
    let (_top, store, node_a, node_b) = dirs();
    std::fs::create_dir_all(&node_a).unwrap();
    std::fs::write(node_a.join("toolbox.toml"), "mode = \"read_only\"\n").unwrap();
    let mut old = session_server(&node_a, &store, 1, None);
    let r = old.post(
        &format!("/api/sessions/{SID}/tools/shell"),
        &json!({"command": "echo before > ran-a.txt"}),
    );
    // read_only on the first session server too.
    assert_err_contains(&r.json(), &["read_only"]);
    let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    old.wait_exit(EVENT_LIMIT)
        .expect("a parked session server exits");

    let new = session_server(&node_b, &store, 2, None);
    assert!(node_b.join("toolbox.toml").exists(), "restored");
    let r = new.post(
        &format!("/api/sessions/{SID}/tools/shell"),
        &json!({"command": "echo after > ran-b.txt"}),
    );
    assert_err_contains(&r.json(), &["read_only"]);
    assert!(!node_b.join("ran-b.txt").exists());
}

/// Issue 37, point 8: a session server whose session a newer epoch took over answered `done` to
/// writes that were then lost (it learned of the new epoch only at its next sync). Now a call asks
/// the store first, and the answer is 503 once the newer epoch is known.
#[test]
fn a_stale_session_server_answers_503_once_a_newer_epoch_is_known() {
    let (_top, store, node_a, node_b) = dirs();
    // The old session server syncs rarely: only the calls themselves can learn of the new epoch.
    let old = session_server_every(&node_a, &store, 1, None, "1h");
    old.call_done(
        SID,
        "file_manager__write",
        json!({"path": "before.txt", "content": "kept"}),
    );
    let r = old.post(&format!("/api/sessions/{SID}/park"), &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    let mut old = old;
    old.wait_exit(EVENT_LIMIT).expect("parked");
    let stale = session_server_every(&node_a.with_extension("again"), &store, 2, None, "1h");
    // A newer session server claims the session while the stale one still serves.
    let _new = session_server_every(&node_b, &store, 3, None, "1h");
    let r = stale.post(
        &format!("/api/sessions/{SID}/tools/file_manager__write"),
        &json!({"path": "lost.txt", "content": "never synced"}),
    );
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("epoch 3 took it over"), "{}", r.text());
    assert!(!node_a.with_extension("again").join("lost.txt").exists());
}
