//! `GET /api/sessions/{sid}/events`: a session's SSE stream, resumed after `Last-Event-ID`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use toolbox_core::SessionId;
use toolbox_runtime::SessionEvent;

use super::{session, AppResult, Shared};
use crate::{ApiError, AppState};

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    after: Option<u64>,
}

/// The SSE stream of a session: what was missed after `Last-Event-ID` (or `?after=`), then
/// every new event as it happens. Each event's `id:` is its `seq`; its data is the event's
/// JSON. When the server shuts down, the stream ends once the session's cancelled turn has
/// sent its `turn_finished` (at most the shutdown grace); a client that reconnects with the
/// last id it saw loses nothing (the runtime keeps the last 10 000 events of a session).
pub(super) async fn events(
    State(state): Shared,
    Path(sid): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> AppResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let sid = session(&state, &sid)?;
    let epoch = state.options.session_server.as_ref().map(|s| s.epoch());
    let mut earlier = std::collections::VecDeque::new();
    let after = match headers.get("last-event-id") {
        Some(value) => {
            let (from_epoch, seq) =
                value
                    .to_str()
                    .ok()
                    .and_then(parse_event_id)
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "Last-Event-ID must be the id of an event: a number, or epoch:number",
                        )
                    })?;
            match (from_epoch, epoch) {
                // An id from another session server of the session: what that server's
                // epoch still had after it (kept in the session's events file), then this
                // server's whole history, which starts with its `session_resumed`.
                (Some(from), Some(mine)) if from != mine => {
                    if from < mine {
                        if let Some(server) = &state.options.session_server {
                            earlier = server.history_after(from, seq).into();
                        }
                    }
                    None
                }
                _ => Some(seq),
            }
        }
        None => query.after,
    };
    let subscription = state.runtime.events().subscribe(&sid, after);
    let stream = EventStream {
        _listening: state.askers.session(&sid),
        state: state.clone(),
        epoch,
        earlier,
        session: sid,
        pending: subscription.missed.into(),
        live: subscription.live,
        last: after.unwrap_or(0),
        drain_until: None,
    };
    let stream = futures_util::stream::unfold(stream, |mut s| async move {
        let event = s.next().await?;
        Some((Ok(event), s))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// An SSE event id: `seq`, or `epoch:seq` (session server mode).
fn parse_event_id(text: &str) -> Option<(Option<u64>, u64)> {
    let text = text.trim();
    match text.split_once(':') {
        Some((epoch, seq)) => Some((Some(epoch.parse().ok()?), seq.parse().ok()?)),
        None => Some((None, text.parse().ok()?)),
    }
}

struct EventStream {
    /// Counts this stream as one that shows the session's questions, while it is open.
    _listening: crate::askers::Listening,
    state: Arc<AppState>,
    /// Session server mode: its epoch, the first half of every event's `id:` (`epoch:seq`).
    epoch: Option<u64>,
    /// Session server mode: events of earlier session servers of the session (id, data),
    /// sent first.
    earlier: std::collections::VecDeque<(String, String)>,
    session: SessionId,
    pending: std::collections::VecDeque<Arc<SessionEvent>>,
    live: tokio::sync::broadcast::Receiver<Arc<SessionEvent>>,
    last: u64,
    /// Set when the server began shutting down: the stream ends once the session's
    /// (cancelled) turn has finished and its last events are sent, or at this instant.
    drain_until: Option<tokio::time::Instant>,
}

impl EventStream {
    async fn next(&mut self) -> Option<Event> {
        if let Some((id, data)) = self.earlier.pop_front() {
            return Some(Event::default().id(id).data(data));
        }
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.seq <= self.last {
                    continue;
                }
                self.last = event.seq;
                let data = serde_json::to_string(&*event).unwrap_or_else(|_| "{}".into());
                let id = match self.epoch {
                    Some(epoch) => format!("{epoch}:{}", event.seq),
                    None => event.seq.to_string(),
                };
                return Some(Event::default().id(id).data(data));
            }
            let received = match self.drain_until {
                None => tokio::select! {
                    _ = self.state.shutdown.cancelled() => {
                        let grace = self.state.options.shutdown_grace;
                        self.drain_until = Some(tokio::time::Instant::now() + grace);
                        continue;
                    }
                    received = self.live.recv() => received,
                },
                Some(deadline) => {
                    // A turn emits its last event before it stops counting as running, so
                    // once it is not running, everything it sent is already queued here.
                    let idle = !self.state.runtime.is_running(self.session.as_str());
                    match self.live.try_recv() {
                        Ok(event) => Ok(event),
                        Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                        Err(TryRecvError::Closed) => return None,
                        Err(TryRecvError::Empty) if idle => return None,
                        Err(TryRecvError::Empty) => {
                            if tokio::time::Instant::now() >= deadline {
                                return None;
                            }
                            let wait = tokio::time::sleep_until(
                                deadline
                                    .min(tokio::time::Instant::now() + Duration::from_millis(50)),
                            );
                            tokio::select! {
                                _ = wait => continue,
                                received = self.live.recv() => received,
                            }
                        }
                    }
                }
            };
            match received {
                Ok(event) => self.pending.push_back(event),
                // Fell behind: catch up from what the runtime kept.
                Err(RecvError::Lagged(_)) => {
                    self.pending = self
                        .state
                        .runtime
                        .events()
                        .since(&self.session, self.last)
                        .into();
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }
}
