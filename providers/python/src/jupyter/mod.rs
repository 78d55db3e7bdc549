//! The `jupyter` backend: run_python_code in a real Jupyter kernel, attached or started.
//!
//! - **Attach** (`[python] connection_file`): toolbox connects to a kernel somebody else
//!   runs — the user's, with their data loaded. Every session of every workspace that uses
//!   that file shares the one kernel and its namespace; calls are sent one at a time. toolbox
//!   never changes the kernel's working directory, never interrupts code it did not send, and
//!   never shuts the kernel down.
//! - **Start** (`[python] kernel_name`): toolbox starts one kernel per session from the
//!   kernelspec (see [`spec`]), in the session scratchpad, and restarts it when it dies. At
//!   exit it asks each kernel to shut down (`shutdown_request`) and kills what is left; the
//!   containment janitor kills them if toolbox itself is killed.
//!
//! The protocol is spoken natively ([`wire`]: ZeroMQ in pure Rust, HMAC-SHA256 signatures
//! verified on every message); no Python Jupyter client runs anywhere in toolbox. A call
//! sends one `execute_request` and gathers, from iopub, the messages whose parent is that
//! request — streams, display data, the execute result, the error — until the kernel's
//! `status: idle` for it and the `execute_reply` have both arrived. They become the same
//! structured result the driver returns on the other backends ([`crate::run::execute`]),
//! so the text a model reads is rendered by the same code; PNG images are saved as
//! `output/figure-<n>.png` through the workspace.
//!
//! In an IPython kernel, toolbox installs a small helper (`helper.py`, as the module
//! `_toolbox_kernel`) that acts only on toolbox's own requests: it defines `OUTPUT_DIR`,
//! sends tracebacks in plain Python form with the embedded backend's `<cell>` names, and
//! runs `script_path` requests.
//!
//! Time: the code runs until the call's timeout, then the kernel is interrupted (SIGINT to a
//! started kernel's process group, or `interrupt_request` when its kernelspec asks for
//! messages and for attached kernels) and gets [`INTERRUPT_GRACE`] to stop; the call then
//! returns what the code printed so far. A started kernel that does not stop is killed and
//! restarted. The kernel's liveness is watched the whole time: a started kernel's process
//! exit ends the call at once; any kernel silent on every channel, heartbeat included, for
//! [`HEARTBEAT_DEAD`] is taken for dead. Every send is bounded too, so no call hangs on a
//! kernel that does not answer.

mod process;
mod spec;
mod wire;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde_json::{json, Map, Value};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use toolbox_core::ToolContext;

use crate::config::{KernelTarget, PythonConfig};
use process::Process;
use spec::InterruptMode;
use wire::{Channels, ConnectionInfo, Received, Session};

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

/// How long an interrupted kernel gets to stop before the call gives up on it.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// A call that runs this long starts sending heartbeat pings.
const HEARTBEAT_AFTER: Duration = Duration::from_secs(1);
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// A kernel silent on every channel, heartbeat included, for this long is dead.
pub const HEARTBEAT_DEAD: Duration = Duration::from_secs(5);
/// Bound on handing one message to the network.
const SEND_WITHIN: Duration = Duration::from_secs(5);
/// Captured output beyond this many characters per stream is dropped (as the driver does).
const MAX_STREAM_CHARS: usize = 8 * 1024 * 1024;

/// One connection to a kernel, and the kernel's process when toolbox started it.
struct Kernel {
    channels: Channels,
    session: Session,
    info: ConnectionInfo,
    process: Option<Process>,
    interrupt: InterruptMode,
    /// Whether toolbox's helper is installed (an IPython kernel).
    helper: bool,
    /// The kernel in words, for messages.
    name: String,
    hb_seq: u64,
    bad_signatures: u64,
    executable: Option<PathBuf>,
    /// The kernel's own session id (in the header of everything it sends); a new one means
    /// the kernel was restarted behind toolbox's back (an attached kernel's owner did).
    kernel_session: String,
    /// Set when a reply came from a kernel session other than `kernel_session`.
    restarted_as: Option<String>,
}

#[derive(Default)]
struct Slot {
    kernel: Option<Kernel>,
    /// Said at the start of the next result (e.g. the kernel was restarted).
    note: Option<String>,
    /// When the slot's last call ended.
    last_used: Option<std::time::Instant>,
}

