//! MCP over streamable HTTP: every visible tool of one executor, for MCP clients that speak
//! HTTP instead of stdio (`toolbox serve` mounts [`router`] at `/mcp`).
//!
//! The transport is rmcp's streamable HTTP server with sessions: a client POSTs `initialize`,
//! gets an `Mcp-Session-Id` header, and sends every later message with it; answers come back
//! as a JSON-RPC body or an SSE stream, on which the server can also send the client requests
//! of its own (elicitation) and notifications (progress). What this module adds is the
//! [`rmcp::ServerHandler`] over [`ToolExecutor`]:
//!
//! - `tools/list` lists the tools `toolbox mcp` lists on stdio: those the executor's mode
//!   shows, without the ones an agent runtime intercepts (`call_agent`), rendered by
//!   [`toolbox_executor::schema::render_tool`] in [`SchemaFormat::Mcp`], strict (annotations
//!   included);
//! - `tools/call` runs one call through [`ToolExecutor::run_cancellable`]. Every outcome of a
//!   call that reached the executor is a result (a failure has `isError: true` and the
//!   executor's message as its text); only a name that is no tool at all is a protocol error
//!   (-32602 `unknown tool: NAME`), as on stdio. `notifications/cancelled` for the call, the
//!   end of its MCP session, or the client dropping the POST's response (`ClientGone`)
//!   cancels it;
//! - each MCP session (`Mcp-Session-Id`) runs its calls in a toolbox session of its own
//!   (`mcp-…`), unless [`McpHttpOptions::session`] names one to share on purpose;
//! - the approval gate: in permission mode `auto` a risky call asks for approval. A client
//!   that declared the `elicitation` capability at `initialize` is asked with an
//!   `elicitation/create` request on the call's own SSE stream: a form whose message names
//!   the tool, its risk and its arguments, with one required field `decision`, `approve` or
//!   `deny`. Only `accept` with `approve` runs the call; `deny`, `decline`, `cancel` or a
//!   failed request refuse it. A client that did not declare the capability is answered per
//!   [`McpHttpOptions::fallback`]. No answer within the executor's approval timeout refuses
//!   the call as usual (the client's form is not withdrawn);
//! - a call's streamed output (a shell command's lines) goes to the client as
//!   `notifications/progress` when the call carried a `progressToken`, else as
//!   `notifications/message` (level `info`) once the client asked for `info` or lower with
//!   `logging/setLevel`, else nowhere. At most [`MAX_QUEUED_OUTPUT_BYTES`] wait to be sent
//!   per call; beyond that output is dropped (the result has all of it).
//!
//! Protocol revisions: those with an `initialize` handshake (2024-11-05 up to 2025-11-25).
//! The stateless 2026-07-28 revision forbids the server-to-client requests the approval gate
//! needs, so it is not offered; clients fall back to `initialize`.
//!
//! A POST body that is no message rmcp should see gets the JSON-RPC error `toolbox mcp`
//! answers on stdio, from the checks both transports share ([`jsonrpc`]): `400` with -32700
//! or -32600 for a body that is not JSON or no request, `200` with -32601 or -32602 for a
//! request its method refuses, `413` over [`MAX_BODY_BYTES`] (see `check_post_body`);
//! everything else about the transport (sessions, `Accept` and `Content-Type` checks, SSE)
//! is rmcp's.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::jsonrpc;
use axum::response::IntoResponse;
use futures_util::stream::{FuturesUnordered, StreamExt};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientJsonRpcMessage, ClientRequest,
    ContentBlock, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
    EnumSchema, Implementation, InitializeRequestParams, ListToolsResult, PaginatedRequestParams,
    PrimitiveSchemaDefinition, ProgressNotificationParam, ProgressToken, ProtocolVersion,
    ServerCapabilities, ServerConfig, Tool,
};
use sessions::{room_for_new_sessions, BoundedSessions};
pub use sessions::{EVICTABLE_AFTER, MAX_MCP_SESSIONS};
// MCP logging is deprecated by SEP-2577 (rmcp marks it so); `toolbox mcp` on stdio offers it,
// and so does this endpoint, until clients stop asking for it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam, SetLevelRequestParams};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, Peer, ServerHandler};
use serde_json::Value;
use tokio::sync::mpsc;
use toolbox_core::{ApprovalRequest, CancellationToken, EventSink, SessionId, ToolEvent};
use toolbox_executor::{
    schema, ApprovalDecision, ApprovalQueue, CallStatus, SchemaFormat, ToolExecutor, ToolRequest,
};

