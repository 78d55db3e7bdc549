//! A scripted LLM server for tests: a loopback HTTP/1.1 server that answers each model
//! request with the next reply of its script, in the wire format the request's path asks
//! for, and records every request it gets.
//!
//! - `POST /v1/chat/completions` answers as OpenAI Chat Completions, streamed: text in
//!   several `delta.content` chunks, each tool call's `index`/`id`/`name` first and then its
//!   arguments in pieces, a `finish_reason` (`tool_calls` or `stop`), a usage chunk, and
//!   `data: [DONE]`.
//! - `POST /v1/messages` answers as Anthropic Messages, streamed: `message_start`, one
//!   `content_block_start`/`_delta`/`_stop` group per block (`input_json_delta` in pieces),
//!   `message_delta` with `stop_reason` (`tool_use` or `end_turn`) and usage, `message_stop`.
//! - Anything else is a 404 and uses no reply.
//!
//! Every event is written and flushed on its own, a couple of milliseconds apart, so the
//! client really streams. Every response says `Connection: close`. When the script is used
//! up, requests get a 500 whose message is `scripted LLM: script exhausted`, unless the
//! server was started with a responder ([`ScriptedLlm::start_with`]): then every request the
//! script has no reply for is answered with what the responder makes of it, which lets
//! concurrent sessions each get their own answers (echo a marker from the last user message,
//! call a tool first and answer once the last message is a tool result). A responder runs on
//! the connection's thread, so it may block (wait for the test's go-ahead) without holding up
//! other requests.
//!
//! Only std (and serde_json): one accept thread, one thread per connection, each with 10 s
//! read and write timeouts so a confused client cannot hang a test.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// The prompt tokens every scripted reply reports.
pub const USAGE_INPUT_TOKENS: u64 = 21;
/// The generated tokens every scripted reply reports.
pub const USAGE_OUTPUT_TOKENS: u64 = 8;
/// The message of the 500 sent when the script is used up.
pub const EXHAUSTED: &str = "scripted LLM: script exhausted";

/// How long a connection may sit idle in either direction.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between two streamed events.
const EVENT_GAP: Duration = Duration::from_millis(2);

/// One reply of the script.
#[derive(Debug, Clone, PartialEq)]
pub enum Scripted {
    /// An answer with only text, streamed as several deltas.
    Text(String),
    /// An answer with tool calls, after `text` (which may be empty).
    ToolCalls {
        /// Text before the calls; `""` for none.
        text: String,
        /// `(id, name, arguments)`: the arguments are JSON text sent as is (may be invalid).
        calls: Vec<(String, String, String)>,
    },
    /// An HTTP error reply.
    Status {
        /// The status code.
        code: u16,
        /// A `Retry-After` header, in seconds.
        retry_after: Option<u64>,
        /// The body (sent as `application/json` when it parses as JSON).
        body: String,
    },
    /// A 200 stream whose first event is not JSON.
    Garbage,
}

impl Scripted {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Scripted {
        Scripted::Text(text.into())
    }

    /// An answer with one tool call and no text.
    pub fn call(id: &str, name: &str, arguments: Value) -> Scripted {
        Scripted::calls(vec![(id, name, arguments)])
    }

    /// An answer with several (parallel) tool calls and no text.
    pub fn calls(calls: Vec<(&str, &str, Value)>) -> Scripted {
        Scripted::ToolCalls {
            text: String::new(),
            calls: calls
                .into_iter()
                .map(|(id, name, args)| (id.to_string(), name.to_string(), args.to_string()))
                .collect(),
        }
    }

    /// An HTTP error: `code` with body `{"error":{"message":message}}`.
    pub fn error(code: u16, message: &str) -> Scripted {
        Scripted::Status {
            code,
            retry_after: None,
            body: json!({"error": {"message": message}}).to_string(),
        }
    }

