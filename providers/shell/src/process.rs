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
//!
//! The system calls (the child's setup between fork and exec, `posix_spawn`, signals,
//! `waitpid`, the pidfd) are host's (`toolbox_host::sandbox`); this module decides when to
//! make them. It uses the [`forker`] to start and reap, never the other way round.

use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use toolbox_host::limits::PreparedLimits;
use toolbox_host::sandbox::{self, ChildSetup, ExitWatch, PreparedSandbox, Reap, Signal};
use toolbox_host::OutputStream;

use crate::forker;
/// A just-started command: the leader's pid (also its process group and session id) and
/// the read ends of its stdout and stderr pipes. Nothing reaps the leader but [`Running`]
/// (or [`forker::reap_later`]), with `waitpid` on this pid.
pub use toolbox_host::sandbox::PipedChild as Spawned;

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
/// filters) is built here or earlier, before the fork; host's [`ChildSetup`] only makes
/// system calls in the child, which is all that is safe in the child of a multi-threaded
/// process.
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
    // A session of its own: its own process group (pgid = pid, so the group can be signalled
    // as a whole) and no controlling terminal, so a command that opens /dev/tty (ssh or sudo
    // asking for a password) fails at once instead of hanging until the timeout. It dies
    // with toolbox: the signal follows the forking thread, which is the provider's own
    // immortal thread (see forker.rs).
    ChildSetup::new()
        .own_session()
        .die_with_parent()
        .limits(limits)
        .sandbox(sandbox)
        .apply_to(&mut cmd);
    cmd
}

/// Whether a live (not zombie) process is left in the group `pgid`, or with `session` also
/// in the session of the same id.
fn anything_left(pgid: i32, session: bool) -> bool {
    // Fast path, and the usual answer: not even a zombie is left in the group.
    if !sandbox::group_exists(pgid) && !session {
        return false;
    }
    toolbox_host::containment::processes()
        .into_iter()
        .any(|p| p.state != 'Z' && (p.pgrp == pgid || (session && p.session == pgid)))
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

    pub fn signal(&self, signal: Signal, whole_session: bool) {
        let reaped = self.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            sandbox::signal_group(self.pid, signal);
            if whole_session {
                sandbox::signal_session(self.pid, signal);
            }
        }
    }

    /// SIGKILL to the group and the session, now; for drops, where nothing can be awaited.
    pub fn kill_now(&self) {
        self.signal(Signal::KILL, true);
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

/// Starts `bash -c SCRIPT` with `posix_spawn` in a new session (`POSIX_SPAWN_SETSID`),
/// stdin from /dev/null and stdout/stderr into fresh pipes (host's
/// [`sandbox::spawn_in_session`]).
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
    sandbox::spawn_in_session(&["bash", "-c", script], cwd, env)
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
        match sandbox::try_reap(self.group.pid) {
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
                run.group.signal(Signal::TERM, false);
                phase = Phase::Terminating {
                    since: Instant::now(),
                    swept: false,
                };
                continue;
            }
            Phase::Terminating { swept, .. } if run.done() => {
                // Processes that closed their output (`daemon >/dev/null &`) are invisible to
                // the pipes; the final SIGKILL takes them too.
                run.group.signal(Signal::KILL, swept);
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
                            run.group.signal(Signal::TERM, true);
                        }
                        phase = Phase::Terminating { since, swept: true };
                    }
                    Phase::Terminating { .. } => {
                        // Something still holds the pipes or bash is still alive after the
                        // grace: kill the group and anything that left it.
                        run.group.signal(Signal::KILL, true);
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
    run.group.signal(Signal::TERM, true);
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
            (None, Some(sig)) => format!("killed by signal {sig} ({})", sandbox::signal_name(sig)),
            _ => format!("ended with status {s}"),
        },
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
        toolbox_host::sandbox::signal_process(pid, toolbox_host::sandbox::Signal::KILL);
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
