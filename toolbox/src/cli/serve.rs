//! `toolbox serve`: the HTTP sidecar (toolbox-server) until SIGTERM or Ctrl-C; with
//! `--session`, `--epoch` and `--state-store`, session server mode.

use std::path::PathBuf;
use std::process::ExitCode;

use toolbox::core::SessionId;
use toolbox::ToolExecutor;

use super::mcp::{mcp_fallback, Fallback};
use super::{load_config, parse_session, token_from_file, usage, Common, UsageError};
use crate::chat;

#[derive(clap::Args)]
pub(crate) struct ServeArgs {
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
    /// token: for a session server whose placement adapter keeps the token to itself.
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
    /// Session server mode: serve this one session only (others get 404; /mcp runs in it),
    /// its state kept in --state-store so it can resume on another machine
    /// (docs/scale-out.md).
    #[arg(long, value_parser = parse_session, requires_all = ["epoch", "state_store"])]
    session: Option<SessionId>,
    /// Session server mode: this server's epoch, higher than any of the session's servers
    /// before it, or `next`: the lowest epoch above every one claimed in the store so far.
    #[arg(long, requires = "session")]
    epoch: Option<toolbox::server::sync::Epoch>,
    /// Session server mode: the state store, file:///folder or s3://bucket/prefix (AWS_*
    /// environment).
    #[arg(long, requires = "session")]
    state_store: Option<String>,
    /// Session server mode: how often to sync whatever happens, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, requires = "session")]
    sync_every: std::time::Duration,
}

/// `toolbox serve`: the HTTP sidecar until SIGTERM or Ctrl-C.
pub(super) async fn run(args: ServeArgs) -> Result<ExitCode, UsageError> {
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
    // Session server mode: claim the epoch and restore the session before anything opens
    // the workspace. A taken epoch or a damaged store serves nothing.
    let session_server = match (args.session, args.epoch, args.state_store) {
        (Some(session), Some(epoch), Some(store_url)) => {
            let server_options = toolbox::server::session_server::SessionServerOptions {
                session,
                epoch,
                store_url,
                sync_every: args.sync_every.max(std::time::Duration::from_millis(100)),
            };
            let rules =
                toolbox::server::sync::StoreRules::from_table(config.providers.get("store"))
                    .map_err(usage)?;
            let (server, restored) = toolbox::server::session_server::SessionServer::start(
                &server_options,
                &config.workspace,
                rules,
            )
            .await
            .map_err(|e| UsageError(format!("serve: {e}")))?;
            if restored.from_epoch > 0 {
                eprintln!(
                    "toolbox serve: session {} resumed at epoch {}: {} files, {} bytes \
                     restored in {} ms (from epoch {})",
                    server.session(),
                    server.epoch(),
                    restored.files,
                    restored.bytes,
                    restored.elapsed_ms,
                    restored.from_epoch
                );
            }
            options.session_server = Some(server.clone());
            Some((server, restored))
        }
        _ => None,
    };
    // The restore may have brought the workspace's own toolbox.toml (which may only
    // tighten): read the configuration again now, so it holds from the first call.
    let config = if session_server.is_some() {
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
    let syncing = session_server.as_ref().map(|(server, restored)| {
        server.announce(&runtime, restored);
        server.spawn(runtime.clone())
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
    if let Some((server, _)) = session_server {
        server.park();
        if let Some(syncing) = syncing {
            let _ = syncing.await;
        }
        if let Some(newer) = server.superseded() {
            eprintln!("toolbox serve: superseded by epoch {newer}: exiting");
            return Ok(ExitCode::from(3));
        }
        match server.finish(&runtime).await {
            Ok(report) => {
                if let Some(r) = report {
                    eprintln!(
                        "toolbox serve: session {} synced: {} files, {} bytes uploaded",
                        server.session(),
                        r.files,
                        r.uploaded_bytes
                    );
                }
            }
            Err(e) => {
                if let Some(newer) = server.superseded() {
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
