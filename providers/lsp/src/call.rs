//! What every lsp tool does around its request: read the file through the workspace, pick
//! and start its server, keep the server's copy of open files current, wait for indexing,
//! restart a crashed server once, and collect the notes the result ends with.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_host::limits::Limits;
use toolbox_host::{ToolContext, WsPath};

use crate::config::{language_id, LspConfig, ServerSpec};
use crate::pool;
use crate::server::{file_uri, uri_path, ReqError, Server};

/// Files larger than this are not sent to a server.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// At most this many open documents are checked for changes before each call.
const MAX_REFRESH: usize = 200;

/// How an attempt failed: a crash is retried once on a fresh server, anything else is the
/// call's error.
pub enum Fail {
    /// The server died; the text says how.
    Crashed(String),
    /// Any other error.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Fail {
    fn from(e: anyhow::Error) -> Self {
        Fail::Other(e)
    }
}

/// A server started less than this long ago may still be reading the workspace: its
/// whole-workspace answers are checked by asking twice ([`Env::settled`]).
pub const YOUNG: Duration = Duration::from_secs(60);
/// The pause between the two asks.
pub const SETTLE_GAP: Duration = Duration::from_millis(250);

/// One call's context, cheap to clone into an attempt.
#[derive(Clone)]
pub struct Env {
    /// The call.
    pub ctx: ToolContext,
    /// `[lsp]`, parsed.
    pub cfg: Arc<LspConfig>,
    /// The tool's name, for errors.
    pub tool: &'static str,
    /// Lines appended to the result.
    pub notes: Arc<Mutex<Vec<String>>>,
}

/// A source file read through the workspace.
#[derive(Clone)]
pub struct Doc {
    /// The path as the model should see it.
    pub shown: String,
    /// Its `file://` URI.
    pub uri: String,
    /// Its text.
    pub text: String,
    /// Its extension, lower case.
    pub ext: String,
}

impl Env {
    /// The context of a call of `tool`.
    pub fn new(tool: &'static str, ctx: &ToolContext) -> Result<Self> {
        Ok(Env {
            ctx: ctx.clone(),
            cfg: Arc::new(LspConfig::from_config(&ctx.config)?),
            tool,
            notes: Arc::default(),
        })
    }

