//! The descriptor work of a protocol spoken over this process's standard streams (`toolbox
//! mcp`), on rustix: taking stdin and stdout for the protocol (so a tool's subprocess or
//! code in the embedded interpreter can neither read its requests nor corrupt its replies),
//! a private non-blocking copy of each, an epoll instance of its own around stdin that can be
//! opened and closed without a new registration ([`EpollGate`]), and the reads and writes the
//! serving loop makes. The MCP layer keeps the protocol; the system calls are here.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::event::epoll;
use rustix::fs::{FileType, Mode, OFlags};

/// Takes fd 0 for the protocol: returns a private copy of it (and whether the copy is
/// non-blocking, see [`private_copy`]) and points fd 0 at `/dev/null`.
pub fn take_stdin() -> io::Result<(OwnedFd, bool)> {
    let copy = private_copy(std::io::stdin().as_fd(), false)?;
    let null = rustix::fs::open("/dev/null", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    // Atomic: whoever reads fd 0 sees the protocol's stdin or /dev/null, never a gap.
    rustix::stdio::dup2_stdin(&null)?;
    Ok(copy)
}

/// Takes fd 1 for the protocol: returns a private copy of it (and whether it is
/// non-blocking) and points fd 1 at stderr, so code that writes straight to fd 1 cannot
/// corrupt the protocol's stream.
pub fn take_stdout() -> io::Result<(OwnedFd, bool)> {
    let copy = private_copy(std::io::stdout().as_fd(), true)?;
    rustix::stdio::dup2_stdout(std::io::stderr())
        .map_err(|e| io::Error::other(format!("cannot redirect stdout to stderr: {e}")))?;
    Ok(copy)
}

/// A close-on-exec copy of `fd`, and whether it is non-blocking.
///
/// A pipe or a terminal is opened anew through `/proc/self/fd`, which gives this process an
/// open file description of its own: `O_NONBLOCK` set on it cannot surprise the client or
/// the shell that share the original (a shell whose terminal turned non-blocking misbehaves
/// after toolbox exits). A socket is duplicated and made non-blocking (nobody else reads or
/// writes a client's socket end). Anything else, a regular file above all (opening it anew
/// would lose its offset), is duplicated and left blocking.
pub fn private_copy(fd: BorrowedFd<'_>, write: bool) -> io::Result<(OwnedFd, bool)> {
    let st = rustix::fs::fstat(fd)?;
    let kind = FileType::from_raw_mode(st.st_mode);
    if matches!(kind, FileType::Fifo | FileType::CharacterDevice) {
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let access = if write {
            OFlags::WRONLY
        } else {
            OFlags::RDONLY
        };
        let flags = access | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        if let Ok(reopened) = rustix::fs::open(path.as_str(), flags, Mode::empty()) {
            // The same file, not whatever the name led to meanwhile.
            let same = rustix::fs::fstat(&reopened).is_ok_and(|again| {
                (again.st_dev, again.st_ino, again.st_rdev) == (st.st_dev, st.st_ino, st.st_rdev)
            });
            if same {
                return Ok((reopened, true));
            }
        }
    }
    let copy = rustix::io::fcntl_dupfd_cloexec(fd, 3)?;
    // A pipe that could not be reopened (no /proc) is shared at most with the process at
    // its other end, which has its own description.
    if matches!(kind, FileType::Socket | FileType::Fifo) {
        set_nonblocking(&copy, true)?;
        return Ok((copy, true));
    }
    Ok((copy, false))
}

/// Turns `O_NONBLOCK` on or off for `fd`.
pub fn set_nonblocking(fd: impl AsFd, on: bool) -> io::Result<()> {
    Ok(rustix::io::ioctl_fionbio(fd, on)?)
}

/// `input` inside an epoll instance of its own, which a runtime polls instead of `input`.
///
/// Closing the gate hides `input` from the runtime without a new registration: while a
/// thread waits on `input` itself, new input wakes that thread alone (see the MCP layer's
/// `serve_polled`).
#[derive(Debug)]
pub struct EpollGate {
    epoll: OwnedFd,
    input: OwnedFd,
}

impl EpollGate {
    /// Puts `input` behind a new, open gate; hands `input` back when epoll refuses it (a
    /// regular file, `/dev/null`).
    pub fn new(input: OwnedFd) -> io::Result<Result<EpollGate, OwnedFd>> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // Level-triggered inside the gate; a runtime's registration of the gate is
        // edge-triggered, and each new chunk of input is a new edge.
        match epoll::add(
            &epoll,
            &input,
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        ) {
            Ok(()) => Ok(Ok(EpollGate { epoll, input })),
            Err(rustix::io::Errno::PERM) => Ok(Err(input)),
            Err(e) => Err(e.into()),
        }
    }

    /// The descriptor inside the gate.
    pub fn input(&self) -> BorrowedFd<'_> {
        self.input.as_fd()
    }

    /// Opens or closes the gate. Input already waiting when it opens may not wake the
    /// runtime: check with [`readable_now`] after opening. Closed, only an error or a
    /// hang-up gets through (epoll always reports those).
    pub fn set_open(&self, open: bool) -> io::Result<()> {
        let flags = if open {
            epoll::EventFlags::IN
        } else {
            epoll::EventFlags::empty()
        };
        Ok(epoll::modify(
            &self.epoll,
            &self.input,
            epoll::EventData::new_u64(0),
            flags,
        )?)
    }
}

