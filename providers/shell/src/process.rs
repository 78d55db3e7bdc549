//! Starting a command in a session of its own, watching it, and stopping everything it
//! started.
//!
//! Every command runs as `bash -c COMMAND` in a new session (`POSIX_SPAWN_SETSID`, or
//! `setsid()` in a forked child), so its process id is also its process group id and session
//! id. Stopping a command means:
//!
//! 1. SIGTERM to the process group (and, when a process may have moved to another group of
//!    the session — e.g. coreutils `timeout` does `setpgid` — to every process of the
//!    session, found in `/proc`);
//! 2. waiting up to the grace period for the command to exit and its output pipes to close,
//!    reading output all the while;
//! 3. SIGKILL to the group (and the session, as above);
//! 4. reading for at most [`POST_KILL_DRAIN`] more: a process outside the session (it called
//!    `setsid`) may hold the pipes forever, and must not hang the call.
//!
//! The same sequence runs when bash exits on its own, so nothing the command left behind
//! (`server &`) survives the call. The leader is reaped only at the very end: while it is an
//! unreaped zombie its pid cannot be reused, so signalling the group can never hit a
//! stranger.

use std::future::Future;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::pin::Pin;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use toolbox_host::limits::PreparedLimits;
use toolbox_host::OutputStream;

use crate::forker;
use toolbox_host::sandbox::PreparedSandbox;

/// How long output is still read after SIGKILL before the call gives up on the pipes.
pub const POST_KILL_DRAIN: Duration = Duration::from_millis(500);
/// After a command exits on its own, how long its leftovers may keep the pipes open after
/// SIGTERM before the whole session is searched for them.
const SWEEP_AFTER: Duration = Duration::from_millis(100);
/// Bytes read from a pipe at once.
const READ_CHUNK: usize = 64 * 1024;

/// Builds `bash -c COMMAND` with its own session, stdin from /dev/null, piped stdout and
/// stderr, the given environment, death with toolbox, the `[limits]` if given and the sandbox
/// if one is given.
///
/// Everything that allocates (the environment, the limit cgroup, the sandbox's ruleset and
/// filters) is built here or earlier, before the fork; the `pre_exec` hook only makes system
/// calls, which is all that is safe in the child of a multi-threaded process.
pub fn bash_command(
    script: &str,
    cwd: &std::path::Path,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    limits: Option<Arc<PreparedLimits>>,
    sandbox: Option<Arc<PreparedSandbox>>,
) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the hook runs between fork and exec and only makes raw system calls (no
    // allocation, no locks); the sandbox data it reads was fully built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // A session of its own: its own process group (pgid = pid, so the group can be
            // signalled as a whole) and no controlling terminal, so a command that opens
            // /dev/tty (ssh or sudo asking for a password) fails at once instead of hanging
            // until the timeout.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Die with toolbox. The signal follows the forking thread, which is the provider's
            // own immortal thread (see host.rs).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // toolbox may have died between fork and prctl; then nobody will ever send it.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            // Limits before the sandbox: joining the limit cgroup writes to a descriptor
            // opened before the fork, which must happen before a new user namespace.
            if let Some(limits) = &limits {
                limits.apply_in_child()?;
            }
            if let Some(sandbox) = &sandbox {
                sandbox.apply_in_child()?;
            }
            Ok(())
        });
    }
    cmd
}

/// SIGKILL, for callers outside this module (the OS calls stay here).
pub(crate) const KILL: libc::c_int = libc::SIGKILL;

/// Sends `signal` to every process of the group `pgid`. Errors (no such group) are ignored:
/// the group being gone is the goal.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Every process on the system, as far as `/proc` shows it at this moment (core's one
/// `/proc` reader).
fn processes() -> impl Iterator<Item = toolbox_host::containment::ProcStat> {
    toolbox_host::containment::processes().into_iter()
}

/// Sends `signal` to every process whose session is `sid` (found by reading `/proc`), to
/// reach processes that left the command's process group but not its session.
pub fn signal_session(sid: i32, signal: i32) {
    for p in processes() {
        if p.session == sid && p.pid != sid {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe {
                libc::kill(p.pid, signal);
            }
        }
    }
}

