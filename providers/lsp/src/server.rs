//! One running language server: the child process, its reader thread, requests with
//! bounded waits, and what it told us (diagnostics, indexing progress).
//!
//! The child lives in toolbox's containment (`containment::ensure()` runs before the
//! spawn): it is in toolbox's cgroup, or, in subreaper mode, its session is registered with
//! the janitor, so no server outlives toolbox even after SIGKILL. It runs in a session of its
//! own, under the operator's `[limits]` (memory and processes; CPU time would kill a server
//! that lives across calls), and in toolbox's one sandbox (`toolbox_host::sandbox`, rules of
//! [`SandboxRules::language_server`]): it reads the workspace (never writes it), the system's
//! folders and its own installation; it writes only a private folder, its `$HOME` and
//! `$TMPDIR`; `/tmp` and `/run` are empty for it; no network unless `[lsp] allow_network`.
//! Starting a server is running code from the workspace's point of view (clangd reads what a
//! repository's `#include` names), so what it can read is what a read tool could show.
//!
//! Messages are read by a plain thread, so a request can be awaited on any runtime (the
//! approval preview of a rename computes its edit on a runtime of its own).

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use toolbox_host::limits::{Limits, PreparedLimits};
use toolbox_host::sandbox::{self, ChildSetup, PreparedSandbox, SandboxRules, Signal};
use toolbox_host::CancellationToken;

use crate::config::{find_program, ServerSpec};
use crate::rpc;

/// How a request failed.
#[derive(Debug)]
pub enum ReqError {
    /// The server exited or broke its stream; the text says how.
    Crashed(String),
    /// No answer within the bound.
    Timeout(Duration),
    /// The server answered with an error.
    Rpc(String),
    /// The call was cancelled.
    Cancelled,
}

type Reply = std::result::Result<Value, ReqError>;

/// Diagnostics the server published for one document.
#[derive(Debug, Clone, Default)]
pub struct Published {
    /// The diagnostics, as the server sent them.
    pub items: Vec<Value>,
    /// A counter over all publications, to tell a fresh one from an old one.
    pub seq: u64,
    /// When it arrived.
    pub at: Option<Instant>,
}

/// What the reader thread shares with callers.
struct Shared {
    name: String,
    stdin: Mutex<Option<ChildStdin>>,
    pending: Mutex<HashMap<i64, oneshot::Sender<Reply>>>,
    diagnostics: Mutex<HashMap<String, Published>>,
    seq: AtomicU64,
    progress: Mutex<HashSet<String>>,
    progress_seen: AtomicU64,
    dead: Mutex<Option<String>>,
    stderr: Mutex<VecDeque<String>>,
    settings: Option<Value>,
    root_uri: String,
}

/// A document as the server last saw it.
#[derive(Debug, Clone)]
pub struct OpenDoc {
    /// The version sent with it.
    pub version: i64,
    /// Its text.
    pub text: String,
}

/// A running language server.
pub struct Server {
    /// What was started.
    pub spec: ServerSpec,
    /// The workspace root it serves (canonical).
    pub root: PathBuf,
    /// The root as a `file://` URI.
    pub root_uri: String,
    pid: i32,
    child: Mutex<Child>,
    shared: Arc<Shared>,
    next_id: AtomicI64,
    /// Documents sent with `didOpen`, by URI.
    pub docs: tokio::sync::Mutex<HashMap<String, OpenDoc>>,
    /// The last `documentSymbol` answer per URI, with the document version it was for.
    pub outlines: Mutex<HashMap<String, (i64, Value)>>,
    last_used: Mutex<Instant>,
    /// Seconds of idleness after which the pool stops it.
    pub idle_shutdown_s: u64,
    /// What `initialize` returned as capabilities.
    pub capabilities: Mutex<Value>,
    /// Said once in a result: how the sandbox fell short, if it did.
    pub sandbox_note: Option<String>,
    /// When it was started: a young server may still be reading the workspace.
    started: Instant,
    /// Two whole-workspace answers in a row agreed: it has read the workspace.
    ready: std::sync::atomic::AtomicBool,
}

