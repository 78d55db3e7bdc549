//! `toolbox chat`: one turn in the terminal. The model's text streams to stdout; tool calls,
//! their short results, sub-agents and notices go to stderr; approval requests are asked on
//! the terminal (or answered by `--approve`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolbox::core::SessionId;
use toolbox::host::ApprovalRequest;
use toolbox::runtime::llm::{self, LlmConfig};
use toolbox::runtime::{
    Runtime, RuntimeEvent, RuntimeOptions, SessionEvent, StopReason, TurnRequest,
};

use toolbox::{ApprovalDecision, ExecutorConfig, ToolExecutor};

use crate::terminal::{self, Asked};
use crate::{usage, Approve, UsageError};

/// How many characters of arguments and results a line shows.
const SHOWN: usize = 200;

/// What the command line asked for.
pub(crate) struct ChatOptions {
    pub(crate) session: SessionId,
    pub(crate) agent: Option<String>,
    pub(crate) approve: Approve,
    pub(crate) message: String,
}

/// A new session id for `toolbox chat`: `chat-YYYYMMDD-HHMMSS` (UTC), with `-2`, `-3`, …
/// when that one is taken. Taken means its folder exists: each candidate is claimed by
/// creating `.toolbox/sessions/<id>` (one `mkdir`), so chats started in the same second by
/// parallel processes each get an id of their own.
pub(crate) fn new_session_id(
    workspace: &toolbox::host::Workspace,
) -> Result<SessionId, UsageError> {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // 2026-12-01T20:30:00Z -> 20261201-203000
    let stamp: String = now
        .chars()
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .map(|c| if c == 'T' { '-' } else { c })
        .collect();
    let taken: std::collections::HashSet<String> =
        toolbox::runtime::conversation::list_sessions(workspace)
            .into_iter()
            .map(|s| s.to_string())
            .collect();
    let base = format!("chat-{stamp}");
    for n in 1..=10_000u32 {
        let id = if n == 1 {
            base.clone()
        } else {
            format!("{base}-{n}")
        };
        let sid = SessionId::parse(&id).expect("a valid session id");
        // A session listed without a folder (a trajectory alone) is taken too.
        if taken.contains(&id) {
            continue;
        }
        match workspace.claim_session(&sid) {
            Ok(true) => return Ok(sid),
            Ok(false) => continue,
            Err(e) => {
                return Err(UsageError(format!(
                    "cannot make the new session's folder in {}: {e}",
                    workspace.toolbox_dir().display()
                )))
            }
        }
    }
    Err(UsageError(format!(
        "no free session id after {base}-10000; pass --session NAME"
    )))
}

/// The model client `[llm]` and `TOOLBOX_LLM_*` describe, or why there is none.
pub(crate) fn llm_client(config: &ExecutorConfig) -> Result<Arc<dyn llm::LlmClient>, String> {
    // Secrets were taken out of the environment at start-up; they are read from there.
    let env = |name: &str| toolbox::host::secrets::var(name);
    LlmConfig::from_table(config.providers.get("llm"), &env)
        .and_then(|c| llm::client(&c))
        .map_err(|e| e.message)
}

