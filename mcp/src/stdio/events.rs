//! The executor's event sink: a call's streamed output to the client (routed as
//! [`crate::output`] says), and its approval requests to the client by elicitation, or to
//! the [`Fallback`] when it cannot be asked. Runs on whatever thread the tool emits from, so
//! it only takes short locks and queues; nothing here can block a call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};
use toolbox_executor::ToolExecutor;
use toolbox_host::{ApprovalRequest, ToolEvent};

use super::outbox::Outbox;
use crate::approval::{self, Answer};
use crate::output::{self, LogLevel, Route};
use crate::{lock, Fallback};

/// Streams a call's output to its client and answers approval requests.
pub(super) struct Events {
    fallback: Fallback,
    /// The client declared form elicitation at `initialize`: approvals are asked of it.
    pub(super) can_elicit: AtomicBool,
    /// Approval questions sent to the client and not answered yet, by the JSON text of the
    /// `elicitation/create` request's id.
    asking: Mutex<HashMap<String, ApprovalRequest>>,
    next_question: AtomicU64,
    /// Set right after the executor is built (the executor holds this sink).
    pub(super) executor: OnceLock<ToolExecutor>,
    /// Set while serving.
    pub(super) outbox: Mutex<Option<Outbox>>,
    /// The calls running now, by the executor's call id.
    calls: Mutex<HashMap<String, CallOutput>>,
    /// The level the client asked for with `logging/setLevel`.
    pub(super) log_level: LogLevel,
}

/// Where one call's output goes.
#[derive(Default)]
struct CallOutput {
    /// The client's `_meta.progressToken` for this call.
    progress_token: Option<Value>,
    /// The last `progress` sent; MCP wants it to grow with every notification.
    progress: u64,
    dropped_bytes: u64,
}

impl Events {
    pub(super) fn new(fallback: Fallback) -> Events {
        Events {
            fallback,
            can_elicit: AtomicBool::new(false),
            asking: Mutex::default(),
            next_question: AtomicU64::new(1),
            executor: OnceLock::new(),
            outbox: Mutex::new(None),
            calls: Mutex::default(),
            log_level: LogLevel::default(),
        }
    }

    pub(super) fn handle(&self, event: ToolEvent) {
        match event {
            ToolEvent::Output {
                call_id,
                tool,
                text,
                ..
            } => self.forward(&call_id, &tool, &text, None, None),
            ToolEvent::Progress {
                call_id,
                tool,
                message,
                done,
                total,
                ..
            } => self.forward(&call_id, &tool, &message, done, total),
            ToolEvent::ApprovalRequested(request) => self.answer(&request),
            ToolEvent::ReviewAnswered { .. } | ToolEvent::PlanUpdated { .. } => {}
        }
    }

    /// Asks the client (an `elicitation/create` request; its answer comes in as a response
    /// line) or, when it cannot be asked, answers at once per `--approve`: the executor
    /// registered the request before emitting it.
    fn answer(&self, request: &ApprovalRequest) {
        let Some(executor) = self.executor.get() else {
            return;
        };
        if self.can_elicit.load(Ordering::SeqCst) {
            let outbox = lock(&self.outbox).clone();
            if let Some(outbox) = outbox {
                let id = json!(format!(
                    "toolbox-approval-{}",
                    self.next_question.fetch_add(1, Ordering::Relaxed)
                ));
                lock(&self.asking).insert(id.to_string(), request.clone());
                let params = approval::approval_form_json(request);
                outbox.send(
                    json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params})
                        .to_string(),
                );
                return;
            }
        }
        approval::settle_unasked(executor, request, self.fallback);
    }

    /// The client's answer to an approval question: approves only an accepted `approve`.
    pub(super) fn answered(&self, id: &Value, result: Option<&Value>, error: Option<&Value>) {
        let Some(request) = lock(&self.asking).remove(&id.to_string()) else {
            return;
        };
        let Some(executor) = self.executor.get() else {
            return;
        };
        match (result, error) {
            (Some(result), _) => {
                approval::settle(executor, &request, approval::answer_of_json(result));
            }
            (None, error) => {
                let why = error
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the client answered with an error");
                let why: String = why.chars().take(300).collect();
                approval::settle(executor, &request, Answer::Failed(&why));
            }
        }
    }

    /// Forgets the questions of a call that stopped waiting (timed out, cancelled, done).
    pub(super) fn forget_questions(&self, call_id: &str) {
        lock(&self.asking).retain(|_, request| request.call_id != call_id);
    }

    /// Sends a chunk of output, or a progress report when `done` is set (see
    /// [`output::next_progress`]).
    fn forward(
        &self,
        call_id: &str,
        tool: &str,
        text: &str,
        done: Option<u64>,
        total: Option<u64>,
    ) {
        if text.is_empty() && done.is_none() {
            return;
        }
        let mut calls = lock(&self.calls);
        let Some(call) = calls.get_mut(call_id) else {
            return;
        };
        let outbox = lock(&self.outbox);
        let Some(outbox) = outbox.as_ref() else {
            return;
        };
        let sent = match output::route(call.progress_token.as_ref(), &self.log_level) {
            Some(Route::Progress(token)) => {
                let (progress, total) = output::next_progress(call.progress, done, total);
                call.progress = progress;
                let mut params =
                    json!({ "progressToken": token, "progress": progress, "message": text });
                if let Some(total) = total {
                    params["total"] = json!(total);
                }
                outbox.notify("notifications/progress", params)
            }
            Some(Route::Log) => outbox.notify(
                "notifications/message",
                json!({ "level": "info", "logger": tool, "data": text }),
            ),
            None => return,
        };
        if !sent {
            call.dropped_bytes += text.len() as u64;
        }
    }

    pub(super) fn open_route(&self, call_id: &str, progress_token: Option<Value>) {
        lock(&self.calls).insert(
            call_id.to_string(),
            CallOutput {
                progress_token,
                ..CallOutput::default()
            },
        );
    }

    /// Forgets a finished call; says once, if it can, how much of its output was not sent.
    pub(super) fn close_route(&self, call_id: &str) {
        let Some(call) = lock(&self.calls).remove(call_id) else {
            return;
        };
        if call.dropped_bytes == 0 {
            return;
        }
        tracing::debug!(
            call_id,
            dropped_bytes = call.dropped_bytes,
            "mcp: output notifications dropped: the client did not read them fast enough"
        );
        if let (Some(token), Some(outbox)) = (call.progress_token, lock(&self.outbox).as_ref()) {
            let message = output::dropped_note(call.dropped_bytes);
            outbox.notify(
                "notifications/progress",
                json!({ "progressToken": token, "progress": call.progress + 1, "message": message }),
            );
        }
    }
}
