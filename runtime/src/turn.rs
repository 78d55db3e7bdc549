//! The turn loop: model → tool calls → gate → executor → tool messages → model, until the
//! model answers without tools or the agent's `max_steps` is reached; `call_agent` runs a
//! sub-turn here, never in the executor.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};
use toolbox_core::agent::{CallAgentArgs, CALL_AGENT};
use toolbox_core::SessionId;
use toolbox_executor::{
    schema::SchemaRendering, ApprovalQueue, ApprovalTicket, CallStatus, ErrorKind, PermissionMode,
    Permissions, ToolRequest,
};
use toolbox_host::telemetry::{self, semconv, GenAiSpan, Operation};
use toolbox_host::{
    CancellationToken, EventSink, OutputStream, PersonAnswer, QuestionKind, ToolEvent,
};
use tracing::Instrument;

use crate::agent::ActiveAgent;
use crate::conversation::{self, ConversationWriter};
use crate::events::{preview, RuntimeEvent, StopReason};
use crate::llm::{ChatRequest, LlmClient, Message, ToolCall, Usage};
use crate::runtime::{lock, Runtime, Started, TurnOutcome, TurnRequest};

/// Everything one turn shares across its agents.
struct Turn {
    rt: Runtime,
    session: SessionId,
    turn_id: String,
    permissions: Permissions,
    cancel: CancellationToken,
    llm: std::sync::Arc<dyn LlmClient>,
    usage: Mutex<Usage>,
    steps: AtomicU32,
    /// The turn's approval questions, one at a time in the order the model asked for the
    /// calls (sub-agents' calls included).
    approvals: ApprovalQueue,
    /// Tool calls the turn's agents asked for so far.
    calls: AtomicU32,
}

/// How one agent's run ended.
struct AgentEnd {
    stop: StopReason,
    text: String,
    notice: Option<String>,
}

/// Runs a started turn to its end; always emits `turn_finished` and frees the session.
pub(crate) async fn run(rt: Runtime, started: Started, request: TurnRequest) -> TurnOutcome {
    let Started {
        session,
        turn_id,
        agent,
        llm,
        cancel,
    } = started;
    let ceiling = rt.executor().permissions();
    let permissions = request.permissions(&ceiling);
    rt.emit(
        &session,
        RuntimeEvent::TurnStarted {
            turn_id: turn_id.clone(),
            agent: agent.name.clone(),
            message: request.message.clone(),
            permission_mode: effective_mode(&ceiling, &permissions).to_string(),
        },
    );
    let turn = Turn {
        rt: rt.clone(),
        session: session.clone(),
        turn_id: turn_id.clone(),
        permissions,
        cancel,
        llm,
        usage: Mutex::new(Usage::default()),
        steps: AtomicU32::new(0),
        approvals: ApprovalQueue::new(),
        calls: AtomicU32::new(0),
    };
    // The turn's `invoke_agent` span, a child of the caller's trace when it sent one.
    let span = agent_span(&turn, &agent, request.trace_parent.as_ref());
    let started_at = std::time::Instant::now();
    let end = async {
        match open_conversation(&turn, &request.message) {
            Ok((mut messages, writer)) => {
                let chain = vec![agent.name.clone()];
                run_agent(&turn, &agent, 0, &chain, &mut messages, Some(&writer)).await
            }
            Err(message) => {
                turn.error(message.clone());
                AgentEnd {
                    stop: StopReason::Error,
                    text: String::new(),
                    notice: Some(message),
                }
            }
        }
    }
    .instrument(span.span().clone())
    .await;
    finish_agent_span(&span, &agent, &end, started_at);
    let usage = *lock(&turn.usage);
    let steps = turn.steps.load(Ordering::Relaxed);
    let end = match rt.superseded_by() {
        Some(epoch) if end.stop == StopReason::Cancelled => AgentEnd {
            stop: StopReason::Superseded,
            notice: Some(format!(
                "a newer session server (epoch {epoch}) took this session over; this session \
                 server stopped the turn"
            )),
            ..end
        },
        _ => end,
    };
    rt.finish(
        &session,
        RuntimeEvent::TurnFinished {
            turn_id: turn_id.clone(),
            stop_reason: end.stop,
            steps,
            usage,
            notice: end.notice,
        },
    );
    TurnOutcome {
        turn_id,
        stop_reason: end.stop,
        text: end.text,
        steps,
        usage,
    }
}

