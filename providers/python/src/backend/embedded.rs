//! The embedded backend: one CPython interpreter inside this process, on one thread.
//!
//! - **One thread.** The interpreter is started (and only ever entered by this crate) on a
//!   dedicated thread, `toolbox-python`. Jobs arrive over a channel; each job attaches to the
//!   interpreter, calls the driver's `handle_object` with the request as a dict (no JSON
//!   text either way), detaches and answers over a oneshot channel.
//!   Nothing here holds the GIL across an `.await`, and between jobs the GIL is free, so
//!   threads that user code started keep running.
//! - **Started from the build interpreter.** The interpreter is initialised with the build
//!   interpreter's path as its program name, so `sys.prefix`, the stdlib and
//!   `sys.executable` are the ones toolbox was built against, whatever PATH says; PYTHON*
//!   environment variables are ignored for the same reason. After start the loaded
//!   libpython's version is compared with the build one (LD_LIBRARY_PATH can override an
//!   rpath that is a DT_RUNPATH) and a mismatch is refused with the library's path.
//! - **Timeouts.** A run past its limit is interrupted in-process: the driver's
//!   `ExecutionInterrupted` is raised in the Python thread with `PyThreadState_SetAsyncExc`
//!   (stops pure-Python code at its next bytecode), and SIGUSR2 is sent to that thread so a
//!   blocking system call (`time.sleep`, a socket read, waiting for a subprocess) returns
//!   EINTR and the driver's signal handler raises. Code that neither returns to Python nor
//!   makes an interruptible system call — a long computation inside a C extension — cannot
//!   be stopped in-process: the call then reports that the interpreter is still busy, and
//!   later calls are refused with a clear message until it finishes (the interrupt is still
//!   raised as soon as control returns to Python). The isolated backend kills instead.
//! - **Process-global state.** One interpreter per process: `sys.modules`, `sys.path`,
//!   environment variables and the working directory are shared by every session; each
//!   session has its own namespace. Runs are serialised: one at a time, across sessions.
//!   The interpreter is the one process-wide singleton here; which sessions it holds a
//!   namespace for is kept in `Namespaces`, part of `crate::sessions`.

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyModule;
use serde_json::Value;
use tokio::sync::{oneshot, OnceCell};
use toolbox_host::handoff::{IdleSlot, IdleWork};
use toolbox_host::ToolContext;

use crate::backend::{Backend, Call, RunRequest, RunResult};
use crate::evict::SessionLimits;
use crate::{BUILD_PYTHON_EXECUTABLE, BUILD_PYTHON_VERSION, DRIVER_SOURCE};

/// How long a timed-out run gets to stop after it was interrupted before the interpreter is
/// reported busy.
const GRACE: Duration = Duration::from_millis(2000);
/// The interrupter raises again this often (user code may swallow one with a bare except).
const REPEAT: Duration = Duration::from_millis(600);

static INTERPRETER: OnceCell<Result<Arc<Interpreter>, String>> = OnceCell::const_new();

/// Where the interpreter's thread finds a front end's work while it is idle (see
/// `toolbox_host::handoff::IdleWork`). The thread is the process's one, as the interpreter
/// is, so its slot is too; it exists before the thread starts, so an offer made earlier (by
/// `toolbox mcp`, at start-up) is found by the thread's first look.
static IDLE_SLOT: std::sync::LazyLock<Arc<IdleSlot>> = std::sync::LazyLock::new(Default::default);

/// The interpreter thread's idle slot, handed out as `ToolProvider::idle_slot`.
pub(crate) fn idle_slot() -> Arc<IdleSlot> {
    IDLE_SLOT.clone()
}

struct Job {
    id: u64,
    request: Value,
    /// The folder the code runs in, held open until the job is over: the driver `fchdir`s
    /// into it, so the folder that was checked is the one used, and no path is walked.
    cwd: Option<Arc<OwnedFd>>,
    reply: oneshot::Sender<Result<Value, String>>,
    /// Set when the caller gave up; a job not yet started is then skipped.
    abandoned: Arc<AtomicBool>,
}

/// A run that timed out and could not be interrupted.
struct Stuck {
    job: u64,
    call_id: String,
    session: String,
    since: Instant,
}

