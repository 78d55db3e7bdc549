//! Helpers for the `toolbox serve` tests (`mod serve_common;` beside `mod common;`): the real
//! binary started on 127.0.0.1 with a port of its own choosing, a small blocking HTTP/1.1
//! client over std::net (raw paths such as `..` and `a%2Fb` reach the server unchanged, and
//! any `Host` or `Origin` can be sent), and an SSE reader on a thread of its own so every
//! wait has a bound.

// Each test file uses some of these helpers, never all.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_tests::scripted_llm::{RecordedRequest, ScriptedLlm};

use crate::common;

/// How long the server may take to say it listens (a cold binary on a loaded machine).
pub const START_LIMIT: Duration = Duration::from_secs(60);
/// How long one HTTP read may stall before the test gives up on the server.
pub const IO_LIMIT: Duration = Duration::from_secs(30);
/// The longest a test waits for an event it expects (a hang detector, not a measurement).
pub const EVENT_LIMIT: Duration = Duration::from_secs(60);

/// A token long enough for `--token` (16 characters or more).
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// `toolbox serve` in `ws` on `127.0.0.1:0`, talking to `llm` (OpenAI wire) when given,
/// with `extra` arguments (`--mode full`, `--token …`). The command is returned unstarted
/// so a test can add variables.
pub fn serve_command(ws: &Path, llm: Option<&ScriptedLlm>, extra: &[&str]) -> Command {
    let mut cmd = common::toolbox(ws);
    if let Some(llm) = llm {
        cmd.env("TOOLBOX_LLM_PROVIDER", "openai")
            .env("TOOLBOX_LLM_BASE_URL", llm.openai_base_url())
            .env("TOOLBOX_LLM_MODEL", "scripted-model")
            .env("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY")
            .env("SCRIPTED_KEY", "sk-scripted-serve");
    }
    cmd.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
    cmd
}

/// The `file://` URL of a state store kept in the folder `store`.
pub fn file_store(store: &Path) -> String {
    format!("file://{}", store.display())
}

/// The arguments of `toolbox serve` as the session server of one session: `--mode full`,
/// the session `sid`, its `epoch` (a number, or `next`), the state store at `store_url`, and
/// `--sync-every` when given.
pub fn session_server_args(
    sid: &str,
    epoch: impl ToString,
    store_url: &str,
    every: Option<&str>,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--mode",
        "full",
        "--session",
        sid,
        "--epoch",
        &epoch.to_string(),
        "--state-store",
        store_url,
    ]
    .map(String::from)
    .into();
    if let Some(every) = every {
        args.extend(["--sync-every".to_string(), every.to_string()]);
    }
    args
}

/// [`serve_command`] as the session server of session `sid` at `epoch` (see
/// [`session_server_args`]), in `ws`, which is made when missing. Unstarted, so a test can add
/// variables.
pub fn session_server_command(
    ws: &Path,
    llm: Option<&ScriptedLlm>,
    sid: &str,
    epoch: impl ToString,
    store_url: &str,
    every: Option<&str>,
) -> Command {
    std::fs::create_dir_all(ws).unwrap();
    let mut cmd = serve_command(ws, llm, &[]);
    cmd.args(session_server_args(sid, epoch, store_url, every));
    cmd
}

/// Polls (every 50 ms, at most [`EVENT_LIMIT`]) until `done` holds.
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + EVENT_LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `toolbox serve`; killed (and reaped) when dropped.
pub struct Server {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// The workspace it serves.
    pub ws: PathBuf,
    /// The bearer token every request carries, when set.
    pub token: Option<String>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `toolbox serve` in `ws` (see [`serve_command`]) and waits for its
    /// `listening on http://` line.
    pub fn start(ws: &Path, llm: Option<&ScriptedLlm>, extra: &[&str]) -> Server {
        Self::spawn(serve_command(ws, llm, extra), ws)
    }

