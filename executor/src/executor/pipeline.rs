//! The pipeline one call goes through: [`ToolExecutor::run`] resolves the name, gates the
//! call (permissions, the providers' call gates, an approval), runs the provider under its
//! timeout, cancellation and `catch_unwind`, normalises the outcome, spools a large result
//! and builds the [`ToolCallInfo`] the trajectory records.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::{anyhow, Result};
use futures_util::FutureExt;
use serde_json::Value;
use toolbox_core::{SessionId, ToolOutput, ToolRisk};
use toolbox_host::telemetry::{semconv, GenAiSpan, Operation};
use toolbox_host::{CallPolicy, CancellationToken, GateCall, ToolContext};
use tracing::Instrument;

use super::outcome::refused_session;
use super::questions::{ReviewWait, WaitClock};
use super::{shorten, CallStatus, ErrorKind, Finished, ToolCallInfo, ToolExecutor, ToolRequest};
use crate::config::Decision;
use crate::registry::RegisteredTool;
use crate::spool::{self, SpoolOutcome};

impl ToolExecutor {
    /// Runs one call to completion. Never fails: every outcome is a [`ToolCallInfo`].
    ///
    /// **Architecture Invariant:** every outcome is a `ToolCallInfo` — success, a tool's
    /// error, bad arguments, an unknown tool, a denial, a timeout, a cancellation, a panic in
    /// a provider. Nothing here returns `Result`; the model always gets
    /// `{"status": …, "result": …}`.
    pub async fn run(&self, request: ToolRequest) -> ToolCallInfo {
        self.run_cancellable(request, CancellationToken::new())
            .await
    }

    /// Like [`run`](Self::run); cancelling `cancel` stops the call with status `error`.
    /// The call's trajectory line is written before this returns.
    pub async fn run_cancellable(
        &self,
        request: ToolRequest,
        cancel: CancellationToken,
    ) -> ToolCallInfo {
        self.run_unrecorded(request, cancel).await.record()
    }