/// The Python thread's queue: jobs, and a bell (an eventfd) that wakes the thread, which
/// waits on it together with any idle work on offer (see `handoff::IdleWork`).
struct JobQueue {
    jobs: mpsc::Sender<Job>,
    bell: Arc<OwnedFd>,
}

thread_local! {
    /// True on the Python thread, which needs no bell to find the jobs it queues itself.
    static ON_PYTHON_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl JobQueue {
    fn send(&self, job: Job) -> Result<(), ()> {
        self.jobs.send(job).map_err(drop)?;
        if !ON_PYTHON_THREAD.with(|on| on.get()) {
            ring(&self.bell);
        }
        Ok(())
    }
}

fn ring(bell: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: an eventfd takes an 8-byte write; a full counter (never here) only fails.
    unsafe {
        libc::write(bell.as_raw_fd(), (&one as *const u64).cast(), 8);
    }
}

/// Waits until the bell rings or `work` (if any) is readable; true when `work` is.
fn wait(bell: &OwnedFd, work: Option<&dyn IdleWork>) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: bell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: work.map_or(-1, |work| work.fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfd entries (a negative fd is ignored by poll).
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
    if ready <= 0 {
        // EINTR (an interrupt signal for a run that just ended): look again.
        return false;
    }
    if fds[0].revents != 0 {
        let mut count: u64 = 0;
        // SAFETY: an 8-byte read of a non-blocking eventfd.
        unsafe {
            libc::read(bell.as_raw_fd(), (&mut count as *mut u64).cast(), 8);
        }
    }
    fds[1].revents != 0
}

struct Interpreter {
    jobs: JobQueue,
    next_id: AtomicU64,
    /// The job the Python thread is running (0: none). Written and read with the GIL held.
    running: AtomicU64,
    stuck: Mutex<Option<Stuck>>,
    /// `threading.get_ident()` of the Python thread, for PyThreadState_SetAsyncExc.
    ident: u64,
    /// The Python thread itself, for pthread_kill.
    pthread: libc::pthread_t,
    /// Whether the driver's SIGUSR2 handler is installed (it is unless someone else started
    /// Python in this process first, on another thread).
    signal_interrupts: bool,
    driver: Py<PyModule>,
}

/// Starts the interpreter (its thread, its signal handler) unless it runs already.
#[cfg(test)]
pub(crate) async fn ready() -> Result<()> {
    interpreter().await.map(drop)
}

/// The interpreter, started on first use.
async fn interpreter() -> Result<Arc<Interpreter>> {
    INTERPRETER
        .get_or_init(|| async {
            let (tx, rx) = oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("toolbox-python".into())
                .spawn(move || python_thread(tx));
            if let Err(e) = spawned {
                return Err(format!("cannot start the Python thread: {e}"));
            }
            rx.await
                .unwrap_or_else(|_| Err("the Python thread stopped while starting".into()))
        })
        .await
        .clone()
        .map_err(|e| anyhow!("the embedded Python interpreter is not available: {e}"))
}

fn python_thread(ready: oneshot::Sender<Result<Arc<Interpreter>, String>>) {
    let (jobs, queue) = mpsc::channel::<Job>();
    // SAFETY: eventfd has no memory preconditions; the descriptor is owned at once.
    let bell = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if bell < 0 {
        let e = std::io::Error::last_os_error();
        let _ = ready.send(Err(format!(
            "cannot create the Python thread's eventfd: {e}"
        )));
        return;
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let bell = Arc::new(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(bell) });
    let started = match start_python() {
        Ok(started) => started,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let interpreter = Arc::new(Interpreter {
        jobs: JobQueue {
            jobs,
            bell: bell.clone(),
        },
        next_id: AtomicU64::new(1),
        running: AtomicU64::new(0),
        stuck: Mutex::new(None),
        ident: started.ident,
        // SAFETY: pthread_self has no preconditions.
        pthread: unsafe { libc::pthread_self() },
        signal_interrupts: started.signal_interrupts,
        driver: started.driver,
    });
    if ready.send(Ok(interpreter.clone())).is_err() {
        return;
    }
    {
        let bell = bell.clone();
        IDLE_SLOT.on_change(Arc::new(move || ring(&bell)));
    }
    ON_PYTHON_THREAD.with(|on| on.set(true));
    // The work this thread is watching, if any (see `handoff::IdleWork`).
    let mut watching: Option<Arc<dyn IdleWork>> = None;
    loop {
        match queue.try_recv() {
            Ok(job) => {
                if let Some(work) = watching.take() {
                    work.watch(false);
                }
                run_one(&interpreter, job);
                continue;
            }
            Err(mpsc::TryRecvError::Disconnected) => return,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        // Idle: wait for a job, or for the offered work (a request on `toolbox mcp`'s
        // input, which this thread then reads and starts itself).
        let offered = IDLE_SLOT.work().filter(|work| !work.finished());
        if let Some(old) = watching.take() {
            if !offered.as_ref().is_some_and(|new| Arc::ptr_eq(&old, new)) {
                old.watch(false);
            }
        }
        if let Some(work) = offered {
            // Again after every take: starting a call turned it off.
            work.watch(true);
            watching = Some(work);
        }
        if wait(&bell, watching.as_deref()) {
            if let Some(work) = &watching {
                work.take();
            }
        }
    }
}

/// The sessions whose namespace the interpreter holds, one table for the process's one
/// interpreter: which have calls running, when each was last used, whether the driver has
/// its folders, and why a cleared one's namespace went.
#[derive(Default)]
pub(crate) struct Namespaces {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    live: HashMap<String, Live>,
    /// Sessions whose namespace was cleared, with why, told to their next call.
    cleared: HashMap<String, String>,
}

/// A session whose namespace the interpreter holds.
struct Live {
    /// When its last call ended.
    last_used: Instant,
    /// Its calls in flight.
    running: usize,
    /// Whether the driver was sent the session's folders (it keeps them with the namespace;
    /// see `_Session` in driver.py).
    told_folders: bool,
}

/// At most this many sessions keep a note of why their namespace was cleared.
const MAX_CLEARED_NOTES: usize = 10_000;

/// A call of a session, counted as running until dropped (however the call ends).
pub(crate) struct LiveCall<'a> {
    namespaces: &'a Namespaces,
    key: String,
}

impl LiveCall<'_> {
    /// Notes that the driver now has the session's folders.
    fn told_folders(&self) {
        if let Some(live) = self.namespaces.lock().live.get_mut(&self.key) {
            live.told_folders = true;
        }
    }
}

impl Drop for LiveCall<'_> {
    fn drop(&mut self) {
        if let Some(live) = self.namespaces.lock().live.get_mut(&self.key) {
            live.running = live.running.saturating_sub(1);
            live.last_used = Instant::now();
        }
    }
}

