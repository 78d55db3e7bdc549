//! `session__info`: where the session is and what it may do.

use anyhow::Result;
use serde_json::{json, Map, Value};
use toolbox_core::schema::object;
use toolbox_core::{Args, ToolInfo};
use toolbox_host::{limits::Limits, ToolContext};

use crate::{settings, state, TOOLSET};

pub(crate) const NAME: &str = "session__info";

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Where this session is and what it may do: the session id; the permission mode and, \
         per risk class (read, file_write, code, command), whether a call runs, asks a person \
         first, or is refused; the shell sandbox and the resource limits; the real paths of \
         the workspace and of this session's output/, scratchpad/ and input/ folders (a \
         relative path like output/report.md lands in that output folder); and the review \
         state of the plan, with any tools held back until it is confirmed.",
        object(&[]),
    )
    .toolsets(&[TOOLSET])
}

pub(crate) fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    Args::new(NAME, &args)?.finish()?;
    let ws = &ctx.workspace;
    let risks: Map<String, Value> = ctx
        .policy
        .risks
        .iter()
        .map(|(risk, decision)| (risk.to_string(), Value::String(decision.to_string())))
        .collect();
    let shell = ctx.config.get("shell");
    let sandbox = shell
        .and_then(|s| s.get("sandbox"))
        .and_then(Value::as_str)
        .unwrap_or("off");
    let sandbox_network = shell
        .and_then(|s| s.get("sandbox_network"))
        .and_then(Value::as_bool);
    let limits = match Limits::from_config(&ctx.config) {
        Ok(l) if l.is_none() => Value::String("none set".into()),
        Ok(l) => Value::String(l.summary()),
        Err(e) => Value::String(format!("invalid: {e:#}")),
    };
    let plan = state::load(ws)?;
    let gate = match settings(&ctx.config) {
        Ok(s) if s.require_confirmed.is_empty() => json!({"enabled": false}),
        Ok(s) => json!({
            "enabled": true,
            "held_back": s.require_confirmed,
            "until_confirmed": s.require.to_string(),
            "open": crate::gate::refusal(&s, &plan, "", "").is_none(),
        }),
        Err(e) => json!({"invalid": format!("{e:#}")}),
    };
    let path = |kind: &str| Value::String(ws.session_dir(kind).display().to_string());
    let mut out = json!({
        "session_id": ctx.session_id.as_str(),
        "permission_mode": ctx.policy.mode.map_or("unknown", |mode| mode.as_str()),
        "risk_classes": risks,
        "sandbox": sandbox,
        "limits": limits,
        "paths": {
            "workspace": ws.root().display().to_string(),
            "output": path("output"),
            "scratchpad": path("scratchpad"),
            "input": path("input"),
        },
        "plan": {
            "goal": plan.goal_review.state.as_str(),
            "plan": plan.plan_review.state.as_str(),
            "steps": plan.steps.len(),
            "gate": gate,
        },
    });
    if let Some(network) = sandbox_network {
        out["sandbox_network"] = Value::Bool(network);
    }
    Ok(out)
}
