//! The byte plumbing under `toolbox mcp`: the protocol's own copies of stdin and stdout,
//! read and written on the async runtime, and line framing.
//!
//! Fast path (a pipe, socket or terminal, which is what MCP clients give): the descriptors
//! are non-blocking and registered with the runtime's epoll. The task serving the connection
//! reads stdin itself (or, once embedded Python runs, the Python thread does while it is
//! idle: see `serve_polled`), and a call's task writes its reply itself with one `write(2)`:
//! no thread hand-off anywhere between a request line and its reply line. A reply that does not
//! fit in the pipe (the client is not reading) is queued and written by a task that waits
//! for the pipe to drain, so nothing ever blocks a runtime worker.
//!
//! Fallback (a regular file, `/dev/null`, anything epoll refuses, or the generic
//! `Read`/`Write` of [`super::McpServer::serve`]): one thread reads, one writes, each owning
//! its blocking descriptor.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

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

fn set_nonblocking(fd: RawFd, on: bool) -> io::Result<()> {
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
fn register(fd: OwnedFd, interest: Interest) -> Result<AsyncFd<OwnedFd>, std::fs::File> {
    // SAFETY: the OwnedFd is a valid open descriptor, owned by the AsyncFd from here on and
    // closed only when it is dropped; its raw descriptor never changes.
    match unsafe { AsyncFd::register_with_interest(fd, interest) } {
        Ok(fd) => Ok(fd),
        Err(e) => Err(unpollable(e.into_parts().0)),
    }
}

/// A descriptor epoll refuses, made blocking for a thread to serve.
fn unpollable(fd: OwnedFd) -> std::fs::File {
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

fn raw_write(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    // SAFETY: buf is valid for reads of buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

/// One line of input, newline excluded.
#[derive(Debug, PartialEq)]
pub(super) enum Frame<'a> {
    Line(&'a [u8]),
    /// A line over the limit, skipped without keeping it.
    TooLong,
}

/// Splits input into lines of at most `limit` bytes. A line that arrives whole in one chunk
/// is handed out in place; only a line split across reads is copied. A longer line is
/// consumed up to its newline but never held.
pub(super) struct Framer {
    limit: usize,
    /// The start of a line whose newline has not come yet.
    partial: Vec<u8>,
    /// `partial` was handed out as a frame and is to be cleared.
    emitted: bool,
    /// The current line is over the limit; skip to its newline.
    too_long: bool,
}

impl Framer {
    pub(super) fn new(limit: usize) -> Framer {
        Framer {
            limit,
            partial: Vec::new(),
            emitted: false,
            too_long: false,
        }
    }

    fn reset(&mut self) {
        if self.emitted {
            self.emitted = false;
            // Do not keep a huge buffer alive because of one big message long ago.
            if self.partial.capacity() > 1024 * 1024 {
                self.partial = Vec::new();
            }
            self.partial.clear();
        }
    }

    /// The next line ending in `chunk[*pos..]`, moving `pos` past it; `None` once the rest of
    /// the chunk is the start of a line still to come.
    pub(super) fn next<'a>(&'a mut self, chunk: &'a [u8], pos: &mut usize) -> Option<Frame<'a>> {
        self.reset();
        let rest = &chunk[*pos..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            *pos = chunk.len();
            self.hold(rest);
            return None;
        };
        *pos += newline + 1;
        let piece = &rest[..newline];
        if self.too_long || self.partial.len() + piece.len() > self.limit {
            self.too_long = false;
            self.partial = Vec::new();
            return Some(Frame::TooLong);
        }
        if self.partial.is_empty() {
            return Some(Frame::Line(piece));
        }
        self.partial.extend_from_slice(piece);
        self.emitted = true;
        Some(Frame::Line(&self.partial))
    }

    /// At end of input: a last line without a newline still counts.
    pub(super) fn finish(&mut self) -> Option<Frame<'_>> {
        self.reset();
        if self.too_long {
            self.too_long = false;
            return Some(Frame::TooLong);
        }
        if self.partial.is_empty() {
            return None;
        }
        self.emitted = true;
        Some(Frame::Line(&self.partial))
    }

    fn hold(&mut self, bytes: &[u8]) {
        if self.too_long {
            return;
        }
        if self.partial.len() + bytes.len() > self.limit {
            self.too_long = true;
            self.partial = Vec::new();
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Output.

/// Whole lines to the protocol's stdout, in the order they were sent, never interleaved.
///
/// Whoever sends a line writes it at once when nothing is queued before it; what the pipe
/// does not take is queued and written by a task that waits for the pipe to drain (or, in
/// the fallback, by the writer thread). Notifications waiting in the queue are counted, so
/// the caller can cap them.
pub(super) struct Output {
    state: Mutex<OutState>,
    sink: Sink,
    /// Bytes of notifications queued and not yet written.
    queued_notifications: AtomicUsize,
    /// Signalled whenever the queue empties or the output closes.
    drained: tokio::sync::Notify,
    runtime: tokio::runtime::Handle,
}

enum Sink {
    Polled(AsyncFd<OwnedFd>),
    /// The writer thread waits here for lines.
    Thread(Condvar),
}

#[derive(Default)]
struct OutState {
    queue: VecDeque<Pending>,
    /// A flusher task or the writer thread holds the head of the line: nobody else writes.
    busy: bool,
    /// Writing failed (the client closed stdout): everything is discarded from now on.
    closed: bool,
    /// The writer thread stops once the queue is empty.
    stopping: bool,
}

struct Pending {
    text: Vec<u8>,
    written: usize,
    /// Bytes counted in `queued_notifications` for this line.
    counted: usize,
}

/// What became of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    Written,
    Queued,
    /// Not sent: the output is closed, or a notification would go over the cap.
    Dropped,
}

impl Output {
    /// The protocol's stdout: polled when it can be, else written by a thread.
    pub(super) fn from_fd(fd: OwnedFd, nonblocking: bool) -> io::Result<Arc<Output>> {
        if nonblocking {
            match register(fd, Interest::WRITABLE) {
                Ok(fd) => return Ok(Output::new(Sink::Polled(fd))),
                Err(file) => return Output::from_writer(file),
            }
        }
        Output::from_writer(std::fs::File::from(fd))
    }

    /// Any writer, on a thread of its own.
    pub(super) fn from_writer(output: impl Write + Send + 'static) -> io::Result<Arc<Output>> {
        let out = Output::new(Sink::Thread(Condvar::new()));
        let writer = out.clone();
        std::thread::Builder::new()
            .name("mcp-writer".into())
            .spawn(move || writer.write_forever(output))?;
        Ok(out)
    }

    fn new(sink: Sink) -> Arc<Output> {
        Arc::new(Output {
            state: Mutex::default(),
            sink,
            queued_notifications: AtomicUsize::new(0),
            drained: tokio::sync::Notify::new(),
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// Sends one line (`text` ends with a newline). A notification (`cap` is `Some`) is
    /// dropped rather than queued beyond `cap` bytes of queued notifications; other lines are
    /// always queued. Callable from any thread.
    pub(super) fn send(self: &Arc<Self>, text: Vec<u8>, cap: Option<usize>) -> Sent {
        let mut state = lock(&self.state);
        if state.closed {
            return Sent::Dropped;
        }
        let mut written = 0;
        if let Sink::Polled(fd) = &self.sink {
            if state.queue.is_empty() && !state.busy {
                loop {
                    match raw_write(fd.as_raw_fd(), &text[written..]) {
                        Ok(n) => {
                            written += n;
                            if written == text.len() {
                                return Sent::Written;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            self.close(&mut state, &e);
                            return Sent::Dropped;
                        }
                    }
                }
            }
        }
        // Half a line cannot be taken back: its rest is queued whatever the cap.
        let rest = text.len() - written;
        let counted = match cap {
            Some(cap) if written == 0 => {
                let reserved = self.queued_notifications.fetch_update(
                    Ordering::AcqRel,
                    Ordering::Acquire,
                    |queued| (queued + rest <= cap).then_some(queued + rest),
                );
                if reserved.is_err() {
                    return Sent::Dropped;
                }
                rest
            }
            Some(_) => {
                self.queued_notifications.fetch_add(rest, Ordering::AcqRel);
                rest
            }
            None => 0,
        };
        state.queue.push_back(Pending {
            text,
            written,
            counted,
        });
        match &self.sink {
            Sink::Polled(_) if !state.busy => {
                state.busy = true;
                let out = self.clone();
                self.runtime.spawn(async move { out.flush().await });
            }
            Sink::Polled(_) => {}
            Sink::Thread(ready) => ready.notify_one(),
        }
        Sent::Queued
    }

    /// Writes the queue as the pipe drains, then gives the right to write back.
    async fn flush(self: Arc<Self>) {
        let Sink::Polled(fd) = &self.sink else {
            return;
        };
        loop {
            let mut guard = match fd.writable().await {
                Ok(guard) => guard,
                Err(e) => {
                    self.close(&mut lock(&self.state), &e);
                    return;
                }
            };
            let mut state = lock(&self.state);
            loop {
                let Some(head) = state.queue.front_mut() else {
                    state.busy = false;
                    drop(state);
                    self.drained.notify_waiters();
                    return;
                };
                match guard.try_io(|fd| raw_write(fd.as_raw_fd(), &head.text[head.written..])) {
                    Ok(Ok(n)) => {
                        head.written += n;
                        if head.written == head.text.len() {
                            let done = state.queue.pop_front().expect("the head was just seen");
                            self.queued_notifications
                                .fetch_sub(done.counted, Ordering::AcqRel);
                        }
                    }
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => {
                        self.close(&mut state, &e);
                        return;
                    }
                    // Full again: wait for the next drain.
                    Err(_would_block) => break,
                }
            }
        }
    }

    /// The writer thread of the fallback.
    fn write_forever(self: Arc<Self>, mut output: impl Write) {
        let Sink::Thread(ready) = &self.sink else {
            return;
        };
        let mut state = lock(&self.state);
        loop {
            let Some(line) = state.queue.pop_front() else {
                if state.stopping || state.closed {
                    return;
                }
                state = ready.wait(state).unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            state.busy = true;
            drop(state);
            let written = output
                .write_all(&line.text[line.written..])
                .and_then(|_| output.flush());
            self.queued_notifications
                .fetch_sub(line.counted, Ordering::AcqRel);
            state = lock(&self.state);
            state.busy = false;
            if let Err(e) = written {
                self.close(&mut state, &e);
                return;
            }
            if state.queue.is_empty() {
                self.drained.notify_waiters();
            }
        }
    }

    /// The client closed stdout: nobody is left to tell; discard what is queued.
    fn close(&self, state: &mut OutState, error: &io::Error) {
        tracing::debug!("mcp: stdout closed: {error}");
        state.closed = true;
        state.busy = false;
        for line in state.queue.drain(..) {
            self.queued_notifications
                .fetch_sub(line.counted, Ordering::AcqRel);
        }
        self.drained.notify_waiters();
    }

    /// Waits until everything sent so far is written (or the output closed), then lets the
    /// writer thread, if any, end.
    pub(super) async fn finish(&self) {
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            {
                let mut state = lock(&self.state);
                if state.closed || (state.queue.is_empty() && !state.busy) {
                    state.stopping = true;
                    if let Sink::Thread(ready) = &self.sink {
                        ready.notify_one();
                    }
                    return;
                }
            }
            drained.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of `input` fed in chunks of `chunk` bytes.
    fn frames(input: &[u8], chunk: usize, limit: usize) -> Vec<Option<Vec<u8>>> {
        let mut framer = Framer::new(limit);
        let mut out = Vec::new();
        let mut push = |frame: Frame<'_>| {
            out.push(match frame {
                Frame::Line(line) => Some(line.to_vec()),
                Frame::TooLong => None,
            })
        };
        for piece in input.chunks(chunk) {
            let mut pos = 0;
            while let Some(frame) = framer.next(piece, &mut pos) {
                push(frame);
            }
        }
        if let Some(frame) = framer.finish() {
            push(frame);
        }
        out
    }

    #[test]
    fn frames_skip_long_lines_and_keep_a_last_line_without_newline() {
        for chunk in [1, 2, 3, 4, 7, 64] {
            let got = frames(b"abc\n0123456789\n\nxy", chunk, 5);
            assert_eq!(
                got,
                [
                    Some(b"abc".to_vec()),
                    None,
                    Some(vec![]),
                    Some(b"xy".to_vec()),
                ],
                "chunk {chunk}"
            );
            assert_eq!(frames(b"0123456789", chunk, 5), [None], "chunk {chunk}");
            assert_eq!(
                frames(b"12345\n", chunk, 5),
                [Some(b"12345".to_vec())],
                "chunk {chunk}"
            );
            assert_eq!(
                frames(b"123456\nok\n", chunk, 5),
                [None, Some(b"ok".to_vec())],
                "chunk {chunk}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_pipe_queues_lines_in_order_and_caps_notifications() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills both descriptors, each owned below.
        let (read, write) = unsafe {
            assert_eq!(
                libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK),
                0
            );
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        let out = Output::from_fd(write, true).unwrap();
        // Fill the pipe without reading: lines of 1000 bytes until one is queued.
        let line = |n: usize| {
            let mut text = format!("{n:06}").into_bytes();
            text.resize(999, b'x');
            text.push(b'\n');
            text
        };
        let mut sent = 0;
        while out.send(line(sent), None) == Sent::Written {
            sent += 1;
        }
        sent += 1;
        for _ in 0..100 {
            assert_eq!(out.send(line(sent), None), Sent::Queued);
            sent += 1;
        }
        // Notifications queue up to the cap, then are dropped.
        assert_eq!(out.send(line(sent), Some(1500)), Sent::Queued);
        sent += 1;
        assert_eq!(out.send(line(sent), Some(1500)), Sent::Dropped);
        // Read everything back: every line whole and in order.
        let reader = std::thread::spawn(move || {
            let mut file = std::fs::File::from(read);
            set_nonblocking(file.as_raw_fd(), false).unwrap();
            let mut all = Vec::new();
            file.read_to_end(&mut all).unwrap();
            all
        });
        out.finish().await;
        drop(out);
        let all = reader.join().unwrap();
        let lines: Vec<&[u8]> = all
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), sent);
        for (i, line) in lines.iter().enumerate() {
            assert_eq!(&line[..6], format!("{i:06}").as_bytes());
            assert_eq!(line.len(), 999);
        }
    }
}
