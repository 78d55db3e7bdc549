//! Nothing written to stderr can block toolbox.
//!
//! A client that pipes toolbox's stderr and never reads it fills the pipe after 64 KiB; every
//! later `write(2)` to file descriptor 2 then blocks for good. When the writer is a tool's live
//! output on a runtime worker, the call, its timeouts and the whole server stop with it.
//!
//! [`install`] points fd 2 at a pipe of toolbox's own instead. A drain thread empties that pipe
//! as fast as anything writes into it, into a queue of at most [`CAPACITY`] bytes; a writer
//! thread copies the queue to the real stderr and is the only thread that can block on it.
//! What does not fit in the queue is dropped and counted, and a note saying how much was
//! dropped goes out as soon as stderr moves again. Every writer to fd 2 goes through this —
//! streamed tool output, `tracing` logs, `eprintln!`, a C library, a child that inherited
//! stderr — so none of them can stall a call.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The most stderr output held while the real stderr is not taking it.
pub const CAPACITY: usize = 4 * 1024 * 1024;

/// The running pump. Dropping it leaves the threads running (fd 2 still needs draining).
pub struct StderrPump {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for output.
    ready: Condvar,
    /// The read end of the pipe fd 2 points at, non-blocking. Whoever reads it holds
    /// `draining`, so [`StderrPump::flush`] knows no bytes are between the pipe and the queue.
    pipe: File,
    draining: Mutex<()>,
    capacity: usize,
    /// Bytes handed to the real stderr, to tell a slow stderr from a stuck one.
    written: AtomicU64,
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Vec<u8>>,
    /// Bytes queued or being written.
    held: usize,
    /// Dropped since the last note.
    unreported: u64,
    /// The writer holds chunks it took from the queue.
    writing: bool,
    /// The real stderr is closed: everything is discarded from now on.
    closed: bool,
}

/// The pump [`install`] set up, for [`flush_installed`].
static INSTALLED: std::sync::OnceLock<Arc<Shared>> = std::sync::OnceLock::new();

/// Points fd 2 at a pipe drained into a bounded queue, written to the real stderr by a thread
/// of its own. Call it once, early, before other threads write to stderr.
pub fn install() -> std::io::Result<StderrPump> {
    let real = File::from(crate::host::tty::copy_of(std::io::stderr())?);
    let (read, write) = crate::host::tty::pipe(true)?;
    // Atomic: a concurrent writer sees either the old stderr or the new one.
    crate::host::tty::redirect_stderr(&write)?;
    drop(write);
    let pump = StderrPump::start(File::from(read), real, CAPACITY)?;
    let _ = INSTALLED.set(pump.shared.clone());
    Ok(pump)
}

/// [`StderrPump::flush`] on the pump [`install`] set up; true at once when there is none.
///
/// For output that bypasses fd 2 and must come after what was written there: a prompt
/// written straight to `/dev/tty` would otherwise overtake lines still in the queue.
pub fn flush_installed(stalled: Duration, at_most: Duration) -> bool {
    INSTALLED
        .get()
        .is_none_or(|shared| shared.flush(stalled, at_most))
}

impl StderrPump {
    /// Drains `pipe` (its read end, non-blocking) into a queue of `capacity` bytes that a
    /// writer thread copies to `real`.
    fn start(pipe: File, real: File, capacity: usize) -> std::io::Result<StderrPump> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            ready: Condvar::new(),
            pipe,
            draining: Mutex::new(()),
            capacity,
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        });
        let drain = shared.clone();
        std::thread::Builder::new()
            .name("stderr-drain".into())
            .spawn(move || drain.drain_forever())?;
        let writer = shared.clone();
        std::thread::Builder::new()
            .name("stderr-writer".into())
            .spawn(move || writer.write_forever(real))?;
        Ok(StderrPump { shared })
    }

    /// Bytes dropped so far because the real stderr did not take them in time.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Waits until everything written to fd 2 so far has reached the real stderr. Gives up
    /// (false) once stderr has taken nothing for `stalled`, or after `at_most` in all: a
    /// reader that went away must not keep toolbox from exiting.
    pub fn flush(&self, stalled: Duration, at_most: Duration) -> bool {
        self.shared.flush(stalled, at_most)
    }
}

