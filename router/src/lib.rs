//! toolbox-router is `toolbox router`: one address in front of many session servers.
//!
//! Each session lives on a session server of its own
//! (`toolbox serve --session SID --epoch N`), placed by an engine (Ray, Kubernetes, a
//! platform's own scheduler) behind the placement contract ([`placement`];
//! docs/scale-out.md, "Router and placement"). The router serves the serve API as if it
//! were one big `toolbox serve`:
//!
//! - `/api/sessions/{sid}/…` and `/api/tool-approval/{sid}/…` go to the session's
//!   server, `/s/{sid}/mcp` to its `/mcp` ([`proxy`]); streams pass through untimed;
//! - `GET /api/sessions` merges what the session servers report, with the adapter's parked
//!   sessions ([`sessions`]); `GET /api/health` is the router's own;
//!   `POST /api/sessions/{sid}/park` asks the adapter to park the session.
//!
//! It keeps nothing but a cache of sid → {url, token, epoch}: on a miss, a refused
//! connection or a superseded session server it asks the adapter (`:ensure`). Clients
//! authenticate with the router's token ([`auth`]); the session servers' tokens never leave
//! it.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod auth;
mod error;
pub mod placement;
pub mod proxy;
pub mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use hyper_util::rt::TokioTimer;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolbox_core::SessionId;
use tower::ServiceExt;

pub use error::RouterError;
use placement::Placer;

/// The largest request body the router takes: the same as `toolbox serve`'s.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How long a client may take to send a request body, and its headers (as `toolbox serve`:
/// the front door they share).
pub use toolbox_front_door::{BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT};

/// How `toolbox router` was started.
#[derive(Clone)]
pub struct RouterOptions {
    /// Where to listen [default: 127.0.0.1:7900].
    pub listen: SocketAddr,
    /// The placement adapter's base URL.
    pub placement: String,
    /// The adapter's bearer token, if it wants one.
    pub placement_token: Option<String>,
    /// How long one call to the adapter may take (placing a session starts a session
    /// server).
    pub placement_timeout: Duration,
    /// The clients' bearer token; required to listen beyond loopback.
    pub token: Option<String>,
}

impl std::fmt::Debug for RouterOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterOptions")
            .field("listen", &self.listen)
            .field("placement", &self.placement)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .finish()
    }
}

impl Default for RouterOptions {
    fn default() -> Self {
        RouterOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 7900)),
            placement: String::new(),
            placement_token: None,
            placement_timeout: Duration::from_secs(60),
            token: None,
        }
    }
}

/// What every request shares.
pub struct RouterState {
    /// The adapter's client and the placement cache.
    pub placer: Placer,
    /// The client to HTTPS session servers: pooled keep-alive connections, no overall
    /// timeout (streams).
    pub http: reqwest::Client,
    /// The client to plain-HTTP session servers: the same, on hyper directly.
    pub plain: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Body,
    >,
    /// The clients' token.
    pub token: Option<String>,
}

/// The shared state, as handlers see it.
pub type Shared = Arc<RouterState>;

/// Checks the options (a token beyond loopback, a strong enough token, the adapter's URL).
pub fn check_options(options: &RouterOptions) -> Result<()> {
    if !options.listen.ip().is_loopback() && options.token.as_deref().unwrap_or("").is_empty() {
        bail!(
            "refusing to listen on {} without a token: anyone who can reach that address could \
             use every session. Pass --token-file (or set TOOLBOX_ROUTER_TOKEN), or listen on \
             127.0.0.1",
            options.listen
        );
    }
    if let Some(token) = &options.token {
        let distinct: std::collections::HashSet<char> = token.chars().collect();
        if token.len() < 16 || distinct.len() < 8 {
            bail!("the router's token is too weak: use a random one of 16 characters or more (e.g. `openssl rand -hex 24`)");
        }
        if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("the router's token has spaces or control characters");
        }
    }
    placement::parse_adapter_url(&options.placement)?;
    Ok(())
}

