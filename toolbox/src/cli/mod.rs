//! The CLI: its flags ([`Cli`], [`Command`], the [`Common`] ones every subcommand shares)
//! and one module per subcommand, each with its flags and its `run`. What subcommands share
//! is here: the configuration they load, stdout, usage errors, `--approve`.

mod agents;
mod call;
mod chat;
mod doctor;
mod mcp;
mod router;
mod schema;
mod serve;
mod sessions;
mod skills;
mod tools;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use toolbox::core::{SessionId, Vocabulary};
use toolbox::host::EventSink;
use toolbox::{ExecutorConfig, LoadOptions, PermissionMode, ToolExecutor};

use crate::terminal;

#[derive(Parser)]
#[command(
    name = "toolbox",
    version,
    about = "The tool-execution layer for LLM agents."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(clap::Args, Clone)]
pub(super) struct Common {
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
pub(crate) enum Command {
    /// List the tools visible in this mode: name, risk and provider.
    Tools(tools::ToolsArgs),
    /// Print the tool schemas as a JSON array.
    Schema(schema::SchemaArgs),
    /// Call one tool and print {"status": ..., "result": ...} on stdout (exit 0 done, 1 error).
    Call(call::CallArgs),
    /// Serve every visible tool over MCP on stdin/stdout.
    Mcp(mcp::McpArgs),
    /// List the skills (SKILL.md folders) of the workspace and the configured skill folders.
    Skills(skills::SkillsArgs),
    /// Run one turn of an agent: the model's text streams, tool calls are shown, risky calls
    /// are asked on the terminal. The model comes from [llm] / TOOLBOX_LLM_*.
    Chat(chat::ChatArgs),
    /// List the agents (.toolbox/agents/*.md, the configured [agents] dirs and the built-in
    /// default); skipped files go to stderr as `FILE: REASON`.
    Agents(agents::AgentsArgs),
    /// Serve the HTTP sidecar: the API, live events over SSE, approvals over HTTP, the web
    /// console at /, and MCP over streamable HTTP at /mcp.
    Serve(serve::ServeArgs),
    /// Serve many session servers behind one address: each session's requests go to the
    /// session server a placement adapter (Ray, Kubernetes, your own) placed it on
    /// (docs/scale-out.md).
    Router(router::RouterArgs),
    /// List the workspace's sessions, most recently active first: id, last activity and the
    /// start of the first message.
    Sessions(sessions::SessionsArgs),
    /// Say what each provider finds around it: which Python and backend, which language
    /// servers are installed. Changes nothing.
    Doctor(doctor::DoctorArgs),
}

impl Command {
    /// Runs the subcommand to its exit code, or the usage error that stopped it.
    pub(crate) async fn run(self) -> Result<ExitCode, UsageError> {
        match self {
            Command::Tools(args) => tools::run(args),
            Command::Schema(args) => schema::run(args),
            Command::Call(args) => call::run(args).await,
            Command::Mcp(args) => mcp::run(args).await,
            Command::Skills(args) => skills::run(args),
            Command::Chat(args) => chat::run(args).await,
            Command::Agents(args) => agents::run(args),
            Command::Serve(args) => serve::run(args).await,
            Command::Router(args) => router::run(args).await,
            Command::Sessions(args) => sessions::run(args),
            Command::Doctor(args) => doctor::run(args).await,
        }
    }

    /// Whether it runs on a runtime of one thread: the router (see `run_to_exit` in main.rs).
    pub(crate) fn runs_on_one_thread(&self) -> bool {
        matches!(self, Command::Router(_))
    }

    /// Whether it is `toolbox chat`, which says some warnings in its own words.
    pub(crate) fn is_chat(&self) -> bool {
        matches!(self, Command::Chat(_))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Approve {
    Ask,
    Yes,
    No,
}

pub(super) fn parse_mode(s: &str) -> Result<PermissionMode, String> {
    s.parse().map_err(|e: anyhow::Error| e.to_string())
}

pub(super) fn parse_session(s: &str) -> Result<SessionId, String> {
    SessionId::parse(s).map_err(|e| e.to_string())
}

pub(super) fn parse_vocabulary(s: &str) -> Result<Vocabulary, String> {
    s.parse()
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
pub(crate) struct UsageError(pub(crate) String);

pub(crate) fn usage(error: impl std::fmt::Display) -> UsageError {
    UsageError(format!("{error:#}"))
}

pub(super) fn load_config(common: &Common) -> Result<ExecutorConfig, UsageError> {
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
    crate::withhold_denied_env(&config);
    Ok(config)
}

pub(super) fn toolset_names(toolsets: &Option<Vec<String>>) -> Option<Vec<&str>> {
    toolsets
        .as_ref()
        .map(|sets| sets.iter().map(String::as_str).collect())
}

/// `--approve` of `call` and `chat`: ask by default. An explicit `ask` that cannot be asked
/// (no terminal, and the mode asks) is refused now, not turned into a silent `no` later.
pub(super) fn terminal_approve(
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

/// The first line of a token file, or a usage error naming the flag.
pub(super) fn token_from_file(flag: &str, path: &std::path::Path) -> Result<String, UsageError> {
    Ok(std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{flag} {}: {e}", path.display())))?
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

pub(super) fn build(config: ExecutorConfig, events: EventSink) -> Result<ToolExecutor, UsageError> {
    ToolExecutor::with_events(config, events).map_err(usage)
}
