//! `toolbox call`: one call, its streamed output and progress on stderr, its approval asked
//! on the terminal (or answered by `--approve`), the envelope on stdout.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};
use toolbox::core::SessionId;
use toolbox::host::{EventSink, ToolEvent};
use toolbox::{ApprovalDecision, ToolExecutor, ToolRequest};

use super::{
    build, load_config, out_or_exit, parse_session, terminal_approve, Approve, Common, UsageError,
};
use crate::{progress_line, terminal};

#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// Tool name or alias, e.g. file_manager__read or read_file.
    tool: String,
    /// Arguments as a JSON object, or - to read them from stdin [default: {}].
    arguments: Option<String>,
    #[command(flatten)]
    common: Common,
    /// Session id: routes output/, scratchpad/, input/ and names the trajectory.
    #[arg(long, short = 's', default_value = "default", value_parser = parse_session)]
    session: SessionId,
    /// In auto mode: ask on the terminal, or answer yes / no without asking [default: ask].
    #[arg(long, value_enum)]
    approve: Option<Approve>,
    /// Stop the call after this many milliseconds.
    #[arg(long)]
    timeout_ms: Option<u64>,
}

/// `toolbox call`: one call, streamed output on stderr, the envelope on stdout.
pub(super) async fn run(args: CallArgs) -> Result<ExitCode, UsageError> {
    let arguments = read_arguments(args.arguments.as_deref())?;
    let config = load_config(&args.common)?;
    let approve = terminal_approve(args.approve, &config, "call")?;
    let slot: Arc<OnceLock<ToolExecutor>> = Arc::new(OnceLock::new());
    let line = Arc::new(progress_line::ProgressLine::new());
    let events = cli_events(slot.clone(), approve, line.clone());
    let executor = build(config, events)?;
    let _ = slot.set(executor.clone());
    let mut request =
        ToolRequest::new(new_call_id(), args.tool, arguments).session(args.session.to_string());
    if let Some(ms) = args.timeout_ms {
        request = request.timeout(Duration::from_millis(ms.max(1)));
    }
    let cancel = toolbox::host::CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        // SIGTERM or Ctrl-C cancels the call, which stops what it started and still
        // prints its envelope.
        toolbox::stop_signal().await;
        on_signal.cancel();
    });
    let info = executor.run_cancellable(request, cancel).await;
    line.end();
    let code = if info.is_done() { 0 } else { 1 };
    out_or_exit(&format!("{}\n", info.envelope()), code);
    Ok(ExitCode::from(code))
}

fn read_arguments(arg: Option<&str>) -> Result<Value, UsageError> {
    let text = match arg {
        None => return Ok(json!({})),
        Some("-") => {
            let mut buf = String::new();
            std::io::stdin()
                .read_to_string(&mut buf)
                .map_err(|e| UsageError(format!("cannot read arguments from stdin: {e}")))?;
            buf
        }
        Some(text) => text.to_string(),
    };
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("arguments are not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(UsageError(
            "arguments must be a JSON object, like '{\"path\": \".\"}'".into(),
        ));
    }
    Ok(value)
}

fn new_call_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("cli-{ms}-{}", std::process::id())
}

/// Streams output to stderr as it arrives and answers approval requests per `approve`.
/// Counted progress is the one `line` redrawn in place (on a terminal only), cleared before
/// anything else is written.
///
/// stderr is the pump's pipe (see `toolbox::stderr_pump`), so these writes never block the
/// call, whoever reads stderr or not.
fn cli_events(
    slot: Arc<OnceLock<ToolExecutor>>,
    approve: Approve,
    line: Arc<progress_line::ProgressLine>,
) -> EventSink {
    EventSink::new(move |event| match event {
        // Both streams go to stderr: stdout carries only the envelope.
        // A tool's output can carry escape sequences: shown, never obeyed by the terminal.
        ToolEvent::Output { text, .. } => {
            line.clear();
            let text = toolbox::core::preview::terminal_safe(&text);
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
        ToolEvent::Progress {
            tool,
            message,
            done: Some(_),
            ..
        } => line.show(&tool, &message),
        ToolEvent::Progress { message, .. } => {
            line.clear();
            eprintln!("{}", toolbox::core::preview::terminal_safe(&message))
        }
        ToolEvent::ApprovalRequested(request) => {
            line.clear();
            let slot = slot.clone();
            // Answer off the executor's thread: a question blocks on the terminal.
            std::thread::spawn(move || {
                let Some(executor) = slot.get() else { return };
                let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
                let review = request.kind == toolbox::host::QuestionKind::Review;
                let asked = match approve {
                    Approve::Yes | Approve::No if review => {
                        terminal::Asked::NoTerminal(terminal::review_needs_a_person("call"))
                    }
                    Approve::Yes => terminal::Asked::Automatic(ApprovalDecision::Approve),
                    Approve::No => terminal::Asked::NoTerminal(format!(
                        "tool {} needs approval (permission mode auto) and toolbox call was \
                         started with --approve no, which refuses such calls; to allow them, \
                         use --approve yes or --mode full",
                        request.shown_tool()
                    )),
                    Approve::Ask => terminal::ask(&request, || {
                        executor
                            .pending_approvals(session)
                            .iter()
                            .any(|c| c == call)
                    }),
                };
                terminal::deliver(executor, session, call, asked);
            });
        }
        // A plan tool's result (printed when the call ends) and a review's question both
        // show the plan already: printing each update too showed it three times.
        ToolEvent::PlanUpdated { .. } | ToolEvent::ReviewAnswered { .. } => {}
    })
}
