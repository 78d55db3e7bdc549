//! `kernel_install`: `pip install` into a venv: the operator's `[python] venv`, else the
//! per-user venv (`$XDG_DATA_HOME/toolbox/venv`, else `~/.local/share/toolbox/venv`, made on
//! first use), never the found interpreter's own site-packages nor a project's `.venv`; with
//! the jupyter backend, into the interpreter the kernel runs (its `sys.executable`, asked of
//! the kernel). Embedded and isolated runs import from that venv (see
//! `PythonConfig::import_site_dirs`).
//!
//! The model names packages; it never passes pip options. Entries are checked one by one and
//! anything that is not a plain requirement (`name`, `name[extra]`, `name>=1,<2`) is refused
//! with a message naming the entry: options (`-r`, `--target`, …), whitespace (an option
//! smuggled inside an entry), paths and URLs (`/`, `:`, `@`) and local files. Whoever runs
//! toolbox can add pip arguments with `[python] pip_args` (an offline wheelhouse, say).
//!
//! pip runs as `<interpreter> -E -m pip install … -- <packages>` in its own process group;
//! each output line is a progress event; a timeout or cancellation kills the group. After a
//! successful install the install generation goes up, and the next run in any session calls
//! `importlib.invalidate_caches()` first, so the new package imports without a restart.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::ToolContext;

use crate::config::{ensure_venv_at, Backend, PythonConfig};
use crate::sessions::Sessions;
use crate::TOOLSET;

pub const NAME: &str = "kernel_install";
/// At most this many packages per call.
const MAX_PACKAGES: usize = 50;
/// Lines of pip output kept for the result.
const TAIL_LINES: usize = 40;

const PACKAGES: Arg = Arg::strings("packages").aliases(&["package"]).required();
const UPGRADE: Arg = Arg::boolean("upgrade");
const INDEX_URL: Arg = Arg::string("index_url");

static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Goes up after every successful install; runs compare it to decide whether to refresh the
/// import system's caches.
pub fn generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Install Python packages with pip into toolbox's per-user venv (or the venv the \
         operator configured), never into the system Python or a project .venv, so the live \
         session can import them right away, without a restart. packages \
         are requirement strings: a name with optional extras and version specifiers, e.g. \
         [\"pandas\", \"scikit-learn>=1.4\", \"requests[socks]==2.32.3\"]. Only requirements: \
         pip options, requirement files, paths and URLs are refused. Modules already imported \
         keep their old version until the session restarts. Use registry_lookup afterwards to \
         find a package's functions.",
        object(&[
            PACKAGES
                .doc("Requirements to install, one per entry, e.g. \"numpy\" or \"polars>=1.0\"."),
            UPGRADE.doc("Upgrade packages that are already installed (default false)."),
            INDEX_URL.doc("Another package index (an http or https URL) instead of the default."),
        ]),
    )
    .risk(ToolRisk::Code)
    .aliases(&["python_package"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "python_package")
}

