//! `toolbox mcp`: every visible tool over the Model Context Protocol on stdio.
//!
//! A small JSON-RPC 2.0 server of our own, not rmcp's stdio transport: rmcp drops a line it
//! cannot read (not JSON, not UTF-8, too long, a lone surrogate) without a reply, and a client
//! then waits forever. Here every line that is not a well-formed notification or response gets
//! exactly one reply line: -32700 for a line that does not parse, -32600 for JSON that is no
//! request (`{}`, an array, a message without an id that is not a well-formed notification)
//! or whose id is already in flight, -32601 for an unknown method, -32602 for bad params. The
//! checks, codes and messages are `crate::jsonrpc`'s, shared with `/mcp`. A
//! well-formed notification gets no reply whatever its method or params, as JSON-RPC asks, and
//! the connection stays usable after any of these.
//!
//! Tool failures of any kind (errors, denials, timeouts, panics) are tool results with
//! `isError: true`; only a name that is no tool at all is a protocol error, as MCP asks.
//!
//! A tool's streamed output (a shell command's lines, pip's progress) goes to the client as
//! `notifications/progress` when the call carried a `progressToken` in `_meta`, else as
//! `notifications/message` once the client asked for `info` logs with `logging/setLevel`,
//! else nowhere; never to stderr. Notifications waiting to be written are capped at
//! [`MAX_QUEUED_NOTIFICATION_BYTES`]: beyond that they are dropped (the tool result still has
//! the output), so a flood can neither stall a call nor grow memory.
//!
//! Threads: none of its own on the fast path. One task reads stdin (non-blocking, through
//! the runtime's epoll), frames and parses each line and answers the cheap methods in place;
//! each `tools/call` is a task of its own (a slow call never delays a later fast one), which
//! writes its reply to stdout itself. A request line therefore reaches its reply line
//! without a hand-off between threads; the `transport` module has the plumbing, the queue for a
//! client that stops reading, and the thread fallback for a stdin or stdout epoll refuses.

mod transport;

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use serde_json::{json, Value};
use tokio::io::unix::AsyncFd;
use toolbox_core::handoff::IdleWork;
use toolbox_core::{ApprovalRequest, CancellationToken, EventSink, SessionId, ToolEvent};
use toolbox_executor::{
    schema, ApprovalDecision, CallStatus, ExecutorConfig, SchemaFormat, ToolExecutor, ToolRequest,
};

/// The longest line (one JSON-RPC message, newline excluded) the server reads. Longer lines
/// are skipped up to their newline without being buffered, so a client cannot make the server
/// hold more than this much memory for one message.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Lines up to this long are parsed on the serving task; longer ones on the blocking pool,
/// so a 16 MiB parse never occupies a runtime worker.
const INLINE_PARSE_BYTES: usize = 256 * 1024;

/// Protocol versions with an `initialize` handshake that this server speaks, newest first.
/// A client asking for one of them gets it echoed; any other request gets the first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

use crate::jsonrpc::{
    self, Inbound, Parsed, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};

const INSTRUCTIONS: &str =
    "toolbox tools run inside one workspace folder; paths are relative to it.";

/// The most notification bytes queued for stdout at once. A notification that would go over
/// is dropped: streamed output is a courtesy, the tool result has it all.
pub const MAX_QUEUED_NOTIFICATION_BYTES: usize = 1024 * 1024;