    /// Like [`run_cancellable`](Self::run_cancellable), but the trajectory line is written
    /// when the caller says so ([`Finished::record`]) or drops the [`Finished`]: a server
    /// sends its reply first, and the client does not wait for the disk. The price: if the
    /// process dies between the reply and the record (microseconds later, on the same
    /// thread), that one call is missing from the trajectory.
    pub async fn run_unrecorded(
        &self,
        mut request: ToolRequest,
        cancel: CancellationToken,
    ) -> Finished {
        let started = Instant::now();
        // Taken out, so that a call refused before the gate lets the calls after it go on.
        let ticket = request.approval_ticket.take();
        let started_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        // The id names folders: parse it before anything else, and on failure write nothing.
        let session = match &request.session_id {
            None => SessionId::default_session(),
            Some(raw) => match SessionId::parse(raw) {
                Ok(sid) => sid,
                Err(e) => {
                    // Nothing is recorded: there is no session to record it in.
                    return Finished {
                        info: Some(refused_session(request, e, started_at, started)),
                        session: None,
                        executor: self.clone(),
                    };
                }
            },
        };
        let session_id = session.to_string();
        tracing::debug!(target: "toolbox", tool_id = %request.id, tool_name = %request.name, session = %session_id, "tool execution started");
        // The call's `execute_tool` span (inert unless spans are exported).
        let span = GenAiSpan::start(
            Operation::ExecuteTool,
            || {
                let tool = self.inner.registry.get(&request.name);
                let name = tool.map_or(request.name.as_str(), |t| t.info.name.as_str());
                format!("execute_tool {}", shorten(name, 200))
            },
            request.trace_parent.as_ref(),
        );
        span.set_with(semconv::TOOL_CALL_ID, || shorten(&request.id, 200));
        span.set(semconv::TOOL_TYPE, "function");
        span.set_with(semconv::TOOLBOX_SESSION, || session_id.clone());
        span.content(semconv::TOOL_CALL_ARGUMENTS, || {
            request.arguments.to_string()
        });

        let claim = toolbox_host::SpoolClaim::default();
        let waited = WaitClock::default();
        let (tool_name, outcome) = self
            .dispatch(
                &request,
                &session,
                cancel,
                claim.clone(),
                ticket,
                &waited,
                &span,
            )
            .instrument(span.span().clone())
            .await;
        let (status, text, error_kind, structured) = match outcome {
            Ok((text, structured)) => (CallStatus::Done, text, None, structured),
            Err((kind, message)) => (CallStatus::Error, message, Some(kind), None),
        };
        let called_as = (request.name != tool_name).then(|| shorten(&request.name, 200));
        let result_chars = text.chars().count();
        let (result, spool_path) = match claim.get() {
            // The tool streamed its full output to its own spool file already.
            Some(path) => {
                let bytes = toolbox_host::spool_file_len(&self.inner.workspace, &path).unwrap_or(0);
                let reader = self.spool_reader(self.vocabulary_of(&request));
                (spool::preview(&text, &path, bytes, reader), Some(path))
            }
            None => match spool::offload_if_large(
                &self.inner.workspace,
                &request.id,
                text,
                self.inner.config.spool_threshold,
                self.spool_reader(self.vocabulary_of(&request)),
            ) {
                SpoolOutcome::Inline(text) => (text, None),
                SpoolOutcome::Spooled { preview, path } => (preview, Some(path)),
            },
        };
        // The structured result mirrors the text: it obeys the same limits, on every way out.
        let structured = structured.map(|v| spool::bound_structured(v, spool_path.as_deref()));
        let waited_ms = waited.get().as_millis() as u64;
        let elapsed_ms = (started.elapsed().as_millis() as u64).saturating_sub(waited_ms);
        finish_span(
            &span,
            &tool_name,
            error_kind,
            &result,
            spool_path.is_some(),
            &waited,
        );
        if let Some(alias) = &called_as {
            span.set(semconv::TOOLBOX_CALLED_AS, alias.clone());
        }
        toolbox_host::telemetry::record_tool_duration(
            started.elapsed().as_secs_f64(),
            &tool_name,
            error_kind.map(ErrorKind::as_str),
        );
        let info = ToolCallInfo {
            id: request.id,
            tool: tool_name,
            called_as,
            session_id,
            arguments: request.arguments,
            status,
            result,
            structured,
            spool_path,
            error_kind,
            started_at,
            elapsed_ms,
            waited_ms,
            approved_by: waited.approved_by(),
        };
        tracing::debug!(
            target: "toolbox",
            tool_id = %info.id,
            tool_name = %info.tool,
            status = status.as_str(),
            elapsed_ms,
            result_chars,
            "tool execution finished"
        );
        Finished {
            info: Some(info),
            session: Some(session),
            executor: self.clone(),
        }
    }