    /// Adds a line to the result's notes (once).
    pub fn note(&self, line: String) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if !notes.contains(&line) {
            notes.push(line);
        }
    }

    /// The notes, one per line, or nothing.
    pub fn notes_text(&self) -> String {
        let notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if notes.is_empty() {
            String::new()
        } else {
            format!("\n{}", notes.join("\n"))
        }
    }

    /// The workspace root as servers see it.
    pub fn root(&self) -> std::path::PathBuf {
        self.ctx.workspace.root().to_path_buf()
    }

    /// Reads `path` (a model's) through the workspace: a text file within the size cap.
    pub async fn doc(&self, path: &str) -> Result<Doc> {
        let tool = self.tool;
        let ws = self.ctx.workspace.clone();
        let p = ws.locate(path).map_err(|e| anyhow!("{tool}: {e}"))?;
        let shown = ws.show(&p);
        read_doc(&ws, p, shown, tool).await
    }

    /// The server for `doc`.
    pub fn spec_for(&self, doc: &Doc) -> Result<ServerSpec> {
        self.cfg
            .server_for(&doc.ext, &doc.shown)
            .map_err(|e| anyhow!("{}: {e}", self.tool))
    }

    /// Runs `op` on the running server `spec` (started if needed). A crash during `op`
    /// restarts the server once and runs `op` again; the result's notes say so.
    pub async fn with_server<T, F, Fut>(&self, spec: &ServerSpec, op: F) -> Result<T>
    where
        F: Fn(Arc<Server>, bool) -> Fut,
        Fut: Future<Output = std::result::Result<T, Fail>>,
    {
        let limits = Limits::from_config(&self.ctx.config)?;
        for attempt in 0..2 {
            let got = pool::get(
                &self.root(),
                spec,
                &self.cfg,
                limits,
                &self.ctx.cancel,
                &self.ctx.trace_env(),
            )
            .await
            .map_err(|e| anyhow!("{}: {e}", self.tool))?;
            if let Some(note) = &got.server.sandbox_note {
                self.note(note.clone());
            }
            if let Some(why) = &got.replaced {
                self.note(format!(
                    "note: the language server `{}` had stopped ({why}) and was started again",
                    spec.name
                ));
            }
            match op(got.server.clone(), got.fresh).await {
                Ok(v) => return Ok(v),
                Err(Fail::Other(e)) => return Err(e),
                Err(Fail::Crashed(why)) => {
                    pool::discard(&got.server).await;
                    if attempt == 0 {
                        self.note(format!(
                            "note: the language server `{}` crashed during this call ({why}) \
                             and was restarted",
                            spec.name
                        ));
                        continue;
                    }
                    bail!(
                        "{}: the language server `{}` crashed during the call, and again after \
                         a restart: {why}",
                        self.tool,
                        spec.name
                    );
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Brings the server's copy of `doc` (and of every other file it has open) up to date,
    /// and on a fresh server waits for its indexing to end, within `[lsp] index_wait_s`.
    pub async fn prepare(
        &self,
        server: &Server,
        doc: Option<&Doc>,
        fresh: bool,
    ) -> std::result::Result<(), Fail> {
        self.refresh_open(server, doc.map(|d| d.uri.as_str()))
            .await?;
        if let Some(doc) = doc {
            sync(server, doc).await?;
        }
        let bound = Duration::from_secs(self.cfg.index_wait_s);
        if server.wait_indexing(bound, fresh).await {
            self.note(format!(
                "note: the language server `{}` was still indexing after {} s ([lsp] \
                 index_wait_s); results may be incomplete",
                server.spec.name, self.cfg.index_wait_s
            ));
        }
        if let Some(why) = server.dead_reason() {
            return Err(Fail::Crashed(why));
        }
        Ok(())
    }

    /// A whole-workspace answer (references, a rename) from a server that may still be
    /// reading the workspace. A server younger than [`YOUNG`] whose answers have not yet
    /// agreed is asked again, [`SETTLE_GAP`] apart, until two answers in a row agree, within
    /// `[lsp] index_wait_s`; then, and for an older server, one ask is enough. Returns the
    /// last answer and whether it settled (`false`: the answers were still changing at the
    /// bound, so it may be incomplete).
    pub async fn settled<F, Fut>(
        &self,
        server: &Server,
        ask: F,
    ) -> std::result::Result<(Value, bool), Fail>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = std::result::Result<Value, Fail>>,
    {
        let mut answer = ask().await?;
        if server.is_ready(YOUNG) {
            return Ok((answer, true));
        }
        let bound = Duration::from_secs(self.cfg.index_wait_s);
        let start = std::time::Instant::now();
        loop {
            if start.elapsed() + SETTLE_GAP > bound {
                return Ok((answer, false));
            }
            tokio::time::sleep(SETTLE_GAP).await;
            let again = ask().await?;
            if again == answer {
                server.mark_ready();
                return Ok((answer, true));
            }
            answer = again;
        }
    }

    /// Re-reads the server's open documents (but `skip`) and sends what changed on disk.
    async fn refresh_open(
        &self,
        server: &Server,
        skip: Option<&str>,
    ) -> std::result::Result<(), Fail> {
        let uris: Vec<String> = server
            .docs
            .lock()
            .await
            .keys()
            .filter(|u| Some(u.as_str()) != skip)
            .take(MAX_REFRESH)
            .cloned()
            .collect();
        for uri in uris {
            let Some(doc) = self.doc_at_uri(&uri).await else {
                continue;
            };
            sync(server, &doc).await?;
        }
        Ok(())
    }

    /// The workspace document a server's URI names, read afresh; `None` outside the
    /// workspace or when it cannot be read as text.
    pub async fn doc_at_uri(&self, uri: &str) -> Option<Doc> {
        let rel = self.relative(uri)?;
        let ws = self.ctx.workspace.clone();
        let p = ws.locate(&rel).ok()?;
        read_doc(&ws, p, rel, self.tool).await.ok()
    }

    /// A server URI as a workspace-relative path, if it is inside the workspace.
    pub fn relative(&self, uri: &str) -> Option<String> {
        let path = uri_path(uri)?;
        let rel = path.strip_prefix(self.root()).ok()?;
        let s = rel.to_str()?.to_string();
        (!s.is_empty()).then_some(s)
    }

    /// A server URI as the model should see it: workspace-relative inside, absolute outside.
    pub fn show_uri(&self, uri: &str) -> String {
        self.relative(uri).unwrap_or_else(|| {
            uri_path(uri)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| uri.to_string())
        })
    }

    /// One request, with the errors a model can read.
    pub async fn req(
        &self,
        server: &Server,
        method: &str,
        params: Value,
    ) -> std::result::Result<Value, Fail> {
        let timeout = Duration::from_secs(self.cfg.request_timeout_s);
        match server
            .request(method, params, timeout, &self.ctx.cancel)
            .await
        {
            Ok(v) => Ok(v),
            Err(ReqError::Crashed(why)) => Err(Fail::Crashed(why)),
            Err(ReqError::Timeout(d)) => Err(Fail::Other(anyhow!(
                "{}: the language server `{}` did not answer {method} within {} s ([lsp] \
                 request_timeout_s)",
                self.tool,
                server.spec.name,
                d.as_secs()
            ))),
            Err(ReqError::Rpc(e)) => Err(Fail::Other(anyhow!(
                "{}: the language server `{}` answered {method} with an error: {e}",
                self.tool,
                server.spec.name
            ))),
            Err(ReqError::Cancelled) => Err(Fail::Other(anyhow!("{}: cancelled", self.tool))),
        }
    }
}

/// Reads a workspace file as a document.
pub async fn read_doc(
    ws: &toolbox_host::Workspace,
    p: WsPath,
    shown: String,
    tool: &'static str,
) -> Result<Doc> {
    let ws = ws.clone();
    toolbox_host::blocking(
        format!("{tool}: reading {shown}"),
        move || -> Result<Doc> {
            use std::io::Read;
            let (file, len) = ws.open_read_sized(&p).map_err(|e| match e {
                toolbox_host::PathError::Io { ref source, .. }
                    if source.kind() == std::io::ErrorKind::IsADirectory =>
                {
                    anyhow!("{tool}: {shown} is a directory; give a source file")
                }
                other => anyhow!("{tool}: {other}"),
            })?;
            if len > MAX_FILE_BYTES {
                bail!(
                    "{tool}: {shown} is {len} bytes, over the {MAX_FILE_BYTES}-byte limit of the \
                 lsp tools"
                );
            }
            let mut bytes = Vec::new();
            file.take(MAX_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| anyhow!("{tool}: cannot read {shown}: {e}"))?;
            let text = match String::from_utf8(bytes) {
                Ok(t) if !t.contains('\0') => t,
                _ => bail!(
                    "{tool}: {shown} is a binary file (not UTF-8 text); language servers read \
                 source files"
                ),
            };
            let abs = ws.real_path(&p).map_err(|e| anyhow!("{tool}: {e}"))?;
            let ext = abs
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or("")
                .to_ascii_lowercase();
            Ok(Doc {
                uri: file_uri(&abs),
                shown,
                text,
                ext,
            })
        },
    )
    .await?
}

/// Sends `didOpen`, or `didChange` with the whole text when it changed.
pub async fn sync(server: &Server, doc: &Doc) -> std::result::Result<bool, Fail> {
    let mut docs = server.docs.lock().await;
    let dead = |e: anyhow::Error| match server.dead_reason() {
        Some(why) => Fail::Crashed(why),
        None => Fail::Other(e),
    };
    match docs.get_mut(&doc.uri) {
        None => {
            let lang = server
                .spec
                .language_id
                .clone()
                .unwrap_or_else(|| language_id(&doc.ext).to_string());
            server
                .notify(
                    "textDocument/didOpen",
                    json!({"textDocument": {"uri": doc.uri, "languageId": lang, "version": 1, "text": doc.text}}),
                )
                .map_err(dead)?;
            docs.insert(
                doc.uri.clone(),
                crate::server::OpenDoc {
                    version: 1,
                    text: doc.text.clone(),
                },
            );
            Ok(true)
        }
        Some(open) if open.text != doc.text => {
            open.version += 1;
            open.text = doc.text.clone();
            server
                .notify(
                    "textDocument/didChange",
                    json!({"textDocument": {"uri": doc.uri, "version": open.version},
                           "contentChanges": [{"text": doc.text}]}),
                )
                .map_err(dead)?;
            Ok(true)
        }
        Some(_) => Ok(false),
    }
}
