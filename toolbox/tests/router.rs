//! `toolbox router` through the real binary, in front of real `toolbox serve --session` session
//! servers placed by a fake placement adapter written here (a small HTTP server on 127.0.0.1 that
//! starts session servers as processes, counts epochs, and can be told it has no capacity):
//!
//! - calls through the router reach their session's server; the router's token is required and
//!   a session server's token never reaches the client;
//! - a session server killed with SIGKILL is placed again at a higher epoch and the next call
//!   works; SSE through the router after the move gets the resumed session server's
//!   `session_resumed`, and a client's `Last-Event-ID` reaches the session server;
//! - a superseded session server's 503 makes the router look up once more (`stale_epoch`); a call
//!   that reached a session server which then died is never sent again;
//! - the adapter's 503 becomes the router's 503 with `Retry-After`;
//! - `/s/{sid}/mcp` with the Python MCP client lists and calls a tool;
//! - `GET /api/sessions` merges two session servers and a parked session; the session feed across
//!   session servers; an approval answered through the router.

mod common;

mod serve_common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use serve_common::{
    file_store, session_server_command, wait_until, Req, Server, Sse, EVENT_LIMIT, IO_LIMIT,
};

/// The router's own token (the clients').
const ROUTER_TOKEN: &str = "router-token-0123456789abcdef";

static TOKENS: AtomicU64 = AtomicU64::new(1);

/// A fresh session server token, different for every session server.
fn server_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "server-secret-{nanos:x}-{}",
        TOKENS.fetch_add(1, Ordering::Relaxed)
    )
}

/// One session as the fake adapter holds it.
struct Placed {
    server: Option<Server>,
    url: String,
    token: String,
    epoch: u64,
    node: String,
    state: &'static str,
}

#[derive(Default)]
struct AdapterState {
    sessions: HashMap<String, Placed>,
    nodes: u32,
    /// Every `:ensure`: the session and its `stale_epoch`.
    ensures: Vec<(String, Option<u64>)>,
    /// When set, `:ensure` answers 503 with this `Retry-After`.
    no_capacity: Option<u64>,
    /// The next placements go to these stubs first: (URL, token, epoch).
    stubs: std::collections::VecDeque<(String, String, u64)>,
}

/// The fake placement adapter: the contract of docs/scale-out.md over std::net, each
/// connection on a thread of its own, session servers started as real `toolbox serve` processes.
struct Adapter {
    addr: std::net::SocketAddr,
    state: Arc<Mutex<AdapterState>>,
    stop: Arc<AtomicBool>,
}

impl Adapter {
    fn start(top: &Path) -> Adapter {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state: Arc<Mutex<AdapterState>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let store = top.join("store");
        let top = top.to_path_buf();
        {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (state, store, top) = (state.clone(), store.clone(), top.clone());
                    std::thread::spawn(move || serve_adapter(stream, &state, &store, &top));
                }
            });
        }
        Adapter { addr, state, stop }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut AdapterState) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    fn ensures(&self) -> Vec<(String, Option<u64>)> {
        self.with(|s| s.ensures.clone())
    }

    /// The running session server of `sid`: (epoch, token, workspace).
    fn server_of(&self, sid: &str) -> (u64, String, PathBuf) {
        self.with(|s| {
            let h = &s.sessions[sid];
            let ws = h.server.as_ref().map(|s| s.ws.clone()).unwrap_or_default();
            (h.epoch, h.token.clone(), ws)
        })
    }

    /// SIGKILLs `sid`'s session server and waits for it to die.
    fn kill(&self, sid: &str) {
        self.with(|s| {
            let server = s.sessions.get_mut(sid).unwrap().server.as_mut().unwrap();
            server.signal(libc::SIGKILL);
            server
                .wait_exit(EVENT_LIMIT)
                .expect("SIGKILL ends the session server");
        });
    }
}

impl Drop for Adapter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        // The session servers are killed as their `Server`s drop.
        self.with(|s| s.sessions.clear());
    }
}