    /// Resolve, gate, run. Returns the name to record and the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn dispatch(
        &self,
        request: &ToolRequest,
        session_id: &SessionId,
        cancel: CancellationToken,
        claim: toolbox_host::SpoolClaim,
        ticket: Option<Arc<crate::ApprovalTicket>>,
        waited: &WaitClock,
        span: &GenAiSpan,
    ) -> (String, Result<(String, Option<Value>), (ErrorKind, String)>) {
        let inner = &*self.inner;
        let found = inner.registry.get(&request.name);
        // By the flag alone: the executor names no tool.
        let intercepted = found.is_some_and(|tool| tool.info.intercepted);
        if intercepted {
            let shown = shorten(&request.name, 200);
            return (
                shown.clone(),
                Err((
                    ErrorKind::InvalidRequest,
                    format!("{shown} reached the tool executor, but it is served by the agent runtime, which must intercept it before dispatch. It works inside a turn (toolbox chat, toolbox serve), not through toolbox call or MCP"),
                )),
            );
        }
        let Some(tool) = found else {
            let shown = shorten(&request.name, 200);
            return (
                shown.clone(),
                Err((ErrorKind::UnknownTool, format!("unknown tool: {shown}"))),
            );
        };
        let name = tool.info.name.clone();
        span.set(semconv::TOOLBOX_RISK, tool.info.risk.as_str());
        let outcome = self
            .gate_and_call(
                tool, request, session_id, cancel, claim, ticket, waited, span,
            )
            .await;
        (name, outcome)
    }

    #[allow(clippy::too_many_arguments)]
    async fn gate_and_call(
        &self,
        tool: &RegisteredTool,
        request: &ToolRequest,
        session_id: &SessionId,
        cancel: CancellationToken,
        claim: toolbox_host::SpoolClaim,
        ticket: Option<Arc<crate::ApprovalTicket>>,
        waited: &WaitClock,
        span: &GenAiSpan,
    ) -> Result<(String, Option<Value>), (ErrorKind, String)> {
        let inner = &*self.inner;
        let name = tool.info.name.as_str();
        // The name the model called the tool by (an alias, a word of its vocabulary), for
        // the messages it reads: a refusal of `bash` says `bash`.
        let shown = request.name.as_str();
        let arguments = normalize_arguments(name, &request.arguments)
            .map_err(|e| (ErrorKind::InvalidRequest, e.to_string()))?;
        let workspace = inner.workspace.with_session_id(session_id.clone());
        let permissions = match &request.permissions {
            Some(turn) => inner.config.permissions.narrowed(turn),
            None => inner.config.permissions.into(),
        };
        let events = request.events.as_ref().unwrap_or(&inner.events);
        let call_cancel = cancel.child_token();
        // The time the call's review questions wait for a person counts as waited, not run.
        let review_wait = ReviewWait::new(waited);
        let called_as = (shown != name).then(|| shown.to_string());
        let asker = self.review_asker(
            session_id,
            &request.id,
            (name, called_as),
            events,
            &call_cancel,
            &review_wait,
        );
        let policy = CallPolicy {
            mode: Some(permissions.mode()),
            risks: ToolRisk::ALL
                .into_iter()
                .map(|risk| (risk, permissions.decide(risk)))
                .collect(),
        };
        let ctx = ToolContext {
            workspace,
            session_id: session_id.clone(),
            call_id: request.id.clone(),
            tool: name.to_string(),
            cancel: call_cancel.clone(),
            events: events.clone(),
            config: inner.provider_config.clone(),
            spool: claim,
            asker,
            policy,
            called_as: (shown != name).then(|| shown.to_string()),
            words: inner
                .words
                .get(&self.vocabulary_of(request))
                .cloned()
                .unwrap_or_default(),
            trace: span.recording().then(|| span.clone()),
        };

        let decision = permissions.decide(tool.info.risk);
        span.set(semconv::TOOLBOX_DECISION, decision.as_str());
        if decision == Decision::Deny {
            return Err((
                ErrorKind::Denied,
                permissions.denial_reason(shown, tool.info.risk),
            ));
        }
        // The gates providers registered (a plan that must be confirmed first), before
        // anyone is asked: the executor names no tool, each gate decides for itself.
        for gate in toolbox_host::call_gates() {
            let call = GateCall {
                tool: &tool.info,
                ctx: &ctx,
            };
            let checked = std::panic::catch_unwind(AssertUnwindSafe(|| (gate.check)(&call)));
            match checked {
                Ok(None) => {}
                Ok(Some(refusal)) => return Err((ErrorKind::Denied, refusal)),
                Err(panic) => {
                    return Err((
                        ErrorKind::Denied,
                        format!(
                            "tool {shown} was held back: the call gate of {} panicked ({})",
                            gate.provider,
                            toolbox_core::panic::message(&*panic)
                        ),
                    ))
                }
            }
        }
        match decision {
            Decision::Allow | Decision::Deny => {}
            Decision::Ask => {
                let asked = Instant::now();
                let answer = self
                    .await_approval(tool, request, &arguments, &ctx, &cancel, ticket.as_deref())
                    .await;
                waited.set(asked.elapsed());
                waited.answered_by(answer?);
            }
        }
        // Past the gate: the calls queued behind this one may ask now, while it runs.
        drop(ticket);
        let timeout = request.timeout.unwrap_or(inner.config.call_timeout);
        let call = AssertUnwindSafe(tool.provider.call_tool(name, arguments, &ctx)).catch_unwind();
        tokio::pin!(call);
        let declares_structure = tool.info.output_schema.is_some();
        let finish = |result: std::thread::Result<anyhow::Result<ToolOutput>>| match result {
            // A structured value goes out only from a tool that declared its shape: no client
            // was told the shape of any other.
            Ok(Ok(output)) => Ok((
                output.text,
                output.structured.filter(|_| declares_structure),
            )),
            Ok(Err(err)) => Err((ErrorKind::Tool, said_as(format!("{err:#}"), name, shown))),
            Err(panic) => Err((
                ErrorKind::Panic,
                format!(
                    "tool {shown} panicked: {}",
                    toolbox_core::panic::message(&*panic)
                ),
            )),
        };
        let stopped = tokio::select! {
            biased;
            _ = cancel.cancelled() => (ErrorKind::Cancelled, format!("tool {shown} was cancelled")),
            result = &mut call => {
                // Whatever the tool left running is told to stop.
                call_cancel.cancel();
                return finish(result);
            }
            _ = tokio::time::sleep(timeout) => (
                ErrorKind::Timeout,
                format!("tool {shown} timed out after {} ms", timeout.as_millis()),
            ),
        };
        // Timed out or cancelled: tell the tool through its token and give it a short grace
        // to stop its work cleanly (a shell command gets SIGTERM before SIGKILL) and return
        // what it gathered so far; a tool that ignores the token is dropped after the grace.
        call_cancel.cancel();
        let (kind, message) = stopped;
        match tokio::time::timeout(inner.config.cancel_grace, &mut call).await {
            Ok(result) => {
                let partial = match finish(result) {
                    Ok((text, _)) | Err((_, text)) => text,
                };
                if partial.trim().is_empty() {
                    Err((kind, message))
                } else {
                    Err((kind, format!("{message}\n{partial}")))
                }
            }
            Err(_) => Err((kind, message)),
        }
    }
}