impl Namespaces {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the driver already has the folders of the session `key` (see
    /// [`Backend::needs_folders`]).
    fn knows_folders(&self, key: &str) -> bool {
        self.lock()
            .live
            .get(key)
            .is_some_and(|live| live.told_folders)
    }

    /// Whether the interpreter holds no namespace for the session `key` yet.
    fn is_new(&self, key: &str) -> bool {
        !self.lock().live.contains_key(key)
    }

    /// A call of session `key` begins: it counts as running until the guard is dropped.
    /// Also returns why its namespace was cleared since its last call, if it was.
    fn begin_call(&self, key: &str) -> (LiveCall<'_>, Option<String>) {
        let mut table = self.lock();
        table
            .live
            .entry(key.to_string())
            .or_insert(Live {
                last_used: Instant::now(),
                running: 0,
                told_folders: false,
            })
            .running += 1;
        let cleared = table.cleared.remove(key);
        let call = LiveCall {
            namespaces: self,
            key: key.to_string(),
        };
        (call, cleared)
    }

    /// Takes out of the table the sessions [`crate::evict`]'s rule says should go (`incoming`
    /// never; it counts as live) and notes why; `forget` is handed their keys while the
    /// table is still locked.
    fn evict(
        &self,
        limits: SessionLimits,
        incoming: Option<&str>,
        forget: impl FnOnce(Vec<String>),
    ) {
        let mut table = self.lock();
        let now = Instant::now();
        let mut busy = 0;
        let mut live = Vec::new();
        for (key, l) in &table.live {
            if Some(key.as_str()) == incoming {
                continue;
            }
            if l.running > 0 {
                busy += 1;
            } else {
                live.push(crate::evict::Candidate {
                    key: key.clone(),
                    last_used: l.last_used,
                });
            }
        }
        let chosen = crate::evict::choose(live, busy, usize::from(incoming.is_some()), limits, now);
        if chosen.is_empty() {
            return;
        }
        let mut keys = Vec::with_capacity(chosen.len());
        for (key, why) in chosen {
            table.live.remove(&key);
            if table.cleared.len() >= MAX_CLEARED_NOTES {
                table.cleared.clear();
            }
            table.cleared.insert(key.clone(), why.why("was cleared"));
            keys.push(key);
        }
        forget(keys);
    }
}

/// Runs one job and hands its answer back. A call started with `handoff::spawn` (an MCP
/// call) finishes here, on this thread, without waking a runtime worker for its tail; the
/// GIL is not held meanwhile. The caller may have given up; nobody listening is fine.
fn run_one(interpreter: &Arc<Interpreter>, job: Job) {
    let response = Python::attach(|py| interpreter.run_job(py, &job));
    interpreter.clear_stuck(job.id);
    let reply = job.reply;
    toolbox_host::handoff::with_inline_wakeups(|| {
        let _ = reply.send(response);
    });
}

struct Started {
    ident: u64,
    signal_interrupts: bool,
    driver: Py<PyModule>,
}

/// Initialises CPython as the build interpreter would run, and loads the driver.
fn start_python() -> Result<Started, String> {
    // SAFETY: plain CPython initialisation calls on this thread, before any other use of the
    // interpreter by this crate; the config is initialised by PyConfig_InitPythonConfig
    // before it is read and cleared after use.
    unsafe {
        if ffi::Py_IsInitialized() == 0 {
            let mut config: ffi::PyConfig = std::mem::zeroed();
            ffi::PyConfig_InitPythonConfig(&mut config);
            // Signals belong to the host (tokio handles Ctrl-C); argv is not Python's.
            config.install_signal_handlers = 0;
            config.parse_argv = 0;
            config.configure_c_stdio = 0;
            // PYTHONHOME / PYTHONPATH meant for some other Python must not redirect the stdlib.
            config.use_environment = 0;
            let program = CString::new(BUILD_PYTHON_EXECUTABLE)
                .map_err(|_| "the build interpreter path contains a NUL byte".to_string())?;
            let status = ffi::PyConfig_SetBytesString(
                &mut config,
                &mut config.program_name,
                program.as_ptr(),
            );
            if ffi::PyStatus_Exception(status) != 0 {
                ffi::PyConfig_Clear(&mut config);
                return Err(status_message("setting the program name", status));
            }
            let status = ffi::Py_InitializeFromConfig(&config);
            ffi::PyConfig_Clear(&mut config);
            if ffi::PyStatus_Exception(status) != 0 {
                return Err(status_message("initialising Python", status));
            }
            // Initialisation leaves this thread holding the GIL; jobs attach as they come.
            ffi::PyEval_SaveThread();
        }
    }
    Python::attach(|py| -> Result<Started, String> {
        let describe = |e: PyErr| e.to_string();
        let sys = py.import("sys").map_err(describe)?;
        let version: String = sys
            .getattr("version")
            .and_then(|v| v.extract())
            .map_err(describe)?;
        let version = version.replace('\n', " ");
        if version != BUILD_PYTHON_VERSION {
            return Err(format!(
                "the loaded libpython ({}) is Python {version}, but toolbox was built against \
                 Python {BUILD_PYTHON_VERSION} ({BUILD_PYTHON_EXECUTABLE}); something (often \
                 LD_LIBRARY_PATH) made the loader pick another libpython. Unset it, or rebuild \
                 so the binary carries a DT_RPATH (-Wl,--disable-new-dtags)",
                loaded_libpython()
            ));
        }
        let source = CString::new(DRIVER_SOURCE).map_err(|e| e.to_string())?;
        let driver = PyModule::from_code(py, &source, c"toolbox_driver.py", c"toolbox_driver")
            .map_err(describe)?;
        driver
            .call_method1("configure", (true,))
            .map_err(describe)?;
        let signal_interrupts = driver
            .getattr("_STATE")
            .and_then(|s| s.get_item("signal"))
            .and_then(|v| v.extract::<bool>())
            .unwrap_or(false);
        let ident: u64 = py
            .import("threading")
            .and_then(|t| t.call_method0("get_ident"))
            .and_then(|v| v.extract())
            .map_err(describe)?;
        Ok(Started {
            ident,
            signal_interrupts,
            driver: driver.unbind(),
        })
    })
}

fn status_message(what: &str, status: ffi::PyStatus) -> String {
    let text = |p: *const libc::c_char| {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: err_msg and func are NULL (handled above) or static C strings set by
            // CPython.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    format!(
        "{what} failed: {} {}",
        text(status.func),
        text(status.err_msg)
    )
}

/// The path of the libpython this process actually loaded.
pub fn loaded_libpython() -> String {
    // SAFETY: dladdr only reads the loader's tables; the address is a function in libpython.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        let addr = ffi::Py_IsInitialized as *const c_void;
        if libc::dladdr(addr, &mut info) != 0 && !info.dli_fname.is_null() {
            return CStr::from_ptr(info.dli_fname)
                .to_string_lossy()
                .into_owned();
        }
    }
    "(unknown)".into()
}

