//! `toolbox mcp`: every visible tool over the Model Context Protocol on stdio.
//!
//! A small JSON-RPC 2.0 server of our own, not rmcp's stdio transport: rmcp drops a line it
//! cannot read (not JSON, not UTF-8, too long, a lone surrogate) without a reply, and a client
//! then waits forever. Here every line that is not a well-formed notification or response gets
//! exactly one reply line: -32700 for a line that does not parse (not JSON, not UTF-8, longer
//! than [`MAX_LINE_BYTES`], nested more than 127 levels deep), -32600 for JSON that is no
//! request (`{}`, an array, a message without an id that is not a well-formed notification,
//! id null) or whose id is already in flight, -32601 for an unknown method (logged at debug
//! only), -32602 for bad params (a lone-surrogate `\u` escape included). The checks, codes
//! and messages are [`crate::jsonrpc`]'s, shared with `/mcp`. A well-formed notification gets
//! no reply whatever its method or params, as JSON-RPC asks, and the connection stays usable
//! after any of these.
//!
//! Tool failures of any kind (errors, denials, timeouts, panics) are tool results with
//! `isError: true`; only a name that is no tool at all is a protocol error, as MCP asks. Each
//! `tools/call` runs as its own task; `notifications/cancelled` cancels it (and its id may
//! be reused at once: a cancelled request gets no reply).
//!
//! The server builds its executor with its own event sink (`events`). A tool's streamed
//! output goes where [`crate::output`] says; never to stderr. Notifications waiting to be
//! written are capped at [`MAX_QUEUED_OUTPUT_BYTES`](crate::output::MAX_QUEUED_OUTPUT_BYTES)
//! for the whole connection. A client that declared form elicitation at `initialize` is
//! asked each approval with an `elicitation/create` request (the form `/mcp` sends, see
//! [`crate::approval`]), one question per connection at a time, in the order the calls
//! came; its response line is routed back by id. A client that cannot be asked is answered
//! per [`Fallback`] (`--approve`, default `no`), with a refusal that says how to allow the
//! call.
//!
//! # Moving bytes: the fast path
//!
//! No threads of its own on the fast path. The protocol takes private copies of fd 0 and
//! fd 1; fd 0 then points at `/dev/null` (a tool's subprocess cannot read protocol bytes) and
//! fd 1 at stderr (code that writes to the terminal cannot corrupt the stream). Pipes and
//! terminals are reopened through `/proc/self/fd`, so the `O_NONBLOCK` set on them is
//! toolbox's alone (`transport`). Framing is one message per line, at most
//! [`MAX_LINE_BYTES`]; a longer line is skipped unbuffered (`framing`).
//!
//! One task, spawned on a runtime worker by the binary, reads stdin through the runtime's
//! epoll (`AsyncFd`), frames lines in place, parses them (lines over 256 KiB on the blocking
//! pool) and answers cheap methods at once (`serve`, `dispatch`); each `tools/call` is a task
//! that tokio starts on the same worker, runs the executor, writes its reply with one
//! `write(2)` and then the call's trajectory line (`Finished::record`: a `toolbox mcp`
//! killed between the two loses that one line). A request line thus reaches its reply line
//! without a hand-off between threads: per trivial call the system calls are one
//! `epoll_wait`, two `read`s of stdin (the second says `EAGAIN`: the runtime sees stdin
//! through the gate below, which reports new input but not a hang-up, so an end of input
//! that came with the last lines is learnt only by reading on), the tool's own, the reply
//! `write` and the trajectory `write`. A reply the pipe does not take (a client that stops
//! reading) is queued and written by a task waiting for the pipe to drain, so it holds up no
//! call (`writer`); a stdin or stdout that epoll refuses (a regular file) gets a reader or
//! writer thread instead. The runtime is tokio's multi-threaded one: a slow or busy call
//! never delays a fast one sent after it.
//!
//! Calls are started with `host::handoff::spawn`, a task that runs on the runtime like any
//! other, except that a thread outside it which finishes the call's work may carry the task
//! on in place (`handoff::with_inline_wakeups`). Embedded Python does: its thread, once the
//! cell has run, writes the call's MCP reply and its trajectory line itself, instead of
//! waking a runtime worker to do so. A timer, a cancellation or anything else the call waits
//! for still wakes it on the runtime, so timeouts and `notifications/cancelled` work while
//! the Python thread is busy.
//!
//! Once embedded Python has started, its thread also reads the MCP input while it is idle:
//! `serve_polled` offers the input as `handoff::IdleWork` in the slot the python provider
//! hands out (`ToolProvider::idle_slot`, found through the executor's registry: no global,
//! and the provider names no front end), and the Python thread waits on it
//! (`poll`) together with its job queue's eventfd. The runtime polls stdin through an epoll
//! instance of its own (`transport::EpollGate`), closed while the Python thread watches: a request
//! then wakes that thread alone, not also a runtime worker on the other CPU. That thread
//! reads and parses the line, starts the call in place (`handoff::spawn_here`: permission
//! gate, provider, the job queued to itself), runs the cell and writes the reply, with no
//! other thread involved. Before it turns to anything that takes time it stops watching
//! (`watch(false)`), and the serving task reads what comes meanwhile, as it always does
//! without Python; input that arrived in between is handed over with a nudge. Both readers
//! read and dispatch under one lock, so requests are handled in the order they came. The
//! nudge needs its `poll` (a test of input waiting): once stdin has been ready inside the
//! gate, its entry stays on the gate's ready list (nobody waits on the gate itself to take
//! it off), and the kernel tells an enclosing epoll only when an entry joins that list, so
//! reopening the gate over waiting input wakes nobody.
//!
//! Modules: `transport` (the protocol's descriptors, the gate, reading), `framing` (lines),
//! `writer` (whole lines to stdout, the queue), `serve` (the serving task and the idle
//! thread's reading), `dispatch` (methods, calls in flight), `outbox` (JSON-RPC replies and
//! notifications), `events` (the executor's sink: output routing and elicitation).

