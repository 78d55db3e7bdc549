//! The `jupyter` backend: run_python_code in a real Jupyter kernel, attached or started.
//!
//! - **Attach** (`[python] connection_file`): toolbox connects to a kernel somebody else
//!   runs — the user's, with their data loaded. Every session of every workspace that uses
//!   that file shares the one kernel and its namespace; calls are sent one at a time. toolbox
//!   never changes the kernel's working directory, never interrupts code it did not send, and
//!   never shuts the kernel down.
//! - **Start** (`[python] kernel_name`): toolbox starts one kernel per session from the
//!   kernelspec (see `spec`), in the session scratchpad, and restarts it when it dies. At
//!   exit it asks each kernel to shut down (`shutdown_request`) and kills what is left; the
//!   containment janitor kills them if toolbox itself is killed.
//!
//! The protocol is spoken natively (`wire`: ZeroMQ in pure Rust, HMAC-SHA256 signatures
//! verified on every message); no Python Jupyter client runs anywhere in toolbox. A call
//! sends one `execute_request` and gathers, from iopub, the messages whose parent is that
//! request — streams, display data, the execute result, the error — until the kernel's
//! `status: idle` for it and the `execute_reply` have both arrived. They become the same
//! `RunResult` the driver's answer gives on the other backends, so the text a model reads
//! is rendered by the same code; PNG images are saved as `output/figure-<n>.png` through
//! the workspace.
//!
//! In an IPython kernel, toolbox installs a small helper (`helper.py`, as the module
//! `_toolbox_kernel`) that acts only on toolbox's own requests: it defines `OUTPUT_DIR`
//! (and the environment variable `PYTHON_EXEC_SCRATCHPAD`),
//! sends tracebacks in plain Python form with the embedded backend's `<cell>` names, and
//! runs `script_path` requests.
//!
//! Time: the code runs until the call's timeout, then the kernel is interrupted (SIGINT to a
//! started kernel's process group, or `interrupt_request` when its kernelspec asks for
//! messages and for attached kernels) and gets `execute::INTERRUPT_GRACE` to stop; the
//! call then returns what the code printed so far. A started kernel that does not stop is
//! killed and restarted. The kernel's liveness is watched the whole time: a started
//! kernel's process exit ends the call at once; any kernel silent on every channel,
//! heartbeat included, for `execute::HEARTBEAT_DEAD` is taken for dead. Every send is
//! bounded too, so no call hangs on a kernel that does not answer.
//!
//! The parts: this module holds a call's course from start to end; `kernel` the connection
//! to a kernel and the slot a call finds it in; `lifecycle` attaches, starts, restarts and
//! reaps kernels; `execute` runs one request (the iopub/shell loop, interrupts,
//! heartbeats); `render` turns what the kernel sent into the result; `process` is the
//! kernel processes toolbox starts, `spec` the kernelspecs they are started from, `wire`
//! the protocol.

mod execute;
mod kernel;
mod lifecycle;
mod process;
mod render;
mod spec;
mod wire;

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use serde_json::json;
use tokio::time::Instant;
use toolbox_host::ToolContext;

use crate::backend::{Backend, Call, RunRequest, RunResult, Source};
use crate::config::PythonConfig;
use crate::evict::{SessionLimits, Slots};
use execute::{run_request, Ending, Exec, InFlight, Timing, INTERRUPT_GRACE};
pub(crate) use kernel::Slot;
use lifecycle::{ensure_kernel, install_helper, restart, slot_key};
use render::to_result;

/// The jupyter backend over its table of kernels: one slot per connection file, or per
/// session and kernelspec (see the module's documentation).
pub(crate) struct Jupyter<'a> {
    pub kernels: &'a Slots<Slot>,
}

impl Backend for Jupyter<'_> {
    async fn run(&self, request: RunRequest, call: &Call<'_>) -> Result<RunResult> {
        run(self.kernels, request, call).await
    }

    /// Stops the kernels toolbox started that [`crate::evict`]'s rule says should go (an
    /// attached kernel is its owner's: never).
    fn evict(&self, limits: SessionLimits, incoming: Option<&str>) {
        self.kernels.evict(limits, incoming);
    }
}

impl Jupyter<'_> {
    /// The interpreter the kernel runs (`sys.executable`, asked of the kernel itself), for
    /// kernel_install.
    pub async fn kernel_executable(
        &self,
        ctx: &ToolContext,
        config: &PythonConfig,
        tool: &str,
    ) -> Result<PathBuf> {
        lifecycle::kernel_executable(self.kernels, ctx, config, tool).await
    }
}

