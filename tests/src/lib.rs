//! Helpers shared by the integration tests in `tests/tests/`: an executor over a fresh
//! workspace, one call in a session, and the usual "this worked" / "this failed saying …"
//! checks. A test file still says `use toolbox as _;` so the providers are linked in.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod lsp;
pub mod scripted_llm;

use std::path::{Path, PathBuf};

use serde_json::Value;
use tempfile::TempDir;
use toolbox_executor::{
    CallStatus, ErrorKind, ExecutorConfig, PermissionMode, ToolCallInfo, ToolExecutor, ToolRequest,
};
use toolbox_host::EventSink;

/// The session [`call`] runs in.
pub const SESSION: &str = "s1";

/// An executor in `mode` over a fresh workspace and every linked provider.
pub fn executor(mode: PermissionMode) -> (TempDir, ToolExecutor) {
    executor_with(mode, &[])
}

/// Like [`executor`], with provider tables set as the operator would: `[("web", json!({…}))]`.
/// A `null` table is left out.
pub fn executor_with(mode: PermissionMode, tables: &[(&str, Value)]) -> (TempDir, ToolExecutor) {
    executor_with_events(mode, tables, EventSink::none())
}

/// Like [`executor_with`], delivering streamed output and approval requests to `events`.
pub fn executor_with_events(
    mode: PermissionMode,
    tables: &[(&str, Value)],
    events: EventSink,
) -> (TempDir, ToolExecutor) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = mode;
    for (name, table) in tables {
        if !table.is_null() {
            config.providers.insert(name.to_string(), table.clone());
        }
    }
    (dir, ToolExecutor::with_events(config, events).unwrap())
}

/// Like [`executor`], with `toml` applied as an operator's config file.
pub fn executor_toml(mode: PermissionMode, toml: &str) -> (TempDir, ToolExecutor) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = mode;
    config.apply_toml(toml).unwrap();
    (dir, ToolExecutor::new(config).unwrap())
}

/// An executor in `mode` over an existing workspace (toolbox started again on it).
pub fn executor_in(root: &Path, mode: PermissionMode) -> ToolExecutor {
    let mut config = ExecutorConfig::new(root);
    config.permissions.mode = mode;
    ToolExecutor::new(config).unwrap()
}

/// Runs `name` with `args` in the session [`SESSION`], call id `t`.
pub async fn call(exec: &ToolExecutor, name: &str, args: Value) -> ToolCallInfo {
    call_in(exec, SESSION, name, args).await
}

/// Runs `name` with `args` in `session`, call id `t`.
pub async fn call_in(exec: &ToolExecutor, session: &str, name: &str, args: Value) -> ToolCallInfo {
    exec.run(ToolRequest::new("t", name, args).session(session))
        .await
}

/// Runs a call that must succeed and returns its result.
pub async fn ok(exec: &ToolExecutor, name: &str, args: Value) -> String {
    let info = call(exec, name, args.clone()).await;
    assert_eq!(
        info.status,
        CallStatus::Done,
        "{name} {args}: {}",
        info.result
    );
    info.result
}

/// Runs a call the tool itself must refuse with a message containing `want`, and returns
/// the message.
pub async fn fails(exec: &ToolExecutor, name: &str, args: Value, want: &str) -> String {
    assert_error(&call(exec, name, args).await, ErrorKind::Tool, &[want])
}

/// Something that may have failed, as the tests see it: a call's [`ToolCallInfo`], a
/// `Result`, a JSON envelope `{"status": …, "result": …}` (the HTTP API's, `toolbox
/// call`'s, the one the model gets back), a `tool_call_finished` event of `toolbox serve`'s
/// stream (`{"status": …, "result_preview": …}`), or an MCP tool result read as
/// `(is_error, text)`.
pub trait Outcome {
    /// The error's message when it failed; else what it gave instead, for the panic.
    fn error_message(self) -> Result<String, String>;

    /// What it was, for a panic's message (a call's tool and arguments).
    fn label(&self) -> String {
        String::new()
    }
}

impl Outcome for &ToolCallInfo {
    fn label(&self) -> String {
        format!("{} {}: ", self.tool, self.arguments)
    }

    fn error_message(self) -> Result<String, String> {
        match self.status {
            CallStatus::Error => Ok(self.result.clone()),
            _ => Err(format!("{:?}: {}", self.status, self.result)),
        }
    }
}

impl<T, E: std::fmt::Display> Outcome for Result<T, E> {
    fn error_message(self) -> Result<String, String> {
        match self {
            Err(e) => Ok(e.to_string()),
            Ok(_) => Err(format!("Ok(<{}>)", std::any::type_name::<T>())),
        }
    }
}

/// The message is the `result`; where there is none (an event), the `result_preview`.
impl Outcome for &Value {
    /// The call's tool and id, where the JSON names them.
    fn label(&self) -> String {
        let id = self.get("id").or_else(|| self.get("call_id"));
        match (self["tool"].as_str(), id.and_then(Value::as_str)) {
            (Some(tool), Some(id)) => format!("{tool} {id}: "),
            (Some(name), None) | (None, Some(name)) => format!("{name}: "),
            (None, None) => String::new(),
        }
    }

    fn error_message(self) -> Result<String, String> {
        let message = self.get("result").or_else(|| self.get("result_preview"));
        match (self["status"].as_str(), message.and_then(Value::as_str)) {
            (Some("error"), Some(message)) => Ok(message.to_string()),
            _ => Err(self.to_string()),
        }
    }
}

