//! toolbox-python is the `python` provider: a live Python session per toolbox session, a
//! package installer for it, and a search over a package's API.
//!
//! | tool | alias | risk | what it does |
//! |---|---|---|---|
//! | `run_python_code` | `python`, `python_exec` | python | run a cell (`code`) or a workspace `.py` script in the session's namespace |
//! | `kernel_install` | `python_package` | python | `pip install` packages into the per-user venv (or the operator's `[python] venv`) |
//! | `registry_lookup` | | read | find public functions and classes of an importable package by name and docstring |
//!
//! Python-side logic lives in one driver, `src/driver.py`, embedded with `include_str!` and
//! run either inside this process ([`embedded`], the default: no process start, no
//! serialisation through pipes — the fastest) or in one worker process per session
//! ([`isolated`], the same interpreter, killed on timeout). The third backend, [`jupyter`],
//! runs the code in a real Jupyter kernel — one the user keeps running (attached by its
//! connection file) or one per session started from a kernelspec — speaking the Jupyter
//! protocol natively and turning the kernel's messages into the same result.
//! `[python] backend` picks one.
//!
//! The binary links no libpython and carries no build interpreter: the interpreter is found
//! at run time ([`find_python`]: `[python] interpreter`, `$VIRTUAL_ENV`, then `python3` on
//! PATH), and the embedded backend loads its shared libpython on first use, then the
//! CPython layer `embed/` (a stable-ABI cdylib that build.rs builds and the binary carries).
//! An interpreter without a shared libpython runs on the isolated backend, which says so.
//!
//! Other providers run code in the same session through the [`toolbox_host::CodeRunner`]
//! registered here for language `python` (the notebook provider does); its result is the
//! structured value described at [`run::code_runner`].
//!
//! Where things are:
//!
//! - `run.rs` (`run_python_code`), `install.rs` (`kernel_install`), `lookup.rs`
//!   (`registry_lookup`): the tools. `render.rs` turns a run's result into the text a model
//!   reads.
//! - `backend/mod.rs`: the `Backend` trait the three backends implement, with the typed request
//!   (`RunRequest`) and result (`RunResult`) that pass between them and `run.rs`.
//! - under `backend/`: `embedded.rs`, `isolated.rs`, `jupyter/` (`kernel.rs`, `lifecycle.rs`, `execute.rs`,
//!   `render.rs`, `process.rs`, `spec.rs`, `wire.rs`): the backends.
//! - `sessions.rs`: every session's state, for all backends, in one structure; `evict.rs`:
//!   the rule by which idle sessions give it back.
//! - `config.rs` (`[python]`); `discover.rs` (which interpreter, found at run time);
//!   `backend/embed_lib.rs` (the loaded CPython layer, whose sources are under `embed/`);
//!   and `common.rs`, which every other module may use (`python_command`, `session_key`).

#![deny(missing_docs)]

mod backend;
pub use backend::{embedded, isolated, jupyter};
mod common;
mod config;
mod discover;
mod doctor;
pub mod evict;
mod install;
mod lookup;
mod render;
pub mod run;
mod sessions;

use anyhow::Result;
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::{Preview, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

pub use config::{Backend, KernelTarget, PythonConfig};
pub use discover::{find as find_python, FoundPython, Source as PythonSource};
pub use render::render_result;
use sessions::Sessions;

toolbox_host::register_provider!("python", || std::sync::Arc::new(PythonProvider::default()));
toolbox_host::register_code_runner!("python", "python", run::code_runner);

/// The Python side of every backend.
pub(crate) const DRIVER_SOURCE: &str = include_str!("driver.py");

/// The toolset every tool of this provider belongs to (besides `python`, the provider name).
pub(crate) const TOOLSET: &str = "python";

/// The sidecar runtime's group `integrated_notebook` is "python + notebook + lookup", exactly:
/// `run_python_code` and `registry_lookup` are in it, `kernel_install` is not.
pub(crate) const INTEGRATED_NOTEBOOK: &str = "integrated_notebook";

/// The `python` provider. Every session's state is in its `sessions::Sessions`, the one
/// the process has (see there why there is one).
#[derive(Debug, Clone)]
pub struct PythonProvider {
    sessions: &'static Sessions,
}

impl Default for PythonProvider {
    fn default() -> Self {
        PythonProvider {
            sessions: Sessions::shared(),
        }
    }
}

#[async_trait]
impl ToolProvider for PythonProvider {
    fn name(&self) -> &str {
        "python"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }

    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        match tool {
            run::NAME => run::preview(args, ctx),
            install::NAME => install::preview(args, ctx),
            _ => None,
        }
    }

    /// The embedded interpreter's thread reads `toolbox mcp`'s requests while it is idle.
    fn idle_slot(&self) -> Option<std::sync::Arc<toolbox_host::handoff::IdleSlot>> {
        Some(embedded::idle_slot())
    }
}