/// One request the fake adapter read: method, path, headers (lower-cased), body.
type Request = (String, String, Vec<(String, String)>, Vec<u8>);

/// Reads one HTTP/1.1 request.
fn read_request(stream: &mut TcpStream) -> Option<Request> {
    stream.set_read_timeout(Some(IO_LIMIT)).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((method, path, headers, body))
}

fn respond(stream: &mut TcpStream, status: u16, extra: &str, body: &Value) {
    let body = body.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    );
}

fn row(sid: &str, h: &Placed) -> Value {
    json!({"sid": sid, "state": h.state, "epoch": h.epoch, "node": h.node})
}

fn serve_adapter(mut stream: TcpStream, state: &Mutex<AdapterState>, store: &Path, top: &Path) {
    let Some((method, path, _headers, body)) = read_request(&mut stream) else {
        return;
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(json!({}));
    if method == "GET" && path == "/v1/sessions" {
        let s = state.lock().unwrap();
        let rows: Vec<Value> = s.sessions.iter().map(|(sid, h)| row(sid, h)).collect();
        return respond(&mut stream, 200, "", &json!({"sessions": rows}));
    }
    let Some(rest) = path.strip_prefix("/v1/sessions/") else {
        return respond(&mut stream, 404, "", &json!({"error": "no such path"}));
    };
    if let Some(sid) = rest.strip_suffix(":ensure") {
        let stale = body["stale_epoch"].as_u64();
        let mut s = state.lock().unwrap();
        s.ensures.push((sid.to_string(), stale));
        if let Some(seconds) = s.no_capacity {
            drop(s);
            return respond(
                &mut stream,
                503,
                &format!("Retry-After: {seconds}\r\n"),
                &json!({"error": "no free slot on any node"}),
            );
        }
        if let Some(h) = s.sessions.get_mut(sid) {
            let alive = h
                .server
                .as_mut()
                .is_some_and(|srv| srv.wait_exit(Duration::ZERO).is_none());
            let is_stub = h.server.is_none() && h.state == "running";
            if h.state == "running" && (alive || is_stub) && stale != Some(h.epoch) {
                let answer = json!({"sid": sid, "url": h.url, "token": h.token, "epoch": h.epoch, "node": h.node});
                drop(s);
                return respond(&mut stream, 200, "", &answer);
            }
        }
        let epoch = s.sessions.get(sid).map_or(0, |h| h.epoch) + 1;
        if let Some((url, token, stub_epoch)) = s.stubs.pop_front() {
            let h = Placed {
                server: None,
                url: url.clone(),
                token: token.clone(),
                epoch: stub_epoch,
                node: "stub".into(),
                state: "running",
            };
            s.sessions.insert(sid.to_string(), h);
            drop(s);
            let answer = json!({"sid": sid, "url": url, "token": token, "epoch": stub_epoch, "node": "stub"});
            return respond(&mut stream, 200, "", &answer);
        }
        s.nodes += 1;
        let node = format!("node-{}", s.nodes);
        // The session server starts outside the lock: other sessions are placed meanwhile.
        drop(s);
        let ws = top.join(&node);
        let token = server_token();
        let mut cmd =
            session_server_command(&ws, None, sid, epoch, &file_store(store), Some("300ms"));
        cmd.env("TOOLBOX_SERVE_TOKEN", &token);
        let server = Server::spawn(cmd, &ws);
        let url = format!("http://{}", server.addr);
        let answer = json!({"sid": sid, "url": url, "token": token, "epoch": epoch, "node": node});
        state.lock().unwrap().sessions.insert(
            sid.to_string(),
            Placed {
                server: Some(server),
                url,
                token,
                epoch,
                node,
                state: "running",
            },
        );
        return respond(&mut stream, 200, "", &answer);
    }
    if let Some(sid) = rest.strip_suffix(":park") {
        let mut s = state.lock().unwrap();
        let Some(h) = s.sessions.get_mut(sid) else {
            drop(s);
            return respond(&mut stream, 404, "", &json!({"error": "no such session"}));
        };
        let token = h.token.clone();
        if let Some(server) = h.server.as_mut() {
            let r = server
                .req("POST", &format!("/api/sessions/{sid}/park"))
                .header("Authorization", &format!("Bearer {token}"))
                .json(&json!({}))
                .send();
            assert_eq!(r.status, 202, "{}", r.text());
            server
                .wait_exit(EVENT_LIMIT)
                .expect("a parked session server exits");
        }
        h.state = "parked";
        drop(s);
        return respond(
            &mut stream,
            202,
            "",
            &json!({"sid": sid, "state": "parked"}),
        );
    }
    let s = state.lock().unwrap();
    match s.sessions.get(rest) {
        Some(h) => {
            let r = row(rest, h);
            drop(s);
            respond(&mut stream, 200, "", &r)
        }
        None => {
            drop(s);
            respond(&mut stream, 404, "", &json!({"error": "no such session"}))
        }
    }
}

/// `toolbox router` in front of `adapter`, with the router's token.
fn router(top: &Path, adapter: &Adapter) -> Server {
    let ws = top.join("router");
    std::fs::create_dir_all(&ws).unwrap();
    let mut cmd = common::toolbox(&ws);
    cmd.args([
        "router",
        "--listen",
        "127.0.0.1:0",
        "--placement",
        &adapter.url(),
    ])
    .env("TOOLBOX_ROUTER_TOKEN", ROUTER_TOKEN);
    Server::spawn(cmd, &ws).with_token(ROUTER_TOKEN)
}

/// Whether the newest manifest of `sid` in the store lists `path`.
fn synced(store: &Path, sid: &str, path: &str) -> bool {
    let dir = store.join("sessions").join(sid).join("manifests");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return false;
    };
    let Some(newest) = entries.filter_map(|e| e.ok().map(|e| e.path())).max() else {
        return false;
    };
    std::fs::read_to_string(newest).is_ok_and(|t| t.contains(path))
}