/// The call's span gets what the call came to: the tool's name (also the span's name), the
/// error class, how long it waited for a person, and, if the operator opted in, the result.
fn finish_span(
    span: &GenAiSpan,
    tool: &str,
    error: Option<ErrorKind>,
    result: &str,
    spooled: bool,
    waited: &WaitClock,
) {
    if !span.recording() {
        return;
    }
    span.set(semconv::TOOL_NAME, tool.to_string());
    span.set(semconv::TOOLBOX_RESULT_CHARS, result.chars().count() as i64);
    span.set(semconv::TOOLBOX_SPOOLED, spooled);
    let wait = waited.get();
    if !wait.is_zero() {
        span.set(semconv::TOOLBOX_APPROVAL_WAIT, wait.as_secs_f64());
    }
    if let Some(by) = waited.approved_by() {
        span.set(semconv::TOOLBOX_APPROVED_BY, by);
    }
    span.content(semconv::TOOL_CALL_RESULT, || result.to_string());
    if let Some(kind) = error {
        // The class only: an error's text may quote data (it is the result, recorded above
        // only if the operator opted in).
        span.fail(kind.as_str(), || kind.as_str().to_string());
    }
}

/// A tool's error message as the model reads it: a message that begins with the tool's
/// canonical name (`file_manager__read: …`, the providers' convention) begins with the
/// name the call was made by instead (`read_file: …`). Only that first word is changed:
/// the rest may quote data.
fn said_as(message: String, canonical: &str, shown: &str) -> String {
    if canonical == shown {
        return message;
    }
    match message.strip_prefix(canonical) {
        Some(rest) if !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') => {
            format!("{shown}{rest}")
        }
        _ => message,
    }
}

/// Arguments may come as an object, as null, or as a string holding a JSON object.
fn normalize_arguments(tool: &str, arguments: &Value) -> Result<Value> {
    match arguments {
        Value::String(text) if text.trim().is_empty() => Ok(Value::Object(Default::default())),
        Value::String(text) => serde_json::from_str::<Value>(text)
            .map_err(|e| anyhow!("{tool}: arguments are not valid JSON: {e}")),
        other => Ok(other.clone()),
    }
}
