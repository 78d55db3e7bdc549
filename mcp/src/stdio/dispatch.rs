//! Dispatch: cheap methods are answered inline, each `tools/call` runs as a task of its own.
//! Where that task starts is the reader's to say, with the [`CallStarter`] it passes to
//! [`Dispatcher::handle`]: the serving task spawns it on the runtime, the idle thread collects
//! it and starts it in place once the input is unlocked (see `serve`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use toolbox_executor::{CallStatus, ToolRequest};
use toolbox_host::CancellationToken;

use super::outbox::Outbox;
use super::McpServer;
use crate::approval;
use crate::jsonrpc::{self, Inbound, Parsed, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND};
use crate::{lock, INSTRUCTIONS, PROTOCOL_VERSIONS, SERVER_NAME, SERVER_VERSION};

/// A `tools/call` still running, by the JSON text of its id (so 7 and "7" differ, as in
/// JSON-RPC). `serial` tells a finished call from a later one that reused its id.
struct InFlight {
    serial: u64,
    cancel: CancellationToken,
}

type InFlightCalls = Arc<Mutex<HashMap<String, InFlight>>>;

/// A `tools/call` to run: the executor's call, then its reply and its trajectory line.
pub(super) type Call = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Where the calls a dispatch starts go, chosen by the reader that dispatches.
pub(super) enum CallStarter<'a> {
    /// Each call a task of the runtime (the serving task).
    Spawn,
    /// Collected here, to be started in place by the idle thread once it has unlocked the
    /// input (see `serve`).
    InPlace(&'a mut Vec<Call>),
}

impl CallStarter<'_> {
    fn start(&mut self, call: Call) {
        match self {
            CallStarter::Spawn => toolbox_host::handoff::spawn(call),
            CallStarter::InPlace(calls) => calls.push(call),
        }
    }
}

pub(super) struct Dispatcher {
    server: McpServer,
    outbox: Outbox,
    in_flight: InFlightCalls,
    pub(super) running: Arc<RunningCalls>,
    /// The connection's approval questions: one at a time, in the order the calls came.
    approvals: toolbox_executor::ApprovalQueue,
}

impl Dispatcher {
    /// Where a provider's idle thread takes up work (see `serve::serve_polled`): the first
    /// such slot of the executor's providers, if any.
    pub(super) fn idle_slot(&self) -> Option<Arc<toolbox_host::handoff::IdleSlot>> {
        self.server
            .executor
            .registry()
            .idle_slots()
            .into_iter()
            .next()
    }

    pub(super) fn new(server: McpServer, outbox: Outbox) -> Dispatcher {
        Dispatcher {
            server,
            outbox,
            in_flight: Arc::default(),
            running: Arc::default(),
            approvals: toolbox_executor::ApprovalQueue::new(),
        }
    }

    /// Answers or starts what `parsed` asks; a `tools/call` goes to `starter`.
    pub(super) fn handle(&mut self, parsed: Parsed, starter: &mut CallStarter<'_>) {
        match parsed {
            Parsed::Message(Inbound::Request { id, method, params }) => {
                self.request(id, &method, params, starter)
            }
            Parsed::Message(Inbound::Notification { method, params }) => {
                self.notification(&method, params)
            }
            Parsed::Reject { id, code, message } => {
                tracing::debug!("mcp: rejected a message: {message}");
                self.outbox.error(&id, code, &message);
            }
            Parsed::Response { id, result, error } => {
                self.server
                    .events
                    .answered(&id, result.as_ref(), error.as_ref())
            }
            Parsed::Ignore => {}
        }
    }

    fn request(&mut self, id: Value, method: &str, params: Value, starter: &mut CallStarter<'_>) {
        let key = id.to_string();
        if lock(&self.in_flight).contains_key(&key) {
            // The client could not tell two replies with one id apart; the first call keeps
            // running and still gets its own reply.
            return self.outbox.error(
                &id,
                INVALID_REQUEST,
                &format!("Invalid Request: request id {key} is already in flight"),
            );
        }
        if let Err(message) = jsonrpc::check_params(method, &params) {
            return self.outbox.error(&id, INVALID_PARAMS, &message);
        }
        match method {
            "initialize" => {
                let capabilities = params.get("capabilities").unwrap_or(&Value::Null);
                let can_elicit = approval::can_elicit_form(capabilities);
                self.server
                    .events
                    .can_elicit
                    .store(can_elicit, Ordering::SeqCst);
                self.outbox.result(&id, &initialize_result(&params))
            }
            "ping" => self.outbox.result(&id, "{}"),
            "tools/list" => self.outbox.result(&id, &self.server.tools_list),
            "tools/call" => self.start_call(id, key, params, starter),
            "logging/setLevel" => match jsonrpc::log_level(&params) {
                Ok(level) => {
                    self.server.events.log_level.set(level);
                    self.outbox.result(&id, "{}")
                }
                Err(message) => self.outbox.error(&id, INVALID_PARAMS, &message),
            },
            _ => {
                // A client probing for what this server offers is normal, not worth a warning.
                tracing::debug!("mcp: method not supported: {method}");
                self.outbox
                    .error(&id, METHOD_NOT_FOUND, &crate::method_not_found(method))
            }
        }
    }