/// The mode a turn actually runs in, for people: the request's, never above the ceiling's.
fn effective_mode(ceiling: &Permissions, turn: &Permissions) -> PermissionMode {
    turn.mode.at_most(ceiling.mode)
}

/// Reads the session's conversation, reports what was repaired, and appends the user's message.
fn open_conversation(
    turn: &Turn,
    message: &str,
) -> Result<(Vec<Message>, ConversationWriter), String> {
    let workspace = turn.rt.executor().workspace();
    let loaded = conversation::load(workspace, &turn.session).map_err(|e| format!("{e:#}"))?;
    for warning in loaded.warnings {
        tracing::warn!(target: "toolbox", session = %turn.session, "{warning}");
        turn.error(format!("warning: {warning}"));
    }
    let writer =
        ConversationWriter::open(workspace, &turn.session).map_err(|e| format!("{e:#}"))?;
    let user = Message::User {
        content: message.to_string(),
    };
    writer
        .append(std::slice::from_ref(&user))
        .map_err(|e| format!("{e:#}"))?;
    let mut messages = loaded.messages;
    messages.push(user);
    Ok((messages, writer))
}

impl Turn {
    fn emit(&self, event: RuntimeEvent) {
        self.rt.emit(&self.session, event);
    }

    fn error(&self, message: String) {
        self.emit(RuntimeEvent::Error {
            turn_id: Some(self.turn_id.clone()),
            message,
        });
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `agent` over `messages` until it answers without tools. `writer` persists the
/// messages (the turn's own agent); a sub-agent's conversation lives only in memory.
fn run_agent<'a>(
    turn: &'a Turn,
    agent: &'a ActiveAgent,
    depth: u32,
    chain: &'a [String],
    messages: &'a mut Vec<Message>,
    writer: Option<&'a ConversationWriter>,
) -> BoxFuture<'a, AgentEnd> {
    Box::pin(async move {
        let executor = turn.rt.executor();
        let toolsets: Option<Vec<&str>> = agent
            .toolsets
            .as_ref()
            .map(|sets| sets.iter().map(String::as_str).collect());
        let tools = match executor.resolve_runtime_tools(toolsets.as_deref(), turn.permissions) {
            Ok(tools) => tools,
            Err(e) => {
                let message = format!("agent {}: {e:#}", agent.name);
                turn.error(message.clone());
                return AgentEnd {
                    stop: StopReason::Error,
                    text: String::new(),
                    notice: Some(message),
                };
            }
        };
        // What the agent may call at all; the permissions are the executor's to enforce, so a
        // hidden risky tool called anyway gets the executor's refusal, not this one's.
        let registry = executor.registry();
        let allowed = match toolsets.as_deref() {
            Some(sets) => registry.expand_toolsets(sets).unwrap_or_default(),
            None => registry.tools().iter().collect(),
        };
        let offered: HashSet<String> = allowed.iter().map(|t| t.info.name.clone()).collect();
        let vocabulary = agent.vocabulary.unwrap_or(turn.rt.inner.options.vocabulary);
        let rendering = SchemaRendering::from(turn.llm.schema_format()).vocabulary(vocabulary);
        let schemas = executor
            .registry()
            .render(tools.iter().map(|t| &t.info), rendering);
        // The built-in prompt names tools; a model prompted in another vocabulary reads them
        // in its words. An agent file's prompt is its author's, left as written.
        let system = if agent.builtin_prompt {
            executor.registry().rename_text(&agent.prompt, vocabulary)
        } else {
            agent.prompt.clone()
        };
        let max_steps = agent
            .max_steps
            .unwrap_or(turn.rt.inner.options.default_max_steps)
            .max(1);
        let persist = |new: &[Message]| {
            if let Some(writer) = writer {
                if let Err(e) = writer.append(new) {
                    turn.error(format!("{e:#}"));
                }
            }
        };
        for _ in 0..max_steps {
            if turn.cancel.is_cancelled() {
                return cancelled(agent);
            }
            let on_text = |text: &str| {
                turn.emit(RuntimeEvent::TextDelta {
                    turn_id: turn.turn_id.clone(),
                    agent: agent.name.clone(),
                    depth,
                    text: text.to_string(),
                })
            };
            let request = ChatRequest {
                system: &system,
                messages,
                tools: &schemas,
                model: agent.model.as_deref(),
            };
            let chat = chat_span(turn, agent);
            let completion = tokio::select! {
                biased;
                _ = turn.cancel.cancelled() => return cancelled(agent),
                result = turn.llm.complete(request, &on_text).instrument(chat.span().clone()) => result,
            };
            finish_chat_span(&chat, &completion);
            turn.steps.fetch_add(1, Ordering::Relaxed);
            let mut completion = match completion {
                Ok(completion) => completion,
                Err(e) => {
                    let message = format!("the model request failed: {e}");
                    turn.error(message.clone());
                    return AgentEnd {
                        stop: StopReason::Error,
                        text: String::new(),
                        notice: Some(message),
                    };
                }
            };
            *lock(&turn.usage) += completion.usage;
            unique_call_ids(
                &mut completion.tool_calls,
                turn.steps.load(Ordering::Relaxed),
            );
            let calls = completion.tool_calls.clone();
            let assistant = Message::Assistant {
                content: completion.text.clone(),
                tool_calls: completion.tool_calls,
            };
            persist(std::slice::from_ref(&assistant));
            messages.push(assistant);
            if calls.is_empty() {
                return AgentEnd {
                    stop: StopReason::EndTurn,
                    text: completion.text,
                    notice: None,
                };
            }
            // The calls run at once (at most max_parallel_calls, in order), but their
            // questions come one at a time, in this order.
            let tickets: Vec<ApprovalTicket> =
                calls.iter().map(|_| turn.approvals.ticket()).collect();
            let limit = turn.rt.inner.options.max_calls_per_turn;
            let results: Vec<String> = {
                use futures_util::StreamExt;
                let offered = &offered;
                let mut runs: Vec<BoxFuture<'_, String>> = Vec::with_capacity(calls.len());
                for (call, ticket) in calls.iter().zip(tickets) {
                    let made = turn.calls.fetch_add(1, Ordering::Relaxed) + 1;
                    runs.push(Box::pin(async move {
                        if made > limit {
                            drop(ticket);
                            let message = format!(
                                "not run: this turn has made {limit} tool calls, the limit \
                                 ([runtime] max_calls_per_turn); the turn ends here"
                            );
                            return finish_local(
                                turn,
                                agent,
                                depth,
                                call,
                                CallStatus::Error,
                                message,
                                0,
                            );
                        }
                        run_call(turn, agent, depth, chain, offered, call, ticket).await
                    }));
                }
                futures_util::stream::iter(runs)
                    .buffered(turn.rt.inner.options.max_parallel_calls.max(1))
                    .collect()
                    .await
            };
            let answers: Vec<Message> = calls
                .iter()
                .zip(results)
                .map(|(call, content)| Message::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content,
                })
                .collect();
            persist(&answers);
            messages.extend(answers);
            if turn.cancel.is_cancelled() {
                return cancelled(agent);
            }
            if turn.calls.load(Ordering::Relaxed) > limit {
                return AgentEnd {
                    stop: StopReason::MaxSteps,
                    text: String::new(),
                    notice: Some(format!(
                        "the turn stopped after {limit} tool calls ([runtime] \
                         max_calls_per_turn); the results so far are kept. Send another \
                         message to go on"
                    )),
                };
            }
        }
        let notice = format!(
            "agent {} stopped after {max_steps} model requests (its max_steps) while it still \
             wanted tools; the tool results so far are kept. Send another message to go on, or \
             raise max_steps in the agent's frontmatter",
            agent.name
        );
        AgentEnd {
            stop: StopReason::MaxSteps,
            text: String::new(),
            notice: Some(notice),
        }
    })
}

