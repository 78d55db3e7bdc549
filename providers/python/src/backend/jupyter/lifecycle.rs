//! A kernel's lifecycle: the slots calls find their kernel in, attaching to a kernel or
//! starting one (and waiting until it listens and answers), installing toolbox's helper,
//! restarting a kernel that died or would not stop, evicting idle ones, and shutting down the
//! kernels toolbox started when it exits.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use tokio::time::Instant;
use toolbox_host::ToolContext;

use super::execute::{exit_of, run_request, send_control, Ending, Exec, Timing, SEND_WITHIN};
use super::kernel::{Kernel, Slot};
use super::process::{self, Process};
use super::spec::{self, InterruptMode};
use super::wire::{self, Channels, ConnectionInfo, Received, Session};
use crate::config::{KernelTarget, PythonConfig};
use crate::evict::{Evicted, SlotState, Slots};

/// toolbox's helper inside IPython kernels.
const HELPER_SOURCE: &str = include_str!("helper.py");
/// Installs the helper as the module `_toolbox_kernel` (replacing an older one), without
/// leaving a name in the user's namespace.
const HELPER_BOOTSTRAP: &str = "import sys, types
old = sys.modules.get('_toolbox_kernel')
if old is not None:
    try:
        old.uninstall()
    except Exception:
        pass
m = types.ModuleType('_toolbox_kernel')
m.__file__ = '<toolbox-kernel>'
exec(compile(SRC, '<toolbox-kernel>', 'exec'), m.__dict__)
sys.modules['_toolbox_kernel'] = m
m.install(IP)
";

/// A slot is one kernel: the rule applies to the kernels toolbox started, never to an
/// attached kernel (its owner's).
impl SlotState for Slot {
    fn exempt(key: &str) -> bool {
        key.starts_with("attach:")
    }

    fn is_empty(&self) -> bool {
        self.kernel.is_none()
    }

    fn is_live(&self) -> bool {
        self.kernel.as_ref().is_some_and(|k| k.process.is_some())
    }

    fn has_note(&self) -> bool {
        self.note.is_some()
    }

    fn last_used(&self) -> Option<std::time::Instant> {
        self.last_used
    }

    fn give_back(&mut self, why: &Evicted) {
        if let Some(mut kernel) = self.kernel.take() {
            if let Some(process) = kernel.process.as_mut() {
                process.kill();
            }
        }
        self.note = Some(format!(
            "this session's kernel {}; a new one was started, so variables and imports from \
             before are gone",
            why.why("was stopped")
        ));
    }
}

/// Which slot a call uses: one per connection file, or one per session and kernelspec.
pub(super) fn slot_key(target: &KernelTarget, config: &PythonConfig, ctx: &ToolContext) -> String {
    match target {
        KernelTarget::Attach(file) => {
            let file = std::fs::canonicalize(file).unwrap_or_else(|_| file.clone());
            format!("attach:{}", file.display())
        }
        KernelTarget::Start(name) => format!(
            "start:{name}:{}:{}",
            config
                .venv
                .as_deref()
                .map(|v| v.display().to_string())
                .unwrap_or_default(),
            crate::common::session_key(ctx)
        ),
    }
}

/// Kills the session's kernel and starts a new one; says how that went.
pub(super) async fn restart(
    slot: &mut Slot,
    target: &KernelTarget,
    config: &PythonConfig,
    ctx: &ToolContext,
    tool: &str,
) -> String {
    if let Some(mut old) = slot.kernel.take() {
        if let Some(process) = old.process.as_mut() {
            process.kill();
        }
    }
    let unbounded = (
        Instant::now() + config.kernel_timeout,
        config.kernel_timeout,
    );
    match ensure_kernel(slot, target, config, ctx, tool, unbounded).await {
        Ok(_) => {
            slot.note = Some(
                "this session's kernel was restarted after the previous call: variables and \
                 imports from before are gone"
                    .into(),
            );
            let name = slot.kernel.as_ref().map(|k| k.name.as_str()).unwrap_or("");
            format!("A new kernel was started for this session: {name}.")
        }
        Err(e) => format!("Starting a new kernel failed ({e:#}); the next call tries again."),
    }
}

