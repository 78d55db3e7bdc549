//! A session's turns: `POST …/turns` starts one, `POST …/cancel` cancels it,
//! `GET …/messages` reads the conversation; and `POST …/park` (session server mode), which
//! stops serving the session.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde_json::{json, Value};
use toolbox_runtime::{conversation, TurnRequest};

use super::{session, turn_error, AppResult, JsonBody, Shared};
use crate::ApiError;

pub(super) async fn start_turn(
    State(state): Shared,
    Path(sid): Path<String>,
    headers: axum::http::HeaderMap,
    JsonBody(mut request): JsonBody<TurnRequest>,
) -> AppResult<impl IntoResponse> {
    let sid = session(&state, &sid)?;
    request.trace_parent = super::trace_parent(&headers);
    if state.shutdown.is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down and takes no new turns",
        ));
    }
    let turn_id = state
        .runtime
        .start_turn(sid.as_str(), request)
        .map_err(turn_error)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"turn_id": turn_id, "session_id": sid.as_str()})),
    ))
}

pub(super) async fn cancel(
    State(state): Shared,
    Path(sid): Path<String>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    Ok(Json(
        json!({"cancelled": state.runtime.cancel(sid.as_str())}),
    ))
}

/// `POST /api/sessions/{sid}/park` (session server mode): stop serving, cancel the running
/// turn, sync one last time and exit 0. The session then resumes on any session server,
/// like a lost one.
pub(super) async fn park(
    State(state): Shared,
    Path(sid): Path<String>,
) -> AppResult<impl IntoResponse> {
    let sid = session(&state, &sid)?;
    let Some(server) = &state.options.session_server else {
        return Err(ApiError::not_found(
            "park is for session server mode: toolbox serve --session SID --epoch N \
             --state-store URL",
        ));
    };
    server.park();
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"parking": true, "session_id": sid.as_str(), "epoch": server.epoch()})),
    ))
}

pub(super) async fn messages(
    State(state): Shared,
    Path(sid): Path<String>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    let loaded = conversation::load(state.runtime.executor().workspace(), &sid)
        .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    Ok(Json(
        json!({"messages": loaded.messages, "warnings": loaded.warnings}),
    ))
}