impl Server {
    /// Starts the server's process (not yet initialized). `trace_env` is the starting call's
    /// trace context (`TRACEPARENT`), when spans are exported.
    pub fn spawn(
        spec: &ServerSpec,
        root: &Path,
        limits: Limits,
        allow_network: bool,
        sandboxed: bool,
        idle_shutdown_s: u64,
        trace_env: &[(&'static str, String)],
    ) -> Result<Server> {
        let program = find_program(&spec.command[0]).ok_or_else(|| {
            anyhow!(
                "the language server `{}` cannot start: its program `{}` is not installed \
                 (not found{}); install it, or point [lsp.servers.{}] command at it",
                spec.name,
                spec.command[0],
                if spec.command[0].contains('/') {
                    String::new()
                } else {
                    " on PATH".to_string()
                },
                spec.name
            )
        })?;
        // Before anything is started: what starts afterwards is inside toolbox's containment.
        let containment = toolbox_host::containment::ensure();
        let limits = Arc::new(
            Limits {
                cpu_seconds: None,
                ..limits
            }
            .prepare(),
        );
        let private = private_folder(root, &spec.name)?;
        let sandbox = if sandboxed {
            let install = install_roots(&program, &spec.command[1..], &spec.read_paths);
            let rules = SandboxRules::language_server(root, &private.home, &install, allow_network);
            let prepared = PreparedSandbox::with_rules(&rules).map_err(|e| {
                anyhow!(
                    "the language server `{}` was not started: toolbox's sandbox cannot be \
                     enforced here ({e:#}), and without it the server could read (and a \
                     repository make it quote) any file your user can read. The operator may \
                     accept that with [lsp] sandbox = false",
                    spec.name
                )
            })?;
            Some(Arc::new(prepared))
        } else {
            None
        };
        let network = if allow_network || sandbox.is_some() {
            None
        } else {
            // Unsandboxed by the operator's choice: still no network unless allowed.
            Some(Arc::new(
                PreparedSandbox::network_only().map_err(|e| anyhow!("{e:#}"))?,
            ))
        };
        let mut child = spawn_child(
            &program,
            spec,
            root,
            &private,
            sandbox.clone().or(network),
            limits,
            trace_env,
        )
        .map_err(|e| {
            anyhow!(
                "the language server `{}` could not be started ({}): {e}",
                spec.name,
                program.display()
            )
        })?;
        let pid = child.id() as i32;
        containment.register_group(pid);
        let sandbox_note = match &sandbox {
            Some(_) => None,
            None => Some(
                "note: the language server runs without toolbox's filesystem sandbox ([lsp] \
                 sandbox = false): it can read any file your user can"
                    .to_string(),
            ),
        };
        let root_uri = file_uri(root);
        let shared = Arc::new(Shared {
            name: spec.name.clone(),
            stdin: Mutex::new(child.stdin.take()),
            pending: Mutex::default(),
            diagnostics: Mutex::default(),
            seq: AtomicU64::new(0),
            progress: Mutex::default(),
            progress_seen: AtomicU64::new(0),
            dead: Mutex::new(None),
            stderr: Mutex::default(),
            settings: spec.settings.clone(),
            root_uri: root_uri.clone(),
        });
        if let Some(out) = child.stdout.take() {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("lsp-{}", spec.name))
                .spawn(move || s.read_loop(out))?;
        }
        if let Some(err) = child.stderr.take() {
            let s = shared.clone();
            std::thread::Builder::new()
                .name(format!("lsp-{}-stderr", spec.name))
                .spawn(move || {
                    for line in BufReader::new(err).split(b'\n').map_while(|l| l.ok()) {
                        let mut tail = lock(&s.stderr);
                        if tail.len() == 20 {
                            tail.pop_front();
                        }
                        let mut text = String::from_utf8_lossy(&line).into_owned();
                        text.truncate(300);
                        tail.push_back(text);
                    }
                })?;
        }
        Ok(Server {
            spec: spec.clone(),
            root: root.to_path_buf(),
            root_uri,
            pid,
            child: Mutex::new(child),
            shared,
            next_id: AtomicI64::new(1),
            docs: tokio::sync::Mutex::default(),
            outlines: Mutex::default(),
            last_used: Mutex::new(Instant::now()),
            started: Instant::now(),
            ready: std::sync::atomic::AtomicBool::new(false),
            idle_shutdown_s,
            capabilities: Mutex::new(Value::Null),
            sandbox_note,
        })
    }

    /// Sends `initialize` and `initialized`, bounded by `timeout`.
    pub async fn initialize(
        &self,
        init_options: Option<Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<()> {
        let params = json!({
            // No pid to watch: a server dies with toolbox anyway (its death signal and
            // containment). Inside the sandbox, Landlock's signal scope refuses kill(pid, 0)
            // with EPERM, and vscode-languageserver (pyright, basedpyright) takes any error
            // there for a dead client: basedpyright exited with status 1 within three
            // seconds of every start, so every call met a cold server.
            "processId": null,
            "clientInfo": {"name": "toolbox", "version": env!("CARGO_PKG_VERSION")},
            "rootUri": self.root_uri,
            "rootPath": self.root.display().to_string(),
            "workspaceFolders": [{"uri": self.root_uri, "name": "workspace"}],
            "initializationOptions": init_options,
            "capabilities": {
                "general": {"positionEncodings": ["utf-16"]},
                "window": {"workDoneProgress": true},
                "workspace": {
                    "configuration": true,
                    "workspaceFolders": true,
                    "symbol": {"dynamicRegistration": false},
                    "workspaceEdit": {"documentChanges": true},
                    "didChangeConfiguration": {"dynamicRegistration": false},
                },
                "textDocument": {
                    "synchronization": {"dynamicRegistration": false, "didSave": false},
                    "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                    "definition": {"linkSupport": true},
                    "references": {},
                    "hover": {"contentFormat": ["markdown", "plaintext"]},
                    "rename": {"prepareSupport": false},
                    "publishDiagnostics": {"versionSupport": true},
                },
            },
        });
        let result = match self.request("initialize", params, timeout, cancel).await {
            Ok(r) => r,
            Err(ReqError::Timeout(d)) => {
                return Err(anyhow!(
                    "the language server `{}` did not answer `initialize` within {} s \
                     ([lsp] init_timeout_s){}",
                    self.spec.name,
                    d.as_secs(),
                    self.stderr_tail()
                ))
            }
            Err(ReqError::Crashed(why)) => {
                return Err(anyhow!(
                    "the language server `{}` exited during `initialize`: {why}",
                    self.spec.name
                ))
            }
            Err(ReqError::Rpc(e)) => {
                return Err(anyhow!(
                    "the language server `{}` refused `initialize`: {e}",
                    self.spec.name
                ))
            }
            Err(ReqError::Cancelled) => return Err(anyhow!("cancelled")),
        };
        *lock(&self.capabilities) = result.get("capabilities").cloned().unwrap_or_default();
        self.notify("initialized", json!({}))?;
        if let Some(settings) = &self.spec.settings {
            self.notify(
                "workspace/didChangeConfiguration",
                json!({ "settings": settings }),
            )?;
        }
        Ok(())
    }

    /// Whether the process is gone (or its stream broke).
    pub fn is_dead(&self) -> bool {
        lock(&self.shared.dead).is_some()
    }

    /// Marks a use (for the idle shutdown).
    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    /// How long since the last use.
    pub fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    /// One request, bounded by `timeout` and `cancel`.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Reply {
        self.touch();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        if let Some(why) = self.dead_reason() {
            lock(&self.shared.pending).remove(&id);
            return Err(ReqError::Crashed(why));
        }
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.shared.send(&msg) {
            lock(&self.shared.pending).remove(&id);
            return Err(ReqError::Crashed(
                self.dead_reason().unwrap_or(e.to_string()),
            ));
        }
        let outcome = tokio::select! {
            r = tokio::time::timeout(timeout, rx) => r,
            _ = cancel.cancelled() => {
                lock(&self.shared.pending).remove(&id);
                let _ = self.notify("$/cancelRequest", json!({"id": id}));
                return Err(ReqError::Cancelled);
            }
        };
        self.touch();
        match outcome {
            Ok(Ok(Err(ReqError::Crashed(_)))) | Ok(Err(_)) => Err(ReqError::Crashed(
                self.dead_reason()
                    .unwrap_or_else(|| "it closed the connection".into()),
            )),
            Ok(Ok(reply)) => reply,
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                let _ = self.notify("$/cancelRequest", json!({"id": id}));
                Err(ReqError::Timeout(timeout))
            }
        }
    }

