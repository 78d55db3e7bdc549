//! toolbox-runtime runs an agent's *turn* around the executor.
//!
//! A user message goes to a model; each tool call it asks for passes the turn's gate and runs
//! through the executor; the results go back to the model until it answers without tools.
//! `call_agent` is intercepted here and runs a sub-turn with another agent. Conversations are
//! kept in `.toolbox/sessions/<sid>/messages.jsonl`, and everything that happens is one typed
//! event stream per session.
//!
//! This crate depends on toolbox-core, toolbox-host and toolbox-executor and never on a
//! provider; the
//! executor stays unaware of agents.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent;
pub mod conversation;
pub mod events;
pub mod llm;
mod runtime;
mod turn;

pub use agent::ActiveAgent;
pub use events::{EventHub, RuntimeEvent, SessionEvent, StopReason, Subscription};
pub use runtime::{
    ApprovalAnswer, Runtime, RuntimeOptions, TurnError, TurnOutcome, TurnRequest, DEFAULT_AGENT,
};
pub use toolbox_core::agent::CALL_AGENT;