fn events_after(router: &Server, sid: &str, last_event_id: &str) -> Sse {
    let req = router
        .req("GET", &format!("/api/sessions/{sid}/events"))
        .header("Accept", "text/event-stream")
        .header("Last-Event-ID", last_event_id);
    Sse::open(req)
}

#[test]
fn calls_reach_the_session_server_with_the_routers_token_and_server_tokens_stay_inside() {
    let top = tempfile::tempdir().unwrap();
    let adapter = Adapter::start(top.path());
    let router = router(top.path(), &adapter);
    let sid = "alpha";

    // The router's token is required, and a wrong one is refused.
    let bare = Req::new(router.addr, "GET", "/api/health")
        .header("Host", &router.host())
        .send();
    bare.assert_error(401, "Authorization: Bearer");
    let wrong = router
        .req("GET", &format!("/api/sessions/{sid}/messages"))
        .header("Authorization", "Bearer router-token-0123456789abcdeX")
        .send();
    wrong.assert_error(401, "wrong");
    assert!(
        adapter.ensures().is_empty(),
        "nothing placed without the token"
    );

    // A session id that is not one is refused before anything is built from it.
    router
        .post("/api/sessions/.hidden/tools/file_manager__read", &json!({}))
        .assert_error(400, "session id");

    // A call through the router runs on the session server of the session, in its workspace.
    router.call_done(
        sid,
        "file_manager__write",
        json!({"path": "notes/a.txt", "content": "through the router\n"}),
    );
    let (epoch, its_token, ws) = adapter.server_of(sid);
    assert_eq!(epoch, 1);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "through the router\n"
    );
    let read = router.call_done(sid, "file_manager__read", json!({"path": "notes/a.txt"}));
    assert!(
        read["result"]
            .as_str()
            .unwrap()
            .contains("through the router"),
        "{read}"
    );
    // Placed once, then served from the cache.
    assert_eq!(adapter.ensures(), vec![(sid.to_string(), None)]);

    // The session server's token never reaches the client: not in answers, errors or headers.
    let mut seen = Vec::new();
    for r in [
        router.get("/api/health"),
        router.get(&format!("/api/sessions/{sid}/messages")),
        router.post(
            &format!("/api/sessions/{sid}/tools/no_such_tool"),
            &json!({}),
        ),
        router.get("/api/sessions"),
        router.get(&format!("/api/sessions/{sid}/nothing-here")),
    ] {
        seen.push(format!("{} {:?} {}", r.status, r.headers, r.text()));
    }
    let health = router.get("/api/health").json();
    assert_eq!(health["status"], "ok", "{health}");
    assert!(
        health["router"].is_object(),
        "the router's own health: {health}"
    );
    for text in &seen {
        assert!(
            !text.contains(&its_token),
            "a session server token leaked: {text}"
        );
        assert!(
            !text.contains("server-secret"),
            "a session server token leaked: {text}"
        );
    }
    // The session server itself wants its own token, not the router's: the router sent the session
    // server's.
    let url = adapter.with(|s| s.sessions[sid].url.clone());
    let addr = url.trim_start_matches("http://").parse().unwrap();
    Req::new(addr, "GET", &format!("/api/sessions/{sid}/messages"))
        .header("Host", &addr.to_string())
        .header("Authorization", &format!("Bearer {ROUTER_TOKEN}"))
        .send()
        .assert_error(401, "wrong");
}

