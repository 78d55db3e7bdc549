//! Whole lines to the protocol's stdout, written by whoever sends them.
//!
//! On the fast path (stdout polled by the runtime's epoll) a reply is written with one
//! `write(2)` by the task that made it. A reply that does not fit in the pipe (the client is
//! not reading) is queued and written by a task that waits for the pipe to drain, so nothing
//! ever blocks a runtime worker. In the fallback (a stdout epoll refuses, or any `Write`) a
//! thread of its own writes.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use super::transport::{raw_write, register};
use crate::lock;
use crate::output::QueuedBytes;

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
    queued_notifications: QueuedBytes,
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
            queued_notifications: QueuedBytes::default(),
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
                    match raw_write(fd.get_ref(), &text[written..]) {
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
                if !self.queued_notifications.try_add(rest, cap) {
                    return Sent::Dropped;
                }
                rest
            }
            Some(_) => {
                self.queued_notifications.add(rest);
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
                match guard.try_io(|fd| raw_write(fd.get_ref(), &head.text[head.written..])) {
                    Ok(Ok(n)) => {
                        head.written += n;
                        if head.written == head.text.len() {
                            let done = state.queue.pop_front().expect("the head was just seen");
                            self.queued_notifications.sub(done.counted);
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
            self.queued_notifications.sub(line.counted);
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
            self.queued_notifications.sub(line.counted);
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
    use std::io::Read;

    use super::super::transport::set_nonblocking;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_pipe_queues_lines_in_order_and_caps_notifications() {
        let (read, write) = toolbox_host::tty::pipe(true).unwrap();
        set_nonblocking(&write, true).unwrap();
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
            set_nonblocking(&file, false).unwrap();
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
