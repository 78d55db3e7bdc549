//! The `toolbox` command: list tools, print schemas, call one tool, serve MCP on stdio,
//! list and check skills, or list agents.
//!
//! This file is the process: what it does first (secrets out of the environment, errors
//! without backtraces, the stderr pump, logs), the async runtime the subcommand runs on, and
//! what it does last (nothing a tool started outlives it). The subcommands are [`cli`]'s.
//! The start-up calls that are `unsafe` (they touch the process environment) are all here.

#![deny(missing_docs)]

mod chat;
mod cli;
mod markdown;
mod progress_line;
mod terminal;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use toolbox::ExecutorConfig;

use cli::{Cli, UsageError};

fn main() -> ExitCode {
    errors_without_backtraces();
    // SAFETY: first thing, before any other thread exists.
    unsafe {
        toolbox::host::secrets::capture_and_scrub();
    }
    let cli = Cli::parse();
    let stderr_is_terminal = std::io::stderr().is_terminal();
    progress_line::remember_stderr(stderr_is_terminal);
    // First, before any thread writes to stderr: from here on a client that never reads
    // stderr can make toolbox drop output, never stall it.
    let pump = match toolbox::stderr_pump::install() {
        Ok(pump) => Some(pump),
        Err(e) => {
            eprintln!("toolbox: cannot set up non-blocking stderr ({e}); writing it directly");
            None
        }
    };
    let code = match init_tracing(stderr_is_terminal, cli.command.is_chat()) {
        Ok(telemetry) => {
            let code = run_to_exit(cli);
            finish_telemetry(telemetry);
            code
        }
        Err(UsageError(message)) => {
            eprintln!("toolbox: {message}");
            ExitCode::from(2)
        }
    };
    if let Some(pump) = pump {
        // Bounded: a reader that went away must not keep toolbox alive.
        pump.flush(Duration::from_millis(500), Duration::from_secs(5));
    }
    code
}

fn run_to_exit(cli: Cli) -> ExitCode {
    // The router does little work per request and passes each one on at once: on one thread
    // a request, its pooled connection to the session server and the answer never wait for
    // a wake-up on another thread, which is most of a hop's latency. More load: more
    // routers (they are stateless).
    let mut builder = if cli.command.runs_on_one_thread() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolbox: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(cli.command.run());
    // Nothing a tool started outlives toolbox: kill what is left (processes started by
    // embedded Python, say) before exiting. The janitor covers a toolbox that dies instead.
    toolbox::host::containment::shutdown();
    // Do not wait for blocking threads: one may be stuck reading stdin forever.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match outcome {
        Ok(code) => code,
        Err(UsageError(message)) => {
            eprintln!("toolbox: {message}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr, coloured only on a terminal. At the default level, `toolbox chat`
/// leaves out the warnings it says in its own words (see [`chat::logged`]).
///
/// With OpenTelemetry export on (`OTEL_*` variables or the operator's `[otel]` table), a
/// second layer, with a filter of its own, exports toolbox's GenAI spans; the log filter
/// does not hide them, and it sees no logs. A bad `[otel]` setting is a usage error.
fn init_tracing(
    ansi: bool,
    chat: bool,
) -> Result<Option<toolbox::host::telemetry::Telemetry>, UsageError> {
    use toolbox::host::telemetry::{Settings, Telemetry};
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{EnvFilter, Layer};
    let asked = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("TOOLBOX_LOG"))
        .ok();
    let quiet_chat = chat && asked.is_none();
    let table = toolbox::executor::operator_table("otel").map_err(cli::usage)?;
    let env = |name: &str| toolbox::host::secrets::var(name);
    let telemetry = match Settings::resolve(&env, table.as_ref()).map_err(cli::usage)? {
        Some(settings) => Some(Telemetry::start(settings).map_err(cli::usage)?),
        None => None,
    };
    toolbox::host::telemetry::remember_process_parent();
    let filter = EnvFilter::new(asked.unwrap_or_else(|| "warn".into()));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let fmt = if quiet_chat {
        fmt.with_filter(filter.and(tracing_subscriber::filter::filter_fn(chat::logged)))
            .boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let _ = tracing_subscriber::registry()
        .with(telemetry.as_ref().map(|t| t.layer()))
        .with(fmt)
        .try_init();
    Ok(telemetry)
}

/// Sends the spans still queued, for at most a second, and says what was lost, if anything.
fn finish_telemetry(telemetry: Option<toolbox::host::telemetry::Telemetry>) {
    let Some(telemetry) = telemetry else { return };
    let endpoint = telemetry.settings().traces_endpoint.clone();
    let counts = telemetry.shutdown(Duration::from_secs(1));
    if counts.lost() > 0 {
        eprintln!(
            "toolbox: OpenTelemetry: of {} spans, {} exported, {} dropped (queue full), {} not \
             accepted by {endpoint}, {} still unsent at exit",
            counts.spans, counts.exported, counts.dropped, counts.failed, counts.unsent
        );
    }
}

/// A tool error is an ordinary result here, not a bug: with `RUST_BACKTRACE=1` in the
/// user's shell, every `anyhow` error would also capture a backtrace, which tripled the
/// cost of a failed call (a missing file, a bad argument) and is never shown. Panics still
/// print theirs, and an explicit `RUST_LIB_BACKTRACE` is obeyed.
///
/// std decides once whether `Backtrace::capture` captures and keeps the answer: it is asked
/// here with `RUST_LIB_BACKTRACE=0`, which is then taken away again, so that the commands
/// and code toolbox runs get the user's environment as it was.
fn errors_without_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_some() {
        return;
    }
    // Before any other thread exists: nothing reads the environment meanwhile.
    std::env::set_var("RUST_LIB_BACKTRACE", "0");
    let _decided = std::backtrace::Backtrace::capture();
    std::env::remove_var("RUST_LIB_BACKTRACE");
}

/// Takes the variables `[shell] deny_env` names out of toolbox's own environment, so that no
/// child it starts (not only shell commands: the Python worker, pip, kernels) and no embedded
/// Python code sees them. The default list (the secret names) is out already.
pub(crate) fn withhold_denied_env(config: &ExecutorConfig) {
    let patterns: Vec<String> = config
        .providers
        .get("shell")
        .and_then(|shell| shell.get("deny_env"))
        .and_then(serde_json::Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    // SAFETY: the configuration is loaded before any tool runs; no C code reads the
    // environment on another thread yet (the async runtime's threads are idle).
    unsafe {
        toolbox::host::secrets::withhold(&patterns);
    }
}