#[test]
fn a_killed_session_server_is_placed_again_at_a_higher_epoch_and_events_follow_the_move() {
    let top = tempfile::tempdir().unwrap();
    let store = top.path().join("store");
    let adapter = Adapter::start(top.path());
    let router = router(top.path(), &adapter);
    let sid = "mover";

    router.call_done(
        sid,
        "file_manager__write",
        json!({"path": "plan.md", "content": "1. survive\n"}),
    );
    wait_until("a sync of plan.md", || synced(&store, sid, "plan.md"));
    let (epoch, _, _) = adapter.server_of(sid);
    assert_eq!(epoch, 1);
    adapter.kill(sid);

    // The next call finds the connection refused, asks the adapter once with the stale
    // epoch, and runs on the new session server.
    let read = router.call_done(sid, "file_manager__read", json!({"path": "plan.md"}));
    assert!(
        read["result"].as_str().unwrap().contains("1. survive"),
        "{read}"
    );
    let (epoch, _, _) = adapter.server_of(sid);
    assert_eq!(epoch, 2);
    assert_eq!(
        adapter.ensures(),
        vec![(sid.to_string(), None), (sid.to_string(), Some(1))]
    );

    // Events through the router, from an id of the old epoch: the resumed session server's history,
    // which starts with its session_resumed.
    let sse = events_after(&router, sid, "1:0");
    assert_eq!(sse.status, 200);
    let seen = sse.until("session_resumed");
    let resumed = &seen.last().unwrap().data;
    assert_eq!(resumed["epoch"], 2, "{resumed}");
    drop(sse);

    // A Last-Event-ID of the session server's own epoch reaches it: it sends only what came after.
    router.call_done(sid, "shell", json!({"command": "echo moved"}));
    let all = events_after(&router, sid, "2:0");
    let first = all.next();
    assert_eq!(first.kind(), "session_resumed");
    let after = events_after(&router, sid, &format!("2:{}", first.id));
    let next = after.next();
    assert!(next.id > first.id, "{next:?} after {first:?}");
    assert_eq!(next.kind(), "tool_call_output", "{next:?}");
}

