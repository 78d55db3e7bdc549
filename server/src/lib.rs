//! toolbox-server is `toolbox serve`: the HTTP sidecar over the agent runtime.
//!
//! It only translates: HTTP, SSE and MCP in; runtime calls and runtime events out. Every
//! front end renders the runtime's own events ([`toolbox_runtime::RuntimeEvent`]). See
//! docs/server.md for the API, the events and the security rules.
//!
//! - [`api`]: the JSON API under `/api` and the SSE event stream.
//! - [`security`]: loopback by default, a bearer token everywhere else, the `Host` check
//!   against DNS rebinding, the `Origin` check, CORS only when configured.
//! - [`console`]: the web console at `/`, embedded in the binary.
//! - [`session_server`]: session server mode (`--session`, `--epoch`, `--state-store`): one
//!   session, its state synced to a state store, parked or superseded.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod api;
pub mod askers;
pub mod console;
mod error;
pub mod front_door;
pub mod security;
pub mod session_server;
pub mod upload;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::Router;
use tokio_util::sync::CancellationToken;
use toolbox_runtime::Runtime;

pub use error::ApiError;
/// The state store session server mode syncs to (toolbox-sync).
pub use toolbox_sync as sync;

/// The largest request body the API takes (a tool's arguments, a turn's message).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How `toolbox serve` was started.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen [default: 127.0.0.1:7878].
    pub listen: SocketAddr,
    /// The bearer token every `/api` and `/mcp` request must carry (or its SHA-256 digest);
    /// required to listen beyond loopback.
    pub token: Option<ServeToken>,
    /// Origins allowed cross-origin requests (CORS); none by default.
    pub cors_origins: Vec<String>,
    /// How long running turns get to stop after a shutdown signal.
    pub shutdown_grace: Duration,
    /// The session every call over `/mcp` runs in, shared by every MCP client on purpose
    /// (`--mcp-session`); `None` gives each MCP session a toolbox session of its own.
    pub mcp_session: Option<toolbox_core::SessionId>,
    /// Over `/mcp` in mode `auto`, what happens when the client cannot be asked (it did not
    /// declare the elicitation capability).
    pub mcp_fallback: toolbox_mcp::Fallback,
    /// Session server mode: the one session served, synced to its state store. Other
    /// sessions get 404, and serving stops when the session server is parked or superseded.
    pub session_server: Option<Arc<session_server::SessionServer>>,
    /// The largest file `PUT /api/sessions/{sid}/input/{path}` takes, in bytes
    /// ([`DEFAULT_MAX_UPLOAD_BYTES`] unless `--max-upload-mb` says otherwise).
    pub max_upload_bytes: u64,
}

/// The largest upload into a session's `input/` by default: 1 GiB.
pub const DEFAULT_MAX_UPLOAD_BYTES: u64 = 1024 * 1024 * 1024;

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            token: None,
            cors_origins: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
            mcp_session: None,
            mcp_fallback: toolbox_mcp::Fallback::Deny,
            session_server: None,
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
        }
    }
}

/// What a request's bearer token is checked against.
#[derive(Clone)]
pub enum ServeToken {
    /// The token itself (`--token`, `--token-file`, `--token-fd`, `TOOLBOX_SERVE_TOKEN`).
    Secret(String),
    /// Only the SHA-256 digest of the token (`--token-sha256`): a session server placed by
    /// an adapter that keeps the token to itself. Whoever reads this process's arguments,
    /// environment or memory learns nothing that would let them call it.
    Sha256([u8; 32]),
}

impl std::fmt::Debug for ServeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself, even in a debug print of the options.
        match self {
            ServeToken::Secret(_) => f.write_str("ServeToken::Secret(..)"),
            ServeToken::Sha256(_) => f.write_str("ServeToken::Sha256(..)"),
        }
    }
}

impl ServeToken {
    /// A plain token.
    pub fn secret(token: impl Into<String>) -> Self {
        ServeToken::Secret(token.into())
    }

    /// Parses `--token-sha256`: 64 hexadecimal digits.
    pub fn parse_sha256(hex: &str) -> Result<Self> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            bail!(
                "a token digest is the SHA-256 of the token as 64 hexadecimal digits (e.g. \
                 `printf %s \"$TOKEN\" | sha256sum`), and this is {} characters",
                hex.chars().count()
            );
        }
        let mut digest = [0u8; 32];
        for (i, out) in digest.iter_mut().enumerate() {
            *out = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
        }
        Ok(ServeToken::Sha256(digest))
    }

    /// Whether `given` (a request's bearer token) is this token, in time that depends only
    /// on the secret's length (or, for a digest, on nothing the caller controls).
    pub fn accepts(&self, given: &str) -> bool {
        match self {
            ServeToken::Secret(secret) => {
                toolbox_front_door::auth::same_secret(given.as_bytes(), secret.as_bytes())
            }
            ServeToken::Sha256(digest) => {
                let got = ring::digest::digest(&ring::digest::SHA256, given.as_bytes());
                toolbox_front_door::auth::same_secret(got.as_ref(), digest)
            }
        }
    }
}

/// What every handler shares.
pub struct AppState {
    /// The runtime: turns, events, the executor.
    pub runtime: Runtime,
    /// The options the server was started with.
    pub options: ServeOptions,
    /// Cancelled when the server shuts down: open event streams end.
    pub shutdown: CancellationToken,
    /// Cancelled when tool calls made over the API must stop: with `shutdown`, except in
    /// session server mode, where a park or SIGTERM lets the calls in flight finish (at
    /// most the grace), so their effects are in the last sync and their callers get their
    /// answers.
    pub calls: CancellationToken,
    /// The open event streams, to tell whether anyone could answer a question now.
    pub askers: Arc<askers::Askers>,
}

