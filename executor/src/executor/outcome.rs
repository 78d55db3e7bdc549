//! What a call came to: [`ToolCallInfo`] (what the model sees, what the trajectory keeps),
//! its [`CallStatus`] and [`ErrorKind`], and [`Finished`], a call whose trajectory line is
//! still to be written.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolbox_core::SessionId;

use super::{shorten, ToolExecutor};
use crate::ToolRequest;

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool returned a result.
    Done,
    /// Anything else; [`ErrorKind`] says what.
    Error,
}

impl CallStatus {
    /// `done` or `error`, as the model sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Done => "done",
            CallStatus::Error => "error",
        }
    }
}

/// Why a call ended in `error`, for programs; the model reads the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No tool or alias of that name is registered.
    UnknownTool,
    /// Bad request: an unparsable argument string, an invalid session id, an intercepted tool.
    InvalidRequest,
    /// The permissions refused the call, or the user did, or no approval came in time.
    Denied,
    /// The call ran past its timeout and was stopped.
    Timeout,
    /// The caller cancelled the call.
    Cancelled,
    /// The tool panicked; the executor kept serving.
    Panic,
    /// The tool itself reported the error (including bad arguments).
    Tool,
}

impl ErrorKind {
    /// Its name as JSON has it (`unknown_tool`, `denied`, …): the `error.type` of the
    /// call's span.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::InvalidRequest => "invalid_request",
            ErrorKind::Denied => "denied",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Panic => "panic",
            ErrorKind::Tool => "tool_error",
        }
    }
}

/// A finished call whose trajectory line is still to be written: by [`Finished::record`],
/// or when it is dropped (a caller that returns early, or panics, still records the call).
pub struct Finished {
    pub(super) info: Option<ToolCallInfo>,
    /// None for a call refused for its session id: it has nowhere to be recorded.
    pub(super) session: Option<SessionId>,
    pub(super) executor: ToolExecutor,
}

impl Finished {
    /// The outcome.
    pub fn info(&self) -> &ToolCallInfo {
        self.info.as_ref().expect("taken only by record and drop")
    }

    /// Appends the call's trajectory line, and returns the outcome.
    pub fn record(mut self) -> ToolCallInfo {
        let info = self.info.take().expect("taken only by record and drop");
        self.executor.record(self.session.as_ref(), &info);
        info
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        if let Some(info) = self.info.take() {
            self.executor.record(self.session.as_ref(), &info);
        }
    }
}

/// The record of one call: what the model sees, what the trajectory keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallInfo {
    /// The call's id as the model gave it.
    pub id: String,
    /// The canonical tool name when it resolved, else the name as requested.
    pub tool: String,
    /// The name the model called the tool by, when it is not the canonical one (an alias, or
    /// the tool's name in the model's [`Vocabulary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_as: Option<String>,
    /// The session the call ran in (empty when its id was refused).
    pub session_id: String,
    /// The arguments as the model sent them.
    pub arguments: Value,
    /// `done` or `error`.
    pub status: CallStatus,
    /// What the model sees: the whole result, or the preview of a spooled one.
    pub result: String,
    /// The structured form of the result, for programs (MCP `structuredContent`, the HTTP
    /// API's `"structured"`), when the tool has one ([`ToolInfo::output_schema`]) and the call
    /// ended `done`. The model never sees it: it reads [`result`](Self::result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Workspace-relative path of the full result when it was spooled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_path: Option<String>,
    /// Why the call failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// RFC 3339, UTC, milliseconds.
    pub started_at: String,
    /// How long the call took, not counting the time it waited for a person.
    pub elapsed_ms: u64,
    /// How long the call waited for a person to approve it (0 when it did not ask).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waited_ms: u64,
    /// Who approved the call, as the front end that carried the answer named them
    /// (`http 127.0.0.1:50112 with the token`, `terminal`, `mcp`); `None` when nobody was
    /// asked, or for an answer no front end signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ToolCallInfo {
    /// `{"status": "...", "result": "..."}` — the string the model gets back.
    pub fn envelope(&self) -> String {
        serde_json::json!({"status": self.status.as_str(), "result": self.result}).to_string()
    }

    /// Whether the call ended `done`.
    pub fn is_done(&self) -> bool {
        self.status == CallStatus::Done
    }
}

/// The record of a call refused for its session id. Nothing is written: the id cannot name a
/// folder, so there is no trajectory to append to.
pub(super) fn refused_session(
    request: ToolRequest,
    error: toolbox_core::InvalidSessionId,
    started_at: String,
    started: Instant,
) -> ToolCallInfo {
    tracing::debug!(target: "toolbox", tool_id = %request.id, "refused: invalid session id");
    ToolCallInfo {
        id: request.id,
        tool: shorten(&request.name, 200),
        called_as: None,
        session_id: String::new(),
        arguments: Value::Null,
        status: CallStatus::Error,
        result: error.to_string(),
        structured: None,
        spool_path: None,
        error_kind: Some(ErrorKind::InvalidRequest),
        started_at,
        elapsed_ms: started.elapsed().as_millis() as u64,
        waited_ms: 0,
        approved_by: None,
    }
}