/// Whether a live (not zombie) process is left in the group `pgid`, or with `session` also
/// in the session of the same id.
fn anything_left(pgid: i32, session: bool) -> bool {
    // Fast path, and the usual answer: not even a zombie is left in the group.
    // SAFETY: signal 0 only checks for existence.
    let group_empty = unsafe { libc::kill(-pgid, 0) } != 0;
    if group_empty && !session {
        return false;
    }
    processes().any(|p| p.state != 'Z' && (p.pgrp == pgid || (session && p.session == pgid)))
}

/// After the final SIGKILL: waits until the killed processes are really gone (a signal is
/// delivered asynchronously), so "nothing survives the call" holds when the call returns.
/// Bounded: a process stuck in the kernel does not hang the call.
async fn wait_until_gone(pgid: i32, session: bool) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while anything_left(pgid, session) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The command's process group, shared by its supervisor and whoever may need to kill it
/// from outside (a provider being dropped). Signals go out only while the leader is unreaped,
/// so the ids they name cannot have been reused.
#[derive(Debug)]
pub struct Group {
    pid: i32,
    reaped: Mutex<bool>,
}

impl Group {
    /// The group of a just-spawned (not yet reaped) leader.
    pub fn new(pid: i32) -> Arc<Self> {
        Arc::new(Group {
            pid,
            reaped: Mutex::new(false),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn signal(&self, signal: i32, whole_session: bool) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            signal_group(self.pid, signal);
            if whole_session {
                signal_session(self.pid, signal);
            }
        }
    }

    /// SIGKILL to the group and the session, now; for drops, where nothing can be awaited.
    pub fn kill_now(&self) {
        self.signal(libc::SIGKILL, true);
    }
}

/// Why a command was stopped before it finished on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Timeout,
    Cancelled,
    Killed,
}

/// Where output goes as it arrives.
pub trait OutputSink {
    fn push(&mut self, stream: OutputStream, bytes: &[u8]);
}

/// How a supervised command ended.
#[derive(Debug)]
pub struct Outcome {
    /// `None` if the leader could not be reaped (stuck in the kernel even after SIGKILL, or
    /// reaped by someone else).
    pub status: Option<ExitStatus>,
    pub stopped: Option<Stop>,
    pub elapsed: Duration,
    /// The pipes were still open when the call stopped reading: a process that left the
    /// command's session held them, and its later output was not collected.
    pub pipes_left_open: bool,
}

