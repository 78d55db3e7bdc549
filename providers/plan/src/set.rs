//! `plan__set`: set the goal and/or the steps, replacing them.

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, Vocabulary};
use toolbox_host::ToolContext;

use crate::state::{MAX_GOAL_CHARS, MAX_STEPS};
use crate::{changed_result, new_step, steps_prop, text, PlanProvider, STEPS, TOOLSET};

pub(crate) const NAME: &str = "plan__set";
/// The goal, in a few sentences (the data agent's `data_agent_prepare_generation_goal`
/// requires it).
pub(crate) const GOAL: Arg = Arg::string("goal");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Set this session's goal and/or its plan (the steps), replacing what was there. Give \
         at least one of goal and steps. Steps get ids 1, 2, …; each may carry a status \
         (pending, in_progress, completed, blocked; at most one in_progress) and a note. A \
         goal or plan a person confirmed goes back to draft when it changes here (the result \
         says so). Use plan__update to mark progress, plan__request_review to have a person \
         confirm the goal or the plan.",
        object(&[
            GOAL.doc("What the work is for, in a few sentences."),
            steps_prop(STEPS, "The steps, in order; replaces every step.", false),
        ]),
    )
    .toolsets(&[TOOLSET])
    // The data agent sets the two parts with two tools of its own (data_agent.rs).
    .unlisted_in(Vocabulary::DataAgent)
}

pub(crate) fn run(p: &PlanProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    // Both are checked by `apply`, whose messages name them.
    let goal = GOAL.opt_value(&a);
    let steps = STEPS.opt_value(&a);
    a.finish()?;
    if goal.is_none() && steps.is_none() {
        bail!("{NAME} requires goal or steps (or both)");
    }
    apply(p, ctx, NAME, goal, steps)
}

/// Sets the goal and/or the steps given; `name` is the tool's, for messages.
pub(crate) fn apply(
    p: &PlanProvider,
    ctx: &ToolContext,
    name: &str,
    goal: Option<&Value>,
    steps: Option<&Value>,
) -> Result<Value> {
    let goal = goal
        .map(|g| text(name, "goal", g, MAX_GOAL_CHARS))
        .transpose()?;
    let steps = match steps {
        None => None,
        Some(Value::Array(items)) => {
            if items.len() > MAX_STEPS {
                bail!(
                    "{name}: steps has {} items, at most {MAX_STEPS}",
                    items.len()
                );
            }
            Some(items.clone())
        }
        Some(other) => bail!(
            "{name}: steps must be an array of steps, got {}",
            toolbox_core::json_kind(other)
        ),
    };
    let (plan, notices) = p.edit(ctx, |plan| {
        let mut notices = vec![];
        if let Some(goal) = goal {
            notices.extend(plan.set_goal(goal));
        }
        if let Some(items) = steps {
            let mut new = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let id = (i + 1).to_string();
                new.push(new_step(name, &format!("steps[{i}]"), item, id)?);
            }
            let same = new.len() == plan.steps.len()
                && new.iter().zip(&plan.steps).all(|(a, b)| a.title == b.title);
            plan.steps = new;
            plan.next_id = plan.steps.len() as u64;
            plan.check_one_in_progress()
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            if !same {
                notices.extend(plan.steps_changed());
            }
        }
        Ok(notices)
    })?;
    Ok(changed_result(&plan, &notices))
}
