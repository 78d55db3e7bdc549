//! The isolated backend: one worker process per session, killed on timeout.
//!
//! A worker is the found interpreter (or the configured venv's python, which is the same
//! Python) running the driver as `python -E -u -c <driver> --serve`: JSON lines in on
//! stdin, out on stdout. It runs in its own process group, so a timeout or a cancellation
//! kills it and everything it started; a crash (a segfault, `os._exit`) only ends the
//! worker. Either way the session's state is gone, the call says so, the next call of that
//! session starts a fresh worker and its result carries a note saying the state was reset.
//!
//! Calls of one session run one at a time; different sessions run in parallel. The workers
//! are kept in a `Slots` table, part of `crate::sessions`, one `Slot` per session.
//!
//! The worker never changes into a folder by name: before each run toolbox sends it the
//! session scratchpad it holds open (a descriptor, over a socket the worker has as fd 3),
//! and the driver `fchdir`s into that very folder, so a folder swapped for a link meanwhile
//! changes nothing.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::OwnedMutexGuard;
use toolbox_host::limits::{Counters, Limits, PreparedLimits};
use toolbox_host::sandbox::{self, send_fd, ChildSetup, PreparedSandbox, Signal};

use crate::backend::{Backend, Call, RunRequest, RunResult};
use crate::evict::{Evicted, SessionLimits, SlotState, Slots};
use crate::DRIVER_SOURCE;

/// How much of a worker's own stderr (crash reports) is kept for the error message.
const STDERR_TAIL_LINES: usize = 40;

/// What the isolated backend keeps per session: its worker, and what to tell its next call.
#[derive(Default)]
pub(crate) struct Slot {
    worker: Option<Worker>,
    /// Why the previous worker of this session ended, told to the next call.
    restarted: Option<String>,
    /// When the session's last call ended.
    last_used: Option<std::time::Instant>,
}

impl SlotState for Slot {
    fn is_empty(&self) -> bool {
        self.worker.is_none()
    }

    fn has_note(&self) -> bool {
        self.restarted.is_some()
    }

    fn last_used(&self) -> Option<std::time::Instant> {
        self.last_used
    }

    fn give_back(&mut self, why: &Evicted) {
        if let Some(mut worker) = self.worker.take() {
            worker.kill();
        }
        self.restarted = Some(why.why("was stopped"));
    }
}

/// One running driver process.
pub struct Worker {
    child: Child,
    pid: Option<u32>,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    interpreter: PathBuf,
    /// The `[limits]` it was started under; the prepared form holds its limit cgroup, which
    /// is killed and removed when the worker goes.
    limits: Limits,
    prepared: Option<Arc<PreparedLimits>>,
    /// Toolbox's end of the socket the worker gets folders over (its fd 3).
    folders: UnixStream,
    /// The sandbox it runs in (its summary), if any. A sandboxed worker is told each run's
    /// folder by name, never handed a descriptor: one opened out here would lead around the
    /// read-only mounts of its namespace.
    sandbox: Option<String>,
}

/// The worker's descriptor for the socket its folders come over.
const FOLDER_SOCKET_FD: RawFd = 3;

