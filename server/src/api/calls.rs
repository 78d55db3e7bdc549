//! A session's tool calls: `POST …/tools/{name}` runs one (in session server mode, asking
//! the store before and after whether a newer epoch took the session over), and
//! `GET …/trajectory` pages through the calls made.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, Permissions};

use super::{parse_json, session, turn_error, AppResult, Shared};
use crate::ApiError;

#[derive(Deserialize)]
pub(super) struct Page {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// The most calls one trajectory page holds.
pub const MAX_PAGE: usize = 1000;

pub(super) async fn trajectory(
    State(state): Shared,
    Path(sid): Path<String>,
    Query(page): Query<Page>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    let limit = page.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be 1..={MAX_PAGE} (got {limit})"
        )));
    }
    let offset = page.offset.unwrap_or(0);
    let calls = toolbox_executor::trajectory::read_session_trajectory(
        state.runtime.executor().workspace(),
        &sid,
    )
    .map_err(|e| ApiError::internal(format!("{e:#}")))?;
    let total = calls.len();
    let slice: Vec<_> = calls.into_iter().skip(offset).take(limit).collect();
    Ok(Json(json!({
        "calls": slice,
        "total": total,
        "offset": offset,
        "limit": limit,
    })))
}

#[derive(Deserialize)]
pub(super) struct RunToolQuery {
    call_id: Option<String>,
    mode: Option<String>,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// 503 for a call on a session server whose session `newer` took over; `ran` when the call
/// ran here first (its effects are lost with this session server).
fn superseded(sid: &toolbox_core::SessionId, newer: u64, ran: bool) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        if ran {
            format!(
                "this session server no longer serves session {sid}: epoch {newer} took it \
                 over while the call ran, so what it did here will not be kept; run it again on \
                 the session's new session server"
            )
        } else {
            format!(
                "this session server no longer serves session {sid}: epoch {newer} took it over"
            )
        },
    )
}

pub(super) async fn run_tool(
    State(state): Shared,
    Path((sid, name)): Path<(String, String)>,
    Query(query): Query<RunToolQuery>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    if let Some(server) = &state.options.session_server {
        // A session server another has taken over runs nothing more: asked of the store,
        // not only of what the last sync saw.
        if let Some(newer) = server.newer_epoch(&state.runtime).await {
            return Err(superseded(&sid, newer, false));
        }
        if server.stopping().is_cancelled() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("session {sid} is being parked on this session server"),
            ));
        }
    }
    let arguments: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(&body)?
    };
    if !arguments.is_object() {
        return Err(ApiError::bad_request(
            "the body must be the tool's arguments as a JSON object",
        ));
    }
    let ceiling = state.runtime.executor().permissions();
    let permissions = match query.mode.as_deref() {
        None | Some("") => ceiling,
        Some(m) => Permissions::from(
            m.parse::<PermissionMode>()
                .map_err(|e| ApiError::bad_request(format!("mode: {e}")))?,
        ),
    };
    let call_id = match query.call_id {
        Some(id) if !id.trim().is_empty() => {
            if id.len() > 128
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(ApiError::bad_request(
                    "call_id: 1 to 128 letters, digits, '-' or '_'",
                ));
            }
            id
        }
        _ => format!(
            "http-{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            NEXT_CALL.fetch_add(1, Ordering::Relaxed)
        ),
    };
    // A client that goes away drops this future, which drops the call and stops its work.
    let cancel = state.calls.child_token();
    let info = state
        .runtime
        .run_tool(
            sid.as_str(),
            &call_id,
            &name,
            arguments,
            permissions,
            cancel,
            Some(std::sync::Arc::new({
                let (askers, sid) = (state.askers.clone(), sid.clone());
                move || askers.check(&sid)
            })),
            super::trace_parent(&headers),
        )
        .await
        .map_err(turn_error)?;
    if let Some(server) = &state.options.session_server {
        // Taken over while the call ran: what it did here will never be synced, so the
        // caller must not read `done` (the router then asks the session's new session
        // server).
        if let Some(newer) = server.newer_epoch(&state.runtime).await {
            return Err(superseded(&sid, newer, true));
        }
        server.wake();
    }
    let mut out = json!({
        "status": info.status.as_str(),
        "result": info.result,
        "call_id": info.id,
        "tool": info.tool,
        "elapsed_ms": info.elapsed_ms,
    });
    if let Some(path) = info.spool_path {
        out["spool_path"] = Value::String(path);
    }
    if let Some(kind) = info.error_kind {
        out["error_kind"] = json!(kind);
    }
    if let Some(called_as) = info.called_as {
        out["called_as"] = Value::String(called_as);
    }
    // For programs; `result` stays the text the model would read.
    if let Some(structured) = info.structured {
        out["structured"] = structured;
    }
    Ok(Json(out))
}
