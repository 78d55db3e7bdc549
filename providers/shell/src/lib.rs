//! toolbox-shell is the `shell` provider: bash commands that stream their output, stop on
//! time with everything they started, run in the background when asked, and can be confined
//! by an OS sandbox.
//!
//! | tool | alias | risk | what it does |
//! |---|---|---|---|
//! | `shell` | `bash` | shell | run `bash -c COMMAND`; exit code, stdout, stderr, duration — or start a background job |
//! | `shell_output` | `bash_output` | read | a background job's new output and its state |
//! | `shell_kill` | `bash_kill` | shell | stop a background job's whole process group |
//! | `sleep` | — | read | wait a number of seconds, cancellably |
//!
//! How it is put together:
//!
//! - `process` starts each command in a session of its own and stops it as a whole:
//!   SIGTERM to the process group, SIGKILL after a grace period, reading of the pipes bounded
//!   in time so a grandchild holding them cannot hang the call. It runs when the command
//!   exits, too: nothing it left behind survives the call.
//! - Plain foreground commands start with `posix_spawn` (no copy of toolbox's memory).
//!   Background jobs and sandboxed commands are forked on `host`, the provider's own
//!   long-lived thread, because `PR_SET_PDEATHSIG` (which makes them die with toolbox) is tied
//!   to the forking thread; jobs are supervised there as well. A small janitor process kills
//!   whatever a crashed toolbox left behind.
//! - `capture` keeps memory bounded: head and tail of each stream in memory, the full output
//!   streamed to the call's spool file once it passes `[shell] max_capture_bytes`.
//! - `sandbox` (opt-in, `[shell] sandbox`) confines commands with Landlock (writes) and
//!   seccomp (network, leaving the process group), set up in the child before exec.
//!
//! Configuration is the `[shell]` table ([`config::ShellConfig`]); see docs/providers/shell.md.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod capture;
mod command;
pub mod config;
mod doctor;
mod forker;
mod jobs;
mod prepared;
mod process;
mod sleep;

use std::sync::{Arc, LazyLock};

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::{Preview, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

use crate::config::{ConfigCache, ShellConfig};

toolbox_host::register_provider!("shell", || Arc::new(Shell::new()));

/// The toolset every tool of this provider belongs to.
const TOOLSET: &str = "shell";

/// The `shell` provider. One instance per registry (so per executor): it owns the background
/// jobs started through it and kills them when dropped.
#[derive(Default)]
pub struct Shell {
    config: ConfigCache,
    jobs: jobs::Jobs,
}

impl Shell {
    /// A provider with no background jobs yet.
    pub fn new() -> Self {
        Shell::default()
    }

    /// The `[shell]` table of this call's configuration, parsed once per configuration.
    fn config(&self, ctx: &ToolContext) -> Result<Arc<ShellConfig>> {
        config::cached(&self.config, &ctx.config)
            .map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))
    }

    /// The ids of the background jobs this provider knows (running and recently finished).
    pub fn job_ids(&self) -> Vec<String> {
        self.jobs.ids()
    }

    /// The process (and process group) id of a background job.
    pub fn job_pid(&self, job_id: &str) -> Option<i32> {
        self.jobs.pid(job_id)
    }
}

#[async_trait]
impl ToolProvider for Shell {
    fn name(&self) -> &str {
        "shell"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }

    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        match tool {
            command::NAME => command::preview(self, args, ctx),
            _ => None,
        }
    }
}

/// Every shell tool, each listed once.
static TOOLS: LazyLock<Tools<Shell>> = LazyLock::new(|| {
    Tools::<Shell>::new("shell")
        .tool(command::info(), |p, _, args, ctx| {
            output(command::run(p, args, ctx))
        })
        .tool(jobs::output_info(), |p, _, args, ctx| {
            output(jobs::output(p, args, ctx))
        })
        .tool(jobs::kill_info(), |p, _, args, ctx| {
            output(jobs::kill(p, args, ctx))
        })
        .tool(sleep::info(), |p, _, args, ctx| {
            output(sleep::run(p, args, ctx))
        })
});

#[cfg(test)]
mod test_support {
    use std::path::Path;

    use serde_json::Value;
    use tempfile::TempDir;
    use toolbox_host::{ToolContext, ToolProvider, Workspace};

    use crate::Shell;

    /// A context on `root` with session `s1`.
    pub fn context(root: &Path, tool: &str) -> ToolContext {
        let ws = Workspace::new(root).unwrap().with_session("s1").unwrap();
        ToolContext::new(ws, "s1", "call-1", tool)
    }

    /// A fresh workspace with session `s1` and a context for `tool`.
    pub fn setup(tool: &str) -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path(), tool);
        (dir, ctx)
    }

    /// Calls a tool on a given provider; Ok carries the text result, Err the message.
    pub async fn call_with(
        shell: &Shell,
        ctx: &ToolContext,
        tool: &str,
        args: Value,
    ) -> Result<String, String> {
        match shell.call_tool(tool, args, ctx).await {
            Ok(output) => Ok(output.text),
            Err(e) => Err(format!("{e:#}")),
        }
    }

    /// Calls a tool on a fresh provider.
    pub async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<String, String> {
        call_with(&Shell::new(), ctx, tool, args).await
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use serde_json::json;
    use toolbox_core::ToolRisk;
    use toolbox_host::registered_providers;

    #[test]
    fn four_tools_with_simple_closed_schemas() {
        let tools = Shell::new().list_tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["shell", "shell_output", "shell_kill", "sleep"]);
        for t in &tools {
            assert_eq!(t.toolsets, ["shell"], "{}", t.name);
            let s = &t.input_schema;
            assert_eq!(s["type"], "object");
            assert_eq!(s["additionalProperties"], false);
            for (name, p) in s["properties"].as_object().unwrap() {
                let kind = p["type"].as_str().unwrap();
                assert!(
                    ["string", "integer", "boolean", "number"].contains(&kind),
                    "{name}"
                );
                assert!(p["description"].as_str().is_some_and(|d| !d.is_empty()));
            }
            assert!(t.description.len() > 80, "{}", t.name);
        }
        let risk = |n: &str| tools.iter().find(|t| t.name == n).unwrap().risk;
        assert_eq!(risk("shell"), ToolRisk::Command);
        assert_eq!(risk("shell_kill"), ToolRisk::Command);
        assert_eq!(risk("shell_output"), ToolRisk::Read);
        assert_eq!(risk("sleep"), ToolRisk::Read);
        assert_eq!(tools[0].aliases, ["bash"]);
    }

    #[test]
    fn registered_under_its_name() {
        let reg = registered_providers()
            .into_iter()
            .find(|r| r.name == "shell")
            .expect("shell is registered");
        assert_eq!((reg.build)().name(), "shell");
    }

    #[tokio::test]
    async fn unknown_tools_and_bad_configuration_are_refused() {
        let (_d, mut ctx) = setup("shell");
        let e = call(&ctx, "shell_nope", json!({})).await.unwrap_err();
        assert_eq!(e, "shell has no tool named shell_nope");
        ctx.config = Arc::new(json!({"shell": {"sandbox": "maybe"}}));
        let e = call(&ctx, "shell", json!({"command": "true"}))
            .await
            .unwrap_err();
        assert!(
            e.starts_with("shell: invalid configuration: [shell] sandbox must be"),
            "{e}"
        );
    }
}