impl AsRawFd for EpollGate {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

/// Replaces `buf`'s contents with what one `read(2)` of `fd` gives, at most `max` bytes
/// (empty: the end of input); `WouldBlock` from a non-blocking `fd` with nothing there.
///
/// The read goes into the buffer's spare capacity: zeroing 64 KiB first, on every request,
/// cost more than the read itself.
pub fn read_into(fd: impl AsFd, buf: &mut Vec<u8>, max: usize) -> io::Result<()> {
    buf.clear();
    buf.reserve(max);
    loop {
        let spare: &mut [MaybeUninit<u8>] = buf.spare_capacity_mut();
        let len = spare.len().min(max);
        match rustix::io::read(&fd, &mut spare[..len]) {
            Ok((filled, _)) => {
                let n = filled.len();
                // SAFETY: read(2) initialised the first `n` bytes of the spare capacity.
                unsafe { buf.set_len(n) };
                return Ok(());
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `fd` has something to read right now (or has ended); never blocks.
pub fn readable_now(fd: impl AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
}

/// One `write(2)` of `buf` to `fd`: how much was written.
pub fn write(fd: impl AsFd, buf: &[u8]) -> io::Result<usize> {
    Ok(rustix::io::write(fd, buf)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gate_reads_its_input_and_closes_without_losing_it() {
        let (read_end, write_end) = crate::tty::pipe(true).unwrap();
        let gate = EpollGate::new(read_end).unwrap().unwrap();
        assert!(!readable_now(gate.input()));
        write(&write_end, b"line\n").unwrap();
        assert!(readable_now(gate.input()));
        gate.set_open(false).unwrap();
        gate.set_open(true).unwrap();
        let mut buf = Vec::new();
        read_into(gate.input(), &mut buf, 64 * 1024).unwrap();
        assert_eq!(buf, b"line\n");
        let e = read_into(gate.input(), &mut buf, 64 * 1024).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(write_end);
        read_into(gate.input(), &mut buf, 64 * 1024).unwrap();
        assert!(buf.is_empty(), "the end of input");
        // A regular file is no input for epoll: handed back.
        let file = tempfile::tempfile().unwrap();
        assert!(EpollGate::new(OwnedFd::from(file)).unwrap().is_err());
    }

    #[test]
    fn a_pipe_copy_is_private_and_non_blocking() {
        let (read_end, _write_end) = crate::tty::pipe(false).unwrap();
        let (copy, nonblocking) = private_copy(read_end.as_fd(), false).unwrap();
        assert!(nonblocking);
        assert!(copy.as_raw_fd() >= 3);
        // The original stays blocking: the copy is a description of its own.
        let flags = rustix::fs::fcntl_getfl(&read_end).unwrap();
        assert!(!flags.contains(OFlags::NONBLOCK));
        let file = tempfile::tempfile().unwrap();
        let (_, nonblocking) = private_copy(file.as_fd(), true).unwrap();
        assert!(!nonblocking, "a regular file stays blocking");
    }
}