    /// Starts `cmd` (a [`serve_command`]) and waits for its `listening on http://` line.
    /// The server picks its own port (`--listen 127.0.0.1:0`) and says which, so two tests
    /// never race for one; a start that fails anyway is retried twice.
    pub fn spawn(mut cmd: Command, ws: &Path) -> Server {
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let mut failures = Vec::new();
        for _ in 0..3 {
            let mut child = cmd.spawn().expect("start toolbox serve");
            let stderr = Arc::new(Mutex::new(String::new()));
            let lines = collect_lines(child.stderr.take().unwrap(), stderr.clone());
            match wait_for_listening(&lines) {
                Some(addr) => {
                    return Server {
                        child: Some(child),
                        addr,
                        ws: ws.to_path_buf(),
                        token: None,
                        stderr,
                    };
                }
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    failures.push(stderr.lock().unwrap().clone());
                }
            }
        }
        panic!("toolbox serve did not start: {failures:#?}");
    }

    /// Every request from now on carries `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Server {
        self.token = Some(token.to_string());
        self
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `host:port`, the right `Host` header.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// A request with the usual headers (Host, the token when set).
    pub fn req(&self, method: &str, path: &str) -> Req {
        let mut req = Req::new(self.addr, method, path);
        req.headers.push(("Host".into(), self.host()));
        if let Some(token) = &self.token {
            req.headers
                .push(("Authorization".into(), format!("Bearer {token}")));
        }
        req
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Response {
        self.req("GET", path).send()
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.req("POST", path).json(body).send()
    }

    /// `POST /api/sessions/{sid}/turns` with `body`; the response must be 202. Returns the
    /// turn id.
    pub fn start_turn(&self, sid: &str, body: Value) -> String {
        let r = self.post(&format!("/api/sessions/{sid}/turns"), &body);
        assert_eq!(r.status, 202, "{}", r.text());
        r.json()["turn_id"].as_str().unwrap().to_string()
    }

    /// `POST /api/sessions/{sid}/tools/{tool}` with `args`: the response must be 200 and the
    /// call `done`. Returns the body.
    pub fn call_done(&self, sid: &str, tool: &str, args: Value) -> Value {
        let r = self.post(&format!("/api/sessions/{sid}/tools/{tool}"), &args);
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.json();
        assert_eq!(body["status"], "done", "{body}");
        body
    }

    /// Subscribes to a session's events, after `last_event_id` when given.
    pub fn events(&self, sid: &str, last_event_id: Option<u64>) -> Sse {
        let mut req = self.req("GET", &format!("/api/sessions/{sid}/events"));
        req.headers
            .push(("Accept".into(), "text/event-stream".into()));
        if let Some(id) = last_event_id {
            req.headers.push(("Last-Event-ID".into(), id.to_string()));
        }
        Sse::open(req)
    }

    /// Whether `sid` has a turn running, per `GET /api/sessions`.
    pub fn running(&self, sid: &str) -> bool {
        let r = self.get("/api/sessions");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == sid && s["running"] == true)
    }

    /// Polls until `sid` has no turn running (at most [`EVENT_LIMIT`]).
    pub fn wait_not_running(&self, sid: &str) {
        let deadline = Instant::now() + EVENT_LIMIT;
        while self.running(sid) {
            assert!(
                Instant::now() < deadline,
                "session {sid} still running after {EVENT_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends `signal` to the server.
    pub fn signal(&self, signal: i32) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal})");
    }

    /// Waits (at most `limit`) for the server to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Reads `stream` line by line into `all` and a channel, on a thread of its own.
fn collect_lines(stream: impl Read + Send + 'static, all: Arc<Mutex<String>>) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            {
                let mut all = all.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
            let _ = tx.send(line);
        }
    });
    rx
}

/// The address of the `listening on http://ADDR` line, or `None` if the process ended (or
/// said nothing of the kind within [`START_LIMIT`]).
fn wait_for_listening(lines: &Receiver<String>) -> Option<SocketAddr> {
    let deadline = Instant::now() + START_LIMIT;
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let line = lines.recv_timeout(left).ok()?;
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let addr = rest.split_whitespace().next()?;
            return addr.parse().ok();
        }
    }
}

