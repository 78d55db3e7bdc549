//! The [`ServerHandler`] of `/mcp` over the executor: one per MCP session.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::stream::{FuturesUnordered, StreamExt};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
// MCP logging is deprecated by SEP-2577 (rmcp marks it so); `toolbox mcp` on stdio offers it,
// and so does this endpoint, until clients stop asking for it.
#[allow(deprecated)]
use rmcp::model::{LoggingLevel, SetLevelRequestParams};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, Peer, ServerHandler};
use serde_json::Value;
use tokio::sync::mpsc;
use toolbox_core::SessionId;
use toolbox_executor::{ApprovalQueue, CallStatus, ToolExecutor, ToolRequest};
use toolbox_host::{ApprovalRequest, CancellationToken, EventSink, ToolEvent};

use super::output::{Chunk, OutputQueue};
use super::{call_cancellation, McpHttpOptions};
use crate::approval::{self, Answer};
use crate::output::{self, LogLevel};
use crate::{Fallback, INSTRUCTIONS, SERVER_NAME, SERVER_VERSION};

/// What every session of one router shares.
pub(super) struct Shared {
    executor: ToolExecutor,
    session: Option<SessionId>,
    fallback: Fallback,
    /// Rendered once: the visible tools never change.
    tools: Arc<Vec<Tool>>,
    after_call: Option<super::AfterCall>,
}

impl Shared {
    pub(super) fn new(executor: ToolExecutor, options: &McpHttpOptions) -> Self {
        let tools = listed_tools(&executor);
        Shared {
            executor,
            session: options.session.clone(),
            fallback: options.fallback,
            tools: Arc::new(tools),
            after_call: options.after_call.clone(),
        }
    }
}