/// A just-started command: the leader's pid (also its process group and session id) and
/// the read ends of its stdout and stderr pipes. Nothing reaps the leader but [`Running`]
/// (or [`forker::reap_later`]), with `waitpid` on this pid.
#[derive(Debug)]
pub struct Spawned {
    pub pid: i32,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

impl Spawned {
    /// Takes over a child started by std (the fork path). The `Child` value is dropped: that
    /// neither kills nor waits for the process, which is reaped here by pid.
    pub fn from_child(mut child: Child) -> std::io::Result<Self> {
        let pid = child.id() as i32;
        match (child.stdout.take(), child.stderr.take()) {
            (Some(out), Some(err)) => Ok(Spawned {
                pid,
                stdout: out.into(),
                stderr: err.into(),
            }),
            _ => {
                // Cannot happen with piped stdio; do not leave the command running if it does.
                signal_group(pid, libc::SIGKILL);
                forker::reap_later(pid);
                Err(std::io::Error::other(
                    "the command's output pipes are missing",
                ))
            }
        }
    }
}

/// Starts `bash -c SCRIPT` with `posix_spawn` in a new session (`POSIX_SPAWN_SETSID`),
/// stdin from /dev/null and stdout/stderr into fresh pipes.
///
/// This is the fast path for foreground commands without a sandbox: glibc's posix_spawn
/// uses `clone(CLONE_VM | CLONE_VFORK)`, so toolbox's memory is neither copied nor
/// write-protected as a `fork` would do (that copy and the page faults after it are most of
/// the cost of a fork-based spawn). What it cannot do is run code in the child, so there is
/// no `PR_SET_PDEATHSIG`: if toolbox dies mid-command, the janitor kills the command.
#[cfg(target_env = "gnu")]
pub fn spawn_posix(
    script: &str,
    cwd: &std::path::Path,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> std::io::Result<Spawned> {
    use std::ffi::{c_char, CString};
    use std::mem::MaybeUninit;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;

    fn check(rc: i32) -> std::io::Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::from_raw_os_error(rc))
        }
    }
    struct Actions(MaybeUninit<libc::posix_spawn_file_actions_t>);
    impl Drop for Actions {
        fn drop(&mut self) {
            // SAFETY: only constructed after a successful init.
            unsafe { libc::posix_spawn_file_actions_destroy(self.0.as_mut_ptr()) };
        }
    }
    struct Attr(MaybeUninit<libc::posix_spawnattr_t>);
    impl Drop for Attr {
        fn drop(&mut self) {
            // SAFETY: only constructed after a successful init.
            unsafe { libc::posix_spawnattr_destroy(self.0.as_mut_ptr()) };
        }
    }

    let argv_owned = [
        CString::new("bash")?,
        CString::new("-c")?,
        CString::new(script)?,
    ];
    let mut argv: Vec<*mut c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr() as *mut c_char)
        .collect();
    argv.push(std::ptr::null_mut());
    let env_owned = env
        .iter()
        .map(|(k, v)| {
            let mut entry = Vec::with_capacity(k.len() + v.len() + 1);
            entry.extend_from_slice(k.as_bytes());
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            CString::new(entry)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut envp: Vec<*mut c_char> = env_owned
        .iter()
        .map(|e| e.as_ptr() as *mut c_char)
        .collect();
    envp.push(std::ptr::null_mut());
    let cwd = CString::new(cwd.as_os_str().as_bytes())?;

    // All close-on-exec: the child gets them only as the dup2'd 0, 1 and 2.
    let (out_r, out_w) = std::io::pipe()?;
    let (err_r, err_w) = std::io::pipe()?;
    let devnull = std::fs::File::open("/dev/null")?;

    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer handed to libc points into a value that outlives the call, the
    // argv and envp arrays are NUL-terminated, and actions/attr are initialised before use
    // and destroyed by their guards.
    unsafe {
        let mut actions = Actions(MaybeUninit::uninit());
        check(libc::posix_spawn_file_actions_init(actions.0.as_mut_ptr()))?;
        let a = actions.0.as_mut_ptr();
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            devnull.as_raw_fd(),
            0,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            out_w.as_raw_fd(),
            1,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            err_w.as_raw_fd(),
            2,
        ))?;
        check(libc::posix_spawn_file_actions_addchdir_np(a, cwd.as_ptr()))?;

        let mut attr = Attr(MaybeUninit::uninit());
        check(libc::posix_spawnattr_init(attr.0.as_mut_ptr()))?;
        let t = attr.0.as_mut_ptr();
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(t, &empty))?;
        // Rust ignores SIGPIPE; the command must get the default (die on a broken pipe), as
        // std's own spawn arranges too.
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        libc::sigaddset(&mut defaults, libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(t, &defaults))?;
        check(libc::posix_spawnattr_setflags(
            t,
            libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short,
        ))?;
        check(libc::posix_spawnp(
            &mut pid,
            argv[0],
            a,
            t,
            argv.as_ptr(),
            envp.as_ptr(),
        ))?;
    }
    Ok(Spawned {
        pid,
        stdout: out_r.into(),
        stderr: err_r.into(),
    })
}

/// What `waitpid(WNOHANG)` says about a child.
pub enum Reap {
    Exited(ExitStatus),
    StillRunning,
    /// Not our child (any more): someone else reaped it.
    Gone,
}

pub fn try_reap(pid: i32) -> Reap {
    let mut status = 0;
    // SAFETY: plain system call with a valid out pointer.
    let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    if rc == pid {
        Reap::Exited(ExitStatus::from_raw(status))
    } else if rc == 0 || std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
        Reap::StillRunning
    } else {
        Reap::Gone
    }
}

/// A started command: its pipes, an exit watch and the leader to reap.
pub struct Running {
    group: Arc<Group>,
    /// Until the leader is reaped.
    unreaped: bool,
    exit: ExitWatch,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
    exited: bool,
    started: Instant,
}

impl Running {
    /// Takes over a freshly started command. Must be called inside the tokio runtime that
    /// will drive [`supervise`]: the pipes are registered with its reactor.
    pub fn new(spawned: Spawned, started: Instant) -> std::io::Result<Self> {
        let group = Group::new(spawned.pid);
        Self::with_group(spawned, group, started)
    }