pub mod sessions;

/// What a risky call gets in permission mode `auto` when the MCP client cannot be asked
/// (it did not declare the `elicitation` capability at `initialize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Run it: the client confirms tool calls with its user itself, as most MCP clients do.
    Approve,
    /// Refuse it, with a result saying that the client cannot be asked and how to allow
    /// such calls.
    Deny,
}

/// How [`router`] serves MCP.
#[derive(Debug, Clone)]
pub struct McpHttpOptions {
    /// The toolbox session every call over this endpoint runs in, whichever MCP client sends
    /// it (`toolbox serve --mcp-session NAME`): trajectories, spool files, session folders
    /// (`output/`, `scratchpad/`) and the Python interpreter are then shared on purpose.
    /// `None` (the default) gives each MCP session (`Mcp-Session-Id`) a toolbox session of its
    /// own, named `mcp-…`, so unrelated clients never see each other's state.
    pub session: Option<SessionId>,
    /// What happens in permission mode `auto` when the client cannot be asked.
    pub fallback: Fallback,
    /// The `Host` header values (`name` or `name:port`) the MCP transport itself accepts.
    /// Empty (the default) means this router does not look at `Host`: the server's own
    /// layers check it before a request gets here.
    pub allowed_hosts: Vec<String>,
    /// Cancelling this ends every MCP session and its open SSE streams (for a graceful
    /// shutdown: an open stream would otherwise keep its connection busy).
    pub shutdown: CancellationToken,
    /// The most MCP sessions open at once ([`MAX_MCP_SESSIONS`] by default); see
    /// [`sessions`] for which idle one a new session replaces at the cap.
    pub max_sessions: usize,
}

impl McpHttpOptions {
    /// Calls in `session` (or a toolbox session per MCP session), [`Fallback::Deny`], no
    /// `Host` check of its own, a fresh shutdown token.
    pub fn new(session: Option<SessionId>) -> Self {
        McpHttpOptions {
            session,
            fallback: Fallback::Deny,
            allowed_hosts: Vec::new(),
            max_sessions: MAX_MCP_SESSIONS,
            shutdown: CancellationToken::new(),
        }
    }
}

/// Streamed output waiting to be sent to the client, per call. Output that would go over
/// is dropped: streaming is a courtesy, the tool result has it all.
pub const MAX_QUEUED_OUTPUT_BYTES: usize = 1024 * 1024;

/// The most preview text an approval form shows; a longer preview is cut (the message says
/// so).
const MAX_FORM_PREVIEW_CHARS: usize = 8000;

/// The form field the client's user answers in.
const DECISION_FIELD: &str = "decision";

const INSTRUCTIONS: &str =
    "toolbox tools run inside one workspace folder; paths are relative to it.";

/// The MCP service over `executor`, mounted at `/` of the returned router.
///
/// Mount it with `Router::nest("/mcp", mcp::router(..))` (or
/// `nest_service("/mcp", mcp::router(..))`): clients then use the URL `http://HOST:PORT/mcp`,
/// with `POST` for messages, `GET` for the session's own SSE stream and `DELETE` to end the
/// session. Any path below it (`/mcp/x`) is not served. Layers of the outer router (bearer
/// token, `Host` checks) apply as to any route.
pub fn router(executor: ToolExecutor, options: McpHttpOptions) -> axum::Router {
    let idle = session_idle_timeout(&executor);
    let shared = Arc::new(Shared::new(executor, &options));
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_cancellation_token(options.shutdown.clone());
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(idle);
    let sessions = Arc::new(BoundedSessions::new(
        sessions,
        options.max_sessions,
        EVICTABLE_AFTER,
    ));
    // One handler per MCP session: the log level is the session's own.
    let service = StreamableHttpService::new(
        move || Ok(McpHandler::new(shared.clone())),
        sessions.clone(),
        config,
    );
    axum::Router::new()
        .route_service("/", service)
        .layer(axum::middleware::from_fn(move |request, next| {
            room_for_new_sessions(sessions.clone(), request, next)
        }))
        .layer(axum::middleware::from_fn(check_post_body))
        .layer(axum::middleware::from_fn(cancel_when_the_client_leaves))
        .layer(axum::middleware::from_fn(delete_answers_no_content))
}