/// The tools `toolbox mcp` lists ([`crate::listed_tools`]), as rmcp's tools.
fn listed_tools(executor: &ToolExecutor) -> Vec<Tool> {
    crate::listed_tools(executor)
        .into_iter()
        .filter_map(|rendered| {
            let name = rendered.get("name").and_then(Value::as_str).unwrap_or("?");
            let name = name.to_string();
            match serde_json::from_value::<Tool>(rendered) {
                Ok(tool) => Some(tool),
                Err(e) => {
                    tracing::error!(tool = %name, "mcp: tool not listed, its MCP rendering does not parse: {e}");
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

/// The header a client may name its toolbox session with (as `?session=` on the URL).
pub const SESSION_HEADER: &str = "toolbox-session";

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

/// The rank in [`output::LOG_LEVELS`] of an rmcp log level, by its MCP name.
#[allow(deprecated)]
fn level_rank(level: &LoggingLevel) -> u8 {
    let name = serde_json::to_value(level).ok();
    name.as_ref()
        .and_then(Value::as_str)
        .and_then(output::log_level_rank)
        // Never taken: every rmcp level has an MCP name (a unit test pins that).
        .unwrap_or(0)
}

/// The handler of one MCP session.
#[derive(Clone)]
pub(super) struct McpHandler {
    shared: Arc<Shared>,
    /// The toolbox session this MCP session's calls run in.
    session: SessionId,
    /// The level this session asked for with `logging/setLevel`.
    log_level: Arc<LogLevel>,
    /// This MCP session's approval questions: one at a time, in the order the calls came.
    approvals: ApprovalQueue,
}

impl McpHandler {
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let session = shared.session.clone().unwrap_or_else(own_session);
        McpHandler {
            shared,
            session,
            log_level: Arc::default(),
            approvals: ApprovalQueue::new(),
        }
    }

    /// The toolbox session a call runs in: the one its HTTP request names (`?session=NAME`
    /// on the `/mcp` URL, or a `Toolbox-Session` header), else this MCP session's own. A
    /// client that opens an MCP session per call (LangChain's default) keeps its files and
    /// its Python state by naming one. When the server runs every call in one session
    /// (`--mcp-session`, session server mode), naming another is refused.
    fn session_of(&self, context: &RequestContext<RoleServer>) -> Result<SessionId, String> {
        let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else {
            return Ok(self.session.clone());
        };
        let from_query = parts.uri.query().and_then(|q| {
            q.split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == "session")
                .map(|(_, value)| value.to_string())
        });
        let from_header = parts.headers.get(SESSION_HEADER).map(|v| {
            v.to_str()
                .map(str::to_string)
                .unwrap_or_else(|_| "\u{fffd}".into())
        });
        let (named, how) = match (from_query, from_header) {
            (Some(q), Some(h)) if q != h => {
                return Err(format!(
                    "the request names two sessions: ?session={q:?} and {SESSION_HEADER}: {h:?}"
                ))
            }
            (Some(q), _) => (q, "?session="),
            (None, Some(h)) => (h, SESSION_HEADER),
            (None, None) => return Ok(self.session.clone()),
        };
        let named = SessionId::parse(&named).map_err(|e| format!("{how} {named:?}: {e}"))?;
        match &self.shared.session {
            Some(fixed) if *fixed != named => Err(format!(
                "this server runs every /mcp call in session {fixed} (toolbox serve \
                 --mcp-session, or a session server's own session); {how} names {named}"
            )),
            _ => Ok(named),
        }
    }

    /// Answers one approval request of a running call: by asking the client, or per the
    /// fallback when it cannot be asked.
    async fn answer(&self, request: ApprovalRequest, peer: Peer<RoleServer>, can_elicit: bool) {
        let executor = &self.shared.executor;
        if !can_elicit {
            approval::settle_unasked(executor, &request, self.shared.fallback);
            return;
        }
        let answer = peer
            .create_elicitation(approval::approval_form(&request))
            .await;
        match answer.map(|result| approval::answer_of(&result)) {
            Ok(answer) => approval::settle(executor, &request, answer),
            Err(e) => {
                tracing::debug!(
                    call = request.call_id.as_str(),
                    "mcp: elicitation failed: {e}"
                );
                approval::settle(executor, &request, Answer::Failed(&e.to_string()));
            }
        }
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
            .with_server_info(Implementation::new(SERVER_NAME, SERVER_VERSION))
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
        self.log_level.set(level_rank(&request.level));
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let executor = &self.shared.executor;
        let name = request.name.to_string();
        if let Err(message) = crate::check_tool(executor, &name) {
            return Err(ErrorData::invalid_params(message, None));
        }
        let session = self
            .session_of(&context)
            .map_err(|message| ErrorData::invalid_params(message, None))?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call_id = unguessable_call_id(CALLS.fetch_add(1, Ordering::Relaxed));
        let peer = context.peer.clone();
        let can_elicit = context
            .client_capabilities()
            .is_some_and(|caps| caps.elicitation.is_some());

        // Output: progress when the call has a token, log messages when the session asked.
        let done = CancellationToken::new();
        let (output, forwarder) =
            match output::route(context.meta.get_progress_token(), &self.log_level) {
                Some(route) => {
                    let (queue, forwarder) =
                        OutputQueue::start(peer.clone(), route, name.clone(), done.clone());
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
            ToolEvent::Output { text, .. } => {
                if let Some(output) = &output {
                    output.push(Chunk {
                        text,
                        done: None,
                        total: None,
                    });
                }
            }
            ToolEvent::Progress {
                message,
                done,
                total,
                ..
            } => {
                if let Some(output) = &output {
                    output.push(Chunk {
                        text: message,
                        done,
                        total,
                    });
                }
            }
            ToolEvent::ReviewAnswered { .. } | ToolEvent::PlanUpdated { .. } => {}
        });
        let trace = crate::trace_parent(
            Some(&context.meta),
            context
                .extensions
                .get::<axum::http::request::Parts>()
                .map(|parts| &parts.headers),
        );
        let call = ToolRequest::new(call_id, name.clone(), arguments)
            .session(session.to_string())
            .events(sink)
            .approval_ticket(self.approvals.ticket())
            .trace_parent(trace);
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
        if let Some(after) = &self.shared.after_call {
            (after.0)();
        }
        // Every output notification goes before the result: MCP allows none after it.
        done.cancel();
        if let Some(forwarder) = forwarder {
            if let Err(e) = forwarder.await {
                tracing::error!("mcp: the output forwarder failed: {e}");
            }
        }
        let content = vec![ContentBlock::text(crate::reply_text(
            executor,
            &name,
            &info.result,
        ))];
        let mut result = if info.status == CallStatus::Done {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        };
        // Beside the text, never instead of it: a client without outputSchema support reads
        // the text as before.
        result.structured_content = info.structured;
        Ok(result.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(deprecated)]
    fn every_rmcp_log_level_has_its_mcp_rank() {
        let levels = [
            LoggingLevel::Debug,
            LoggingLevel::Info,
            LoggingLevel::Notice,
            LoggingLevel::Warning,
            LoggingLevel::Error,
            LoggingLevel::Critical,
            LoggingLevel::Alert,
            LoggingLevel::Emergency,
        ];
        let ranks: Vec<u8> = levels.iter().map(level_rank).collect();
        assert_eq!(ranks, (0..8).collect::<Vec<u8>>());
        assert_eq!(levels.len(), output::LOG_LEVELS.len());
    }

    #[test]
    fn rmcp_negotiates_the_protocol_versions_stdio_speaks() {
        let mut http: Vec<&str> = ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25)
            .iter()
            .map(ProtocolVersion::as_str)
            .collect();
        let mut stdio = crate::PROTOCOL_VERSIONS.to_vec();
        http.sort_unstable();
        stdio.sort_unstable();
        assert_eq!(http, stdio);
    }
}
