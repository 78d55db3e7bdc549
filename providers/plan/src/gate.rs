//! The gate: with `[plan] require_confirmed` set, a call of a listed risk class or tool is
//! refused until the part `[plan] require` names is confirmed by a person. The executor
//! consults it (as a [`CallGate`](toolbox_host::CallGate)) before any approval is asked, in
//! every front end: turns, `toolbox mcp`, `toolbox call`, `/mcp`.

use toolbox_host::GateCall;

use crate::state::{self, Part, Plan, ReviewState};
use crate::{settings, Settings};

/// The refusal for `call`, or `None` to let it through.
pub fn check(call: &GateCall<'_>) -> Option<String> {
    let info = call.tool;
    // The plan's own tools are never held back: they are how the gate opens.
    if info.toolsets.iter().any(|t| t == crate::TOOLSET) {
        return None;
    }
    let settings = match settings(&call.ctx.config) {
        Ok(s) => s,
        // A broken table holds back every risky call rather than none.
        Err(e) if info.risk.is_risky() => {
            return Some(format!(
                "tool {} was held back: the [plan] table is invalid ({e:#})",
                info.name
            ))
        }
        Err(_) => return None,
    };
    // A tool is listed by any name it answers to: canonical, alias or another vocabulary's
    // (`bash` holds `shell`).
    let names = info.dispatch_names();
    let listed = settings.require_confirmed.iter().find(|entry| {
        toolbox_core::ToolRisk::parse(entry) == Some(info.risk) || names.contains(&entry.as_str())
    })?;
    // Named as the call named it (`bash`, not `shell`).
    let shown = call.ctx.called_as.as_deref().unwrap_or(&info.name);
    let mut plan = match state::load(&call.ctx.workspace) {
        Ok(plan) => plan,
        Err(e) => {
            return Some(format!(
                "tool {shown} is held back until this session's {} is confirmed, and the plan \
                 could not be read ({e:#})",
                settings.require
            ))
        }
    };
    plan.said_in = call.ctx.vocabulary();
    refusal(&settings, &plan, shown, listed)
}

/// Checks `[plan]` when toolbox starts: every `require_confirmed` entry must be a risk class
/// or a name some linked tool answers to (canonical, alias, or another vocabulary's).
pub fn validate(
    config: &serde_json::Value,
    tools: &[&toolbox_core::ToolInfo],
) -> Result<(), String> {
    let settings = settings(config).map_err(|e| format!("{e:#}"))?;
    let unknown: Vec<&str> = settings
        .require_confirmed
        .iter()
        .map(String::as_str)
        .filter(|entry| {
            toolbox_core::ToolRisk::parse(entry).is_none()
                && !tools.iter().any(|t| t.dispatch_names().contains(entry))
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let quoted: Vec<String> = unknown.iter().map(|e| format!("{e:?}")).collect();
    Err(format!(
        "[plan] require_confirmed lists {} that {} neither a risk class (read, file_write, \
         code, command) nor a tool linked into this toolbox (by its name, an alias or its \
         name in another vocabulary; `toolbox tools` lists them), so the gate would hold \
         nothing back for {}",
        quoted.join(", "),
        if unknown.len() == 1 { "is" } else { "are" },
        if unknown.len() == 1 { "it" } else { "them" },
    ))
}

/// Whether `plan` opens the gate of `settings`; else the refusal for `tool`.
pub fn refusal(settings: &Settings, plan: &Plan, tool: &str, listed: &str) -> Option<String> {
    let goal = plan.goal_review.state;
    let steps = plan.plan_review.state;
    let missing: Vec<(Part, ReviewState)> = match settings.require {
        Part::Goal => vec![(Part::Goal, goal)],
        Part::Plan if plan.goal.is_some() => vec![(Part::Goal, goal), (Part::Plan, steps)],
        Part::Plan => vec![(Part::Plan, steps)],
    }
    .into_iter()
    .filter(|(_, state)| *state != ReviewState::Confirmed)
    .collect();
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(part, state)| format!("the {part} is {}", state.as_str()))
        .collect();
    let first = missing[0].0;
    let empty = match first {
        Part::Goal => plan.goal.is_none(),
        Part::Plan => plan.steps.is_empty(),
    };
    let review = state::review_call(plan.said_in, first);
    let next = if empty {
        format!(
            "set the {first} with {}, then call {review} and wait for the person's answer",
            state::set_call(plan.said_in, Some(first))
        )
    } else {
        format!("call {review} and wait for the person's answer")
    };
    Some(format!(
        "tool {tool} is held back until a person confirms this session's {} ([plan] \
         require_confirmed lists {listed:?}), and {}. To go on, {next}.",
        settings.require,
        parts.join(" and ")
    ))
}