fn cancelled(agent: &ActiveAgent) -> AgentEnd {
    AgentEnd {
        stop: StopReason::Cancelled,
        text: String::new(),
        notice: Some(format!("the turn of agent {} was cancelled", agent.name)),
    }
}

/// Gives calls without an id one, and repeated ids a suffix: results are matched by id.
fn unique_call_ids(calls: &mut [ToolCall], step: u32) {
    let mut seen = HashSet::new();
    for (i, call) in calls.iter_mut().enumerate() {
        if call.id.trim().is_empty() {
            call.id = format!("call_{step}_{i}");
        }
        while !seen.insert(call.id.clone()) {
            call.id = format!("{}_{i}", call.id);
        }
    }
}

/// The arguments for events: the object the model sent, or its text when it is not JSON.
fn shown_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// Runs one call and returns the envelope the model gets.
async fn run_call(
    turn: &Turn,
    agent: &ActiveAgent,
    depth: u32,
    chain: &[String],
    offered: &HashSet<String>,
    call: &ToolCall,
    ticket: ApprovalTicket,
) -> String {
    turn.emit(RuntimeEvent::ToolCallStarted {
        turn_id: turn.turn_id.clone(),
        agent: agent.name.clone(),
        depth,
        id: call.id.clone(),
        name: call.name.clone(),
        arguments: shown_arguments(&call.arguments),
    });
    let executor = turn.rt.executor();
    let vocabulary = agent.vocabulary.unwrap_or(turn.rt.inner.options.vocabulary);
    let registered = executor.registry().get(&call.name);
    if let Some(tool) = registered {
        if tool.info.intercepted && tool.info.name == CALL_AGENT && offered.contains(CALL_AGENT) {
            // call_agent asks nothing itself: the calls after it need not wait for it.
            drop(ticket);
            // Not the executor's: its `execute_tool` span is the runtime's, with the
            // sub-agent's `invoke_agent` span inside it.
            let span = GenAiSpan::start(
                Operation::ExecuteTool,
                || format!("execute_tool {CALL_AGENT}"),
                None,
            );
            span.set(semconv::TOOL_NAME, CALL_AGENT);
            span.set_with(semconv::TOOL_CALL_ID, || call.id.clone());
            span.set(semconv::TOOL_TYPE, "function");
            span.set_with(semconv::AGENT_NAME, || agent.name.clone());
            span.content(semconv::TOOL_CALL_ARGUMENTS, || call.arguments.clone());
            let started = std::time::Instant::now();
            let envelope = call_agent(turn, agent, depth, chain, call)
                .instrument(span.span().clone())
                .await;
            let failed = span.recording()
                && serde_json::from_str::<Value>(&envelope)
                    .is_ok_and(|v| v.get("status").and_then(Value::as_str) == Some("error"));
            if failed {
                span.fail("tool_error", || "tool_error".into());
            }
            telemetry::record_tool_duration(
                started.elapsed().as_secs_f64(),
                CALL_AGENT,
                failed.then_some("tool_error"),
            );
            return envelope;
        }
        if !offered.contains(&tool.info.name) {
            let sets = match &agent.toolsets {
                Some(sets) => sets.join(", "),
                None => "all".into(),
            };
            let message = format!(
                "tool {} is not among the tools of agent {} (toolsets: {sets}); use only the \
                 tools you were given",
                tool.info.name_in(vocabulary),
                agent.name
            );
            return finish_local(turn, agent, depth, call, CallStatus::Error, message, 0);
        }
    }
    let sink = call_events(turn, agent, depth);
    let request = ToolRequest::new(&call.id, &call.name, Value::String(call.arguments.clone()))
        .session(turn.session.as_str())
        .vocabulary(vocabulary)
        .permissions(turn.permissions)
        .events(sink)
        .approval_ticket(ticket);
    let info = executor
        .run_cancellable(request, turn.cancel.child_token())
        .await;
    turn.emit(RuntimeEvent::ToolCallFinished {
        turn_id: turn.turn_id.clone(),
        id: info.id.clone(),
        tool: info.tool.clone(),
        status: info.status,
        error_kind: info.error_kind,
        result_preview: preview(&info.result),
        spool_path: info.spool_path.clone(),
        elapsed_ms: info.elapsed_ms,
        waited_ms: info.waited_ms,
        agent: agent.name.clone(),
        depth,
    });
    info.envelope()
}