/// Checks `options` before binding: listening beyond loopback needs a token.
pub fn check_options(options: &ServeOptions) -> Result<()> {
    let empty = match &options.token {
        None => true,
        Some(ServeToken::Secret(t)) => t.is_empty(),
        Some(ServeToken::Sha256(_)) => false,
    };
    if !options.listen.ip().is_loopback() && empty {
        bail!(
            "refusing to listen on {} without a token: anyone who can reach that address could \
             run tools here. Pass --token (or set TOOLBOX_SERVE_TOKEN), or listen on 127.0.0.1",
            options.listen
        );
    }
    if let Some(ServeToken::Secret(token)) = &options.token {
        if token.len() < 16 {
            bail!("the token is too short: use at least 16 characters (a random one, e.g. `openssl rand -hex 24`)");
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("the token has spaces or control characters: use a random one, e.g. `openssl rand -hex 24`");
        }
        let distinct: std::collections::HashSet<char> = token.chars().collect();
        if distinct.len() < 8 {
            bail!(
                "the token is too weak ({} different characters): use a random one, e.g. \
                 `openssl rand -hex 24`",
                distinct.len()
            );
        }
    }
    for origin in &options.cors_origins {
        security::parse_origin(origin).with_context(|| format!("--cors-origin {origin:?}"))?;
    }
    Ok(())
}

/// The whole application: the API, MCP at `/mcp`, the console, and the security layers.
pub fn router(state: Arc<AppState>) -> Router {
    let mut mcp_options = toolbox_mcp::http::McpHttpOptions::new(state.options.mcp_session.clone());
    mcp_options.fallback = state.options.mcp_fallback;
    mcp_options.shutdown = state.shutdown.clone();
    // In session server mode a call over /mcp is a sync point, as one over the HTTP API is.
    mcp_options.after_call = state.options.session_server.clone().map(|server| {
        toolbox_mcp::http::AfterCall(Arc::new(move || server.wake()) as Arc<dyn Fn() + Send + Sync>)
    });
    let app: Router = Router::new()
        .nest("/api", api::routes())
        .merge(console::routes())
        .with_state(state.clone())
        .nest(
            "/mcp",
            toolbox_mcp::http::router(state.runtime.executor().clone(), mcp_options),
        );
    security::layers(app, state)
}

/// Binds, prints the URL on stderr, and serves until `stop` resolves; then stops accepting,
/// cancels running turns and waits (bounded) for them to finish writing.
pub async fn serve(
    runtime: Runtime,
    options: ServeOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    check_options(&options)?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let local = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let calls = CancellationToken::new();
    let state = Arc::new(AppState {
        runtime: runtime.clone(),
        options: options.clone(),
        shutdown: shutdown.clone(),
        calls: calls.clone(),
        askers: Default::default(),
    });
    let app = router(state);
    eprintln!(
        "toolbox serve: listening on http://{local} (workspace {}, mode {}){}{}",
        runtime.executor().workspace().root().display(),
        runtime.executor().permissions().mode,
        if options.token.is_some() {
            "; requests need Authorization: Bearer <token>"
        } else {
            ""
        },
        match &options.session_server {
            Some(server) => format!("; session {} at epoch {}", server.session(), server.epoch()),
            None => String::new(),
        }
    );
    let grace = options.shutdown_grace;
    // In session server mode, a park or a newer epoch stops serving as a signal does.
    let parked_or_superseded = options.session_server.as_ref().map(|s| s.stopping());
    let stop = async move {
        match parked_or_superseded {
            Some(parked) => tokio::select! {
                _ = stop => {}
                _ = parked.cancelled() => {}
            },
            None => stop.await,
        }
    };
    let on_stop = {
        let shutdown = shutdown.clone();
        let runtime = runtime.clone();
        let session_server = options.session_server.clone();
        async move {
            stop.await;
            // First refuse new turns, then cancel the running ones. Event streams stay open
            // until their session's turn has sent `turn_finished` (at most the grace), so a
            // connected front end sees the turn end; then connections close and serving stops.
            shutdown.cancel();
            // A session server refuses new calls from now on (503) and lets those in flight
            // finish within the grace; a superseded session server's calls could never be
            // synced, so they stop at once, as everywhere else.
            match &session_server {
                Some(server) if server.superseded().is_none() => {
                    let calls = calls.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(grace).await;
                        calls.cancel();
                    });
                }
                _ => calls.cancel(),
            }
            let running = runtime.cancel_all();
            tracing::info!(target: "toolbox", running, "shutting down: cancelling running turns");
        }
    };
    // Stop accepting on the signal; connections then finish what they are doing (event
    // streams end once their session's turn has finished, at most the grace).
    let stop_accepting = CancellationToken::new();
    let stopping = {
        let stop_accepting = stop_accepting.clone();
        tokio::spawn(async move {
            on_stop.await;
            stop_accepting.cancel();
        })
    };
    front_door::serve(
        listener,
        app,
        front_door::door(),
        stop_accepting,
        grace + Duration::from_secs(1),
    )
    .await;
    stopping.abort();
    // Again: a turn may have started between the signal and the first cancel.
    runtime.cancel_all();
    if !runtime.wait_idle(grace).await {
        tracing::warn!(target: "toolbox", "some turns were still running after the shutdown grace");
    }
    Ok(())
}