impl Interpreter {
    /// Runs on the Python thread with the GIL held.
    fn run_job(&self, py: Python<'_>, job: &Job) -> Result<Value, String> {
        // Both written under the GIL, like the interrupter's check, so a job is either
        // skipped here or visible to the interrupter as running — never neither.
        self.running.store(job.id, Ordering::SeqCst);
        if job.abandoned.load(Ordering::SeqCst) {
            self.running.store(0, Ordering::SeqCst);
            return Err("abandoned".into());
        }
        let driver = self.driver.bind(py);
        let response = crate::pyvalue::to_python(py, &job.request)
            .and_then(|request| {
                if let Some(fd) = &job.cwd {
                    request.set_item(pyo3::intern!(py, "cwd_fd"), fd.as_raw_fd())?;
                }
                driver.call_method1(pyo3::intern!(py, "handle_object"), (request,))
            })
            .and_then(|answer| crate::pyvalue::from_python(&answer))
            .map_err(|e| e.to_string());
        // An interrupt that arrived too late to hit the user's code must not hit the next
        // job. Neither step runs Python bytecode, so neither can trigger it.
        // SAFETY: the GIL is held; a NULL exception clears the pending one.
        unsafe {
            ffi::PyThreadState_SetAsyncExc(self.ident as _, std::ptr::null_mut());
        }
        if let Ok(state) = driver.getattr(pyo3::intern!(py, "_INTERRUPT")) {
            let _ = state.set_item(pyo3::intern!(py, "armed"), false);
        }
        self.running.store(0, Ordering::SeqCst);
        response
    }

