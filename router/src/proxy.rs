//! A request for one session, passed to its session server.
//!
//! The client's body is read whole first (bounded, as `toolbox serve` bounds it), so a
//! request that never reached a session server can be sent again. The session server's
//! answer streams back as it comes, with no timeout: SSE event streams and MCP's streams
//! pass through unchanged.
//!
//! A session server that refuses the connection, or answers 503 saying a newer epoch took
//! the session over (it never ran the call), is looked up again once (`:ensure` with
//! `stale_epoch`) and the request is sent once more; then the router answers 503 with
//! `Retry-After`. A request that reached a session server which then failed is never sent
//! again: its call may have run.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use toolbox_core::SessionId;

use crate::error::RouterError;
use crate::placement::{error_chain, Placement};
use crate::Shared;

/// Request headers a session server gets from the client; everything else (the client's
/// `Authorization`, cookies, hop-by-hop headers) stays at the router.
///
/// The W3C trace context goes on too, so that the host's spans join the client's trace.
const FORWARDED: [HeaderName; 8] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    header::CACHE_CONTROL,
    HeaderName::from_static("last-event-id"),
    HeaderName::from_static("mcp-session-id"),
    HeaderName::from_static("mcp-protocol-version"),
    HeaderName::from_static("traceparent"),
    HeaderName::from_static("tracestate"),
];

/// Response headers the router does not pass back: hop-by-hop ones, and the session
/// server's own authentication challenge.
fn dropped_response_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "www-authenticate"
    )
}

/// The most of a session server's error answer the router reads to tell why it failed.
const MAX_ERROR_READ: usize = 64 * 1024;

/// A session server's answer of at most this many bytes (declared), and not an event
/// stream, is read whole and sent back in one piece.
const WHOLE_ANSWER: usize = 256 * 1024;

/// How long the router waits for a session server's error answer (not its streams).
const ERROR_READ_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Seconds a client is told to wait when a session's server cannot be reached now.
const RETRY_AFTER_MOVE: u64 = 1;

/// What a session server says when a newer epoch took its session over
/// (server/src/api/calls.rs).
const SUPERSEDED: &str = "took it over";

/// What a session server says of a request for another session (server/src/api/mod.rs);
/// `this host serves session` is what it said before it was called a session server, still
/// read from one that runs an older toolbox.
const SERVES_ANOTHER: [&str; 2] = [
    "this session server serves session",
    "this host serves session",
];

/// Why one attempt did not reach a session server that would take the call.
enum Miss {
    /// Nothing was run: the connection was refused, or the session server was superseded,
    /// or it is not this session's server (any more). Worth one new lookup.
    Stale(String),
    /// A final answer.
    Done(Response),
}

/// Sends `method path` with `body` to `sid`'s session server and passes its answer back.
pub async fn forward(
    state: &Shared,
    sid: &SessionId,
    method: Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let mut stale: Option<u64> = None;
    let mut why = String::new();
    for attempt in 0..2 {
        let placement = match state.placer.lookup(sid, stale).await {
            Ok(p) => p,
            Err(e) => return e.into_response(),
        };
        match once(
            state,
            sid,
            &placement,
            &method,
            path_and_query,
            headers,
            &body,
        )
        .await
        {
            Miss::Done(response) => return response,
            Miss::Stale(reason) => {
                state.placer.forget(sid, placement.epoch);
                tracing::info!(target: "toolbox", %sid, epoch = placement.epoch, attempt, "session server did not take the request: {reason}");
                stale = Some(placement.epoch);
                why = format!("its session server (epoch {}) {reason}", placement.epoch);
            }
        }
    }
    RouterError::unavailable(
        format!("session {sid} cannot be reached now: {why}; try again shortly"),
        RETRY_AFTER_MOVE,
    )
    .into_response()
}

