//! toolbox-host is what runs a tool call against the machine: the call's context and the
//! provider trait, and every piece that touches the operating system.
//!
//! - [`ToolProvider`] is what a provider crate implements; it registers itself with
//!   [`register_provider!`] and the executor finds it through [`registered_providers`].
//! - [`ToolContext`] is everything a tool call may use: the [`Workspace`] jail with session
//!   routing, the session and call ids, a cancellation token, an [`EventSink`] for streamed
//!   output and the configuration.
//! - [`Workspace`] and [`Dir`]: paths a model gives, opened beneath the workspace root by
//!   descriptor (`openat2(RESOLVE_BENEATH)`), never checked and then opened by name.
//! - [`containment`] keeps every process a tool starts inside toolbox's reach (a cgroup or a
//!   subreaper, and a janitor process), so none outlives toolbox; [`limits`] is the
//!   `[limits]` table (memory, processes, CPU time) applied to them.
//! - [`handoff`] lets a thread outside the async runtime carry a call's task on in place.
//! - [`seal`] seals records kept where a tool could write them (a review a person gave),
//!   under a key no tool can reach.
//! - [`secrets`] takes secrets out of the process environment before any child can see them.
//! - [`discover_agents`] finds agent files on disk; their format is `toolbox_core::agent`.
//! - The link-time hooks through which one provider uses another's ability without
//!   depending on it: [`ContentExtractor`], [`CodeRunner`], [`SkillResolver`],
//!   [`AfterEdit`]; and
//!   [`CallGate`], through which a provider may hold back other tools' calls.
//! - [`Asker`]: how a tool asks a person a review question ([`ToolContext::ask_review`]).
//!
//! It builds on `toolbox-core` (the vocabulary) and nothing else of toolbox's.

#![deny(missing_docs)]

mod after_edit;
mod agents;
mod blocking;
pub mod containment;
mod context;
mod dirfd;
pub mod doctor;
pub mod dylib;
mod extract;
pub mod handoff;
pub mod limits;
mod paths;
pub mod peer;
mod provider;
mod question;
mod runner;
pub mod sandbox;
pub mod seal;
pub mod secrets;
mod skill;
mod spool_file;
mod state_file;
pub mod stdio;
pub mod telemetry;
pub mod tty;
mod workspace;

pub use after_edit::{with_after_edit, AfterEdit, AfterEditFuture};
pub use agents::discover_agents;
pub use blocking::blocking;
pub use context::{
    ApprovalRequest, EventSink, OutputStream, SpoolClaim, ToolContext, ToolEvent, ToolWords,
};
pub use dirfd::{Dir, DirEntryInfo, EntryKind};
pub use extract::{find_extractor, ContentExtractor};
pub use paths::{find_program, find_program_in, is_executable, operator_path, show_name};
pub use provider::{
    output, registered_providers, ProviderRegistration, ToolFn, ToolFuture, ToolProvider, Tools,
};
pub use question::{
    call_gates, no_validation, AskFuture, Asker, CallGate, CallPolicy, GateCall, PersonAnswer,
    QuestionKind,
};
pub use runner::{find_code_runner, CodeRunner, RunFuture};
pub use skill::{
    find_skill_resolver, is_skill_ref, resolve_skill_file, SkillFile, SkillResolver,
    SKILL_REF_PREFIX,
};
pub use spool_file::{
    create_spool_file, remove_spool_file, safe_file_part, spool_file_len, SPOOL_DIR,
};
pub use state_file::{state_files, StateFile, StateKind};
pub use workspace::{
    validate_session_id, Base, PathError, SessionFolder, Workspace, WsPath, TOOLBOX_DIR,
};

/// Re-exported so provider crates can call [`register_provider!`] without naming `inventory`.
pub use inventory;
/// Re-exported so providers and the executor share one cancellation type.
pub use tokio_util::sync::CancellationToken;