/// Runs one request (a cell, or a script through the helper) in the kernel.
async fn run(kernels: &Slots<Slot>, request: RunRequest, call: &Call<'_>) -> Result<RunResult> {
    let Call {
        ctx,
        config,
        tool,
        timeout,
        ..
    } = *call;
    let target = config
        .kernel
        .as_ref()
        .ok_or_else(|| anyhow!("{tool}: [python] backend = \"jupyter\" names no kernel"))?;
    let queue_deadline = Instant::now() + timeout;
    let key = slot_key(target, config, ctx);
    // A slot about to start a kernel always looks: a burst of new sessions must not pass
    // the cap before the next look.
    if call.look || kernels.is_empty(&key) {
        kernels.evict(config.session_limits, Some(&key));
    }
    let slot = kernels.slot(&key);
    let slot = tokio::select! {
        slot = slot.lock_owned() => slot,
        _ = tokio::time::sleep_until(queue_deadline) => bail!(
            "{tool} timed out after {} ms waiting for the previous call to this kernel to finish",
            timeout.as_millis()
        ),
        _ = ctx.cancel.cancelled() => bail!("{tool} was cancelled"),
    };
    let mut call = InFlight {
        slot,
        armed: false,
        started: false,
    };
    let mut notes: Vec<String> = call.slot.note.take().into_iter().collect();
    if let Some(note) = ensure_kernel(
        &mut call.slot,
        target,
        config,
        ctx,
        tool,
        (queue_deadline, timeout),
    )
    .await?
    {
        notes.push(note);
    }
    let Some(kernel) = call.slot.kernel.as_mut() else {
        bail!("{tool}: no kernel");
    };

    // What the helper does before the cell (see helper.py).
    let attached = kernel.process.is_none();
    let folders = request.folders.as_ref();
    let mut meta = json!({
        "session": request.session,
        "output_dir": folders.map(|f| &f.output_dir),
        "scratchpad": folders.map(|f| &f.cwd),
        "root": folders.map(|f| &f.root),
        "generation": request.generation,
    });
    if !attached {
        // A started kernel is the session's own: it works in the session scratchpad.
        meta["cwd"] = json!(folders.map(|f| &f.cwd));
    }
    let code = match &request.source {
        Source::Script { path, args } => {
            if !kernel.helper {
                bail!(
                    "{tool}: script_path needs an IPython kernel; {} is not one (run the \
                     script's code as a cell instead)",
                    kernel.name
                );
            }
            meta["script"] = json!(true);
            format!(
                "__import__('_toolbox_kernel').run_script({}, {})",
                serde_json::to_string(path)?,
                serde_json::to_string(args)?
            )
        }
        Source::Code(code) => code.clone(),
    };
    let exec = Exec {
        code: &code,
        silent: false,
        metadata: json!({ "toolbox": meta }),
        user_expressions: json!({}),
    };
    call.armed = true;
    let deadline = Instant::now() + timeout;
    let (collected, ending) = run_request(
        kernel,
        &exec,
        Timing {
            deadline,
            timeout,
            may_interrupt_queued: !attached,
        },
        Some(ctx),
        &mut call.started,
    )
    .await?;
    call.armed = false;
    if let Some(new_session) = kernel.restarted_as.take() {
        // Its state, toolbox's helper included, is gone: install the helper again.
        kernel.kernel_session = new_session;
        kernel.executable = None;
        if kernel.helper {
            let deadline = Instant::now() + config.kernel_timeout;
            kernel.helper = install_helper(kernel, deadline).await;
        }
        notes.push(format!(
            "{} was restarted since toolbox's previous call (by its owner?): variables and \
             imports from before that are gone",
            kernel.name
        ));
    }

    let mut result = to_result(collected, ctx);
    for note in notes.into_iter().rev() {
        result.add_note(note);
    }
    let partial = || {
        let text = crate::render::render(&result);
        if text == "(no output)\n" {
            String::new()
        } else {
            format!("\n\nOutput before that:\n{text}")
        }
    };
    match ending {
        Ending::Finished => Ok(result),
        Ending::Interrupted(why) => {
            result.interrupted = true;
            result.stopped = Some(why);
            Ok(result)
        }
        Ending::NotStarted(why) => bail!(
            "{tool} {why} before the code started: {} was busy with other work (another \
             client's cell, or an earlier call that could not be stopped). toolbox only \
             interrupts code it sent, so the request stays queued in the kernel and runs when \
             the kernel is free.",
            kernel.name
        ),
        Ending::Unstoppable(why) => {
            let name = kernel.name.clone();
            if attached {
                bail!(
                    "{tool} {why} and {name} did not stop within {} s of being interrupted; \
                     toolbox stopped waiting. The kernel is not toolbox's, so it was left as it \
                     is: it is still busy, and later calls wait behind it.{}",
                    INTERRUPT_GRACE.as_secs(),
                    partial()
                );
            }
            let restarted = restart(&mut call.slot, target, config, ctx, tool).await;
            bail!(
                "{tool} {why} and {name} did not stop within {} s of being interrupted, so it \
                 was killed: the session's state (variables, imports) is lost. {restarted}{}",
                INTERRUPT_GRACE.as_secs(),
                partial()
            )
        }
        Ending::Died(how) => {
            let name = kernel.name.clone();
            if attached {
                call.slot.kernel = None;
                bail!(
                    "{tool}: {name} died during the call ({how}): its state (variables, \
                     imports) is lost. toolbox did not start this kernel and cannot restart it: \
                     start it again and keep [python] connection_file pointing at its \
                     connection file.{}",
                    partial()
                );
            }
            let how = match kernel.process.as_mut() {
                Some(process) => match process.exited() {
                    Some(_) => format!("its process {}", process.describe_exit().await),
                    None => how,
                },
                None => how,
            };
            let restarted = restart(&mut call.slot, target, config, ctx, tool).await;
            bail!(
                "{tool}: {name} died during the call ({how}). The session's state (variables, \
                 imports) is lost. {restarted}{}",
                partial()
            )
        }
    }
}

/// Whether process `pid` still runs (for tests of this crate).
#[cfg(test)]
pub(crate) fn tests_support_running(pid: i32) -> bool {
    process::running(pid)
}
