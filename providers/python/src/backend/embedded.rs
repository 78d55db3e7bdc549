//! The embedded backend: one CPython interpreter inside this process, on one thread.
//!
//! - **One thread.** The interpreter is started (and only ever entered by this crate) on a
//!   dedicated thread, `toolbox-python`. Jobs arrive over a channel; each job attaches to the
//!   interpreter, calls the driver's `handle_object` with the request as a dict (no JSON
//!   text either way), detaches and answers over a oneshot channel.
//!   Nothing here holds the GIL across an `.await`, and between jobs the GIL is free, so
//!   threads that user code started keep running.
//! - **An interpreter found at run time.** The binary links no libpython. On first use the
//!   interpreter [`crate::discover`] finds (`[python] interpreter`, `$VIRTUAL_ENV`, then
//!   `python3` on PATH) has its shared libpython loaded, then the CPython layer
//!   (`providers/python/embed`, see [`super::embed_lib`]); the interpreter is initialised
//!   with that executable as its program name, so `sys.prefix`, the stdlib and
//!   `sys.executable` are its own; PYTHON* environment variables are ignored (meant for some
//!   other Python, they must not redirect the stdlib). After start the loaded libpython's
//!   `sys.version` is compared with the executable's and a mismatch is refused with the
//!   library's path. An interpreter with no shared libpython cannot be embedded: the call
//!   then runs on the isolated backend and says so (see `run.rs`).
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
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use tokio::sync::{oneshot, OnceCell};
use toolbox_host::handoff::{IdleSlot, IdleWork};
use toolbox_host::ToolContext;

use crate::backend::embed_lib::{EmbedLib, RunAnswer};
use crate::backend::{Backend, Call, RunRequest, RunResult};
use crate::discover::FoundPython;
use crate::evict::SessionLimits;
use crate::{PythonConfig, DRIVER_SOURCE};

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
    stuck: Mutex<Option<Stuck>>,
    /// The Python thread itself, for pthread_kill.
    pthread: libc::pthread_t,
    /// Whether the driver's SIGUSR2 handler is installed (it is unless someone else started
    /// Python in this process first, on another thread).
    signal_interrupts: bool,
    /// The CPython layer and the libpython it runs on.
    lib: EmbedLib,
    /// The interpreter it was started as.
    found: Arc<FoundPython>,
}

/// Starts the interpreter (its thread, its signal handler) unless it runs already.
#[cfg(test)]
pub(crate) async fn ready() -> Result<()> {
    interpreter(&crate::discover::find(None)?).await.map(drop)
}

/// Whether a call with `config` can run on the embedded interpreter: `Ok(None)` when it
/// can (starting it if needed), `Ok(Some(why))` when this process cannot embed the
/// interpreter it found (no shared libpython, or loading it failed) and the call should run
/// on the isolated backend instead, and an error when no Python was found at all or the
/// config names another interpreter than the one already running.
pub(crate) async fn unavailable(config: &PythonConfig) -> Result<Option<String>> {
    let found = crate::discover::find(config.interpreter.as_deref())?;
    if let Err(why) = &found.library {
        return Ok(Some(why.clone()));
    }
    match interpreter(&found).await {
        Ok(_) => Ok(None),
        Err(e) if INTERPRETER.get().is_some_and(|started| started.is_err()) => {
            Ok(Some(format!("{e:#}")))
        }
        Err(e) => Err(e),
    }
}

/// The interpreter, started on first use as `found`.
async fn interpreter(found: &Arc<FoundPython>) -> Result<Arc<Interpreter>> {
    let interpreter = INTERPRETER
        .get_or_init(|| async {
            let (tx, rx) = oneshot::channel();
            let found = found.clone();
            let spawned = std::thread::Builder::new()
                .name("toolbox-python".into())
                .spawn(move || python_thread(found, tx));
            if let Err(e) = spawned {
                return Err(format!("cannot start the Python thread: {e}"));
            }
            rx.await
                .unwrap_or_else(|_| Err("the Python thread stopped while starting".into()))
        })
        .await
        .clone()
        .map_err(|e| anyhow!("the embedded Python interpreter is not available: {e}"))?;
    if interpreter.found.executable != found.executable {
        bail!(
            "the embedded interpreter of this process is {}, and this call's configuration \
             asks for {}; one process embeds one interpreter: restart toolbox to switch, or \
             use [python] backend = \"isolated\"",
            interpreter.found.describe(),
            found.describe()
        );
    }
    Ok(interpreter)
}

/// The interpreter if it was started.
#[cfg(test)]
fn started() -> Result<Arc<Interpreter>> {
    match INTERPRETER.get() {
        Some(Ok(interpreter)) => Ok(interpreter.clone()),
        Some(Err(e)) => Err(anyhow!(
            "the embedded Python interpreter is not available: {e}"
        )),
        None => Err(anyhow!("the embedded Python interpreter was not started")),
    }
}