/// An agent's `invoke_agent {name}` span: in-process, in the turn's session.
fn agent_span(
    turn: &Turn,
    agent: &ActiveAgent,
    parent: Option<&toolbox_core::TraceParent>,
) -> GenAiSpan {
    let span = GenAiSpan::start(
        Operation::InvokeAgent,
        || format!("invoke_agent {}", agent.name),
        parent,
    );
    if span.recording() {
        span.set(semconv::AGENT_NAME, agent.name.clone());
        span.set(semconv::CONVERSATION_ID, turn.session.to_string());
        span.set(
            semconv::REQUEST_MODEL,
            agent
                .model
                .clone()
                .unwrap_or_else(|| turn.llm.model().to_string()),
        );
        span.set(semconv::PROVIDER_NAME, turn.llm.provider_name());
    }
    span
}

fn finish_agent_span(
    span: &GenAiSpan,
    agent: &ActiveAgent,
    end: &AgentEnd,
    started: std::time::Instant,
) {
    let error = match end.stop {
        StopReason::EndTurn => None,
        other => Some(other.as_str()),
    };
    if let Some(error) = error {
        span.fail(error, || error.to_string());
    }
    telemetry::record_agent_duration(started.elapsed().as_secs_f64(), &agent.name, error);
}

/// A model request's `chat {model}` span.
fn chat_span(turn: &Turn, agent: &ActiveAgent) -> GenAiSpan {
    let model = || {
        agent
            .model
            .clone()
            .unwrap_or_else(|| turn.llm.model().to_string())
    };
    let span = GenAiSpan::start(Operation::Chat, || format!("chat {}", model()), None);
    if span.recording() {
        let model = model();
        span.set(semconv::PROVIDER_NAME, turn.llm.provider_name());
        span.set(semconv::REQUEST_MODEL, model);
        span.set(semconv::AGENT_NAME, agent.name.clone());
    }
    span
}