/// Makes sure the slot has a live kernel: connects or starts one. Returns a note when the
/// session's state was lost since the last call.
pub(super) async fn ensure_kernel(
    slot: &mut Slot,
    target: &KernelTarget,
    config: &PythonConfig,
    ctx: &ToolContext,
    tool: &str,
    call: (Instant, Duration),
) -> Result<Option<String>> {
    let mut note = None;
    let mut known_session = None;
    if let Some(kernel) = slot.kernel.as_mut() {
        if kernel.process.is_none() && kernel.channels.peer_lost() {
            // The attached kernel went away since the last call (its owner restarted or
            // stopped it): connect afresh, and tell whether it is another kernel now.
            known_session = Some(kernel.kernel_session.clone());
            slot.kernel = None;
        }
    }
    if let Some(kernel) = slot.kernel.as_mut() {
        if let Some(process) = kernel.process.as_mut() {
            if process.exited().is_some() {
                let how = process.describe_exit().await;
                note = Some(format!(
                    "this session's kernel {how} between calls; a new one was started, so \
                     variables and imports from before are gone"
                ));
                slot.kernel = None;
            }
        }
    }
    if slot.kernel.is_some() {
        return Ok(note);
    }
    let kernel = tokio::select! {
        kernel = open_kernel(target, config, ctx, call) => kernel,
        _ = ctx.cancel.cancelled() => bail!("{tool} was cancelled while the kernel was starting"),
    };
    let kernel = kernel.map_err(|e| anyhow!("{tool}: {e:#}"))?;
    if known_session.is_some_and(|s| s != kernel.kernel_session) {
        note = Some(format!(
            "{} was restarted since toolbox's previous call (by its owner?): variables and \
             imports from before that are gone",
            kernel.name
        ));
    }
    slot.kernel = Some(kernel);
    Ok(note)
}

/// Attaches to the kernel or starts it. Attaching is bounded by the call's own timeout too
/// (`call`: its deadline and length), so a silent kernel costs a call no more than it asked
/// for; starting one may take `[python] kernel_timeout_ms` whatever the call's timeout.
async fn open_kernel(
    target: &KernelTarget,
    config: &PythonConfig,
    ctx: &ToolContext,
    call: (Instant, Duration),
) -> Result<Kernel> {
    let deadline = Instant::now() + config.kernel_timeout;
    match target {
        KernelTarget::Attach(file) => {
            let what = || {
                format!(
                    "cannot attach to the Jupyter kernel of [python] connection_file {}",
                    file.display()
                )
            };
            let info = ConnectionInfo::from_file(file).with_context(what)?;
            let name = format!("the attached kernel (connection file {})", file.display());
            let (deadline, limit) = if call.0 < deadline {
                (
                    call.0,
                    format!("the call's timeout ({} ms)", call.1.as_millis()),
                )
            } else {
                (deadline, "[python] kernel_timeout_ms".to_string())
            };
            connect(info, None, InterruptMode::Message, name, deadline, &limit)
                .await
                .with_context(what)
        }
        KernelTarget::Start(kernel_name) => {
            let spec = spec::find(kernel_name, config.venv.as_deref())?;
            let cwd = ctx
                .workspace
                .scratchpad()
                .map_err(|e| anyhow!("cannot create the session scratchpad: {e}"))?;
            // Started kernels live inside toolbox's containment.
            toolbox_host::containment::ensure();
            toolbox_host::containment::before_shutdown(shutdown_started_kernels);
            let (process, info) = process::spawn(&spec, &cwd)?;
            let name = format!(
                "the kernel toolbox started from kernelspec {:?} (pid {})",
                spec.name, process.pid
            );
            let mut process = Some(process);
            let what = || format!("the kernel {:?} did not start", spec.name);
            if let Err(e) = wait_listening(&info, &mut process, deadline).await {
                return Err(e).with_context(what);
            }
            let limit = "[python] kernel_timeout_ms";
            let kernel = connect(info, process, spec.interrupt_mode, name, deadline, limit)
                .await
                .with_context(what)?;
            let mut kernel = kernel;
            if let Some(process) = kernel.process.as_mut() {
                // Start-up chatter (ipykernel's warning about TCP, say) is not news when the
                // kernel later dies.
                process.forget_output();
                process.remove_connection_file();
            }
            Ok(kernel)
        }
    }
}

