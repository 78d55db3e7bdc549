//! The data agent's words for the plan: its front chain of tools, listed under the
//! `data-agent` vocabulary (and accepted by every name in any vocabulary).
//!
//! | data agent | here |
//! |---|---|
//! | `data_agent_prepare_generation_goal` | sets the goal (`plan__set` with `goal`) |
//! | `data_agent_prepare_generation_plan` | sets the steps (`plan__set` with `steps`) |
//! | `data_agent_show_generation_plan` | `plan__show`'s word |
//! | `data_agent_update_generation_plan` | `plan__update`'s word |
//! | `data_agent_confirm_generation_goal` | asks a person to confirm the goal (`plan__request_review`) |
//! | `data_agent_confirm_generation_plan` | asks a person to confirm the steps |
//!
//! In the source system the model calls a `confirm` tool once the person said yes in the
//! chat. Here the confirm tools ask the person themselves, through the approval channel, and
//! wait: the model still cannot confirm anything. In that vocabulary `plan__set` and
//! `plan__request_review` are not listed, since these tools cover them.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, Vocabulary};
use toolbox_host::ToolContext;

use crate::state::{Part, MAX_GOAL_CHARS, MAX_STEPS};
use crate::{set, steps_prop, PlanProvider};

/// `plan__set`'s two arguments, one tool each, and required.
const GOAL: Arg = set::GOAL.required();
const STEPS: Arg = crate::STEPS.required();

/// The toolset of the whole `data_agent_*` family (the data provider's tools are in it too).
pub(crate) const TOOLSET: &str = "data_agent";

pub(crate) const PREPARE_GOAL: &str = "data_agent_prepare_generation_goal";
pub(crate) const PREPARE_PLAN: &str = "data_agent_prepare_generation_plan";
pub(crate) const SHOW: &str = "data_agent_show_generation_plan";
pub(crate) const UPDATE: &str = "data_agent_update_generation_plan";
pub(crate) const CONFIRM_GOAL: &str = "data_agent_confirm_generation_goal";
pub(crate) const CONFIRM_PLAN: &str = "data_agent_confirm_generation_plan";

/// What a confirm tool's description says about who confirms.
const ONLY_A_PERSON: &str = "Only a person can confirm: this tool asks the person through \
     toolbox's review channel (the console, the terminal, or the MCP client's form) and \
     waits for their answer; calling it is not a confirmation. If they approve, the part is \
     confirmed; if they reject, it stays a draft and the result carries their feedback word \
     for word: revise it and call this tool again. Where no one can be asked, the result \
     says so and the part stays pending.";

fn tool(name: &str, description: String, schema: Value) -> ToolInfo {
    ToolInfo::new(name, description, schema)
        .toolsets(&[super::TOOLSET, TOOLSET])
        .only_in(Vocabulary::DataAgent)
}

pub(crate) fn infos() -> Vec<ToolInfo> {
    vec![
        tool(
            PREPARE_GOAL,
            format!(
                "Set the generation goal of this session: what the dataset is for and what it \
                 must hold, in a few sentences. Replaces the goal; a goal a person confirmed \
                 becomes a draft again when it changes. Then have it confirmed with \
                 {CONFIRM_GOAL}."
            ),
            object(&[GOAL.doc(format!(
                "The goal, in a few sentences (at most {MAX_GOAL_CHARS} characters)."
            ))]),
        ),
        tool(
            PREPARE_PLAN,
            format!(
                "Set the generation plan of this session: the steps, in order, replacing any \
                 there were (ids 1, 2, …). A step is a title, or an object with title, \
                 status (pending, in_progress, completed, blocked) and note. Mark progress \
                 later with {UPDATE}; have the plan confirmed with {CONFIRM_PLAN}."
            ),
            object(&[steps_prop(
                STEPS,
                &format!("The steps, in order (at most {MAX_STEPS})."),
                false,
            )]),
        ),
        tool(
            CONFIRM_GOAL,
            format!("Ask the person to confirm this session's generation goal. {ONLY_A_PERSON}"),
            object(&[]),
        ),
        tool(
            CONFIRM_PLAN,
            format!("Ask the person to confirm this session's generation plan (its steps, with the goal shown above them). {ONLY_A_PERSON}"),
            object(&[]),
        ),
    ]
}

/// Runs one of this module's tools.
pub(crate) async fn run(
    p: &PlanProvider,
    tool: &str,
    args: Value,
    ctx: &ToolContext,
) -> Result<Value> {
    match tool {
        PREPARE_GOAL => prepare(p, ctx, PREPARE_GOAL, GOAL, &args),
        PREPARE_PLAN => prepare(p, ctx, PREPARE_PLAN, STEPS, &args),
        CONFIRM_GOAL => confirm(p, ctx, CONFIRM_GOAL, Part::Goal, &args).await,
        CONFIRM_PLAN => confirm(p, ctx, CONFIRM_PLAN, Part::Plan, &args).await,
        other => Err(anyhow::anyhow!("plan has no tool named {other}")),
    }
}

fn prepare(
    p: &PlanProvider,
    ctx: &ToolContext,
    name: &str,
    arg: Arg,
    args: &Value,
) -> Result<Value> {
    let a = Args::new(name, args)?;
    // `set::apply` checks the value, with messages that name it.
    let given = arg.opt_value(&a);
    a.finish()?;
    let Some(given) = given else {
        return Err(a.missing(arg.name));
    };
    if arg == GOAL {
        set::apply(p, ctx, name, Some(given), None)
    } else {
        set::apply(p, ctx, name, None, Some(given))
    }
}

async fn confirm(
    p: &PlanProvider,
    ctx: &ToolContext,
    name: &str,
    part: Part,
    args: &Value,
) -> Result<Value> {
    Args::new(name, args)?.finish()?;
    crate::request_review::ask(p, ctx, name, part).await
}
