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
//! - [`host`]: host mode (`--session`, `--epoch`, `--state-store`): one session, its state
//!   synced to a state store, parked or superseded.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod api;
pub mod console;
mod error;
pub mod front_door;
pub mod host;
pub mod security;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::Router;
use tokio_util::sync::CancellationToken;
use toolbox_runtime::Runtime;

pub use error::ApiError;
/// The state store host mode syncs to (toolbox-sync).
pub use toolbox_sync as sync;

/// The largest request body the API takes (a tool's arguments, a turn's message).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How `toolbox serve` was started.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Where to listen [default: 127.0.0.1:7878].
    pub listen: SocketAddr,
    /// The bearer token every `/api` and `/mcp` request must carry; required to listen
    /// beyond loopback.
    pub token: Option<String>,
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
    /// Host mode: the one session served, synced to its state store. Other sessions get 404,
    /// and serving stops when the host is parked or superseded.
    pub host: Option<Arc<host::Host>>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            token: None,
            cors_origins: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
            mcp_session: None,
            mcp_fallback: toolbox_mcp::Fallback::Deny,
            host: None,
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
}

/// Checks `options` before binding: listening beyond loopback needs a token.
pub fn check_options(options: &ServeOptions) -> Result<()> {
    if !options.listen.ip().is_loopback() && options.token.as_deref().unwrap_or("").is_empty() {
        bail!(
            "refusing to listen on {} without a token: anyone who can reach that address could \
             run tools here. Pass --token (or set TOOLBOX_SERVE_TOKEN), or listen on 127.0.0.1",
            options.listen
        );
    }
    if let Some(token) = &options.token {
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
    // In host mode a call over /mcp is a sync point, as one over the HTTP API is.
    mcp_options.after_call = state.options.host.clone().map(|host| {
        toolbox_mcp::http::AfterCall(Arc::new(move || host.wake()) as Arc<dyn Fn() + Send + Sync>)
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
    let state = Arc::new(AppState {
        runtime: runtime.clone(),
        options: options.clone(),
        shutdown: shutdown.clone(),
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
        match &options.host {
            Some(host) => format!("; session {} at epoch {}", host.session(), host.epoch()),
            None => String::new(),
        }
    );
    let grace = options.shutdown_grace;
    // In host mode, a park or a newer epoch stops serving as a signal does.
    let host_stop = options.host.as_ref().map(|h| h.stopping());
    let stop = async move {
        match host_stop {
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
        async move {
            stop.await;
            // First refuse new turns, then cancel the running ones. Event streams stay open
            // until their session's turn has sent `turn_finished` (at most the grace), so a
            // connected front end sees the turn end; then connections close and serving stops.
            shutdown.cancel();
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
        front_door::FrontDoor::from_descriptor_limit(),
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
