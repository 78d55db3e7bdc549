//! What is done to a started child afterwards: signals to its process group, to its session
//! and to single processes, reaping its leader, and watching for its exit without reaping
//! it (so its pid, and the group id it names, cannot be reused meanwhile).

use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{Pid, WaitIdOptions, WaitOptions};
use tokio::io::unix::AsyncFd;

/// A signal toolbox sends to what a tool started (`Signal::KILL`, `Signal::TERM`,
/// `Signal::INT`).
pub use rustix::process::Signal;

/// Sends `signal` to every process of the group `pgid`. Errors (no such group) are ignored:
/// the group being gone is the goal. Ids 0 and 1 (toolbox's own group, init) are never
/// signalled.
pub fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 1 {
        if let Some(pgid) = Pid::from_raw(pgid) {
            let _ = rustix::process::kill_process_group(pgid, signal);
        }
    }
}

/// Sends `signal` to the process `pid`; a process that is gone is ignored.
pub fn signal_process(pid: i32, signal: Signal) {
    if pid > 0 {
        if let Some(pid) = Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Sends `signal` to every process whose session is `sid` but its leader (found by reading
/// `/proc`), to reach processes that left the leader's process group but not its session.
pub fn signal_session(sid: i32, signal: Signal) {
    for p in crate::containment::processes() {
        if p.session == sid && p.pid != sid {
            signal_process(p.pid, signal);
        }
    }
}

/// Whether any process, a zombie too, is left in the group `pgid` (signal 0 to the group).
pub fn group_exists(pgid: i32) -> bool {
    pgid > 0
        && Pid::from_raw(pgid)
            .is_some_and(|pgid| rustix::process::test_kill_process_group(pgid).is_ok())
}

/// What `waitpid(WNOHANG)` says about a child.
#[derive(Debug)]
pub enum Reap {
    /// It had exited, and is reaped now.
    Exited(ExitStatus),
    /// It is still running.
    StillRunning,
    /// Not our child (any more): someone else reaped it.
    Gone,
}

/// Reaps the child `pid` if it has exited, without waiting.
pub fn try_reap(pid: i32) -> Reap {
    let Some(child) = Pid::from_raw(pid).filter(|_| pid > 0) else {
        return Reap::Gone;
    };
    match rustix::process::waitpid(Some(child), WaitOptions::NOHANG) {
        Ok(Some((_, status))) => Reap::Exited(ExitStatus::from_raw(status.as_raw())),
        Ok(None) | Err(rustix::io::Errno::INTR) => Reap::StillRunning,
        Err(_) => Reap::Gone,
    }
}

/// Watches for a child's exit without reaping it (so its pid stays reserved).
#[derive(Debug)]
pub struct ExitWatch(Watch);

#[derive(Debug)]
enum Watch {
    /// Readable once the process has exited.
    Pidfd(AsyncFd<OwnedFd>),
    /// Kernels without pidfd (before 5.3): poll `waitid(WNOWAIT)`.
    Poll(i32),
}

impl ExitWatch {
    /// Watches the child `pid`. Must be called inside the tokio runtime that will await
    /// [`exited`](Self::exited): the pidfd is registered with its reactor.
    pub fn new(pid: i32) -> Self {
        let pidfd = Pid::from_raw(pid).filter(|_| pid > 0).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        if let Some(owned) = pidfd {
            // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open and the same
            // for the AsyncFd's whole life.
            let registered =
                unsafe { AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) };
            if let Ok(async_fd) = registered {
                return ExitWatch(Watch::Pidfd(async_fd));
            }
        }
        ExitWatch(Watch::Poll(pid))
    }

    /// Resolves once the child has exited (it is left unreaped).
    pub async fn exited(&self) {
        match &self.0 {
            Watch::Pidfd(fd) => {
                // Readiness stays set once the process is gone; the guard is not cleared.
                let _ = fd.readable().await;
            }
            Watch::Poll(pid) => {
                while !exited_without_reaping(*pid) {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// Whether the exit is watched through a pidfd (rather than polled).
    pub fn is_pidfd(&self) -> bool {
        matches!(self.0, Watch::Pidfd(_))
    }
}

/// Whether the child `pid` has exited, leaving it unreaped (`waitid` with `WNOWAIT`); an
/// error (not our child) counts as exited.
fn exited_without_reaping(pid: i32) -> bool {
    let Some(child) = Pid::from_raw(pid).filter(|_| pid > 0) else {
        return true;
    };
    match rustix::process::waitid(
        rustix::process::WaitId::Pid(child),
        WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT,
    ) {
        Ok(status) => status.is_some(),
        Err(_) => true,
    }
}

/// A signal's name for messages: `SIGTERM`; `signal` for one without a name here.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_is_watched_signalled_and_reaped() {
        let mut command = std::process::Command::new("sleep");
        command.arg("30");
        super::super::ChildSetup::new()
            .own_session()
            .apply_to(&mut command);
        // Reaped below by pid, as toolbox reaps what it starts.
        let pid = command.spawn().unwrap().id() as i32;
        let watch = ExitWatch::new(pid);
        assert!(watch.is_pidfd(), "this kernel has pidfd");
        assert!(group_exists(pid));
        assert!(matches!(try_reap(pid), Reap::StillRunning));
        assert!(!exited_without_reaping(pid));
        signal_group(pid, Signal::KILL);
        watch.exited().await;
        // Exited, not reaped: the group (a zombie) is still there.
        assert!(exited_without_reaping(pid));
        assert!(group_exists(pid));
        match try_reap(pid) {
            Reap::Exited(status) => assert_eq!(status.signal(), Some(libc::SIGKILL)),
            other => panic!("{other:?}"),
        }
        assert!(!group_exists(pid));
        assert!(matches!(try_reap(pid), Reap::Gone));
    }

    #[test]
    fn names_of_signals() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(Signal::KILL.as_raw()), "SIGKILL");
        assert_eq!(signal_name(64), "signal");
    }
}
