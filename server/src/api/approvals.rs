//! `POST /api/tool-approval/{sid}/{call_id}`: a person's answer to an approval or review
//! question, recorded as `http from ADDR with the token` (or `(loopback, no token)`).

use axum::extract::{Path, State};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use toolbox_executor::ApprovalDecision;
use toolbox_runtime::ApprovalAnswer;

use super::sessions::APPROVAL_ANSWERED;
use super::{session, AppResult, JsonBody, Shared};
use crate::ApiError;

#[derive(Deserialize)]
pub(super) struct ApprovalBody {
    /// `approve`, `approve_for_session`, `deny`; for a review `approve` or `reject`.
    decision: ApprovalDecision,
    /// What the person wrote: a review's feedback (the model gets it word for word), or why
    /// a call was denied.
    #[serde(default)]
    feedback: Option<String>,
}

/// The longest feedback text an answer may carry.
const MAX_FEEDBACK_CHARS: usize = 16_000;

pub(super) async fn approval(
    State(state): Shared,
    Path((sid, call_id)): Path<(String, String)>,
    peer: Option<axum::Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    JsonBody(body): JsonBody<ApprovalBody>,
) -> AppResult<Json<Value>> {
    let sid = session(&state, &sid)?;
    if body
        .feedback
        .as_ref()
        .is_some_and(|f| f.chars().count() > MAX_FEEDBACK_CHARS)
    {
        return Err(ApiError::bad_request(format!(
            "feedback is longer than {MAX_FEEDBACK_CHARS} characters"
        )));
    }
    // An answer over this API is a person's (the console, a program acting for one); who
    // gave it is recorded with the call: the address it came from, and whether it carried
    // the token (model-run code cannot connect at all: the front door refuses it).
    let by = format!(
        "http{}{}",
        peer.map(|p| format!(" from {}", (p.0).0))
            .unwrap_or_default(),
        if state.options.token.is_some() {
            " with the token"
        } else {
            " (loopback, no token)"
        }
    );
    match state
        .runtime
        .respond_as_person(sid.as_str(), &call_id, body.decision, body.feedback, &by)
    {
        ApprovalAnswer::Delivered => {
            APPROVAL_ANSWERED.notify_waiters();
            Ok(Json(json!({"ok": true})))
        }
        ApprovalAnswer::AlreadyAnswered => Err(ApiError::conflict(format!(
            "call {call_id} of session {sid} was already answered, or stopped waiting (it timed \
             out or was cancelled)"
        ))),
        ApprovalAnswer::Unknown => Err(ApiError::not_found(format!(
            "no call {call_id} of session {sid} asked for approval"
        ))),
    }
}