/// The state built from `options`.
pub fn state(options: &RouterOptions) -> Result<Shared> {
    check_options(options)?;
    // reqwest is built with rustls and no provider of its own: ring, as the rest of toolbox.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let base = placement::parse_adapter_url(&options.placement)?;
    let placer = Placer::new(
        base,
        options.placement_token.as_deref(),
        options.placement_timeout,
    )?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        // Below a session server's idle limit (10 s), so a pooled connection is not reused
        // just as the session server closes it.
        .pool_idle_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .build()
        .context("cannot build the HTTP client")?;
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    let plain = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(5))
        .pool_timer(TokioTimer::new())
        .build(connector);
    Ok(Arc::new(RouterState {
        placer,
        http,
        plain,
        token: options.token.clone(),
    }))
}

/// The whole application: every request goes through [`handle`].
pub fn app(state: Shared) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// Where a request goes, from its raw path.
enum Route {
    Health,
    List,
    Feed,
    Park(SessionId),
    /// To the session's server, at this path and query.
    Session(SessionId, String),
}

fn bad_sid(raw: &str, e: impl std::fmt::Display) -> RouterError {
    let shown: String = raw.chars().take(140).collect();
    RouterError::new(
        StatusCode::BAD_REQUEST,
        format!("session id {shown:?}: {e}"),
    )
}

fn route(method: &Method, path: &str, query: Option<&str>) -> Result<Route, RouterError> {
    let with_query = |p: String| match query {
        Some(q) => format!("{p}?{q}"),
        None => p,
    };
    let not_found = || {
        RouterError::new(
            StatusCode::NOT_FOUND,
            "no such endpoint on the router: /api/sessions/{sid}/…, /api/tool-approval/{sid}/…, \
             /s/{sid}/mcp, GET /api/sessions, GET /api/health (docs/scale-out.md)",
        )
    };
    match path {
        "/api/health" => return Ok(Route::Health),
        "/api/sessions" => return Ok(Route::List),
        "/api/sessions/events" => return Ok(Route::Feed),
        _ => {}
    }
    let parse = |raw: &str| SessionId::parse(raw).map_err(|e| bad_sid(raw, e));
    // The rest of the path goes to the session server as it is: no segment may climb out of
    // the session's part of the API (`..`, encoded dots or slashes).
    let plain_tail = |tail: &str| -> Result<(), RouterError> {
        let lower = tail.to_ascii_lowercase();
        let bad = tail
            .split('/')
            .any(|seg| seg.is_empty() || seg == "." || seg == "..")
            || ["%2e", "%2f", "%5c", "\\"]
                .iter()
                .any(|p| lower.contains(p));
        if bad {
            return Err(RouterError::new(
                StatusCode::BAD_REQUEST,
                "the path has an empty, `.` or `..` segment, or an encoded dot or slash",
            ));
        }
        Ok(())
    };
    if let Some(rest) = path.strip_prefix("/api/sessions/") {
        let (raw, tail) = rest.split_once('/').ok_or_else(not_found)?;
        let sid = parse(raw)?;
        plain_tail(tail)?;
        if tail == "park" && *method == Method::POST {
            return Ok(Route::Park(sid));
        }
        return Ok(Route::Session(
            sid.clone(),
            with_query(format!("/api/sessions/{sid}/{tail}")),
        ));
    }
    if let Some(rest) = path.strip_prefix("/api/tool-approval/") {
        let (raw, tail) = rest.split_once('/').ok_or_else(not_found)?;
        let sid = parse(raw)?;
        plain_tail(tail)?;
        return Ok(Route::Session(
            sid.clone(),
            with_query(format!("/api/tool-approval/{sid}/{tail}")),
        ));
    }
    if let Some(rest) = path.strip_prefix("/s/") {
        let (raw, tail) = rest.split_once('/').ok_or_else(not_found)?;
        if tail != "mcp" {
            return Err(not_found());
        }
        let sid = parse(raw)?;
        return Ok(Route::Session(sid, with_query("/mcp".into())));
    }
    Err(not_found())
}

