//! Accepting connections so that nobody can hold the door shut without credentials.
//!
//! `axum::serve` reads request headers for as long as a client likes and accepts every
//! connection it can: 1,050 connections that never finish their headers locked every client
//! out of a `--token` server. Here:
//!
//! - request headers must arrive within [`HEADER_READ_TIMEOUT`] (hyper's own timer), so a
//!   half-sent request, or a connection idle between requests, is closed;
//! - at most [`FrontDoor::max_connections`] are open at once (a quarter of the descriptor
//!   limit, at most 1,024). A connection counts as *authenticated* once one of its requests
//!   has passed the guard (the token, or on loopback without a token, the Host and Origin
//!   checks). When the door is full, a new connection closes the oldest connection that has
//!   not authenticated: idle or slow strangers make room, a client with a streaming event
//!   feed (SSE, MCP) keeps its place;
//! - body limits and timeouts are the [`crate::security`] layer's (a `Content-Length` over
//!   the limit is refused before anything is read, and a body must arrive within
//!   [`BODY_READ_TIMEOUT`]);
//! - a connection from toolbox's own code (the process itself, where the embedded
//!   interpreter runs, or anything it started: shell commands, workers, their detached
//!   helpers) is refused with 403 before a byte of it is read, on loopback too, token or
//!   not ([`toolbox_host::peer`]): model-run code cannot answer its own approvals. So is a
//!   local connection whose client is already gone (nobody can be told apart then).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long a client may take to send a request's headers (and how long a connection may sit
/// idle between requests).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request body that is not a stream.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Marks the connection a request came on as authenticated; the guard sets it.
#[derive(Clone, Debug, Default)]
pub struct ConnectionAuth(pub Arc<AtomicBool>);

impl ConnectionAuth {
    /// This connection's client passed the guard.
    pub fn passed(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The connection limits.
#[derive(Debug, Clone, Copy)]
pub struct FrontDoor {
    /// The most connections open at once.
    pub max_connections: usize,
    /// Refuse connections from toolbox's own process and its descendants (see the module).
    pub refuse_own_code: bool,
}

impl FrontDoor {
    /// A quarter of the process's descriptor limit (the rest are for tools, files and
    /// sessions), between 16 and 1,024.
    pub fn from_descriptor_limit() -> Self {
        let mut limit = libc_rlimit_nofile().unwrap_or(1024);
        if limit == 0 {
            limit = 1024;
        }
        FrontDoor {
            max_connections: (limit / 4).clamp(16, 1024) as usize,
            refuse_own_code: true,
        }
    }
}

fn libc_rlimit_nofile() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current
}

struct Open {
    since: Instant,
    auth: ConnectionAuth,
    close: CancellationToken,
}

/// Serves `app` on `listener` until `stop` is cancelled; then stops accepting, lets every
/// connection finish its request in flight (graceful shutdown) and returns once they have
/// closed, or after `grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    door: FrontDoor,
    stop: CancellationToken,
    grace: Duration,
) {
    let open: Arc<Mutex<HashMap<u64, Open>>> = Arc::default();
    let ids = AtomicU64::new(0);
    let tasks = tokio_util::task::TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, addr) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of descriptors, say: wait a moment rather than spin.
                tracing::debug!(target: "toolbox", "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let auth = ConnectionAuth::default();
        let close = CancellationToken::new();
        {
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            if open.len() >= door.max_connections {
                let oldest = open
                    .iter()
                    .filter(|(_, c)| !c.auth.0.load(Ordering::Relaxed))
                    .min_by_key(|(_, c)| c.since)
                    .map(|(id, _)| *id);
                match oldest {
                    Some(oldest) => {
                        if let Some(evicted) = open.remove(&oldest) {
                            evicted.close.cancel();
                        }
                    }
                    // Every place is held by an authenticated client: the newcomer waits
                    // its turn outside.
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
        let app = app.clone();
        let open = open.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            if door.refuse_own_code {
                if let Some(refusal) = own_code(&stream, addr).await {
                    refuse(stream, &refusal).await;
                    open.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                    return;
                }
            }
            serve_one(stream, addr, app, auth, close, stop).await;
            open.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        });
    }
    tasks.close();
    let _ = tokio::time::timeout(grace, tasks.wait()).await;
}

/// Why a connection is refused as coming from toolbox's own code, if it is.
async fn own_code(stream: &tokio::net::TcpStream, peer: SocketAddr) -> Option<String> {
    let local = stream.local_addr().ok()?;
    let found = tokio::task::spawn_blocking(move || toolbox_host::peer::tcp_peer(local, peer))
        .await
        .unwrap_or(toolbox_host::peer::Peer::Unknown);
    match found {
        toolbox_host::peer::Peer::Remote | toolbox_host::peer::Peer::Elsewhere => None,
        toolbox_host::peer::Peer::OwnCode(pid) => {
            tracing::warn!(target: "toolbox", "refused a connection from {peer}: process {pid} is toolbox's own code");
            Some(format!(
                "this connection comes from a process toolbox started (pid {pid}): code a \
                 tool runs may not use this server (it could answer its own approvals)"
            ))
        }
        toolbox_host::peer::Peer::Unknown => Some(
            "this connection comes from this machine, but its client could not be found \
             (it closed before the server looked): refused, as it could be code a tool runs"
                .to_string(),
        ),
    }
}

/// Answers 403 with `message` and closes, without reading the request.
async fn refuse(mut stream: tokio::net::TcpStream, message: &str) {
    use tokio::io::AsyncWriteExt;
    let body = serde_json::json!({"error": message}).to_string();
    let response = format!(
        "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        use tokio::io::AsyncReadExt;
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

async fn serve_one(
    stream: tokio::net::TcpStream,
    addr: SocketAddr,
    app: Router,
    auth: ConnectionAuth,
    close: CancellationToken,
    stop: CancellationToken,
) {
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(addr));
            request.extensions_mut().insert(auth.clone());
            let app = app.clone();
            async move { app.oneshot(request.map(axum::body::Body::new)).await }
        });
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