/// What `toolbox mcp` does with a risky call (permission mode `auto`) when the client cannot
/// be asked: it declared no elicitation at `initialize`. A client that did is asked, with
/// the same form `toolbox serve`'s `/mcp` sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approvals {
    /// Run it (`--approve yes`): for clients that confirm each call with their user.
    Approve,
    /// Refuse it, saying how to allow it (`--approve no`, the default).
    Refuse,
}

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
    /// approval requests per `approvals`.
    pub fn new(
        config: ExecutorConfig,
        session: SessionId,
        approvals: Approvals,
    ) -> anyhow::Result<Self> {
        let events = Arc::new(Events {
            approvals,
            can_elicit: AtomicBool::new(false),
            asking: Mutex::default(),
            next_question: AtomicU64::new(1),
            executor: OnceLock::new(),
            outbox: Mutex::new(None),
            routes: Mutex::default(),
            log_level: AtomicU8::new(LOGGING_OFF),
        });
        let sink = {
            let events = events.clone();
            EventSink::new(move |event| events.handle(event))
        };
        let executor = ToolExecutor::with_events(config, sink)?;
        let _ = events.executor.set(executor.clone());
        let tools = schema::render(
            executor.visible_tools().into_iter().map(|t| &t.info),
            SchemaFormat::Mcp.strict(true),
        );
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
    /// terminal. The `toolbox` binary installs its stderr pump (`toolbox::stderr_pump`) before this, so such writes cannot
    /// block either, even when the client never reads stderr.
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
        let output = transport::Output::from_fd(stdout, stdout_polled)?;
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
        let output = transport::Output::from_writer(output)?;
        let input = transport::Input::from_reader(input)?;
        self.serve_on(input, output).await
    }

    async fn serve_on(
        self,
        input: transport::Input,
        output: Arc<transport::Output>,
    ) -> anyhow::Result<()> {
        let outbox = Outbox { output };
        *lock(&self.events.outbox) = Some(outbox.clone());
        let events = self.events.clone();
        let dispatcher = Dispatcher {
            server: self,
            outbox: outbox.clone(),
            in_flight: Arc::default(),
            running: Arc::default(),
            approvals: toolbox_executor::ApprovalQueue::new(),
        };
        let running = dispatcher.running.clone();
        match input {
            transport::Input::Polled(fd) => serve_polled(fd, dispatcher).await,
            transport::Input::Thread(input) => serve_read(input, dispatcher).await,
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

/// Serves input read by a thread of its own (see `transport::Input::Thread`).
async fn serve_read(mut input: transport::ThreadInput, mut dispatcher: Dispatcher) {
    let mut framer = transport::Framer::new(MAX_LINE_BYTES);
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
    framer: &mut transport::Framer,
    chunk: &[u8],
    dispatcher: &mut Dispatcher,
) -> bool {
    if chunk.is_empty() {
        if let Some(frame) = framer.finish() {
            let parsed = parse_frame(frame).await;
            dispatcher.handle(parsed);
        }
        return true;
    }
    let mut pos = 0;
    while let Some(frame) = framer.next(chunk, &mut pos) {
        let parsed = parse_frame(frame).await;
        dispatcher.handle(parsed);
    }
    false
}

/// Serves polled input (a pipe, socket or terminal) with two readers: this task, and the
/// embedded Python thread while it is idle, to which the input is offered as
/// [`IdleWork`](toolbox_core::handoff::IdleWork). A request that arrives while that thread
/// waits wakes it; it reads and parses the request, starts the call in place, runs the cell
/// and writes the reply: one thread from request to reply. Meanwhile (`watched`) this task
/// leaves the input alone; whenever the thread turns to something else, this task reads.
/// Both read and dispatch under one lock, so requests are handled in the order they came.
async fn serve_polled(fd: AsyncFd<transport::Gate>, dispatcher: Dispatcher) {
    let reader = Arc::new(SharedInput {
        fd,
        state: tokio::sync::Mutex::new(InputState {
            framer: transport::Framer::new(MAX_LINE_BYTES),
            chunk: Vec::new(),
            dispatcher,
            ended: false,
        }),
        watched: AtomicBool::new(false),
        nudge: tokio::sync::Notify::new(),
        ended: AtomicBool::new(false),
        runtime: tokio::runtime::Handle::current(),
    });
    let _offer = toolbox_core::handoff::offer_idle_work(reader.clone());
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
        let raw = reader.fd.get_ref().input();
        let read = match ready {
            // Read until the input says EAGAIN, even after a short read: the runtime sees
            // stdin through the gate, which reports new input but not a hang-up, so an end of
            // input that came with the last lines is only learnt by reading again.
            Some(mut guard) => match guard.try_io(|_| transport::read_chunk(raw, &mut state.chunk))
            {
                Ok(read) => read,
                Err(_would_block) => continue,
            },
            None => match transport::read_chunk(raw, &mut state.chunk) {
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
    fd: AsyncFd<transport::Gate>,
    state: tokio::sync::Mutex<InputState>,
    /// The idle thread is waiting on the input: the serving task leaves it alone.
    watched: AtomicBool,
    /// Tells the serving task to read: the idle thread turned away with input waiting.
    nudge: tokio::sync::Notify,
    ended: AtomicBool,
    runtime: tokio::runtime::Handle,
}

struct InputState {
    framer: transport::Framer,
    chunk: Vec<u8>,
    dispatcher: Dispatcher,
    ended: bool,
}

thread_local! {
    /// Set while the idle thread dispatches: calls are collected here and started in place
    /// once the input is unlocked.
    static STARTED_HERE: RefCell<Option<Vec<Call>>> = const { RefCell::new(None) };
}

type Call = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl IdleWork for SharedInput {
    fn fd(&self) -> RawFd {
        self.fd.get_ref().input()
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
        if !watching && transport::readable_now(self.fd()) {
            self.nudge.notify_one();
        }
    }

    fn take(&self) {
        let mut state = self.state.blocking_lock();
        let _runtime = self.runtime.enter();
        if state.ended {
            return;
        }
        let raw = self.fd();
        match transport::read_chunk(raw, &mut state.chunk) {
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
        STARTED_HERE.with(|calls| *calls.borrow_mut() = Some(Vec::new()));
        let InputState {
            framer,
            chunk,
            dispatcher,
            ended,
        } = &mut *state;
        if chunk.is_empty() {
            if let Some(frame) = framer.finish() {
                dispatcher.handle(parse_frame_here(frame, self));
            }
            *ended = true;
            self.ended.store(true, Ordering::SeqCst);
            self.nudge.notify_one();
        } else {
            let mut pos = 0;
            while let Some(frame) = framer.next(chunk, &mut pos) {
                dispatcher.handle(parse_frame_here(frame, self));
            }
        }
        let calls = STARTED_HERE.with(|calls| calls.borrow_mut().take().unwrap_or_default());
        drop(state);
        if !calls.is_empty() {
            // From here this thread is busy: the serving task reads what comes meanwhile.
            self.watch(false);
            for call in calls {
                toolbox_core::handoff::spawn_here(call);
            }
        }
    }
}

/// [`parse_frame`] on the idle thread: a large line is parsed here too, after handing the
/// input to the serving task for the while.
fn parse_frame_here(frame: transport::Frame<'_>, input: &SharedInput) -> Parsed {
    if matches!(frame, transport::Frame::Line(line) if line.len() > INLINE_PARSE_BYTES) {
        input.watch(false);
    }
    parse_frame_now(frame)
}

/// Parses one frame, here and now.
fn parse_frame_now(frame: transport::Frame<'_>) -> Parsed {
    match frame {
        transport::Frame::TooLong => Parsed::Reject {
            id: Value::Null,
            code: PARSE_ERROR,
            message: format!(
                "Parse error: line longer than the limit of {MAX_LINE_BYTES} bytes (16 MiB); \
                 it was skipped"
            ),
        },
        transport::Frame::Line(line) => jsonrpc::parse_message(line),
    }
}

/// Parses one frame: in place when it is small, on the blocking pool when it is large.
async fn parse_frame(frame: transport::Frame<'_>) -> Parsed {
    match frame {
        transport::Frame::Line(line) if line.len() > INLINE_PARSE_BYTES => {
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

// ---------------------------------------------------------------------------------------
// Output: whole lines, written by whoever sends them (see `transport::Output`), so replies from
// concurrent calls never interleave and a client that stops reading blocks nothing.

/// Where replies and notifications go.
#[derive(Clone)]
struct Outbox {
    output: Arc<transport::Output>,
}

impl Outbox {
    /// `result` is already serialised JSON.
    fn result(&self, id: &Value, result: &str) {
        self.send(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        ));
    }

    /// A `tools/call` result with one text item (see [`tool_result_line`]).
    fn tool_result(&self, id: &Value, text: &str, is_error: bool) {
        self.output.send(tool_result_line(id, text, is_error), None);
    }

    fn error(&self, id: &Value, code: i64, message: &str) {
        let reply = json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": { "code": code, "message": message },
        });
        self.send(reply.to_string());
    }

    /// Replies are never dropped while the client reads stdout: there is one per request.
    fn send(&self, mut text: String) {
        text.push('\n');
        // Dropped only once stdout is closed: the client is gone and nobody is left to tell.
        self.output.send(text.into_bytes(), None);
    }

    /// Sends a notification unless that would put more than
    /// [`MAX_QUEUED_NOTIFICATION_BYTES`] of them in the queue. False when it was dropped.
    fn notify(&self, method: &str, params: Value) -> bool {
        let mut text = json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string();
        text.push('\n');
        self.output
            .send(text.into_bytes(), Some(MAX_QUEUED_NOTIFICATION_BYTES))
            != transport::Sent::Dropped
    }
}

/// The reply line to a `tools/call` with one text item, written straight into the line: the
/// same JSON as building the object and printing it, without the object, its copies and the
/// second pass (a cell's reply is mostly this text).
fn tool_result_line(id: &Value, text: &str, is_error: bool) -> Vec<u8> {
    let mut line = Vec::with_capacity(text.len() + 96);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // Writing to a Vec cannot fail, and a Value always serialises.
    let _ = serde_json::to_writer(&mut line, id);
    line.extend_from_slice(br#","result":{"content":[{"type":"text","text":"#);
    let _ = serde_json::to_writer(&mut line, text);
    line.extend_from_slice(if is_error {
        b"}],\"isError\":true}}\n"
    } else {
        b"}],\"isError\":false}}\n"
    });
    line
}

// ---------------------------------------------------------------------------------------
// Input: framing (`transport::Framer`) and JSON-RPC validation on the serving task. Invalid
// messages are answered at once; valid ones are dispatched.

// ---------------------------------------------------------------------------------------
// Events: the executor's sink. Runs on whatever thread the tool emits from, so it only takes
// short locks and queues; nothing here can block a call.

/// Tool output is logged at `info`.
const LEVEL_INFO: u8 = 1;
/// No `logging/setLevel` yet: no log notifications.
const LOGGING_OFF: u8 = u8::MAX;

/// Streams a call's output to its client and answers approval requests.
struct Events {
    approvals: Approvals,
    /// The client declared form elicitation at `initialize`: approvals are asked of it.
    can_elicit: AtomicBool,
    /// Approval questions sent to the client and not answered yet, by the JSON text of the
    /// `elicitation/create` request's id.
    asking: Mutex<HashMap<String, ApprovalRequest>>,
    next_question: AtomicU64,
    /// Set right after the executor is built (the executor holds this sink).
    executor: OnceLock<ToolExecutor>,
    /// Set while serving.
    outbox: Mutex<Option<Outbox>>,
    /// The calls running now, by the executor's call id.
    routes: Mutex<HashMap<String, Route>>,
    /// The level the client asked for with `logging/setLevel`, as an index of [`jsonrpc::LOG_LEVELS`].
    log_level: AtomicU8,
}

/// Where one call's output goes.
#[derive(Default)]
struct Route {
    /// The client's `_meta.progressToken` for this call.
    progress_token: Option<Value>,
    /// The last `progress` sent; MCP wants it to grow with every notification.
    progress: u64,
    dropped_bytes: u64,
}

impl Events {
    fn handle(&self, event: ToolEvent) {
        match event {
            ToolEvent::Output {
                call_id,
                tool,
                text,
                ..
            } => self.forward(&call_id, &tool, &text),
            ToolEvent::Progress {
                call_id,
                tool,
                message,
            } => self.forward(&call_id, &tool, &message),
            ToolEvent::ApprovalRequested(request) => self.answer(&request),
        }
    }

    /// Asks the client (an `elicitation/create` request; its answer comes in as a response
    /// line) or, when it cannot be asked, answers at once per `--approve`: the executor
    /// registered the request before emitting it.
    fn answer(&self, request: &ApprovalRequest) {
        let Some(executor) = self.executor.get() else {
            return;
        };
        let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
        if self.can_elicit.load(Ordering::SeqCst) {
            let outbox = lock(&self.outbox).clone();
            if let Some(outbox) = outbox {
                let id = json!(format!(
                    "toolbox-approval-{}",
                    self.next_question.fetch_add(1, Ordering::Relaxed)
                ));
                lock(&self.asking).insert(id.to_string(), request.clone());
                let params = crate::http::approval_form_json(request);
                outbox.send(
                    json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params})
                        .to_string(),
                );
                return;
            }
        }
        match self.approvals {
            Approvals::Approve => {
                executor.respond_approval(session, call, ApprovalDecision::Approve);
            }
            Approvals::Refuse => {
                executor.deny_approval(session, call, crate::http::cannot_ask(request));
            }
        }
    }

    /// The client's answer to an approval question: approves only an accepted `approve`.
    fn answered(&self, id: &Value, result: Option<&Value>, error: Option<&Value>) {
        let Some(request) = lock(&self.asking).remove(&id.to_string()) else {
            return;
        };
        let Some(executor) = self.executor.get() else {
            return;
        };
        let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
        match (result, error) {
            (Some(result), _) if crate::http::approval_decision_json(result) => {
                executor.respond_approval(session, call, ApprovalDecision::Approve);
            }
            (Some(_), _) => {
                executor.deny_approval(session, call, crate::http::denied_by_user(&request));
            }
            (None, error) => {
                let why = error
                    .and_then(|e| e.get("message"))
                    .and_then(Value::as_str)
                    .unwrap_or("the client answered with an error");
                let why: String = why.chars().take(300).collect();
                executor.deny_approval(session, call, crate::http::asking_failed(&request, &why));
            }
        }
    }

    /// Forgets the questions of a call that stopped waiting (timed out, cancelled, done).
    fn forget_questions(&self, call_id: &str) {
        lock(&self.asking).retain(|_, request| request.call_id != call_id);
    }

    fn forward(&self, call_id: &str, tool: &str, text: &str) {
        if text.is_empty() {
            return;
        }
        let mut routes = lock(&self.routes);
        let Some(route) = routes.get_mut(call_id) else {
            return;
        };
        let outbox = lock(&self.outbox);
        let Some(outbox) = outbox.as_ref() else {
            return;
        };
        let sent = if let Some(token) = &route.progress_token {
            route.progress += 1;
            outbox.notify(
                "notifications/progress",
                json!({ "progressToken": token, "progress": route.progress, "message": text }),
            )
        } else if self.log_level.load(Ordering::Relaxed) <= LEVEL_INFO {
            outbox.notify(
                "notifications/message",
                json!({ "level": "info", "logger": tool, "data": text }),
            )
        } else {
            return;
        };
        if !sent {
            route.dropped_bytes += text.len() as u64;
        }
    }

    fn open_route(&self, call_id: &str, progress_token: Option<Value>) {
        lock(&self.routes).insert(
            call_id.to_string(),
            Route {
                progress_token,
                ..Route::default()
            },
        );
    }

    /// Forgets a finished call; says once, if it can, how much of its output was not sent.
    fn close_route(&self, call_id: &str) {
        let Some(route) = lock(&self.routes).remove(call_id) else {
            return;
        };
        if route.dropped_bytes == 0 {
            return;
        }
        tracing::debug!(
            call_id,
            dropped_bytes = route.dropped_bytes,
            "mcp: output notifications dropped: the client did not read them fast enough"
        );
        if let (Some(token), Some(outbox)) = (route.progress_token, lock(&self.outbox).as_ref()) {
            let message = format!(
                "[toolbox: {} bytes of output were not streamed because the client did not \
                 read them fast enough; the tool result has the output]",
                route.dropped_bytes
            );
            outbox.notify(
                "notifications/progress",
                json!({ "progressToken": token, "progress": route.progress + 1, "message": message }),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Dispatch: cheap methods are answered inline, tools/call runs as its own task.

/// A `tools/call` still running, by the JSON text of its id (so 7 and "7" differ, as in
/// JSON-RPC). `serial` tells a finished call from a later one that reused its id.
struct InFlight {
    serial: u64,
    cancel: CancellationToken,
}

type InFlightCalls = Arc<Mutex<HashMap<String, InFlight>>>;

struct Dispatcher {
    server: McpServer,
    outbox: Outbox,
    in_flight: InFlightCalls,
    running: Arc<RunningCalls>,
    /// The connection's approval questions: one at a time, in the order the calls came.
    approvals: toolbox_executor::ApprovalQueue,
}

impl Dispatcher {
    fn handle(&mut self, parsed: Parsed) {
        match parsed {
            Parsed::Message(Inbound::Request { id, method, params }) => {
                self.request(id, &method, params)
            }
            Parsed::Message(Inbound::Notification { method, params }) => {
                self.notification(&method, params)
            }
            Parsed::Reject { id, code, message } => {
                tracing::debug!("mcp: rejected a message: {message}");
                self.outbox.error(&id, code, &message);
            }
            Parsed::Response { id, result, error } => {
                self.server
                    .events
                    .answered(&id, result.as_ref(), error.as_ref())
            }
            Parsed::Ignore => {}
        }
    }

    fn request(&mut self, id: Value, method: &str, params: Value) {
        let key = id.to_string();
        if lock(&self.in_flight).contains_key(&key) {
            // The client could not tell two replies with one id apart; the first call keeps
            // running and still gets its own reply.
            return self.outbox.error(
                &id,
                INVALID_REQUEST,
                &format!("Invalid Request: request id {key} is already in flight"),
            );
        }
        if let Err(message) = jsonrpc::check_params(method, &params) {
            return self.outbox.error(&id, INVALID_PARAMS, &message);
        }
        match method {
            "initialize" => {
                let capabilities = params.get("capabilities").unwrap_or(&Value::Null);
                let can_elicit = crate::http::can_elicit_form(capabilities);
                self.server
                    .events
                    .can_elicit
                    .store(can_elicit, Ordering::SeqCst);
                self.outbox.result(&id, &initialize_result(&params))
            }
            "ping" => self.outbox.result(&id, "{}"),
            "tools/list" => self.outbox.result(&id, &self.server.tools_list),
            "tools/call" => self.start_call(id, key, params),
            "logging/setLevel" => match jsonrpc::log_level(&params) {
                Ok(level) => {
                    self.server.events.log_level.store(level, Ordering::Relaxed);
                    self.outbox.result(&id, "{}")
                }
                Err(message) => self.outbox.error(&id, INVALID_PARAMS, &message),
            },
            _ => {
                // A client probing for what this server offers is normal, not worth a warning.
                tracing::debug!("mcp: method not supported: {method}");
                self.outbox.error(
                    &id,
                    METHOD_NOT_FOUND,
                    &crate::http::method_not_found(method),
                )
            }
        }
    }

    fn notification(&mut self, method: &str, params: Value) {
        // notifications/initialized and anything else carry nothing this server acts on.
        if method != "notifications/cancelled" {
            return;
        }
        let Some(request_id) = params.get("requestId") else {
            return;
        };
        // Forget the id at once: MCP says a cancelled request gets no reply, so the client may
        // reuse its id before the tool has finished stopping.
        if let Some(call) = lock(&self.in_flight).remove(&request_id.to_string()) {
            call.cancel.cancel();
        }
    }

    fn start_call(&mut self, id: Value, key: String, params: Value) {
        let progress_token = params
            .get("_meta")
            .and_then(|meta| meta.get("progressToken"))
            .filter(|token| token.is_string() || token.is_i64() || token.is_u64())
            .cloned();
        let (name, arguments) = match jsonrpc::call_params(params) {
            Ok(call) => call,
            Err(message) => return self.outbox.error(&id, INVALID_PARAMS, &message),
        };
        if self.server.executor.registry().get(&name).is_none() {
            return self
                .outbox
                .error(&id, INVALID_PARAMS, &jsonrpc::unknown_tool(&name));
        }
        let serial = self.server.calls.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        lock(&self.in_flight).insert(
            key.clone(),
            InFlight {
                serial,
                cancel: cancel.clone(),
            },
        );
        let call_id = format!("mcp-{serial}");
        self.server.events.open_route(&call_id, progress_token);
        let request = ToolRequest::new(call_id.clone(), name, arguments)
            .session(self.server.session.to_string())
            .approval_ticket(self.approvals.ticket());
        let executor = self.server.executor.clone();
        let events = self.server.events.clone();
        let outbox = self.outbox.clone();
        let in_flight = self.in_flight.clone();
        let running = RunningCalls::start(&self.running);
        // Continued in place by the thread that finishes the work (embedded Python): the
        // trajectory line and the reply are written from there, without waking a worker.
        let call: Call = Box::pin(async move {
            let _running = running;
            // Recorded in the trajectory once the reply is out (or when this returns early).
            let finished = executor.run_unrecorded(request, cancel.clone()).await;
            let info = finished.info();
            // Before the reply: MCP allows no progress notification after it.
            events.close_route(&call_id);
            events.forget_questions(&call_id);
            // Leave the in-flight set before replying: the client may reuse the id as soon as
            // it has read the reply.
            {
                let mut calls = lock(&in_flight);
                if calls.get(&key).is_some_and(|call| call.serial == serial) {
                    calls.remove(&key);
                }
            }
            if cancel.is_cancelled() {
                return;
            }
            outbox.tool_result(&id, &info.result, info.status != CallStatus::Done);
            finished.record();
        });
        // Read by the idle thread: started in place once the input is unlocked.
        let call = STARTED_HERE.with(|started| match started.borrow_mut().as_mut() {
            Some(calls) => {
                calls.push(call);
                None
            }
            None => Some(call),
        });
        if let Some(call) = call {
            toolbox_core::handoff::spawn(call);
        }
    }
}

/// The calls of one connection still running: at the end of input, they finish and answer
/// before the server returns.
#[derive(Default)]
struct RunningCalls {
    count: Mutex<usize>,
    none_left: tokio::sync::Notify,
}

/// One running call; counted until dropped (a call that panics is dropped too).
struct Running(Arc<RunningCalls>);

impl RunningCalls {
    fn start(calls: &Arc<RunningCalls>) -> Running {
        *lock(&calls.count) += 1;
        Running(calls.clone())
    }

    async fn all_finished(&self) {
        loop {
            let notified = self.none_left.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if *lock(&self.count) == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut count = lock(&self.0.count);
        *count -= 1;
        if *count == 0 {
            self.0.none_left.notify_waiters();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The serialised `initialize` result for params [`jsonrpc::check_params`] accepted: the
/// protocol version asked for when this server speaks it, else its newest.
fn initialize_result(params: &Value) -> String {
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| Some(**v) == requested)
        .unwrap_or(&PROTOCOL_VERSIONS[0]);
    json!({
        "protocolVersion": version,
        "capabilities": { "tools": { "listChanged": false }, "logging": {} },
        "serverInfo": { "name": "toolbox", "version": env!("CARGO_PKG_VERSION") },
        "instructions": INSTRUCTIONS,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_result_line_is_the_json_of_the_reply_object() {
        for id in [json!(7), json!("a\"b"), json!(u64::MAX), json!(-3)] {
            for text in [
                "",
                "(no output)\n",
                "tab\t\"quote\" \\ é ✓ \u{1}",
                "[stdout]\nx\n",
            ] {
                for is_error in [false, true] {
                    let line = tool_result_line(&id, text, is_error);
                    assert_eq!(line.last(), Some(&b'\n'));
                    assert!(!line[..line.len() - 1].contains(&b'\n'), "one line");
                    let got: Value = serde_json::from_slice(&line).unwrap();
                    let want = json!({
                        "jsonrpc": "2.0",
                        "id": id,
                        "result": {
                            "content": [{ "type": "text", "text": text }],
                            "isError": is_error,
                        },
                    });
                    assert_eq!(got, want);
                }
            }
        }
    }

    #[test]
    fn protocol_version_is_echoed_when_supported() {
        let version = |requested: &str| {
            let result = initialize_result(&json!({ "protocolVersion": requested }));
            serde_json::from_str::<Value>(&result).unwrap()["protocolVersion"].clone()
        };
        assert_eq!(version("2025-06-18"), "2025-06-18");
        assert_eq!(version("2024-11-05"), "2024-11-05");
        assert_eq!(version("1999-01-01"), PROTOCOL_VERSIONS[0]);
    }
}