/// Reads a request's body whole: at most [`MAX_BODY_BYTES`], within [`BODY_READ_TIMEOUT`].
async fn read_body(request: Request) -> Result<(axum::http::request::Parts, Bytes), RouterError> {
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(RouterError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Ok(Ok(bytes)) => Ok((parts, bytes)),
        Ok(Err(_)) => Err(RouterError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY_BYTES} bytes, or could not be read"),
        )),
        Err(_) => Err(RouterError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Every request: authenticate, route, answer.
async fn handle(State(state): State<Shared>, request: Request) -> Response {
    if let Err(e) = auth::check(request.headers(), state.token.as_deref()) {
        return e.into_response();
    }
    if let Some(auth) = request
        .extensions()
        .get::<toolbox_front_door::ConnectionAuth>()
    {
        auth.passed();
    }
    let method = request.method().clone();
    let route = match route(&method, request.uri().path(), request.uri().query()) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let get_only = |ok: bool| {
        (!ok).then(|| {
            RouterError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed here; this path takes: GET",
            )
            .into_response()
        })
    };
    match route {
        Route::Health => get_only(method == Method::GET).unwrap_or_else(|| health(&state)),
        Route::List => match get_only(method == Method::GET) {
            Some(refused) => refused,
            None => sessions::list(&state).await,
        },
        Route::Feed => match get_only(method == Method::GET) {
            Some(refused) => refused,
            None => sessions::feed(&state).await,
        },
        Route::Park(sid) => match state.placer.park(&sid).await {
            Ok((status, body)) => (status, Json(body)).into_response(),
            Err(e) => e.into_response(),
        },
        Route::Session(sid, path) => {
            let (parts, body) = match read_body(request).await {
                Ok(read) => read,
                Err(e) => return e.into_response(),
            };
            proxy::forward(&state, &sid, method, &path, &parts.headers, body).await
        }
    }
}

fn health(state: &Shared) -> Response {
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "router": {
            "placement": state.placer.base(),
            "cached_sessions": state.placer.cached(),
        },
    }))
    .into_response()
}

/// Binds, prints `toolbox router: listening on http://ADDR` on stderr, and serves until
/// `stop` resolves; then stops accepting and lets requests in flight finish (at most
/// `grace`).
pub async fn serve(
    options: RouterOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<()> {
    let state = state(&options)?;
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let local = listener.local_addr()?;
    eprintln!(
        "toolbox router: listening on http://{local} (placement {}){}",
        state.placer.base(),
        if options.token.is_some() {
            "; requests need Authorization: Bearer <token>"
        } else {
            ""
        }
    );
    let app = app(state);
    let stopping = CancellationToken::new();
    {
        let stopping = stopping.clone();
        tokio::spawn(async move {
            stop.await;
            stopping.cancel();
        });
    }
    // serve's front door: header timeouts, a connection cap, and strangers evicted first
    // (a request that passed `auth::check` marks its connection).
    let make = move |connection: toolbox_front_door::Connection| {
        let app = app.clone();
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(connection.auth.clone());
            app.clone().oneshot(request.map(Body::new))
        })
    };
    toolbox_front_door::serve(
        listener,
        make,
        toolbox_front_door::FrontDoor::from_descriptor_limit(),
        stopping,
        grace,
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_parse_the_session_once() {
        let r = route(
            &Method::POST,
            "/api/sessions/s1/tools/file_manager__read",
            Some("call_id=a"),
        )
        .unwrap();
        assert!(
            matches!(r, Route::Session(sid, p) if sid.as_str() == "s1" && p == "/api/sessions/s1/tools/file_manager__read?call_id=a")
        );
        assert!(
            matches!(route(&Method::GET, "/s/s1/mcp", None).unwrap(), Route::Session(_, p) if p == "/mcp")
        );
        assert!(matches!(
            route(&Method::POST, "/api/sessions/s1/park", None).unwrap(),
            Route::Park(_)
        ));
        for bad in [
            "/api/sessions/..%2F/tools/x",
            "/api/sessions/.x/events",
            "/s/a%20b/mcp",
        ] {
            let e = route(&Method::GET, bad, None).err().unwrap();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{bad}");
        }
        assert_eq!(
            route(&Method::GET, "/s/s1/mcp/x", None)
                .err()
                .unwrap()
                .status,
            StatusCode::NOT_FOUND
        );
    }
}
