//! `toolbox agents`: the agent definitions ([`AgentSet`]) as a table or as JSON, and the
//! skipped files as `FILE: REASON` lines for stderr.

use std::process::ExitCode;

use serde_json::Value;
use toolbox::core::{AgentDef, AgentSet};

use super::{load_config, out, usage, Common, UsageError};

#[derive(clap::Args)]
pub(crate) struct AgentsArgs {
    #[command(flatten)]
    common: Common,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

/// `toolbox agents [--json]`: the agents on stdout, skipped files on stderr; exit 0 either way.
pub(super) fn run(args: AgentsArgs) -> Result<ExitCode, UsageError> {
    let config = load_config(&args.common)?;
    let workspace = toolbox::host::Workspace::new(&config.workspace).map_err(usage)?;
    let set = toolbox::host::discover_agents(&workspace, &Value::Object(config.providers));
    out(&render(&set, args.json));
    eprint!("{}", render_problems(&set));
    Ok(ExitCode::SUCCESS)
}

/// The longest description shown in the table, in characters.
const DESCRIPTION_CHARS: usize = 100;

/// What goes to stdout: a table (NAME, TOOLSETS, SOURCE, DESCRIPTION), or with `json` an
/// array of each agent's [`AgentDef::summary`].
fn render(set: &AgentSet, json: bool) -> String {
    if json {
        let rows: Vec<Value> = set.agents().iter().map(AgentDef::summary).collect();
        return format!("{}\n", Value::Array(rows));
    }
    let rows: Vec<[String; 4]> = set
        .agents()
        .iter()
        .map(|a| {
            [
                a.name.to_string(),
                toolsets(a),
                a.source.clone(),
                one_line(&a.description),
            ]
        })
        .collect();
    let header = ["NAME", "TOOLSETS", "SOURCE", "DESCRIPTION"].map(str::to_string);
    let width = |i: usize| {
        rows.iter()
            .chain(std::iter::once(&header))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (w0, w1, w2) = (width(0), width(1), width(2));
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        out.push_str(&format!(
            "{:w0$}  {:w1$}  {:w2$}  {}\n",
            row[0], row[1], row[2], row[3]
        ));
    }
    out
}

/// What goes to stderr: one `FILE: REASON` line per skipped file (empty when none).
fn render_problems(set: &AgentSet) -> String {
    set.problems()
        .iter()
        .map(|p| format!("{}: {}\n", p.file, p.reason))
        .collect()
}

/// `all`, `-` for none, else the toolsets separated by commas.
fn toolsets(agent: &AgentDef) -> String {
    match &agent.toolsets {
        None => "all".to_string(),
        Some(sets) if sets.is_empty() => "-".to_string(),
        Some(sets) => sets.join(","),
    }
}

/// The description on one line, shortened with `…`.
fn one_line(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut short: String = flat.chars().take(DESCRIPTION_CHARS).collect();
    if flat.chars().nth(DESCRIPTION_CHARS).is_some() {
        short.push('…');
    }
    short
}
