//! The `toolbox` command: list tools, print schemas, call one tool, or serve MCP on stdio.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use toolbox::core::{ApprovalRequest, EventSink, SessionId, ToolEvent};
use toolbox::{
    ApprovalDecision, ExecutorConfig, LoadOptions, PermissionMode, SchemaFormat, ToolExecutor,
    ToolRequest,
};

#[derive(Parser)]
#[command(
    name = "toolbox",
    version,
    about = "The tool-execution layer for LLM agents."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct Common {
    /// Workspace root every path is jailed to [default: current directory].
    #[arg(long, short = 'w')]
    workspace: Option<PathBuf>,
    /// Permission mode: read_only, auto or full [default: from toolbox.toml / TOOLBOX_MODE, else auto].
    #[arg(long, value_parser = parse_mode)]
    mode: Option<PermissionMode>,
    /// OS sandbox for shell commands: off, read-only or workspace-write [default: from config, else off].
    #[arg(long, value_parser = ["off", "read-only", "workspace-write"])]
    sandbox: Option<String>,
    /// Trust the workspace's own toolbox.toml like an operator's file. Without this it may
    /// only tighten the settings (a lower mode, shorter timeouts, smaller limits).
    #[arg(long)]
    trust_workspace_config: bool,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools visible in this mode: name, risk and provider.
    Tools {
        #[command(flatten)]
        common: Common,
        /// Only these toolsets (comma separated; a toolset, provider or tool name).
        #[arg(long, value_delimiter = ',')]
        toolsets: Option<Vec<String>>,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print the tool schemas as a JSON array.
    Schema {
        #[command(flatten)]
        common: Common,
        /// openai, openai-responses, anthropic or mcp.
        #[arg(long, short = 'f', value_parser = parse_format)]
        format: SchemaFormat,
        #[arg(long, value_delimiter = ',')]
        toolsets: Option<Vec<String>>,
        /// Strict schemas: every property required, optional ones nullable (null means
        /// "not given"), and `strict: true`. The default for openai-responses.
        #[arg(long, overrides_with = "no_strict")]
        strict: bool,
        /// Loose schemas (optional properties left out of `required`), even for openai-responses.
        #[arg(long, overrides_with = "strict")]
        no_strict: bool,
    },
    /// Call one tool and print {"status": ..., "result": ...} on stdout (exit 0 done, 1 error).
    Call {
        /// Tool name or alias, e.g. file_manager__read or read_file.
        tool: String,
        /// Arguments as a JSON object, or - to read them from stdin [default: {}].
        arguments: Option<String>,
        #[command(flatten)]
        common: Common,
        /// Session id: routes output/, scratchpad/, input/ and names the trajectory.
        #[arg(long, short = 's', default_value = "default", value_parser = parse_session)]
        session: SessionId,
        /// In auto mode: ask on the terminal, or answer yes / no without asking.
        #[arg(long, value_enum, default_value_t = Approve::Ask)]
        approve: Approve,
        /// Stop the call after this many milliseconds.
        #[arg(long)]
        timeout_ms: Option<u64>,
    },
    /// Serve every visible tool over MCP on stdin/stdout.
    Mcp {
        #[command(flatten)]
        common: Common,
        /// Session id for every call on this connection.
        #[arg(long, short = 's', default_value = "default", value_parser = parse_session)]
        session: SessionId,
        /// In auto mode: yes trusts the MCP client's own confirmation, no refuses risky calls.
        #[arg(long, value_enum, default_value_t = Approve::Yes)]
        approve: Approve,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Approve {
    Ask,
    Yes,
    No,
}

fn parse_mode(s: &str) -> Result<PermissionMode, String> {
    s.parse().map_err(|e: anyhow::Error| e.to_string())
}

fn parse_session(s: &str) -> Result<SessionId, String> {
    SessionId::parse(s).map_err(|e| e.to_string())
}

fn parse_format(s: &str) -> Result<SchemaFormat, String> {
    s.parse().map_err(|e: anyhow::Error| e.to_string())
}

/// A failure the user caused: bad flags, bad JSON, a bad config. Exit code 2.
struct UsageError(String);

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolbox: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(run(cli));
    // Nothing a tool started outlives toolbox: kill what is left (processes started by
    // embedded Python, say) before exiting. The janitor covers a toolbox that dies instead.
    toolbox::core::containment::shutdown();
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

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("TOOLBOX_LOG"))
        .unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

fn load_config(common: &Common) -> Result<ExecutorConfig, UsageError> {
    let workspace = match &common.workspace {
        Some(dir) => dir.clone(),
        None => std::env::current_dir()
            .map_err(|e| UsageError(format!("cannot read the current directory: {e}")))?,
    };
    let options = LoadOptions {
        trust_workspace: common.trust_workspace_config,
        ..LoadOptions::default()
    };
    let mut config = ExecutorConfig::load_operator(&workspace, options)
        .map_err(|e| UsageError(format!("{e:#}")))?;
    if let Some(mode) = common.mode {
        config.permissions.mode = mode;
    }
    if let Some(sandbox) = &common.sandbox {
        let shell = config.providers.entry("shell").or_insert_with(|| json!({}));
        if let Value::Object(table) = shell {
            table.insert("sandbox".into(), Value::String(sandbox.clone()));
        }
    }
    // Last: the workspace's own toolbox.toml, which may only tighten all of the above.
    config
        .apply_workspace_restrictions()
        .map_err(|e| UsageError(format!("{e:#}")))?;
    Ok(config)
}

async fn run(cli: Cli) -> Result<ExitCode, UsageError> {
    match cli.command {
        Command::Tools {
            common,
            toolsets,
            json,
        } => {
            let executor = build(load_config(&common)?, EventSink::none())?;
            let permissions = executor.permissions();
            let tools = match &toolsets {
                Some(sets) => {
                    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
                    executor
                        .registry()
                        .expand_toolsets(&sets)
                        .map_err(|e| UsageError(e.to_string()))?
                }
                None => executor.registry().tools().iter().collect(),
            };
            let tools: Vec<_> = tools
                .into_iter()
                .filter(|t| permissions.visible(t.info.risk))
                .collect();
            if json {
                let rows: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({
                            "name": t.info.name,
                            "risk": t.info.risk,
                            "provider": t.provider_name(),
                            "aliases": t.info.aliases,
                            "toolsets": t.info.toolsets,
                        })
                    })
                    .collect();
                println!("{}", Value::Array(rows));
            } else {
                let width = tools.iter().map(|t| t.info.name.len()).max().unwrap_or(4);
                println!("{:width$}  {:10}  PROVIDER", "NAME", "RISK");
                for t in &tools {
                    println!(
                        "{:width$}  {:10}  {}",
                        t.info.name,
                        t.info.risk.as_str(),
                        t.provider_name()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema {
            common,
            format,
            toolsets,
            strict,
            no_strict,
        } => {
            let strict = if strict || no_strict {
                strict
            } else {
                format.strict_by_default()
            };
            let executor = build(load_config(&common)?, EventSink::none())?;
            let sets: Option<Vec<&str>> = toolsets
                .as_ref()
                .map(|s| s.iter().map(String::as_str).collect());
            let schemas = executor
                .resolve_agent_tool_schemas(
                    sets.as_deref(),
                    executor.permissions(),
                    format.strict(strict),
                )
                .map_err(|e| UsageError(e.to_string()))?;
            let text =
                serde_json::to_string_pretty(&schemas).map_err(|e| UsageError(e.to_string()))?;
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Call {
            tool,
            arguments,
            common,
            session,
            approve,
            timeout_ms,
        } => {
            let arguments = read_arguments(arguments.as_deref())?;
            let slot: Arc<OnceLock<ToolExecutor>> = Arc::new(OnceLock::new());
            let events = cli_events(slot.clone(), approve);
            let executor = build(load_config(&common)?, events)?;
            let _ = slot.set(executor.clone());
            let mut request =
                ToolRequest::new(new_call_id(), tool, arguments).session(session.to_string());
            if let Some(ms) = timeout_ms {
                request = request.timeout(Duration::from_millis(ms.max(1)));
            }
            let cancel = toolbox::core::CancellationToken::new();
            let on_signal = cancel.clone();
            tokio::spawn(async move {
                // SIGTERM or Ctrl-C cancels the call, which stops what it started and still
                // prints its envelope.
                toolbox::stop_signal().await;
                on_signal.cancel();
            });
            let info = executor.run_cancellable(request, cancel).await;
            println!("{}", info.envelope());
            Ok(if info.is_done() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Mcp {
            common,
            session,
            approve,
        } => {
            let slot: Arc<OnceLock<ToolExecutor>> = Arc::new(OnceLock::new());
            // Nobody can answer a terminal prompt over stdio: ask degrades to no.
            let approve = if approve == Approve::Ask {
                Approve::No
            } else {
                approve
            };
            let events = cli_events(slot.clone(), approve);
            let executor = build(load_config(&common)?, events)?;
            let _ = slot.set(executor.clone());
            let serve = toolbox::mcp::McpServer::new(executor, session).serve_stdio();
            tokio::select! {
                served = serve => served.map_err(|e| UsageError(format!("mcp: {e:#}")))?,
                // A clean stop: calls in flight are dropped (which stops their processes)
                // and main() kills whatever else the tools started.
                signal = toolbox::stop_signal() => {
                    tracing::debug!(target: "toolbox", signal, "stopping the MCP server");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn build(config: ExecutorConfig, events: EventSink) -> Result<ToolExecutor, UsageError> {
    ToolExecutor::with_events(config, events).map_err(|e| UsageError(format!("{e:#}")))
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
fn cli_events(slot: Arc<OnceLock<ToolExecutor>>, approve: Approve) -> EventSink {
    EventSink::new(move |event| match event {
        // Both streams go to stderr: stdout carries only the envelope.
        ToolEvent::Output { text, .. } => {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(text.as_bytes());
            let _ = err.flush();
        }
        ToolEvent::Progress { message, .. } => eprintln!("{message}"),
        ToolEvent::ApprovalRequested(request) => {
            let slot = slot.clone();
            // Answer off the executor's thread: a prompt may block on the terminal.
            std::thread::spawn(move || {
                let decision = match approve {
                    Approve::Yes => ApprovalDecision::Approve,
                    Approve::No => ApprovalDecision::Deny,
                    Approve::Ask => ask_on_terminal(&request),
                };
                if let Some(executor) = slot.get() {
                    executor.respond_approval(&request.session_id, &request.call_id, decision);
                }
            });
        }
    })
}

fn ask_on_terminal(request: &ApprovalRequest) -> ApprovalDecision {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty");
    let Ok(mut tty) = tty else {
        eprintln!(
            "toolbox: {} needs approval (mode auto) and there is no terminal to ask; \
             use --approve yes or --mode full to allow it",
            request.tool
        );
        return ApprovalDecision::Deny;
    };
    if !tty.is_terminal() {
        return ApprovalDecision::Deny;
    }
    let args = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
    let _ = write!(
        tty,
        "toolbox: allow {} (risk {}) with arguments\n{args}\n[y]es / [s]ession / [N]o: ",
        request.tool, request.risk
    );
    let _ = tty.flush();
    let mut line = String::new();
    let mut byte = [0u8; 1];
    while let Ok(1) = tty.read(&mut byte) {
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0] as char);
    }
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => ApprovalDecision::Approve,
        "s" | "session" => ApprovalDecision::ApproveForSession,
        _ => ApprovalDecision::Deny,
    }
}