impl Worker {
    /// Starts `python -E -u -c <driver> --serve` in the folder `cwd` (held open), in a new
    /// process group, under `limits` (`renewable`: the CPU limit is renewed before each call,
    /// for a worker that serves many).
    pub async fn spawn(
        interpreter: &Path,
        cwd: &OwnedFd,
        limits: Limits,
        renewable: bool,
        sandbox: Option<Arc<PreparedSandbox>>,
    ) -> Result<Worker> {
        let (folders, theirs) =
            UnixStream::pair().context("cannot make the Python worker's folder socket")?;
        let theirs: OwnedFd = theirs.into();
        let mut command = crate::common::python_command(interpreter);
        command
            .args(["-E", "-u", "-c", DRIVER_SOURCE, "--serve"])
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let prepared = (!limits.is_none()).then(|| {
            Arc::new(if renewable {
                limits.prepare_renewable()
            } else {
                limits.prepare()
            })
        });
        let summary = sandbox.as_ref().map(|s| s.summary().to_string());
        if sandbox.is_some() {
            command.env("TOOLBOX_FOLDER_BY_NAME", "1");
        }
        // In the child: the limits; the folder held, not whatever its name points at now;
        // the folder socket as fd 3 (after the limits, which may use descriptors of their own
        // that fd 3 would replace); last the sandbox (the mounts, then Landlock and seccomp;
        // nothing after may mount or widen).
        ChildSetup::new()
            .limits(prepared.clone())
            .enter_folder(cwd.as_fd())
            .place_fd(theirs.as_fd(), FOLDER_SOCKET_FD)
            .sandbox(sandbox)
            .apply_to(command.as_std_mut());
        let mut child = command
            .spawn()
            .with_context(|| format!("cannot start the Python worker {}", interpreter.display()))?;
        drop(theirs);
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            bail!("the Python worker's pipes were not set up");
        };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
        Ok(Worker {
            child,
            pid,
            stdin,
            stdout: BufReader::new(stdout),
            stderr_tail,
            interpreter: interpreter.to_path_buf(),
            limits,
            prepared,
            folders,
            sandbox: summary,
        })
    }

    /// Hands the worker the folder its next run works in: the descriptor, or for a sandboxed
    /// worker its name (a 4-byte length, then the bytes), which the worker enters by name
    /// inside its own mounts.
    fn send_folder(&self, folder: &OwnedFd) -> std::io::Result<()> {
        if self.sandbox.is_none() {
            return send_fd(&self.folders, folder.as_fd());
        }
        use std::io::Write;
        use std::os::unix::ffi::OsStrExt;
        let path = std::fs::read_link(format!("/proc/self/fd/{}", folder.as_raw_fd()))?;
        let bytes = path.as_os_str().as_bytes();
        let mut message = (bytes.len() as u32).to_be_bytes().to_vec();
        message.extend_from_slice(bytes);
        (&self.folders).write_all(&message)
    }

    /// Before a call: the CPU limit applies per call (see `renew_cpu_budget`), and the limit
    /// cgroup's counters now, to tell afterwards whether this call hit a limit. Also returns
    /// the worker's pid and the CPU time at which the watchdog stops it (in case the code
    /// raised its own soft limit or ignores SIGXCPU).
    fn arm_limits(&self) -> (Counters, Option<(i32, Duration)>) {
        let Some(prepared) = &self.prepared else {
            return (Counters::default(), None);
        };
        let mut watch = None;
        if let (Some(seconds), Some(pid)) = (self.limits.cpu_seconds, self.pid) {
            let pid = pid as i32;
            if let Some(used) = toolbox_host::limits::renew_cpu_budget(pid, seconds) {
                let extra = seconds + 1 + toolbox_host::limits::CPU_HARD_EXTRA;
                watch = Some((pid, used + Duration::from_secs(extra)));
            }
        }
        (prepared.counters(), watch)
    }

    /// The limit this call ran into, if any, in words.
    fn limit_message(
        &self,
        since: Counters,
        signal: Option<i32>,
        failed: bool,
        output: &str,
    ) -> Option<String> {
        let prepared = self.prepared.as_ref()?;
        prepared
            .diagnose(since, signal, failed, output)
            .map(|e| self.limits.message(e, "the code"))
    }

    /// Sends one request line and reads one response line; `None` when the worker ended.
    pub async fn call(&mut self, request: &Value) -> std::io::Result<Option<String>> {
        let mut line = request.to_string();
        line.push('\n');
        if let Err(e) = self.stdin.write_all(line.as_bytes()).await {
            return if e.kind() == std::io::ErrorKind::BrokenPipe {
                Ok(None)
            } else {
                Err(e)
            };
        }
        self.stdin.flush().await.ok();
        let mut response = String::new();
        match self.stdout.read_line(&mut response).await? {
            0 => Ok(None),
            _ => Ok(Some(response)),
        }
    }

    /// Kills the worker's whole process group (it and whatever it started).
    pub fn kill(&mut self) {
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            // A process group we created; a stale id is harmless (ESRCH).
            sandbox::signal_group(pid, Signal::KILL);
        }
        let _ = self.child.start_kill();
    }

    /// How the worker ended, with the last lines it wrote to its own stderr, and the signal
    /// that ended it.
    pub async fn describe_exit(&mut self) -> (String, Option<i32>) {
        use std::os::unix::process::ExitStatusExt;
        let status = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
        let (how, signal) = match status {
            Ok(Ok(status)) => (describe_status(status), status.signal()),
            _ => {
                self.kill();
                ("stopped answering".to_string(), None)
            }
        };
        // Give the stderr reader a moment to drain what the process wrote before it died.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let tail: Vec<String> = self
            .stderr_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect();
        if tail.is_empty() {
            (how, signal)
        } else {
            (
                format!("{how}; its last words:\n{}", tail.join("\n")),
                signal,
            )
        }
    }
}