    /// Interrupts job `id` if (and while) it runs, from a helper thread: taking the GIL can
    /// wait for as long as a C call holds it, and no async worker may block on that.
    fn interrupt(self: &Arc<Self>, id: u64, reason: String) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("toolbox-python-interrupt".into())
            .spawn(move || {
                for _ in 0..3 {
                    let running = Python::attach(|py| me.raise_in(py, id, &reason));
                    if !running {
                        return;
                    }
                    if me.signal_interrupts {
                        // SAFETY: the Python thread lives as long as the process.
                        unsafe {
                            libc::pthread_kill(me.pthread, libc::SIGUSR2);
                        }
                    }
                    std::thread::sleep(REPEAT);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(target: "toolbox", error = %e, "cannot start the Python interrupter thread");
        }
    }

    /// With the GIL held: raises ExecutionInterrupted in job `id` if it is in user code.
    /// Returns whether the job is still running.
    fn raise_in(&self, py: Python<'_>, id: u64, reason: &str) -> bool {
        if self.running.load(Ordering::SeqCst) != id {
            return false;
        }
        let driver = self.driver.bind(py);
        // Attribute and item reads only: running bytecode here could hand the GIL back to
        // the Python thread between this check and the raise.
        let in_user_code = driver
            .getattr("_STATE")
            .and_then(|state| state.get_item("current"))
            .and_then(|run| run.getattr("in_user_code"))
            .and_then(|v| v.extract::<bool>())
            .unwrap_or(false);
        if !in_user_code {
            // The driver is compiling or saving figures; it finishes on its own.
            return true;
        }
        if let Ok(state) = driver.getattr("_INTERRUPT") {
            let _ = state.set_item("reason", reason);
            let _ = state.set_item("armed", true);
        }
        if let Ok(exc) = driver.getattr("ExecutionInterrupted") {
            // SAFETY: the GIL is held; CPython takes its own reference to the class.
            unsafe {
                ffi::PyThreadState_SetAsyncExc(self.ident as _, exc.as_ptr());
            }
        }
        true
    }

    fn clear_stuck(&self, id: u64) {
        let mut stuck = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        if stuck.as_ref().is_some_and(|s| s.job == id) {
            *stuck = None;
        }
    }

    fn refuse_if_stuck(&self, tool: &str) -> Result<()> {
        let stuck = self.stuck.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = stuck.as_ref() {
            bail!(
                "{tool}: the embedded Python interpreter is still busy with an earlier call \
                 (call {}, session {}) that timed out {} s ago and is blocked in code that \
                 cannot be interrupted in-process (a long computation inside a C extension). \
                 Try again when it has finished — the interrupt is raised as soon as it returns \
                 to Python — or configure [python] backend = \"isolated\", where a timeout \
                 kills the worker process instead",
                s.call_id,
                s.session,
                s.since.elapsed().as_secs()
            );
        }
        Ok(())
    }
}

/// Interrupts a job whose caller went away (the executor dropped the call on its own
/// timeout or a cancellation) unless the job already answered.
struct DropGuard {
    interpreter: Arc<Interpreter>,
    id: u64,
    abandoned: Arc<AtomicBool>,
    active: bool,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if self.active {
            self.abandoned.store(true, Ordering::SeqCst);
            self.interpreter
                .interrupt(self.id, "the call was stopped by toolbox".into());
        }
    }
}

