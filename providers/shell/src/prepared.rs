//! A `shell` command checked and ready to start: what the foreground tool (`command.rs`) and
//! the background jobs (`jobs.rs`) both start, so that neither imports the other for it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use toolbox_host::limits::PreparedLimits;
use toolbox_host::sandbox::PreparedSandbox;

use crate::config::ShellConfig;
use crate::process;

/// The `shell` tool's name, which its errors (and its background jobs' errors) begin with.
pub(crate) const NAME: &str = "shell";

/// A fully checked request, ready to start.
pub(crate) struct Prepared {
    pub command: String,
    pub cwd: PathBuf,
    pub cwd_shown: String,
    pub timeout: Duration,
    /// `timeout_ms` as asked, when it was above the limit and got capped.
    pub capped_from: Option<u64>,
    pub timeout_given: bool,
    pub sandbox: Option<Arc<PreparedSandbox>>,
    /// `[limits]`, when any is set; holds the command's limit cgroup until the call ends.
    pub limits: Option<Arc<PreparedLimits>>,
    pub config: Arc<ShellConfig>,
    /// `TRACEPARENT`/`TRACESTATE` of the call's span, when spans are exported.
    pub trace_env: Vec<(&'static str, String)>,
}

impl Prepared {
    /// The command's environment: toolbox's own without the denied variables, and the
    /// call's trace context in place of any toolbox was started with.
    pub(crate) fn env(&self) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
        let mut env = self.config.command_env();
        if !self.trace_env.is_empty() {
            env.retain(|(name, _)| name != "TRACEPARENT" && name != "TRACESTATE");
            env.extend(
                self.trace_env
                    .iter()
                    .map(|(name, value)| ((*name).into(), value.into())),
            );
        }
        env
    }
}

/// Builds the `bash -c` command of a prepared request.
pub(crate) fn build(p: &Prepared) -> std::process::Command {
    process::bash_command(
        &p.command,
        &p.cwd,
        p.env(),
        p.limits.clone(),
        p.sandbox.clone(),
    )
}

/// The error for a command that could not be started.
pub(crate) fn spawn_error(tool: &str, p: &Prepared, e: std::io::Error) -> anyhow::Error {
    match &p.sandbox {
        Some(sb) => anyhow!(
            "{tool}: could not start the command inside the OS sandbox ({}), so it did not \
             run: {e}",
            sb.summary()
        ),
        None => anyhow!("{tool}: could not start bash: {e}"),
    }
}