/// Cancelled when the response to the POST that carried a request is dropped: the client
/// closed the connection (it gave up, timed out or died) or the answer was sent. A call that
/// is still running then has no one to answer, so it is stopped, as for
/// `notifications/cancelled`: many clients never send that (the Python SDK 1.x does not
/// when a request times out), they just close the connection.
#[derive(Clone)]
struct ClientGone(CancellationToken);

/// Gives every POST a [`ClientGone`] token, in the request's extensions (rmcp hands the HTTP
/// request's parts on to the handler). It is cancelled when the response is dropped: for an
/// SSE stream (how rmcp answers a request) when its body is, whether it was read to its end
/// or not; for anything else when it is complete, or when the client leaves before.
async fn cancel_when_the_client_leaves(
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let gone = CancellationToken::new();
    request.extensions_mut().insert(ClientGone(gone.clone()));
    let guard = gone.drop_guard();
    let response = next.run(request).await;
    let is_stream = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _held_until_the_body_is_dropped = &guard;
        chunk
    });
    axum::response::Response::from_parts(parts, axum::body::Body::from_stream(body))
}

/// The token a call runs with: cancelled by `notifications/cancelled` or the end of the MCP
/// session (rmcp's token for the request), or when the client left ([`ClientGone`]).
fn call_cancellation(context: &RequestContext<RoleServer>) -> CancellationToken {
    let gone = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<ClientGone>())
        .map(|gone| gone.0.clone());
    let Some(gone) = gone else {
        return context.ct.clone();
    };
    let call = context.ct.child_token();
    let cancel = call.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = gone.cancelled() => cancel.cancel(),
            _ = cancel.cancelled() => {}
        }
    });
    call
}

/// `DELETE /mcp` ends the session with `204 No Content`. rmcp answers `202 Accepted`, which
/// the Python SDK takes for a failure (it expects 200 or 204) and warns "Session termination
/// failed: 202" on every close, though the session did end.
async fn delete_answers_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
    }
    response
}

/// How long an MCP session may see no message before it is closed (a client that vanished
/// without `DELETE`). rmcp counts a session as idle even while one of its calls runs
/// silently, and closing the session cancels the call, so this is never shorter than the
/// longest a call can take: its approval wait plus its timeout, plus a minute.
fn session_idle_timeout(executor: &ToolExecutor) -> Duration {
    let config = executor.config();
    let longest_call = config
        .approval_timeout
        .saturating_add(config.call_timeout)
        .saturating_add(Duration::from_secs(60));
    longest_call.max(SessionConfig::DEFAULT_KEEP_ALIVE)
}

/// The largest POST body read, as rmcp's own limit: 4 MiB.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Answers a POST whose body is not a message rmcp should see with the JSON-RPC error
/// `toolbox mcp` gives the same message on stdio ([`jsonrpc::parse_message`],
/// [`jsonrpc::check_params`]), as `application/json`:
///
/// - `400` with -32700 (Parse error, id null) for an empty body, one that is not UTF-8 or
///   not JSON, or JSON nested deeper than [`jsonrpc::MAX_NESTING`];
/// - `400` with -32600 (Invalid Request) for JSON that is no request object (`{}`, `[]`, a
///   batch, a number, no `method`, `jsonrpc` not `"2.0"`), with the request's id when it
///   has a usable one, else null;
/// - `200` with -32601 (Method not found) for a request of a method toolbox does not serve,
///   and with -32602 (Invalid params) for a served method whose params are wrong (`tools/call`
///   `arguments` not an object, …): the request was fine, the method refused it;
/// - `202` with no body for what needs no answer and rmcp would not read (a notification
///   holding a lone surrogate, a response without a usable id);
/// - `413` for a body over [`MAX_BODY_BYTES`].
///
/// rmcp alone answers most of these `415 Unsupported Media Type` in plain text, and a served
/// method with params it cannot read as "method not found". Everything else goes to rmcp
/// untouched.
async fn check_post_body(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            &format!(
                "Invalid Request: the body is over the limit of {MAX_BODY_BYTES} bytes (4 MiB) \
                 or could not be read"
            ),
        )
    };
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return too_large();
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::PARSE_ERROR,
            "Parse error: the body is empty; send one JSON-RPC message",
        );
    }
    match jsonrpc::parse_message(&bytes) {
        jsonrpc::Parsed::Reject { id, code, message } => {
            tracing::debug!("mcp: rejected a message: {message}");
            // A request that was well-formed but refused by its method is answered like any
            // other answer; a message that is no request at all is a bad request.
            let status = if code == jsonrpc::PARSE_ERROR || code == jsonrpc::INVALID_REQUEST {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            return jsonrpc_error(status, &id, code, &message);
        }
        jsonrpc::Parsed::Ignore => return StatusCode::ACCEPTED.into_response(),
        jsonrpc::Parsed::Message(jsonrpc::Inbound::Request { id, method, params }) => {
            // A request for a method this server does not offer is answered here, in a
            // sentence that names it (rmcp would answer with the bare method name and log a
            // warning for each).
            if !SERVED_METHODS.contains(&method.as_str()) {
                tracing::debug!("mcp: method not offered: {method}");
                return jsonrpc_error(
                    StatusCode::OK,
                    &id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &method_not_found(&method),
                );
            }
            if let Err(message) = jsonrpc::check_params(&method, &params) {
                return jsonrpc_error(StatusCode::OK, &id, jsonrpc::INVALID_PARAMS, &message);
            }
            if let Some((code, message)) = unreadable_for_rmcp(&bytes, &method, &params) {
                let status = if code == jsonrpc::INVALID_REQUEST {
                    StatusCode::BAD_REQUEST
                } else {
                    StatusCode::OK
                };
                return jsonrpc_error(status, &id, code, &message);
            }
        }
        jsonrpc::Parsed::Message(jsonrpc::Inbound::Notification { .. })
        | jsonrpc::Parsed::Response { .. } => {
            if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
                return jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    jsonrpc::INVALID_REQUEST,
                    &format!("Invalid Request: the message does not fit the MCP schema ({e})"),
                );
            }
        }
    }
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    next.run(request).await
}