impl Shared {
    fn flush(&self, stalled: Duration, at_most: Duration) -> bool {
        let started = Instant::now();
        let mut progress_at = started;
        let mut written = self.written.load(Ordering::Relaxed);
        loop {
            {
                let _draining = lock(&self.draining);
                self.drain_available();
                let state = lock(&self.state);
                if state.closed || (state.queue.is_empty() && !state.writing) {
                    return true;
                }
            }
            let now = Instant::now();
            let now_written = self.written.load(Ordering::Relaxed);
            if now_written != written {
                written = now_written;
                progress_at = now;
            }
            if now.duration_since(progress_at) >= stalled || now.duration_since(started) >= at_most
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn drain_forever(&self) {
        loop {
            if crate::host::tty::wait_readable(&self.pipe, None).is_err() {
                return;
            }
            let _draining = lock(&self.draining);
            if !self.drain_available() {
                return;
            }
        }
    }

    /// Moves whatever the pipe holds into the queue. False when the pipe is gone.
    fn drain_available(&self) -> bool {
        let mut buf = [0u8; 64 * 1024];
        loop {
            match (&self.pipe).read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => self.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(_) => return false,
            }
        }
    }

    fn push(&self, bytes: &[u8]) {
        let mut state = lock(&self.state);
        if state.closed {
            return;
        }
        if state.held + bytes.len() > self.capacity {
            state.unreported += bytes.len() as u64;
            self.dropped
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
            return;
        }
        if state.unreported > 0 {
            // The note may take the queue a little over capacity; it is short.
            let note = format!(
                "\n[toolbox: {} bytes of stderr output were dropped here: stderr was not read \
                 fast enough]\n",
                state.unreported
            );
            state.unreported = 0;
            state.held += note.len();
            state.queue.push_back(note.into_bytes());
        }
        state.held += bytes.len();
        state.queue.push_back(bytes.to_vec());
        self.ready.notify_one();
    }

    fn write_forever(&self, mut real: File) {
        loop {
            let chunks = {
                let mut state = lock(&self.state);
                while state.queue.is_empty() {
                    state.writing = false;
                    state = self
                        .ready
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                state.writing = true;
                std::mem::take(&mut state.queue)
            };
            for chunk in chunks {
                // This is the one place that may block on a stderr nobody reads.
                if real.write_all(&chunk).is_err() {
                    // Closed (EPIPE) or broken: nobody will ever read it. Keep draining fd 2
                    // so writers never block, and discard.
                    let mut state = lock(&self.state);
                    state.closed = true;
                    state.queue.clear();
                    state.held = 0;
                    state.writing = false;
                    return;
                }
                self.written
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                lock(&self.state).held -= chunk.len();
            }
        }
    }
}

/// The state stays consistent even if a holder panicked: every update is a few plain fields.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A pipe as two files, the read end non-blocking.
    fn pipe() -> std::io::Result<(File, File)> {
        let (read, write) = crate::host::tty::pipe(true)?;
        Ok((File::from(read), File::from(write)))
    }

    /// A pump between two pipes of the test's own: (write end standing for fd 2, pump, read
    /// end of the "real" stderr).
    fn pump(capacity: usize) -> (File, StderrPump, File) {
        let (read, write) = pipe().unwrap();
        let (real_read, real_write) = pipe().unwrap();
        let pump = StderrPump::start(read, real_write, capacity).unwrap();
        (write, pump, real_read)
    }

    /// Reads the non-blocking `file` until `want` appears or 20 s pass.
    fn read_until(file: &mut File, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        let mut buf = [0u8; 64 * 1024];
        while !String::from_utf8_lossy(&seen).contains(want) {
            assert!(
                Instant::now() < deadline,
                "{want:?} did not arrive: {}",
                String::from_utf8_lossy(&seen)
            );
            match file.read(&mut buf) {
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("{e}"),
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    #[test]
    fn output_passes_through_and_flush_waits_for_it() {
        let (mut stderr, pump, mut real) = pump(1024 * 1024);
        stderr.write_all(b"hello\n").unwrap();
        assert!(pump.flush(Duration::from_secs(10), Duration::from_secs(20)));
        assert_eq!(read_until(&mut real, "hello\n"), "hello\n");
        assert_eq!(pump.dropped(), 0);
    }

    #[test]
    fn an_unread_stderr_never_blocks_a_writer_and_drops_are_reported() {
        let (stderr, pump, real) = pump(256 * 1024);
        // 8 MiB into a real stderr nobody reads yet: without the pump the writer would block
        // after 64 KiB.
        let (done_tx, done) = mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut stderr = stderr;
            for _ in 0..8 * 1024 {
                stderr.write_all(&[b'x'; 1024]).unwrap();
            }
            let _ = done_tx.send(());
            stderr
        });
        done.recv_timeout(Duration::from_secs(60))
            .expect("a write to stderr blocked");
        let mut stderr = writer.join().unwrap();
        // Nothing moves while nobody reads: flush gives up instead of waiting.
        assert!(!pump.flush(Duration::from_millis(100), Duration::from_secs(20)));
        let dropped = pump.dropped();
        assert!(dropped > 0);
        // Read again: what was kept arrives, then the next output with a note about the gap.
        let (seen_tx, seen) = mpsc::channel();
        std::thread::spawn(move || {
            let mut real = real;
            let _ = seen_tx.send(read_until(&mut real, "last line"));
        });
        assert!(pump.flush(Duration::from_secs(10), Duration::from_secs(20)));
        stderr.write_all(b"last line\n").unwrap();
        let seen = seen
            .recv_timeout(Duration::from_secs(30))
            .expect("the last line did not arrive");
        // Every byte is delivered or counted as dropped, and the notes add up to the count.
        let mut delivered = 0;
        let mut noted = 0;
        for line in seen.split('\n') {
            match line.strip_prefix("[toolbox: ") {
                Some(note) => {
                    assert!(note.ends_with("stderr was not read fast enough]"), "{line}");
                    noted += note.split(' ').next().unwrap().parse::<u64>().unwrap();
                }
                None => delivered += line.bytes().filter(|&b| b == b'x').count() as u64,
            }
        }
        assert_eq!(delivered + dropped, 8 * 1024 * 1024);
        assert_eq!(noted, dropped);
        assert!(
            seen.ends_with("fast enough]\nlast line\n"),
            "the gap before the last line is noted"
        );
    }

    #[test]
    fn a_closed_stderr_is_discarded_without_blocking() {
        let (mut stderr, pump, real) = pump(64 * 1024);
        drop(real);
        for _ in 0..1024 {
            stderr.write_all(&[b'y'; 1024]).unwrap();
        }
        assert!(pump.flush(Duration::from_secs(10), Duration::from_secs(20)));
    }
}
