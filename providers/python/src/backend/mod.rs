//! What `run_python_code` asks of a backend, and what it gets back, as Rust types.
//!
//! `[python] backend` ([`crate::config::Backend`]) picks one of three implementations of
//! [`Backend`]: [`crate::embedded`], [`crate::isolated`] and [`crate::jupyter`]. For each
//! call, [`crate::run`] builds one [`RunRequest`], hands it to the backend together with the
//! call's [`Call`], and gets one [`RunResult`] back. The result is parsed once, where it
//! arrives: from the driver's answer (embedded, isolated) or from the kernel's messages
//! (jupyter). Rendering it for the model ([`crate::render`]) and handing it to other
//! providers ([`RunResult::to_json`], the `python` `CodeRunner`) read the typed value.
//!
//! The driver's protocol stays what it was: JSON objects, as dicts inside this process and as
//! JSON lines to a worker. [`RunRequest::into_driver`] and [`RunResult::from_driver`] are its
//! two ends on this side, and [`driver_result`] unwraps its `{"ok": …}` envelope.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Map, Value};
use toolbox_host::limits::Limits;
use toolbox_host::ToolContext;

use crate::config::PythonConfig;
use crate::evict::SessionLimits;

/// `run_python_code` on the embedded and isolated backends, through the provider.
#[cfg(test)]
mod backend_tests;
mod embed_lib;
pub mod embedded;
pub mod isolated;
pub mod jupyter;

/// One of the places Python code runs.
pub(crate) trait Backend {
    /// Whether a run of the session `key` must carry the session's [`Folders`]. The
    /// embedded driver keeps them from a session's first run; a worker or a kernel may be new
    /// on any run, so by default they are always sent.
    fn needs_folders(&self, key: &str) -> bool {
        let _ = key;
        true
    }

    /// Runs one cell or script in the session. An exception raised by the code is an `Ok`
    /// with [`RunResult::error`] set, and so is a run that was interrupted and stopped in
    /// time ([`RunResult::interrupted`]); a failure of the call itself (a timeout that cost
    /// the session its state, a crash, a busy interpreter) is an `Err` whose message says
    /// what happened to the session.
    async fn run(&self, request: RunRequest, call: &Call<'_>) -> Result<RunResult>;

    /// Gives back the state of the sessions [`crate::evict`]'s rule says should go (never a
    /// session with a call running); `incoming`, the backend's own key of a session about to
    /// run a call, is never one of them and counts as live. A call looks when
    /// [`Call::look`] says so, or when its session has nothing yet; the sweeper
    /// ([`crate::sessions`]) looks once a minute with no `incoming`.
    fn evict(&self, limits: SessionLimits, incoming: Option<&str>);
}

/// The call a run belongs to, as the backends need it.
pub(crate) struct Call<'a> {
    pub ctx: &'a ToolContext,
    pub config: &'a PythonConfig,
    /// The tool the run is for, for messages (`run_python_code`, `notebook__run_cell`).
    pub tool: &'a str,
    pub timeout: Duration,
    /// The session scratchpad, held open: the code works in this very folder (changed into
    /// by descriptor), not in whatever its name points at later.
    pub cwd: Arc<OwnedFd>,
    /// `[limits]`, which only the isolated backend can apply.
    pub limits: Limits,
    /// Whether this call looks for sessions to evict (at most once a second; see
    /// [`Backend::evict`]).
    pub look: bool,
    /// `[python] sandbox`, prepared for this session (isolated backend only).
    pub sandbox: Option<Arc<toolbox_host::sandbox::PreparedSandbox>>,
}

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// A cell.
    Code(String),
    /// A `.py` file (its absolute path) run as `__main__`, with `sys.argv[1:]`.
    Script { path: String, args: Vec<String> },
}

/// Where a session's code works and writes, as absolute paths.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Folders {
    /// The session scratchpad (the working directory).
    pub cwd: String,
    /// The session's `output/` (`OUTPUT_DIR`, where figures are saved).
    pub output_dir: String,
    /// The workspace root (stripped from tracebacks).
    pub root: String,
}

