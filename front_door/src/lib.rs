//! toolbox-front-door is the accept loop of every HTTP listener toolbox has (`toolbox serve`
//! and `toolbox router`), so that nobody can hold the door shut without credentials.
//!
//! `axum::serve` reads request headers for as long as a client likes and accepts every
//! connection it can: 1,050 connections that never finished their headers locked every
//! client out of a `--token` server, and let 3 of 7 authorised requests through a router.
//! Here:
//!
//! - request headers must arrive within [`HEADER_READ_TIMEOUT`] (hyper's own timer), so a
//!   half-sent request, or a connection idle between requests, is closed;
//! - at most [`FrontDoor::max_connections`] are open at once (a quarter of the descriptor
//!   limit, at most 1,024). A connection counts as *authenticated* once one of its requests
//!   has passed the listener's checks ([`ConnectionAuth::passed`], which the listener calls).
//!   When the door is full, a new connection closes the oldest connection that has not
//!   authenticated: idle or slow strangers make room, a client with a streaming event feed
//!   (SSE, MCP) keeps its place;
//! - [`FrontDoor::refuse`] may turn a client away with 403 before a byte of its request is
//!   read (`toolbox serve` refuses code its own tools run);
//! - body limits and timeouts ([`BODY_READ_TIMEOUT`]) are the listener's, which knows which
//!   of its requests stream.
//!
//! It knows nothing of toolbox otherwise: a listener hands it a hyper service per connection.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// How long a client may take to send a request's headers (and how long a connection may sit
/// idle between requests).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request body that is not a stream.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Marks the connection a request came on as authenticated; the listener's check sets it.
#[derive(Clone, Debug, Default)]
pub struct ConnectionAuth(Arc<AtomicBool>);

impl ConnectionAuth {
    /// This connection's client passed the listener's checks.
    pub fn passed(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn has_passed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// One accepted connection, for the service that serves it.
#[derive(Clone, Debug)]
pub struct Connection {
    /// The client's address.
    pub peer: SocketAddr,
    /// The listener's address it came in on.
    pub local: SocketAddr,
    /// Set it once a request of this connection passed the listener's checks.
    pub auth: ConnectionAuth,
}

/// Decides, from the listener's and the client's addresses, whether to turn a client away
/// before reading anything; `Some(why)` is the 403's message. It may block (it runs on a
/// blocking thread).
pub type Refusal = Arc<dyn Fn(SocketAddr, SocketAddr) -> Option<String> + Send + Sync>;

/// The connection limits and the refusal hook.
#[derive(Clone)]
pub struct FrontDoor {
    /// The most connections open at once.
    pub max_connections: usize,
    /// Turns a client away before its request is read.
    pub refuse: Option<Refusal>,
}

impl std::fmt::Debug for FrontDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontDoor")
            .field("max_connections", &self.max_connections)
            .field("refuse", &self.refuse.is_some())
            .finish()
    }
}

impl FrontDoor {
    /// A quarter of the process's descriptor limit (the rest are for tools, files and
    /// sessions), between 16 and 1,024; no refusal hook.
    pub fn from_descriptor_limit() -> Self {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .filter(|l| *l > 0)
            .unwrap_or(1024);
        FrontDoor {
            max_connections: (limit / 4).clamp(16, 1024) as usize,
            refuse: None,
        }
    }
}

struct Open {
    since: Instant,
    auth: ConnectionAuth,
    close: CancellationToken,
}

/// Serves the connections `listener` accepts, each with the service `make` gives for it,
/// until `stop` is cancelled; then stops accepting, lets every connection finish its request
/// in flight (graceful shutdown) and returns once they have closed, or after `grace`.
pub async fn serve<F, S, B>(
    listener: TcpListener,
    make: F,
    door: FrontDoor,
    stop: CancellationToken,
    grace: Duration,
) where
    F: Fn(Connection) -> S,
    S: hyper::service::Service<hyper::Request<Incoming>, Response = hyper::Response<B>>
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let open: Arc<Mutex<HashMap<u64, Open>>> = Arc::default();
    let ids = AtomicU64::new(0);
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: wait a moment rather than spin.
                tracing::debug!(target: "toolbox", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(local) = stream.local_addr() else {
            continue;
        };
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let auth = ConnectionAuth::default();
        let close = CancellationToken::new();
        {
            let mut open = lock(&open);
            if open.len() >= door.max_connections {
                let oldest = open
                    .iter()
                    .filter(|(_, c)| !c.auth.has_passed())
                    .min_by_key(|(_, c)| c.since)
                    .map(|(id, _)| *id);
                match oldest {
                    Some(oldest) => {
                        if let Some(evicted) = open.remove(&oldest) {
                            evicted.close.cancel();
                        }
                    }
                    // Every place is held by an authenticated client: the newcomer is
                    // closed at once (it may come back when a place frees).
                    None => continue,
                }
            }
            open.insert(
                id,
                Open {
                    since: Instant::now(),
                    auth: auth.clone(),
                    close: close.clone(),
                },
            );
        }
        let service = make(Connection { peer, local, auth });
        let open = open.clone();
        let stop = stop.clone();
        let refuse = door.refuse.clone();
        tasks.spawn(async move {
            if let Some(refuse) = refuse {
                let refused = tokio::task::spawn_blocking(move || refuse(local, peer))
                    .await
                    .unwrap_or_else(|_| Some("the connection could not be checked".into()));
                if let Some(why) = refused {
                    answer_403(stream, &why).await;
                    lock(&open).remove(&id);
                    return;
                }
            }
            serve_one(stream, service, close, stop).await;
            lock(&open).remove(&id);
        });
    }
    tasks.close();
    let _ = tokio::time::timeout(grace, tasks.wait()).await;
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Answers 403 with `message` as `{"error": …}` and closes, without reading the request.
async fn answer_403(mut stream: TcpStream, message: &str) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = serde_json::json!({"error": message}).to_string();
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
        // Take what the client is still sending (at most 64 KiB): closing with unread bytes
        // would reset the connection, and the client might never read the 403.
        let mut sink = [0u8; 8192];
        let mut taken = 0;
        while taken < 64 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => taken += n,
            }
        }
    })
    .await;
}

async fn serve_one<S, B>(
    stream: TcpStream,
    service: S,
    close: CancellationToken,
    stop: CancellationToken,
) where
    S: hyper::service::Service<hyper::Request<Incoming>, Response = hyper::Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let connection = builder
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        // Evicted: the connection is dropped, which closes it.
        _ = close.cancelled() => {}
        _ = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}