/// Whether the slot `key` has no kernel (and no call running that is starting one).
fn needs_kernel(key: &str) -> bool {
    let slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    slots
        .as_ref()
        .and_then(|slots| slots.get(key))
        .is_none_or(|slot| slot.try_lock().is_ok_and(|s| s.kernel.is_none()))
}

/// Stops the kernels toolbox started that [`crate::reap`]'s rule says should go (an
/// attached kernel is its owner's: never); `incoming` (a slot about to run a call) is never
/// one of them, and counts as live.
pub(crate) fn reap(limits: crate::reap::SessionLimits, incoming: Option<&str>) {
    let slots: Vec<(String, Arc<tokio::sync::Mutex<Slot>>)> = {
        let slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
        match slots.as_ref() {
            Some(slots) => slots.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            None => return,
        }
    };
    let now = std::time::Instant::now();
    let (mut guards, mut live, mut busy) = (Vec::new(), Vec::new(), 0);
    for (key, slot) in slots {
        if Some(key.as_str()) == incoming || key.starts_with("attach:") {
            continue;
        }
        match slot.try_lock_owned() {
            Ok(guard) if guard.kernel.as_ref().is_some_and(|k| k.process.is_some()) => {
                live.push(crate::reap::Candidate {
                    key: guards.len(),
                    last_used: guard.last_used.unwrap_or(now),
                });
                guards.push(guard);
            }
            Ok(_) => {}
            Err(_) => busy += 1,
        }
    }
    let incoming = usize::from(incoming.is_some_and(|k| !k.starts_with("attach:")));
    for (i, why) in crate::reap::choose(live, busy, incoming, limits, now) {
        let slot = &mut guards[i];
        if let Some(mut kernel) = slot.kernel.take() {
            if let Some(process) = kernel.process.as_mut() {
                process.kill();
            }
        }
        slot.note = Some(format!(
            "this session's kernel {}; a new one was started, so variables and imports from \
             before are gone",
            why.why("was stopped")
        ));
    }
    drop(guards);
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(slots) = slots.as_mut() {
        slots.retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .try_lock()
                    .map_or(true, |s| s.kernel.is_some() || s.note.is_some())
        });
    }
}

type Slots = HashMap<String, Arc<tokio::sync::Mutex<Slot>>>;
static SLOTS: Mutex<Option<Slots>> = Mutex::new(None);

fn slot_for(key: &str) -> Arc<tokio::sync::Mutex<Slot>> {
    let mut slots = SLOTS.lock().unwrap_or_else(|e| e.into_inner());
    slots
        .get_or_insert_with(HashMap::new)
        .entry(key.to_string())
        .or_default()
        .clone()
}

/// Which slot a call uses: one per connection file, or one per session and kernelspec.
fn slot_key(target: &KernelTarget, config: &PythonConfig, ctx: &ToolContext) -> String {
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

/// A call in progress: if the caller drops it midway (the executor's own time limit, a
/// cancellation), code the call started is interrupted out of band.
struct InFlight {
    slot: OwnedMutexGuard<Slot>,
    armed: bool,
    started: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.last_used = Some(std::time::Instant::now());
        if !(self.armed && self.started) {
            return;
        }
        if let Some(kernel) = self.slot.kernel.as_ref() {
            interrupt_out_of_band(kernel);
        }
    }
}

/// Interrupts without the kernel's sockets (usable from `Drop`).
fn interrupt_out_of_band(kernel: &Kernel) {
    if let (Some(process), InterruptMode::Signal) = (&kernel.process, kernel.interrupt) {
        process.sigint();
        return;
    }
    let info = kernel.info.clone();
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            let _ = send_control(&info, "interrupt_request", json!({})).await;
        });
    }
}

/// Sends one control message over a fresh connection (bounded), for when the call that
/// owned the kernel's sockets is gone.
async fn send_control(info: &ConnectionInfo, msg_type: &str, content: Value) -> Result<()> {
    use zeromq::Socket;
    let within = Duration::from_millis(1500);
    let mut options = zeromq::SocketOptions::default();
    options.connect_timeout(within);
    let mut control = zeromq::DealerSocket::with_options(options);
    tokio::time::timeout(
        within,
        control.connect(&format!("tcp://{}", info.socket_addr(info.control_port))),
    )
    .await
    .map_err(|_| anyhow!("connecting timed out"))?
    .map_err(|e| anyhow!("{e}"))?;
    let session = Session::new(&info.key)?;
    let (_, frames) = session.message(msg_type, &content, &json!({}))?;
    wire::send_within(&mut control, frames, within).await
}

