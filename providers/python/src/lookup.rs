//! `registry_lookup`: find public functions and classes of an importable package.
//!
//! A Read tool, allowed in `read_only` mode, so it must run no code of the workspace: a
//! module planted by an approved file write must not turn into Python execution. The search
//! runs in a fresh process of the found interpreter (or of a configured venv that lies
//! *outside* the workspace) started with `-I` (isolated mode: no script directory or current
//! directory on `sys.path`, `PYTHON*` variables and the user site ignored), in `/`, with an
//! empty environment (only `PATH`, `MPLBACKEND` and `LD_LIBRARY_PATH`), and the driver drops
//! any `sys.path` entry inside the workspace (say one a `.pth` file added) before importing.
//! So a lookup resolves the standard library and the interpreter's own site-packages only:
//! code the operator installed, which the workspace tools cannot write. A venv inside the
//! workspace is workspace data (its site-packages and `.pth` files are files a model can
//! write), so it is never used, and a lookup never creates a venv.
//!
//! Importing a package runs its code, and a walk over hundreds of submodules must be
//! killable, so the process is its own process group, killed when the call ends, after
//! 30 seconds, or on cancellation; its answer is bounded. Submodules whose names start with
//! `_` or are test packages are skipped, and the walk stops after 400 modules or 10 seconds.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::config::PythonConfig;
use crate::{DRIVER_SOURCE, INTEGRATED_NOTEBOOK, TOOLSET};

pub const NAME: &str = "registry_lookup";
const TIMEOUT: Duration = Duration::from_secs(30);
const WALK_BUDGET_S: f64 = 10.0;
const MAX_MODULES: u64 = 400;
/// An answer longer than this (a few KiB is usual) is refused rather than read.
const MAX_ANSWER_BYTES: u64 = 4 << 20;
/// How much of the process's stderr (import noise, a crash report) is kept for errors.
const STDERR_TAIL_BYTES: usize = 4096;
/// The only `PATH` the lookup process gets: never a folder of the workspace.
const NEUTRAL_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

const QUERY: Arg = Arg::string("query").required();
const PACKAGE: Arg = Arg::string("package").aliases(&["module"]);
const LIMIT: Arg = Arg::integer("limit", 1, Some(50)).default(10);

/// Appended to the driver: one request line from stdin, one answer line on stdout. Runs
/// instead of the driver's `--serve` loop (which would put the working directory on
/// `sys.path`, as a notebook does).
const LOOKUP_MAIN: &str = r#"

def _lookup_main():
    # The answer goes to a private copy of stdout; what imports print goes to stderr.
    answer = os.fdopen(os.dup(1), "w", encoding="utf-8")
    line = sys.stdin.readline()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = io.StringIO("")
    # -I keeps the current and script directories off sys.path; this also drops whatever
    # a .pth file put there from inside the workspace. The interpreter's own folders stay
    # even if the workspace contains them: they are the operator's.
    req = json.loads(line)
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    banned = [os.path.realpath(p) for p in req.get("exclude") or []]

    def under(path, roots):
        return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)

    def allowed(entry):
        if not entry:
            return False
        real = os.path.realpath(entry)
        return under(real, own) or not under(real, banned)

    sys.path[:] = [p for p in sys.path if allowed(p)]
    sys.path_importer_cache.clear()
    answer.write(handle(line) + "\n")
    answer.flush()


if "--lookup" in sys.argv[1:]:
    _lookup_main()
