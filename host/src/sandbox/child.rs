//! What a child process gets between `fork` and `exec`: the one `pre_exec` hook of every
//! process a tool starts (shell commands, the isolated Python worker, language servers), and
//! the descriptor a running child is handed later ([`send_fd`]).
//!
//! A `pre_exec` hook runs in the child of a multi-threaded process, where only system calls
//! are safe: no allocation, no locks. So [`ChildSetup`] is filled in the parent — the limit
//! data, the sandbox's ruleset and filters, the descriptors — and its hook only reads it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::Arc;

use rustix::process::{Pid, Signal};

use super::PreparedSandbox;
use crate::limits::PreparedLimits;

/// What a child gets before it runs its program, applied in this order:
///
/// 1. a session of its own ([`own_session`](Self::own_session)): its own process group, so
///    the group can be signalled as a whole, and no controlling terminal;
/// 2. death with toolbox ([`die_with_parent`](Self::die_with_parent));
/// 3. the `[limits]` ([`limits`](Self::limits)): joining the limit cgroup writes to a
///    descriptor opened before the fork, which must happen before a new user namespace;
/// 4. the working folder, entered by descriptor ([`enter_folder`](Self::enter_folder));
/// 5. a descriptor placed at a fixed number ([`place_fd`](Self::place_fd)), after the
///    limits, whose own descriptors it could otherwise replace;
/// 6. last the sandbox ([`sandbox`](Self::sandbox)): its mounts, then Landlock and seccomp;
///    nothing after it may mount or widen anything.
///
/// ```no_run
/// use toolbox_host::sandbox::ChildSetup;
///
/// let mut command = std::process::Command::new("bash");
/// command.args(["-c", "sleep 1"]);
/// ChildSetup::new().own_session().die_with_parent().apply_to(&mut command);
/// let child = command.spawn();
/// ```
#[derive(Debug, Default, Clone)]
pub struct ChildSetup {
    session: bool,
    die_with_parent: bool,
    limits: Option<Arc<PreparedLimits>>,
    folder: Option<RawFd>,
    place: Option<(RawFd, RawFd)>,
    sandbox: Option<Arc<PreparedSandbox>>,
}

impl ChildSetup {
    /// Nothing yet: the child starts as `Command` would start it.
    pub fn new() -> Self {
        ChildSetup::default()
    }

    /// A session of its own (`setsid`): its process group id and session id are its pid, and
    /// it has no controlling terminal, so a program that opens `/dev/tty` (ssh or sudo
    /// asking for a password) fails at once instead of hanging.
    pub fn own_session(mut self) -> Self {
        self.session = true;
        self
    }

    /// Killed (SIGKILL) when the thread that forks it ends (`PR_SET_PDEATHSIG`; the kernel
    /// ties it to the forking *thread*, so fork from a thread that lives as long as toolbox).
    /// A child whose parent is already gone by then does not start.
    pub fn die_with_parent(mut self) -> Self {
        self.die_with_parent = true;
        self
    }

    /// The `[limits]` prepared for this child, if any: rlimits, and its limit cgroup joined.
    pub fn limits(mut self, limits: Option<Arc<PreparedLimits>>) -> Self {
        self.limits = limits;
        self
    }

    /// Starts in the folder `folder` holds (`fchdir`), not in whatever its name points at by
    /// then. The descriptor must stay open until the command is spawned.
    pub fn enter_folder(mut self, folder: BorrowedFd<'_>) -> Self {
        self.folder = Some(folder.as_raw_fd());
        self
    }

    /// Gives the child `fd` as its descriptor number `at`, inherited across `exec`. The
    /// descriptor must stay open until the command is spawned.
    pub fn place_fd(mut self, fd: BorrowedFd<'_>, at: RawFd) -> Self {
        self.place = Some((fd.as_raw_fd(), at));
        self
    }

