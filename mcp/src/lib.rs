//! toolbox-mcp: every visible tool of one executor over the Model Context Protocol, on two
//! transports over one shared core.
//!
//! - [`stdio`]: `toolbox mcp`. A JSON-RPC 2.0 server of our own on the process's stdin and
//!   stdout, one message per line, built for the shortest path from a request line to its
//!   reply line (no thread hand-off on the way; see the module's documentation).
//! - [`http`]: `/mcp` of `toolbox serve`. rmcp's streamable HTTP transport with sessions,
//!   mounted as an axum router, with toolbox's handler over the executor.
//!
//! What a client sees the same way on either transport is decided here, once:
//!
//! - the tools listed ([`listed_tools`]): those the executor's mode shows, without the ones
//!   an agent runtime intercepts (`call_agent`), rendered by `toolbox_executor::schema` in
//!   strict MCP form, annotations included; a name that is no tool is -32602 `unknown tool`;
//! - the JSON-RPC checks a message passes before it reaches a method, with their codes and
//!   sentences ([`jsonrpc`]), the methods served ([`SERVED_METHODS`], [`method_not_found`])
//!   and the protocol versions ([`PROTOCOL_VERSIONS`]);
//! - where a call's streamed output goes ([`output`]): `notifications/progress` for a call
//!   with a progress token, else `notifications/message` once the client asked for `info`
//!   logs, else nowhere; the log levels; the cap on output waiting to be sent and the note on
//!   what was dropped;
//! - approvals in permission mode `auto` ([`approval`]): the `elicitation/create` form, how
//!   its answer is read, what happens when the client cannot be asked ([`Fallback`]), and
//!   the words of every refusal.
//!
//! This crate names no provider and no tool: a program links the providers it serves (the
//! `toolbox` umbrella crate does), and the executor routes to them.

#![deny(missing_docs)]

pub mod approval;
pub mod http;
pub mod jsonrpc;
pub mod output;
pub mod stdio;

pub use approval::Fallback;

use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use toolbox_executor::{SchemaFormat, ToolExecutor};

/// What the server tells a client at `initialize`, on both transports.
pub const INSTRUCTIONS: &str =
    "toolbox tools run inside one workspace folder; paths are relative to it.";

/// The server's name in `serverInfo`.
pub const SERVER_NAME: &str = "toolbox";

/// The server's version in `serverInfo`: toolbox's own.
pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Protocol versions with an `initialize` handshake that both transports speak, newest
/// first. On stdio a client asking for one of them gets it echoed, any other request the
/// first; over HTTP rmcp negotiates among the same versions (a unit test pins that).
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// The requests toolbox's MCP servers answer (on both transports).
pub const SERVED_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
];

/// The message of a -32601 answer: the method named, and what is offered instead.
pub fn method_not_found(method: &str) -> String {
    let shown: String = method.chars().take(100).collect();
    format!(
        "Method not found: toolbox does not offer {shown:?}; it serves tools (tools/list, \
         tools/call), ping and logging/setLevel"
    )
}

/// The tools both transports list, as MCP tool objects: those visible in the executor's
/// permission mode, without the ones an agent runtime intercepts (`call_agent`), in
/// registration order, rendered by [`Registry::render`](toolbox_executor::Registry::render) in [`SchemaFormat::Mcp`], strict, and
/// named in the executor's [`vocabulary`](toolbox_executor::ExecutorConfig::vocabulary).
pub fn listed_tools(executor: &ToolExecutor) -> Vec<Value> {
    executor.registry().render(
        executor.visible_tools().into_iter().map(|t| &t.info),
        SchemaFormat::Mcp
            .strict(true)
            .vocabulary(executor.config().vocabulary),
    )
}

/// `Err` with the -32602 message when `name` is no tool of `executor` (by name or alias):
/// the one `tools/call` failure that is a protocol error rather than a result, as MCP asks.
pub(crate) fn check_tool(executor: &ToolExecutor, name: &str) -> Result<(), String> {
    match executor.registry().get(name) {
        Some(_) => Ok(()),
        None => Err(jsonrpc::unknown_tool(name)),
    }
}

/// A call's text as an MCP client gets it: when the call named the tool otherwise than
/// `tools/list` does (an alias such as `bash` for `shell`), a last line names the listed
/// one. An MCP client looks a result's tool up by the name it called: the Python SDK, not
/// finding an alias, lists the tools again and logs "Tool … not listed by server" on every
/// such call, and cannot check the structured result. The note lets the model switch to
/// the listed name; the call itself ran as asked.
pub(crate) fn reply_text<'a>(
    executor: &ToolExecutor,
    called: &str,
    text: &'a str,
) -> std::borrow::Cow<'a, str> {
    let Some(tool) = executor.registry().get(called) else {
        return text.into();
    };
    let listed = tool.info.name_in(executor.config().vocabulary);
    if listed == called {
        return text.into();
    }
    format!(
        "{text}\n\n(note: this server lists the tool {called} as {listed}; call it {listed} next \
         time)"
    )
    .into()
}

/// The caller's W3C trace context for a call: `traceparent` and `tracestate` in the
/// request's `params._meta` (MCP's convention, SEP-414), else the same HTTP headers. An
/// invalid value is ignored, as the W3C spec asks: the call starts a trace of its own.
pub(crate) fn trace_parent(
    meta: Option<&serde_json::Map<String, Value>>,
    headers: Option<&axum::http::HeaderMap>,
) -> Option<toolbox_core::TraceParent> {
    let from_meta = |key: &str| meta.and_then(|m| m.get(key)).and_then(Value::as_str);
    let from_header = |key: &str| {
        headers
            .and_then(|h| h.get(key))
            .and_then(|v| v.to_str().ok())
    };
    let (parent, state) = match from_meta("traceparent") {
        Some(parent) => (parent, from_meta("tracestate")),
        None => (from_header("traceparent")?, from_header("tracestate")),
    };
    toolbox_core::TraceParent::from_carrier(Some(parent), state)
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