"#;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search the public API of an importable Python package for functions, classes and \
         methods by name and docstring. Returns signatures and the first paragraph of their \
         documentation, best first (exact name, then prefix, then substring, then docstring \
         match). Use it to find the right call before writing code: query \"read_csv\" with \
         package \"pandas\", or query \"json.dumps\". Without package only module names are \
         matched. Searches the standard library and the packages installed for the interpreter \
         (importing them runs their code); never modules in the workspace or its session \
         folders, nor a venv inside the workspace.",
        object(&[
            QUERY.doc("A name or a few words, e.g. \"read_csv\", \"mean\", \"parse date\"."),
            PACKAGE.doc("The importable package or module to search, e.g. \"pandas\", \"json\"."),
            LIMIT.doc("At most this many results (1-50, default 10)."),
        ]),
    )
    // `omicverse_lookup` is the sidecar's name for the provider of this lookup alone.
    .toolsets(&[TOOLSET, INTEGRATED_NOTEBOOK, "omicverse_lookup"])
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let query = QUERY.str(&a)?.trim();
    if query.is_empty() {
        bail!("{NAME}: argument `query` is empty");
    }
    let package = PACKAGE.opt_nonempty_str(&a)?.map(str::trim);
    if let Some(package) = package {
        let valid = !package.is_empty()
            && package.split('.').all(|part| {
                part.starts_with(|c: char| c.is_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_alphanumeric() || c == '_')
            });
        if !valid {
            bail!("{NAME}: argument `package` {package:?} is not an importable module name (like pandas or os.path)");
        }
    }
    let limit = LIMIT.u64(&a)?;
    a.finish()?;
    let config = PythonConfig::from_ctx(ctx)?;
    let root = ctx.workspace.root();
    // The lookup's interpreter runs inside toolbox's containment like every tool process.
    toolbox_host::containment::ensure();
    let request = json!({
        "op": "lookup",
        "query": query,
        "package": package,
        "limit": limit,
        "budget_s": WALK_BUDGET_S,
        "max_modules": MAX_MODULES,
        "exclude": [root],
    });
    let python = interpreter(&config, root).map_err(|e| anyhow!("{NAME}: {e:#}"))?;
    let found = one_shot(&request, ctx, &python).await?;
    Ok(Value::String(render(query, &found)))
}

/// The python of the venv `kernel_install` fills (the configured one, else the per-user
/// one) when that venv exists and lies outside the workspace (the operator's, filled only by
/// approved `kernel_install` calls), else the found interpreter.
fn interpreter(config: &PythonConfig, root: &Path) -> Result<PathBuf> {
    let venv = config
        .install_venv()
        .ok()
        .and_then(|venv| std::fs::canonicalize(venv.path).ok())
        .filter(|venv| !venv.starts_with(root) && venv.join("pyvenv.cfg").is_file())
        .map(|venv| venv.join("bin").join("python"))
        .filter(|python| python.is_file());
    match venv {
        Some(python) => Ok(python),
        None => Ok(config.found()?.executable.clone()),
    }
}