/// Resolves when the process `watch` names has used the given CPU time (polled: a few reads
/// of /proc per second). Never resolves without a watch.
async fn cpu_watchdog(watch: Option<(i32, Duration)>) {
    let Some((pid, limit)) = watch else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if toolbox_host::limits::cpu_time(pid).is_some_and(|used| used >= limit) {
            return;
        }
    }
}

fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = match sandbox::signal_name(signal) {
            "SIGSEGV" => " (SIGSEGV, a segmentation fault)",
            "SIGABRT" => " (SIGABRT)",
            "SIGKILL" => " (SIGKILL; out of memory?)",
            "SIGBUS" => " (SIGBUS)",
            "SIGFPE" => " (SIGFPE)",
            "SIGILL" => " (SIGILL)",
            "SIGTERM" => " (SIGTERM)",
            _ => "",
        };
        format!("was killed by signal {signal}{name}")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

/// A session's worker while a request is in flight: if the call is dropped midway (the
/// executor's own timeout, a cancellation), the half-finished worker is killed so the next
/// call never reads a stale answer.
struct InFlight {
    slot: OwnedMutexGuard<Slot>,
    armed: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.slot.last_used = Some(std::time::Instant::now());
        if self.armed {
            if let Some(mut worker) = self.slot.worker.take() {
                worker.kill();
            }
            self.slot.restarted = Some("was stopped in the middle of a call".into());
        }
    }
}

/// The isolated backend over its table of workers, one slot per session key (see the
/// module's documentation).
pub(crate) struct Isolated<'a> {
    pub workers: &'a Slots<Slot>,
}

impl Backend for Isolated<'_> {
    async fn run(&self, mut request: RunRequest, call: &Call<'_>) -> Result<RunResult> {
        // A worker runs the configured venv's python; without one, the found interpreter
        // adds the per-user venv's packages, as the embedded one does.
        request.site_dirs = call.config.import_site_dirs(true);
        run(self.workers, request, call).await
    }

    /// Stops the workers [`crate::evict`]'s rule says should go.
    fn evict(&self, limits: SessionLimits, incoming: Option<&str>) {
        self.workers.evict(limits, incoming);
    }
}

