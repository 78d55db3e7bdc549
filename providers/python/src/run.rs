//! `run_python_code`: a cell or a script in the session's namespace, on either backend.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolOutput, ToolRisk, Vocabulary};
use toolbox_host::{RunFuture, SessionFolder, ToolContext};

use crate::backend::{self, Call, Folders, RunRequest, RunResult, Source};
use crate::config::{ensure_venv, Backend, PythonConfig};
use crate::sessions::Sessions;
use crate::{install, render, INTEGRATED_NOTEBOOK, TOOLSET};

pub(crate) const NAME: &str = "run_python_code";
/// The longest `timeout_ms` a call may ask for (a day).
const MAX_TIMEOUT_MS: u64 = 86_400_000;

// The arguments, read on every call: consts, so reading them costs what the raw reads did.
const CODE: Arg = Arg::string("code").aliases(&["content"]);
const SCRIPT_PATH: Arg = Arg::string("script_path");
const ARGS: Arg = Arg::strings("args").aliases(&["argv"]);
/// Without it, the configured timeout applies.
const TIMEOUT_MS: Arg = Arg::integer("timeout_ms", 1, Some(MAX_TIMEOUT_MS));

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Run Python in this session's live interpreter, like a Jupyter cell. Variables, \
         imports and functions persist between calls of the same session (other sessions never \
         see them). The value of a final expression is shown, as in a notebook (`df.head()` \
         shows the table); print() anything else. The working directory is the session \
         scratchpad, whose absolute path is also in the environment variable \
         PYTHON_EXEC_SCRATCHPAD (for temporary files); the variable OUTPUT_DIR holds the session's output folder (output/) for \
         files meant for the user. matplotlib figures left open are saved there as PNG and \
         listed. Instead of code, script_path runs a .py file of the workspace (or a \
         skill's script, skill:<name>/scripts/x.py) as __main__ with args as sys.argv[1:]; \
         its top-level names then stay in the session. An \
         exception comes back as its traceback (lines of your code are named <cell>). Install \
         packages with kernel_install, not with pip in code. Plain Python only: no % magics or \
         ! shell lines. Never use subprocess to run another Python script: use script_path. \
         Temporary files go to the scratchpad; deliverables go to output/ (OUTPUT_DIR).",
        object(&[
            CODE.doc("Python source to run (a cell). Give either code or script_path."),
            SCRIPT_PATH.doc(
                "A .py file in the workspace to run as __main__ instead of code, or a skill's \
                 script as skill:<name>/<path>.",
            ),
            ARGS.doc("Command-line arguments for script_path (sys.argv[1:])."),
            TIMEOUT_MS.doc(
                "Stop the code after this many milliseconds (default from the configuration, \
                 normally 300000).",
            ),
        ]),
    )
    .risk(ToolRisk::Code)
    .aliases(&["python", "python_exec"])
    // `python_interpreter` is the sidecar's name for the provider of run_python_code alone.
    .toolsets(&[TOOLSET, INTEGRATED_NOTEBOOK, "python_interpreter"])
    .named(Vocabulary::DataAgent, "python_exec")
    .output_schema(render::output_schema())
}