/// One run, as a backend receives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunRequest {
    pub source: Source,
    /// The session's key ([`crate::common::session_key`]): one namespace per key.
    pub session: String,
    /// The session's folders, unless the backend said it already has them
    /// ([`Backend::needs_folders`]).
    pub folders: Option<Folders>,
    /// [`crate::install::generation`]: a run after an install refreshes the import caches.
    pub generation: u64,
    /// site-packages folders to add to `sys.path` first: the configured venv's (embedded)
    /// or the per-user venv's (embedded and isolated); empty for the jupyter backend.
    pub site_dirs: Vec<String>,
    /// `TRACEPARENT`/`TRACESTATE` of the call's span when spans are exported: set in
    /// `os.environ` for the run, so code that traces itself (and what it starts) joins it.
    pub trace: Vec<(&'static str, String)>,
}

impl RunRequest {
    /// The driver's `run` request (see `_run` in driver.py). Keys are left out, not sent
    /// empty, where the driver tells the two apart: no `root` means "keep the folders you
    /// have".
    pub fn into_driver(self) -> Value {
        let mut request = Map::new();
        request.insert("op".into(), "run".into());
        match self.source {
            Source::Code(code) => {
                request.insert("code".into(), code.into());
            }
            Source::Script { path, args } => {
                request.insert("script_path".into(), path.into());
                request.insert("args".into(), args.into());
            }
        }
        if let Some(folders) = self.folders {
            request.insert("cwd".into(), folders.cwd.into());
            request.insert("output_dir".into(), folders.output_dir.into());
            request.insert("root".into(), folders.root.into());
        }
        request.insert("session".into(), self.session.into());
        request.insert("generation".into(), self.generation.into());
        if !self.site_dirs.is_empty() {
            request.insert("site_dirs".into(), self.site_dirs.into());
        }
        if !self.trace.is_empty() {
            let trace: Map<String, Value> = self
                .trace
                .into_iter()
                .map(|(name, value)| (name.to_string(), value.into()))
                .collect();
            request.insert("trace".into(), Value::Object(trace));
        }
        Value::Object(request)
    }
}

/// What one run produced, whichever backend ran it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunResult {
    /// The session's count of runs (`In[n]`); a kernel may not say.
    pub execution_count: Option<u64>,
    pub stdout: String,
    pub stderr: String,
    /// The final expression's value.
    pub value: Option<Shown>,
    /// What `display()` showed, and the figures saved, in order.
    pub display_data: Vec<Display>,
    /// The exception the code raised.
    pub error: Option<RunError>,
    /// The code was interrupted (`ExecutionInterrupted` in-process, `KeyboardInterrupt` in a
    /// kernel) and stopped in time: the session is intact.
    pub interrupted: bool,
    /// Why toolbox stopped it (`timed out after 300 ms`, `was cancelled`).
    pub stopped: Option<String>,
    /// Said before everything else (the session was restarted, the output was cut, …).
    pub notes: Vec<String>,
}

/// A value as text, and as HTML when it has an HTML form (`_repr_html_`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shown {
    pub plain: String,
    pub html: Option<String>,
}

/// An exception raised by the code.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunError {
    pub ename: String,
    pub evalue: String,
    /// Plain text, with the code's lines named `<cell>`, `<cell In[n]>` or by workspace path.
    pub traceback: Option<String>,
}

/// One item of display data.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Display {
    /// A file the run wrote (a figure). `path` is absolute as a backend gives it, and the
    /// workspace-display path once [`RunResult::show_paths`] ran, which also sets
    /// `real_path`, where the file really is.
    File {
        mime_type: String,
        path: String,
        real_path: Option<String>,
    },
    /// A shown object's text, and its HTML form if it has one.
    Text {
        mime_type: String,
        text: String,
        html: Option<String>,
    },
    /// Neither: only the type is known (a kernel's output of a kind toolbox does not keep).
    Other { mime_type: String },
}