fn python_thread(
    found: Arc<FoundPython>,
    ready: oneshot::Sender<Result<Arc<Interpreter>, String>>,
) {
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
    let (lib, signal_interrupts) = match start_python(&found) {
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
        stuck: Mutex::new(None),
        // SAFETY: pthread_self has no preconditions.
        pthread: unsafe { libc::pthread_self() },
        signal_interrupts,
        lib,
        found,
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
    let cwd = job.cwd.as_ref().map(|fd| fd.as_raw_fd());
    let response = match interpreter
        .lib
        .run(job.id, &job.request, cwd, &job.abandoned)
    {
        RunAnswer::Answer(answer) => Ok(answer),
        RunAnswer::Failed(e) => Err(e),
        RunAnswer::Abandoned => Err(ABANDONED.into()),
    };
    interpreter.clear_stuck(job.id);
    let reply = job.reply;
    toolbox_host::handoff::with_inline_wakeups(|| {
        let _ = reply.send(response);
    });
}

/// What a job abandoned before it started answers.
const ABANDONED: &str = "abandoned";

/// Loads `found`'s libpython and the CPython layer, initialises the interpreter as `found`
/// and loads the driver: the layer, and whether the driver's signal handler is installed.
fn start_python(found: &FoundPython) -> Result<(EmbedLib, bool), String> {
    let library = found.library.as_ref().map_err(Clone::clone)?;
    let lib = EmbedLib::load(library)?;
    let started = lib.start(&found.executable, DRIVER_SOURCE)?;
    if started.version != found.version {
        return Err(format!(
            "the loaded libpython ({}) is Python {}, but {} is Python {}; something (often \
             LD_LIBRARY_PATH, or a second installation of the same version) made the loader \
             pick another libpython",
            lib.libpython.display(),
            started.version,
            found.executable.display(),
            found.version
        ));
    }
    Ok((lib, started.signal_interrupts))
}

impl Interpreter {
    /// Interrupts job `id` if (and while) it runs, from a helper thread: taking the GIL can
    /// wait for as long as a C call holds it, and no async worker may block on that.
    fn interrupt(self: &Arc<Self>, id: u64, reason: String) {
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("toolbox-python-interrupt".into())
            .spawn(move || {
                for _ in 0..3 {
                    let running = me.lib.interrupt(id, &reason);
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
        let interpreter =
            interpreter(&crate::discover::find(call.config.interpreter.as_deref())?).await?;
        let (live, cleared) = self.namespaces.begin_call(&key);
        let tells_folders = request.folders.is_some();
        let answer = ask(
            &interpreter,
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
    interpreter: &Arc<Interpreter>,
    request: Value,
    cwd: Option<Arc<OwnedFd>>,
    ctx: &ToolContext,
    timeout: Duration,
    tool: &str,
) -> Result<Answer> {
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
        Ok(Ok(Err(e))) if e == ABANDONED => bail!(
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

/// The embedded interpreter's identity, started as the interpreter `configured` names (else
/// as found): `sys.version`, `sys.prefix`, `sys.executable`, the stdlib folder, the path of
/// the libpython the process loaded, and where the interpreter was found.
pub async fn info(configured: Option<&std::path::Path>) -> Result<Value> {
    let interpreter = interpreter(&crate::discover::find(configured)?).await?;
    let ws = std::env::temp_dir();
    let workspace = toolbox_host::Workspace::new(&ws)?;
    let ctx = ToolContext::new(workspace, "info", "info", "python_info");
    let mut info = ask(
        &interpreter,
        serde_json::json!({"op": "info"}),
        None,
        &ctx,
        Duration::from_secs(60),
        "python_info",
    )
    .await?
    .result;
    info["libpython"] = Value::String(interpreter.lib.libpython.display().to_string());
    info["found_by"] = Value::String(interpreter.found.source.describe().into());
    Ok(info)
}

/// Evaluates the Python expression `code` on the started interpreter, with `v` bound to
/// `value`, and gives the result as JSON (as the driver's answers are converted). For tests:
/// it runs on the calling thread, outside the job queue.
#[cfg(test)]
pub(crate) fn eval(code: &str, value: Option<&Value>) -> Result<Value, String> {
    started().map_err(|e| e.to_string())?.lib.eval(code, value)
}

/// The CPython layer's conversions (providers/python/embed/src/pyvalue.rs), through the
/// layer's own entry point on the started interpreter.
#[cfg(test)]
mod pyvalue_tests {
    use serde_json::json;

    async fn python() {
        super::ready().await.expect("the embedded interpreter");
    }

    #[tokio::test]
    async fn json_values_round_trip_through_python() {
        python().await;
        let value = json!({
            "code": "x = 1\nprint('é')",
            "n": -3, "big": u64::MAX, "f": 1.5, "t": true, "none": null,
            "list": [1, "two", [3.0], {"four": false}],
        });
        assert_eq!(super::eval("v", Some(&value)).unwrap(), value);
    }

    #[tokio::test]
    async fn python_objects_map_as_json_dumps_with_default_str() {
        python().await;
        assert_eq!(
            super::eval("{1: (True, None), 'nan': float('nan'), 'big': 2**70}", None).unwrap(),
            json!({"1": [true, null], "nan": null, "big": "1180591620717411303424"})
        );
        assert_eq!(
            super::eval("{'s': {3}, 'r': range(2)}", None).unwrap(),
            json!({"s": "{3}", "r": "range(0, 2)"})
        );
        // A lone surrogate cannot be UTF-8: it is replaced, not an error.
        let lossy = super::eval("'a\\udc80b'", None).unwrap();
        assert!(
            lossy
                .as_str()
                .is_some_and(|s| s.starts_with('a') && s.ends_with('b') && s.contains('\u{fffd}')),
            "{lossy}"
        );
    }

    #[tokio::test]
    async fn a_self_referencing_answer_is_refused_not_followed_forever() {
        python().await;
        let e = super::eval("(lambda l: (l.append(l), l)[1])([])", None).unwrap_err();
        assert!(e.contains("nested deeper than 200"), "{e}");
        // A Python error comes back as text, and the interpreter carries on.
        let e = super::eval("1/0", None).unwrap_err();
        assert!(e.contains("ZeroDivisionError"), "{e}");
        assert_eq!(super::eval("1 + 1", None).unwrap(), json!(2));
    }
}
