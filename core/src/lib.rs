//! toolbox-core is the vocabulary every other toolbox crate speaks: plain types and rules,
//! nothing that touches the operating system (no files, processes, environment or async
//! runtime; `toolbox-host` holds all of that).
//!
//! - [`ToolInfo`] and [`ToolRisk`] describe a tool to the executor and, through it, to a model.
//! - [`Args`] parses untrusted model arguments with errors that name the tool and the argument.
//! - [`schema`] builds the JSON Schemas of tool arguments.
//! - [`ConfigTable`] reads a provider's `[table]` of the configuration; [`trust`] says what an
//!   untrusted workspace's own `toolbox.toml` may set in it.
//! - [`SessionId`] is a session id parsed once.
//! - [`Preview`] is what a call will do, shown to the person asked to approve it.
//! - [`agent`] and [`frontmatter`] define agent files (Markdown with YAML frontmatter);
//!   finding them on disk is `toolbox_host::discover_agents`.
//!
//! Providers depend on this crate and on `toolbox-host`; they never see the executor.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent;
mod arg;
mod args;
pub mod config_table;
pub mod error;
pub mod frontmatter;
pub mod panic;
mod permission;
pub mod preview;
pub mod schema;
mod session;
mod tool;
pub mod trace_context;
pub mod trust;

pub use agent::{
    AgentDef, AgentName, AgentProblem, AgentSet, AgentsConfig, CallAgentArgs, InvalidAgentName,
};
pub use arg::{Arg, ArgKind, Prop};
pub use args::{json_kind, json_len, Args};
pub use config_table::{ConfigTable, Key, ParsedCache, Table};
pub use permission::{Decision, PermissionMode};
pub use preview::{BlockKind, Preview, PreviewBlock};
pub use session::{InvalidSessionId, SessionId};
pub use tool::{ToolInfo, ToolOutput, ToolRisk, Vocabulary};
pub use trace_context::{InvalidTraceParent, TraceParent};

/// Re-exported so [`register_table!`] works without naming `inventory`.
pub use inventory;