/// Why rmcp cannot read a request for a served method that passed
/// [`jsonrpc::check_params`], as the code and message of the error to answer; `None` when it
/// can. rmcp would take a request whose params it cannot read for one of a method it does
/// not know and answer "method not found". Only the checks of [`jsonrpc::check_params`] are
/// shared with stdio; this is rmcp's own, stricter schema (`initialize` needs
/// `capabilities` and `clientInfo`, a numeric id must fit in 64 signed bits).
fn unreadable_for_rmcp(bytes: &[u8], method: &str, params: &Value) -> Option<(i64, String)> {
    match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(rmcp::model::JsonRpcMessage::Request(request))
            if !matches!(request.request, ClientRequest::CustomRequest(_)) =>
        {
            return None
        }
        Ok(_) => {}
        Err(e) => {
            return Some((
                jsonrpc::INVALID_REQUEST,
                format!("Invalid Request: the message does not fit the MCP schema ({e})"),
            ))
        }
    }
    fn why<T: serde::de::DeserializeOwned>(params: &Value) -> Option<String> {
        T::deserialize(params).err().map(|e| e.to_string())
    }
    #[allow(deprecated)]
    let why = match method {
        "initialize" => why::<InitializeRequestParams>(params),
        "tools/call" => why::<CallToolRequestParams>(params),
        "tools/list" => why::<PaginatedRequestParams>(params),
        "logging/setLevel" => why::<SetLevelRequestParams>(params),
        _ => None,
    };
    let message = match why {
        Some(why) => format!("Invalid params: {method} params do not fit the MCP schema ({why})"),
        None => format!("Invalid params: {method} params do not fit the MCP schema"),
    };
    Some((jsonrpc::INVALID_PARAMS, message))
}

/// The requests toolbox's MCP servers answer (on both transports).
pub const SERVED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
];

/// The JSON-RPC "Method not found" code.
pub const METHOD_NOT_FOUND: i64 = jsonrpc::METHOD_NOT_FOUND;

/// The message of a -32601 answer: the method named, and what is offered instead.
pub fn method_not_found(method: &str) -> String {
    let shown: String = method.chars().take(100).collect();
    format!(
        "Method not found: toolbox does not offer {shown:?}; it serves tools (tools/list, \
         tools/call), ping and logging/setLevel"
    )
}

/// A JSON-RPC error response, as `application/json`.
fn jsonrpc_error(
    status: axum::http::StatusCode,
    id: &Value,
    code: i64,
    message: &str,
) -> axum::response::Response {
    let body = jsonrpc::error_response(id, code, message);
    (status, axum::Json(body)).into_response()
}

