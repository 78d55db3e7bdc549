//! toolbox-core is the thin vocabulary every other toolbox crate speaks.
//!
//! - [`ToolInfo`] and [`ToolRisk`] describe a tool to the executor and, through it, to a model.
//! - [`ToolProvider`] is what a provider crate implements; it registers itself with
//!   [`register_provider!`] and the executor finds it through [`registered_providers`].
//! - [`ToolContext`] is everything a tool call may use: the [`Workspace`] jail with session
//!   routing, the session and call ids, a cancellation token, an [`EventSink`] for streamed
//!   output and the configuration.
//! - [`AgentSet`] finds the agent definitions ([`AgentDef`]: Markdown files with YAML
//!   [`frontmatter`]) that the agent runtime runs and the team provider lists.
//! - [`Args`] parses untrusted model arguments with errors that name the tool and the argument.
//! - [`containment`] keeps every process a tool starts inside toolbox's reach (a cgroup or a
//!   subreaper, and a janitor process), so none outlives toolbox; [`limits`] is the
//!   `[limits]` table (memory, processes, CPU time) applied to them.
//!
//! Providers depend on this crate only; they never see the executor.

#![deny(missing_docs)]

pub mod agent;
mod args;
pub mod config_table;
pub mod containment;
mod context;
mod dirfd;
mod extract;
pub mod frontmatter;
pub mod handoff;
pub mod limits;
pub mod panic;
pub mod preview;
mod provider;
mod runner;
pub mod schema;
pub mod secrets;
pub mod session;
mod skill;
mod spool_file;
mod tool;
pub mod trust;
mod workspace;

pub use agent::{AgentDef, AgentName, AgentProblem, AgentSet, AgentsConfig, InvalidAgentName};
pub use args::Args;
pub use config_table::{ConfigTable, ParsedCache};
pub use context::{ApprovalRequest, EventSink, OutputStream, SpoolClaim, ToolContext, ToolEvent};
pub use dirfd::{Dir, DirEntryInfo, EntryKind};
pub use extract::{find_extractor, ContentExtractor};
pub use preview::{BlockKind, Preview, PreviewBlock};
pub use provider::{registered_providers, ProviderRegistration, ToolProvider};
pub use runner::{find_code_runner, CodeRunner, RunFuture};
pub use session::{InvalidSessionId, SessionId};
pub use skill::{
    find_skill_resolver, is_skill_ref, resolve_skill_file, SkillFile, SkillResolver,
    SKILL_REF_PREFIX,
};
pub use spool_file::{
    create_spool_file, remove_spool_file, safe_file_part, spool_file_len, SPOOL_DIR,
};
pub use tool::{ToolInfo, ToolRisk};
pub use workspace::{
    validate_session_id, Base, PathError, SessionFolder, Workspace, WsPath, TOOLBOX_DIR,
};

/// Re-exported so provider crates can call [`register_provider!`] without naming `inventory`.
pub use inventory;
/// Re-exported so providers and the executor share one cancellation type.
pub use tokio_util::sync::CancellationToken;