#[test]
fn a_call_in_flight_when_its_session_server_dies_is_never_sent_again() {
    let top = tempfile::tempdir().unwrap();
    let adapter = Adapter::start(top.path());
    let router = router(top.path(), &adapter);
    let sid = "inflight";
    router.call_done(sid, "file_manager__list", json!({}));
    let (_, _, ws) = adapter.server_of(sid);
    let running = {
        let req = router
            .req("POST", &format!("/api/sessions/{sid}/tools/shell"))
            .json(&json!({"command": "echo started > started.txt; sleep 30; echo done"}));
        std::thread::spawn(move || req.send())
    };
    wait_until("the call to start on the session server", || {
        // The shell runs in the session's scratchpad.
        ws.join(format!(".toolbox/sessions/{sid}/scratchpad/started.txt"))
            .exists()
    });
    adapter.kill(sid);
    let answer = running.join().unwrap();
    answer.assert_error(502, "failed during the request");
    // The router did not look the session up again for it, so nothing ran it twice.
    assert_eq!(adapter.ensures(), vec![(sid.to_string(), None)]);
    // The next call is placed at the next epoch.
    router.call_done(sid, "file_manager__list", json!({}));
    assert_eq!(adapter.server_of(sid).0, 2);
}

/// A stub session server that answers every request as a superseded session server does.
fn superseded_stub(sid: &'static str) -> (std::net::SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(100) {
            let Ok(mut stream) = stream else { continue };
            if read_request(&mut stream).is_none() {
                continue;
            }
            counted.fetch_add(1, Ordering::SeqCst);
            respond(
                &mut stream,
                503,
                "",
                &json!({"error": format!("this session server no longer serves session {sid}: epoch 2 took it over")}),
            );
        }
    });
    (addr, hits)
}

