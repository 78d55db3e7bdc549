//! The serving task and the idle thread's reading: the input side of the fast path (see the
//! module documentation of [`super`]).

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::io::unix::AsyncFd;
use toolbox_host::handoff::IdleWork;

use super::dispatch::{Call, CallStarter, Dispatcher};
use super::{framing, transport, INLINE_PARSE_BYTES, MAX_LINE_BYTES};
use crate::jsonrpc::{self, Parsed, PARSE_ERROR};

/// Serves input read by a thread of its own (see `transport::Input::Thread`).
pub(super) async fn serve_read(mut input: transport::ThreadInput, mut dispatcher: Dispatcher) {
    let mut framer = framing::Framer::new(MAX_LINE_BYTES);
    let mut chunk = Vec::new();
    loop {
        if let Err(e) = input.read(&mut chunk).await {
            tracing::warn!("mcp: cannot read stdin: {e}");
            break;
        }
        if dispatch_chunk(&mut framer, &chunk, &mut dispatcher).await {
            break;
        }
    }
}

/// Handles the requests whose lines `chunk` completes; an empty chunk is the end of input
/// (and completes a last line without a newline). True at the end of input.
async fn dispatch_chunk(
    framer: &mut framing::Framer,
    chunk: &[u8],
    dispatcher: &mut Dispatcher,
) -> bool {
    if chunk.is_empty() {
        if let Some(frame) = framer.finish() {
            let parsed = parse_frame(frame).await;
            dispatcher.handle(parsed, &mut CallStarter::Spawn);
        }
        return true;
    }
    let mut pos = 0;
    while let Some(frame) = framer.next(chunk, &mut pos) {
        let parsed = parse_frame(frame).await;
        dispatcher.handle(parsed, &mut CallStarter::Spawn);
    }
    false
}

/// Serves polled input (a pipe, socket or terminal) with two readers: this task, and the
/// embedded Python thread while it is idle, to which the input is offered as
/// [`IdleWork`] in the python provider's `IdleSlot` (reached through the executor's
/// registry, `ToolProvider::idle_slot`). A request that arrives while that thread
/// waits wakes it; it reads and parses the request, starts the call in place, runs the cell
/// and writes the reply: one thread from request to reply. Meanwhile (`watched`) this task
/// leaves the input alone; whenever the thread turns to something else, this task reads.
/// Both read and dispatch under one lock, so requests are handled in the order they came.
pub(super) async fn serve_polled(fd: AsyncFd<transport::EpollGate>, dispatcher: Dispatcher) {
    let slot = dispatcher.idle_slot();
    let reader = Arc::new(SharedInput {
        fd,
        state: tokio::sync::Mutex::new(InputState {
            framer: framing::Framer::new(MAX_LINE_BYTES),
            chunk: Vec::new(),
            dispatcher,
            ended: false,
        }),
        watched: AtomicBool::new(false),
        nudge: tokio::sync::Notify::new(),
        ended: AtomicBool::new(false),
        runtime: tokio::runtime::Handle::current(),
    });
    // `TOOLBOX_MCP_IDLE_READER=0` leaves the input to this task alone: for measuring what
    // the idle reader is worth (bench/mcp_roundtrip.sh runs both, interleaved).
    let idle_reader = std::env::var_os("TOOLBOX_MCP_IDLE_READER").is_none_or(|v| v != "0");
    // Offered where the provider that owns an idle thread (embedded Python) looks for work;
    // one thread at most, since the input has one reader at a time besides this task.
    let _offer = slot
        .filter(|_| idle_reader)
        .map(|slot| slot.offer(reader.clone()));
    loop {
        let ready = tokio::select! {
            biased;
            _ = reader.nudge.notified() => None,
            ready = reader.fd.readable() => match ready {
                Ok(mut guard) if reader.watched.load(Ordering::SeqCst) => {
                    // The idle thread reads it; if it turns away first, it nudges.
                    guard.clear_ready();
                    continue;
                }
                Ok(guard) => Some(guard),
                Err(e) => {
                    tracing::warn!("mcp: cannot poll stdin: {e}");
                    break;
                }
            },
        };
        let mut state = reader.state.lock().await;
        if state.ended {
            break;
        }
        let input = reader.fd.get_ref().input();
        let read = match ready {
            // Read until the input says EAGAIN, even after a short read: the runtime sees
            // stdin through the gate, which reports new input but not a hang-up, so an end of
            // input that came with the last lines is only learnt by reading again.
            Some(mut guard) => {
                match guard.try_io(|_| transport::read_chunk(input, &mut state.chunk)) {
                    Ok(read) => read,
                    Err(_would_block) => continue,
                }
            }
            None => match transport::read_chunk(input, &mut state.chunk) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                read => read,
            },
        };
        if let Err(e) = read {
            tracing::warn!("mcp: cannot read stdin: {e}");
            break;
        }
        let InputState {
            framer,
            chunk,
            dispatcher,
            ended,
        } = &mut *state;
        if dispatch_chunk(framer, chunk, dispatcher).await {
            *ended = true;
            break;
        }
    }
    reader.ended.store(true, Ordering::SeqCst);
}

