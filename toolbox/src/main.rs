//! The `toolbox` command: list tools, print schemas, call one tool, serve MCP on stdio,
//! list and check skills, or list agents.

#![deny(missing_docs)]

mod agents_cmd;
mod progress_line;
mod terminal;

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use toolbox::core::{SessionId, Vocabulary};
use toolbox::host::{EventSink, ToolEvent};
mod chat;
mod markdown;

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
    /// OS sandbox for shell commands and Python (which then runs on the isolated backend):
    /// off, read-only or workspace-write [default: from config, else off].
    #[arg(long, value_parser = ["off", "read-only", "workspace-write"])]
    sandbox: Option<String>,
    /// Trust the workspace's own toolbox.toml like an operator's file. Without this it may
    /// only tighten the settings (a lower mode, shorter timeouts, smaller limits).
    #[arg(long)]
    trust_workspace_config: bool,
    /// Whose tool names to show: canonical (toolbox's own, e.g. file_manager__read) or
    /// data-agent (read_file, python_exec, bash, …). Every name is accepted when called
    /// [default: [runtime] vocabulary, else canonical].
    #[arg(long, value_parser = parse_vocabulary)]
    vocabulary: Option<Vocabulary>,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools visible in this mode: name, risk and provider.
    Tools(ToolsArgs),
    /// Print the tool schemas as a JSON array.
    Schema(SchemaArgs),
    /// Call one tool and print {"status": ..., "result": ...} on stdout (exit 0 done, 1 error).
    Call(CallArgs),
    /// Serve every visible tool over MCP on stdin/stdout.
    Mcp(McpArgs),
    /// List the skills (SKILL.md folders) of the workspace and the configured skill folders.
    Skills(SkillsArgs),
    /// Run one turn of an agent: the model's text streams, tool calls are shown, risky calls
    /// are asked on the terminal. The model comes from [llm] / TOOLBOX_LLM_*.
    Chat(ChatArgs),
    /// List the agents (.toolbox/agents/*.md, the configured [agents] dirs and the built-in
    /// default); skipped files go to stderr as `FILE: REASON`.
    Agents(AgentsArgs),
    /// Serve the HTTP sidecar: the API, live events over SSE, approvals over HTTP, the web
    /// console at /, and MCP over streamable HTTP at /mcp.
    Serve(ServeArgs),
    /// Serve many session hosts behind one address: each session's requests go to the host
    /// a placement adapter (Ray, Kubernetes, your own) placed it on (docs/scale-out.md).
    Router(RouterArgs),
    /// List the workspace's sessions, most recently active first: id, last activity and the
    /// start of the first message.
    Sessions(SessionsArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Address to listen on. Anything but loopback needs --token.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: std::net::SocketAddr,
    /// Bearer token every /api and /mcp request must carry [env: TOOLBOX_SERVE_TOKEN]. Any
    /// process can read a flag in /proc/PID/cmdline: prefer --token-fd or the variable.
    #[arg(long, conflicts_with_all = ["token_file", "token_fd", "token_sha256"])]
    token: Option<String>,
    /// Read the bearer token from this file (its first line). Code the tools run as the same
    /// user can read the file too: prefer --token-fd.
    #[arg(long, conflicts_with_all = ["token_fd", "token_sha256"])]
    token_file: Option<PathBuf>,
    /// Read the bearer token from this inherited descriptor (its first line; a pipe the
    /// starting program wrote it into), then close it: no file and no path remain.
    #[arg(long, value_name = "FD", conflicts_with = "token_sha256")]
    token_fd: Option<i32>,
    /// Accept bearer tokens whose SHA-256 is this (64 hex digits), without ever knowing the
    /// token: for a host whose placement adapter keeps the token to itself.
    #[arg(long, value_name = "HEX")]
    token_sha256: Option<String>,
    /// Allow cross-origin requests from this origin (repeatable), e.g. http://localhost:3000.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Over /mcp in auto mode, for a client that cannot be asked (it declared no
    /// elicitation): yes runs risky tools, no refuses them. Clients that can be asked are.
    #[arg(long, alias = "mcp-approve", value_enum, default_value_t = Fallback::No)]
    approve: Fallback,
    /// The largest file a client may upload into a session's input/ folder (PUT
    /// /api/sessions/SID/input/PATH), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    max_upload_mb: u64,
    /// Run every /mcp call in this one toolbox session, shared by all MCP clients on purpose
    /// [default: a toolbox session of its own per MCP session].
    #[arg(long, value_parser = parse_session, conflicts_with = "session")]
    mcp_session: Option<SessionId>,
    /// Host mode: serve this one session only (others get 404; /mcp runs in it), its state
    /// kept in --state-store so it can resume on another machine (docs/scale-out.md).
    #[arg(long, value_parser = parse_session, requires_all = ["epoch", "state_store"])]
    session: Option<SessionId>,
    /// Host mode: this host's epoch, higher than any host of the session before it, or
    /// `next`: the lowest epoch above every one claimed in the store so far.
    #[arg(long, requires = "session")]
    epoch: Option<toolbox::server::sync::Epoch>,
    /// Host mode: the state store, file:///folder or s3://bucket/prefix (AWS_* environment).
    #[arg(long, requires = "session")]
    state_store: Option<String>,
    /// Host mode: how often to sync whatever happens, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "session")]
    sync_every: std::time::Duration,
}