pub(crate) async fn run_tool(
    sessions: &'static Sessions,
    args: Value,
    ctx: &ToolContext,
) -> Result<ToolOutput> {
    let a = Args::new(NAME, &args)?;
    let code = CODE.opt_str(&a)?;
    let script = SCRIPT_PATH.opt_nonempty_str(&a)?;
    // Clients that must send every property send [] (or null) for args they do not use.
    let script_args = ARGS.opt_str_list(&a)?.filter(|list| !list.is_empty());
    let config = PythonConfig::from_ctx(ctx)?;
    let timeout_ms = match TIMEOUT_MS.opt_u64(&a)? {
        Some(ms) => ms,
        // The configured default is held to the argument's bounds too, as it always was.
        None => {
            let ms = config.timeout.as_millis() as u64;
            if ms > MAX_TIMEOUT_MS {
                bail!(
                    "{NAME}: argument `timeout_ms` must be between 1 and {MAX_TIMEOUT_MS}, got {ms}"
                );
            }
            ms
        }
    };
    a.finish()?;
    let source = match (code, script) {
        // An empty `code` beside a script is a client filling in every property, not a cell.
        (Some(code), Some(_)) if !code.trim().is_empty() => {
            bail!("{NAME}: give either code or script_path, not both")
        }
        (None, None) => bail!("{NAME} requires code (or script_path)"),
        (Some(code), None) => {
            if script_args.is_some() {
                bail!("{NAME}: argument `args` only applies to script_path");
            }
            Source::Code(code.to_string())
        }
        (_, Some(path)) => {
            // `skill:<name>/scripts/x.py` is a skill's script, found through the skill
            // provider's hook and jailed to that skill's folder.
            let abs = if toolbox_host::is_skill_ref(path) {
                toolbox_host::resolve_skill_file(path, ctx, NAME)?.path
            } else {
                ctx.workspace
                    .resolve_existing(path)
                    .map_err(|e| anyhow!("{NAME}: {e}"))?
            };
            if !abs.is_file() {
                bail!("{NAME}: script_path {path:?} is not a file");
            }
            if abs.extension().and_then(|e| e.to_str()) != Some("py") {
                bail!("{NAME}: script_path {path:?} is not a .py file");
            }
            Source::Script {
                path: abs.to_string_lossy().into_owned(),
                args: script_args
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string)
                    .collect(),
            }
        }
    };
    // The session's first run in this process that also makes its scratchpad (a session new
    // to this workspace) says where Python runs; later runs do not repeat it.
    let new_scratchpad =
        sessions.first_result_of(ctx) && !ctx.workspace.session_dir("scratchpad").exists();
    let result = execute(
        sessions,
        &config,
        source,
        ctx,
        Duration::from_millis(timeout_ms),
        NAME,
    )
    .await?;
    let mut text = render::render(&result);
    let mut structured = render::structured(&result);
    // An attached kernel keeps its own working folder: toolbox does not choose it.
    let in_scratchpad = !matches!(config.kernel, Some(crate::config::KernelTarget::Attach(_)))
        || config.backend != crate::config::Backend::Jupyter;
    if in_scratchpad && new_scratchpad {
        // A model that writes `open("output/x.csv", "w")` must know that it lands in the
        // scratchpad, not in the session's output folder.
        let folder = ctx
            .workspace
            .display_real(&ctx.workspace.session_dir("scratchpad"));
        // First, as the driver's own notes are.
        let note = format!(
            "{WORKING_FOLDER_NOTE}, {folder}: relative paths in your code are relative to \
             that folder, not to the workspace root"
        );
        text.insert_str(0, &format!("{note}\n"));
        if let Some(Value::Array(notes)) = structured.get_mut("notes") {
            notes.insert(
                0,
                Value::String(note.trim_start_matches("note: ").to_string()),
            );
        }
    }
    Ok(ToolOutput::new(text, structured))
}

/// The start of the note a new session's first result begins with (see `run_tool`).
pub const WORKING_FOLDER_NOTE: &str = "note: Python runs in this session's scratchpad";