/// The embedded backend over the interpreter's namespaces (see the module's documentation).
pub(crate) struct Embedded<'a> {
    pub namespaces: &'a Namespaces,
}

impl Backend for Embedded<'_> {
    fn needs_folders(&self, key: &str) -> bool {
        !self.namespaces.knows_folders(key)
    }

    async fn run(&self, mut request: RunRequest, call: &Call<'_>) -> Result<RunResult> {
        request.site_dirs = call.config.import_site_dirs(false);
        let key = request.session.clone();
        // A new session always looks: a burst of them must not pass the cap before the next
        // look.
        if call.look || self.namespaces.is_new(&key) {
            self.evict(call.config.session_limits, Some(&key));
        }
        let (live, cleared) = self.namespaces.begin_call(&key);
        let tells_folders = request.folders.is_some();
        let answer = ask(
            request.into_driver(),
            Some(call.cwd.clone()),
            call.ctx,
            call.timeout,
            call.tool,
        )
        .await;
        // Answered, so the driver ran the request and kept the folders.
        if answer.is_ok() && tells_folders {
            live.told_folders();
        }
        drop(live);
        let answer = answer?;
        let mut result = RunResult::from_driver(answer.result);
        result.stopped = answer.stopped;
        if let Some(why) = cleared {
            result.add_note(format!(
                "this session's Python namespace {why}; variables and imports from before \
                 are gone"
            ));
        }
        Ok(result)
    }

    /// Clears the namespaces [`crate::evict`]'s rule says should go.
    fn evict(&self, limits: SessionLimits, incoming: Option<&str>) {
        let Some(Ok(interpreter)) = INTERPRETER.get() else {
            return;
        };
        self.namespaces.evict(limits, incoming, |keys| {
            // Queued while the table is locked: a later call of one of them is queued after
            // it, so it finds a fresh namespace, and its note.
            let (reply, _) = oneshot::channel();
            let _ = interpreter.jobs.send(Job {
                id: interpreter.next_id.fetch_add(1, Ordering::SeqCst),
                request: serde_json::json!({"op": "forget", "sessions": keys}),
                cwd: None,
                reply,
                abandoned: Arc::new(AtomicBool::new(false)),
            });
        });
    }
}