/// Runs one request in the session's worker.
async fn run(workers: &Slots<Slot>, request: RunRequest, call: &Call<'_>) -> Result<RunResult> {
    let Call {
        ctx,
        config,
        tool,
        timeout,
        ..
    } = *call;
    let (cwd, limits) = (&*call.cwd, call.limits);
    let sandbox = call.sandbox.clone();
    let interpreter = config.python().map_err(|e| anyhow!("{tool}: {e:#}"))?;
    let interpreter = interpreter.as_path();
    let sessions = config.session_limits;
    let deadline = tokio::time::Instant::now() + timeout;
    let key = request.session.clone();
    // A session about to start a worker always looks: a burst of new sessions must not pass
    // the cap before the next look.
    if call.look || workers.is_empty(&key) {
        workers.evict(sessions, Some(&key));
    }
    let slot = workers.slot(&key);
    let slot = tokio::select! {
        slot = slot.lock_owned() => slot,
        _ = tokio::time::sleep_until(deadline) => bail!(
            "{tool} timed out after {} ms waiting for this session's previous call to finish",
            timeout.as_millis()
        ),
        _ = ctx.cancel.cancelled() => bail!("{tool} was cancelled"),
    };
    let mut call = InFlight { slot, armed: false };
    let note = call.slot.restarted.take();
    if let Some(worker) = call.slot.worker.as_mut() {
        let exited = matches!(worker.child.try_wait(), Ok(Some(_)));
        let summary = sandbox.as_ref().map(|s| s.summary().to_string());
        if exited
            || worker.interpreter != interpreter
            || worker.limits != limits
            || worker.sandbox != summary
        {
            worker.kill();
            call.slot.worker = None;
        }
    }
    if call.slot.worker.is_none() {
        call.slot.worker =
            Some(Worker::spawn(interpreter, cwd, limits, true, sandbox.clone()).await?);
    }
    let Some(worker) = call.slot.worker.as_mut() else {
        bail!("{tool}: no Python worker");
    };
    let (since, cpu_watch) = worker.arm_limits();
    call.armed = true;
    // The folder first: the driver takes it off the socket before it reads anything else of
    // the request.
    let sent = worker.send_folder(cwd);
    let request = request.into_driver();
    let outcome = tokio::select! {
        line = async {
            sent?;
            worker.call(&request).await
        } => Ok(line),
        _ = tokio::time::sleep_until(deadline) => Err(format!("timed out after {} ms", timeout.as_millis())),
        _ = ctx.cancel.cancelled() => Err("was cancelled".to_string()),
        _ = cpu_watchdog(cpu_watch) => {
            let message = limits.message(toolbox_host::limits::Exceeded::Cpu, "the code");
            worker.kill();
            call.slot.worker = None;
            call.slot.restarted = Some("ran out of CPU time and was killed".into());
            call.armed = false;
            bail!("{message}.\n{tool}: the worker process was killed; the session was restarted and its state (variables, imports) is lost; the next call starts a fresh worker.");
        }
    };
    let lost = "the session was restarted and its state (variables, imports) is lost; \
                the next call starts a fresh worker";
    let text = match outcome {
        Ok(Ok(Some(text))) => text,
        Ok(Ok(None)) => {
            let (how, signal) = worker.describe_exit().await;
            let limit = worker
                .limit_message(since, signal, true, &how)
                .map(|m| format!("{m}.\n"))
                .unwrap_or_default();
            worker.kill();
            call.slot.worker = None;
            call.slot.restarted = Some("crashed".into());
            call.armed = false;
            bail!("{limit}{tool}: the Python worker process {how}\n\nThe worker crashed; {lost}.");
        }
        Ok(Err(e)) => {
            worker.kill();
            call.slot.worker = None;
            call.slot.restarted = Some("failed".into());
            call.armed = false;
            return Err(anyhow!(e))
                .context(format!("{tool}: cannot talk to the Python worker; {lost}"));
        }
        Err(why) => {
            worker.kill();
            call.slot.worker = None;
            call.slot.restarted = Some(format!("{why} and was killed"));
            call.armed = false;
            bail!("{tool} {why}: the worker process was killed; {lost}.");
        }
    };
    call.armed = false;
    let mut result = RunResult::from_driver(crate::backend::parse_driver_response(&text, tool)?);
    // A MemoryError the code raised (and survived) under the memory limit.
    if let Some(error) = &result.error {
        if let Some(message) = worker.limit_message(since, None, true, &error.ename) {
            result.add_note(message);
        }
    }
    if let Some(why) = note {
        result.add_note(format!(
            "this session's previous Python worker {why}; a new one was started, so \
             variables and imports from before are gone"
        ));
    }
    Ok(result)
}