/// What a run would do, for the person asked to approve it: the code with line numbers (or
/// the script and its arguments), in which session's interpreter and working folder.
/// Changes nothing.
pub(crate) fn preview(args: &Value, ctx: &ToolContext) -> Option<toolbox_core::Preview> {
    let a = Args::new(NAME, args).ok()?;
    let code = CODE.opt_str(&a).ok()?;
    let script = SCRIPT_PATH.opt_nonempty_str(&a).ok()?;
    let folder = ctx
        .workspace
        .display_real(&ctx.workspace.session_dir("scratchpad"));
    let place = format!(
        "in session {}'s interpreter (working folder {folder})",
        ctx.session_id
    );
    match (script, code) {
        (Some(path), _) => {
            let shown = if toolbox_host::is_skill_ref(path) {
                path.to_string()
            } else {
                match ctx.workspace.locate(path) {
                    Ok(p) => ctx.workspace.show_real(&p),
                    Err(e) => {
                        return Some(toolbox_core::Preview::new(format!(
                            "Run a Python script: this will fail: {e}"
                        )))
                    }
                }
            };
            let script_args = ARGS.opt_str_list(&a).ok().flatten().unwrap_or_default();
            let mut preview =
                toolbox_core::Preview::new(format!("Run the Python script {shown} {place}"));
            if !script_args.is_empty() {
                preview = preview.fields(&[("arguments", script_args.join(" "))]);
            }
            Some(preview)
        }
        (None, Some(code)) => {
            Some(toolbox_core::Preview::new(format!("Run Python {place}")).code(code))
        }
        (None, None) => None,
    }
}

/// The [`toolbox_host::CodeRunner`] for `python`: runs `code` as a cell in the caller's
/// session, with the configured backend and default timeout, and returns the result in the
/// shape `RunResult::to_json` shows (`crate::backend`): `execution_count` always, every other
/// field only when it holds something.
pub fn code_runner<'a>(code: &'a str, ctx: &'a ToolContext) -> RunFuture<'a> {
    Box::pin(async move {
        let config = PythonConfig::from_ctx(ctx)?;
        let tool = ctx.tool.clone();
        let source = Source::Code(code.to_string());
        let sessions = Sessions::shared();
        let result = execute(sessions, &config, source, ctx, config.timeout, &tool).await?;
        Ok(result.to_json())
    })
}

/// Runs a cell or a script in the session on the configured backend and returns its result.
///
/// Paths in the display data are workspace-display paths (resolve them with
/// `ctx.workspace.resolve`). An exception raised by the user's code is a normal result with
/// `error` set; a timeout, a cancellation, a crashed worker or a busy interpreter is an `Err`
/// whose message says what happened to the session (and includes whatever output the code
/// produced first).
pub(crate) async fn execute(
    sessions: &'static Sessions,
    config: &PythonConfig,
    source: Source,
    ctx: &ToolContext,
    timeout: Duration,
    tool: &str,
) -> Result<RunResult> {
    let limits = toolbox_host::limits::Limits::from_config(&ctx.config)
        .map_err(|e| anyhow!("{tool}: invalid configuration: {e:#}"))?;
    // For a kernel, the venv is only where its kernelspec is looked up: never created here.
    if config.backend != Backend::Jupyter {
        ensure_venv(config, ctx).await?;
    }
    // Before the code runs: whatever it starts is inside toolbox's containment.
    let containment = toolbox_host::containment::ensure();
    // Both folders are made if missing, on every run (code may have deleted them); their
    // paths are only built when they are told.
    let cwd = ctx
        .workspace
        .hold_folder(SessionFolder::Scratchpad)
        .map_err(|e| anyhow!("{tool}: cannot create the session scratchpad: {e}"))?;
    ctx.workspace
        .hold_folder(SessionFolder::Output)
        .map_err(|e| anyhow!("{tool}: cannot create the session output folder: {e}"))?;
    let sandbox = sandbox_for(ctx, config, tool)?;
    let call = Call {
        ctx,
        config,
        tool,
        timeout,
        cwd,
        limits,
        look: sessions.on_call(config.session_limits),
        sandbox,
    };
    // The embedded backend's future is held inline; the others are boxed. A future is as
    // large as its largest branch, and the jupyter one (about 6 KB) would otherwise be
    // copied into every call's box whichever backend runs: callgrind counted 14k
    // instructions a call of memcpy for it (bench/BASELINE.md).
    let outcome = match config.backend {
        Backend::Embedded => match crate::embedded::unavailable(config).await? {
            None => run_on(&sessions.embedded(), source, &call).await,
            Some(why) => {
                let mut outcome = Box::pin(run_on(&sessions.isolated(), source, &call)).await;
                if let Ok(result) = &mut outcome {
                    if first_fallback(&crate::common::session_key(ctx)) {
                        result.add_note(format!(
                            "this session runs on the isolated backend (a worker process), \
                             not the embedded one: {why}"
                        ));
                    }
                }
                outcome
            }
        },
        Backend::Isolated => Box::pin(run_on(&sessions.isolated(), source, &call)).await,
        Backend::Jupyter => Box::pin(run_on(&sessions.jupyter(), source, &call)).await,
    };
    // Without cgroups, the janitor learns what the code left running (see containment).
    containment.note_descendants();
    let mut result = outcome?;
    result.show_paths(ctx);
    if result.interrupted {
        let why = result.stopped.as_deref().unwrap_or("was stopped");
        // ExecutionInterrupted in-process; KeyboardInterrupt in a Jupyter kernel.
        let raised = result
            .error
            .as_ref()
            .map_or("an interrupt", |e| e.ename.as_str());
        bail!(
            "{tool} {why}: the code was interrupted ({raised} was raised inside it). The \
             session is intact: variables assigned before the interrupt are kept.\n\n{}",
            render::render(&result)
        );
    }
    Ok(result)
}

