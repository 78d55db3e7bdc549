//! toolbox-executor is the pipeline one tool call goes through.
//!
//! [`ToolExecutor::run`] takes a [`ToolRequest`] and always returns a [`ToolCallInfo`]:
//!
//! 1. resolve the name (canonical or alias) in the [`Registry`] built from every linked provider;
//! 2. gate it by the [`Permissions`] (mode `read_only` / `auto` / `full`, legacy flags) and, in
//!    `auto`, wait for an approval;
//! 3. run the provider with a per-call timeout, a cancellation token and panic capture;
//! 4. normalise every outcome to status `done` or `error`;
//! 5. spool large results to `.toolbox/tool_outputs/` ([`spool`]);
//! 6. append the call to `.toolbox/trajectories/<session>/` ([`trajectory`]) and emit
//!    `tracing` debug events under the target `toolbox`.
//!
//! [`schema`] renders the visible tools for OpenAI, Anthropic and MCP clients, loose or
//! strict ([`SchemaRendering`]).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod approval;
mod config;
mod executor;
mod registry;
pub mod schema;
pub mod spool;
pub mod trajectory;

pub use approval::{ApprovalDecision, ApprovalQueue, ApprovalTicket};
pub use config::{
    operator_table, user_config_path, CallPermissions, Decision, ExecutorConfig, LoadOptions,
    PermissionMode, Permissions,
};
pub use executor::{CallStatus, ErrorKind, Finished, ToolCallInfo, ToolExecutor, ToolRequest};
pub use registry::{RegisteredTool, Registry};
pub use schema::{SchemaFormat, SchemaRendering};