/// Runs one driver-style request (`code`, or `script_path` + `args`) in the kernel and
/// returns the driver-shaped result.
pub async fn request(
    request: &Value,
    ctx: &ToolContext,
    timeout: Duration,
    tool: &str,
    config: &PythonConfig,
) -> Result<Value> {
    let target = config
        .kernel
        .as_ref()
        .ok_or_else(|| anyhow!("{tool}: [python] backend = \"jupyter\" names no kernel"))?;
    let queue_deadline = Instant::now() + timeout;
    let key = slot_key(target, config, ctx);
    // A slot about to start a kernel always looks: a burst of new sessions must not pass
    // the cap before the next look.
    if crate::reap::on_call(config.session_limits) || needs_kernel(&key) {
        reap(config.session_limits, Some(&key));
    }
    let slot = slot_for(&key);
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
    let mut meta = json!({
        "session": request["session"],
        "output_dir": request["output_dir"],
        "root": request["root"],
        "generation": request["generation"],
    });
    if !attached {
        // A started kernel is the session's own: it works in the session scratchpad.
        meta["cwd"] = request["cwd"].clone();
    }
    let code = match request["script_path"].as_str() {
        Some(path) => {
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
                serde_json::to_string(&request["args"])?
            )
        }
        None => request["code"].as_str().unwrap_or("").to_string(),
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
        crate::add_note(&mut result, note);
    }
    let partial = || {
        let text = crate::render::render_result(&result);
        if text == "(no output)\n" {
            String::new()
        } else {
            format!("\n\nOutput before that:\n{text}")
        }
    };
    match ending {
        Ending::Finished => Ok(result),
        Ending::Interrupted(why) => {
            result["interrupted"] = json!(true);
            result["stopped"] = json!(why);
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

/// Kills the session's kernel and starts a new one; says how that went.
async fn restart(
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
async fn ensure_kernel(
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
            toolbox_core::containment::ensure();
            toolbox_core::containment::before_shutdown(shutdown_started_kernels);
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

async fn install_helper(kernel: &mut Kernel, deadline: Instant) -> bool {
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
pub async fn kernel_executable(
    ctx: &ToolContext,
    config: &PythonConfig,
    tool: &str,
) -> Result<PathBuf> {
    let target = config
        .kernel
        .as_ref()
        .ok_or_else(|| anyhow!("{tool}: [python] backend = \"jupyter\" names no kernel"))?;
    let slot = slot_for(&slot_key(target, config, ctx));
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

/// One execute_request.
struct Exec<'a> {
    code: &'a str,
    silent: bool,
    metadata: Value,
    user_expressions: Value,
}

struct Timing {
    deadline: Instant,
    timeout: Duration,
    /// Whether a request still queued behind other work may be interrupted (everything in a
    /// started kernel is toolbox's; an attached kernel runs other people's code too).
    may_interrupt_queued: bool,
}

/// What one request produced.
#[derive(Default)]
struct Collected {
    idle: bool,
    reply: Option<Value>,
    execution_count: Option<u64>,
    stdout: Stream,
    stderr: Stream,
    result: Option<Map<String, Value>>,
    displays: Vec<Map<String, Value>>,
    error: Option<Value>,
}

impl Collected {
    fn reply_ok(&self) -> bool {
        self.reply
            .as_ref()
            .is_some_and(|r| r["status"].as_str() == Some("ok"))
    }
}

#[derive(Default)]
struct Stream {
    text: String,
    dropped: usize,
}

impl Stream {
    fn add(&mut self, text: &str) {
        let room = MAX_STREAM_CHARS.saturating_sub(self.text.len());
        if text.len() <= room {
            self.text.push_str(text);
            return;
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&text[..cut]);
        self.dropped += text[cut..].chars().count();
    }

    fn finish(self) -> String {
        if self.dropped == 0 {
            self.text
        } else {
            format!(
                "{}\n[... {} more characters dropped ...]\n",
                self.text, self.dropped
            )
        }
    }
}

/// How a request ended.
enum Ending {
    Finished,
    /// Interrupted (on timeout or cancellation, the reason given) and stopped in time.
    Interrupted(String),
    /// The limit passed while the request still waited behind other work in an attached
    /// kernel.
    NotStarted(String),
    /// Interrupted, but still running after the grace period.
    Unstoppable(String),
    /// The kernel went away.
    Died(String),
}

enum Event {
    Iopub(Result<zeromq::ZmqMessage>),
    Shell(Result<zeromq::ZmqMessage>),
    Beat(Result<zeromq::ZmqMessage>),
    Tick,
    Limit,
    Cancel,
    Exit(std::io::Result<std::process::ExitStatus>),
}

async fn exit_of(process: &mut Option<Process>) -> std::io::Result<std::process::ExitStatus> {
    match process {
        Some(p) => p.child.wait().await,
        None => std::future::pending().await,
    }
}

async fn cancelled(ctx: Option<&ToolContext>) {
    match ctx {
        Some(ctx) => ctx.cancel.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Sends one execute_request and gathers what belongs to it until the kernel is idle and
/// has replied, or the request is stopped. `started` turns true once the kernel began
/// running it.
async fn run_request(
    kernel: &mut Kernel,
    exec: &Exec<'_>,
    timing: Timing,
    ctx: Option<&ToolContext>,
    started: &mut bool,
) -> Result<(Collected, Ending)> {
    let content = json!({
        "code": exec.code,
        "silent": exec.silent,
        "store_history": !exec.silent,
        "user_expressions": exec.user_expressions,
        "allow_stdin": false,
        // An error in toolbox's cell must not abort cells other clients queued.
        "stop_on_error": false,
    });
    let (msg_id, frames) = kernel
        .session
        .message("execute_request", &content, &exec.metadata)?;
    let mut c = Collected::default();
    if let Err(e) = wire::send_within(&mut kernel.channels.shell, frames, SEND_WITHIN).await {
        return Ok((c, Ending::Died(format!("it could not be reached: {e}"))));
    }
    let begun = Instant::now();
    let mut last_alive = begun;
    let mut next_beat = begun + HEARTBEAT_AFTER;
    let mut limit = timing.deadline;
    let mut stopping: Option<String> = None;
    let (mut iopub_ok, mut shell_ok, mut hb_ok) = (true, true, true);
    loop {
        if c.idle && c.reply.is_some() {
            let ending = match stopping {
                None => Ending::Finished,
                Some(why) => Ending::Interrupted(why),
            };
            return Ok((c, ending));
        }
        let Kernel {
            channels, process, ..
        } = &mut *kernel;
        let event = tokio::select! {
            m = channels.iopub.recv(), if iopub_ok => Event::Iopub(m),
            m = wire::recv(&mut channels.shell), if shell_ok => Event::Shell(m),
            m = wire::recv(&mut channels.hb), if hb_ok => Event::Beat(m),
            status = exit_of(process) => Event::Exit(status),
            _ = tokio::time::sleep_until(limit) => Event::Limit,
            _ = cancelled(ctx), if stopping.is_none() => Event::Cancel,
            _ = tokio::time::sleep_until(next_beat) => Event::Tick,
        };
        match event {
            Event::Iopub(Ok(frames)) => {
                last_alive = Instant::now();
                match wire::decode(&kernel.session.signer, frames) {
                    Received::Message(m) if m.parent_id() == msg_id => {
                        take_iopub(&mut c, m, started);
                    }
                    Received::BadSignature => kernel.bad_signatures += 1,
                    Received::Garbled(why) => {
                        tracing::debug!(target: "toolbox", why, "an iopub message was not readable")
                    }
                    Received::Message(_) => {}
                }
            }
            Event::Shell(Ok(frames)) => {
                last_alive = Instant::now();
                match wire::decode(&kernel.session.signer, frames) {
                    Received::Message(m)
                        if m.parent_id() == msg_id && m.msg_type() == "execute_reply" =>
                    {
                        if let Some(n) = m.content["execution_count"].as_u64() {
                            c.execution_count.get_or_insert(n);
                        }
                        let from = m.header["session"].as_str().unwrap_or("");
                        if !from.is_empty() && from != kernel.kernel_session {
                            kernel.restarted_as = Some(from.to_string());
                        }
                        c.reply = Some(m.content);
                    }
                    Received::BadSignature => kernel.bad_signatures += 1,
                    _ => {}
                }
            }
            Event::Beat(Ok(_)) => last_alive = Instant::now(),
            // A broken channel is not polled again (it would fail at once, forever); the
            // heartbeat or the process decides whether the kernel is gone.
            Event::Iopub(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "iopub channel failed");
                iopub_ok = false;
            }
            Event::Shell(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "shell channel failed");
                shell_ok = false;
            }
            Event::Beat(Err(e)) => {
                tracing::debug!(target: "toolbox", error = %e, "heartbeat channel failed");
                hb_ok = false;
            }
            Event::Exit(status) => {
                let how = match status {
                    Ok(status) => process::describe_status(status),
                    Err(e) => format!("ended ({e})"),
                };
                return Ok((c, Ending::Died(format!("its process {how}"))));
            }
            Event::Tick => {
                let silent_for = last_alive.elapsed();
                if silent_for > HEARTBEAT_DEAD {
                    return Ok((
                        c,
                        Ending::Died(format!(
                            "it stopped answering, heartbeat included, for {} s",
                            silent_for.as_secs()
                        )),
                    ));
                }
                kernel.hb_seq += 1;
                let ping = wire::ping_frame(kernel.hb_seq);
                let _ =
                    wire::send_within(&mut kernel.channels.hb, ping, Duration::from_millis(500))
                        .await;
                next_beat = Instant::now() + HEARTBEAT_EVERY;
            }
            Event::Limit | Event::Cancel => {
                if let Some(why) = stopping.take() {
                    return Ok((c, Ending::Unstoppable(why)));
                }
                let why = if matches!(event, Event::Cancel) {
                    "was cancelled".to_string()
                } else {
                    format!("timed out after {} ms", timing.timeout.as_millis())
                };
                if !*started && !timing.may_interrupt_queued {
                    return Ok((c, Ending::NotStarted(why)));
                }
                interrupt(kernel).await;
                stopping = Some(why);
                limit = Instant::now() + INTERRUPT_GRACE;
            }
        }
    }
}

/// Interrupts the kernel the way its kernelspec asks (attached kernels: by message).
async fn interrupt(kernel: &mut Kernel) {
    if let (Some(process), InterruptMode::Signal) = (&kernel.process, kernel.interrupt) {
        process.sigint();
        return;
    }
    let sent = match kernel
        .session
        .message("interrupt_request", &json!({}), &json!({}))
    {
        Ok((_, frames)) => {
            wire::send_within(&mut kernel.channels.control, frames, SEND_WITHIN).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::debug!(target: "toolbox", error = %e, "interrupt_request could not be sent");
    }
}

/// One iopub message of our request.
fn take_iopub(c: &mut Collected, m: wire::Message, started: &mut bool) {
    let content = m.content;
    match m.header["msg_type"].as_str().unwrap_or("") {
        "status" => match content["execution_state"].as_str() {
            Some("busy") => *started = true,
            Some("idle") => c.idle = true,
            _ => {}
        },
        "execute_input" => {
            *started = true;
            if let Some(n) = content["execution_count"].as_u64() {
                c.execution_count = Some(n);
            }
        }
        "stream" => {
            let text = content["text"].as_str().unwrap_or("");
            match content["name"].as_str() {
                Some("stderr") => c.stderr.add(text),
                _ => c.stdout.add(text),
            }
        }
        "display_data" | "update_display_data" => {
            if let Value::Object(data) = &content["data"] {
                c.displays.push(data.clone());
            }
        }
        "execute_result" => {
            if let Some(n) = content["execution_count"].as_u64() {
                c.execution_count = Some(n);
            }
            if let Value::Object(data) = content["data"].clone() {
                c.result = Some(data);
            }
        }
        "error" => c.error = Some(content),
        "clear_output" => {
            c.stdout = Stream::default();
            c.stderr = Stream::default();
            c.displays.clear();
        }
        _ => {}
    }
}

/// The collected messages as the driver's result (figures saved under `output/`).
fn to_result(c: Collected, ctx: &ToolContext) -> Value {
    let mut notes = Vec::new();
    let mut display = Vec::new();
    for data in &c.displays {
        display.push(display_item(data, ctx, &mut notes));
    }
    let result = c.result.as_ref().map(|data| {
        let mut out = Map::new();
        let plain = data
            .get("text/plain")
            .and_then(text_of)
            .or_else(|| data.keys().next().map(|k| format!("<{k}>")))
            .unwrap_or_default();
        out.insert("text/plain".into(), Value::String(plain));
        if let Some(html) = data.get("text/html").and_then(text_of) {
            out.insert("text/html".into(), Value::String(html));
        }
        Value::Object(out)
    });
    let error = c.error.as_ref().map(|e| {
        let lines: Vec<String> = e["traceback"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let traceback = wire::strip_ansi(&lines.join("\n"));
        json!({
            "ename": e["ename"].as_str().unwrap_or("Error"),
            "evalue": wire::strip_ansi(e["evalue"].as_str().unwrap_or("")),
            "traceback": traceback,
        })
    });
    json!({
        "execution_count": c.execution_count,
        "stdout": c.stdout.finish(),
        "stderr": c.stderr.finish(),
        "result": result,
        "display_data": display,
        "error": error,
        "interrupted": false,
        "notes": notes,
    })
}

/// Jupyter allows a text value as a string or a list of strings.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn display_item(data: &Map<String, Value>, ctx: &ToolContext, notes: &mut Vec<String>) -> Value {
    if let Some(png) = data.get("image/png").and_then(text_of) {
        let saved = base64::engine::general_purpose::STANDARD
            .decode(png.trim().replace('\n', ""))
            .map_err(|e| anyhow!("the kernel sent PNG data that is not base64: {e}"))
            .and_then(|bytes| save_figure(ctx, &bytes));
        match saved {
            Ok(path) => return json!({"mime_type": "image/png", "path": path.to_string_lossy()}),
            Err(e) => notes.push(format!("a figure could not be saved: {e:#}")),
        }
    }
    if let Some(text) = data.get("text/plain").and_then(text_of) {
        let mut item = json!({"mime_type": "text/plain", "text": text});
        if let Some(html) = data.get("text/html").and_then(text_of) {
            item["html"] = Value::String(html);
        }
        return item;
    }
    json!({"mime_type": data.keys().next().cloned().unwrap_or_default()})
}

/// Writes a PNG as the next free `output/figure-<n>.png` (created exclusively, never through
/// a link), the name the other backends give figures; returns its absolute path.
fn save_figure(ctx: &ToolContext, png: &[u8]) -> Result<PathBuf> {
    use std::io::Write;
    let folder = ctx
        .workspace
        .output_dir()
        .context("cannot create the session output folder")?;
    let located = ctx.workspace.locate("output").map_err(|e| anyhow!("{e}"))?;
    let dir = ctx
        .workspace
        .open_dir(&located)
        .map_err(|e| anyhow!("{e}"))?;
    let highest = dir
        .entries()?
        .iter()
        .filter_map(|e| figure_number(&e.name.to_string_lossy()))
        .max()
        .unwrap_or(0);
    for n in highest + 1..highest + 1000 {
        let name = format!("figure-{n}.png");
        match dir.create_new(std::ffi::OsStr::new(&name)) {
            Ok(mut file) => {
                file.write_all(png)?;
                return Ok(folder.join(name));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no free figure-<n>.png name in output/")
}

fn figure_number(name: &str) -> Option<u64> {
    name.strip_prefix("figure-")?
        .strip_suffix(".png")?
        .parse()
        .ok()
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

/// Whether process `pid` still runs (for tests of this crate).
#[cfg(test)]
pub(crate) fn tests_support_running(pid: i32) -> bool {
    process::running(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_capped_on_character_boundaries() {
        let mut s = Stream::default();
        s.add("héllo");
        assert_eq!(s.finish(), "héllo");
        let mut s = Stream::default();
        s.add(&"é".repeat(MAX_STREAM_CHARS));
        let text = s.finish();
        assert!(text.ends_with(&format!(
            "\n[... {} more characters dropped ...]\n",
            MAX_STREAM_CHARS / 2
        )));
    }

    #[test]
    fn figure_names() {
        assert_eq!(figure_number("figure-12.png"), Some(12));
        assert_eq!(figure_number("figure-x.png"), None);
        assert_eq!(figure_number("figure-1.jpg"), None);
    }
}