/// The request's outcome on its span: token usage and why the model stopped, or the class
/// of the failure.
fn finish_chat_span(
    span: &GenAiSpan,
    completion: &Result<crate::llm::Completion, crate::llm::LlmError>,
) {
    if !span.recording() {
        return;
    }
    match completion {
        Ok(c) => {
            // i64: an unsigned value would be exported as a string.
            span.set(
                semconv::USAGE_INPUT_TOKENS,
                i64::try_from(c.usage.input_tokens).unwrap_or(i64::MAX),
            );
            span.set(
                semconv::USAGE_OUTPUT_TOKENS,
                i64::try_from(c.usage.output_tokens).unwrap_or(i64::MAX),
            );
            if !c.stop_reason.is_empty() {
                span.set_strings(
                    semconv::RESPONSE_FINISH_REASONS,
                    vec![c.stop_reason.clone()],
                );
            }
        }
        Err(e) => {
            let kind = e.kind.as_str();
            span.fail(kind, || kind.to_string());
        }
    }
}

/// Emits `tool_call_finished` for a call the runtime answered itself; returns its envelope.
fn finish_local(
    turn: &Turn,
    agent: &ActiveAgent,
    depth: u32,
    call: &ToolCall,
    status: CallStatus,
    result: String,
    elapsed_ms: u64,
) -> String {
    turn.emit(RuntimeEvent::ToolCallFinished {
        turn_id: turn.turn_id.clone(),
        id: call.id.clone(),
        tool: call.name.clone(),
        status,
        error_kind: (status == CallStatus::Error).then_some(ErrorKind::Tool),
        result_preview: preview(&result),
        spool_path: None,
        elapsed_ms,
        waited_ms: 0,
        agent: agent.name.clone(),
        depth,
    });
    json!({"status": status.as_str(), "result": result}).to_string()
}