#[derive(clap::Args)]
struct RouterArgs {
    /// Address to listen on. Anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:7900")]
    listen: std::net::SocketAddr,
    /// The placement adapter's base URL (it serves POST /v1/sessions/{sid}:ensure, …).
    #[arg(long)]
    placement: String,
    /// Read the adapter's bearer token from this file (its first line).
    #[arg(long)]
    placement_token_file: Option<PathBuf>,
    /// How long one call to the adapter may take (placing a session starts a host).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    placement_timeout: std::time::Duration,
    /// Read the clients' bearer token from this file (its first line) [env:
    /// TOOLBOX_ROUTER_TOKEN]. Required to listen beyond loopback.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// What `toolbox mcp` and `toolbox serve`'s /mcp do with a risky call in auto mode when the
/// client cannot be asked.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Fallback {
    Yes,
    No,
    /// Not a choice: accepted only to refuse it with an explanation.
    #[value(hide = true)]
    Ask,
}

#[derive(clap::Args)]
struct ChatArgs {
    /// The user's message, or - to read it from stdin.
    message: String,
    #[command(flatten)]
    common: Common,
    /// The agent to run as (see `toolbox agents`) [default: default].
    #[arg(long, short = 'a')]
    agent: Option<String>,
    /// Session id: the conversation continues from .toolbox/sessions/<id>/messages.jsonl
    /// [default: a new session, whose id is printed on stderr].
    #[arg(long, short = 's', value_parser = parse_session, conflicts_with = "continue_last")]
    session: Option<SessionId>,
    /// Continue the most recently active session (see `toolbox sessions`).
    #[arg(long = "continue", short = 'c')]
    continue_last: bool,
    /// In auto mode: ask on the terminal, or answer yes / no without asking [default: ask].
    #[arg(long, value_enum)]
    approve: Option<Approve>,
}

