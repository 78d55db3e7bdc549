//! `toolbox router`: the session router (toolbox-router) until SIGTERM or Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use super::{token_from_file, usage, UsageError};

#[derive(clap::Args)]
pub(crate) struct RouterArgs {
    /// Address to listen on. Anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:7900")]
    listen: std::net::SocketAddr,
    /// The placement adapter's base URL (it serves POST /v1/sessions/{sid}:ensure, …).
    #[arg(long)]
    placement: String,
    /// Read the adapter's bearer token from this file (its first line).
    #[arg(long)]
    placement_token_file: Option<PathBuf>,
    /// How long one call to the adapter may take (placing a session starts a session
    /// server).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    placement_timeout: std::time::Duration,
    /// Read the clients' bearer token from this file (its first line) [env:
    /// TOOLBOX_ROUTER_TOKEN]. Required to listen beyond loopback.
    #[arg(long)]
    token_file: Option<PathBuf>,
}

/// `toolbox router`: the session router until SIGTERM or Ctrl-C.
pub(super) async fn run(args: RouterArgs) -> Result<ExitCode, UsageError> {
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