/// The driver's `result` for one request, and why toolbox stopped the run if it did.
struct Answer {
    result: Value,
    stopped: Option<String>,
}

/// Runs one driver request on the embedded interpreter.
///
/// `cwd`, when given, is the folder a `run` request's code works in (the driver changes to
/// it by descriptor, and back afterwards); the job keeps it open until it is over.
///
/// A run stopped by `timeout` or `ctx.cancel` that the interrupt ended comes back as its
/// partial result (with `"interrupted": true`) and why it was stopped; one that could not be
/// stopped, or never started, is an error.
async fn ask(
    request: Value,
    cwd: Option<Arc<OwnedFd>>,
    ctx: &ToolContext,
    timeout: Duration,
    tool: &str,
) -> Result<Answer> {
    let interpreter = interpreter().await?;
    interpreter.refuse_if_stuck(tool)?;
    let id = interpreter.next_id.fetch_add(1, Ordering::SeqCst);
    let (reply, mut answer) = oneshot::channel();
    let abandoned = Arc::new(AtomicBool::new(false));
    interpreter
        .jobs
        .send(Job {
            id,
            request,
            cwd,
            reply,
            abandoned: abandoned.clone(),
        })
        .map_err(|_| anyhow!("{tool}: the embedded Python thread has stopped"))?;
    let mut guard = DropGuard {
        interpreter: interpreter.clone(),
        id,
        abandoned: abandoned.clone(),
        active: true,
    };
    let why = tokio::select! {
        response = &mut answer => {
            guard.active = false;
            let result = parse_response(response, tool)?;
            return Ok(Answer { result, stopped: None });
        }
        _ = tokio::time::sleep(timeout) => format!("timed out after {} ms", timeout.as_millis()),
        _ = ctx.cancel.cancelled() => "was cancelled".to_string(),
    };
    abandoned.store(true, Ordering::SeqCst);
    interpreter.interrupt(id, format!("{tool} {why}"));
    let waited = tokio::time::timeout(GRACE, &mut answer).await;
    guard.active = false;
    match waited {
        Ok(Ok(Err(e))) if e == "abandoned" => bail!(
            "{tool} {why} before the code started: the embedded interpreter was busy with \
             other calls (it runs one at a time, across sessions)"
        ),
        Ok(response) => {
            let result = parse_response(response, tool)?;
            Ok(Answer {
                result,
                stopped: Some(why),
            })
        }
        Err(_) => {
            let mut stuck = interpreter.stuck.lock().unwrap_or_else(|e| e.into_inner());
            *stuck = Some(Stuck {
                job: id,
                call_id: ctx.call_id.clone(),
                session: ctx.session_id.to_string(),
                since: Instant::now(),
            });
            bail!(
                "{tool} {why} and the code could not be stopped: it is blocked inside a call \
                 that does not return to Python (a long computation in a C extension, such as \
                 a large numpy or pandas operation). The embedded interpreter is still busy \
                 with it: later calls are refused until it finishes, and then the pending \
                 interrupt is raised inside it. Session state is kept. For hard timeouts, \
                 configure [python] backend = \"isolated\""
            )
        }
    }
}

/// Turns the driver's answer into its `result`.
fn parse_response(
    response: Result<Result<Value, String>, oneshot::error::RecvError>,
    tool: &str,
) -> Result<Value> {
    match response {
        Ok(Ok(answer)) => crate::backend::driver_result(answer, tool),
        Ok(Err(e)) => bail!("{tool}: the Python driver failed: {e}"),
        Err(_) => bail!("{tool}: the embedded Python thread stopped before answering"),
    }
}

/// The embedded interpreter's identity: `sys.version`, `sys.prefix`, `sys.executable`, the
/// stdlib folder, and the path of the libpython the process loaded.
pub async fn info() -> Result<Value> {
    let ws = std::env::temp_dir();
    let workspace = toolbox_host::Workspace::new(&ws)?;
    let ctx = ToolContext::new(workspace, "info", "info", "python_info");
    let mut info = ask(
        serde_json::json!({"op": "info"}),
        None,
        &ctx,
        Duration::from_secs(60),
        "python_info",
    )
    .await?
    .result;
    info["libpython"] = Value::String(loaded_libpython());
    Ok(info)
}