/// Routes a call's streamed output and approval request to the session's events.
fn call_events(turn: &Turn, agent: &ActiveAgent, depth: u32) -> EventSink {
    session_events(&turn.rt, &turn.session, &agent.name, depth)
}

/// An event sink that turns a call's tool events into `session`'s runtime events.
pub(crate) fn session_events(
    rt: &Runtime,
    session: &SessionId,
    agent: &str,
    depth: u32,
) -> EventSink {
    let rt = rt.clone();
    let session = session.clone();
    let agent = agent.to_string();
    EventSink::new(move |event| match event {
        ToolEvent::Output {
            call_id,
            tool,
            called_as,
            stream,
            text,
        } => rt.emit(
            &session,
            RuntimeEvent::ToolCallOutput {
                call_id,
                tool,
                called_as,
                stream: match stream {
                    OutputStream::Stdout => "stdout",
                    OutputStream::Stderr => "stderr",
                }
                .into(),
                text,
                agent: agent.clone(),
                depth,
            },
        ),
        ToolEvent::Progress {
            call_id,
            tool,
            called_as,
            message,
            done: Some(done),
            total,
        } => rt.emit(
            &session,
            RuntimeEvent::ToolCallProgress {
                call_id,
                tool,
                called_as,
                message,
                done,
                total,
                agent: agent.clone(),
                depth,
            },
        ),
        ToolEvent::Progress {
            call_id,
            tool,
            called_as,
            message,
            done: None,
            ..
        } => rt.emit(
            &session,
            RuntimeEvent::ToolCallOutput {
                call_id,
                tool,
                called_as,
                stream: "progress".into(),
                text: message,
                agent: agent.clone(),
                depth,
            },
        ),
        ToolEvent::ApprovalRequested(request) if request.kind == QuestionKind::Review => {
            lock(&rt.inner.asked).insert((session.to_string(), request.call_id.clone()));
            rt.emit(
                &session,
                RuntimeEvent::ReviewRequest {
                    session_id: session.clone(),
                    call_id: request.call_id,
                    tool: request.tool,
                    called_as: request.called_as,
                    preview: request.preview,
                    agent: agent.clone(),
                    depth,
                },
            )
        }
        ToolEvent::ReviewAnswered {
            call_id, answer, ..
        } => {
            let (answer, by, feedback) = match answer {
                PersonAnswer::Approved { by, feedback } => ("approved", Some(by), feedback),
                PersonAnswer::Rejected { by, feedback } => ("rejected", Some(by), feedback),
                PersonAnswer::NotAsked { reason } => ("not_asked", None, Some(reason)),
            };
            rt.emit(
                &session,
                RuntimeEvent::ReviewAnswered {
                    session_id: session.clone(),
                    call_id,
                    answer: answer.into(),
                    by,
                    feedback,
                },
            )
        }
        ToolEvent::PlanUpdated {
            call_id,
            plan,
            checklist,
            ..
        } => rt.emit(
            &session,
            RuntimeEvent::PlanUpdated {
                call_id,
                plan,
                checklist,
            },
        ),
        ToolEvent::ApprovalRequested(request) => {
            lock(&rt.inner.asked).insert((session.to_string(), request.call_id.clone()));
            rt.emit(
                &session,
                RuntimeEvent::ToolApprovalRequest {
                    session_id: session.clone(),
                    call_id: request.call_id,
                    tool: request.tool,
                    called_as: request.called_as,
                    arguments: request.arguments,
                    risk: request.risk,
                    preview: request.preview,
                    agent: agent.clone(),
                    depth,
                },
            )
        }
    })
}

