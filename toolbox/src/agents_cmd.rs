//! `toolbox agents`: the agent definitions ([`AgentSet`]) as a table or as JSON, and the
//! skipped files as `FILE: REASON` lines for stderr.

use serde_json::Value;
use toolbox::core::{AgentDef, AgentSet};

/// The longest description shown in the table, in characters.
const DESCRIPTION_CHARS: usize = 100;

/// What goes to stdout: a table (NAME, TOOLSETS, SOURCE, DESCRIPTION), or with `json` an
/// array of each agent's [`AgentDef::summary`].
pub(crate) fn render(set: &AgentSet, json: bool) -> String {
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
pub(crate) fn render_problems(set: &AgentSet) -> String {
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