impl Outcome for (bool, String) {
    fn error_message(self) -> Result<String, String> {
        match self {
            (true, text) => Ok(text),
            (false, text) => Err(format!("not an error: {text}")),
        }
    }
}

/// Asserts that `outcome` failed with a message containing each of `needles`, and returns
/// the message.
#[track_caller]
pub fn assert_err_contains(outcome: impl Outcome, needles: &[&str]) -> String {
    let label = outcome.label();
    let message = match outcome.error_message() {
        Ok(message) => message,
        Err(instead) => panic!("{label}expected an error containing {needles:?}, got {instead}"),
    };
    for needle in needles {
        assert!(
            message.contains(needle),
            "{label}expected {needle:?} in the error: {message}"
        );
    }
    message
}

/// Asserts that the call `info` ended `error` of `kind`, with a message containing each of
/// `needles`, and returns the message.
#[track_caller]
pub fn assert_error(info: &ToolCallInfo, kind: ErrorKind, needles: &[&str]) -> String {
    let message = assert_err_contains(info, needles);
    assert_eq!(info.error_kind, Some(kind), "{}{message}", info.label());
    message
}

/// [`assert_error`] for a call the test saw as JSON with its `error_kind`: the HTTP API's
/// reply to one tool call, or a `tool_call_finished` event (whose message is its
/// `result_preview`). Asserts it ended `error` of `kind`, with a message containing each of
/// `needles`, and returns the message.
#[track_caller]
pub fn assert_json_error(call: &Value, kind: ErrorKind, needles: &[&str]) -> String {
    let message = assert_err_contains(call, needles);
    let kind = serde_json::to_value(kind).expect("an ErrorKind is a string");
    assert_eq!(call["error_kind"], kind, "{}{message}", call.label());
    message
}

/// [`assert_err_contains`] for a `Result` whose error also says what kind of failure it is
/// (an `LlmError`'s `kind`, say): `kind_of` reads the kind, which must be `kind`. Returns
/// the error, for the test to look at further.
#[track_caller]
pub fn assert_err_kind<T, E, K>(
    result: Result<T, E>,
    kind_of: impl FnOnce(&E) -> K,
    kind: K,
    needles: &[&str],
) -> E
where
    E: std::fmt::Display,
    K: PartialEq + std::fmt::Debug,
{
    let message = assert_err_contains(result.as_ref(), needles);
    let Err(error) = result else {
        unreachable!("assert_err_contains passed, so it is an error")
    };
    assert_eq!(kind_of(&error), kind, "{message}");
    error
}

/// The test venv's python (scripts/test.sh exports `TOOLBOX_TEST_PYTHON`); it has the
/// packages of `tests/requirements.txt`.
pub fn test_python() -> PathBuf {
    let python = std::env::var_os("TOOLBOX_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python")
        });
    assert!(
        python.is_file(),
        "these tests need the test venv with tests/requirements.txt: run scripts/test.sh or set TOOLBOX_TEST_PYTHON (looked at {})",
        python.display()
    );
    python
}

/// Swaps `a` and `b` atomically (`renameat2` with `RENAME_EXCHANGE`): for races that swap a
/// folder for a link while tools work in it. False when the swap failed.
pub fn exchange(a: &Path, b: &Path) -> bool {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok()
}

/// Writes `bytes` at `root/rel`, creating the folders above it, and returns the path.
pub fn write_file(root: &Path, rel: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A skill folder `root/<folder>` whose SKILL.md has frontmatter `name` and `description`
/// and the instructions `body`. Returns the folder.
pub fn write_skill(
    root: &Path,
    folder: &str,
    name: &str,
    description: &str,
    body: &str,
) -> PathBuf {
    let text = format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n");
    write_file(root, &format!("{folder}/SKILL.md"), text);
    root.join(folder)
}

/// The request side of the tiny loopback HTTP/1.1 servers the web and image tests run.
pub mod http {
    use std::collections::HashMap;
    use std::io::Read;
    use std::net::TcpStream;
    use std::time::Duration;

    /// One request as the test server saw it.
    #[derive(Debug, Clone)]
    pub struct Request {
        /// `GET`, `POST` and so on.
        pub method: String,
        /// Path and query, as sent.
        pub target: String,
        /// Lower-case names.
        pub headers: HashMap<String, String>,
        /// The bytes after the head, read until there are `content-length` of them.
        pub body: Vec<u8>,
    }

    impl Request {
        /// The decoded query parameters.
        pub fn query(&self) -> HashMap<String, String> {
            let query = self.target.split_once('?').map(|(_, q)| q).unwrap_or("");
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect()
        }

        /// The target without its query.
        pub fn path(&self) -> String {
            self.target.split('?').next().unwrap_or("").to_string()
        }
    }

    /// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte.
    pub fn percent_decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 3 <= bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                    i += 2;
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Reads one request (head and a Content-Length body) with a 5 s read timeout; `None`
    /// when the peer goes away first or the head passes 1 MiB.
    pub fn read_request(stream: &mut TcpStream) -> Option<Request> {
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.len() > 1 << 20 {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_string();
        let target = first.next().unwrap_or("").to_string();
        let headers: HashMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = buf[head_end + 4..].to_vec();
        while body.len() < len {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        Some(Request {
            method,
            target,
            headers,
            body,
        })
    }
}
