//! The session list: `GET /api/sessions`, and `GET /api/sessions/events`, the same list
//! live.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use futures_util::Stream;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use toolbox_core::SessionId;
use toolbox_runtime::{conversation, SessionEvent};

use super::{AppResult, Shared};
use crate::{ApiError, AppState};

/// One row of the session list: what `GET /api/sessions` and the session feed say of a
/// session.
#[derive(Debug, Clone, PartialEq)]
struct SessionRow {
    running: bool,
    pending_approvals: usize,
    first_message: Option<String>,
    last_activity: Option<String>,
}

impl SessionRow {
    fn json(&self, id: &str) -> Value {
        json!({
            "id": id,
            "running": self.running,
            "pending_approvals": self.pending_approvals,
            "first_message": self.first_message,
            "last_activity": self.last_activity,
        })
    }
}

/// What the session list shows now: every session on disk (at most
/// [`conversation::MAX_SUMMARIES`], with how many were left out) and every session with a
/// turn running or a call waiting for an approval. Reads files: run it off the async
/// threads.
fn session_rows(state: &AppState) -> (std::collections::BTreeMap<String, SessionRow>, usize) {
    let running: BTreeSet<String> = state.runtime.running_sessions().into_iter().collect();
    let pending = state.runtime.executor().pending_approval_counts();
    let summaries = conversation::session_summaries(state.runtime.executor().workspace());
    let mut rows = std::collections::BTreeMap::new();
    for summary in summaries.sessions {
        let id = summary.id.to_string();
        rows.insert(
            id.clone(),
            SessionRow {
                running: running.contains(&id),
                pending_approvals: pending.get(&id).copied().unwrap_or(0),
                last_activity: summary.last_activity_rfc3339(),
                first_message: summary.first_message,
            },
        );
    }
    for id in running.iter().chain(pending.keys()) {
        if !rows.contains_key(id) {
            rows.insert(id.clone(), live_row(state, id, None));
        }
    }
    (rows, summaries.omitted)
}

/// A row built from what is in memory (running, waiting), with the summary of `old` when
/// given, else read from disk for this one session (a few KiB at most).
fn live_row(state: &AppState, id: &str, old: Option<&SessionRow>) -> SessionRow {
    let executor = state.runtime.executor();
    let (first_message, last_activity) = match old {
        Some(old) => (old.first_message.clone(), old.last_activity.clone()),
        None => match SessionId::parse(id) {
            Ok(sid) => {
                let summary = conversation::session_summary(executor.workspace(), &sid);
                (
                    summary.first_message.clone(),
                    summary.last_activity_rfc3339(),
                )
            }
            Err(_) => (None, None),
        },
    };
    SessionRow {
        running: state.runtime.is_running(id),
        pending_approvals: executor.pending_approvals(id).len(),
        first_message,
        last_activity,
    }
}

async fn read_rows(
    state: &Arc<AppState>,
) -> AppResult<(std::collections::BTreeMap<String, SessionRow>, usize)> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || session_rows(&state))
        .await
        .map_err(|e| ApiError::internal(format!("cannot list the sessions: {e}")))
}

fn rows_json(rows: &std::collections::BTreeMap<String, SessionRow>, omitted: usize) -> Value {
    let list: Vec<Value> = rows.iter().map(|(id, row)| row.json(id)).collect();
    json!({ "sessions": list, "omitted": omitted })
}

pub(super) async fn sessions(State(state): Shared) -> AppResult<Json<Value>> {
    let (rows, omitted) = read_rows(&state).await?;
    Ok(Json(rows_json(&rows, omitted)))
}

/// Woken when this server delivered an approval answer: the session feeds look again at
/// once (an answer has no event of its own; the call's events follow when it has run).
pub(super) static APPROVAL_ANSWERED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// How often the session feed looks at what runs and waits even when no event came (an
/// approval answered elsewhere, a wait that timed out): in memory only, no files read.
const FEED_TICK: Duration = Duration::from_secs(1);