    /// One notification.
    pub fn notify(&self, method: &str, params: Value) -> Result<()> {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.shared.send(&msg).map_err(|e| {
            anyhow!(
                "cannot write to the language server `{}`: {}",
                self.spec.name,
                self.dead_reason().unwrap_or(e.to_string())
            )
        })
    }

    /// Why the server is gone, with its exit status and the end of its stderr; `None` while
    /// it runs.
    pub fn dead_reason(&self) -> Option<String> {
        let why = lock(&self.shared.dead).clone()?;
        // The stream closes a moment before the process is reaped.
        let mut status = None;
        for _ in 0..20 {
            if let Ok(Some(s)) = lock(&self.child).try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = match status {
            Some(s) => match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                (Some(c), _) => format!("it exited with status {c}"),
                (None, Some(sig)) => format!("it was killed by signal {sig}"),
                _ => "it exited".to_string(),
            },
            None => why,
        };
        Some(format!("{status}{}", self.stderr_tail()))
    }

    fn stderr_tail(&self) -> String {
        let tail = lock(&self.shared.stderr);
        if tail.is_empty() {
            return String::new();
        }
        let lines: Vec<&str> = tail
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(String::as_str)
            .collect();
        format!("; its stderr ends with: {}", lines.join(" | "))
    }