    fn notification(&mut self, method: &str, params: Value) {
        // notifications/initialized and anything else carry nothing this server acts on.
        if method != "notifications/cancelled" {
            return;
        }
        let Some(request_id) = params.get("requestId") else {
            return;
        };
        // Forget the id at once: MCP says a cancelled request gets no reply, so the client may
        // reuse its id before the tool has finished stopping.
        if let Some(call) = lock(&self.in_flight).remove(&request_id.to_string()) {
            call.cancel.cancel();
        }
    }

    fn start_call(&mut self, id: Value, key: String, params: Value, starter: &mut CallStarter<'_>) {
        let progress_token = params
            .get("_meta")
            .and_then(|meta| meta.get("progressToken"))
            .filter(|token| token.is_string() || token.is_i64() || token.is_u64())
            .cloned();
        let trace = crate::trace_parent(params.get("_meta").and_then(Value::as_object), None);
        let (name, arguments) = match jsonrpc::call_params(params) {
            Ok(call) => call,
            Err(message) => return self.outbox.error(&id, INVALID_PARAMS, &message),
        };
        if let Err(message) = crate::check_tool(&self.server.executor, &name) {
            return self.outbox.error(&id, INVALID_PARAMS, &message);
        }
        let serial = self.server.calls.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        lock(&self.in_flight).insert(
            key.clone(),
            InFlight {
                serial,
                cancel: cancel.clone(),
            },
        );
        let call_id = format!("mcp-{serial}");
        self.server.events.open_route(&call_id, progress_token);
        let request = ToolRequest::new(call_id.clone(), name.clone(), arguments)
            .session(self.server.session.to_string())
            .approval_ticket(self.approvals.ticket())
            .trace_parent(trace);
        let executor = self.server.executor.clone();
        let events = self.server.events.clone();
        let outbox = self.outbox.clone();
        let in_flight = self.in_flight.clone();
        let running = RunningCalls::start(&self.running);
        // Continued in place by the thread that finishes the work (embedded Python): the
        // trajectory line and the reply are written from there, without waking a worker.
        let call: Call = Box::pin(async move {
            let _running = running;
            // Recorded in the trajectory once the reply is out (or when this returns early).
            let finished = executor.run_unrecorded(request, cancel.clone()).await;
            let info = finished.info();
            // Before the reply: MCP allows no progress notification after it.
            events.close_route(&call_id);
            events.forget_questions(&call_id);
            // Leave the in-flight set before replying: the client may reuse the id as soon as
            // it has read the reply.
            {
                let mut calls = lock(&in_flight);
                if calls.get(&key).is_some_and(|call| call.serial == serial) {
                    calls.remove(&key);
                }
            }
            if cancel.is_cancelled() {
                return;
            }
            outbox.tool_result(
                &id,
                &crate::reply_text(&executor, &name, &info.result),
                info.structured.as_ref(),
                info.status != CallStatus::Done,
            );
            finished.record();
        });
        starter.start(call);
    }
}

/// The calls of one connection still running: at the end of input, they finish and answer
/// before the server returns.
#[derive(Default)]
pub(super) struct RunningCalls {
    count: Mutex<usize>,
    none_left: tokio::sync::Notify,
}

/// One running call; counted until dropped (a call that panics is dropped too).
struct Running(Arc<RunningCalls>);

impl RunningCalls {
    fn start(calls: &Arc<RunningCalls>) -> Running {
        *lock(&calls.count) += 1;
        Running(calls.clone())
    }

    pub(super) async fn all_finished(&self) {
        loop {
            let notified = self.none_left.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if *lock(&self.count) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut count = lock(&self.0.count);
        *count -= 1;
        if *count == 0 {
            self.0.none_left.notify_waiters();
        }
    }
}

/// The serialised `initialize` result for params [`jsonrpc::check_params`] accepted: the
/// protocol version asked for when this server speaks it, else its newest.
fn initialize_result(params: &Value) -> String {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| Some(**v) == requested)
        .unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false }, "logging": {} },
        "serverInfo": { "name": SERVER_NAME, "version": SERVER_VERSION },
        "instructions": INSTRUCTIONS,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_version_is_echoed_when_supported() {
        let version = |requested: &str| {
            let result = initialize_result(&json!({ "protocolVersion": requested }));
            serde_json::from_str::<Value>(&result).unwrap()["protocolVersion"].clone()
        };
        assert_eq!(version("2025-06-18"), "2025-06-18");
        assert_eq!(version("2024-11-05"), "2024-11-05");
        assert_eq!(version("1999-01-01"), PROTOCOL_VERSIONS[0]);
    }
}