    /// Like [`new`](Self::new), with a [`Group`] handle made earlier for the same command.
    pub fn with_group(
        spawned: Spawned,
        group: Arc<Group>,
        started: Instant,
    ) -> std::io::Result<Self> {
        let exit = ExitWatch::new(group.pid);
        let mut running = Running {
            group,
            unreaped: true,
            exit,
            stdout: None,
            stderr: None,
            exited: false,
            started,
        };
        // On error `running` is dropped here, which kills and reaps the command.
        running.stdout = Some(pipe::Receiver::from_owned_fd(spawned.stdout)?);
        running.stderr = Some(pipe::Receiver::from_owned_fd(spawned.stderr)?);
        Ok(running)
    }

    fn done(&self) -> bool {
        self.exited && self.stdout.is_none() && self.stderr.is_none()
    }

    /// Reaps the leader and marks the group as gone. Called once, at the very end.
    fn reap(&mut self) -> Option<ExitStatus> {
        let mut reaped = self.group.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !self.unreaped {
            return None;
        }
        self.unreaped = false;
        *reaped = true;
        forker::janitor_send('-', self.group.pid as u32);
        match try_reap(self.group.pid) {
            Reap::Exited(status) => Some(status),
            Reap::Gone => None,
            Reap::StillRunning => {
                // Not exited even after SIGKILL (blocked in the kernel): reap it later.
                forker::reap_later(self.group.pid);
                None
            }
        }
    }
}

impl Drop for Running {
    /// The call was dropped mid-flight (the executor's own timeout, or its caller went
    /// away): kill everything at once — there is no time for a grace period — and reap.
    fn drop(&mut self) {
        if self.unreaped {
            self.group.kill_now();
            let _ = self.reap();
        }
    }
}

/// Watches for the leader's exit without reaping it (so its pid stays reserved).
enum ExitWatch {
    /// Readable once the process has exited.
    Pidfd(AsyncFd<OwnedFd>),
    /// Kernels without pidfd (before 5.3): poll `waitid(WNOWAIT)`.
    Poll(i32),
}