/// What every session of one router shares.
struct Shared {
    executor: ToolExecutor,
    session: Option<SessionId>,
    fallback: Fallback,
    /// Rendered once: the visible tools never change.
    tools: Arc<Vec<Tool>>,
}

impl Shared {
    fn new(executor: ToolExecutor, options: &McpHttpOptions) -> Self {
        let tools = listed_tools(&executor);
        Shared {
            executor,
            session: options.session.clone(),
            fallback: options.fallback,
            tools: Arc::new(tools),
        }
    }
}

/// The tools `toolbox mcp` lists: visible in the executor's mode, not intercepted.
fn listed_tools(executor: &ToolExecutor) -> Vec<Tool> {
    let tools = match executor.resolve_agent_tools(None, executor.permissions()) {
        Ok(tools) => tools,
        // Only an unknown toolset fails, and no toolset is asked for.
        Err(e) => {
            tracing::error!("mcp: cannot list the tools: {e:#}");
            return Vec::new();
        }
    };
    tools
        .into_iter()
        .filter_map(|tool| {
            let rendered = schema::render_tool(&tool.info, SchemaFormat::Mcp.strict(true));
            match serde_json::from_value::<Tool>(rendered) {
                Ok(tool) => Some(tool),
                Err(e) => {
                    tracing::error!(tool = %tool.info.name, "mcp: tool not listed, its MCP rendering does not parse: {e}");
                    None
                }
            }
        })
        .collect()
}

/// Call ids are unique in the process: approvals are keyed by session and call id, and
/// every MCP client shares one session.
static CALLS: AtomicU64 = AtomicU64::new(0);

/// `mcp-http-<n>-<16 hex digits>`: the number keeps ids unique, the digits (SipHash of the
/// number under the process's random keys) make them unguessable, so no one who can reach
/// another API learns which calls wait.
fn unguessable_call_id(n: u64) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(n);
    format!("mcp-http-{n}-{:016x}", hasher.finish())
}

/// `logging/setLevel` not yet called: no log notifications.
const LOGGING_OFF: u8 = u8::MAX;
/// Tool output is logged at `info`.
const LEVEL_INFO: u8 = 1;

/// MCP sessions started by this process, for naming their toolbox sessions.
static MCP_SESSIONS: AtomicU64 = AtomicU64::new(1);

/// A fresh toolbox session id for one MCP session: `mcp-<start time>-<n>`.
fn own_session() -> SessionId {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = MCP_SESSIONS.fetch_add(1, Ordering::Relaxed);
    SessionId::parse(&format!("mcp-{ms}-{n}")).expect("a valid session id")
}

/// The handler of one MCP session.
#[derive(Clone)]
struct McpHandler {
    shared: Arc<Shared>,
    /// The toolbox session this MCP session's calls run in.
    session: SessionId,
    /// The level this session asked for with `logging/setLevel`, as a [`level_rank`].
    log_level: Arc<AtomicU8>,
    /// This MCP session's approval questions: one at a time, in the order the calls came.
    approvals: ApprovalQueue,
}

impl McpHandler {
    fn new(shared: Arc<Shared>) -> Self {
        let session = shared.session.clone().unwrap_or_else(own_session);
        McpHandler {
            shared,
            session,
            log_level: Arc::new(AtomicU8::new(LOGGING_OFF)),
            approvals: ApprovalQueue::new(),
        }
    }

    /// Answers one approval request of a running call: by asking the client, or per the
    /// fallback when it cannot be asked.
    async fn answer(&self, request: ApprovalRequest, peer: Peer<RoleServer>, can_elicit: bool) {
        let executor = &self.shared.executor;
        let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
        if !can_elicit {
            match self.shared.fallback {
                Fallback::Approve => {
                    executor.respond_approval(session, call, ApprovalDecision::Approve);
                }
                Fallback::Deny => {
                    executor.deny_approval(session, call, cannot_ask(&request));
                }
            }
            return;
        }
        let answer = peer.create_elicitation(approval_form(&request)).await;
        match answer.map(|result| approval_decision(&result)) {
            Ok(true) => {
                executor.respond_approval(session, call, ApprovalDecision::Approve);
            }
            Ok(false) => {
                executor.deny_approval(session, call, denied_by_user(&request));
            }
            Err(e) => {
                tracing::debug!(call, "mcp: elicitation failed: {e}");
                executor.deny_approval(session, call, asking_failed(&request, &e.to_string()));
            }
        }
    }
}