/// One HTTP request, built up and then sent on a connection of its own.
pub struct Req {
    addr: SocketAddr,
    method: String,
    path: String,
    /// The headers, in order. `Host` is whatever the caller put here (none at all is sent
    /// when it is missing).
    pub headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Req {
    /// A request for `path`, sent exactly as given (no normalisation).
    pub fn new(addr: SocketAddr, method: &str, path: &str) -> Req {
        Req {
            addr,
            method: method.into(),
            path: path.into(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Sets (replaces) a header.
    pub fn header(mut self, name: &str, value: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Drops a header.
    pub fn without(mut self, name: &str) -> Req {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self
    }

    /// A JSON body.
    pub fn json(self, body: &Value) -> Req {
        self.body(body.to_string().into_bytes())
            .header("Content-Type", "application/json")
    }

    /// A raw body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Req {
        self.body = body.into();
        self
    }

    fn head(&self) -> String {
        let mut head = format!("{} {} HTTP/1.1\r\n", self.method, self.path);
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if !self.body.is_empty() || self.method == "POST" {
            head.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        head.push_str("Connection: close\r\n\r\n");
        head
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect to toolbox serve");
        stream.set_read_timeout(Some(IO_LIMIT)).unwrap();
        stream.set_write_timeout(Some(IO_LIMIT)).unwrap();
        stream
    }

    /// Sends the request and reads only the response's status and headers (for a response
    /// that may be a stream that never ends).
    pub fn send_head(self) -> Response {
        let mut stream = self.connect();
        stream.write_all(self.head().as_bytes()).unwrap();
        stream.write_all(&self.body).unwrap();
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader)
            .unwrap_or_else(|e| panic!("{} {}: no response head: {e}", self.method, self.path));
        let _ = reader.get_ref().shutdown(Shutdown::Both);
        Response {
            status,
            headers,
            body: Vec::new(),
        }
    }

    /// Sends the request and reads the whole response. The body is written on another
    /// thread while the response is read, so a server that answers before reading it all
    /// (413) is still heard.
    pub fn send(self) -> Response {
        let mut stream = self.connect();
        stream.write_all(self.head().as_bytes()).unwrap();
        let writer = if self.body.is_empty() {
            None
        } else {
            let mut out = stream.try_clone().unwrap();
            let body = self.body;
            Some(std::thread::spawn(move || {
                let _ = out.write_all(&body);
            }))
        };
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader)
            .unwrap_or_else(|e| panic!("{} {}: no response head: {e}", self.method, self.path));
        let body = read_body(&mut reader, &headers)
            .unwrap_or_else(|e| panic!("{} {}: cannot read the body: {e}", self.method, self.path));
        // The server answered: stop writing whatever is left, so the writer ends.
        let _ = reader.get_ref().shutdown(Shutdown::Both);
        if let Some(writer) = writer {
            let _ = writer.join();
        }
        Response {
            status,
            headers,
            body,
        }
    }
}

/// A response: status, headers (names lower-cased), body.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (panics, showing it, when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts this is an API error: `status`, a JSON body `{"error": "..."}` containing
    /// `want` (case-insensitive). Returns the message.
    pub fn assert_error(&self, status: u16, want: &str) -> String {
        assert_eq!(self.status, status, "{}", self.text());
        assert!(
            self.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "an error is JSON: {:?} {}",
            self.headers,
            self.text()
        );
        let body = self.json();
        let message = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message: {body}"))
            .to_string();
        assert!(
            message.to_lowercase().contains(&want.to_lowercase()),
            "expected {want:?} in {message:?}"
        );
        message
    }
}

fn read_head(reader: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("the head was cut short"));
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status, headers));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
}

fn is_chunked(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"))
}

fn read_body(reader: &mut impl BufRead, headers: &[(String, String)]) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    if is_chunked(headers) {
        while let Some(chunk) = read_chunk(reader)? {
            body.extend(chunk);
        }
    } else if let Some(len) = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(body)
}

/// One chunk of a chunked body; `None` at the last (empty) one.
fn read_chunk(reader: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut size = String::new();
    if reader.read_line(&mut size)? == 0 {
        return Ok(None);
    }
    let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
        .map_err(|e| std::io::Error::other(format!("bad chunk size {size:?}: {e}")))?;
    if size == 0 {
        return Ok(None);
    }
    let mut chunk = vec![0; size + 2];
    reader.read_exact(&mut chunk)?;
    chunk.truncate(size);
    Ok(Some(chunk))
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct Event {
    /// Its `id:` (the event's `seq`).
    pub id: u64,
    /// Its `data:` as JSON.
    pub data: Value,
}

/// The `tool_call_finished` of call `id` among `events` (panics naming the call when none).
#[allow(dead_code)]
pub fn finished<'a>(events: &'a [Event], id: &str) -> &'a Value {
    &events
        .iter()
        .find(|e| e.kind() == "tool_call_finished" && e.data["id"] == id)
        .unwrap_or_else(|| panic!("no tool_call_finished for {id}"))
        .data
}

