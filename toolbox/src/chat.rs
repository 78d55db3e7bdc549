//! `toolbox chat`: one turn in the terminal. The model's text streams to stdout; tool calls,
//! their short results, sub-agents and notices go to stderr; approval requests are asked on
//! the terminal (or answered by `--approve`).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolbox::core::SessionId;
use toolbox::host::ApprovalRequest;
use toolbox::runtime::llm::{self, LlmConfig};
use toolbox::runtime::{
    Runtime, RuntimeEvent, RuntimeOptions, SessionEvent, StopReason, TurnRequest,
};

use toolbox::{ApprovalDecision, ExecutorConfig, ToolExecutor};

use crate::cli::{usage, Approve, UsageError};
use crate::markdown::Markdown;
use crate::terminal::{self, Asked};

/// How many characters of arguments and results a line shows.
const SHOWN: usize = 200;

/// The longest a call that may be asked about waits for its approval question before its `→`
/// line is shown with its arguments (the question's preview says better what it will do).
const HOLD_CALL_LINE: Duration = Duration::from_secs(2);

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

/// Whether a log event is printed by `toolbox chat` at the default log level (no `RUST_LOG`
/// or `TOOLBOX_LOG`): not the warnings that chat says in its own words from the turn's
/// events, which are a failed model request's retries (the request's end is one sentence,
/// see [`readable_error`]) and a repaired conversation (an `error` event `warning: …`).
/// They are told apart by the module that logs them: the LLM transport's request loop
/// (which retries) and the turn.
pub(crate) fn logged(event: &tracing::Metadata<'_>) -> bool {
    !(*event.level() == tracing::Level::WARN
        && matches!(
            event.module_path(),
            Some("toolbox_runtime::llm::transport" | "toolbox_runtime::turn")
        ))
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
    let mut view = View::new(runtime.executor().clone());
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
        let next = if view.holds_call_lines() {
            match tokio::time::timeout(HOLD_CALL_LINE, events.live.recv()).await {
                Ok(next) => next,
                Err(_) => {
                    // No question came for them: show them with their arguments.
                    view.show_call_lines(None);
                    batch = Vec::new();
                    continue;
                }
            }
        } else {
            events.live.recv().await
        };
        batch = match next {
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
            request.shown_tool()
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
        // Not a rejection: the review ends unanswered, as one nobody could be asked.
        Asked::Declined(reason) => {
            runtime.executor().deny_approval(&session, &call, reason);
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

/// Renders events. Remembers whether the text on stdout needs a final newline, the calls whose
/// `→` line waits for their approval question, and the plan's checklist until it is shown.
struct View {
    /// Says which calls may be asked about.
    executor: ToolExecutor,
    /// The model's text as it goes to stdout.
    text: TextOut,
    text_open: bool,
    /// Calls started and not shown yet, in the model's order: one that may be asked about
    /// (see [`HOLD_CALL_LINE`]) and the ones after it.
    held_calls: Vec<HeldCall>,
    /// The plan's newest checklist, not shown yet.
    plan: Option<String>,
    /// The goal and steps of the plan last shown or about to be (printed, or in a review
    /// question): a change of review state alone is said by the review's own lines.
    plan_shown: Option<Value>,
    /// The last checklist each call that changed the plan emitted: its result line leaves
    /// that out.
    plan_calls: HashMap<String, String>,
}

/// How the model's text reaches stdout.
enum TextOut {
    /// As it is (made safe): stdout is no terminal, a program or a file reads it.
    Verbatim,
    /// Rendered Markdown, styled unless `NO_COLOR` is set.
    Rendered(Markdown),
}

/// A call's `→` line, waiting for its approval question.
struct HeldCall {
    id: String,
    name: String,
    arguments: Value,
    depth: u32,
}

impl View {
    fn new(executor: ToolExecutor) -> Self {
        let text = if std::io::stdout().is_terminal() {
            TextOut::Rendered(Markdown::new(std::env::var_os("NO_COLOR").is_none()))
        } else {
            TextOut::Verbatim
        };
        View {
            executor,
            text,
            text_open: false,
            held_calls: Vec::new(),
            plan: None,
            plan_shown: None,
            plan_calls: HashMap::new(),
        }
    }

    /// Whether some call's `→` line is waiting.
    fn holds_call_lines(&self) -> bool {
        !self.held_calls.is_empty()
    }

    /// Whether a call of `tool` may wait for an approval question (its risk asks first in
    /// this process's permissions).
    fn may_ask(&self, tool: &str) -> bool {
        self.executor.registry().get(tool).is_some_and(|t| {
            self.executor.permissions().decide(t.info.risk) == toolbox::executor::Decision::Ask
        })
    }

    /// Prints the waiting `→` lines: the one of the call `asked` about (its approval
    /// request's preview) with what the call will do, the others with their arguments.
    fn show_call_lines(&mut self, asked: Option<(&str, &toolbox::core::Preview)>) {
        for call in std::mem::take(&mut self.held_calls) {
            let what = match asked {
                Some((id, preview)) if id == call.id => format!(": {}", preview.summary),
                _ => {
                    let args = readable_arguments(&call.arguments);
                    if args.is_empty() {
                        String::new()
                    } else {
                        format!(" {args}")
                    }
                }
            };
            eprintln!(
                "{}",
                shorten(&format!("{}→ {}{what}", pad(call.depth), call.name))
            );
        }
    }

    /// Prints the plan's checklist if it changed since it was last shown.
    fn show_plan(&mut self) {
        if let Some(checklist) = self.plan.take() {
            self.end_text();
            eprintln!("{}", safe(&checklist));
        }
    }

    /// Shows one event, and says what it asks of the loop.
    fn show(&mut self, event: &SessionEvent) -> Shown {
        let event = &event.event;
        // The plan waits for something else to be shown, so a review question that shows the
        // plan anyway comes without it printed right before.
        let shows_plan = !matches!(
            event,
            RuntimeEvent::ToolCallStarted { .. }
                | RuntimeEvent::ToolCallFinished { .. }
                | RuntimeEvent::PlanUpdated { .. }
                | RuntimeEvent::ReviewRequest { .. }
                | RuntimeEvent::ReviewAnswered { .. }
                | RuntimeEvent::TurnStarted { .. }
                | RuntimeEvent::SessionResumed { .. }
                | RuntimeEvent::ToolCallProgress { .. }
        );
        if shows_plan {
            self.show_plan();
        }
        match event {
            RuntimeEvent::ToolCallStarted { .. } => {}
            RuntimeEvent::ToolApprovalRequest {
                call_id, preview, ..
            } => self.show_call_lines(Some((call_id, preview))),
            _ => self.show_call_lines(None),
        }
        match event {
            RuntimeEvent::TextDelta {
                text, depth, agent, ..
            } => {
                // Model text can carry escape sequences: shown, never obeyed.
                let text = safe(text);
                if *depth == 0 {
                    let shown = match &mut self.text {
                        TextOut::Verbatim => {
                            self.text_open = !text.ends_with('\n');
                            text
                        }
                        TextOut::Rendered(markdown) => {
                            // The renderer may hold the end of it: finished by end_text.
                            self.text_open = true;
                            markdown.push(&text)
                        }
                    };
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(shown.as_bytes());
                    let _ = out.flush();
                } else {
                    eprint!("{}", indent_text(agent, *depth, &text));
                }
            }
            RuntimeEvent::ToolCallStarted {
                id,
                name,
                arguments,
                depth,
                ..
            } => {
                self.end_text();
                // Held until its question (or anything else) comes, so that the line says
                // what the question's preview says; the calls after it keep their order.
                let hold = self.holds_call_lines() || self.may_ask(name);
                self.held_calls.push(HeldCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                    depth: *depth,
                });
                if !hold {
                    self.show_call_lines(None);
                }
            }
            RuntimeEvent::ToolCallOutput { text, .. } => {
                let _ = std::io::stderr().lock().write_all(safe(text).as_bytes());
            }
            RuntimeEvent::ToolApprovalRequest {
                session_id,
                call_id,
                tool,
                called_as,
                arguments,
                risk,
                preview,
                ..
            } => {
                self.end_text();
                return Shown::Ask(ApprovalRequest {
                    session_id: session_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    called_as: called_as.clone(),
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
                called_as,
                preview,
                ..
            } => {
                self.end_text();
                if let Some(checklist) = &self.plan {
                    // The question shows the plan: it is not printed right before it too.
                    if shows_checklist(preview, checklist) {
                        self.plan = None;
                    } else {
                        self.show_plan();
                    }
                }
                return Shown::Ask(ApprovalRequest {
                    session_id: session_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    called_as: called_as.clone(),
                    arguments: Value::Null,
                    risk: toolbox::core::ToolRisk::Read,
                    preview: preview.clone(),
                    kind: toolbox::host::QuestionKind::Review,
                });
            }
            RuntimeEvent::PlanUpdated {
                call_id,
                plan,
                checklist,
            } => {
                self.plan_calls.insert(call_id.clone(), checklist.clone());
                let content = plan_content(plan);
                if self.plan_shown.as_ref() != Some(&content) {
                    self.plan_shown = Some(content);
                    self.plan = Some(checklist.clone());
                } else if self.plan.is_some() {
                    // Not shown yet: the newest is.
                    self.plan = Some(checklist.clone());
                }
                // Otherwise only a review state changed: the review's own lines say so.
            }
            RuntimeEvent::ToolCallFinished {
                id,
                tool,
                status,
                result_preview,
                elapsed_ms,
                waited_ms,
                depth,
                spool_path,
                ..
            } => {
                self.end_text();
                let spooled = spool_path
                    .as_deref()
                    .map(|p| format!(" [full result: {}]", safe(p)))
                    .unwrap_or_default();
                let waited = match waited_ms {
                    0 => String::new(),
                    ms => format!(", after {} waiting for an answer", seconds(*ms)),
                };
                // A call that changed the plan returns the checklist, shown on its own.
                let result = match self.plan_calls.get(id) {
                    Some(checklist) => without_checklist(result_preview, checklist),
                    None => result_preview.as_str(),
                };
                let result = match shorten(result) {
                    shown if shown.trim().is_empty() => String::new(),
                    shown => format!(": {shown}"),
                };
                eprintln!(
                    "{}← {} {} ({elapsed_ms} ms{waited}){result}{spooled}",
                    pad(*depth),
                    safe(tool),
                    status.as_str(),
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
                eprintln!("toolbox: {}", safe(&readable_error(message)));
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
            // Counted progress is for the console and `toolbox call`'s line; the chat's
            // terminal shows the call's result when it ends.
            RuntimeEvent::ToolCallProgress { .. } => {}
        }
        Shown::Nothing
    }

    /// The model's text is over for now: shows what the renderer still holds (the end of a
    /// line, a table) and ends the line.
    fn end_text(&mut self) {
        if !self.text_open {
            return;
        }
        self.text_open = false;
        let rest = match &mut self.text {
            TextOut::Verbatim => {
                crate::cli::out("\n");
                return;
            }
            TextOut::Rendered(markdown) => markdown.finish(),
        };
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(rest.as_bytes());
        let _ = out.flush();
    }
}

/// The part of a plan a person reads in its checklist: its goal and steps.
fn plan_content(plan: &Value) -> Value {
    serde_json::json!({"goal": plan.get("goal"), "steps": plan.get("steps")})
}

/// Whether a review question's preview shows `checklist`: every line of it but the first
/// (the goal, which the question words differently).
fn shows_checklist(preview: &toolbox::core::Preview, checklist: &str) -> bool {
    let shown = preview.to_text(false);
    checklist
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .all(|line| shown.contains(&safe(line)))
}

/// A plan tool's result without the checklist it ends with (shown on its own).
fn without_checklist<'a>(result: &'a str, checklist: &str) -> &'a str {
    match checklist
        .lines()
        .next()
        .and_then(|first| result.find(first))
    {
        Some(at) => result[..at].trim_end(),
        None => result,
    }
}

/// A call's arguments as people read them: `key: value` pairs on one line, strings as they
/// are (a multi-line one by its first line and how many lines it has), never escaped JSON.
fn readable_arguments(arguments: &Value) -> String {
    match arguments {
        // Not JSON: the text the model sent.
        Value::String(raw) => raw.clone(),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}: {}", readable_value(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => readable_value(other),
    }
}

fn readable_value(value: &Value) -> String {
    match value {
        Value::String(text) => {
            let first: String = text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(SHOWN)
                .collect();
            match text.lines().count() {
                0 | 1 => first,
                lines => format!("{first} … ({lines} lines)"),
            }
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().take(20).map(readable_value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .take(20)
                .map(|(key, value)| format!("{key}: {}", readable_value(value)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

/// A failed model request in one sentence a person can act on. A connection that could not
/// be made (the runtime's `could not connect to URL: …; gave up after N attempts`) says which
/// address, what failed and what to check; any other message is already such a sentence.
fn readable_error(message: &str) -> String {
    let Some(rest) = message.strip_prefix("the model request failed: could not connect to ") else {
        return message.to_string();
    };
    let (url, rest) = rest.split_once(": ").unwrap_or((rest, ""));
    let (cause, attempts) = match rest.rsplit_once("; gave up after ") {
        Some((cause, tail)) => (cause, tail.split(" (").next().unwrap_or(tail)),
        None => (rest, ""),
    };
    // The innermost cause, without the OS's error number: "connection refused".
    let cause = cause.rsplit(": ").next().unwrap_or(cause);
    let cause = match cause.find(" (os error") {
        Some(at) => &cause[..at],
        None => cause,
    };
    let cause = cause.trim().to_lowercase();
    let tried = if attempts.is_empty() {
        String::new()
    } else {
        format!(", after {attempts}")
    };
    format!(
        "cannot reach the model at {url} ({cause}{tried}); check that the model server is \
         running there, and that [llm] base_url or TOOLBOX_LLM_BASE_URL names it"
    )
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
