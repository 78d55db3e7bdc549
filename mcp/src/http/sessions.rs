//! A bound on `/mcp` sessions: rmcp's [`LocalSessionManager`] with a cap on how many are open.
//!
//! rmcp ends a session after its keep-alive without a message (the idle expiry, see
//! `session_idle_timeout` in [`super`]), but keeps as many as clients open. A client that
//! opens sessions and walks away (2,000 of them held 100 MB for over 20 minutes) must not
//! grow the server's memory without bound, nor lock other clients out. At the cap, a new
//! session closes an idle one to make room: one with no stream open (no call in flight, no
//! `GET` stream listening) and quiet for [`EVICTABLE_AFTER`], those that never sent a request
//! after `initialize` first, then the one quiet the longest. When no session is idle, the new
//! one is refused with 503 and a JSON-RPC error saying why.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use futures_util::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId,
};
use rmcp::transport::streamable_http_server::SessionManager;

/// The most `/mcp` sessions open at once, by default.
pub const MAX_MCP_SESSIONS: usize = 512;
/// At the cap, a session quiet for this long may be closed to make room for a new one.
pub const EVICTABLE_AFTER: Duration = Duration::from_secs(60);

/// [`LocalSessionManager`] with at most `cap` sessions.
pub struct BoundedSessions {
    inner: LocalSessionManager,
    cap: usize,
    evictable_after: Duration,
    /// What each open session has done.
    seen: Mutex<HashMap<SessionId, Seen>>,
}

struct Seen {
    /// When it last got a message.
    last: Instant,
    /// Whether it sent anything but `initialize` and notifications.
    used: bool,
    /// Its SSE streams open now (a request's answer, the `GET` stream).
    streams: Arc<AtomicUsize>,
}

/// Counts a stream as open until it is dropped.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl BoundedSessions {
    /// At most `cap` sessions of `inner`.
    pub fn new(inner: LocalSessionManager, cap: usize, evictable_after: Duration) -> Self {
        BoundedSessions {
            inner,
            cap: cap.max(1),
            evictable_after,
            seen: Mutex::default(),
        }
    }

    fn touch(&self, id: &SessionId) {
        if let Some(seen) = lock(&self.seen).get_mut(id) {
            seen.last = Instant::now();
        }
    }

    /// Marks `id` used and counts a stream of it open until the guard is dropped.
    fn stream_opened(&self, id: &SessionId) -> Option<Open> {
        let mut seen = lock(&self.seen);
        let seen = seen.get_mut(id)?;
        seen.last = Instant::now();
        seen.used = true;
        seen.streams.fetch_add(1, Ordering::Relaxed);
        Some(Open(seen.streams.clone()))
    }

    /// How many sessions are open.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Makes room for one more session: below the cap there is room; at it, the session
    /// quiet the longest is closed if it has been quiet for [`EVICTABLE_AFTER`]. False when
    /// there is no room.
    pub async fn make_room(&self) -> bool {
        loop {
            if self.open().await < self.cap {
                return true;
            }
            let idle = {
                let open = self.inner.sessions.read().await;
                let mut seen = lock(&self.seen);
                // Sessions rmcp closed on its own are forgotten here too.
                seen.retain(|id, _| open.contains_key(id));
                seen.iter()
                    .filter(|(_, s)| {
                        s.streams.load(Ordering::Relaxed) == 0
                            && s.last.elapsed() >= self.evictable_after
                    })
                    .min_by_key(|(_, s)| (s.used, s.last))
                    .map(|(id, _)| id.clone())
            };
            match idle {
                Some(id) => {
                    tracing::info!("closing the idle MCP session {id} to make room");
                    let _ = self.close_session(&id).await;
                }
                None => return false,
            }
        }
    }

    /// The 503 a client gets when there is no room.
    pub fn full_response(&self) -> axum::response::Response {
        let message = format!(
            "this server has {} MCP sessions open, its limit, and none is idle (each has a stream \
             open or spoke within the last {} s); end finished sessions (HTTP DELETE /mcp with \
             their Mcp-Session-Id) or retry later",
            self.cap,
            self.evictable_after.as_secs()
        );
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32000, "message": message},
        });
        (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "5")],
            axum::Json(body),
        )
            .into_response()
    }
}