/// `call_agent`: a sub-turn with another agent, in the same session and permissions.
async fn call_agent(
    turn: &Turn,
    parent: &ActiveAgent,
    depth: u32,
    chain: &[String],
    call: &ToolCall,
) -> String {
    let started = std::time::Instant::now();
    let fail = |message: String| {
        finish_local(
            turn,
            parent,
            depth,
            call,
            CallStatus::Error,
            message,
            started.elapsed().as_millis() as u64,
        )
    };
    let CallAgentArgs { agent: name, task } = match CallAgentArgs::parse(&call.arguments) {
        Ok(args) => args,
        Err(e) => return fail(e),
    };
    let max_depth = turn.rt.inner.options.max_agent_depth;
    let shown_chain = chain.join(" → ");
    if chain.contains(&name) {
        return fail(format!(
            "call_agent: agent {name} is already running in this chain ({shown_chain}); an \
             agent cannot call itself, directly or through others"
        ));
    }
    if depth + 1 > max_depth {
        return fail(format!(
            "call_agent: the agent depth limit ({max_depth}) is reached ({shown_chain}); \
             {} cannot call another agent. Do the task yourself",
            parent.name
        ));
    }
    let sub = match turn.rt.find_agent(&name) {
        Ok(agent) => agent,
        Err(e) => return fail(format!("call_agent: {e}")),
    };
    turn.emit(RuntimeEvent::AgentStarted {
        turn_id: turn.turn_id.clone(),
        agent: sub.name.clone(),
        depth: depth + 1,
        parent: parent.name.clone(),
        call_id: call.id.clone(),
        task: task.clone(),
    });
    let mut sub_chain = chain.to_vec();
    sub_chain.push(sub.name.clone());
    let mut messages = vec![Message::User { content: task }];
    // A child of call_agent's `execute_tool` span (the current one).
    let span = agent_span(turn, &sub, None);
    let sub_started = std::time::Instant::now();
    let end = run_agent(turn, &sub, depth + 1, &sub_chain, &mut messages, None)
        .instrument(span.span().clone())
        .await;
    finish_agent_span(&span, &sub, &end, sub_started);
    turn.emit(RuntimeEvent::AgentFinished {
        turn_id: turn.turn_id.clone(),
        agent: sub.name.clone(),
        depth: depth + 1,
        call_id: call.id.clone(),
        stop_reason: end.stop,
        result_preview: preview(&end.text),
    });
    let elapsed = started.elapsed().as_millis() as u64;
    match end.stop {
        StopReason::EndTurn => finish_local(
            turn,
            parent,
            depth,
            call,
            CallStatus::Done,
            end.text,
            elapsed,
        ),
        _ => finish_local(
            turn,
            parent,
            depth,
            call,
            CallStatus::Error,
            format!(
                "agent {} gave no answer: {}",
                sub.name,
                end.notice.unwrap_or_else(|| end.stop.as_str().into())
            ),
            elapsed,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_made_unique() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
        };
        let mut calls = vec![call("a"), call("a"), call(""), call("")];
        unique_call_ids(&mut calls, 2);
        let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "a_1", "call_2_2", "call_2_3"]);
    }

    #[test]
    fn a_turn_never_runs_above_the_ceiling() {
        let ceiling = Permissions::from(PermissionMode::Auto);
        let turn = Permissions::from(PermissionMode::Full);
        assert_eq!(effective_mode(&ceiling, &turn), PermissionMode::Auto);
        let turn = Permissions::from(PermissionMode::ReadOnly);
        assert_eq!(effective_mode(&ceiling, &turn), PermissionMode::ReadOnly);
    }
}