/// `GET /api/sessions/events`: the session list, live. First a `snapshot` (the body of
/// `GET /api/sessions` plus `"type": "snapshot"`), then a `session` event with the whole new
/// row whenever a session's row changes: a turn started or finished, a call asked for an
/// approval or got its answer, in any session. Events are numbered per connection; a
/// reconnection starts again with a snapshot, whatever `Last-Event-ID` it sends. Ends when
/// the server shuts down.
pub(super) async fn sessions_feed(
    State(state): Shared,
) -> AppResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    // Subscribed before the snapshot is taken, so no change falls between the two.
    let live = state.runtime.events().subscribe_all();
    let (rows, omitted) = read_rows(&state).await?;
    let mut first = rows_json(&rows, omitted);
    first["type"] = json!("snapshot");
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + FEED_TICK, FEED_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let feed = SessionFeed {
        _listening: state.askers.everywhere(),
        state: state.clone(),
        rows,
        live,
        queue: std::collections::VecDeque::from([first]),
        tick,
        sent: 0,
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let data = feed.next().await?;
        feed.sent += 1;
        let event = Event::default()
            .id(feed.sent.to_string())
            .data(data.to_string());
        Some((Ok(event), feed))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

struct SessionFeed {
    /// Counts this stream as one that shows questions, while it is open.
    _listening: crate::askers::Listening,
    state: Arc<AppState>,
    rows: std::collections::BTreeMap<String, SessionRow>,
    live: tokio::sync::broadcast::Receiver<Arc<SessionEvent>>,
    queue: std::collections::VecDeque<Value>,
    tick: tokio::time::Interval,
    /// Events sent on this connection: each one's `id:`.
    sent: u64,
}

impl SessionFeed {
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(next) = self.queue.pop_front() {
                return Some(next);
            }
            let mut touched: BTreeSet<String> = BTreeSet::new();
            // The session an event came from, and the user's message when a turn started.
            let mut evented: Option<(String, Option<String>)> = None;
            tokio::select! {
                _ = self.state.shutdown.cancelled() => return None,
                received = self.live.recv() => match received {
                    Ok(event) => {
                        use toolbox_runtime::RuntimeEvent as E;
                        let message = match &event.event {
                            E::TurnStarted { message, .. } => Some(message.clone()),
                            E::TurnFinished { .. }
                            | E::ToolApprovalRequest { .. }
                            | E::ReviewRequest { .. }
                            | E::ReviewAnswered { .. }
                            | E::ToolCallFinished { .. } => None,
                            _ => continue,
                        };
                        touched.insert(event.session_id.to_string());
                        evented = Some((event.session_id.to_string(), message));
                    }
                    Err(RecvError::Lagged(_)) => {
                        // Fell behind: start over from a fresh snapshot.
                        let Ok((rows, omitted)) = read_rows(&self.state).await else {
                            return None;
                        };
                        self.rows = rows;
                        let mut snapshot = rows_json(&self.rows, omitted);
                        snapshot["type"] = json!("snapshot");
                        return Some(snapshot);
                    }
                    Err(RecvError::Closed) => return None,
                },
                _ = APPROVAL_ANSWERED.notified() => {}
                _ = self.tick.tick() => {}
            }
            // Every session that runs or waits now, or did at the last look.
            touched.extend(self.state.runtime.running_sessions());
            touched.extend(
                self.state
                    .runtime
                    .executor()
                    .pending_approval_counts()
                    .into_keys(),
            );
            touched.extend(
                self.rows
                    .iter()
                    .filter(|(_, row)| row.running || row.pending_approvals > 0)
                    .map(|(id, _)| id.clone()),
            );
            for id in touched {
                let old = self.rows.get(&id).cloned();
                let mut row = match &old {
                    Some(old) => live_row(&self.state, &id, Some(old)),
                    None => {
                        // A session new to the list: its summary from disk, off this thread.
                        let (state, key) = (self.state.clone(), id.clone());
                        match tokio::task::spawn_blocking(move || live_row(&state, &key, None))
                            .await
                        {
                            Ok(row) => row,
                            Err(_) => continue,
                        }
                    }
                };
                if let Some((session, message)) = &evented {
                    if *session == id {
                        row.last_activity =
                            Some(conversation::rfc3339_seconds(std::time::SystemTime::now()));
                        if row.first_message.is_none() {
                            row.first_message = message.as_deref().map(conversation::one_line);
                        }
                    }
                }
                if old.as_ref() != Some(&row) {
                    self.queue
                        .push_back(json!({"type": "session", "session": row.json(&id)}));
                    self.rows.insert(id, row);
                }
            }
        }
    }
}
