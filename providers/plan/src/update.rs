//! `plan__update`: change step statuses and notes, add or remove steps.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, Vocabulary};
use toolbox_host::ToolContext;

use crate::state::{MAX_STEPS, MAX_TITLE_CHARS};
use crate::{
    changed_result, new_step, note, status, steps_prop, text, PlanProvider, STEPS, TOOLSET,
};

pub(crate) const NAME: &str = "plan__update";
/// New steps, each a title or an object (as `steps` of `plan__set`).
const ADD: Arg = Arg::json("add");
const REMOVE: Arg = Arg::strings("remove");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Update this session's plan: change steps by id (status, note, title), add steps at \
         the end, remove steps by id. At most one step may be in_progress: mark the finished \
         one completed in the same call as you start the next. Status and note changes keep \
         a confirmed plan confirmed; adding, removing or retitling steps makes it a draft \
         again (the result says so).",
        object(&[
            steps_prop(STEPS, "Changes to existing steps, each by id.", true),
            steps_prop(ADD, "New steps, added at the end.", false),
            REMOVE.doc("Ids of steps to remove."),
        ]),
    )
    .toolsets(&[TOOLSET, crate::data_agent::TOOLSET])
    .named(Vocabulary::DataAgent, crate::data_agent::UPDATE)
}

pub(crate) fn run(p: &PlanProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let changes = array(STEPS.opt_value(&a), STEPS.name)?;
    let add = array(ADD.opt_value(&a), ADD.name)?;
    let remove: Vec<String> = REMOVE
        .opt_str_list(&a)?
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.trim().to_string())
        .collect();
    a.finish()?;
    if changes.is_empty() && add.is_empty() && remove.is_empty() {
        bail!("{NAME} requires steps, add or remove");
    }
    let (plan, notices) = p.edit(ctx, |plan| {
        if plan.steps.is_empty() && add.is_empty() {
            bail!(
                "{NAME}: this session has no steps yet; set them with {}",
                crate::state::set_call(plan.said_in, Some(crate::state::Part::Plan))
            );
        }
        let mut structure_changed = false;
        for (i, change) in changes.iter().enumerate() {
            let at = format!("steps[{i}]");
            let Value::Object(fields) = change else {
                bail!("{NAME}: {at} must be an object with id and the fields to change");
            };
            for key in fields.keys() {
                if !["id", "title", "status", "note"].contains(&key.as_str()) {
                    bail!("{NAME}: {at} has an unknown field {key:?} (id, title, status, note)");
                }
            }
            let id = match fields.get("id") {
                Some(Value::String(s)) => s.trim().to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => bail!("{NAME}: {at} needs the id of the step to change"),
            };
            let known: Vec<String> = plan.steps.iter().map(|s| s.id.clone()).collect();
            let step = plan.steps.iter_mut().find(|s| s.id == id).ok_or_else(|| {
                anyhow!(
                    "{NAME}: {at}: no step has id {id:?} (the ids are {})",
                    known.join(", ")
                )
            })?;
            if let Some(new) = status(NAME, &at, fields.get("status"))? {
                step.status = new;
            }
            if fields.get("note").is_some_and(|v| !v.is_null()) {
                step.note = note(NAME, &at, fields.get("note"))?;
            }
            if let Some(title) = fields.get("title").filter(|v| !v.is_null()) {
                let title = text(NAME, &format!("{at}.title"), title, MAX_TITLE_CHARS)?;
                if title != step.title {
                    step.title = title;
                    structure_changed = true;
                }
            }
        }
        for id in &remove {
            let before = plan.steps.len();
            plan.steps.retain(|s| &s.id != id);
            if plan.steps.len() == before {
                bail!("{NAME}: remove: no step has id {id:?}");
            }
            structure_changed = true;
        }
        for (i, item) in add.iter().enumerate() {
            if plan.steps.len() >= MAX_STEPS {
                bail!("{NAME}: a plan holds at most {MAX_STEPS} steps");
            }
            let id = plan.new_id();
            let step = new_step(NAME, &format!("add[{i}]"), item, id)?;
            plan.steps.push(step);
            structure_changed = true;
        }
        plan.check_one_in_progress()
            .map_err(|e| anyhow!("{NAME}: {e}"))?;
        Ok(if structure_changed {
            plan.steps_changed().into_iter().collect::<Vec<_>>()
        } else {
            vec![]
        })
    })?;
    Ok(changed_result(&plan, &notices))
}

fn array(value: Option<&Value>, name: &str) -> Result<Vec<Value>> {
    match value {
        None => Ok(vec![]),
        Some(Value::Array(items)) if items.len() <= MAX_STEPS => Ok(items.clone()),
        Some(Value::Array(items)) => {
            bail!(
                "{NAME}: {name} has {} items, at most {MAX_STEPS}",
                items.len()
            )
        }
        Some(other) => bail!(
            "{NAME}: {name} must be an array, got {}",
            toolbox_core::json_kind(other)
        ),
    }
}
