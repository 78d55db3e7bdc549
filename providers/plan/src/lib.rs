//! toolbox-plan is the `plan` provider: a plan the model keeps for its session, a review a
//! person answers, and a gate that holds risky tools back until the plan is confirmed.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `plan__set` | read | sets the goal and/or the steps, replacing them |
//! | `plan__update` | read | changes step statuses and notes, adds or removes steps |
//! | `plan__show` | read | the plan as a checklist, with each part's review state |
//! | `plan__request_review` | read | asks a person to confirm the goal or the plan |
//! | `session__info` | read | the session, the permissions, the sandbox, the limits, the real paths |
//!
//! All are Read risk: they change only the session's own notes in
//! `.toolbox/sessions/<sid>/plan.json` ([`state`]), never the user's files.
//!
//! The review goes through the executor's approval channel as a question of kind `review`
//! ([`ToolContext::ask_review`]): a person answers it in every permission mode; a front end
//! that cannot reach one says so, and the part stays pending.
//!
//! The gate ([`gate`]) is a [`CallGate`](toolbox_host::CallGate): with `[plan]
//! require_confirmed` set it refuses the listed risk classes or tools until the part `[plan]
//! require` names is confirmed, before any approval is asked. A workspace's own
//! `toolbox.toml` may add to the list and pick the stricter part, never remove either.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod data_agent;
pub mod gate;
mod info;
mod request_review;
mod set;
mod show;
pub mod state;
mod update;

use std::sync::{Arc, LazyLock, Mutex};

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use serde_json::{json, Value};
use toolbox_core::schema::{object_schema, prop, string_enum};
use toolbox_core::trust::Tighten;
use toolbox_core::{Arg, Key, Prop, Table, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

use crate::state::{Plan, Status, Step, MAX_NOTE_CHARS, MAX_TITLE_CHARS};

toolbox_host::register_provider!("plan", || Arc::new(PlanProvider::default()));
toolbox_host::register_call_gate!("plan", gate::check, gate::validate);

/// The toolset every tool of this provider belongs to.
const TOOLSET: &str = "plan";
/// The parts a person confirms, as `[plan] require` and `plan__request_review` name them.
const PARTS: &[&str] = &["goal", "plan"];

// A workspace's toolbox.toml may hold more risk classes or tools back, and ask for the
// stricter part ("plan": the plan, and the goal too when one is set), never less.
const REQUIRE_CONFIRMED: Key = Key::strings("require_confirmed").workspace(Tighten::AddToList(&[]));
const REQUIRE: Key = Key::choice("require", PARTS).workspace(Tighten::Ranked {
    order: &["goal", "plan"],
    default: "plan",
});
/// The `[plan]` table: every key it understands.
const TABLE: Table = Table::new("plan", &[REQUIRE_CONFIRMED, REQUIRE]);
toolbox_core::register_table!(TABLE);

/// The `steps` argument of `plan__set`, `plan__update` and the data agent's
/// `data_agent_prepare_generation_plan`: an array of steps (see [`steps_prop`]).
const STEPS: Arg = Arg::json("steps");

/// The `plan` provider. Changes of a session's plan are made one at a time (read, change,
/// write back under one lock), so two calls never lose each other's change.
#[derive(Default)]
pub struct PlanProvider {
    lock: Arc<Mutex<()>>,
}

impl std::fmt::Debug for PlanProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PlanProvider")
    }
}

impl PlanProvider {
    /// Reads the session's plan, lets `change` edit it, and writes it back when `change`
    /// succeeds; nothing is written when it fails. Returns what `change` returned.
    pub(crate) fn edit<T>(
        &self,
        ctx: &ToolContext,
        change: impl FnOnce(&mut Plan) -> Result<T>,
    ) -> Result<(Plan, T)> {
        let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut plan = state::load(&ctx.workspace)?;
        plan.said_in = ctx.vocabulary();
        let before = plan.clone();
        let out = change(&mut plan)?;
        if plan != before {
            state::save(&ctx.workspace, &plan)?;
            if ctx.events.is_active() {
                ctx.events.emit(toolbox_host::ToolEvent::PlanUpdated {
                    call_id: ctx.call_id.clone(),
                    tool: ctx.tool.clone(),
                    plan: serde_json::to_value(&plan).unwrap_or(Value::Null),
                    checklist: plan.render(),
                });
            }
        }
        Ok((plan, out))
    }
}