    /// A 429 asking to wait `seconds`.
    pub fn rate_limited(seconds: u64) -> Scripted {
        Scripted::Status {
            code: 429,
            retry_after: Some(seconds),
            body: json!({"error": {"message": "scripted LLM: rate limited"}}).to_string(),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// `POST`, …
    pub method: String,
    /// The path (and query), as sent.
    pub path: String,
    /// The headers, names lower-cased, sorted by name.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; a body that is not JSON is a JSON string, an empty one `null`.
    pub body: Value,
}

impl RecordedRequest {
    /// The value of the header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Makes a reply from a request: see [`ScriptedLlm::start_with`].
pub type Responder = dyn Fn(&RecordedRequest) -> Scripted + Send + Sync;

#[derive(Default)]
struct Shared {
    /// The replies not served yet, and the requests so far: one lock, so the order a
    /// request was recorded in is the order it took its reply.
    state: Mutex<(VecDeque<Scripted>, Vec<RecordedRequest>)>,
    /// Answers what the script has no reply for.
    responder: Option<Arc<Responder>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, (VecDeque<Scripted>, Vec<RecordedRequest>)> {
        // A panicking connection thread must not take the test's view down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A scripted LLM server on 127.0.0.1; see the [module docs](self). It stops accepting when
/// dropped.
pub struct ScriptedLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl ScriptedLlm {
    /// Starts a server on a free port that answers with `script`, in order.
    pub fn start(script: Vec<Scripted>) -> ScriptedLlm {
        Self::launch(script, None)
    }

    /// Starts a server on a free port that answers every model request with
    /// `responder(&request)` (once anything [`push`](Self::push)ed is used up). The request
    /// is recorded before the responder sees it. The responder runs on the connection's own
    /// thread, outside every lock: concurrent requests are answered concurrently, and a
    /// responder may block, e.g. until the test lets the "model" answer.
    pub fn start_with(
        responder: impl Fn(&RecordedRequest) -> Scripted + Send + Sync + 'static,
    ) -> ScriptedLlm {
        Self::launch(Vec::new(), Some(Arc::new(responder)))
    }

    fn launch(script: Vec<Scripted>, responder: Option<Arc<Responder>>) -> ScriptedLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("the listener's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            responder,
        });
        shared.lock().0.extend(script);
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) => {
                            let shared = shared.clone();
                            std::thread::spawn(move || serve(stream, &shared));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
        };
        ScriptedLlm {
            addr,
            shared,
            stop,
            accept: Some(accept),
        }
    }

    /// Appends `reply` to the script.
    pub fn push(&self, reply: Scripted) {
        self.shared.lock().0.push_back(reply);
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `base_url` for an OpenAI client: `http://127.0.0.1:PORT/v1`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The `base_url` for an Anthropic client: `http://127.0.0.1:PORT`.
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in the order they arrived.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().1.clone()
    }

    /// How many scripted replies have not been served yet.
    pub fn remaining(&self) -> usize {
        self.shared.lock().0.len()
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

#[derive(Clone, Copy)]
enum Wire {
    OpenAi,
    Anthropic,
}

/// Answers one connection: one request, one response, then close.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let Some(request) = crate::http::read_request(&mut stream) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let path = request.path();
    let wire = match (request.method.as_str(), path.as_str()) {
        ("POST", "/v1/chat/completions") => Some(Wire::OpenAi),
        ("POST", "/v1/messages") => Some(Wire::Anthropic),
        _ => None,
    };
    let body = if request.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&request.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&request.body).into()))
    };
    let mut headers: Vec<(String, String)> = request.headers.into_iter().collect();
    headers.sort();
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    let recorded = RecordedRequest {
        method: request.method,
        path: request.target,
        headers,
        body,
    };
    let scripted = {
        let mut state = shared.lock();
        state.1.push(recorded.clone());
        wire.and_then(|_| state.0.pop_front())
    };
    // Outside the lock: a responder may take its time without holding up other requests.
    let reply = match (wire, scripted, &shared.responder) {
        (Some(_), None, Some(responder)) => Some(responder(&recorded)),
        (_, scripted, _) => scripted,
    };
    let _ = match (wire, reply) {
        (Some(wire), Some(reply)) => answer(&mut stream, wire, &model, reply),
        (Some(_), _) => send_status(
            &mut stream,
            500,
            None,
            &json!({"error": {"message": EXHAUSTED}}).to_string(),
        ),
        (None, _) => send_status(
            &mut stream,
            404,
            None,
            &json!({"error": {"message": format!("scripted LLM: no route for {path}")}})
                .to_string(),
        ),
    };
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Status",
    }
}