#[test]
fn a_superseded_session_server_makes_the_router_look_up_once_and_no_capacity_is_503_with_retry_after(
) {
    let top = tempfile::tempdir().unwrap();
    let adapter = Adapter::start(top.path());
    let router = router(top.path(), &adapter);
    let sid = "fenced";
    let (stub, hits) = superseded_stub(sid);
    adapter.with(|s| {
        s.stubs
            .push_back((format!("http://{stub}"), server_token(), 1));
    });
    router.call_done(
        sid,
        "file_manager__write",
        json!({"path": "x.txt", "content": "x"}),
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the stale session server was asked once"
    );
    assert_eq!(
        adapter.ensures(),
        vec![(sid.to_string(), None), (sid.to_string(), Some(1))]
    );
    assert_eq!(adapter.server_of(sid).0, 2);

    // Requests that miss together wait for one `:ensure`.
    let crowd: Vec<_> = (0..8)
        .map(|_| {
            let req = router
                .req("POST", "/api/sessions/crowd/tools/file_manager__list")
                .json(&json!({}));
            std::thread::spawn(move || req.send())
        })
        .collect();
    for answer in crowd {
        let answer = answer.join().unwrap();
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let crowd_ensures = adapter
        .ensures()
        .into_iter()
        .filter(|(s, _)| s == "crowd")
        .count();
    assert_eq!(crowd_ensures, 1);

    // No capacity: the adapter's 503 and its Retry-After reach the client.
    adapter.with(|s| s.no_capacity = Some(7));
    let r = router.post(
        "/api/sessions/newcomer/tools/file_manager__read",
        &json!({"path": "x"}),
    );
    r.assert_error(503, "no capacity");
    assert_eq!(r.header("retry-after"), Some("7"), "{:?}", r.headers);

    // A session server still superseded after the one new lookup: 503 with Retry-After, no third
    // try.
    adapter.with(|s| s.no_capacity = None);
    let (first, first_hits) = superseded_stub("stuck");
    let (second, second_hits) = superseded_stub("stuck");
    adapter.with(|s| {
        s.stubs
            .push_back((format!("http://{first}"), server_token(), 1));
        s.stubs
            .push_back((format!("http://{second}"), server_token(), 2));
    });
    let r = router.post(
        "/api/sessions/stuck/tools/file_manager__read",
        &json!({"path": "x"}),
    );
    let message = r.assert_error(503, "cannot be reached");
    assert!(message.contains("superseded"), "{message}");
    assert_eq!(r.header("retry-after"), Some("1"), "{:?}", r.headers);
    assert_eq!(first_hits.load(Ordering::SeqCst), 1);
    assert_eq!(second_hits.load(Ordering::SeqCst), 1);
    let stuck: Vec<_> = adapter
        .ensures()
        .into_iter()
        .filter(|(s, _)| s == "stuck")
        .collect();
    assert_eq!(
        stuck,
        vec![("stuck".into(), None), ("stuck".into(), Some(1))]
    );
}

#[test]
fn mcp_through_the_router_and_a_merged_session_list() {
    let top = tempfile::tempdir().unwrap();
    let adapter = Adapter::start(top.path());
    let router = router(top.path(), &adapter);

    router.call_done(
        "one",
        "file_manager__write",
        json!({"path": "hello.md", "content": "hello from one\n"}),
    );
    router.call_done(
        "two",
        "file_manager__write",
        json!({"path": "t.md", "content": "two\n"}),
    );

    // The Python MCP client through /s/{sid}/mcp.
    let out = std::process::Command::new(toolbox_tests::test_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp_router_client.py"
        ))
        .arg(format!("http://{}/s/one/mcp", router.addr))
        .arg(ROUTER_TOKEN)
        .arg("hello.md")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(answer["tools"].as_u64().unwrap() > 10, "{answer}");
    assert_eq!(answer["has_read"], true, "{answer}");
    assert!(
        answer["read"].as_str().unwrap().contains("hello from one"),
        "{answer}"
    );

    // Merged over both session servers.
    let list = router.get("/api/sessions");
    assert_eq!(list.status, 200, "{}", list.text());
    let list = list.json();
    let rows = list["sessions"].as_array().unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["one", "two"], "{list}");
    for r in rows {
        assert_eq!(r["state"], "running", "{r}");
        assert_eq!(r["epoch"], 1, "{r}");
        assert!(
            r["last_activity"].is_string(),
            "the session server's own row: {r}"
        );
    }
    assert_ne!(rows[0]["node"], rows[1]["node"]);

    // The session feed across session servers: a snapshot of both, then a session server's row
    // as it changes.
    // A call in mode auto asks for an approval, answered through the router.
    let feed = Sse::open(
        router
            .req("GET", "/api/sessions/events")
            .header("Accept", "text/event-stream"),
    );
    assert_eq!(feed.status, 200);
    let snapshot = feed.next();
    assert_eq!(snapshot.kind(), "snapshot", "{:?}", snapshot.data);
    let ids: Vec<&str> = snapshot.data["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["one", "two"]);
    let asking = {
        let req = router
            .req(
                "POST",
                "/api/sessions/one/tools/shell?mode=auto&call_id=ask1",
            )
            .json(&json!({"command": "echo approved through the router"}));
        std::thread::spawn(move || req.send())
    };
    let changed = feed.next();
    assert_eq!(changed.kind(), "session", "{:?}", changed.data);
    let row = &changed.data["session"];
    assert_eq!(row["id"], "one", "{row}");
    assert_eq!(row["pending_approvals"], 1, "{row}");
    assert_eq!(row["epoch"], 1, "{row}");
    let ok = router.post(
        "/api/tool-approval/one/ask1",
        &json!({"decision": "approve"}),
    );
    assert_eq!(ok.status, 200, "{}", ok.text());
    let ran = asking.join().unwrap();
    assert_eq!(ran.status, 200, "{}", ran.text());
    assert!(
        ran.json()["result"]
            .as_str()
            .unwrap()
            .contains("approved through the router"),
        "{}",
        ran.text()
    );
    drop(feed);

    // Parked through the router: the adapter parks it, and the list says so.
    let r = router.post("/api/sessions/two/park", &json!({}));
    assert_eq!(r.status, 202, "{}", r.text());
    let list = router.get("/api/sessions").json();
    let two = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "two")
        .cloned()
        .unwrap();
    assert_eq!(two["state"], "parked", "{list}");
    router
        .post("/api/sessions/nobody/park", &json!({}))
        .assert_error(404, "no such session");
}
