//! The protocol's own copies of stdin and stdout, and reading stdin on the async runtime.
//!
//! Fast path (a pipe, socket or terminal, which is what MCP clients give): the descriptors
//! are non-blocking and registered with the runtime's epoll, stdin through a [`Gate`] of its
//! own. The task serving the connection reads stdin itself (or, once embedded Python runs,
//! the Python thread does while it is idle: see `serve_polled`), and a call's task writes its
//! reply itself with one `write(2)` (see `writer`): no thread hand-off anywhere between a
//! request line and its reply line.
//!
//! Fallback (a regular file, `/dev/null`, anything epoll refuses, or the generic
//! `Read`/`Write` of [`super::McpServer::serve`]): one thread reads, one writes, each owning
//! its blocking descriptor.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Bytes asked of stdin per read.
pub(super) const READ_CHUNK: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------
// The protocol's descriptors.

/// Takes fd 0 for the protocol: returns a private copy and points fd 0 at `/dev/null`, so a
/// tool's subprocess (or code in the embedded interpreter) cannot read protocol bytes.
pub(super) fn take_stdin() -> io::Result<(OwnedFd, bool)> {
    let (fd, nonblocking) = private_copy(0, false)?;
    // SAFETY: descriptor syscalls on descriptors this function owns or on fd 0, which is
    // replaced atomically by dup2.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if null < 0 {
            return Err(io::Error::last_os_error());
        }
        let null = OwnedFd::from_raw_fd(null);
        if libc::dup2(null.as_raw_fd(), 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((fd, nonblocking))
}

/// Takes fd 1 for the protocol: returns a private copy and points fd 1 at stderr, so code
/// that writes straight to the terminal cannot corrupt the JSON-RPC stream.
pub(super) fn take_stdout() -> io::Result<(OwnedFd, bool)> {
    let (fd, nonblocking) = private_copy(1, true)?;
    // SAFETY: fd 1 is replaced atomically by dup2; fd 2 stays open.
    if unsafe { libc::dup2(2, 1) } < 0 {
        return Err(io::Error::other(format!(
            "cannot redirect stdout to stderr: {}",
            io::Error::last_os_error()
        )));
    }
    Ok((fd, nonblocking))
}

/// A close-on-exec copy of `fd`, and whether it is non-blocking.
///
/// A pipe or a terminal is opened anew through `/proc/self/fd`, which gives toolbox an open
/// file description of its own: `O_NONBLOCK` set on it cannot surprise the client or the
/// shell that share the original (a shell whose terminal turned non-blocking misbehaves
/// after toolbox exits). A socket is duplicated and made non-blocking (nobody else reads or
/// writes a client's socket end). Anything else, a regular file above all (opening it anew
/// would lose its offset), is duplicated and left blocking.
fn private_copy(fd: RawFd, write: bool) -> io::Result<(OwnedFd, bool)> {
    // SAFETY: fstat fills the struct on success; every descriptor made here is owned by an
    // OwnedFd at once.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) < 0 {
            return Err(io::Error::last_os_error());
        }
        let kind = st.st_mode & libc::S_IFMT;
        if kind == libc::S_IFIFO || kind == libc::S_IFCHR {
            let path = format!("/proc/self/fd/{fd}\0");
            let access = if write {
                libc::O_WRONLY
            } else {
                libc::O_RDONLY
            };
            let flags = access | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
            let reopened = libc::open(path.as_ptr().cast(), flags);
            if reopened >= 0 {
                let reopened = OwnedFd::from_raw_fd(reopened);
                let mut again: libc::stat = std::mem::zeroed();
                if libc::fstat(reopened.as_raw_fd(), &mut again) == 0
                    && (again.st_dev, again.st_ino, again.st_rdev)
                        == (st.st_dev, st.st_ino, st.st_rdev)
                {
                    return Ok((reopened, true));
                }
            }
        }
        let copy = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
        if copy < 0 {
            return Err(io::Error::last_os_error());
        }
        let copy = OwnedFd::from_raw_fd(copy);
        // A pipe that could not be reopened (no /proc) is shared at most with the process
        // at its other end, which has its own description.
        if kind == libc::S_IFSOCK || kind == libc::S_IFIFO {
            set_nonblocking(copy.as_raw_fd(), true)?;
            return Ok((copy, true));
        }
        Ok((copy, false))
    }
}

pub(super) fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on a descriptor the caller owns.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        if libc::fcntl(fd, libc::F_SETFL, flags) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Registers a non-blocking descriptor with the runtime, or hands it back blocking when epoll
/// will not take it (a regular file, `/dev/null`).
pub(super) fn register(fd: OwnedFd, interest: Interest) -> Result<AsyncFd<OwnedFd>, std::fs::File> {
    // SAFETY: the OwnedFd is a valid open descriptor, owned by the AsyncFd from here on and
    // closed only when it is dropped; its raw descriptor never changes.
    match unsafe { AsyncFd::register_with_interest(fd, interest) } {
        Ok(fd) => Ok(fd),
        Err(e) => Err(unpollable(e.into_parts().0)),
    }
}

/// A descriptor epoll refuses, made blocking for a thread to serve.
pub(super) fn unpollable(fd: OwnedFd) -> std::fs::File {
    tracing::debug!("mcp: stdio cannot be polled, using a thread for it");
    let _ = set_nonblocking(fd.as_raw_fd(), false);
    std::fs::File::from(fd)
}