/// Runs the lookup request in a fresh isolated process, killed (with everything it started)
/// when the call ends.
async fn one_shot(request: &Value, ctx: &ToolContext, interpreter: &Path) -> Result<Value> {
    let mut command = Command::new(interpreter);
    command
        .arg("-I")
        .arg("-c")
        .arg(format!("{DRIVER_SOURCE}{LOOKUP_MAIN}"))
        .arg("--lookup")
        .current_dir("/")
        .env_clear()
        .env("PATH", NEUTRAL_PATH)
        .env("MPLBACKEND", "Agg")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // As for every worker (see common::python_command): the interpreter's libdir first, so
    // that a shared-library Python loads its own libpython; the rest for native extensions.
    if let Some(paths) =
        crate::common::library_path().or_else(|| std::env::var_os("LD_LIBRARY_PATH"))
    {
        command.env("LD_LIBRARY_PATH", paths);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("{NAME}: cannot start {}", interpreter.display()))?;
    let group = ProcessGroup(child.id());
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        bail!("{NAME}: the Python process's pipes were not set up");
    };
    // Keep the tail of stderr; read it all so the process never blocks on a full pipe.
    let tail = Arc::new(Mutex::new(Vec::new()));
    let sink = tail.clone();
    let stderr_reader = tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
            let mut tail = sink.lock().unwrap_or_else(|e| e.into_inner());
            tail.extend_from_slice(&chunk[..n]);
            let excess = tail.len().saturating_sub(STDERR_TAIL_BYTES);
            tail.drain(..excess);
        }
    });
    let exchange = async {
        let mut line = request.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes()).await?;
        drop(stdin);
        let mut answer = Vec::new();
        BufReader::new(stdout.take(MAX_ANSWER_BYTES + 1))
            .read_until(b'\n', &mut answer)
            .await?;
        std::io::Result::Ok(answer)
    };
    let outcome = tokio::select! {
        answer = exchange => answer.map_err(|e| anyhow!("{NAME}: cannot talk to the Python process: {e}")),
        _ = tokio::time::sleep(TIMEOUT) => Err(anyhow!("{NAME} timed out after {} s", TIMEOUT.as_secs())),
        _ = ctx.cancel.cancelled() => Err(anyhow!("{NAME} was cancelled")),
    };
    let answer = match outcome {
        Ok(answer) if answer.len() as u64 > MAX_ANSWER_BYTES => {
            bail!("{NAME}: the answer was longer than {MAX_ANSWER_BYTES} bytes; try a narrower package or a lower limit")
        }
        Ok(answer) if !answer.is_empty() => answer,
        Ok(_) => {
            // No answer: the process ended (a crash while importing, say).
            let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
            drop(group);
            let _ = tokio::time::timeout(Duration::from_secs(1), stderr_reader).await;
            let how = match status {
                Ok(Ok(status)) => describe(status),
                _ => "stopped answering".to_string(),
            };
            let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            let tail = String::from_utf8_lossy(&tail);
            let tail = tail.trim();
            if tail.is_empty() {
                bail!("{NAME}: the Python process {how}");
            }
            bail!("{NAME}: the Python process {how}; its last words:\n{tail}");
        }
        Err(e) => return Err(e),
    };
    drop(group);
    crate::backend::parse_driver_response(&String::from_utf8_lossy(&answer), NAME)
}

/// Kills the lookup's process group when dropped: the interpreter and anything an import
/// started.
struct ProcessGroup(Option<u32>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // A process group we created; a stale id is harmless (ESRCH).
            toolbox_host::sandbox::signal_group(pid, toolbox_host::sandbox::Signal::KILL);
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(signal)) => format!("was killed by signal {signal}"),
        (Some(code), _) => format!("exited with status {code}"),
        _ => "ended".to_string(),
    }
}

