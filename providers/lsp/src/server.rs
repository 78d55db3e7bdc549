//! One running language server: the child process, its reader thread, requests with
//! bounded waits, and what it told us (diagnostics, indexing progress).
//!
//! The child lives in toolbox's containment (`containment::ensure()` runs before the
//! spawn): it is in toolbox's cgroup, or, in subreaper mode, its session is registered with
//! the janitor, so no server outlives toolbox even after SIGKILL. It runs in a session of its
//! own, under the operator's `[limits]` (memory and processes; CPU time would kill a server
//! that lives across calls), in a network namespace of its own (no network unless
//! `[lsp] allow_network`), and, where a mount namespace can be made, with the workspace
//! mounted read-only.
//!
//! Messages are read by a plain thread, so a request can be awaited on any runtime (the
//! approval preview of a rename computes its edit on a runtime of its own).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use tokio::sync::oneshot;
use toolbox_host::limits::{Limits, PreparedLimits};
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
}

/// How much of the kernel's isolation a spawn asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Isolation {
    NetAndReadOnly,
    Net,
    ReadOnly,
    Nothing,
}

impl Server {
    /// Starts the server's process (not yet initialized).
    pub fn spawn(
        spec: &ServerSpec,
        root: &Path,
        limits: Limits,
        allow_network: bool,
        idle_shutdown_s: u64,
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
        let levels: &[Isolation] = if allow_network {
            &[Isolation::ReadOnly, Isolation::Nothing]
        } else {
            &[Isolation::NetAndReadOnly, Isolation::Net]
        };
        let mut last_err = None;
        let mut spawned = None;
        for &level in levels {
            match spawn_child(&program, spec, root, level, limits.clone()) {
                Ok(child) => {
                    spawned = Some((child, level));
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let Some((mut child, level)) = spawned else {
            let e = last_err.map(|e| e.to_string()).unwrap_or_default();
            anyhow::bail!(
                "the language server `{}` could not be started ({}): {e}{}",
                spec.name,
                program.display(),
                if allow_network {
                    ""
                } else {
                    "; if this machine cannot make a network namespace, the operator can set \
                     [lsp] allow_network = true"
                }
            );
        };
        let pid = child.id() as i32;
        containment.register_group(pid);
        let sandbox_note = match level {
            Isolation::Net | Isolation::Nothing => Some(
                "note: the workspace is writable for the language server (no mount namespace \
                 could be made here)"
                    .to_string(),
            ),
            _ => None,
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
            "processId": std::process::id(),
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
    level: Isolation,
    limits: Arc<PreparedLimits>,
) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(&spec.command[1..])
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let net = matches!(level, Isolation::NetAndReadOnly | Isolation::Net);
    let read_only = matches!(level, Isolation::NetAndReadOnly | Isolation::ReadOnly);
    let root_c = CString::new(root.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("the workspace path has a NUL byte"))?;
    // Flags a remount must keep (in a user namespace they are locked), read before the fork.
    let keep = mount_flags_of(&root_c);
    // SAFETY: the hook runs between fork and exec and only makes raw system calls (no
    // allocation, no locks); everything it reads (the C string, the limit data) was built
    // before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // A session of its own: the whole server can be killed as a group, and it has no
            // controlling terminal.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Limits first: joining the limit cgroup must happen before a new user namespace.
            limits.apply_in_child()?;
            let mut flags = 0;
            if net {
                flags |= libc::CLONE_NEWNET;
            }
            if read_only {
                flags |= libc::CLONE_NEWNS;
            }
            if flags != 0
                && libc::unshare(flags) != 0
                && libc::unshare(flags | libc::CLONE_NEWUSER) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if read_only {
                let none = std::ptr::null();
                let slash = c"/".as_ptr();
                if libc::mount(
                    none,
                    slash,
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                    || libc::mount(
                        root_c.as_ptr(),
                        root_c.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    || libc::mount(
                        none,
                        root_c.as_ptr(),
                        none,
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | keep,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The working folder was entered before this hook ran, on the writable mount
                // below the new one: enter it again, through the read-only mount.
                if libc::chdir(root_c.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The mount flags of the file system holding `path` that a bind remount must repeat.
fn mount_flags_of(path: &CString) -> libc::c_ulong {
    // SAFETY: statvfs writes into the zeroed struct we own; the path is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let f = st.f_flag;
    let mut out = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            out |= ms_flag;
        }
    }
    out
}

fn kill_group(pid: i32) {
    if pid > 1 {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
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