#[async_trait]
impl ToolProvider for PlanProvider {
    fn name(&self) -> &str {
        "plan"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// Every plan tool, each listed once.
static TOOLS: LazyLock<Tools<PlanProvider>> = LazyLock::new(|| {
    Tools::<PlanProvider>::new("plan")
        .tool(set::info(), |p, _, args, ctx| {
            output(std::future::ready(set::run(p, args, ctx)))
        })
        .tool(update::info(), |p, _, args, ctx| {
            output(std::future::ready(update::run(p, args, ctx)))
        })
        .tool(show::info(), |_, _, args, ctx| {
            output(std::future::ready(show::run(args, ctx)))
        })
        .tool(request_review::info(), |p, _, args, ctx| {
            output(request_review::run(p, args, ctx))
        })
        .tool(info::info(), |_, _, args, ctx| {
            output(std::future::ready(info::run(args, ctx)))
        })
        .family(data_agent::infos(), |p, tool, args, ctx| {
            output(data_agent::run(p, tool, args, ctx))
        })
});

/// The `[plan]` table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Settings {
    /// Risk classes (`file_write`, `shell`, `python`, `read`) or tool names held back until
    /// the part [`Settings::require`] names is confirmed. Empty: the gate is off.
    pub require_confirmed: Vec<String>,
    /// Which part must be confirmed: the goal, or the plan (and the goal too when one is set).
    pub require: state::Part,
}

/// Reads `[plan]` from the whole configuration; errors name the key.
pub fn settings(config: &Value) -> Result<Settings> {
    let table = TABLE.read(config)?;
    let require_confirmed = REQUIRE_CONFIRMED.string_list(&table)?.unwrap_or_default();
    for entry in &require_confirmed {
        let plain = !entry.is_empty()
            && entry.len() <= 64
            && entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !plain {
            bail!(
                "[plan] require_confirmed: {entry:?} is neither a risk class (file_write, \
                 shell, python, read) nor a tool name"
            );
        }
    }
    let require = match REQUIRE.one_of(&table)? {
        Some("goal") => state::Part::Goal,
        _ => state::Part::Plan,
    };
    Ok(Settings {
        require_confirmed,
        require,
    })
}

/// The schema of a step a model gives: a title, and optionally a status and a note.
fn step_schema(with_id: bool) -> Value {
    let mut props = vec![];
    if with_id {
        props.push((
            "id",
            prop("string", "The id of the step to change, e.g. \"2\"."),
        ));
    }
    props.push(("title", prop("string", "What the step does (one line).")));
    props.push((
        "status",
        string_enum(
            Status::NAMES,
            "pending (default), in_progress, completed or blocked.",
        ),
    ));
    props.push((
        "note",
        prop(
            "string",
            "An optional note: what was found, why it is blocked.",
        ),
    ));
    let required: &[&str] = if with_id { &["id"] } else { &["title"] };
    object_schema(&props, required)
}

/// The `steps` property (or another of the same shape): an array of [`step_schema`] items.
fn steps_prop(arg: Arg, description: &str, with_id: bool) -> Prop {
    arg.schema(json!({"type": "array", "description": description, "items": step_schema(with_id)}))
}

/// One text a model gave: trimmed, not empty, at most `max` characters.
fn text(tool: &str, what: &str, value: &Value, max: usize) -> Result<String> {
    let Some(s) = value.as_str() else {
        bail!(
            "{tool}: {what} must be a string, got {}",
            toolbox_core::json_kind(value)
        );
    };
    let s = s.trim();
    if s.is_empty() {
        bail!("{tool}: {what} must not be empty");
    }
    if s.chars().count() > max {
        bail!("{tool}: {what} is longer than {max} characters");
    }
    Ok(s.to_string())
}

/// A new step as a model gave it: a string (its title) or an object {title, status, note}.
fn new_step(tool: &str, at: &str, value: &Value, id: String) -> Result<Step> {
    match value {
        Value::String(_) => Ok(Step {
            id,
            title: text(tool, at, value, MAX_TITLE_CHARS)?,
            status: Status::Pending,
            note: None,
        }),
        Value::Object(fields) => {
            for key in fields.keys() {
                if !["title", "status", "note"].contains(&key.as_str()) {
                    bail!("{tool}: {at} has an unknown field {key:?} (a step has title, status and note)");
                }
            }
            let title = match fields.get("title") {
                Some(v) if !v.is_null() => text(tool, &format!("{at}.title"), v, MAX_TITLE_CHARS)?,
                _ => bail!("{tool}: {at} needs a title"),
            };
            Ok(Step {
                id,
                title,
                status: status(tool, at, fields.get("status"))?.unwrap_or_default(),
                note: note(tool, at, fields.get("note"))?,
            })
        }
        other => bail!(
            "{tool}: {at} must be a title or an object with title, status and note, got {}",
            toolbox_core::json_kind(other)
        ),
    }
}

fn status(tool: &str, at: &str, value: Option<&Value>) -> Result<Option<Status>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Status::parse(s).map(Some).ok_or_else(|| {
            anyhow!(
                "{tool}: {at}.status must be one of {}, got {s:?}",
                Status::NAMES.join(", ")
            )
        }),
        Some(other) => bail!(
            "{tool}: {at}.status must be a string, got {}",
            toolbox_core::json_kind(other)
        ),
    }
}

fn note(tool: &str, at: &str, value: Option<&Value>) -> Result<Option<String>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(v) => text(tool, &format!("{at}.note"), v, MAX_NOTE_CHARS).map(Some),
    }
}

/// The result of a change: the notices (a confirmation withdrawn), then the plan.
fn changed_result(plan: &Plan, notices: &[String]) -> Value {
    let mut out = String::new();
    for notice in notices {
        out.push_str("Note: ");
        out.push_str(notice);
        out.push('\n');
    }
    out.push_str(&plan.render());
    Value::String(out)
}

#[cfg(test)]
mod tests;