fn send_status(
    stream: &mut TcpStream,
    code: u16,
    retry_after: Option<u64>,
    body: &str,
) -> std::io::Result<()> {
    let content_type = if serde_json::from_str::<Value>(body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    if let Some(seconds) = retry_after {
        head.push_str(&format!("Retry-After: {seconds}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

/// Writes one SSE event, flushes it, and pauses.
fn send_event(stream: &mut TcpStream, event: Option<&str>, data: &str) -> std::io::Result<()> {
    let mut text = String::new();
    if let Some(event) = event {
        text.push_str(&format!("event: {event}\n"));
    }
    text.push_str(&format!("data: {data}\n\n"));
    stream.write_all(text.as_bytes())?;
    stream.flush()?;
    std::thread::sleep(EVENT_GAP);
    Ok(())
}

fn answer(stream: &mut TcpStream, wire: Wire, model: &str, reply: Scripted) -> std::io::Result<()> {
    let (text, calls) = match reply {
        Scripted::Status {
            code,
            retry_after,
            body,
        } => return send_status(stream, code, retry_after, &body),
        Scripted::Text(text) => (text, Vec::new()),
        Scripted::ToolCalls { text, calls } => (text, calls),
        Scripted::Garbage => {
            stream.write_all(stream_head().as_bytes())?;
            let event = match wire {
                Wire::OpenAi => None,
                Wire::Anthropic => Some("message_start"),
            };
            return send_event(stream, event, "this is {not JSON");
        }
    };
    stream.write_all(stream_head().as_bytes())?;
    stream.flush()?;
    match wire {
        Wire::OpenAi => stream_openai(stream, model, &text, &calls),
        Wire::Anthropic => stream_anthropic(stream, model, &text, &calls),
    }
}

fn stream_head() -> String {
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n"
        .to_string()
}

/// `text` in up to three pieces of whole characters (two or more when it has two or more
/// characters); nothing for the empty string.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    chars
        .chunks(chars.len().div_ceil(3))
        .map(|c| c.iter().collect())
        .collect()
}

fn stream_openai(
    stream: &mut TcpStream,
    model: &str,
    text: &str,
    calls: &[(String, String, String)],
) -> std::io::Result<()> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
        .to_string()
    };
    send_event(
        stream,
        None,
        &chunk(json!({"role": "assistant", "content": ""}), Value::Null),
    )?;
    for piece in pieces(text) {
        send_event(stream, None, &chunk(json!({"content": piece}), Value::Null))?;
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        let start = json!({"tool_calls": [{
            "index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""},
        }]});
        send_event(stream, None, &chunk(start, Value::Null))?;
        for piece in pieces(arguments) {
            let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            send_event(stream, None, &chunk(delta, Value::Null))?;
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    send_event(stream, None, &chunk(json!({}), json!(finish)))?;
    let usage = json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [],
        "usage": {
            "prompt_tokens": USAGE_INPUT_TOKENS,
            "completion_tokens": USAGE_OUTPUT_TOKENS,
            "total_tokens": USAGE_INPUT_TOKENS + USAGE_OUTPUT_TOKENS,
        },
    });
    send_event(stream, None, &usage.to_string())?;
    send_event(stream, None, "[DONE]")
}

fn stream_anthropic(
    stream: &mut TcpStream,
    model: &str,
    text: &str,
    calls: &[(String, String, String)],
) -> std::io::Result<()> {
    let mut event = |value: Value| {
        let name = value["type"].as_str().unwrap_or("unknown").to_string();
        send_event(stream, Some(&name), &value.to_string())
    };
    event(json!({
        "type": "message_start",
        "message": {
            "id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": USAGE_INPUT_TOKENS, "output_tokens": 1},
        },
    }))?;
    event(json!({"type": "ping"}))?;
    let mut index = 0;
    if !text.is_empty() {
        event(json!({
            "type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""},
        }))?;
        for piece in pieces(text) {
            event(json!({
                "type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece},
            }))?;
        }
        event(json!({"type": "content_block_stop", "index": index}))?;
        index += 1;
    }
    for (id, name, arguments) in calls {
        event(json!({
            "type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
        }))?;
        for piece in pieces(arguments) {
            event(json!({
                "type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }))?;
        }
        event(json!({"type": "content_block_stop", "index": index}))?;
        index += 1;
    }
    let stop = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    event(json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": {"output_tokens": USAGE_OUTPUT_TOKENS},
    }))?;
    event(json!({"type": "message_stop"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_split_text_in_two_or_more() {
        assert_eq!(pieces(""), Vec::<String>::new());
        assert_eq!(pieces("a"), ["a"]);
        assert_eq!(pieces("ab"), ["a", "b"]);
        assert_eq!(pieces("abc"), ["a", "b", "c"]);
        assert_eq!(pieces("abcdefg"), ["abc", "def", "g"]);
        assert_eq!(pieces("héé"), ["h", "é", "é"]);
        assert_eq!(pieces("abcdefg").concat(), "abcdefg");
    }
}