    /// The diagnostics last published for `uri`.
    pub fn published(&self, uri: &str) -> Option<Published> {
        lock(&self.shared.diagnostics).get(uri).cloned()
    }

    /// Every document with published diagnostics.
    pub fn all_published(&self) -> Vec<(String, Published)> {
        let mut all: Vec<_> = lock(&self.shared.diagnostics)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// The publication counter now.
    pub fn publication_seq(&self) -> u64 {
        self.shared.seq.load(Ordering::SeqCst)
    }

    /// Waits until no `$/progress` work is running (after a short grace for it to begin on a
    /// fresh server), at most `bound`. Returns whether the bound was hit.
    pub async fn wait_indexing(&self, bound: Duration, fresh: bool) -> bool {
        let start = Instant::now();
        let grace = if fresh {
            Duration::from_millis(300)
        } else {
            Duration::ZERO
        };
        loop {
            let busy = !lock(&self.shared.progress).is_empty();
            if !busy && start.elapsed() >= grace.min(bound) {
                return false;
            }
            if self.is_dead() {
                return false;
            }
            if start.elapsed() >= bound {
                return busy;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Whether its whole-workspace answers can be taken at once: it was started more than
    /// `young` ago, or two of its answers in a row agreed ([`Self::mark_ready`]).
    pub fn is_ready(&self, young: Duration) -> bool {
        self.ready.load(Ordering::Relaxed) || self.started.elapsed() >= young
    }

    /// Notes that two answers in a row agreed.
    pub fn mark_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Asks the server to stop, then makes sure it has.
    pub fn stop(&self) {
        if !self.is_dead() {
            let _ = self
                .shared
                .send(&json!({"jsonrpc": "2.0", "id": 0, "method": "shutdown", "params": null}));
            let deadline = Instant::now() + Duration::from_millis(500);
            while Instant::now() < deadline && !self.is_dead() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self
                .shared
                .send(&json!({"jsonrpc": "2.0", "method": "exit", "params": null}));
            let deadline = Instant::now() + Duration::from_millis(500);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = lock(&self.child).try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill();
    }

    /// Kills the server's whole session now and reaps it.
    pub fn kill(&self) {
        kill_group(self.pid);
        let _ = lock(&self.child).wait();
        if let Some(c) = toolbox_host::containment::current() {
            c.unregister_group(self.pid);
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        kill_group(self.pid);
        let _ = lock(&self.child).wait();
        if let Some(c) = toolbox_host::containment::current() {
            c.unregister_group(self.pid);
        }
    }
}

impl Shared {
    fn send(&self, msg: &Value) -> std::io::Result<()> {
        let bytes = rpc::encode(msg);
        let mut stdin = lock(&self.stdin);
        match stdin.as_mut() {
            Some(s) => s.write_all(&bytes).and_then(|_| s.flush()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the server's input is closed",
            )),
        }
    }

    fn read_loop(&self, out: std::process::ChildStdout) {
        let mut reader = BufReader::with_capacity(64 * 1024, out);
        let why = loop {
            match rpc::read_message(&mut reader) {
                Ok(Some(msg)) => self.dispatch(msg),
                Ok(None) => break "it closed its output".to_string(),
                Err(e) => break format!("its output broke the protocol: {e}"),
            }
        };
        tracing::debug!(target: "toolbox", server = %self.name, %why, "language server gone");
        *lock(&self.dead) = Some(why.clone());
        *lock(&self.stdin) = None;
        for (_, tx) in lock(&self.pending).drain() {
            let _ = tx.send(Err(ReqError::Crashed(why.clone())));
        }
    }

    fn dispatch(&self, msg: Value) {
        let method = msg.get("method").and_then(Value::as_str);
        let id = msg.get("id").cloned();
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { return };
                if let Some(tx) = lock(&self.pending).remove(&id) {
                    let reply = match msg.get("error") {
                        Some(e) => Err(ReqError::Rpc(
                            e.get("message")
                                .and_then(Value::as_str)
                                .unwrap_or("an error without a message")
                                .to_string(),
                        )),
                        None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = tx.send(reply);
                }
            }
            (Some(method), Some(id)) => {
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let reply = match method {
                    "workspace/configuration" => {
                        let items = params["items"].as_array().cloned().unwrap_or_default();
                        let answers: Vec<Value> = items
                            .iter()
                            .map(|item| self.section(item["section"].as_str()))
                            .collect();
                        json!({"jsonrpc": "2.0", "id": id, "result": answers})
                    }
                    "workspace/workspaceFolders" => json!({"jsonrpc": "2.0", "id": id,
                        "result": [{"uri": self.root_uri, "name": "workspace"}]}),
                    "window/workDoneProgress/create"
                    | "client/registerCapability"
                    | "client/unregisterCapability"
                    | "window/showMessageRequest"
                    | "workspace/diagnostic/refresh"
                    | "workspace/semanticTokens/refresh"
                    | "workspace/inlayHint/refresh"
                    | "workspace/codeLens/refresh" => {
                        json!({"jsonrpc": "2.0", "id": id, "result": null})
                    }
                    "workspace/applyEdit" => json!({"jsonrpc": "2.0", "id": id,
                        "result": {"applied": false, "failureReason": "toolbox applies edits itself"}}),
                    _ => json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32601, "message": format!("toolbox does not serve {method}")}}),
                };
                let _ = self.send(&reply);
            }
            (Some("textDocument/publishDiagnostics"), None) => {
                let params = &msg["params"];
                let Some(uri) = params["uri"].as_str() else {
                    return;
                };
                let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
                let entry = Published {
                    items: params["diagnostics"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                    seq,
                    at: Some(Instant::now()),
                };
                lock(&self.diagnostics).insert(normalise_uri(uri), entry);
            }
            (Some("$/progress"), None) => {
                let token = match &msg["params"]["token"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                match msg["params"]["value"]["kind"].as_str() {
                    Some("begin") => {
                        self.progress_seen.fetch_add(1, Ordering::SeqCst);
                        lock(&self.progress).insert(token);
                    }
                    Some("end") => {
                        lock(&self.progress).remove(&token);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    fn section(&self, section: Option<&str>) -> Value {
        let Some(settings) = &self.settings else {
            return Value::Null;
        };
        let Some(section) = section.filter(|s| !s.is_empty()) else {
            return settings.clone();
        };
        let mut v = settings;
        for part in section.split('.') {
            match v.get(part) {
                Some(next) => v = next,
                None => return Value::Null,
            }
        }
        v.clone()
    }
}

fn spawn_child(
    program: &Path,
    spec: &ServerSpec,
    root: &Path,
    private: &PrivateFolder,
    sandbox: Option<Arc<PreparedSandbox>>,
    limits: Arc<PreparedLimits>,
    trace_env: &[(&'static str, String)],
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(&spec.command[1..])
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Tools that find their installation through the home folder keep it (rustup, cargo,
    // go), while the home the server sees is its private folder.
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let home = PathBuf::from(home);
        for (var, under) in [
            ("RUSTUP_HOME", ".rustup"),
            ("CARGO_HOME", ".cargo"),
            ("GOPATH", "go"),
        ] {
            if std::env::var_os(var).is_none() && home.join(under).is_dir() {
                cmd.env(var, home.join(under));
            }
        }
    }
    cmd.env("HOME", &private.home)
        .env("TMPDIR", &private.tmp)
        .env("XDG_CACHE_HOME", private.home.join(".cache"))
        .env("XDG_CONFIG_HOME", private.home.join(".config"))
        .env("XDG_DATA_HOME", private.home.join(".local/share"))
        .env("XDG_STATE_HOME", private.home.join(".local/state"))
        .env_remove("XDG_RUNTIME_DIR");
    // The trace of the call that started it, which its own tracing (if any) joins.
    for (name, value) in trace_env {
        cmd.env(name, value);
    }
    // A session of its own: the whole server can be killed as a group, and it has no
    // controlling terminal. Then its limits and its sandbox (host's one child setup).
    ChildSetup::new()
        .own_session()
        .limits(Some(limits))
        .sandbox(sandbox)
        .apply_to(&mut cmd);
    cmd.spawn()
}

/// A server's own folder, outside the workspace: its `$HOME`, with `tmp/` as its `$TMPDIR`.
pub struct PrivateFolder {
    /// The server's `$HOME`.
    pub home: PathBuf,
    /// The server's `$TMPDIR`.
    pub tmp: PathBuf,
}

/// `~/.cache/toolbox/lsp/<workspace digest>/<server>` (or under `$XDG_CACHE_HOME`, else the
/// temp dir): one per workspace, so a server's caches of one repository are never read by
/// the same server for another. Made private (0700).
fn private_folder(root: &Path, server: &str) -> Result<PrivateFolder> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| Path::new(h).is_absolute())
                .map(|h| Path::new(&h).join(".cache"))
        })
        .unwrap_or_else(std::env::temp_dir);
    let digest = toolbox_host::seal::digest(&[root.as_os_str().as_bytes()]);
    let safe: String = server
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let home = base.join("toolbox/lsp").join(&digest[..16]).join(safe);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home.join("tmp"))
        .map_err(|e| {
            anyhow!(
                "cannot make the language server's own folder {}: {e}",
                home.display()
            )
        })?;
    let home = std::fs::canonicalize(&home).unwrap_or(home);
    let tmp = home.join("tmp");
    Ok(PrivateFolder { home, tmp })
}

/// Where a server's program lives and what it runs on: for the program, the target of its
/// links, and the interpreter its `#!` line names (`/usr/bin/env node` looked up on PATH),
/// the installation prefix (`<prefix>/bin/x`: its `bin`, `lib`, `lib64`, `libexec` and
/// `include`; else the program's own folder), and a Python venv's base interpreter
/// (`pyvenv.cfg`'s `home`); for a version manager's shim (`~/.pyenv/shims/python3`), the
/// manager's folder. Never the home folder itself or `/`: only these sub-folders. Then the
/// files the command's arguments name by absolute path, and the operator's `read_paths`.
pub fn install_roots(program: &Path, args: &[String], extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut programs: Vec<PathBuf> = vec![program.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(program) {
        programs.push(real);
    }
    if let Some(interpreter) = shebang_interpreter(program) {
        if let Ok(real) = std::fs::canonicalize(&interpreter) {
            programs.push(real);
        }
        programs.push(interpreter);
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for p in &programs {
        let Some(dir) = p.parent() else { continue };
        if dir.file_name().is_some_and(|n| n == "bin") {
            if let Some(prefix) = dir.parent() {
                prefixes.push(prefix.to_path_buf());
            }
        } else if dir.file_name().is_some_and(|n| n == "shims") {
            // A version manager's shim (pyenv, rbenv, nodenv) runs the manager itself and
            // the version it picks, all below the manager's own folder.
            if let Some(manager) = dir.parent() {
                roots.push(manager.to_path_buf());
            }
        } else {
            roots.push(dir.to_path_buf());
        }
    }
    // A venv's base interpreter: `home = /opt/python/bin` in `<venv>/pyvenv.cfg`.
    for prefix in prefixes.clone() {
        let Ok(text) = std::fs::read_to_string(prefix.join("pyvenv.cfg")) else {
            continue;
        };
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if key.trim() == "home" {
                let bin = PathBuf::from(value.trim());
                let bin = std::fs::canonicalize(&bin).unwrap_or(bin);
                if let Some(base) = bin.parent() {
                    prefixes.push(base.to_path_buf());
                }
            }
        }
    }
    for prefix in prefixes {
        for sub in ["bin", "lib", "lib64", "libexec", "include", "pyvenv.cfg"] {
            roots.push(prefix.join(sub));
        }
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    roots.retain(|r| {
        r.is_absolute()
            && r.components().count() > 2
            && home.as_ref().is_none_or(|h| !h.starts_with(r))
    });
    // Files (never folders) the operator's command names by absolute path (`python3
    // /opt/lsp/server.py`).
    roots.extend(
        args.iter()
            .map(PathBuf::from)
            .filter(|a| a.is_absolute() && a.is_file()),
    );
    roots.extend(extra.iter().cloned());
    roots.sort();
    roots.dedup();
    roots
}

/// The interpreter a script's `#!` line names, `env`'s argument looked up on PATH.
fn shebang_interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = PathBuf::from(words.next()?);
    if first.file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return crate::config::find_program(name);
    }
    Some(first)
}

fn kill_group(pid: i32) {
    sandbox::signal_group(pid, Signal::KILL);
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `file://` URI of an absolute path.
pub fn file_uri(path: &Path) -> String {
    url::Url::from_file_path(path)
        .map(|u| u.to_string())
        .unwrap_or_else(|_| format!("file://{}", path.display()))
}

/// A URI as we key documents: parsed and printed again, so `%3A` and `:` agree.
pub fn normalise_uri(uri: &str) -> String {
    match url::Url::parse(uri)
        .ok()
        .and_then(|u| u.to_file_path().ok())
    {
        Some(p) => file_uri(&p),
        None => uri.to_string(),
    }
}

/// The local path of a `file://` URI.
pub fn uri_path(uri: &str) -> Option<PathBuf> {
    url::Url::parse(uri).ok()?.to_file_path().ok()
}

#[cfg(test)]
mod install_tests {
    use super::install_roots;
    use std::path::PathBuf;

    #[test]
    fn a_venv_script_brings_its_venv_and_base_interpreter_never_a_whole_home() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("python/3.11");
        std::fs::create_dir_all(base.join("bin")).unwrap();
        std::fs::write(base.join("bin/python3"), "").unwrap();
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("bin")).unwrap();
        std::fs::write(
            venv.join("pyvenv.cfg"),
            format!("home = {}\n", base.join("bin").display()),
        )
        .unwrap();
        let script = venv.join("bin/pylsp");
        std::fs::write(
            &script,
            format!("#!{}\nimport pylsp\n", venv.join("bin/python").display()),
        )
        .unwrap();
        let roots = install_roots(&script, &["--check".into(), "/nonexistent".into()], &[]);
        let base = std::fs::canonicalize(&base).unwrap();
        for want in [
            venv.join("bin"),
            venv.join("lib"),
            base.join("lib"),
            base.join("bin"),
        ] {
            assert!(roots.contains(&want), "{want:?} in {roots:?}");
        }
        assert!(!roots.contains(&venv), "only the venv's parts: {roots:?}");
        assert!(!roots.iter().any(|r| r == &PathBuf::from("/")));
        // A program straight in a home's bin/ never opens the whole home.
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap();
        let roots = install_roots(&home.join("bin/server"), &[], &[]);
        assert!(!roots.iter().any(|r| home.starts_with(r)), "{roots:?}");
    }
}