/// The `elicitation/create` request for one approval: a message saying what the call will
/// do (its [`Preview`](toolbox_core::Preview) as plain text, never its arguments as JSON),
/// and a form with one required field, `decision`, either `approve` or `deny`. Both MCP
/// transports send this same form.
pub fn approval_form(request: &ApprovalRequest) -> ElicitRequestParams {
    let preview = request.preview.to_text(false);
    let preview = match preview.char_indices().nth(MAX_FORM_PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}\n… (the rest is cut here)", &preview[..cut]),
        None => preview,
    };
    let message = format!(
        "toolbox asks: allow {} (risk {})?\n\n{preview}\n\nApprove this call?",
        request.tool, request.risk
    );
    let decision = EnumSchema::builder(vec!["approve".into(), "deny".into()])
        .enum_titles(vec!["Approve: run it".into(), "Deny: do not run it".into()])
        .map(|schema| schema.title("Decision").build())
        .unwrap_or_else(|_| EnumSchema::builder(vec!["approve".into(), "deny".into()]).build());
    let requested_schema = ElicitationSchema::builder()
        .required_property(DECISION_FIELD, PrimitiveSchemaDefinition::Enum(decision))
        .description(format!("Approve or deny the call of {}", request.tool))
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

/// Whether the client's answer approves: `accept` with `decision` `approve` (or `true`).
/// Anything else, `decline` and `cancel` included, denies.
pub fn approval_decision(result: &ElicitResult) -> bool {
    if result.action != ElicitationAction::Accept {
        return false;
    }
    match result.content.as_ref().and_then(|c| c.get(DECISION_FIELD)) {
        Some(Value::String(s)) => s == "approve",
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

/// [`approval_form`] as the JSON `params` of an `elicitation/create` request, for a
/// transport that writes its own JSON-RPC (`toolbox mcp` on stdio).
pub fn approval_form_json(request: &ApprovalRequest) -> Value {
    serde_json::to_value(approval_form(request)).unwrap_or(Value::Null)
}

/// [`approval_decision`] of an `elicitation/create` result as JSON; a result that is no
/// elicitation result denies.
pub fn approval_decision_json(result: &Value) -> bool {
    serde_json::from_value::<ElicitResult>(result.clone()).is_ok_and(|r| approval_decision(&r))
}

/// Whether an `initialize` request's client capabilities let the server ask by a form
/// (`elicitation: {}` in 2025-06-18, or with `form` in later revisions).
pub fn can_elicit_form(capabilities: &Value) -> bool {
    match capabilities.get("elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// The result of a call refused because the client cannot be asked and the server was
/// started with `--approve no` (the default), on either MCP transport.
pub fn cannot_ask(request: &ApprovalRequest) -> String {
    format!(
        "tool {} needs approval (permission mode auto, risk {}) but this MCP client cannot be \
         asked: it did not declare the elicitation capability at initialize, and the server \
         was started with --approve no (the default), so the call was refused without asking. \
         To allow such calls, use a client that supports elicitation, restart the server with \
         --approve yes (risky calls then run without asking; the client should confirm them \
         with its user) or --mode full; to stop offering them, use --mode read_only.",
        request.tool, request.risk
    )
}

/// The result of a call the client's user denied.
pub fn denied_by_user(request: &ApprovalRequest) -> String {
    format!("the MCP client's user denied tool {}", request.tool)
}

/// The result of a call whose approval could not be asked for.
pub fn asking_failed(request: &ApprovalRequest, why: &str) -> String {
    format!(
        "tool {} needs approval (permission mode auto, risk {}) and asking the MCP client \
         failed ({why}), so the call was denied; to run such calls without asking, restart \
         the server with --mode full",
        request.tool, request.risk
    )
}

/// Rank of an MCP log level, `debug` lowest.
#[allow(deprecated)]
fn level_rank(level: &LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// Where one call's streamed output goes.
#[derive(Clone)]
enum OutputRoute {
    Progress(ProgressToken),
    Log,
}

/// The sending half of one call's output: a queue capped in bytes.
struct OutputQueue {
    tx: mpsc::UnboundedSender<String>,
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl OutputQueue {
    fn push(&self, text: String) {
        if text.is_empty() {
            return;
        }
        let len = text.len();
        let fits = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued + len <= MAX_QUEUED_OUTPUT_BYTES).then_some(queued + len)
            })
            .is_ok();
        if !fits || self.tx.send(text).is_err() {
            if fits {
                self.queued.fetch_sub(len, Ordering::AcqRel);
            }
            self.dropped.fetch_add(len, Ordering::Relaxed);
        }
    }
}

/// One tool output chunk as an `info` log message.
#[allow(deprecated)]
async fn send_log(
    peer: &Peer<RoleServer>,
    tool: String,
    text: String,
) -> Result<(), rmcp::ServiceError> {
    let params = LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::String(text))
        .with_logger(tool);
    peer.notify_logging_message(params).await
}

/// Sends a call's queued output to the client until `done`, then what is still queued, then
/// a note on what was dropped. Runs as a task of its own, so a client slow to read never
/// stalls the call.
async fn forward_output(
    peer: Peer<RoleServer>,
    route: OutputRoute,
    tool: String,
    mut rx: mpsc::UnboundedReceiver<String>,
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    done: CancellationToken,
) {
    let mut progress = 0u64;
    let send = |text: String, progress: u64| {
        let peer = peer.clone();
        let route = route.clone();
        let tool = tool.clone();
        async move {
            let sent = match route {
                OutputRoute::Progress(token) => {
                    let params =
                        ProgressNotificationParam::new(token, progress as f64).with_message(text);
                    peer.notify_progress(params).await
                }
                OutputRoute::Log => send_log(&peer, tool, text).await,
            };
            if let Err(e) = sent {
                tracing::debug!("mcp: output notification not sent: {e}");
            }
        }
    };
    loop {
        let text = tokio::select! {
            biased;
            text = rx.recv() => match text {
                Some(text) => text,
                None => break,
            },
            _ = done.cancelled() => break,
        };
        queued.fetch_sub(text.len(), Ordering::AcqRel);
        progress += 1;
        send(text, progress).await;
    }
    while let Ok(text) = rx.try_recv() {
        progress += 1;
        send(text, progress).await;
    }
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        progress += 1;
        send(
            format!(
                "[toolbox: {dropped} bytes of output were not streamed because the client did \
                 not read them fast enough; the tool result has the output]"
            ),
            progress,
        )
        .await;
    }
}

impl ServerHandler for McpHandler {
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_logging()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("toolbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.shared.tools.as_ref().clone(),
        ))
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level
            .store(level_rank(&request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let executor = &self.shared.executor;
        let name = request.name.to_string();
        if executor.registry().get(&name).is_none() {
            return Err(ErrorData::invalid_params(
                jsonrpc::unknown_tool(&name),
                None,
            ));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call_id = unguessable_call_id(CALLS.fetch_add(1, Ordering::Relaxed));
        let peer = context.peer.clone();
        let can_elicit = context
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());

        // Output: progress when the call has a token, log messages when the session asked.
        let route = match context.meta.get_progress_token() {
            Some(token) => Some(OutputRoute::Progress(token)),
            None if self.log_level.load(Ordering::Relaxed) <= LEVEL_INFO => Some(OutputRoute::Log),
            None => None,
        };
        let done = CancellationToken::new();
        let (output, forwarder) = match route {
            Some(route) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let queued = Arc::new(AtomicUsize::new(0));
                let dropped = Arc::new(AtomicUsize::new(0));
                let forwarder = tokio::spawn(forward_output(
                    peer.clone(),
                    route,
                    name.clone(),
                    rx,
                    queued.clone(),
                    dropped.clone(),
                    done.clone(),
                ));
                let queue = OutputQueue {
                    tx,
                    queued,
                    dropped,
                };
                (Some(queue), Some(forwarder))
            }
            None => (None, None),
        };

        // The sink runs synchronously inside the executor: approval requests go to this
        // task (so the elicitation rides this request's SSE stream), output to the forwarder.
        let (approvals_tx, mut approvals) = mpsc::unbounded_channel::<ApprovalRequest>();
        let sink = EventSink::new(move |event| match event {
            ToolEvent::ApprovalRequested(request) => {
                let _ = approvals_tx.send(request);
            }
            ToolEvent::Output { text, .. } | ToolEvent::Progress { message: text, .. } => {
                if let Some(output) = &output {
                    output.push(text);
                }
            }
        });
        let call = ToolRequest::new(call_id, name, arguments)
            .session(self.session.to_string())
            .events(sink)
            .approval_ticket(self.approvals.ticket());
        let run = executor.run_cancellable(call, call_cancellation(&context));
        tokio::pin!(run);
        let mut asking = FuturesUnordered::new();
        let info = loop {
            tokio::select! {
                info = &mut run => break info,
                Some(request) = approvals.recv() => {
                    asking.push(self.answer(request, peer.clone(), can_elicit));
                }
                Some(()) = asking.next(), if !asking.is_empty() => {}
            }
        };
        // Every output notification goes before the result: MCP allows none after it.
        done.cancel();
        if let Some(forwarder) = forwarder {
            if let Err(e) = forwarder.await {
                tracing::error!("mcp: the output forwarder failed: {e}");
            }
        }
        let content = vec![ContentBlock::text(info.result)];
        let result = if info.status == CallStatus::Done {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        };
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolbox_core::ToolRisk;

    fn request(arguments: Value) -> ApprovalRequest {
        ApprovalRequest {
            session_id: SessionId::parse("mcp").unwrap(),
            call_id: "c1".into(),
            tool: "file_manager__write".into(),
            preview: toolbox_core::Preview::arguments("file_manager__write", &arguments),
            arguments,
            risk: ToolRisk::FileWrite,
        }
    }

    #[test]
    fn the_form_names_tool_risk_and_arguments_and_asks_one_choice() {
        let form = serde_json::to_value(approval_form(&request(json!({"path": "a.txt"})))).unwrap();
        assert_eq!(form["mode"], "form");
        let message = form["message"].as_str().unwrap();
        assert!(message.contains("file_manager__write"), "{message}");
        assert!(message.contains("a.txt"), "{message}");
        assert!(
            message.contains(&ToolRisk::FileWrite.to_string()),
            "{message}"
        );
        let schema = &form["requestedSchema"];
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!([DECISION_FIELD]));
        let values: Vec<Value> = schema["properties"][DECISION_FIELD]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["const"].clone())
            .collect();
        assert_eq!(values, vec![json!("approve"), json!("deny")]);
    }

    #[test]
    fn long_previews_are_cut_on_a_character_boundary() {
        let long = "é\n".repeat(20_000);
        let mut asked = request(json!({}));
        asked.preview = toolbox_core::Preview::new("Write")
            .text(&long)
            .text(&long)
            .text(&long);
        let mut huge = String::new();
        for _ in 0..50 {
            huge.push_str(&"é".repeat(300));
            huge.push('\n');
        }
        for _ in 0..20 {
            asked.preview = asked.preview.clone().text(&huge);
        }
        let form = approval_form(&asked);
        let ElicitRequestParams::FormElicitationParams { message, .. } = form else {
            panic!("not a form");
        };
        assert!(message.contains("the rest is cut here"), "{message}");
        assert!(message.chars().count() < MAX_FORM_PREVIEW_CHARS + 500);
        // The arguments are never shown as JSON.
        let plain = approval_form(&request(json!({"path": "a.txt", "content": "x\ny"})));
        let ElicitRequestParams::FormElicitationParams { message, .. } = plain else {
            panic!("not a form");
        };
        assert!(message.contains("path: a.txt"), "{message}");
        assert!(
            !message.contains("\\n") && !message.contains('{'),
            "{message}"
        );
    }

    #[test]
    fn form_elicitation_is_read_from_the_capabilities() {
        assert!(can_elicit_form(&json!({"elicitation": {}})));
        assert!(can_elicit_form(
            &json!({"elicitation": {"form": {}, "url": {}}})
        ));
        assert!(!can_elicit_form(&json!({"elicitation": {"url": {}}})));
        assert!(!can_elicit_form(&json!({"sampling": {}})));
        assert!(!can_elicit_form(&Value::Null));
    }

    #[test]
    fn only_an_accepted_approve_approves() {
        let answer = |action, content: Option<Value>| {
            let mut result = ElicitResult::new(action);
            result.content = content;
            approval_decision(&result)
        };
        assert!(answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "approve"}))
        ));
        assert!(answer(
            ElicitationAction::Accept,
            Some(json!({"decision": true}))
        ));
        assert!(!answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "deny"}))
        ));
        assert!(!answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "APPROVE"}))
        ));
        assert!(!answer(ElicitationAction::Accept, None));
        assert!(!answer(
            ElicitationAction::Decline,
            Some(json!({"decision": "approve"}))
        ));
        assert!(!answer(ElicitationAction::Cancel, None));
    }
}
