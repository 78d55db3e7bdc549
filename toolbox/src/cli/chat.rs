//! `toolbox chat`'s flags, the message (or stdin), and the session it runs in: a new one, the
//! one named, or the latest (`--continue`). The turn itself is `crate::chat`'s.

use std::io::Read;
use std::process::ExitCode;

use toolbox::core::SessionId;

use super::{load_config, parse_session, terminal_approve, usage, Approve, Common, UsageError};
use crate::chat;

#[derive(clap::Args)]
pub(crate) struct ChatArgs {
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

/// `toolbox chat`: one turn in the terminal.
pub(super) async fn run(args: ChatArgs) -> Result<ExitCode, UsageError> {
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