impl ExitWatch {
    fn new(pid: i32) -> Self {
        // SAFETY: plain system call; the returned fd is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd >= 0 {
            // SAFETY: fd is a new, valid descriptor that nothing else owns.
            let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the same
            // for the AsyncFd's whole life.
            let registered =
                unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) };
            if let Ok(async_fd) = registered {
                return ExitWatch::Pidfd(async_fd);
            }
        }
        ExitWatch::Poll(pid)
    }

    async fn exited(&self) {
        match self {
            ExitWatch::Pidfd(fd) => {
                // Readiness stays set once the process is gone; the guard is not cleared.
                let _ = fd.readable().await;
            }
            ExitWatch::Poll(pid) => {
                while !exited_without_reaping(*pid) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    #[cfg(test)]
    fn is_pidfd(&self) -> bool {
        matches!(self, ExitWatch::Pidfd(_))
    }
}

/// Whether the child `pid` has exited, leaving it unreaped (`waitid` with `WNOWAIT`).
fn exited_without_reaping(pid: i32) -> bool {
    // SAFETY: siginfo_t is plain data that waitid fills in.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid, writable siginfo_t; WNOWAIT leaves the child unreaped.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read after a successful waitid.
    rc < 0 || unsafe { info.si_pid() } != 0
}

async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> usize {
    match pipe {
        // A read error (EIO and the like) ends the stream just like end-of-file.
        Some(p) => p.read(buf).await.unwrap_or(0),
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

enum Phase {
    Running,
    /// SIGTERM sent; waiting for everything to exit.
    Terminating {
        since: Instant,
        swept: bool,
    },
    /// SIGKILL sent; reading what is left for a moment.
    Killed {
        since: Instant,
    },
}

/// Runs `run` to the end: streams output into `sink`, stops it at `deadline` or when `stop`
/// resolves, and stops whatever it left behind once it exits. Always returns; never leaves a
/// process of the command's group behind.
pub async fn supervise(
    mut run: Running,
    sink: &mut (dyn OutputSink + Send),
    deadline: Option<Instant>,
    mut stop: Pin<&mut (dyn Future<Output = Stop> + Send)>,
    grace: Duration,
) -> Outcome {
    let mut out_buf = vec![0u8; READ_CHUNK];
    let mut err_buf = vec![0u8; READ_CHUNK];
    let mut phase = Phase::Running;
    let mut stopped = None;
    // Whether anything may have left the group for another one of the session.
    let mut swept_session = false;
    loop {
        // Phase changes that need no waiting.
        match phase {
            Phase::Running if run.exited => {
                // bash is done; whatever it left in its group gets the grace period.
                run.group.signal(libc::SIGTERM, false);
                phase = Phase::Terminating {
                    since: Instant::now(),
                    swept: false,
                };
                continue;
            }
            Phase::Terminating { swept, .. } if run.done() => {
                // Processes that closed their output (`daemon >/dev/null &`) are invisible to
                // the pipes; the final SIGKILL takes them too.
                run.group.signal(libc::SIGKILL, swept);
                swept_session = swept;
                break;
            }
            Phase::Killed { .. } if run.done() => break,
            _ => {}
        }
        let next = match phase {
            Phase::Running => deadline,
            Phase::Terminating { since, swept } if !swept && stopped.is_none() => {
                Some((since + SWEEP_AFTER).min(since + grace))
            }
            Phase::Terminating { since, .. } => Some(since + grace),
            Phase::Killed { since } => Some(since + POST_KILL_DRAIN),
        };
        let running = matches!(phase, Phase::Running);
        tokio::select! {
            n = read_some(&mut run.stdout, &mut out_buf) => {
                if n == 0 { run.stdout = None } else { sink.push(OutputStream::Stdout, &out_buf[..n]) }
            }
            n = read_some(&mut run.stderr, &mut err_buf) => {
                if n == 0 { run.stderr = None } else { sink.push(OutputStream::Stderr, &err_buf[..n]) }
            }
            _ = run.exit.exited(), if !run.exited => run.exited = true,
            why = &mut stop, if running => {
                stopped = Some(why);
                begin_termination(&run, &mut phase);
            }
            _ = sleep_until_opt(next) => {
                let now = Instant::now();
                match phase {
                    Phase::Running => {
                        stopped = Some(Stop::Timeout);
                        begin_termination(&run, &mut phase);
                    }
                    Phase::Terminating { since, swept } if now < since + grace => {
                        // Still holding the pipes shortly after SIGTERM although bash has
                        // exited: something may have left the group; find it by session.
                        if !swept {
                            run.group.signal(libc::SIGTERM, true);
                        }
                        phase = Phase::Terminating { since, swept: true };
                    }
                    Phase::Terminating { .. } => {
                        // Something still holds the pipes or bash is still alive after the
                        // grace: kill the group and anything that left it.
                        run.group.signal(libc::SIGKILL, true);
                        swept_session = true;
                        phase = Phase::Killed { since: now };
                    }
                    Phase::Killed { .. } => break,
                }
            }
        }
    }
    let pipes_left_open = run.stdout.is_some() || run.stderr.is_some();
    // Close our read ends before reaping so a straggler outside the session gets SIGPIPE
    // rather than blocking on a full pipe forever.
    run.stdout = None;
    run.stderr = None;
    let status = run.reap();
    wait_until_gone(run.group.pid, swept_session).await;
    // Under a subreaper, what the command left behind was re-parented to toolbox; reap the
    // zombies so a long-running server does not collect them.
    if let Some(containment) = toolbox_host::containment::current() {
        containment.reap_orphans(run.group.pid);
    }
    Outcome {
        status,
        stopped,
        elapsed: run.started.elapsed(),
        pipes_left_open,
    }
}

/// Timeout, cancellation or kill: SIGTERM to the group and to anything that left it.
fn begin_termination(run: &Running, phase: &mut Phase) {
    run.group.signal(libc::SIGTERM, true);
    *phase = Phase::Terminating {
        since: Instant::now(),
        swept: true,
    };
}

/// "exit code 3", "killed by signal 15 (SIGTERM)".
pub fn describe_status(status: Option<ExitStatus>) -> String {
    match status {
        None => "exit status unknown".to_string(),
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit code {code}"),
            (None, Some(sig)) => format!("killed by signal {sig} ({})", signal_name(sig)),
            _ => format!("ended with status {s}"),
        },
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => "signal",
    }
}

/// "850 ms", "12.3 s".
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Whether `pid` names a live process (a zombie counts as gone).
#[cfg(test)]
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<(OutputStream, Vec<u8>)>);
    impl OutputSink for Collect {
        fn push(&mut self, stream: OutputStream, bytes: &[u8]) {
            self.0.push((stream, bytes.to_vec()));
        }
    }

    fn text(c: &Collect, stream: OutputStream) -> String {
        let bytes: Vec<u8> =
            c.0.iter()
                .filter(|(s, _)| *s == stream)
                .flat_map(|(_, b)| b.clone())
                .collect();
        String::from_utf8(bytes).unwrap()
    }

    async fn run(script: &str, timeout: Option<Duration>, grace: Duration) -> (Outcome, Collect) {
        let dir = std::env::temp_dir();
        let cmd = bash_command(script, &dir, std::env::vars_os().collect(), None, None);
        let spawned = forker::spawn(cmd).await.unwrap();
        let running = Running::new(spawned, Instant::now()).unwrap();
        assert!(running.exit.is_pidfd(), "this kernel has pidfd");
        let mut sink = Collect(Vec::new());
        let stop = std::future::pending::<Stop>();
        tokio::pin!(stop);
        let outcome = supervise(
            running,
            &mut sink,
            timeout.map(|t| Instant::now() + t),
            stop,
            grace,
        )
        .await;
        (outcome, sink)
    }

    #[tokio::test]
    async fn exit_codes_and_both_streams() {
        let (o, c) = run(
            "echo out; echo err >&2; exit 3",
            None,
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(o.status.and_then(|s| s.code()), Some(3));
        assert_eq!(o.stopped, None);
        assert_eq!(text(&c, OutputStream::Stdout), "out\n");
        assert_eq!(text(&c, OutputStream::Stderr), "err\n");
        assert!(!o.pipes_left_open);
    }

    #[tokio::test]
    async fn a_session_of_its_own_without_a_terminal() {
        let (o, c) = run(
            "ps -o pid=,pgid=,sid= -p $$; cat /dev/tty 2>/dev/null || echo no-tty",
            None,
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(o.status.and_then(|s| s.code()), Some(0));
        let out = text(&c, OutputStream::Stdout);
        let ids: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(ids[0], ids[1], "pid = pgid: {out}");
        assert_eq!(ids[0], ids[2], "pid = sid: {out}");
        assert!(out.contains("no-tty"), "{out}");
    }

    #[tokio::test]
    async fn sigterm_is_trapped_then_sigkill_follows_the_grace() {
        let started = Instant::now();
        let (o, c) = run(
            "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done",
            Some(Duration::from_millis(300)),
            Duration::from_millis(300),
        )
        .await;
        assert_eq!(o.stopped, Some(Stop::Timeout));
        assert_eq!(o.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
        let out = text(&c, OutputStream::Stdout);
        assert!(out.contains("ready") && out.contains("got-term"), "{out}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_process_that_left_the_session_cannot_hang_the_call() {
        // setsid() puts the sleeper out of reach of any group or session signal, holding stdout.
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let started = Instant::now();
        let (o, _) = run(
            &format!(
                "python3 -c 'import os, time; os.setsid(); time.sleep(30)' & echo $! > {}; \
                 until [ \"$(ps -o sid= -p $! | tr -d ' ')\" = \"$!\" ]; do sleep 0.01; done; echo hi",
                pid_file.display()
            ),
            None,
            Duration::from_millis(200),
        )
        .await;
        assert!(o.pipes_left_open);
        assert_eq!(o.status.and_then(|s| s.code()), Some(0));
        assert!(started.elapsed() < Duration::from_secs(10));
        // Not ours to kill any more: the test cleans up its own escapee by pid.
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(process_alive(pid), "the escapee should still run");
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    #[test]
    fn status_texts() {
        assert_eq!(
            describe_status(Some(ExitStatus::from_raw(3 << 8))),
            "exit code 3"
        );
        assert_eq!(
            describe_status(Some(ExitStatus::from_raw(15))),
            "killed by signal 15 (SIGTERM)"
        );
        assert_eq!(human_duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(human_duration(Duration::from_millis(12_340)), "12.3 s");
        assert!(process_alive(std::process::id() as i32));
        assert!(!process_alive(i32::MAX));
    }
}
