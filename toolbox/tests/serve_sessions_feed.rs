//! The session list of `toolbox serve`: `GET /api/sessions` rows (first message, last
//! activity, calls waiting) and their live feed `GET /api/sessions/events`, against the real
//! binary and the scripted LLM.

mod common;
mod serve_common;

use serde_json::{json, Value};
use serve_common::{Req, Server, Sse, EVENT_LIMIT, TOKEN};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

fn row<'a>(list: &'a Value, id: &str) -> Option<&'a Value> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
}

/// Waits (bounded) for a `session` event of `sid` for which `want` holds; its row.
fn wait_row(feed: &Sse, sid: &str, want: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + EVENT_LIMIT;
    let mut seen = Vec::new();
    while let Some(event) =
        feed.next_within(deadline.saturating_duration_since(std::time::Instant::now()))
    {
        let row = &event.data["session"];
        if event.kind() == "session" && row["id"] == sid && want(row) {
            return row.clone();
        }
        seen.push(event.data);
    }
    panic!("no matching row of {sid} within {EVENT_LIMIT:?}; got {seen:#?}");
}

#[test]
fn the_session_list_shows_first_messages_and_waiting_calls_live() {
    let ws = tempfile::tempdir().unwrap();
    let old = ws.path().join(".toolbox/sessions/old");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(
        old.join("messages.jsonl"),
        "{\"role\":\"user\",\"content\":\"Tidy   the\\nnotes\"}\n",
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "c1",
            "file_manager__write",
            json!({"path": "a.txt", "content": "a"}),
        ),
        Scripted::text("written"),
    ]);
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "auto"]);

    let list = server.get("/api/sessions").json();
    assert_eq!(list["omitted"], 0, "{list}");
    let old_row = row(&list, "old").unwrap_or_else(|| panic!("{list}"));
    assert_eq!(old_row["first_message"], "Tidy the notes", "{list}");
    assert_eq!(old_row["pending_approvals"], 0);
    assert_eq!(old_row["running"], false);
    let when = old_row["last_activity"].as_str().unwrap();
    assert!(when.ends_with('Z') && when.contains('T'), "{when}");

    let mut req = server.req("GET", "/api/sessions/events");
    req.headers
        .push(("Accept".into(), "text/event-stream".into()));
    let feed = Sse::open(req);
    assert_eq!(feed.status, 200);
    let first = feed.next();
    assert_eq!(first.kind(), "snapshot", "{:?}", first.data);
    assert_eq!(first.id, 1);
    assert_eq!(row(&first.data, "old"), Some(old_row));

    // A turn in a new session: it appears, then waits for its approval.
    server.start_turn("s1", json!({"message": "Write   a.txt please"}));
    let waiting = wait_row(&feed, "s1", |r| r["pending_approvals"] == 1);
    assert_eq!(waiting["running"], true, "{waiting}");
    assert_eq!(waiting["first_message"], "Write a.txt please", "{waiting}");
    assert!(waiting["last_activity"].is_string(), "{waiting}");
    let listed = server.get("/api/sessions").json();
    assert_eq!(
        row(&listed, "s1").unwrap()["pending_approvals"],
        1,
        "{listed}"
    );

    // Answered: no longer waiting, and then no longer running.
    let r = server.post("/api/tool-approval/s1/c1", &json!({"decision": "approve"}));
    assert_eq!(r.status, 200, "{}", r.text());
    let answered = wait_row(&feed, "s1", |r| r["pending_approvals"] == 0);
    assert_eq!(answered["first_message"], "Write a.txt please");
    wait_row(&feed, "s1", |r| {
        r["running"] == false && r["pending_approvals"] == 0
    });
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "a"
    );
    feed.disconnect();
}

#[test]
fn the_session_feed_needs_the_token() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(ws.path(), None, &["--token", TOKEN]).with_token(TOKEN);
    let r = Req::new(server.addr, "GET", "/api/sessions/events")
        .header("Host", &server.host())
        .send();
    r.assert_error(401, "Authorization: Bearer");
    let mut req = server.req("GET", "/api/sessions/events");
    req.headers
        .push(("Accept".into(), "text/event-stream".into()));
    let feed = Sse::open(req);
    assert_eq!(feed.status, 200);
    assert_eq!(feed.next().kind(), "snapshot");
    feed.disconnect();
}
