//! The protocol's own copies of stdin and stdout, and reading stdin on the async runtime.
//!
//! Fast path (a pipe, socket or terminal, which is what MCP clients give): the descriptors
//! are non-blocking and registered with the runtime's epoll, stdin through a [`EpollGate`] of its
//! own. The task serving the connection reads stdin itself (or, once embedded Python runs,
//! the Python thread does while it is idle: see `serve_polled`), and a call's task writes its
//! reply itself with one `write(2)` (see `writer`): no thread hand-off anywhere between a
//! request line and its reply line.
//!
//! Fallback (a regular file, `/dev/null`, anything epoll refuses, or the generic
//! `Read`/`Write` of [`super::McpServer::serve`]): one thread reads, one writes, each owning
//! its blocking descriptor.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Bytes asked of stdin per read.
pub(super) const READ_CHUNK: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------
// The protocol's descriptors: host's stdio module does the system calls.

pub(super) use toolbox_host::stdio::{
    set_nonblocking, take_stdin, take_stdout, write as raw_write, EpollGate,
};

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
    let _ = set_nonblocking(&fd, false);
    std::fs::File::from(fd)
}

/// Replaces `buf`'s contents with what one `read(2)` of the non-blocking `fd` gives (empty:
/// end of input); `WouldBlock` when nothing is there. Into the buffer's spare capacity (see
/// `toolbox_host::stdio::read_into`).
pub(super) fn read_chunk(fd: impl AsFd, buf: &mut Vec<u8>) -> io::Result<()> {
    toolbox_host::stdio::read_into(fd, buf, READ_CHUNK)
}

/// Whether `fd` has something to read right now (or has ended).
pub(super) fn readable_now(fd: impl AsFd) -> bool {
    toolbox_host::stdio::readable_now(fd)
}

// ---------------------------------------------------------------------------------------
// Input.

/// Where request bytes come from.
pub(super) enum Input {
    /// Read when epoll (or the idle thread's poll) says there is something (see
    /// `serve_polled`).
    Polled(AsyncFd<EpollGate>),
    /// Chunks from a reader thread (empty: end of input). Bounded, so the thread reads at
    /// most a few chunks ahead of the server.
    Thread(ThreadInput),
}

impl Input {
    /// The protocol's stdin: polled when it can be, else read by a thread.
    pub(super) fn from_fd(fd: OwnedFd, nonblocking: bool) -> io::Result<Input> {
        if nonblocking {
            let gate = match EpollGate::new(fd)? {
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
