//! The session list across session servers.
//!
//! - `GET /api/sessions`: the adapter's `GET /v1/sessions`, and for each running session
//!   its session server's own row (`GET /api/sessions` on the session server, its row of
//!   that session), with `state`, `epoch` and `node` added. Parked and placing sessions get
//!   a row from the adapter alone; a running session server that does not answer is listed
//!   with `reachable: false`.
//! - `GET /api/sessions/events`: a `snapshot` (the list above), then the `session` events
//!   of every session server that was running when the stream opened, each session server's
//!   feed read as it comes. The stream ends when every session server's feed has ended; a
//!   client reconnects for a fresh snapshot (the same rule as `toolbox serve`'s feed).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde_json::{json, Value};
use toolbox_core::SessionId;

use crate::error::RouterError;
use crate::placement::{read_bounded, Placement};
use crate::Shared;

/// The most sessions one list asks session servers about; the rest are counted in
/// `omitted`.
const MAX_LISTED: usize = 1000;
/// Session servers asked at once.
const PARALLEL: usize = 16;
/// How long one session server may take to list.
const SERVER_LIST_TIME: Duration = Duration::from_secs(10);
/// The most of one session server's list the router reads.
const MAX_SERVER_LIST: usize = 4 * 1024 * 1024;
/// The longest line of a session server's feed the router takes.
const MAX_FEED_LINE: usize = 1024 * 1024;

struct Entry {
    sid: SessionId,
    state: String,
    epoch: Value,
    node: Value,
}

fn entries(list: Vec<Value>) -> (Vec<Entry>, usize) {
    let mut out = Vec::new();
    let mut omitted = 0;
    for row in list {
        let Some(sid) = row
            .get("sid")
            .and_then(Value::as_str)
            .and_then(|s| SessionId::parse(s).ok())
        else {
            continue;
        };
        if out.len() >= MAX_LISTED {
            omitted += 1;
            continue;
        }
        out.push(Entry {
            sid,
            state: row
                .get("state")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .chars()
                .take(32)
                .collect(),
            epoch: row.get("epoch").cloned().unwrap_or(Value::Null),
            node: row.get("node").cloned().unwrap_or(Value::Null),
        });
    }
    (out, omitted)
}

/// A request to `sid`'s session server at `path`, with the session server's token.
fn server_get(
    state: &Shared,
    placement: &Placement,
    path: &str,
) -> Option<reqwest::RequestBuilder> {
    let url = placement.url.join(path.trim_start_matches('/')).ok()?;
    let mut request = state.http.get(url);
    if let Some(auth) = &placement.auth {
        request = request.header(header::AUTHORIZATION, auth.clone());
    }
    Some(request)
}

/// The row a running session's server reports for it, or `None` when it does not answer.
async fn server_row(state: &Shared, entry: &Entry) -> Option<(Value, Arc<Placement>)> {
    let placement = match state.placer.cached_of(&entry.sid) {
        Some(p) => p,
        // Idempotent: a running session's :ensure names its live session server.
        None => state.placer.lookup(&entry.sid, None).await.ok()?,
    };
    let request = server_get(state, &placement, "/api/sessions")?.timeout(SERVER_LIST_TIME);
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let bytes = tokio::time::timeout(SERVER_LIST_TIME, read_bounded(response, MAX_SERVER_LIST))
        .await
        .ok()?
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    let row = value
        .get("sessions")?
        .as_array()?
        .iter()
        .find(|r| r.get("id").and_then(Value::as_str) == Some(entry.sid.as_str()))
        .cloned()
        .unwrap_or_else(
            || json!({"id": entry.sid.as_str(), "running": false, "pending_approvals": 0}),
        );
    Some((row, placement))
}

fn adapter_row(entry: &Entry) -> Value {
    json!({
        "id": entry.sid.as_str(),
        "running": false,
        "pending_approvals": 0,
        "first_message": null,
        "last_activity": null,
    })
}

/// A running session and where it is.
type Placed = (SessionId, Arc<Placement>);