/// Sessions already told that their calls run on the isolated backend because the embedded
/// one cannot start here; true the first time for `key`.
fn first_fallback(key: &str) -> bool {
    static TOLD: std::sync::Mutex<Option<std::collections::HashSet<String>>> =
        std::sync::Mutex::new(None);
    let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
    let told = told.get_or_insert_with(Default::default);
    if told.len() >= 10_000 {
        told.clear();
    }
    told.insert(key.to_string())
}

/// The request for `source` in the call's session, run on `backend`.
async fn run_on(
    backend: &impl backend::Backend,
    source: Source,
    call: &Call<'_>,
) -> Result<RunResult> {
    let ctx = call.ctx;
    let session = crate::common::session_key(ctx);
    // The folders' paths are only built when the backend needs to be told them.
    let folders = backend.needs_folders(&session).then(|| {
        let path = |folder: SessionFolder| {
            ctx.workspace
                .session_dir(folder.as_str())
                .to_string_lossy()
                .into_owned()
        };
        Folders {
            cwd: path(SessionFolder::Scratchpad),
            output_dir: path(SessionFolder::Output),
            root: ctx.workspace.root().to_string_lossy().into_owned(),
        }
    });
    let request = RunRequest {
        source,
        session,
        folders,
        generation: install::generation(),
        site_dirs: Vec::new(),
        trace: ctx.trace_env(),
    };
    backend.run(request, call).await
}