/// Runs the turn and shows it; exits 0 when the model ended it, 130 when it was cancelled,
/// 1 otherwise. A usage error when there is no model or the turn cannot start.
pub(crate) async fn chat(
    config: ExecutorConfig,
    options: ChatOptions,
) -> Result<ExitCode, UsageError> {
    let llm = llm_client(&config);
    if let Err(why) = &llm {
        return Err(UsageError(format!("chat needs a model: {why}")));
    }
    let executor = ToolExecutor::new(config).map_err(usage)?;
    let mut runtime_options = RuntimeOptions::from_config(executor.config()).map_err(usage)?;
    runtime_options.vocabulary = executor.config().vocabulary;
    let runtime = Runtime::new(executor, llm, runtime_options);
    let mut events = runtime.events().subscribe(&options.session, None);
    let request = TurnRequest {
        message: options.message,
        agent: options.agent,
        ..TurnRequest::default()
    };
    // Refused at once when it cannot start (unknown agent, bad session); from here on the
    // turn always ends with turn_finished.
    runtime
        .start_turn(options.session.as_str(), request)
        .map_err(|e| UsageError(e.to_string()))?;
    let stop = tokio::spawn({
        let runtime = runtime.clone();
        let session = options.session.to_string();
        async move {
            // Ctrl-C or SIGTERM cancels the turn and its tools; it still ends cleanly.
            let signal = toolbox::stop_signal().await;
            eprintln!("\ntoolbox: {signal}: cancelling the turn");
            runtime.cancel(&session);
        }
    });
    let mut view = View::default();
    let mut last_seq = 0;
    let mut finished = None;
    let mut batch: Vec<Arc<SessionEvent>> = std::mem::take(&mut events.missed);
    loop {
        for event in batch {
            if event.seq <= last_seq {
                continue;
            }
            last_seq = event.seq;
            match view.show(&event) {
                Shown::Nothing => {}
                Shown::Finished(stop) => finished = finished.or(Some(stop)),
                // Asked here, in the event loop: nothing else is rendered while the question
                // is open, and the next question comes only after this one is answered.
                Shown::Ask(request) => answer(&runtime, request, options.approve).await,
            }
        }
        if finished.is_some() {
            break;
        }
        batch = match events.live.recv().await {
            Ok(event) => vec![event],
            // Fell behind (a flood of output, or a long question): catch up from the kept
            // history.
            Err(RecvError::Lagged(_)) => runtime.events().since(&options.session, last_seq),
            Err(RecvError::Closed) => break,
        };
    }
    stop.abort();
    Ok(match finished {
        Some(StopReason::EndTurn) => ExitCode::SUCCESS,
        Some(StopReason::Cancelled) => ExitCode::from(130),
        Some(
            StopReason::MaxSteps
            | StopReason::Error
            | StopReason::Superseded
            | StopReason::Interrupted,
        )
        | None => ExitCode::from(1),
    })
}

/// Answers one approval request: per `--approve`, or by asking on the terminal (off the
/// runtime's threads, as the terminal blocks), then tells the runtime.
async fn answer(runtime: &Runtime, request: ApprovalRequest, approve: Approve) {
    let (session, call) = (request.session_id.to_string(), request.call_id.clone());
    let review = request.kind == toolbox::host::QuestionKind::Review;
    let asked = match approve {
        Approve::Yes | Approve::No if review => {
            Asked::NoTerminal(terminal::review_needs_a_person("chat"))
        }
        Approve::Yes => Asked::Automatic(ApprovalDecision::Approve),
        Approve::No => Asked::NoTerminal(format!(
            "tool {} needs approval (permission mode auto) and toolbox chat was started with \
             --approve no, which refuses such calls; to allow them, use --approve ask (asks on \
             the terminal), --approve yes or --mode full",
            request.tool
        )),
        Approve::Ask => {
            let executor = runtime.executor().clone();
            let (s, c) = (session.clone(), call.clone());
            let still_waiting = move || executor.pending_approvals(&s).contains(&c);
            tokio::task::spawn_blocking(move || terminal::ask(&request, still_waiting))
                .await
                .unwrap_or(Asked::Gone)
        }
    };
    match asked {
        Asked::Answer(decision) => {
            runtime.respond_as_person(&session, &call, decision, None, "terminal");
        }
        Asked::Automatic(decision) => {
            runtime.respond_approval(&session, &call, decision);
        }
        Asked::Review(decision, feedback) => {
            runtime.respond_as_person(&session, &call, decision, feedback, "terminal");
        }
        Asked::NoTerminal(reason) => {
            eprintln!("toolbox: {reason}");
            runtime.executor().deny_approval(&session, &call, reason);
        }
        Asked::Gone => {}
    }
}

/// What the event loop must do after showing an event.
enum Shown {
    Nothing,
    Finished(StopReason),
    /// Ask the person (or answer per `--approve`) before showing anything else.
    Ask(ApprovalRequest),
}

/// Renders events; remembers whether the text on stdout needs a final newline.
#[derive(Default)]
struct View {
    text_open: bool,
}

