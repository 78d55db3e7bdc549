//! `plan__request_review`: a person is asked to confirm the goal or the plan.
//!
//! The part becomes pending and the question goes through the front end's approval channel
//! as a review ([`ToolContext::ask_review`]). The lock on the plan is not held while the
//! person thinks: the answer is applied to the plan as it is then, and only if the part did
//! not change meanwhile (its revision is the one shown).

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Preview, ToolInfo, Vocabulary};
use toolbox_host::{PersonAnswer, ToolContext};

use crate::state::{now, review_tool, set_call, Part, ReviewState};
use crate::{PlanProvider, PARTS, TOOLSET};

pub(crate) const NAME: &str = "plan__request_review";
const PART: Arg = Arg::choice("part", PARTS).required();

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Ask the person to review the goal or the plan of this session, and wait for the \
         answer. The part becomes pending; if they approve, it is confirmed (tools the \
         operator holds back until then may run); if they reject, it stays a draft and the \
         result carries their feedback word for word: revise, then ask again. Only a person \
         can confirm; where no one can be asked, the result says so and the part stays \
         pending.",
        object(&[PART.doc("Which part to have confirmed.")]),
    )
    .toolsets(&[TOOLSET])
    // The data agent confirms each part with a tool of its own (data_agent.rs).
    .unlisted_in(Vocabulary::DataAgent)
}

pub(crate) async fn run(p: &PlanProvider, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let given = PART.opt_choice(&a)?;
    a.finish()?;
    let part = match given {
        Some("goal") => Part::Goal,
        Some(_) => Part::Plan,
        None => return Err(a.missing(PART.name)),
    };
    ask(p, ctx, NAME, part).await
}

/// Asks a person to confirm `part` and applies the answer; `name` is the tool's, for
/// messages.
pub(crate) async fn ask(
    p: &PlanProvider,
    ctx: &ToolContext,
    name: &str,
    part: Part,
) -> Result<Value> {
    let said_in = ctx.vocabulary();
    let again = review_tool(said_in, part);
    let (plan, asked) = p.edit(ctx, |plan| {
        match part {
            Part::Goal if plan.goal.is_none() => bail!(
                "{name}: there is no goal to review yet; set one with {}",
                set_call(said_in, Some(part))
            ),
            Part::Plan if plan.steps.is_empty() => bail!(
                "{name}: there are no steps to review yet; set them with {}",
                set_call(said_in, Some(part))
            ),
            _ => {}
        }
        let review = plan.review_mut(part);
        if review.state == ReviewState::Confirmed {
            return Ok(None);
        }
        review.state = ReviewState::Pending;
        let revision = review.revision;
        Ok(Some((revision, plan.content_digest(part))))
    })?;
    let Some((revision, shown_digest)) = asked else {
        return Ok(Value::String(format!(
            "The {part} is already confirmed and has not changed since; nothing to ask.\n{}",
            plan.render()
        )));
    };
    let shown = match part {
        Part::Goal => plan.goal.clone().unwrap_or_default(),
        Part::Plan => {
            let mut s = String::new();
            if let Some(goal) = &plan.goal {
                s.push_str(&format!("Goal: {goal}\n"));
            }
            s.push_str(&plan.render_steps());
            s
        }
    };
    let preview = Preview::new(format!("Review the {part} of session {}", ctx.session_id))
        .fields(&[("part", part.to_string())])
        .text(&shown);
    let answer = ctx.ask_review(preview).await;
    let (plan, message) = p.edit(ctx, |plan| {
        // The answer is about what the person was shown: the same revision, and the same
        // content (a file edited meanwhile by code keeps its revision number, not its digest).
        let same = plan.content_digest(part) == shown_digest;
        let review = plan.review_mut(part);
        if review.revision != revision || !same {
            return Ok(format!(
                "The {part} changed while the person was asked, so their answer ({}) applies \
                 to an older {part} and was not recorded; it is a draft: call {again} \
                 again.",
                summary(&answer)
            ));
        }
        Ok(match &answer {
            PersonAnswer::Approved { by, feedback } => {
                review.state = ReviewState::Confirmed;
                review.by = Some(by.clone());
                review.at = Some(now());
                review.feedback = feedback.clone();
                match feedback {
                    Some(f) => format!(
                        "The person approved the {part}: it is confirmed. They wrote, word for \
                         word:\n{f}"
                    ),
                    None => format!("The person approved the {part}: it is confirmed."),
                }
            }
            PersonAnswer::Rejected { by, feedback } => {
                review.state = ReviewState::Draft;
                review.by = Some(by.clone());
                review.at = Some(now());
                review.feedback = feedback.clone();
                match feedback {
                    Some(f) => format!(
                        "The person rejected the {part}; it stays a draft. Their feedback, word \
                         for word:\n{f}\nRevise the {part} ({} / {}) and call {again} again.",
                        set_call(said_in, Some(part)),
                        ctx.word(crate::update::NAME)
                    ),
                    None => format!(
                        "The person rejected the {part} without a comment; it stays a draft. \
                         Ask them what to change, revise it, and call {again} again."
                    ),
                }
            }
            PersonAnswer::NotAsked { reason } => format!(
                "Not reviewed: {reason}. The {part} stays pending (not confirmed); only \
                 a person can confirm it (over HTTP, on the terminal of toolbox chat or call, \
                 or an MCP client that supports elicitation)."
            ),
        })
    })?;
    Ok(Value::String(format!("{message}\n\n{}", plan.render())))
}

fn summary(answer: &PersonAnswer) -> &'static str {
    match answer {
        PersonAnswer::Approved { .. } => "approved",
        PersonAnswer::Rejected { .. } => "rejected",
        PersonAnswer::NotAsked { .. } => "none came",
    }
}
