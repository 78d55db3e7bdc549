//! The JSON API under `/api` and the SSE event streams. Handlers parse what the client sent
//! (session ids through [`SessionId`], bodies as JSON with errors naming the problem) and
//! call the runtime; they compute nothing of their own.
//!
//! One module per resource: `info.rs` (health, tools, agents), `sessions.rs` (the session
//! list and its live feed), `turns.rs` (a session's turns and messages, and park),
//! `approvals.rs` (answers to approval and review questions), `calls.rs` (one tool call over
//! HTTP, and the trajectory), `events.rs` (a session's SSE stream). A session's `input/`
//! folder is [`crate::upload`]'s. This file has the routes and what handlers share: JSON
//! bodies and errors, the session of a request.

mod approvals;
mod calls;
mod events;
mod info;
mod sessions;
mod turns;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde::de::DeserializeOwned;
use toolbox_core::SessionId;
use toolbox_runtime::TurnError;

pub use calls::MAX_PAGE;

use crate::{ApiError, AppState, MAX_BODY_BYTES};

type AppResult<T> = Result<T, ApiError>;
type Shared = State<Arc<AppState>>;

/// The routes under `/api`.
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(info::health))
        .route("/tools", get(info::tools))
        .route("/agents", get(info::agents))
        .route("/sessions", get(sessions::sessions))
        .route("/sessions/events", get(sessions::sessions_feed))
        .route("/sessions/{sid}/turns", post(turns::start_turn))
        .route("/sessions/{sid}/cancel", post(turns::cancel))
        .route("/sessions/{sid}/park", post(turns::park))
        .route("/sessions/{sid}/events", get(events::events))
        .route("/sessions/{sid}/messages", get(turns::messages))
        .route("/sessions/{sid}/trajectory", get(calls::trajectory))
        .route("/sessions/{sid}/tools/{name}", post(calls::run_tool))
        .route("/sessions/{sid}/input", get(crate::upload::list))
        // The upload streams its body to disk under its own limit (--max-upload-mb).
        .route(
            "/sessions/{sid}/input/{*path}",
            put(crate::upload::put).layer(DefaultBodyLimit::disable()),
        )
        .route("/tool-approval/{sid}/{call_id}", post(approvals::approval))
        .fallback(|| async { ApiError::not_found("no such API endpoint; see docs/server.md") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(json_errors))
}

/// Every error under `/api` is JSON `{"error": ...}`. axum answers some requests itself, in
/// plain text or with no body at all: a query string that does not parse, a body over the
/// limit read as raw bytes, a method the path does not take. This rewrites those with the
/// same status (and headers such as `Allow`), and leaves JSON errors alone.
async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match status {
        StatusCode::PAYLOAD_TOO_LARGE => format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        StatusCode::METHOD_NOT_ALLOWED => {
            let allowed = parts
                .headers
                .get(header::ALLOW)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            format!("method not allowed here; this path takes: {allowed}")
        }
        _ if !text.is_empty() => text,
        _ => status
            .canonical_reason()
            .unwrap_or("the request failed")
            .to_string(),
    };
    let mut out = ApiError::new(status, message).into_response();
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    out
}

/// A JSON body, with errors that say what is wrong as `{"error": ...}`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            let status = e.status();
            if status == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    status,
                    format!("the body is larger than {MAX_BODY_BYTES} bytes"),
                )
            } else {
                ApiError::new(status, format!("cannot read the body: {}", e.body_text()))
            }
        })?;
        parse_json(&bytes).map(JsonBody)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> AppResult<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the body is empty: expected a JSON object",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("the body is not valid JSON for this request: {e}"))
    })
}

/// The session of a request: a valid id, and in session server mode the server's own (any
/// other is 404).
pub(crate) fn session(state: &AppState, raw: &str) -> AppResult<SessionId> {
    let sid = SessionId::parse(raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(server) = &state.options.session_server {
        if sid != *server.session() {
            return Err(ApiError::not_found(format!(
                "no session {sid} here: this session server serves session {} only",
                server.session()
            )));
        }
    }
    Ok(sid)
}

/// The caller's W3C trace context (`traceparent`, `tracestate` headers): the parent of the
/// spans of its call or turn. An invalid one is ignored, as the spec asks.
fn trace_parent(headers: &axum::http::HeaderMap) -> Option<toolbox_core::TraceParent> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    toolbox_core::TraceParent::from_carrier(text("traceparent"), text("tracestate"))
}

fn turn_error(e: TurnError) -> ApiError {
    let status = match &e {
        TurnError::Busy(_) => StatusCode::CONFLICT,
        TurnError::NoModel(_) => StatusCode::SERVICE_UNAVAILABLE,
        TurnError::UnknownAgent(_) => StatusCode::NOT_FOUND,
        TurnError::InvalidSession(_) | TurnError::BadRequest(_) => StatusCode::BAD_REQUEST,
    };
    let message = match e {
        TurnError::NoModel(why) => format!("no model is configured, so turns cannot run: {why}"),
        other => other.to_string(),
    };
    ApiError::new(status, message)
}
