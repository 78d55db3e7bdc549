//! toolbox is the tool-execution layer for LLM agents: a model asks for a tool, toolbox
//! decides whether the call may run, runs it safely, and returns a result the model can read.
//!
//! This umbrella crate is what applications depend on. Each provider is a Cargo feature
//! (all on by default); enabling one links its crate so it registers itself with the
//! executor. Binaries, integration tests and doctests that need the registry must say
//! `use toolbox as _;` (or use any item from it), or the linker drops the providers.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use toolbox::{ExecutorConfig, ToolExecutor, ToolRequest};
//! let executor = ToolExecutor::new(ExecutorConfig::load(".")?)?;
//! let info = executor
//!     .run(ToolRequest::new("call-1", "read_file", serde_json::json!({"path": "README.md"})))
//!     .await;
//! println!("{}", info.envelope()); // {"status":"done","result":"..."}
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod stderr_pump;

/// Resolves when the process receives SIGTERM or SIGINT (Ctrl-C), with the signal's name.
/// Never resolves if the handlers cannot be installed.
///
/// The handlers are installed when this is called, not when the future is first polled, so
/// a signal that arrives between the call and the first poll is not lost to the default
/// action. Installing them replaces that default action (die at once), so the caller can
/// stop cleanly: end its work, then call [`host::containment::shutdown`] so nothing a tool
/// started outlives the process. Call it from inside the tokio runtime.
pub fn stop_signal() -> impl std::future::Future<Output = &'static str> + Send {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        }
    }
}

#[cfg(feature = "data")]
use toolbox_data as _;
#[cfg(feature = "file_manager")]
use toolbox_file_manager as _;
#[cfg(feature = "image_gen")]
use toolbox_image_gen as _;
#[cfg(feature = "lsp")]
use toolbox_lsp as _;
#[cfg(feature = "memory")]
use toolbox_memory as _;
#[cfg(feature = "notebook")]
use toolbox_notebook as _;
#[cfg(feature = "pdf")]
use toolbox_pdf as _;
#[cfg(feature = "plan")]
use toolbox_plan as _;
#[cfg(feature = "python")]
use toolbox_python as _;
#[cfg(feature = "shell")]
use toolbox_shell as _;
/// Skills: finding them, the system-prompt index ([`skill::render_index`]), the checks.
#[cfg(feature = "skill")]
pub use toolbox_skill as skill;
#[cfg(feature = "team")]
use toolbox_team as _;
#[cfg(feature = "web")]
use toolbox_web as _;

pub use toolbox_core as core;
/// Whose tool names a model sees, and a result with a structured value beside its text.
pub use toolbox_core::{ToolOutput, Vocabulary};
pub use toolbox_executor as executor;
pub use toolbox_executor::{
    ApprovalDecision, CallStatus, ExecutorConfig, LoadOptions, PermissionMode, Permissions,
    SchemaFormat, SchemaRendering, ToolCallInfo, ToolExecutor, ToolRequest,
};
/// The host layer: the call context, the workspace jail, containment, limits, secrets.
pub use toolbox_host as host;
/// MCP on stdio (`toolbox mcp`) and streamable HTTP (`/mcp` of `toolbox serve`).
pub use toolbox_mcp as mcp;
/// `toolbox router`: one address in front of many session servers (docs/scale-out.md).
pub use toolbox_router as router;
pub use toolbox_runtime as runtime;
pub use toolbox_server as server;

/// The providers compiled into this build, by registration name.
pub const PROVIDERS: &[&str] = &[
    #[cfg(feature = "data")]
    "data",
    #[cfg(feature = "file_manager")]
    "file_manager",
    #[cfg(feature = "image_gen")]
    "image_gen",
    #[cfg(feature = "memory")]
    "memory",
    #[cfg(feature = "notebook")]
    "notebook",
    #[cfg(feature = "pdf")]
    "pdf",
    #[cfg(feature = "plan")]
    "plan",
    #[cfg(feature = "python")]
    "python",
    #[cfg(feature = "shell")]
    "shell",
    #[cfg(feature = "skill")]
    "skill",
    #[cfg(feature = "team")]
    "team",
    #[cfg(feature = "lsp")]
    "lsp",
    #[cfg(feature = "web")]
    "web",
];