/// Waits until a started kernel accepts TCP connections on its ports (ZeroMQ's own
/// reconnect backs off by seconds), or fails when it exits or takes too long.
async fn wait_listening(
    info: &ConnectionInfo,
    process: &mut Option<Process>,
    deadline: Instant,
) -> Result<()> {
    let ports = [
        info.shell_port,
        info.iopub_port,
        info.control_port,
        info.hb_port,
    ];
    let mut ready = 0;
    while ready < ports.len() {
        if let Some(p) = process.as_mut() {
            if p.exited().is_some() {
                bail!("it {}", p.describe_exit().await);
            }
        }
        if Instant::now() >= deadline {
            let output = process.as_ref().map(|p| p.output()).unwrap_or_default();
            if let Some(p) = process.as_mut() {
                p.kill();
            }
            bail!(
                "it was not listening on its ports after [python] kernel_timeout_ms; it was \
                 killed{}",
                if output.is_empty() {
                    String::new()
                } else {
                    format!(". Its output:\n{output}")
                }
            );
        }
        let addr = info.socket_addr(ports[ready]);
        match tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        {
            Ok(Ok(_)) => ready += 1,
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    Ok(())
}

/// Connects the channels, checks the kernel answers (with iopub flowing) and installs the
/// helper in an IPython kernel.
async fn connect(
    info: ConnectionInfo,
    mut process: Option<Process>,
    interrupt: InterruptMode,
    name: String,
    deadline: Instant,
    limit: &str,
) -> Result<Kernel> {
    if process.is_none() {
        // A dead kernel or a wrong port fails here at once, not after ZeroMQ's retries.
        let addr = info.socket_addr(info.shell_port);
        let within = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(5));
        match tokio::time::timeout(within, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                bail!("nothing answers on {addr}, its shell port ({e}): is the kernel running?")
            }
            Err(_) => bail!("{addr}, its shell port, did not accept a connection in time"),
        }
    }
    let within = deadline.saturating_duration_since(Instant::now());
    let channels = match Channels::connect(&info, within).await {
        Ok(c) => c,
        Err(e) => {
            if let Some(p) = process.as_mut() {
                p.kill();
            }
            return Err(e);
        }
    };
    let mut kernel = Kernel {
        channels,
        session: Session::new(&info.key)?,
        info,
        process,
        interrupt,
        helper: false,
        name,
        hb_seq: 0,
        bad_signatures: 0,
        executable: None,
        kernel_session: String::new(),
        restarted_as: None,
    };
    let kernel_info = match handshake(&mut kernel, deadline, limit).await {
        Ok(info) => info,
        Err(e) => {
            if let Some(p) = kernel.process.as_mut() {
                p.kill();
            }
            return Err(e);
        }
    };
    if kernel_info["language_info"]["name"].as_str() == Some("python") {
        kernel.helper = install_helper(&mut kernel, deadline).await;
    }
    Ok(kernel)
}

/// kernel_info_request until the reply and an iopub message for it arrive (the latter shows
/// the iopub subscription is live; messages published before it are lost).
async fn handshake(kernel: &mut Kernel, deadline: Instant, limit: &str) -> Result<Value> {
    let mut answered_once = false;
    loop {
        let (id, frames) = kernel
            .session
            .message("kernel_info_request", &json!({}), &json!({}))?;
        wire::send_within(&mut kernel.channels.shell, frames, SEND_WITHIN)
            .await
            .context("cannot send kernel_info_request")?;
        let round_end = deadline.min(Instant::now() + Duration::from_secs(1));
        let mut reply = None;
        let mut iopub_seen = false;
        loop {
            if let (Some(reply), true) = (&reply, iopub_seen) {
                return Ok(Value::clone(reply));
            }
            let Kernel {
                channels,
                session,
                process,
                bad_signatures,
                kernel_session,
                ..
            } = &mut *kernel;
            tokio::select! {
                m = channels.iopub.recv() => {
                    if let Ok(Received::Message(m)) = m.map(|m| wire::decode(&session.signer, m)) {
                        iopub_seen |= m.parent_id() == id;
                    }
                }
                m = wire::recv(&mut channels.shell) => match m.map(|m| wire::decode(&session.signer, m)) {
                    Ok(Received::Message(m)) if m.parent_id() == id && m.msg_type() == "kernel_info_reply" => {
                        answered_once = true;
                        *kernel_session = m.header["session"].as_str().unwrap_or("").to_string();
                        reply = Some(m.content);
                    }
                    Ok(Received::BadSignature) => *bad_signatures += 1,
                    Ok(_) => {}
                    Err(e) => bail!("the shell channel failed: {e}"),
                },
                status = exit_of(process) => bail!(
                    "it {} before answering",
                    status.map(process::describe_status).unwrap_or_else(|e| format!("ended ({e})"))
                ),
                _ = tokio::time::sleep_until(round_end) => break,
            }
        }
        if Instant::now() >= deadline {
            let mut why = format!("it did not answer kernel_info_request within {limit}");
            if kernel.bad_signatures > 0 {
                why.push_str(&format!(
                    "; {} replies were dropped because their signature did not match the key \
                     (is the connection file's key the kernel's?)",
                    kernel.bad_signatures
                ));
            } else if answered_once {
                why.push_str("; it answered on the shell channel but nothing came on iopub");
            }
            bail!(why);
        }
    }
}