/// `[python] sandbox` for this session's worker: the shell's sandbox (writes only in the
/// workspace and the temp dir), with `toolbox.toml`, `.git/` and `.toolbox/` read-only but
/// for this session's own folders, so code cannot rewrite toolbox's records or a review.
fn sandbox_for(
    ctx: &ToolContext,
    config: &PythonConfig,
    tool: &str,
) -> Result<Option<std::sync::Arc<toolbox_host::sandbox::PreparedSandbox>>> {
    use toolbox_host::sandbox::{PreparedSandbox, ProtectSpec, SandboxMode};
    if config.sandbox == SandboxMode::Off {
        return Ok(None);
    }
    // Every session folder exists before the worker starts: inside, the rest of .toolbox/
    // is read-only and they could not be made there.
    for kind in [
        SessionFolder::Scratchpad,
        SessionFolder::Output,
        SessionFolder::Input,
    ] {
        ctx.workspace
            .hold_folder(kind)
            .map_err(|e| anyhow!("{tool}: cannot create the session folders: {e}"))?;
    }
    let root = ctx.workspace.root().to_path_buf();
    let temp = std::env::temp_dir();
    let temp = std::fs::canonicalize(&temp).unwrap_or(temp);
    let protect = ProtectSpec {
        root: root.clone(),
        keep_writable: ["scratchpad", "output", "input"]
            .iter()
            .map(|kind| ctx.workspace.session_dir(kind))
            .collect(),
        cwd: ctx.workspace.session_dir("scratchpad"),
    };
    PreparedSandbox::prepare(
        config.sandbox,
        config.sandbox_network,
        &[root, temp],
        Some(&protect),
    )
    .map(|s| Some(std::sync::Arc::new(s)))
    .map_err(|e| {
        anyhow!(
            "{tool}: the OS sandbox ([python] sandbox = \"{}\") cannot be enforced here, so \
             the code was not run: {e:#}",
            config.sandbox.as_str()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn argument_errors_name_the_argument() {
        let (_d, ctx) = setup(NAME, "args", json!({}));
        let e = call(&ctx, NAME, json!({})).await.unwrap_err();
        assert_eq!(e, "run_python_code requires code (or script_path)");
        let e = call(&ctx, NAME, json!({"code": "1", "script_path": "a.py"}))
            .await
            .unwrap_err();
        assert!(e.contains("either code or script_path, not both"), "{e}");
        let e = call(&ctx, NAME, json!({"code": "1", "cwd": "/"}))
            .await
            .unwrap_err();
        assert!(e.contains("unknown argument `cwd`"), "{e}");
        let e = call(&ctx, NAME, json!({"code": "1", "timeout_ms": "soon"}))
            .await
            .unwrap_err();
        assert!(
            e.contains("`timeout_ms` must be a non-negative integer"),
            "{e}"
        );
        // The bounds the schema states are the bounds a call is held to.
        let e = call(&ctx, NAME, json!({"code": "1", "timeout_ms": 86_400_001}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "run_python_code: argument `timeout_ms` must be between 1 and 86400000, got 86400001"
        );
        let e = call(&ctx, NAME, json!({"script_path": "../x.py"}))
            .await
            .unwrap_err();
        assert!(e.contains("outside the workspace"), "{e}");
        // What a strict-mode client sends for a script: an empty code and empty args are
        // the properties it could not leave out, so the script is what is meant.
        let e = call(
            &ctx,
            NAME,
            json!({"code": "", "script_path": "../x.py", "args": [], "timeout_ms": null}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("outside the workspace"), "{e}");
        let e = call(
            &ctx,
            NAME,
            json!({"code": null, "script_path": "", "args": null}),
        )
        .await
        .unwrap_err();
        assert_eq!(e, "run_python_code requires code (or script_path)");
        std::fs::write(ctx.workspace.root().join("data.csv"), "a,b\n").unwrap();
        let e = call(&ctx, NAME, json!({"script_path": "data.csv"}))
            .await
            .unwrap_err();
        assert!(e.contains("is not a .py file"), "{e}");
        let e = call(&ctx, NAME, json!({"code": "1", "args": ["x"]}))
            .await
            .unwrap_err();
        assert!(e.contains("`args` only applies to script_path"), "{e}");
        // This crate's tests do not link the skill provider: a skill script is refused
        // with a message saying why, before any interpreter starts.
        let e = call(
            &ctx,
            NAME,
            json!({"script_path": "skill:report/scripts/r.py"}),
        )
        .await
        .unwrap_err();
        assert!(
            e.starts_with("run_python_code: \"skill:report/scripts/r.py\" names a skill's file")
                && e.contains("without the skill provider"),
            "{e}"
        );
        let (_d, bad) = setup(NAME, "args", json!({"backend": "docker"}));
        let e = call(&bad, NAME, json!({"code": "1"})).await.unwrap_err();
        assert!(e.contains("backend must be"), "{e}");
    }
}