#[derive(clap::Args)]
struct SessionsArgs {
    #[command(flatten)]
    common: Common,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct AgentsArgs {
    #[command(flatten)]
    common: Common,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SkillsArgs {
    #[command(flatten)]
    common: Common,
    /// Validate every skill folder: print each problem as `FILE: RULE`, exit 1 if there is any.
    #[arg(long)]
    check: bool,
}

#[derive(clap::Args)]
struct ToolsArgs {
    #[command(flatten)]
    common: Common,
    /// Only these toolsets (comma separated; a toolset, provider or tool name).
    #[arg(long, value_delimiter = ',')]
    toolsets: Option<Vec<String>>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SchemaArgs {
    #[command(flatten)]
    common: Common,
    /// openai, openai-responses, anthropic or mcp.
    #[arg(long, short = 'f', value_parser = parse_format)]
    format: SchemaFormat,
    /// Only these toolsets (comma separated): a toolset such as files, shell, python, web, or a
    /// provider or tool name. Tools the mode hides stay hidden [default: every tool].
    #[arg(long, value_delimiter = ',')]
    toolsets: Option<Vec<String>>,
    /// Strict schemas: objects closed, optional properties nullable (null means "not
    /// given"); for OpenAI and Anthropic every property required and `strict: true`, for mcp
    /// `required` as the tool declares it (so a model may leave optional ones out). The
    /// default for openai-responses and mcp.
    #[arg(long, overrides_with = "no_strict")]
    strict: bool,
    /// Loose schemas (optional properties left out of `required`), even for openai-responses
    /// and mcp.
    #[arg(long, overrides_with = "strict")]
    no_strict: bool,
}

#[derive(clap::Args)]
struct CallArgs {
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

#[derive(clap::Args)]
struct McpArgs {
    #[command(flatten)]
    common: Common,
    /// Session id for every call on this connection.
    #[arg(long, short = 's', default_value = "default", value_parser = parse_session)]
    session: SessionId,
    /// In auto mode, for a client that cannot be asked (it declared no elicitation): yes
    /// runs risky tools, no refuses them. Clients that declared elicitation are asked.
    #[arg(long, value_enum, default_value_t = Fallback::No)]
    approve: Fallback,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Approve {
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

fn parse_vocabulary(s: &str) -> Result<Vocabulary, String> {
    s.parse()
}

fn parse_format(s: &str) -> Result<SchemaFormat, String> {
    s.parse().map_err(|e: anyhow::Error| e.to_string())
}

/// Writes `text` to stdout. A reader that went away (`toolbox tools | head`) ends the
/// program quietly with exit code 0 instead of a "Broken pipe" panic.
pub(crate) fn out(text: &str) {
    out_or_exit(text, 0)
}

/// [`out`], exiting with `code` when stdout's reader went away.
pub(crate) fn out_or_exit(text: &str, code: u8) {
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            toolbox::host::containment::shutdown();
            std::process::exit(code.into());
        }
    }
}

/// A failure the user caused: bad flags, bad JSON, a bad config. Exit code 2.
pub(crate) struct UsageError(String);

pub(crate) fn usage(error: impl std::fmt::Display) -> UsageError {
    UsageError(format!("{error:#}"))
}

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
    init_tracing(stderr_is_terminal, matches!(cli.command, Command::Chat(_)));
    let code = run_to_exit(cli);
    if let Some(pump) = pump {
        // Bounded: a reader that went away must not keep toolbox alive.
        pump.flush(Duration::from_millis(500), Duration::from_secs(5));
    }
    code
}

fn run_to_exit(cli: Cli) -> ExitCode {
    // The router does little work per request and passes each one on at once: on one
    // thread a request, its pooled connection to the host and the answer never wait for a
    // wake-up on another thread, which is most of a hop's latency. More load: more routers
    // (they are stateless).
    let mut builder = match cli.command {
        Command::Router(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolbox: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Tools(args) => tools(args),
            Command::Schema(args) => schema(args),
            Command::Call(args) => call(args).await,
            Command::Mcp(args) => mcp(args).await,
            Command::Skills(args) => skills(args),
            Command::Chat(args) => chat_command(args).await,
            Command::Agents(args) => agents(args),
            Command::Serve(args) => serve(args).await,
            Command::Router(args) => router(args).await,
            Command::Sessions(args) => sessions(args),
        }
    });
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
fn init_tracing(ansi: bool, chat: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let asked = std::env::var("RUST_LOG")
        .or_else(|_| std::env::var("TOOLBOX_LOG"))
        .ok();
    let quiet_chat = chat && asked.is_none();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new(asked.unwrap_or_else(|| "warn".into())))
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .finish();
    let _ = if quiet_chat {
        subscriber
            .with(tracing_subscriber::filter::filter_fn(chat::logged))
            .try_init()
    } else {
        subscriber.try_init()
    };
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
    let mut config = ExecutorConfig::load_operator(&workspace, options).map_err(usage)?;
    if let Some(mode) = common.mode {
        config.permissions.mode = mode;
    }
    if let Some(sandbox) = &common.sandbox {
        config
            .set_provider_value("shell", "sandbox", sandbox.as_str())
            .map_err(usage)?;
        config
            .set_provider_value("python", "sandbox", sandbox.as_str())
            .map_err(usage)?;
    }
    // Last: the workspace's own toolbox.toml, which may only tighten all of the above.
    config.apply_workspace_restrictions().map_err(usage)?;
    config.vocabulary = match common.vocabulary {
        Some(vocabulary) => vocabulary,
        None => {
            toolbox::runtime::RuntimeOptions::from_config(&config)
                .map_err(usage)?
                .vocabulary
        }
    };
    withhold_denied_env(&config);
    Ok(config)
}

/// Takes the variables `[shell] deny_env` names out of toolbox's own environment, so that no
/// child it starts (not only shell commands: the Python worker, pip, kernels) and no embedded
/// Python code sees them. The default list (the secret names) is out already.
fn withhold_denied_env(config: &ExecutorConfig) {
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

fn toolset_names(toolsets: &Option<Vec<String>>) -> Option<Vec<&str>> {
    toolsets
        .as_ref()
        .map(|sets| sets.iter().map(String::as_str).collect())
}

/// `toolbox tools`: the visible tools as a table or JSON.
fn tools(args: ToolsArgs) -> Result<ExitCode, UsageError> {
    let executor = build(load_config(&args.common)?, EventSink::none())?;
    let sets = toolset_names(&args.toolsets);
    let vocabulary = executor.config().vocabulary;
    let mut tools = executor
        .resolve_agent_tools(sets.as_deref(), executor.permissions())
        .map_err(usage)?;
    tools.retain(|t| t.info.listed_in(vocabulary));
    if args.json {
        let rows: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut row = json!({
                    "name": t.info.name_in(vocabulary),
                    "risk": t.info.risk,
                    "provider": t.provider_name(),
                    "aliases": t.info.aliases,
                    "toolsets": t.info.toolsets,
                });
                if t.info.name_in(vocabulary) != t.info.name {
                    row["canonical"] = json!(t.info.name);
                }
                row
            })
            .collect();
        out(&format!("{}\n", Value::Array(rows)));
    } else {
        let width = tools
            .iter()
            .map(|t| t.info.name_in(vocabulary).len())
            .max()
            .unwrap_or(4);
        let mut table = format!("{:width$}  {:10}  PROVIDER\n", "NAME", "RISK");
        for t in &tools {
            table.push_str(&format!(
                "{:width$}  {:10}  {}\n",
                t.info.name_in(vocabulary),
                t.info.risk.as_str(),
                t.provider_name()
            ));
        }
        out(&table);
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolbox skills [--check]`: the skills and what was skipped, or with `--check` every
/// problem as `FILE: RULE` and exit code 1 if there is any.
fn skills(args: SkillsArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    #[cfg(feature = "skill")]
    {
        use toolbox::skill::{render_check, render_listing, SkillSet};
        let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
        let set =
            SkillSet::discover(&workspace, &Value::Object(config.providers)).map_err(usage)?;
        if !args.check {
            out(&render_listing(&set));
            return Ok(ExitCode::SUCCESS);
        }
        let (report, ok) = render_check(&set);
        out(&report);
        Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    }
    #[cfg(not(feature = "skill"))]
    {
        let _ = (config, args.check);
        Err(UsageError(
            "this toolbox was built without the skill provider (Cargo feature `skill`)".into(),
        ))
    }
}

/// `toolbox agents [--json]`: the agents on stdout, skipped files on stderr; exit 0 either way.
fn agents(args: AgentsArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
    let set = toolbox::host::discover_agents(&workspace, &Value::Object(config.providers));
    out(&agents_cmd::render(&set, args.json));
    eprint!("{}", agents_cmd::render_problems(&set));
    Ok(ExitCode::SUCCESS)
}

/// `toolbox sessions [--json]`: the sessions, most recently active first.
fn sessions(args: SessionsArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
    let summaries = toolbox::runtime::conversation::session_summaries(&workspace);
    if args.json {
        let rows: Vec<Value> = summaries
            .sessions
            .iter()
            .map(|s| {
                json!({
                    "id": s.id.as_str(),
                    "first_message": s.first_message,
                    "last_activity": s.last_activity_rfc3339(),
                })
            })
            .collect();
        out(&format!("{}\n", Value::Array(rows)));
        return Ok(ExitCode::SUCCESS);
    }
    if summaries.sessions.is_empty() {
        out("no sessions yet in this workspace; toolbox chat \"…\" starts one\n");
        return Ok(ExitCode::SUCCESS);
    }
    let width = summaries
        .sessions
        .iter()
        .map(|s| s.id.as_str().len())
        .max()
        .unwrap_or(7)
        .max(7);
    let mut table = format!(
        "{:width$}  {:20}  FIRST MESSAGE\n",
        "SESSION", "LAST ACTIVITY"
    );
    for s in &summaries.sessions {
        let first = s.first_message.as_deref().unwrap_or("(no conversation)");
        table.push_str(&format!(
            "{:width$}  {:20}  {}\n",
            s.id.as_str(),
            s.last_activity_rfc3339().unwrap_or_else(|| "-".into()),
            toolbox::core::preview::terminal_safe(first)
        ));
    }
    if summaries.omitted > 0 {
        table.push_str(&format!(
            "… and {} older sessions not listed\n",
            summaries.omitted
        ));
    }
    out(&table);
    Ok(ExitCode::SUCCESS)
}

/// `toolbox schema`: the visible tools rendered in one format.
fn schema(args: SchemaArgs) -> Result<ExitCode, UsageError> {
    let strict = if args.strict || args.no_strict {
        args.strict
    } else {
        args.format.strict_by_default()
    };
    let executor = build(load_config(&args.common)?, EventSink::none())?;
    let sets = toolset_names(&args.toolsets);
    let schemas = executor
        .resolve_agent_tool_schemas(
            sets.as_deref(),
            executor.permissions(),
            args.format.strict(strict),
        )
        .map_err(usage)?;
    let text = serde_json::to_string_pretty(&schemas).map_err(usage)?;
    out(&format!("{text}\n"));
    Ok(ExitCode::SUCCESS)
}

/// `toolbox call`: one call, streamed output on stderr, the envelope on stdout.
async fn call(args: CallArgs) -> Result<ExitCode, UsageError> {
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

/// `toolbox mcp`: serve until the client closes stdin or a signal arrives.
async fn mcp(args: McpArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    let fallback = mcp_fallback(args.approve, "toolbox mcp")?;
    let server =
        toolbox::mcp::stdio::McpServer::new(config, args.session, fallback).map_err(usage)?;
    // On a worker, not on this thread (block_on's): the serving task then reads, spawns
    // calls and writes replies without waking another thread.
    let mut serving = tokio::spawn(server.serve_stdio());
    tokio::select! {
        served = &mut serving => match served {
            Ok(served) => served.map_err(|e| UsageError(format!("mcp: {e:#}")))?,
            Err(e) => return Err(UsageError(format!("mcp: the server stopped: {e}"))),
        },
        // A clean stop: calls in flight are dropped (which stops their processes)
        // and main() kills whatever else the tools started.
        signal = toolbox::stop_signal() => {
            tracing::debug!(target: "toolbox", signal, "stopping the MCP server");
            serving.abort();
            let _ = serving.await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The first line of a token file, or a usage error naming the flag.
fn token_from_file(flag: &str, path: &std::path::Path) -> Result<String, UsageError> {
    Ok(std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())))?
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// `toolbox router`: the session router until SIGTERM or Ctrl-C.
async fn router(args: RouterArgs) -> Result<ExitCode, UsageError> {
    let token = match &args.token_file {
        Some(path) => Some(token_from_file("--token-file", path)?),
        None => toolbox::host::secrets::var("TOOLBOX_ROUTER_TOKEN"),
    }
    .filter(|t| !t.is_empty());
    let placement_token = match &args.placement_token_file {
        Some(path) => Some(token_from_file("--placement-token-file", path)?),
        None => None,
    }
    .filter(|t| !t.is_empty());
    let options = toolbox::router::RouterOptions {
        listen: args.listen,
        placement: args.placement,
        placement_token,
        placement_timeout: args.placement_timeout,
        token,
    };
    toolbox::router::check_options(&options).map_err(usage)?;
    let signal = toolbox::stop_signal();
    let stop = async move {
        let signal = signal.await;
        eprintln!("toolbox router: {signal}: stopping");
    };
    toolbox::router::serve(options, stop, Duration::from_secs(5))
        .await
        .map_err(|e| UsageError(format!("router: {e:#}")))?;
    Ok(ExitCode::SUCCESS)
}

/// `toolbox serve`: the HTTP sidecar until SIGTERM or Ctrl-C.
async fn serve(args: ServeArgs) -> Result<ExitCode, UsageError> {
    let from_file = match &args.token_file {
        Some(path) => Some(token_from_file("--token-file", path)?),
        None => None,
    };
    let from_fd = match args.token_fd {
        Some(fd) => Some(
            toolbox::host::secrets::take_from_fd(fd)
                .map_err(|e| UsageError(format!("--token-fd {fd}: {e}")))?,
        ),
        None => None,
    };
    let token = match &args.token_sha256 {
        Some(hex) => Some(
            toolbox::server::ServeToken::parse_sha256(hex)
                .map_err(|e| UsageError(format!("--token-sha256: {e}")))?,
        ),
        None => args
            .token
            .or(from_file)
            .or(from_fd)
            .or_else(|| toolbox::host::secrets::var("TOOLBOX_SERVE_TOKEN"))
            .filter(|t| !t.is_empty())
            .map(toolbox::server::ServeToken::Secret),
    };
    let mut options = toolbox::server::ServeOptions {
        listen: args.listen,
        token,
        cors_origins: args.cors_origins,
        mcp_fallback: mcp_fallback(args.approve, "toolbox serve")?,
        mcp_session: args.mcp_session.or(args.session.clone()),
        max_upload_bytes: args.max_upload_mb * 1024 * 1024,
        ..Default::default()
    };
    toolbox::server::check_options(&options).map_err(usage)?;
    let config = load_config(&args.common)?;
    // Host mode: claim the epoch and restore the session before anything opens the
    // workspace. A taken epoch or a damaged store serves nothing.
    let hosted = match (args.session, args.epoch, args.state_store) {
        (Some(session), Some(epoch), Some(store_url)) => {
            let host_options = toolbox::server::host::HostOptions {
                session,
                epoch,
                store_url,
                sync_every: args.sync_every.max(std::time::Duration::from_millis(100)),
            };
            let rules =
                toolbox::server::sync::StoreRules::from_table(config.providers.get("store"))
                    .map_err(usage)?;
            let (host, restored) =
                toolbox::server::host::Host::start(&host_options, &config.workspace, rules)
                    .await
                    .map_err(|e| UsageError(format!("serve: {e}")))?;
            if restored.from_epoch > 0 {
                eprintln!(
                    "toolbox serve: session {} resumed at epoch {}: {} files, {} bytes \
                     restored in {} ms (from epoch {})",
                    host.session(),
                    host.epoch(),
                    restored.files,
                    restored.bytes,
                    restored.elapsed_ms,
                    restored.from_epoch
                );
            }
            options.host = Some(host.clone());
            Some((host, restored))
        }
        _ => None,
    };
    // The restore may have brought the workspace's own toolbox.toml (which may only
    // tighten): read the configuration again now, so it holds from the first call.
    let config = if hosted.is_some() {
        load_config(&args.common)?
    } else {
        config
    };
    let llm = chat::llm_client(&config);
    if let Err(why) = &llm {
        eprintln!("toolbox serve: no model, so turns are refused until one is configured: {why}");
    }
    let executor = ToolExecutor::new(config).map_err(usage)?;
    let mut runtime_options =
        toolbox::runtime::RuntimeOptions::from_config(executor.config()).map_err(usage)?;
    // --vocabulary wins over [runtime] vocabulary (load_config settled it).
    runtime_options.vocabulary = executor.config().vocabulary;
    let runtime = toolbox::runtime::Runtime::new(executor, llm, runtime_options);
    let syncing = hosted.as_ref().map(|(host, restored)| {
        host.announce(&runtime, restored);
        host.spawn(runtime.clone())
    });
    // Installed now, before binding: a SIGTERM right after "listening" still stops cleanly.
    let signal = toolbox::stop_signal();
    let stop = async move {
        let signal = signal.await;
        eprintln!("toolbox serve: {signal}: stopping");
    };
    toolbox::server::serve(runtime.clone(), options, stop)
        .await
        .map_err(|e| UsageError(format!("serve: {e:#}")))?;
    if let Some((host, _)) = hosted {
        host.park();
        if let Some(syncing) = syncing {
            let _ = syncing.await;
        }
        if let Some(newer) = host.superseded() {
            eprintln!("toolbox serve: superseded by epoch {newer}: exiting");
            return Ok(ExitCode::from(3));
        }
        match host.finish(&runtime).await {
            Ok(report) => {
                if let Some(r) = report {
                    eprintln!(
                        "toolbox serve: session {} synced: {} files, {} bytes uploaded",
                        host.session(),
                        r.files,
                        r.uploaded_bytes
                    );
                }
            }
            Err(e) => {
                if let Some(newer) = host.superseded() {
                    eprintln!("toolbox serve: superseded by epoch {newer}: exiting");
                    return Ok(ExitCode::from(3));
                }
                eprintln!("toolbox serve: the last sync failed: {e}");
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolbox chat`: one turn in the terminal.
async fn chat_command(args: ChatArgs) -> Result<ExitCode, UsageError> {
    let message = match args.message.as_str() {
        "-" => {
            let mut buf = String::new();
            std::io::stdin()
                .read_to_string(&mut buf)
                .map_err(|e| UsageError(format!("cannot read the message from stdin: {e}")))?;
            buf
        }
        text => text.to_string(),
    };
    let config = load_config(&args.common)?;
    let approve = terminal_approve(args.approve, &config, "chat")?;
    let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
    let session = match (args.session, args.continue_last) {
        (Some(session), _) => session,
        (None, true) => {
            let summaries = toolbox::runtime::conversation::session_summaries(&workspace);
            let latest = summaries
                .sessions
                .into_iter()
                .find(|s| s.first_message.is_some())
                .ok_or_else(|| {
                    UsageError(
                        "--continue: this workspace has no conversation to continue yet; \
                         start one with toolbox chat \"your message\""
                            .into(),
                    )
                })?;
            eprintln!("toolbox: continuing session {}", latest.id);
            latest.id
        }
        (None, false) => {
            let session = chat::new_session_id(&workspace)?;
            eprintln!(
                "toolbox: new session {session}; continue it with toolbox chat --session \
                 {session} \"…\" (or toolbox chat --continue)"
            );
            session
        }
    };
    chat::chat(
        config,
        chat::ChatOptions {
            session,
            agent: args.agent,
            approve,
            message,
        },
    )
    .await
}

/// `--approve` of `call` and `chat`: ask by default. An explicit `ask` that cannot be asked
/// (no terminal, and the mode asks) is refused now, not turned into a silent `no` later.
fn terminal_approve(
    approve: Option<Approve>,
    config: &ExecutorConfig,
    command: &str,
) -> Result<Approve, UsageError> {
    if approve == Some(Approve::Ask)
        && config.permissions.mode == PermissionMode::Auto
        && !terminal::available()
    {
        return Err(UsageError(format!(
            "--approve ask needs a terminal to ask on, and toolbox {command} has none (no \
             /dev/tty); use --approve yes or no, or --mode full or read_only"
        )));
    }
    Ok(approve.unwrap_or(Approve::Ask))
}

/// Why `--approve ask` is no choice for an MCP server.
/// `--approve` of `toolbox mcp` and `toolbox serve` (`command`): what an MCP client that
/// cannot be asked gets; `ask` is refused with an explanation.
fn mcp_fallback(approve: Fallback, command: &str) -> Result<toolbox::mcp::Fallback, UsageError> {
    match approve {
        Fallback::Yes => Ok(toolbox::mcp::Fallback::Approve),
        Fallback::No => Ok(toolbox::mcp::Fallback::Deny),
        Fallback::Ask => Err(UsageError(format!(
            "{command} --approve ask: an MCP server asks the client itself when the client \
             declared elicitation; --approve says what happens with a client that did not, and \
             must be yes (run risky tools) or no (refuse them)"
        ))),
    }
}

fn build(config: ExecutorConfig, events: EventSink) -> Result<ToolExecutor, UsageError> {
    ToolExecutor::with_events(config, events).map_err(usage)
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
