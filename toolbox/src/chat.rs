//! `toolbox chat`: one turn in the terminal. The model's text streams to stdout; tool calls,
//! their short results, sub-agents and notices go to stderr; approval requests are asked on
//! the terminal (or answered by `--approve`).

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolbox::core::{ApprovalRequest, SessionId};
use toolbox::runtime::llm::{self, LlmConfig};
use toolbox::runtime::{
    Runtime, RuntimeEvent, RuntimeOptions, SessionEvent, StopReason, TurnRequest,
};
use toolbox::{ApprovalDecision, ExecutorConfig, ToolExecutor};

use crate::{ask_on_terminal, usage, Approve, UsageError};

/// How many characters of arguments and results a line shows.
const SHOWN: usize = 200;

/// What the command line asked for.
pub struct ChatOptions {
    pub session: SessionId,
    pub agent: Option<String>,
    pub approve: Approve,
    pub message: String,
}

/// The model client `[llm]` and `TOOLBOX_LLM_*` describe, or why there is none.
pub fn llm_client(config: &ExecutorConfig) -> Result<Arc<dyn llm::LlmClient>, String> {
    let env = |name: &str| std::env::var(name).ok();
    LlmConfig::from_table(config.providers.get("llm"), &env)
        .and_then(|c| llm::client(&c))
        .map_err(|e| e.message)
}

pub async fn chat(config: ExecutorConfig, options: ChatOptions) -> Result<ExitCode, UsageError> {
    let llm = llm_client(&config);
    if let Err(why) = &llm {
        return Err(UsageError(format!("chat needs a model: {why}")));
    }
    let executor = ToolExecutor::new(config).map_err(usage)?;
    let runtime = Runtime::new(executor, llm, RuntimeOptions::default());
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
    for event in std::mem::take(&mut events.missed) {
        last_seq = event.seq;
        finished = finished.or(view.show(&runtime, &event, options.approve));
    }
    while finished.is_none() {
        let batch = match events.live.recv().await {
            Ok(event) => vec![event],
            // Fell behind (a flood of output): catch up from the kept history.
            Err(RecvError::Lagged(_)) => runtime.events().since(&options.session, last_seq),
            Err(RecvError::Closed) => break,
        };
        for event in batch {
            if event.seq <= last_seq {
                continue;
            }
            last_seq = event.seq;
            finished = finished.or(view.show(&runtime, &event, options.approve));
        }
    }
    stop.abort();
    Ok(match finished {
        Some(StopReason::EndTurn) => ExitCode::SUCCESS,
        Some(StopReason::Cancelled) => ExitCode::from(130),
        Some(StopReason::MaxSteps | StopReason::Error) | None => ExitCode::from(1),
    })
}

/// Renders events; remembers whether the text on stdout needs a final newline.
#[derive(Default)]
struct View {
    text_open: bool,
}

impl View {
    /// Shows one event; returns the stop reason when it ends the turn.
    fn show(
        &mut self,
        runtime: &Runtime,
        event: &SessionEvent,
        approve: Approve,
    ) -> Option<StopReason> {
        match &event.event {
            RuntimeEvent::TextDelta {
                text, depth, agent, ..
            } => {
                if *depth == 0 {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                    self.text_open = !text.ends_with('\n');
                } else {
                    eprint!("{}", indent_text(agent, *depth, text));
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
                eprintln!("{}→ {name} {}", pad(*depth), shorten(&args));
            }
            RuntimeEvent::ToolCallOutput { text, .. } => {
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            RuntimeEvent::ToolApprovalRequest {
                session_id,
                call_id,
                tool,
                arguments,
                risk,
                ..
            } => {
                self.end_text();
                let Ok(session) = SessionId::parse(session_id) else {
                    return None;
                };
                let request = ApprovalRequest {
                    session_id: session,
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                    risk: *risk,
                };
                let runtime = runtime.clone();
                // Off the event loop: a prompt blocks on the terminal.
                std::thread::spawn(move || {
                    let decision = match approve {
                        Approve::Yes => ApprovalDecision::Approve,
                        Approve::No => ApprovalDecision::Deny,
                        Approve::Ask => ask_on_terminal(&request).unwrap_or(ApprovalDecision::Deny),
                    };
                    runtime.respond_approval(
                        request.session_id.as_str(),
                        &request.call_id,
                        decision,
                    );
                });
            }
            RuntimeEvent::ToolCallFinished {
                tool,
                status,
                result_preview,
                elapsed_ms,
                depth,
                spool_path,
                ..
            } => {
                let spooled = spool_path
                    .as_deref()
                    .map(|p| format!(" [full result: {p}]"))
                    .unwrap_or_default();
                eprintln!(
                    "{}← {tool} {} ({elapsed_ms} ms): {}{spooled}",
                    pad(*depth),
                    status.as_str(),
                    shorten(result_preview)
                );
            }
            RuntimeEvent::AgentStarted {
                agent, depth, task, ..
            } => {
                self.end_text();
                eprintln!("{}▶ agent {agent}: {}", pad(*depth - 1), shorten(task));
            }
            RuntimeEvent::AgentFinished {
                agent,
                depth,
                stop_reason,
                ..
            } => {
                eprintln!(
                    "\n{}◀ agent {agent} finished ({})",
                    pad(*depth - 1),
                    stop_reason.as_str()
                );
            }
            RuntimeEvent::Error { message, .. } => {
                self.end_text();
                eprintln!("toolbox: {message}");
            }
            RuntimeEvent::TurnFinished {
                stop_reason,
                notice,
                ..
            } => {
                self.end_text();
                if let Some(notice) = notice {
                    if *stop_reason != StopReason::Error {
                        eprintln!("toolbox: {notice}");
                    }
                }
                return Some(*stop_reason);
            }
            RuntimeEvent::TurnStarted { .. } => {}
        }
        None
    }

    fn end_text(&mut self) {
        if self.text_open {
            println!();
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

/// One line of at most [`SHOWN`] characters.
fn shorten(text: &str) -> String {
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