fn render(query: &str, found: &Value) -> String {
    let matches = found["matches"].as_array().cloned().unwrap_or_default();
    let total = found["total"].as_u64().unwrap_or(matches.len() as u64);
    let place = match found["package"].as_str() {
        Some(p) => format!(
            "in {p} ({} modules searched)",
            found["modules_searched"].as_u64().unwrap_or(0)
        ),
        None => "among importable module names".to_string(),
    };
    let mut out = if matches.is_empty() {
        format!("{NAME}: nothing matches {query:?} {place}\n")
    } else {
        format!(
            "{NAME}: {} of {total} matches for {query:?} {place}\n",
            matches.len()
        )
    };
    for (i, m) in matches.iter().enumerate() {
        let name = m["name"].as_str().unwrap_or("?");
        let kind = m["kind"].as_str().unwrap_or("?");
        let signature = m["signature"].as_str().unwrap_or(name);
        out.push_str(&format!("\n{}. {name} [{kind}]\n", i + 1));
        if signature != name {
            out.push_str(&format!("   {signature}\n"));
        }
        if let Some(summary) = m["summary"].as_str().filter(|s| !s.is_empty()) {
            out.push_str(&format!("   {summary}\n"));
        }
    }
    if let Some(notes) = found["notes"].as_array() {
        for note in notes.iter().filter_map(Value::as_str) {
            out.push_str(&format!("\nnote: {note}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    #[tokio::test]
    async fn finds_stdlib_functions_ranked() {
        let (_d, ctx) = setup(NAME, "lookup", json!({}));
        let text = call(&ctx, NAME, json!({"query": "dumps", "package": "json"}))
            .await
            .unwrap();
        let first = text.lines().find(|l| l.starts_with("1. ")).unwrap();
        assert_eq!(first, "1. json.dumps [function]", "{text}");
        assert!(text.contains("dumps(obj, *, skipkeys=False"), "{text}");
        assert!(
            text.contains("Serialize ``obj`` to a JSON formatted ``str``"),
            "{text}"
        );
        // `loads` is found by name too, and json.tool (a submodule) was walked.
        let text = call(&ctx, NAME, json!({"query": "loads", "package": "json"}))
            .await
            .unwrap();
        assert!(text.contains("1. json.loads [function]"), "{text}");

        let text = call(
            &ctx,
            NAME,
            json!({"query": "mean", "package": "statistics", "limit": 3}),
        )
        .await
        .unwrap();
        let ranked: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(". statistics."))
            .collect();
        assert_eq!(ranked.len(), 3, "{text}");
        // Exact name first, then names starting with it (fmean, geometric_mean… are substrings).
        assert_eq!(ranked[0], "1. statistics.mean [function]", "{text}");
        assert!(
            text.contains("Return the sample arithmetic mean of data."),
            "{text}"
        );

        // A dotted query names its package.
        let text = call(&ctx, NAME, json!({"query": "json.dumps"}))
            .await
            .unwrap();
        assert!(text.contains("1. json.dumps [function]"), "{text}");
        // Docstring hits rank below name hits but are found.
        let text = call(
            &ctx,
            NAME,
            json!({"query": "arithmetic", "package": "statistics"}),
        )
        .await
        .unwrap();
        assert!(text.contains("statistics.mean [function]"), "{text}");
    }

    #[tokio::test]
    async fn what_imports_print_does_not_spoil_the_answer() {
        let (_d, ctx) = setup(NAME, "lookup", json!({}));
        // `this` prints the Zen of Python when imported.
        let text = call(&ctx, NAME, json!({"query": "rot13", "package": "this"}))
            .await
            .unwrap();
        assert!(
            text.starts_with("registry_lookup: nothing matches"),
            "{text}"
        );
    }

    #[test]
    fn only_a_venv_outside_the_workspace_is_used() {
        let workspace = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(workspace.path()).unwrap();
        for venv in [root.join("venv"), outside.path().join("venv")] {
            std::fs::create_dir_all(venv.join("bin")).unwrap();
            std::fs::write(venv.join("pyvenv.cfg"), "").unwrap();
            std::fs::write(venv.join("bin").join("python"), "").unwrap();
        }
        let with = |venv: &str| {
            let table = json!({ "venv": venv });
            PythonConfig::from_value(Some(&table), &root).unwrap()
        };
        let build = crate::discover::find(None).unwrap().executable.clone();
        assert_eq!(interpreter(&with("venv"), &root).unwrap(), build);
        let theirs = std::fs::canonicalize(outside.path()).unwrap().join("venv");
        assert_eq!(
            interpreter(&with(theirs.to_str().unwrap()), &root).unwrap(),
            theirs.join("bin").join("python")
        );
        // Missing: the found interpreter, and nothing is created.
        assert_eq!(
            interpreter(&with("/nonexistent/venv"), &root).unwrap(),
            build
        );
        assert_eq!(
            interpreter(&PythonConfig::from_value(None, &root).unwrap(), &root).unwrap(),
            build
        );
    }

    #[tokio::test]
    async fn errors_are_clear() {
        let (_d, ctx) = setup(NAME, "lookup", json!({}));
        let e = call(
            &ctx,
            NAME,
            json!({"query": "x", "package": "no_such_pkg_xyz"}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("cannot import no_such_pkg_xyz"), "{e}");
        let e = call(&ctx, NAME, json!({"query": "x", "package": "../etc"}))
            .await
            .unwrap_err();
        assert!(e.contains("not an importable module name"), "{e}");
        let e = call(&ctx, NAME, json!({"query": " "})).await.unwrap_err();
        assert!(e.contains("`query` is empty"), "{e}");
        let e = call(&ctx, NAME, json!({"query": "x", "limit": 0}))
            .await
            .unwrap_err();
        assert!(e.contains("between 1 and 50"), "{e}");
    }
}