impl Event {
    /// The event's `type`.
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

/// An open SSE stream, read on a thread of its own.
pub struct Sse {
    /// The response's status and headers (the body is the stream).
    pub status: u16,
    pub headers: Vec<(String, String)>,
    events: Receiver<Event>,
    stream: TcpStream,
}

impl Sse {
    /// Sends `req` (a GET of an events URL) and reads its events on a thread of its own.
    pub fn open(req: Req) -> Sse {
        let mut stream = req.connect();
        // No read timeout on the reader thread: it ends when the server closes the stream or
        // the test drops it (shutdown); every wait on the test's side has its own bound.
        stream.set_read_timeout(None).unwrap();
        stream.write_all(req.head().as_bytes()).unwrap();
        let keep = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader).expect("the events response head");
        let (tx, events) = std::sync::mpsc::channel();
        let chunked = is_chunked(&headers);
        if status == 200 {
            std::thread::spawn(move || {
                let mut text = String::new();
                let mut id = None;
                let mut data = String::new();
                loop {
                    let piece = if chunked {
                        match read_chunk(&mut reader) {
                            Ok(Some(chunk)) => chunk,
                            _ => return,
                        }
                    } else {
                        let mut buf = vec![0; 8192];
                        match reader.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                buf.truncate(n);
                                buf
                            }
                        }
                    };
                    text.push_str(&String::from_utf8_lossy(&piece));
                    while let Some(end) = text.find('\n') {
                        let line: String = text.drain(..=end).collect();
                        let line = line.trim_end_matches(['\n', '\r']);
                        if line.is_empty() {
                            if let (Some(seq), false) = (id.take(), data.is_empty()) {
                                let value = serde_json::from_str(&data).unwrap_or_else(|e| {
                                    panic!("event data is not JSON ({e}): {data}")
                                });
                                if tx
                                    .send(Event {
                                        id: seq,
                                        data: value,
                                    })
                                    .is_err()
                                {
                                    return;
                                }
                            }
                            data.clear();
                        } else if let Some(v) = line.strip_prefix("id:") {
                            // `seq`, or `epoch:seq` from a session server (`--session`).
                            id = v.trim().rsplit(':').next().and_then(|s| s.parse().ok());
                        } else if let Some(v) = line.strip_prefix("data:") {
                            if !data.is_empty() {
                                data.push('\n');
                            }
                            data.push_str(v.strip_prefix(' ').unwrap_or(v));
                        }
                        // Comments (keep-alives) and other fields are ignored.
                    }
                }
            });
        }
        Sse {
            status,
            headers,
            events,
            stream: keep,
        }
    }

    /// The next event, waiting at most `limit`; `None` on timeout or when the stream ended.
    pub fn next_within(&self, limit: Duration) -> Option<Event> {
        self.events.recv_timeout(limit).ok()
    }

    /// The next event; panics after [`EVENT_LIMIT`] or when the stream ends.
    pub fn next(&self) -> Event {
        match self.events.recv_timeout(EVENT_LIMIT) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) => panic!("no event within {EVENT_LIMIT:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("the event stream ended"),
        }
    }

    /// Whether the stream ended (the server closed it) within `limit`, rather than sending
    /// another event or staying open. Events still queued are skipped.
    pub fn ends_within(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => return true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    /// Events up to and including the first whose `type` is `kind`.
    pub fn until(&self, kind: &str) -> Vec<Event> {
        let mut out = Vec::new();
        for _ in 0..100_000 {
            let event = self.next();
            let done = event.kind() == kind;
            out.push(event);
            if done {
                return out;
            }
        }
        panic!("no {kind} in 100000 events")
    }

    /// Closes the connection from this side, as a client that goes away.
    pub fn disconnect(self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

impl Drop for Sse {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// The messages of an OpenAI-style request the scripted LLM recorded.
pub fn request_messages(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The content of the first user message of a recorded request.
pub fn first_user_text(request: &RecordedRequest) -> String {
    request_messages(request)
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The content of the last user message of a recorded request.
pub fn last_user_text(request: &RecordedRequest) -> String {
    request_messages(request)
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Whether the last message of a recorded request is a tool result.
pub fn ends_with_tool_result(request: &RecordedRequest) -> bool {
    request_messages(request)
        .last()
        .is_some_and(|m| m["role"] == "tool")
}

/// Asserts `events` are numbered `from, from+1, …` with no gap, all for session `sid`.
pub fn assert_seq_from(events: &[Event], from: u64, sid: &str) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event.id,
            from + i as u64,
            "event {i} of {sid}: {:?}",
            events.iter().map(|e| e.id).collect::<Vec<_>>()
        );
        assert_eq!(event.data["seq"], json!(event.id), "{:?}", event.data);
        assert_eq!(event.data["session_id"], sid, "{:?}", event.data);
    }
}