impl RunResult {
    /// The driver's `result` of a `run` request (see the end of `_run` in driver.py: a
    /// field is there only when it holds something).
    pub fn from_driver(result: Value) -> RunResult {
        let mut out = RunResult::default();
        let Value::Object(fields) = result else {
            return out;
        };
        // One pass over what is there: most runs answer with one or two fields.
        for (key, value) in fields {
            match key.as_str() {
                "execution_count" => out.execution_count = value.as_u64(),
                "stdout" => out.stdout = string(value).unwrap_or_default(),
                "stderr" => out.stderr = string(value).unwrap_or_default(),
                "result" => out.value = Shown::from_driver(value),
                "display_data" => {
                    if let Value::Array(items) = value {
                        out.display_data = items.into_iter().map(Display::from_driver).collect();
                    }
                }
                "error" => out.error = RunError::from_driver(value),
                "interrupted" => out.interrupted = value == Value::Bool(true),
                "stopped" => out.stopped = string(value),
                "notes" => {
                    if let Value::Array(notes) = value {
                        out.notes = notes.into_iter().filter_map(string).collect();
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The structured form other providers get through the `python` `CodeRunner`:
    ///
    /// ```json
    /// {"execution_count": 3, "stdout": "…", "stderr": "…",
    ///  "result": {"text/plain": "2", "text/html": "…"},
    ///  "display_data": [{"mime_type": "image/png", "path": "output/figure-1.png",
    ///                    "real_path": ".toolbox/sessions/s1/output/figure-1.png"},
    ///                   {"mime_type": "text/plain", "text": "…", "html": "…"}],
    ///  "error": {"ename": "ZeroDivisionError", "evalue": "division by zero",
    ///            "traceback": "Traceback (most recent call last):\n  File \"<cell>\", …"},
    ///  "notes": ["…"]}
    /// ```
    ///
    /// `execution_count` is always there (`null` when a kernel did not say); every other
    /// field only when it holds something, as the driver sends it.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("execution_count".into(), json!(self.execution_count));
        for (key, text) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            if !text.is_empty() {
                out.insert(key.into(), text.as_str().into());
            }
        }
        if let Some(value) = &self.value {
            let mut shown = Map::new();
            shown.insert("text/plain".into(), value.plain.as_str().into());
            if let Some(html) = &value.html {
                shown.insert("text/html".into(), html.as_str().into());
            }
            out.insert("result".into(), Value::Object(shown));
        }
        if !self.display_data.is_empty() {
            let items = self.display_data.iter().map(Display::to_json).collect();
            out.insert("display_data".into(), Value::Array(items));
        }
        if let Some(error) = &self.error {
            let mut e = Map::new();
            e.insert("ename".into(), error.ename.as_str().into());
            e.insert("evalue".into(), error.evalue.as_str().into());
            if let Some(traceback) = &error.traceback {
                e.insert("traceback".into(), traceback.as_str().into());
            }
            out.insert("error".into(), Value::Object(e));
        }
        if self.interrupted {
            out.insert("interrupted".into(), true.into());
        }
        if let Some(stopped) = &self.stopped {
            out.insert("stopped".into(), stopped.as_str().into());
        }
        if !self.notes.is_empty() {
            out.insert("notes".into(), self.notes.clone().into());
        }
        Value::Object(out)
    }

    /// Puts a note before the others.
    pub fn add_note(&mut self, note: String) {
        self.notes.insert(0, note);
    }

    /// Absolute file paths from a backend → the short names the model uses (`output/…`),
    /// and where each file really is, for people and the rendered result.
    pub fn show_paths(&mut self, ctx: &ToolContext) {
        for item in &mut self.display_data {
            if let Display::File {
                path, real_path, ..
            } = item
            {
                let absolute = Path::new(path.as_str());
                let real = ctx.workspace.display_real(absolute);
                *path = ctx.workspace.display(absolute);
                *real_path = Some(real);
            }
        }
    }
}

impl Shown {
    fn from_driver(value: Value) -> Option<Shown> {
        let Value::Object(mut value) = value else {
            return None;
        };
        let plain = value.remove("text/plain").and_then(string)?;
        Some(Shown {
            plain,
            html: value.remove("text/html").and_then(string),
        })
    }
}

impl RunError {
    fn from_driver(error: Value) -> Option<RunError> {
        let Value::Object(mut error) = error else {
            return None;
        };
        let mut field = |key: &str| error.remove(key).and_then(string);
        Some(RunError {
            ename: field("ename").unwrap_or_else(|| "Error".into()),
            evalue: field("evalue").unwrap_or_default(),
            traceback: field("traceback"),
        })
    }
}

impl Display {
    fn from_driver(item: Value) -> Display {
        let Value::Object(mut item) = item else {
            return Display::Other {
                mime_type: "?".into(),
            };
        };
        let mut field = |key: &str| item.remove(key).and_then(string);
        let mime_type = field("mime_type").unwrap_or_else(|| "?".into());
        match (field("path"), field("text")) {
            (Some(path), _) => Display::File {
                mime_type,
                path,
                real_path: field("real_path"),
            },
            (None, Some(text)) => Display::Text {
                mime_type,
                text,
                html: field("html"),
            },
            (None, None) => Display::Other { mime_type },
        }
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        let mut put = |key: &str, text: &str| {
            out.insert(key.into(), text.into());
        };
        match self {
            Display::File {
                mime_type,
                path,
                real_path,
            } => {
                put("mime_type", mime_type);
                put("path", path);
                if let Some(real) = real_path {
                    put("real_path", real);
                }
            }
            Display::Text {
                mime_type,
                text,
                html,
            } => {
                put("mime_type", mime_type);
                put("text", text);
                if let Some(html) = html {
                    put("html", html);
                }
            }
            Display::Other { mime_type } => put("mime_type", mime_type),
        }
        Value::Object(out)
    }
}

fn string(value: Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text),
        _ => None,
    }
}

/// The driver's `{"ok": …}` answer as text → its `result`, or an error naming the tool.
pub(crate) fn parse_driver_response(text: &str, tool: &str) -> Result<Value> {
    let response: Value = serde_json::from_str(text.trim())
        .map_err(|e| anyhow!("{tool}: the Python driver sent an unreadable answer: {e}"))?;
    driver_result(response, tool)
}

/// The `result` of a driver answer (`{"ok": true, "result": …}`), or its error.
pub(crate) fn driver_result(mut response: Value, tool: &str) -> Result<Value> {
    if response["ok"] == Value::Bool(true) {
        return Ok(response["result"].take());
    }
    let message = response["error"]
        .as_str()
        .unwrap_or("(no message)")
        .to_string();
    bail!("{tool}: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_answers_are_parsed() {
        let ok = parse_driver_response(r#"{"ok": true, "result": {"x": 1}}"#, "t").unwrap();
        assert_eq!(ok["x"], 1);
        let e = parse_driver_response(r#"{"ok": false, "error": "boom"}"#, "t")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "t: boom");
        let e = parse_driver_response("garbage", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unreadable answer"), "{e}");
    }

    #[test]
    fn requests_leave_out_what_the_driver_must_not_see() {
        let mut request = RunRequest {
            source: Source::Code("x = 1".into()),
            session: "/w::s1".into(),
            folders: None,
            generation: 2,
            site_dirs: Vec::new(),
            trace: Vec::new(),
        };
        assert_eq!(
            request.clone().into_driver(),
            json!({"op": "run", "code": "x = 1", "session": "/w::s1", "generation": 2})
        );
        request.source = Source::Script {
            path: "/w/a.py".into(),
            args: vec!["-v".into()],
        };
        request.folders = Some(Folders {
            cwd: "/w/s".into(),
            output_dir: "/w/o".into(),
            root: "/w".into(),
        });
        request.site_dirs = vec!["/venv/site-packages".into()];
        assert_eq!(
            request.into_driver(),
            json!({"op": "run", "script_path": "/w/a.py", "args": ["-v"], "cwd": "/w/s",
                   "output_dir": "/w/o", "root": "/w", "session": "/w::s1", "generation": 2,
                   "site_dirs": ["/venv/site-packages"]})
        );
    }

    #[test]
    fn results_round_trip_through_the_code_runners_shape() {
        let sparse = json!({"execution_count": 1});
        let result = RunResult::from_driver(sparse.clone());
        assert_eq!(result.execution_count, Some(1));
        assert_eq!(result.to_json(), sparse);
        let full = json!({
            "execution_count": 3,
            "stdout": "hi\n",
            "stderr": "warn",
            "result": {"text/plain": "2", "text/html": "<b>2</b>"},
            "display_data": [
                {"mime_type": "image/png", "path": "output/figure-1.png",
                 "real_path": ".toolbox/sessions/s/output/figure-1.png"},
                {"mime_type": "text/plain", "text": "shown", "html": "<i>shown</i>"},
                {"mime_type": "application/pdf"}
            ],
            "error": {"ename": "ValueError", "evalue": "bad", "traceback": "Traceback …"},
            "interrupted": true,
            "stopped": "timed out after 5 ms",
            "notes": ["first", "second"]
        });
        let result = RunResult::from_driver(full.clone());
        assert!(result.interrupted);
        assert_eq!(result.to_json(), full);
        let mut noted = result;
        noted.add_note("zeroth".into());
        assert_eq!(noted.notes, ["zeroth", "first", "second"]);
        // A kernel that does not say its count.
        assert_eq!(
            RunResult::default().to_json(),
            json!({"execution_count": null})
        );
    }
}
