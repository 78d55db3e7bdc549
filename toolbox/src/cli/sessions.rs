//! `toolbox sessions`: the workspace's sessions, most recently active first.

use std::process::ExitCode;

use serde_json::{json, Value};

use super::{load_config, out, usage, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct SessionsArgs {
    #[command(flatten)]
    common: Common,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// `toolbox sessions [--json]`: the sessions, most recently active first.
pub(super) fn run(args: SessionsArgs) -> Result<ExitCode, UsageError> {
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
