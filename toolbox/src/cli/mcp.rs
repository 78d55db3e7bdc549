//! `toolbox mcp`: every visible tool over MCP on stdin and stdout, until the client closes
//! stdin or a signal arrives; and `--approve`, which `toolbox serve`'s `/mcp` shares.

use std::process::ExitCode;

use clap::ValueEnum;
use toolbox::core::SessionId;

use super::{load_config, parse_session, usage, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct McpArgs {
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

/// What `toolbox mcp` and `toolbox serve`'s /mcp do with a risky call in auto mode when the
/// client cannot be asked.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Fallback {
    Yes,
    No,
    /// Not a choice: accepted only to refuse it with an explanation.
    #[value(hide = true)]
    Ask,
}

/// `toolbox mcp`: serve until the client closes stdin or a signal arrives.
pub(super) async fn run(args: McpArgs) -> Result<ExitCode, UsageError> {
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

/// `--approve` of `toolbox mcp` and `toolbox serve` (`command`): what an MCP client that
/// cannot be asked gets; `ask` is refused with an explanation.
pub(super) fn mcp_fallback(
    approve: Fallback,
    command: &str,
) -> Result<toolbox::mcp::Fallback, UsageError> {
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