mod dispatch;
mod events;
mod framing;
mod outbox;
mod serve;
mod transport;
mod writer;

use std::io::{Read, Write};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use serde_json::json;
use toolbox_core::SessionId;
use toolbox_executor::{ExecutorConfig, ToolExecutor};
use toolbox_host::EventSink;

use crate::{lock, Fallback};
use dispatch::Dispatcher;
use events::Events;
use outbox::Outbox;

/// The longest line (one JSON-RPC message, newline excluded) the server reads. Longer lines
/// are skipped up to their newline without being buffered, so a client cannot make the server
/// hold more than this much memory for one message.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Lines up to this long are parsed on the serving task; longer ones on the blocking pool,
/// so a 16 MiB parse never occupies a runtime worker.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// The MCP face of one executor.
#[derive(Clone)]
pub struct McpServer {
    executor: ToolExecutor,
    /// Parsed once, at start-up: every call on this connection uses it.
    session: SessionId,
    /// The `tools/list` result, serialised once: the visible tools never change.
    tools_list: Arc<str>,
    calls: Arc<AtomicU64>,
    events: Arc<Events>,
}

impl McpServer {
    /// A server over an executor built from `config` and every linked provider, answering
    /// the approval requests of a client that cannot be asked per `fallback`.
    pub fn new(
        config: ExecutorConfig,
        session: SessionId,
        fallback: Fallback,
    ) -> anyhow::Result<Self> {
        let events = Arc::new(Events::new(fallback));
        let sink = {
            let events = events.clone();
            EventSink::new(move |event| events.handle(event))
        };
        let executor = ToolExecutor::with_events(config, sink)?;
        let _ = events.executor.set(executor.clone());
        let tools = crate::listed_tools(&executor);
        let tools_list = json!({ "tools": tools }).to_string();
        Ok(McpServer {
            executor,
            session,
            tools_list: tools_list.into(),
            calls: Arc::new(AtomicU64::new(0)),
            events,
        })
    }

    /// Serves on stdin/stdout until the client closes stdin.
    ///
    /// The protocol takes private copies of stdin and stdout. File descriptor 0 is pointed at
    /// `/dev/null` and 1 at stderr: a subprocess started from embedded Python, or a C library,
    /// can then neither read protocol bytes nor corrupt the JSON-RPC stream by writing to the
    /// terminal. The `toolbox` binary installs its stderr pump (`toolbox::stderr_pump`) before
    /// this, so such writes cannot block either, even when the client never reads stderr.
    ///
    /// Pipes, sockets and terminals are served without threads of their own (see the module
    /// documentation); anything epoll refuses (a regular file) gets a reader or writer thread.
    /// Spawn this on the runtime (`tokio::spawn`) rather than `block_on` it: the serving task
    /// then runs on a worker, and the calls it spawns start on that same worker.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        let (stdin, stdin_polled) =
            transport::take_stdin().map_err(|e| anyhow::anyhow!("cannot take stdin: {e}"))?;
        let (stdout, stdout_polled) =
            transport::take_stdout().map_err(|e| anyhow::anyhow!("cannot take stdout: {e}"))?;
        let output = writer::Output::from_fd(stdout, stdout_polled)?;
        let input = transport::Input::from_fd(stdin, stdin_polled)?;
        let tick = tokio::spawn(keep_a_timer_due());
        let served = self.serve_on(input, output).await;
        tick.abort();
        served
    }

    /// Serves newline-delimited JSON-RPC read from `input`, answering on `output`, until
    /// `input` ends. Calls still running then finish and are answered before this returns.
    /// `input` and `output` each get a thread of their own.
    pub async fn serve(
        self,
        input: impl Read + Send + 'static,
        output: impl Write + Send + 'static,
    ) -> anyhow::Result<()> {
        let output = writer::Output::from_writer(output)?;
        let input = transport::Input::from_reader(input)?;
        self.serve_on(input, output).await
    }

    async fn serve_on(
        self,
        input: transport::Input,
        output: Arc<writer::Output>,
    ) -> anyhow::Result<()> {
        let outbox = Outbox { output };
        *lock(&self.events.outbox) = Some(outbox.clone());
        let events = self.events.clone();
        let dispatcher = Dispatcher::new(self, outbox.clone());
        let running = dispatcher.running.clone();
        match input {
            transport::Input::Polled(fd) => serve::serve_polled(fd, dispatcher).await,
            transport::Input::Thread(input) => serve::serve_read(input, dispatcher).await,
        }
        // End of input means no more requests, not that the client is gone: let the calls
        // already started finish and answer (a client that left is not hurt by the replies).
        running.all_finished().await;
        // Wait until every reply is written, so none is lost at exit.
        lock(&events.outbox).take();
        outbox.output.finish().await;
        Ok(())
    }
}

/// Keeps a timer of the runtime due within 10 s, for as long as the server runs.
///
/// Every call arms timers for its timeouts (minutes away). Armed when nothing is due sooner,
/// a timer makes tokio wake its timer driver to re-arm its sleep: an eventfd write, from the
/// thread running the call, and a wake-up of a parked worker, on every call. With a timer
/// always due sooner, a call's timeouts are filed without waking anything; the price is one
/// wake-up every 10 s.
async fn keep_a_timer_due() {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    }
}