pub(super) async fn install_helper(kernel: &mut Kernel, deadline: Instant) -> bool {
    let code = format!(
        "exec({}, {{'SRC': {}, 'IP': get_ipython()}})",
        serde_json::to_string(HELPER_BOOTSTRAP).unwrap_or_default(),
        serde_json::to_string(HELPER_SOURCE).unwrap_or_default()
    );
    let exec = Exec {
        code: &code,
        silent: true,
        metadata: json!({}),
        user_expressions: json!({}),
    };
    let mut started = false;
    let timing = Timing {
        deadline,
        timeout: deadline.saturating_duration_since(Instant::now()),
        may_interrupt_queued: false,
    };
    match run_request(kernel, &exec, timing, None, &mut started).await {
        Ok((c, Ending::Finished)) if c.reply_ok() => true,
        Ok((c, _)) => {
            tracing::debug!(target: "toolbox", error = ?c.error, "the kernel helper was not installed");
            false
        }
        Err(e) => {
            tracing::debug!(target: "toolbox", error = %e, "the kernel helper was not installed");
            false
        }
    }
}

/// The interpreter the kernel runs (`sys.executable`, asked of the kernel itself), for
/// kernel_install.
pub(super) async fn kernel_executable(
    kernels: &Slots<Slot>,
    ctx: &ToolContext,
    config: &PythonConfig,
    tool: &str,
) -> Result<PathBuf> {
    let target = config
        .kernel
        .as_ref()
        .ok_or_else(|| anyhow!("{tool}: [python] backend = \"jupyter\" names no kernel"))?;
    let slot = kernels.slot(&slot_key(target, config, ctx));
    let mut slot = tokio::select! {
        slot = slot.lock_owned() => slot,
        _ = ctx.cancel.cancelled() => bail!("{tool} was cancelled"),
    };
    let unbounded = (
        Instant::now() + config.kernel_timeout,
        config.kernel_timeout,
    );
    ensure_kernel(&mut slot, target, config, ctx, tool, unbounded).await?;
    let Some(kernel) = slot.kernel.as_mut() else {
        bail!("{tool}: no kernel");
    };
    if let Some(path) = &kernel.executable {
        return Ok(path.clone());
    }
    let exec = Exec {
        code: "",
        silent: true,
        metadata: json!({}),
        user_expressions: json!({"executable": "__import__('sys').executable.encode().hex()"}),
    };
    let timeout = config.kernel_timeout;
    let mut started = false;
    let (c, ending) = run_request(
        kernel,
        &exec,
        Timing {
            deadline: Instant::now() + timeout,
            timeout,
            may_interrupt_queued: false,
        },
        Some(ctx),
        &mut started,
    )
    .await?;
    if !matches!(ending, Ending::Finished) {
        bail!(
            "{tool}: {} did not answer which interpreter it runs (it may be busy with a long \
             call); try again when it is free",
            kernel.name
        );
    }
    let answer = &c.reply.as_ref().unwrap_or(&Value::Null)["user_expressions"]["executable"];
    let text = answer["data"]["text/plain"].as_str().unwrap_or("");
    let path = text
        .trim()
        .strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .and_then(|hex| wire::unhex(hex.as_bytes()))
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            anyhow!(
                "{tool}: {} did not say which interpreter it runs (sys.executable: {})",
                kernel.name,
                if answer.is_null() {
                    "no answer".to_string()
                } else {
                    answer.to_string()
                }
            )
        })?;
    let path = PathBuf::from(path);
    kernel.executable = Some(path.clone());
    Ok(path)
}

/// The containment shutdown hook: asks every kernel toolbox started to shut down, waits a
/// little, then kills what is left and removes their connection files.
fn shutdown_started_kernels() {
    let kernels = process::take_started();
    if kernels.is_empty() {
        return;
    }
    let asked = kernels.clone();
    // A runtime of its own: this runs on the way out, from synchronous code.
    let worker = std::thread::Builder::new()
        .name("toolbox-kernel-shutdown".into())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let mut asks = tokio::task::JoinSet::new();
                for k in asked {
                    asks.spawn(async move {
                        let _ =
                            send_control(&k.info, "shutdown_request", json!({"restart": false}))
                                .await;
                    });
                }
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while asks.join_next().await.is_some() {}
                })
                .await;
            });
        });
    if let Ok(worker) = worker {
        let _ = worker.join();
    }
    let until = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < until && kernels.iter().any(|k| process::running(k.pid)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for k in &kernels {
        process::kill_group(k.pid);
        let _ = std::fs::remove_dir_all(&k.folder);
    }
}