pub(crate) async fn run(sessions: &Sessions, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let packages = PACKAGES
        .opt_str_list(&a)?
        .ok_or_else(|| a.missing(PACKAGES.name))?;
    if packages.is_empty() {
        bail!("{NAME}: argument `packages` is empty; name at least one package");
    }
    if packages.len() > MAX_PACKAGES {
        bail!(
            "{NAME}: argument `packages` has {} entries; at most {MAX_PACKAGES} per call",
            packages.len()
        );
    }
    for entry in &packages {
        check_requirement(entry)?;
    }
    let upgrade = UPGRADE.bool(&a)?;
    let index_url = INDEX_URL.opt_nonempty_str(&a)?;
    a.finish()?;
    if let Some(url) = index_url {
        check_index_url(url)?;
    }
    let config = PythonConfig::from_ctx(ctx)?;
    // A kernel's packages go into the kernel's own interpreter, as the kernel itself names
    // it: an attached kernel may run any Python, anywhere.
    // Otherwise they go into a venv, never the found interpreter's own site-packages: the
    // operator's `[python] venv`, else the per-user one, made on first use.
    let (interpreter, target) = if config.backend == Backend::Jupyter {
        let kernel = sessions.jupyter();
        let python = kernel.kernel_executable(ctx, &config, NAME).await?;
        let target = format!(
            "the kernel's own interpreter {} (its sys.executable)",
            python.display()
        );
        (python, target)
    } else {
        let venv = config.install_venv().map_err(|e| anyhow!("{NAME}: {e}"))?;
        let what = if venv.configured {
            "config [python] venv"
        } else {
            "the per-user venv"
        };
        let base = config.found().map_err(|e| anyhow!("{NAME}: {e:#}"))?;
        ensure_venv_at(&venv.path, what, &base, ctx)
            .await
            .map_err(|e| anyhow!("{NAME}: {e:#}"))?;
        (venv.python(), venv.describe())
    };

    // pip and its build steps run inside toolbox's containment.
    toolbox_host::containment::ensure();
    let mut command = crate::common::python_command(&interpreter);
    // -I: isolated mode, so the working folder (the scratchpad) is not on sys.path and a
    // planted pip.py cannot run in place of pip; PYTHON* variables are ignored too.
    command.args([
        "-I",
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
    ]);
    if upgrade {
        command.arg("--upgrade");
    }
    if let Some(url) = index_url {
        command.args(["--index-url", url]);
    }
    command.args(&config.pip_args);
    // Everything after `--` is a requirement to pip, never an option.
    command.arg("--");
    command.args(&packages);
    let cwd = ctx
        .workspace
        .scratchpad()
        .map_err(|e| anyhow!("{NAME}: cannot create the session scratchpad: {e}"))?;
    command
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    ctx.emit_progress(format!(
        "{} -m pip install {}",
        interpreter.display(),
        packages.join(" ")
    ));
    let mut child = command
        .spawn()
        .with_context(|| format!("{NAME}: cannot run {} -m pip", interpreter.display()))?;
    let group = ProcessGroup(child.id());
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        bail!("{NAME}: pip's output pipes were not set up");
    };
    let mut out = BufReader::new(stdout).lines();
    let mut err = BufReader::new(stderr).lines();
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut keep = |line: String| {
        ctx.emit_progress(line.clone());
        if tail.len() == TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    };
    let deadline = tokio::time::sleep(config.install_timeout);
    tokio::pin!(deadline);
    let (mut out_open, mut err_open) = (true, true);
    while out_open || err_open {
        tokio::select! {
            line = out.next_line(), if out_open => match line {
                Ok(Some(line)) => keep(line),
                _ => out_open = false,
            },
            line = err.next_line(), if err_open => match line {
                Ok(Some(line)) => keep(line),
                _ => err_open = false,
            },
            _ = &mut deadline => {
                group.kill();
                bail!("{NAME}: pip did not finish within {} ms and was stopped", config.install_timeout.as_millis());
            }
            _ = ctx.cancel.cancelled() => {
                group.kill();
                bail!("{NAME} was cancelled; pip was stopped");
            }
        }
    }
    let status = child
        .wait()
        .await
        .with_context(|| format!("{NAME}: waiting for pip"))?;
    let tail: Vec<String> = tail.into_iter().collect();
    if !status.success() {
        bail!(
            "{NAME}: pip install failed ({status}); nothing was changed for this session. \
             pip said:\n{}",
            tail.join("\n")
        );
    }
    GENERATION.fetch_add(1, Ordering::SeqCst);
    let mut text = format!(
        "Installed into {target}: {}. The session can import them now, without a restart.",
        packages.join(", ")
    );
    if upgrade {
        text.push_str(
            " Modules imported before this call keep their old version until the session restarts.",
        );
    }
    let summary: Vec<&String> = tail
        .iter()
        .filter(|l| l.starts_with("Successfully installed") || l.starts_with("Requirement already"))
        .collect();
    if !summary.is_empty() {
        text.push_str("\n\npip said:\n");
        text.push_str(
            &summary
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    Ok(Value::String(text))
}

/// What an install would do, for the person asked to approve it: the packages and the real
/// place they go (the venv's path, and whether it is made now). Changes nothing.
pub(crate) fn preview(args: &Value, ctx: &ToolContext) -> Option<toolbox_core::Preview> {
    let a = Args::new(NAME, args).ok()?;
    let packages = PACKAGES.opt_str_list(&a).ok()??;
    let upgrade = UPGRADE.bool(&a).ok()?;
    let index_url = INDEX_URL.opt_nonempty_str(&a).ok()?;
    let config = match PythonConfig::from_ctx(ctx) {
        Ok(config) => config,
        Err(e) => {
            return Some(toolbox_core::Preview::new(format!(
                "Install Python packages: this will fail: {e:#}"
            )))
        }
    };
    let target = if config.backend == Backend::Jupyter {
        "the Jupyter kernel's own interpreter (its sys.executable)".to_string()
    } else {
        match config.install_venv() {
            Ok(venv) if venv.path.join("pyvenv.cfg").is_file() => venv.describe(),
            Ok(venv) => format!("{}, created by this call", venv.describe()),
            Err(e) => {
                return Some(toolbox_core::Preview::new(format!(
                    "Install Python packages: this will fail: {e}"
                )))
            }
        }
    };
    let mut fields = vec![("packages", packages.join(", ")), ("into", target)];
    if upgrade {
        fields.push(("upgrade", "yes".to_string()));
    }
    if let Some(url) = index_url {
        fields.push(("index_url", url.to_string()));
    }
    Some(toolbox_core::Preview::new("Install Python packages with pip").fields(&fields))
}

/// Kills a child's process group when dropped (pip can start build subprocesses).
struct ProcessGroup(Option<u32>);

impl ProcessGroup {
    fn kill(&self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // A process group we created; a stale id is harmless (ESRCH).
            toolbox_host::sandbox::signal_group(pid, toolbox_host::sandbox::Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Accepts `name`, `name[extra,…]` and version specifiers; refuses everything else with a
/// message naming the entry and the reason.
fn check_requirement(entry: &str) -> Result<()> {
    let refuse = |why: &str| Err(anyhow!("{NAME}: refused package entry {entry:?}: {why}"));
    if entry.trim().is_empty() {
        return refuse("it is empty");
    }
    if entry.starts_with('-') {
        let lower = entry.to_ascii_lowercase();
        if lower == "-r" || lower.starts_with("-r") || lower.starts_with("--requirement") {
            return refuse("requirement files (-r) are not accepted; list the packages themselves");
        }
        if lower == "-t" || lower.starts_with("--target") || lower.starts_with("-t") {
            return refuse(
                "--target is not accepted: packages always go into the session's interpreter",
            );
        }
        return refuse(
            "pip options are not accepted in packages; only requirements such as \"pandas>=2\" \
             (use the upgrade and index_url arguments for those options)",
        );
    }
    if entry.chars().any(char::is_whitespace) {
        return refuse(
            "it contains whitespace; give one requirement per entry, without spaces, \
             e.g. \"pandas>=2.0\"",
        );
    }
    if entry.contains('/') || entry.contains('\\') {
        return refuse("paths and URLs are not accepted, only package names from the index");
    }
    if entry.contains(':') || entry.contains('@') {
        return refuse("URLs and direct references (name @ url) are not accepted, only package names from the index");
    }
    let lower = entry.to_ascii_lowercase();
    if [
        ".whl", ".zip", ".tar.gz", ".tgz", ".txt", ".cfg", ".toml", ".py",
    ]
    .iter()
    .any(|ext| lower.ends_with(ext))
    {
        return refuse("local files and requirement files are not accepted, only package names");
    }
    if !entry.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return refuse("a requirement starts with a package name (a letter or digit)");
    }
    if let Some(c) = entry
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-[],<>=!~*+".contains(*c)))
    {
        return refuse(&format!(
            "the character {c:?} is not allowed in a requirement (name[extras] plus version \
             specifiers such as >=1.2,<2)"
        ));
    }
    Ok(())
}

fn check_index_url(url: &str) -> Result<()> {
    let refuse = |why: &str| Err(anyhow!("{NAME}: argument `index_url` {url:?} {why}"));
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return refuse("contains whitespace or control characters");
    }
    let parsed = match url::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return refuse(&format!("is not a valid URL ({e})")),
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return refuse("must be an http or https URL");
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return refuse("has no host");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;

    #[test]
    fn plain_requirements_pass() {
        for ok in [
            "pandas",
            "scikit-learn>=1.4",
            "requests[socks]==2.32.3",
            "numpy>=1.26,<3",
            "zope.interface~=6.0",
            "Django==5.*",
            "pkg!=1.0",
        ] {
            check_requirement(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn every_refusal_names_the_entry_and_why() {
        let cases = [
            ("-r", "requirement files (-r)"),
            ("-rrequirements.txt", "requirement files (-r)"),
            ("--requirement=reqs.txt", "requirement files (-r)"),
            ("--target=/tmp/x", "--target is not accepted"),
            ("-t", "--target is not accepted"),
            ("--index-url=http://evil", "pip options are not accepted"),
            ("-e", "pip options are not accepted"),
            ("pandas --target /tmp", "contains whitespace"),
            ("numpy\t-r", "contains whitespace"),
            ("./local", "paths and URLs"),
            ("/abs/pkg", "paths and URLs"),
            ("https://x.org/p.whl", "paths and URLs"),
            ("pkg@git+https", "direct references"),
            ("pkg@1", "direct references"),
            ("file:pkg", "URLs"),
            ("requirements.txt", "requirement files are not accepted"),
            ("pkg-1.0-py3-none-any.whl", "local files"),
            ("", "it is empty"),
            (".hidden", "starts with a package name"),
            ("pkg;sys_platform", "character ';'"),
            ("pkg$(id)", "character '$'"),
        ];
        for (entry, want) in cases {
            let e = check_requirement(entry).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "kernel_install: refused package entry {entry:?}: "
                )),
                "{e}"
            );
            assert!(e.contains(want), "{entry}: {e}");
        }
    }

    #[test]
    fn index_urls_must_be_http() {
        check_index_url("https://pypi.org/simple").unwrap();
        check_index_url("http://127.0.0.1:8080/simple/").unwrap();
        for (bad, want) in [
            ("file:///srv/wheels", "http or https"),
            ("ftp://x.org", "http or https"),
            ("not a url", "whitespace"),
            ("pypi.org/simple", "not a valid URL"),
        ] {
            let e = check_index_url(bad).unwrap_err().to_string();
            assert!(e.contains("`index_url`") && e.contains(want), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn refusals_happen_before_pip_runs() {
        let (_d, ctx) = setup(NAME, "install", json!({}));
        let e = call(&ctx, NAME, json!({"packages": ["ok", "--target=/tmp/x"]}))
            .await
            .unwrap_err();
        assert!(
            e.contains("refused package entry \"--target=/tmp/x\""),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({})).await.unwrap_err();
        assert_eq!(e, "kernel_install requires packages");
        let e = call(&ctx, NAME, json!({"packages": []})).await.unwrap_err();
        assert!(e.contains("`packages` is empty"), "{e}");
        let e = call(
            &ctx,
            NAME,
            json!({"packages": ["x"], "index_url": "file:///tmp"}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("http or https"), "{e}");
        let e = call(&ctx, NAME, json!({"packages": ["x"], "target": "/tmp"}))
            .await
            .unwrap_err();
        assert!(e.contains("unknown argument `target`"), "{e}");
    }
}