/// The protocol input and what reads it, shared by the serving task and an idle thread.
struct SharedInput {
    /// Closed while `watched`, so that a request does not wake a runtime worker too.
    fd: AsyncFd<transport::EpollGate>,
    state: tokio::sync::Mutex<InputState>,
    /// The idle thread is waiting on the input: the serving task leaves it alone.
    watched: AtomicBool,
    /// Tells the serving task to read: the idle thread turned away with input waiting.
    nudge: tokio::sync::Notify,
    ended: AtomicBool,
    runtime: tokio::runtime::Handle,
}

struct InputState {
    framer: framing::Framer,
    chunk: Vec<u8>,
    dispatcher: Dispatcher,
    ended: bool,
}

impl IdleWork for SharedInput {
    fn fd(&self) -> RawFd {
        self.fd.get_ref().input().as_raw_fd()
    }

    fn finished(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    fn watch(&self, watching: bool) {
        let was = self.watched.swap(watching, Ordering::SeqCst);
        if was == watching {
            return;
        }
        if let Err(e) = self.fd.get_ref().set_open(!watching) {
            // Closed or not, the serving task is nudged below when input waits.
            tracing::warn!("mcp: cannot switch who polls stdin: {e}");
        }
        // Input that came while the serving task held back is its to read now. Checked after
        // opening the gate: anything later wakes the serving task through it.
        if !watching && transport::readable_now(self.fd.get_ref().input()) {
            self.nudge.notify_one();
        }
    }

    fn take(&self) {
        let mut state = self.state.blocking_lock();
        let _runtime = self.runtime.enter();
        if state.ended {
            return;
        }
        match transport::read_chunk(self.fd.get_ref().input(), &mut state.chunk) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                tracing::warn!("mcp: cannot read stdin: {e}");
                // As at the end of input: the serving task, nudged, ends the session.
                state.ended = true;
                self.ended.store(true, Ordering::SeqCst);
                self.nudge.notify_one();
                return;
            }
        }
        // The calls these requests start: started here, in place, once the input is unlocked.
        let mut calls: Vec<Call> = Vec::new();
        let mut starter = CallStarter::InPlace(&mut calls);
        let InputState {
            framer,
            chunk,
            dispatcher,
            ended,
        } = &mut *state;
        if chunk.is_empty() {
            if let Some(frame) = framer.finish() {
                dispatcher.handle(parse_frame_here(frame, self), &mut starter);
            }
            *ended = true;
            self.ended.store(true, Ordering::SeqCst);
            self.nudge.notify_one();
        } else {
            let mut pos = 0;
            while let Some(frame) = framer.next(chunk, &mut pos) {
                dispatcher.handle(parse_frame_here(frame, self), &mut starter);
            }
        }
        drop(state);
        if !calls.is_empty() {
            // From here this thread is busy: the serving task reads what comes meanwhile.
            self.watch(false);
            for call in calls {
                toolbox_host::handoff::spawn_here(call);
            }
        }
    }
}

/// [`parse_frame`] on the idle thread: a large line is parsed here too, after handing the
/// input to the serving task for the while.
fn parse_frame_here(frame: framing::Frame<'_>, input: &SharedInput) -> Parsed {
    if matches!(frame, framing::Frame::Line(line) if line.len() > INLINE_PARSE_BYTES) {
        input.watch(false);
    }
    parse_frame_now(frame)
}

/// Parses one frame, here and now.
fn parse_frame_now(frame: framing::Frame<'_>) -> Parsed {
    match frame {
        framing::Frame::TooLong => Parsed::Reject {
            id: Value::Null,
            code: PARSE_ERROR,
            message: format!(
                "Parse error: line longer than the limit of {MAX_LINE_BYTES} bytes (16 MiB); \
                 it was skipped"
            ),
        },
        framing::Frame::Line(line) => jsonrpc::parse_message(line),
    }
}

/// Parses one frame: in place when it is small, on the blocking pool when it is large.
async fn parse_frame(frame: framing::Frame<'_>) -> Parsed {
    match frame {
        framing::Frame::Line(line) if line.len() > INLINE_PARSE_BYTES => {
            let line = line.to_vec();
            tokio::task::spawn_blocking(move || jsonrpc::parse_message(&line))
                .await
                .unwrap_or_else(|e| Parsed::Reject {
                    id: Value::Null,
                    code: PARSE_ERROR,
                    message: format!("Parse error: {e}"),
                })
        }
        frame => parse_frame_now(frame),
    }
}
