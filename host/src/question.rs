//! Questions a tool asks a person, and gates a provider puts in front of other tools' calls.
//!
//! - A tool asks through [`ToolContext::ask_review`](crate::ToolContext::ask_review): the
//!   question travels the same channel as a risky call's approval (an
//!   [`ApprovalRequest`](crate::ApprovalRequest) of kind [`QuestionKind::Review`]), and each
//!   front end (HTTP, the terminal, MCP elicitation) answers it. A review is asked in every
//!   permission mode; a front end that cannot reach a person says so
//!   ([`PersonAnswer::NotAsked`]) and never answers for them.
//! - A [`CallGate`], registered at link time by a provider, may hold back any call before
//!   the permission check asks anyone: the executor consults every registered gate and names
//!   no tool itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use toolbox_core::{Preview, ToolInfo};

use crate::inventory;

/// What an approval request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// May this risky call run? Answered approve, approve for the session, or deny.
    #[default]
    Tool,
    /// Does the person confirm what the tool shows (a goal, a plan)? Answered approve or
    /// reject, with optional feedback the tool hands to the model word for word.
    Review,
}

impl QuestionKind {
    /// Whether this is the default kind (for `skip_serializing_if`).
    pub fn is_tool(&self) -> bool {
        *self == QuestionKind::Tool
    }
}

/// How a review question ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum PersonAnswer {
    /// The person approved.
    Approved {
        /// Who answered: the front end that carried the answer (`http`, `terminal`, `mcp`).
        by: String,
        /// What they wrote, if anything.
        feedback: Option<String>,
    },
    /// The person rejected.
    Rejected {
        /// Who answered.
        by: String,
        /// What they wrote, if anything.
        feedback: Option<String>,
    },
    /// Nobody answered: no one could be asked, the wait ran out, or the call was cancelled.
    /// Says which, for the model.
    NotAsked {
        /// Why, in words for the model.
        reason: String,
    },
}

/// The future an [`Asker`] returns.
pub type AskFuture = Pin<Box<dyn Future<Output = PersonAnswer> + Send>>;

/// How a call reaches a person: set by the executor on each call's context. The default
/// reaches nobody.
#[derive(Clone, Default)]
pub struct Asker(Option<Arc<dyn Fn(Preview) -> AskFuture + Send + Sync>>);

impl Asker {
    /// An asker that hands each question (its preview) to `f`.
    pub fn new(f: impl Fn(Preview) -> AskFuture + Send + Sync + 'static) -> Self {
        Asker(Some(Arc::new(f)))
    }

    /// Asks a review question, or says nobody can be asked.
    pub fn ask(&self, preview: Preview) -> AskFuture {
        match &self.0 {
            Some(f) => f(preview),
            None => Box::pin(async {
                PersonAnswer::NotAsked {
                    reason: "this call was made without an approval channel (no front end \
                             that can ask a person)"
                        .into(),
                }
            }),
        }
    }
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Asker(active)"
        } else {
            "Asker(none)"
        })
    }
}

/// How permissions treat each risk class for the call, so a tool can tell the model what it
/// may do (`session__info`). Set by the executor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallPolicy {
    /// The permission mode in force; `None` in a context made without an executor.
    pub mode: Option<toolbox_core::PermissionMode>,
    /// Each risk class and what a call of it does.
    pub risks: Vec<(toolbox_core::ToolRisk, toolbox_core::Decision)>,
}

/// What a [`CallGate`] sees of a call before it is let through.
pub struct GateCall<'a> {
    /// The tool called.
    pub tool: &'a ToolInfo,
    /// The context the call will run with (session, workspace, configuration).
    pub ctx: &'a crate::ToolContext,
}

/// A check a provider puts in front of every call, whichever tool: it returns the refusal
/// the model reads, or `None` to let the call go on to the permission check. Consulted
/// before anyone is asked to approve the call. Register it with [`register_call_gate!`].
pub struct CallGate {
    /// Who registered it, e.g. `plan`.
    pub provider: &'static str,
    /// The check.
    pub check: fn(&GateCall<'_>) -> Option<String>,
    /// Checks the gate's configuration once, when the executor is built, against every tool
    /// linked in (the whole configuration, and the tools): an error stops toolbox from
    /// starting, naming what is wrong, rather than a gate that silently holds nothing.
    pub validate: fn(&serde_json::Value, &[&ToolInfo]) -> Result<(), String>,
}

/// A [`CallGate::validate`] for a gate whose configuration needs no check.
pub fn no_validation(_: &serde_json::Value, _: &[&ToolInfo]) -> Result<(), String> {
    Ok(())
}

inventory::collect!(CallGate);

/// Every call gate linked in, sorted by provider.
pub fn call_gates() -> Vec<&'static CallGate> {
    let mut all: Vec<_> = inventory::iter::<CallGate>.into_iter().collect();
    all.sort_by_key(|g| g.provider);
    all
}

/// Registers a [`CallGate`] at link time.
///
/// ```ignore
/// toolbox_host::register_call_gate!("plan", gate::check, gate::validate);
/// ```
#[macro_export]
macro_rules! register_call_gate {
    ($provider:expr, $check:expr) => {
        $crate::register_call_gate!($provider, $check, $crate::no_validation);
    };
    ($provider:expr, $check:expr, $validate:expr) => {
        $crate::inventory::submit! {
            $crate::CallGate { provider: $provider, check: $check, validate: $validate }
        }
    };
}
