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
//!   [`crate::listed_tools`], strict MCP form (annotations included);
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
//!   [`McpHttpOptions::fallback`] ([`crate::approval`]). No answer within the executor's approval timeout refuses
//!   the call as usual (the client's form is not withdrawn);
//! - a call's streamed output (a shell command's lines) goes to the client as
//!   `notifications/progress` when the call carried a `progressToken`, else as
//!   `notifications/message` (level `info`) once the client asked for `info` or lower with
//!   `logging/setLevel`, else nowhere ([`crate::output`]). At most
//!   [`MAX_QUEUED_OUTPUT_BYTES`](crate::output::MAX_QUEUED_OUTPUT_BYTES) wait to be sent per
//!   call; beyond that output is dropped (the result has all of it).
//!
//! Protocol revisions: those with an `initialize` handshake (2024-11-05 up to 2025-11-25).
//! The stateless 2026-07-28 revision forbids the server-to-client requests the approval gate
//! needs, so it is not offered; clients fall back to `initialize`.
//!
//! A POST body that is no message rmcp should see gets the JSON-RPC error `toolbox mcp`
//! answers on stdio, from the checks both transports share ([`crate::jsonrpc`]): `400` with -32700
//! or -32600 for a body that is not JSON or no request, `200` with -32601 or -32602 for a
//! request its method refuses, `413` over [`MAX_BODY_BYTES`] (see `body`); everything else
//! about the transport (sessions, `Accept` and `Content-Type` checks, SSE) is rmcp's, with
//! a cap on how many sessions are open ([`sessions`]).
//!
//! Modules: `handler` (the [`rmcp::ServerHandler`]: listing, calls, approvals), `output` (a
//! call's output queue and its forwarder), `body` (the POST body checks), [`sessions`] (the
//! session cap).

mod body;
mod handler;
mod output;
pub mod sessions;

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::StreamExt;
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, SessionConfig};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use toolbox_core::SessionId;
use toolbox_executor::ToolExecutor;
use toolbox_host::CancellationToken;

pub use body::MAX_BODY_BYTES;
use handler::{McpHandler, Shared};
use sessions::{room_for_new_sessions, BoundedSessions};
pub use sessions::{EVICTABLE_AFTER, MAX_MCP_SESSIONS};

use crate::Fallback;

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
    /// Called after every `tools/call` has finished, whatever its outcome (`toolbox serve`
    /// in session server mode asks for a sync of the session's state then, as after an HTTP
    /// call).
    pub after_call: Option<AfterCall>,
}

/// What [`McpHttpOptions::after_call`] runs.
#[derive(Clone)]
pub struct AfterCall(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for AfterCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterCall(..)")
    }
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
            after_call: None,
        }
    }
}

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
        .layer(axum::middleware::from_fn(body::check_post_body))
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