/// The merged list, and the placements of the session servers that answered.
async fn merged(state: &Shared) -> Result<(Value, Vec<Placed>), RouterError> {
    let (list, omitted) = entries(state.placer.list().await?);
    let rows: Vec<(Value, Option<Placed>)> = futures_util::stream::iter(list)
        .map(|entry| async move {
            let (mut row, placed, reachable) = if entry.state == "running" {
                match server_row(state, &entry).await {
                    Some((row, placement)) => (row, Some((entry.sid.clone(), placement)), true),
                    None => (adapter_row(&entry), None, false),
                }
            } else {
                (adapter_row(&entry), None, true)
            };
            if let Some(obj) = row.as_object_mut() {
                obj.insert("state".into(), json!(entry.state));
                obj.insert("epoch".into(), entry.epoch.clone());
                obj.insert("node".into(), entry.node.clone());
                if !reachable {
                    obj.insert("reachable".into(), json!(false));
                }
            }
            (row, placed)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut sessions = Vec::new();
    let mut placed = Vec::new();
    for (row, p) in rows {
        sessions.push(row);
        placed.extend(p);
    }
    sessions.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    Ok((json!({"sessions": sessions, "omitted": omitted}), placed))
}

/// `GET /api/sessions`.
pub async fn list(state: &Shared) -> Response {
    match merged(state).await {
        Ok((body, _)) => Json(body).into_response(),
        Err(e) => e.into_response(),
    }
}

/// How long the feed waits for every session server's feed to be subscribed before it sends
/// its snapshot anyway (a session server that is slow to answer may then miss a change).
const SUBSCRIBE_WAIT: Duration = Duration::from_secs(5);

/// Reads one session server's session feed and sends its `session` events for `sid` to
/// `out`. `subscribed` is told (or dropped, on failure) once that feed's first event, its
/// snapshot, has arrived: from then on, every change of the session reaches `out`.
async fn follow(
    state: Shared,
    sid: SessionId,
    placement: Arc<Placement>,
    out: tokio::sync::mpsc::Sender<Value>,
    subscribed: tokio::sync::oneshot::Sender<()>,
) {
    let mut subscribed = Some(subscribed);
    let Some(request) = server_get(&state, &placement, "/api/sessions/events") else {
        return;
    };
    let Ok(response) = request
        .header(header::ACCEPT, "text/event-stream")
        .send()
        .await
    else {
        return;
    };
    if !response.status().is_success() {
        return;
    }
    let mut stream = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::new();
    let mut data = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if let Some(told) = subscribed.take() {
                    let _ = told.send(());
                }
                if let Ok(event) = serde_json::from_str::<Value>(&data) {
                    let ours = event["type"] == "session" && event["session"]["id"] == sid.as_str();
                    if ours {
                        let mut event = event;
                        event["session"]["epoch"] = json!(placement.epoch);
                        event["session"]["node"] = json!(placement.node);
                        event["session"]["state"] = json!("running");
                        if out.send(event).await.is_err() {
                            return;
                        }
                    }
                }
                data.clear();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if pending.len() > MAX_FEED_LINE || data.len() > MAX_FEED_LINE {
            return;
        }
    }
}

/// `GET /api/sessions/events`.
pub async fn feed(state: &Shared) -> Response {
    // Which session servers to follow.
    let placed = match merged(state).await {
        Ok((_, placed)) => placed,
        Err(e) => return e.into_response(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Value>(256);
    let mut followers = Vec::new();
    let mut subscribed = Vec::new();
    for (sid, placement) in placed {
        let (told, told_rx) = tokio::sync::oneshot::channel();
        followers.push(tokio::spawn(follow(
            state.clone(),
            sid,
            placement,
            tx.clone(),
            told,
        )));
        subscribed.push(told_rx);
    }
    drop(tx);
    // The followers end when the client goes away (their channel closes) or their session
    // server's feed ends; aborted with the stream (or this answer, if it fails) as well.
    let guard = Abort(followers);
    // Subscribed first, the snapshot second: a change before the snapshot is in it, and one
    // after it is an event. The other way round, a change made while a follower was still
    // connecting was in neither.
    let _ = tokio::time::timeout(SUBSCRIBE_WAIT, futures_util::future::join_all(subscribed)).await;
    let mut first = match merged(state).await {
        Ok((first, _)) => first,
        Err(e) => return e.into_response(),
    };
    first["type"] = json!("snapshot");
    let events = futures_util::stream::once(async move { Some(first) })
        .chain(futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|v| (Some(v), rx))
        }))
        .enumerate()
        .map(move |(n, event)| {
            let _keep = &guard;
            let event = event.unwrap_or(Value::Null);
            Ok::<_, Infallible>(bytes::Bytes::from(format!(
                "id: {}\ndata: {}\n\n",
                n + 1,
                event
            )))
        });
    let mut response = Response::new(Body::from_stream(events));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

struct Abort(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Abort {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}