/// The protocol's stdin inside an epoll instance of its own; the runtime polls that instance.
///
/// Closing the gate hides stdin from the runtime without a new registration: while the
/// embedded Python thread waits on stdin itself (see `serve_polled`), a request wakes that
/// thread alone. With stdin in the runtime's own epoll, every request also woke a runtime
/// worker on the other CPU, only for it to find that someone else reads; on a guest that
/// had gone idle, that cross-CPU wake-up cost more than the rest of a warm call.
pub(super) struct Gate {
    epoll: OwnedFd,
    input: OwnedFd,
}

impl Gate {
    /// Puts `input` behind a new, open gate; hands `input` back when epoll refuses it.
    fn new(input: OwnedFd) -> io::Result<Result<Gate, OwnedFd>> {
        // SAFETY: epoll_create1 has no memory preconditions; the descriptor is owned at once.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let gate = Gate { epoll, input };
        match gate.ctl(libc::EPOLL_CTL_ADD, true) {
            Ok(()) => Ok(Ok(gate)),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => Ok(Err(gate.input)),
            Err(e) => Err(e),
        }
    }

    /// The protocol's stdin.
    pub(super) fn input(&self) -> RawFd {
        self.input.as_raw_fd()
    }

    /// Opens or closes the gate. Input already waiting when it opens may not wake the
    /// runtime: the caller checks with [`readable_now`] after opening.
    pub(super) fn set_open(&self, open: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, open)
    }

    fn ctl(&self, op: libc::c_int, open: bool) -> io::Result<()> {
        // Level-triggered inside the gate; the runtime's registration of the gate is
        // edge-triggered, and each new chunk of input is a new edge. Closed, only an error or
        // hang-up gets through (epoll always reports those), which the serving task handles
        // like any readiness.
        let mut event = libc::epoll_event {
            events: if open { libc::EPOLLIN as u32 } else { 0 },
            u64: 0,
        };
        // SAFETY: both descriptors are valid and owned by self; event is a valid epoll_event.
        let rc = unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, self.input(), &mut event) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl AsRawFd for Gate {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}

/// Replaces `buf`'s contents with what one `read(2)` of the non-blocking `fd` gives (empty:
/// end of input); `WouldBlock` when nothing is there.
///
/// The read goes into the buffer's spare capacity: zeroing 64 KiB first, on every request,
/// cost more than the read itself and pushed the rest of the call out of the L1 cache.
pub(super) fn read_chunk(fd: RawFd, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    buf.reserve(READ_CHUNK);
    loop {
        let spare = buf.spare_capacity_mut();
        let len = spare.len().min(READ_CHUNK);
        // SAFETY: `spare` is valid for writes of `len` bytes; read(2) writes at most that.
        let n = unsafe { libc::read(fd, spare.as_mut_ptr().cast(), len) };
        if n >= 0 {
            // SAFETY: read(2) initialised the first n bytes of the spare capacity.
            unsafe { buf.set_len(n as usize) };
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Whether `fd` has something to read right now (or has ended).
pub(super) fn readable_now(fd: RawFd) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout never blocks.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
}

pub(super) fn raw_write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

// ---------------------------------------------------------------------------------------
// Input.

/// Where request bytes come from.
pub(super) enum Input {
    /// Read when epoll (or the idle thread's poll) says there is something (see
    /// `serve_polled`).
    Polled(AsyncFd<Gate>),
    /// Chunks from a reader thread (empty: end of input). Bounded, so the thread reads at
    /// most a few chunks ahead of the server.
    Thread(ThreadInput),
}

impl Input {
    /// The protocol's stdin: polled when it can be, else read by a thread.
    pub(super) fn from_fd(fd: OwnedFd, nonblocking: bool) -> io::Result<Input> {
        if nonblocking {
            let gate = match Gate::new(fd)? {
                Ok(gate) => gate,
                Err(fd) => return Input::from_reader(unpollable(fd)),
            };
            // SAFETY: the gate's epoll descriptor is valid and owned by the AsyncFd from here
            // on; its raw descriptor never changes.
            let fd = unsafe { AsyncFd::register_with_interest(gate, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            return Ok(Input::Polled(fd));
        }
        Input::from_reader(std::fs::File::from(fd))
    }

    /// Any reader, on a thread of its own.
    pub(super) fn from_reader(mut input: impl Read + Send + 'static) -> io::Result<Input> {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        std::thread::Builder::new()
            .name("mcp-reader".into())
            .spawn(move || loop {
                let mut buf = vec![0; READ_CHUNK];
                let read = match input.read(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => other,
                };
                let stop = !matches!(read, Ok(n) if n > 0);
                let chunk = read.map(|n| {
                    buf.truncate(n);
                    buf
                });
                if tx.blocking_send(chunk).is_err() || stop {
                    return;
                }
            })?;
        Ok(Input::Thread(ThreadInput(rx)))
    }
}

/// Chunks read by the reader thread of [`Input::from_reader`].
pub(super) struct ThreadInput(tokio::sync::mpsc::Receiver<io::Result<Vec<u8>>>);

impl ThreadInput {
    /// Replaces `buf`'s contents with the next bytes; empty at end of input.
    pub(super) async fn read(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        match self.0.recv().await {
            Some(Ok(chunk)) => {
                *buf = chunk;
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => {
                buf.clear();
                Ok(())
            }
        }
    }
}
