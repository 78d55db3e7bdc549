//! [`ToolRequest`]: one tool call as the model asked for it, with what its caller adds (a
//! session, a timeout, the turn's permissions, an event sink, a place in an approval queue).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolbox_core::{TraceParent, Vocabulary};
use toolbox_host::EventSink;

use crate::Permissions;

/// One tool call as the model asked for it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ToolRequest {
    /// The call's id as the model gave it; it names spool files.
    pub id: String,
    /// The tool's canonical name or an alias.
    pub name: String,
    /// An object, or a string holding a JSON object (as Chat Completions sends it).
    pub arguments: Value,
    /// `None` means the session `default`. Parsed into a [`SessionId`] before anything else
    /// happens: an invalid id is refused and nothing is written anywhere.
    pub session_id: Option<String>,
    /// The vocabulary the model was shown the tools in: the executor's own messages about
    /// the call (a refusal, a timeout, the tool a spooled result's preview names) use the
    /// tools' names in it. The name requested resolves in every vocabulary regardless.
    /// `None` means the executor's own ([`ExecutorConfig::vocabulary`]).
    #[serde(default)]
    pub vocabulary: Option<Vocabulary>,
    /// Overrides the configured per-call timeout for this call.
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// The permissions of the turn this call belongs to. They can only narrow the
    /// executor's own (the process's ceiling): for each risk the stricter decision wins.
    #[serde(skip)]
    pub permissions: Option<Permissions>,
    /// Where this call's streamed output and approval request go instead of the executor's
    /// sink (an agent runtime routes them to the call's session).
    #[serde(skip)]
    pub events: Option<EventSink>,
    /// This call's place in an [`ApprovalQueue`](crate::ApprovalQueue): if it must ask, it
    /// asks only after every earlier call of the queue has passed the gate.
    #[serde(skip)]
    pub approval_ticket: Option<Arc<crate::ApprovalTicket>>,
    /// The caller's trace context (an HTTP `traceparent`, MCP's `_meta`): the parent of the
    /// call's `execute_tool` span when spans are exported. `None`: the current span's.
    #[serde(skip)]
    pub trace_parent: Option<TraceParent>,
}

impl ToolRequest {
    /// A request in the session `default` with the configured timeout.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolRequest {
            id: id.into(),
            name: name.into(),
            arguments,
            session_id: None,
            vocabulary: None,
            timeout: None,
            permissions: None,
            events: None,
            approval_ticket: None,
            trace_parent: None,
        }
    }

    /// Sets the session id (checked when the call runs).
    pub fn session(mut self, sid: impl Into<String>) -> Self {
        self.session_id = Some(sid.into());
        self
    }

    /// Says which vocabulary the model saw (see [`ToolRequest::vocabulary`]).
    pub fn vocabulary(mut self, vocabulary: Vocabulary) -> Self {
        self.vocabulary = Some(vocabulary);
        self
    }

    /// Overrides the configured per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Narrows the executor's permissions for this call (see [`ToolRequest::permissions`]).
    pub fn permissions(mut self, permissions: impl Into<Permissions>) -> Self {
        self.permissions = Some(permissions.into());
        self
    }

    /// Sends this call's events to `events` (see [`ToolRequest::events`]).
    pub fn events(mut self, events: EventSink) -> Self {
        self.events = Some(events);
        self
    }

    /// Makes `parent` the parent of the call's span (see [`ToolRequest::trace_parent`]).
    pub fn trace_parent(mut self, parent: Option<TraceParent>) -> Self {
        self.trace_parent = parent;
        self
    }

    /// Places the call in an approval queue (see [`ToolRequest::approval_ticket`]).
    pub fn approval_ticket(mut self, ticket: crate::ApprovalTicket) -> Self {
        self.approval_ticket = Some(Arc::new(ticket));
        self
    }
}
