//! toolbox-runtime runs an agent's *turn* around the executor.
//!
//! A user message goes to a model; each tool call it asks for passes the turn's gate and runs
//! through the executor; the results go back to the model until it answers without tools.
//! `call_agent` is intercepted here and runs a sub-turn with another agent. Conversations are
//! kept in `.toolbox/sessions/<sid>/messages.jsonl`, and everything that happens is one typed
//! event stream per session.
//!
//! This crate depends on toolbox-core and toolbox-executor and never on a provider; the
//! executor stays unaware of agents.

#![deny(missing_docs)]

pub mod llm;