/// Makes room for the session a POST without `Mcp-Session-Id` (an `initialize`) would open,
/// or answers 503.
pub async fn room_for_new_sessions(
    sessions: Arc<BoundedSessions>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let opens = request.method() == axum::http::Method::POST
        && !request.headers().contains_key("mcp-session-id");
    if opens && !sessions.make_room().await {
        return sessions.full_response();
    }
    next.run(request).await
}

impl SessionManager for BoundedSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        lock(&self.seen).insert(
            id.clone(),
            Seen {
                last: Instant::now(),
                used: false,
                streams: Arc::default(),
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        lock(&self.seen).remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + 'static, Self::Error> {
        let open = self.stream_opened(id);
        let stream = self.inner.create_stream(id, message).await?;
        Ok(guarded(stream, open))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + 'static, Self::Error> {
        let open = self.stream_opened(id);
        let stream = self.inner.create_standalone_stream(id).await?;
        Ok(guarded(stream, open))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + 'static, Self::Error> {
        let open = self.stream_opened(id);
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(guarded(stream, open))
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}

/// `stream`, counted open until it is dropped.
fn guarded(
    stream: impl Stream<Item = ServerSseMessage> + Send + 'static,
    open: Option<Open>,
) -> impl Stream<Item = ServerSseMessage> + Send + 'static {
    stream.map(move |message| {
        let _ = &open;
        message
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sessions(cap: usize) -> (BoundedSessions, Vec<SessionId>) {
        let bounded = BoundedSessions::new(LocalSessionManager::default(), cap, Duration::ZERO);
        let mut ids = Vec::new();
        for _ in 0..cap {
            let (id, _transport) = bounded.create_session().await.unwrap();
            ids.push(id);
        }
        (bounded, ids)
    }

    #[tokio::test]
    async fn at_the_cap_an_idle_session_makes_room_unused_ones_first() {
        let (bounded, ids) = sessions(3).await;
        // ids[0] is the oldest, but it was used, and so was ids[2]; ids[1] only said
        // initialize, and spoke last: unused goes first all the same.
        lock(&bounded.seen).get_mut(&ids[0]).unwrap().used = true;
        lock(&bounded.seen).get_mut(&ids[2]).unwrap().used = true;
        bounded.touch(&ids[1]);
        assert!(bounded.make_room().await);
        assert_eq!(bounded.open().await, 2);
        assert!(!bounded.has_session(&ids[1]).await.unwrap());
        assert!(bounded.has_session(&ids[0]).await.unwrap());
        assert!(bounded.has_session(&ids[2]).await.unwrap());
    }

    #[tokio::test]
    async fn a_session_with_a_stream_open_is_never_closed_to_make_room() {
        let (bounded, ids) = sessions(2).await;
        let a = bounded.stream_opened(&ids[0]).unwrap();
        let b = bounded.stream_opened(&ids[1]).unwrap();
        assert!(!bounded.make_room().await);
        assert_eq!(bounded.open().await, 2);
        drop(b);
        assert!(bounded.make_room().await);
        assert!(bounded.has_session(&ids[0]).await.unwrap());
        assert!(!bounded.has_session(&ids[1]).await.unwrap());
        drop(a);
    }

    #[tokio::test]
    async fn sessions_that_spoke_recently_are_kept() {
        let bounded =
            BoundedSessions::new(LocalSessionManager::default(), 1, Duration::from_secs(3600));
        bounded.create_session().await.unwrap();
        assert!(!bounded.make_room().await);
        let response = bounded.full_response();
        assert_eq!(
            response.status(),
            axum::http::StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