/// Every python tool, each listed once.
static TOOLS: LazyLock<Tools<PythonProvider>> = LazyLock::new(|| {
    Tools::<PythonProvider>::new("python")
        .tool(run::info(), |p, _, args, ctx| {
            output(run::run_tool(p.sessions, args, ctx))
        })
        .tool(install::info(), |p, _, args, ctx| {
            output(install::run(p.sessions, args, ctx))
        })
        .tool(lookup::info(), |_, _, args, ctx| {
            output(lookup::run(args, ctx))
        })
});

#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::{json, Value};
    use tempfile::TempDir;
    use toolbox_host::{ToolContext, ToolProvider, Workspace};

    use crate::PythonProvider;

    /// A fresh workspace and a context for `tool` in session `sid` with a `[python]` table.
    pub fn setup(tool: &str, sid: &str, python: Value) -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path())
            .unwrap()
            .with_session(sid)
            .unwrap();
        let mut ctx = ToolContext::new(ws, sid, "call-1", tool);
        ctx.config = std::sync::Arc::new(json!({ "python": python }));
        (dir, ctx)
    }

    /// The same workspace, another session.
    pub fn other_session(ctx: &ToolContext, sid: &str) -> ToolContext {
        let mut other = ctx.clone();
        other.workspace = ctx.workspace.with_session(sid).unwrap();
        other.session_id = toolbox_core::SessionId::parse(sid).unwrap();
        other
    }

    /// Calls a tool through the provider; Ok carries the text result (without the note a
    /// new session's first result begins with: tests/tests/python.rs checks that one), Err
    /// the message.
    pub async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<String, String> {
        let result = PythonProvider::default().call_tool(tool, args, ctx).await;
        match result.map(|output| output.text) {
            Ok(s) => Ok(match s.strip_prefix(crate::run::WORKING_FOLDER_NOTE) {
                Some(rest) => rest
                    .split_once('\n')
                    .map(|(_, r)| r.to_string())
                    .unwrap_or_default(),
                None => s,
            }),
            Err(e) => Err(format!("{e:#}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolbox_core::ToolRisk;
    use toolbox_host::registered_providers;

    #[test]
    fn three_tools_with_closed_schemas_risks_and_toolsets() {
        let tools = PythonProvider::default().list_tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["run_python_code", "kernel_install", "registry_lookup"]
        );
        let by = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
        assert_eq!(by("run_python_code").risk, ToolRisk::Code);
        assert_eq!(by("run_python_code").aliases, ["python", "python_exec"]);
        assert_eq!(by("kernel_install").risk, ToolRisk::Code);
        assert_eq!(by("kernel_install").aliases, ["python_package"]);
        assert_eq!(by("registry_lookup").risk, ToolRisk::Read);
        assert_eq!(
            by("run_python_code").toolsets,
            [TOOLSET, INTEGRATED_NOTEBOOK, "python_interpreter"]
        );
        assert_eq!(
            by("registry_lookup").toolsets,
            [TOOLSET, INTEGRATED_NOTEBOOK, "omicverse_lookup"]
        );
        assert_eq!(by("kernel_install").toolsets, [TOOLSET]);
        for t in &tools {
            let s = &t.input_schema;
            assert_eq!(s["additionalProperties"], false, "{}", t.name);
            for (name, p) in s["properties"].as_object().unwrap() {
                let kind = p["type"].as_str().unwrap();
                assert!(
                    ["string", "integer", "boolean", "array"].contains(&kind),
                    "{name}"
                );
                if kind == "array" {
                    assert_eq!(p["items"]["type"], "string", "{name}");
                }
                assert!(p["description"].as_str().is_some_and(|d| !d.is_empty()));
            }
            assert!(t.description.len() > 80, "{}", t.name);
        }
    }

    #[test]
    fn registered_provider_and_code_runner() {
        assert!(registered_providers().iter().any(|r| r.name == "python"));
        let runner = toolbox_host::find_code_runner("python").expect("python runner");
        assert_eq!(runner.provider, "python");
    }
}