impl View {
    /// Shows one event, and says what it asks of the loop.
    fn show(&mut self, event: &SessionEvent) -> Shown {
        match &event.event {
            RuntimeEvent::TextDelta {
                text, depth, agent, ..
            } => {
                // Model text can carry escape sequences: shown, never obeyed.
                let text = safe(text);
                if *depth == 0 {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                    self.text_open = !text.ends_with('\n');
                } else {
                    eprint!("{}", indent_text(agent, *depth, &text));
                }
            }
            RuntimeEvent::ToolCallStarted {
                name,
                arguments,
                depth,
                ..
            } => {
                self.end_text();
                let args = match arguments {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                };
                eprintln!("{}→ {} {}", pad(*depth), safe(name), shorten(&args));
            }
            RuntimeEvent::ToolCallOutput { text, .. } => {
                let _ = std::io::stderr().lock().write_all(safe(text).as_bytes());
            }
            RuntimeEvent::ToolApprovalRequest {
                session_id,
                call_id,
                tool,
                arguments,
                risk,
                preview,
                ..
            } => {
                self.end_text();
                let Ok(session) = SessionId::parse(session_id) else {
                    return Shown::Nothing;
                };
                return Shown::Ask(ApprovalRequest {
                    session_id: session,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    risk: *risk,
                    preview: preview.clone(),
                    kind: toolbox::host::QuestionKind::Tool,
                });
            }
            RuntimeEvent::ReviewRequest {
                session_id,
                call_id,
                tool,
                preview,
                ..
            } => {
                self.end_text();
                let Ok(session) = SessionId::parse(session_id) else {
                    return Shown::Nothing;
                };
                return Shown::Ask(ApprovalRequest {
                    session_id: session,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: Value::Null,
                    risk: toolbox::core::ToolRisk::Read,
                    preview: preview.clone(),
                    kind: toolbox::host::QuestionKind::Review,
                });
            }
            RuntimeEvent::PlanUpdated { checklist, .. } => {
                self.end_text();
                eprintln!("{}", safe(checklist));
            }
            RuntimeEvent::ToolCallFinished {
                tool,
                status,
                result_preview,
                elapsed_ms,
                waited_ms,
                depth,
                spool_path,
                ..
            } => {
                let spooled = spool_path
                    .as_deref()
                    .map(|p| format!(" [full result: {}]", safe(p)))
                    .unwrap_or_default();
                let waited = match waited_ms {
                    0 => String::new(),
                    ms => format!(", after {} waiting for approval", seconds(*ms)),
                };
                eprintln!(
                    "{}← {} {} ({elapsed_ms} ms{waited}): {}{spooled}",
                    pad(*depth),
                    safe(tool),
                    status.as_str(),
                    shorten(result_preview)
                );
            }
            RuntimeEvent::AgentStarted {
                agent, depth, task, ..
            } => {
                self.end_text();
                eprintln!(
                    "{}▶ agent {}: {}",
                    pad(*depth - 1),
                    safe(agent),
                    shorten(task)
                );
            }
            RuntimeEvent::AgentFinished {
                agent,
                depth,
                stop_reason,
                ..
            } => {
                eprintln!(
                    "\n{}◀ agent {} finished ({})",
                    pad(*depth - 1),
                    safe(agent),
                    stop_reason.as_str()
                );
            }
            RuntimeEvent::Error { message, .. } => {
                self.end_text();
                eprintln!("toolbox: {}", safe(message));
            }
            RuntimeEvent::TurnFinished {
                stop_reason,
                notice,
                ..
            } => {
                self.end_text();
                if let Some(notice) = notice {
                    if *stop_reason != StopReason::Error {
                        eprintln!("toolbox: {}", safe(notice));
                    }
                }
                return Shown::Finished(*stop_reason);
            }
            RuntimeEvent::TurnStarted { .. } | RuntimeEvent::SessionResumed { .. } => {}
            RuntimeEvent::ReviewAnswered { .. } => {}
        }
        Shown::Nothing
    }

    fn end_text(&mut self) {
        if self.text_open {
            crate::out("\n");
            self.text_open = false;
        }
    }
}

fn pad(depth: u32) -> String {
    "  ".repeat(depth as usize)
}

fn indent_text(agent: &str, depth: u32, text: &str) -> String {
    let _ = agent;
    text.replace('\n', &format!("\n{}", pad(depth)))
}

/// Text from a model, a tool or the workspace, made safe to print on a terminal.
fn safe(text: &str) -> String {
    toolbox::core::preview::terminal_safe(text)
}

/// Milliseconds as seconds for people: `0.4 s`, `12 s`.
fn seconds(ms: u64) -> String {
    if ms < 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} s", ms / 1000)
    }
}

/// One line of at most [`SHOWN`] characters, safe to print on a terminal.
fn shorten(text: &str) -> String {
    let text = &safe(text);
    let line: String = text
        .chars()
        .map(|c| if c == '\n' { ' ' } else { c })
        .take(SHOWN + 1)
        .collect();
    if line.chars().count() > SHOWN {
        format!("{}…", line.chars().take(SHOWN).collect::<String>())
    } else {
        line
    }
}