async fn once(
    state: &Shared,
    sid: &SessionId,
    placement: &Arc<Placement>,
    method: &Method,
    path_and_query: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Miss {
    let url = match placement.url.join(path_and_query.trim_start_matches('/')) {
        Ok(url) => url,
        Err(e) => {
            return Miss::Done(
                RouterError::new(StatusCode::BAD_REQUEST, format!("bad path: {e}")).into_response(),
            )
        }
    };
    let sent = if url.scheme() == "http" {
        send_plain(state, placement, method, url.as_str(), headers, body).await
    } else {
        send_tls(state, placement, method, url, headers, body).await
    };
    let response = match sent {
        Ok(r) => r,
        Err(Failed::Connect(e)) => return Miss::Stale(format!("refused the connection ({e})")),
        Err(Failed::During(e)) => {
            // The request may have reached the session server: never sent again.
            return Miss::Done(
                RouterError::new(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "the session server of session {sid} (epoch {}) failed during the \
                         request: {e}",
                        placement.epoch,
                    ),
                )
                .into_response(),
            );
        }
    };
    let (head, body) = response.into_parts();
    let status = head.status;
    if status == StatusCode::SERVICE_UNAVAILABLE
        || status == StatusCode::UNAUTHORIZED
        || status == StatusCode::NOT_FOUND
    {
        // Small answers: read them to tell a superseded or wrong session server from a real
        // answer.
        let text =
            match tokio::time::timeout(ERROR_READ_TIME, axum::body::to_bytes(body, MAX_ERROR_READ))
                .await
            {
                Ok(Ok(bytes)) => bytes,
                _ => Bytes::new(),
            };
        let message = serde_json::from_slice::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
            .unwrap_or_default();
        if status == StatusCode::SERVICE_UNAVAILABLE && message.contains(SUPERSEDED) {
            return Miss::Stale("was superseded".into());
        }
        if status == StatusCode::UNAUTHORIZED {
            return Miss::Stale("refused the router's credentials".into());
        }
        if status == StatusCode::NOT_FOUND && SERVES_ANOTHER.iter().any(|m| message.contains(m)) {
            return Miss::Stale("serves another session".into());
        }
        return Miss::Done(rebuild(status, &head.headers, Body::from(text)));
    }
    let small = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n <= WHOLE_ANSWER);
    if small && !is_event_stream(&head.headers) {
        // A small answer (a tool's result) goes back whole, headers and body in one write,
        // rather than as a stream polled frame by frame. Its length is declared: a session
        // server that stops short fails it as a stream would.
        return Miss::Done(match axum::body::to_bytes(body, WHOLE_ANSWER).await {
            Ok(bytes) => rebuild(status, &head.headers, Body::from(bytes)),
            Err(e) => RouterError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the session server of session {sid} (epoch {}) failed during its answer: {}",
                    placement.epoch,
                    error_chain(&e)
                ),
            )
            .into_response(),
        });
    }
    Miss::Done(rebuild(status, &head.headers, body))
}

/// Why a request to a session server failed.
enum Failed {
    /// Before the session server had the request: the connection was refused or timed out.
    Connect(String),
    /// After it may have had it.
    During(String),
}

/// The request's headers a session server gets: those of [`FORWARDED`] the client sent, and
/// the router's own credentials for the session server.
fn server_headers(placement: &Placement, headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(FORWARDED.len() + 1);
    for name in &FORWARDED {
        for value in headers.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    if let Some(auth) = &placement.auth {
        out.insert(header::AUTHORIZATION, auth.clone());
    }
    out
}

/// A plain-HTTP session server, through hyper's pooled client: the common case inside a
/// cluster, and the shortest path (no second request type to build, no URL re-parse).
async fn send_plain(
    state: &Shared,
    placement: &Placement,
    method: &Method,
    url: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Failed> {
    let mut request = axum::http::Request::new(Body::from(body.clone()));
    *request.method_mut() = method.clone();
    *request.uri_mut() = url
        .parse()
        .map_err(|e| Failed::Connect(format!("bad URL: {e}")))?;
    *request.headers_mut() = server_headers(placement, headers);
    match state.plain.request(request).await {
        Ok(r) => Ok(r.map(Body::new)),
        Err(e) if e.is_connect() => Err(Failed::Connect(error_chain(&e))),
        Err(e) => Err(Failed::During(error_chain(&e))),
    }
}

/// An HTTPS session server, through reqwest (rustls).
async fn send_tls(
    state: &Shared,
    placement: &Placement,
    method: &Method,
    url: reqwest::Url,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, Failed> {
    let mut request = state
        .http
        .request(method.clone(), url)
        .headers(server_headers(placement, headers));
    if !body.is_empty() || *method == Method::POST || *method == Method::PUT {
        request = request.body(body.clone());
    }
    match request.send().await {
        Ok(r) => Ok(axum::http::Response::from(r).map(Body::new)),
        Err(e) if e.is_connect() => Err(Failed::Connect(error_chain(&e.without_url()))),
        Err(e) => Err(Failed::During(error_chain(&e.without_url()))),
    }
}

fn is_event_stream(head: &HeaderMap) -> bool {
    head.get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
}

fn rebuild(status: StatusCode, head: &HeaderMap, body: Body) -> Response {
    let mut out = Response::new(body);
    *out.status_mut() = status;
    for (name, value) in head {
        if !dropped_response_header(name) {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    if status.is_success() && is_event_stream(head) {
        // Proxies after the router must not buffer a stream.
        out.headers_mut().insert(
            HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        );
    }
    out
}