    /// Runs the child in `sandbox`, if one is given.
    pub fn sandbox(mut self, sandbox: Option<Arc<PreparedSandbox>>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Installs the hook in `command` (a `tokio::process::Command` through its
    /// `as_std_mut`). It runs after std's own setup of the child (its stdio, a
    /// `process_group`, its working directory by name) and before `exec`; an error there
    /// fails the spawn.
    pub fn apply_to(self, command: &mut Command) {
        let parent = self.die_with_parent.then(rustix::process::getpid);
        // SAFETY: the hook runs between fork and exec and only makes raw system calls (no
        // allocation, no locks); everything it reads (the limit data, the sandbox, the
        // descriptors) was built before the fork.
        unsafe {
            command.pre_exec(move || self.in_child(parent));
        }
    }

    /// The hook itself, in the forked child.
    fn in_child(&self, parent: Option<Pid>) -> io::Result<()> {
        if self.session {
            rustix::process::setsid()?;
        }
        if let Some(parent) = parent {
            rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
            // toolbox may have died between fork and prctl; then nobody will ever send it.
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        if let Some(limits) = &self.limits {
            limits.apply_in_child()?;
        }
        if let Some(folder) = self.folder {
            // SAFETY: the caller keeps the folder's descriptor open until the spawn.
            rustix::process::fchdir(unsafe { BorrowedFd::borrow_raw(folder) })?;
        }
        if let Some((fd, at)) = self.place {
            if fd == at {
                // dup2 onto itself would keep close-on-exec.
                // SAFETY: the caller keeps the descriptor open until the spawn.
                let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            } else {
                // SAFETY: dup2 on two descriptor numbers; rustix's dup2 needs an owned target.
                if unsafe { libc::dup2(fd, at) } < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        if let Some(sandbox) = &self.sandbox {
            sandbox.apply_in_child()?;
        }
        Ok(())
    }
}

/// Sends the descriptor `fd` over `socket` (`SCM_RIGHTS`, with one byte of data): how a
/// running child gets a folder toolbox holds open.
pub fn send_fd(socket: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [fd];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other(
            "no room for the descriptor in the message",
        ));
    }
    rustix::net::sendmsg(
        socket.as_fd(),
        &[io::IoSlice::new(&[0u8])],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::OwnedFd;

    fn run(setup: ChildSetup, script: &str) -> String {
        let mut command = Command::new("bash");
        command.args(["--noprofile", "--norc", "-c", script]);
        setup.apply_to(&mut command);
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_session_of_its_own() {
        let out = run(
            ChildSetup::new().own_session().die_with_parent(),
            "ps -o pid=,pgid=,sid= -p $$",
        );
        let ids: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(ids[0], ids[1], "pid = pgid: {out}");
        assert_eq!(ids[0], ids[2], "pid = sid: {out}");
    }

    #[test]
    fn the_folder_held_and_a_placed_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let held: OwnedFd = std::fs::File::open(dir.path()).unwrap().into();
        let (ours, theirs) = UnixStream::pair().unwrap();
        let theirs: OwnedFd = theirs.into();
        let out = run(
            ChildSetup::new()
                .enter_folder(held.as_fd())
                .place_fd(theirs.as_fd(), 3),
            "pwd -P; echo hi >&3",
        );
        assert_eq!(
            out.trim(),
            dir.path().canonicalize().unwrap().to_str().unwrap()
        );
        drop(theirs);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut &ours, &mut got).unwrap();
        assert_eq!(got, "hi\n");
    }

    #[test]
    fn a_descriptor_travels_over_a_socket() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        send_fd(&ours, file.as_fd()).unwrap();
        let mut byte = [0u8; 1];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            &theirs,
            &mut [io::IoSliceMut::new(&mut byte)],
            &mut control,
            rustix::net::RecvFlags::empty(),
        )
        .unwrap();
        assert_eq!(got.bytes, 1);
        let received: Vec<OwnedFd> = control
            .drain()
            .flat_map(|m| match m {
                rustix::net::RecvAncillaryMessage::ScmRights(fds) => fds.collect::<Vec<_>>(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(received.len(), 1);
        let a = rustix::fs::fstat(&received[0]).unwrap();
        let b = rustix::fs::fstat(&file).unwrap();
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
    }
}
