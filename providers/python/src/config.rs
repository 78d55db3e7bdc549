//! The `[python]` table of toolbox.toml, and which interpreter and venv a call uses.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};
use toolbox_host::ToolContext;

use crate::discover::FoundPython;
use crate::evict::SessionLimits;

/// Where run_python_code executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The interpreter inside this process (its libpython loaded at run time), on one
    /// dedicated thread. The default.
    Embedded,
    /// One worker process per session, killed on timeout.
    Isolated,
    /// A Jupyter kernel: attached (`connection_file`) or started per session (`kernel_name`).
    Jupyter,
}

/// Which Jupyter kernel the `jupyter` backend talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelTarget {
    /// A running kernel, by the connection file Jupyter wrote for it; every session shares it.
    Attach(PathBuf),
    /// A kernelspec toolbox starts itself, one kernel per session.
    Start(String),
}

// What an untrusted workspace's toolbox.toml may set in [python]: a stricter backend and
// shorter timeouts. `venv`, `pip_args` and everything about Jupyter kernels are the
// operator's alone (so is `interpreter`: which program runs): "jupyter" is not in the backend's order, so a workspace can neither
// switch to it nor away from it, and `connection_file` / `kernel_name` (which kernel runs the
// code, and as whom) have no rule, so a workspace that sets them is refused.
const BACKEND: Key =
    Key::choice("backend", &["embedded", "isolated", "jupyter"]).workspace(Tighten::Ranked {
        order: &["embedded", "isolated"],
        default: "embedded",
    });
const VENV: Key = Key::string("venv");
const INTERPRETER: Key = Key::string("interpreter");
const TIMEOUT_MS: Key = Key::integer("timeout_ms", 1, u64::MAX).workspace(Tighten::AtMost(300_000));
const INSTALL_TIMEOUT_MS: Key =
    Key::integer("install_timeout_ms", 1, u64::MAX).workspace(Tighten::AtMost(600_000));
const PIP_ARGS: Key = Key::strings("pip_args");
const CONNECTION_FILE: Key = Key::string("connection_file");
const KERNEL_NAME: Key = Key::string("kernel_name");
const KERNEL_TIMEOUT_MS: Key = Key::integer("kernel_timeout_ms", 1, u64::MAX);
const SESSION_IDLE_MS: Key = Key::integer("session_idle_ms", 1, u64::MAX);
const MAX_LIVE_SESSIONS: Key = Key::integer("max_live_sessions", 1, 100_000);
const SANDBOX: Key = Key::string("sandbox").workspace(toolbox_host::sandbox::MODE_RULE);
const SANDBOX_NETWORK: Key =
    Key::boolean("sandbox_network").workspace(toolbox_host::sandbox::NETWORK_RULE);

/// Every key `[python]` accepts.
const KEYS: [Key; 13] = [
    BACKEND,
    VENV,
    INTERPRETER,
    TIMEOUT_MS,
    INSTALL_TIMEOUT_MS,
    PIP_ARGS,
    CONNECTION_FILE,
    KERNEL_NAME,
    KERNEL_TIMEOUT_MS,
    SESSION_IDLE_MS,
    MAX_LIVE_SESSIONS,
    SANDBOX,
    SANDBOX_NETWORK,
];
/// The `[python]` table.
const TABLE: Table = Table::new("python", &KEYS);
toolbox_core::register_table!(TABLE);
/// The default limit of one run when neither the call nor the config gives one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The default limit of one `pip install`.
pub const DEFAULT_INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// The default bound on a kernel starting, or answering its first request after connecting.
pub const DEFAULT_KERNEL_TIMEOUT: Duration = Duration::from_secs(60);

/// The `[python]` table, read and checked: which backend runs the code, with which venv or
/// kernel, and the limits it runs under.
#[derive(Debug, Clone)]
pub struct PythonConfig {
    /// Where run_python_code executes (`backend`).
    pub backend: Backend,
    /// An absolute venv folder the operator chose (`[python] venv`): pip installs there, the
    /// session imports from there, isolated workers run its python. Without it, installs go
    /// to the per-user venv ([`user_venv`]).
    pub venv: Option<PathBuf>,
    /// The Python the operator chose (`[python] interpreter`): an absolute path (`~/`
    /// allowed), or a program name looked up on PATH. Without it, toolbox looks for one at
    /// run time (see [`crate::discover`]).
    pub interpreter: Option<PathBuf>,
    /// The limit of one run when the call gives no `timeout_ms`; also the limit of every run
    /// another provider makes through the code runner.
    pub timeout: Duration,
    /// The limit of one `pip install`.
    pub install_timeout: Duration,
    /// Extra `pip install` arguments set by whoever runs toolbox (never by the model), e.g.
    /// `["--no-index", "--find-links", "/srv/wheels"]`.
    pub pip_args: Vec<String>,
    /// With `backend = "jupyter"`: the kernel to attach to or to start.
    pub kernel: Option<KernelTarget>,
    /// How long a kernel may take to start, or to answer when toolbox connects.
    pub kernel_timeout: Duration,
    /// When idle sessions give their state back (see [`crate::evict`]).
    pub session_limits: SessionLimits,
    /// The OS sandbox of the isolated worker (`[python] sandbox`, also set by `--sandbox`):
    /// the shell's, with toolbox's own files kept read-only. Only the isolated backend can
    /// run under it; with it on, that backend is the default.
    pub sandbox: toolbox_host::sandbox::SandboxMode,
    /// Whether sandboxed code may open network sockets (`[python] sandbox_network`).
    pub sandbox_network: bool,
}

impl PythonConfig {
    /// Reads `[python]` from the call's configuration; errors name the tool, the table and
    /// the key.
    pub fn from_ctx(ctx: &ToolContext) -> Result<Self> {
        Self::from_value(ctx.provider_config("python"), ctx.workspace.root())
            .map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))
    }

    /// Reads a `[python]` table; `None` gives the defaults. A relative `venv` is relative to
    /// `workspace_root`.
    pub fn from_value(table: Option<&Value>, workspace_root: &Path) -> Result<Self> {
        let t = TABLE.read_value(table)?;
        use toolbox_host::sandbox::SandboxMode;
        let sandbox = match SANDBOX.str(&t)? {
            None => SandboxMode::Off,
            Some(text) => SandboxMode::parse(text)
                .ok_or_else(|| t.invalid(SANDBOX.name, SandboxMode::EXPECTED))?,
        };
        let backend = match BACKEND.one_of(&t)? {
            Some("isolated") => Backend::Isolated,
            Some("jupyter") => Backend::Jupyter,
            Some(_) => Backend::Embedded,
            // Sandboxed code needs a process of its own to confine.
            None if sandbox != SandboxMode::Off => Backend::Isolated,
            None => Backend::Embedded,
        };
        if sandbox != SandboxMode::Off && backend != Backend::Isolated {
            bail!(
                "[python] sandbox = \"{}\" needs backend = \"isolated\" (the default when a \
                 sandbox is set): the {} cannot be confined by toolbox's sandbox{}",
                sandbox.as_str(),
                if backend == Backend::Embedded {
                    "embedded interpreter runs inside toolbox's own process, which"
                } else {
                    "jupyter backend runs code in a kernel the operator chose, which"
                },
                if backend == Backend::Embedded {
                    "; remove backend = \"embedded\" or set it to \"isolated\""
                } else {
                    ""
                }
            );
        }
        let connection_file = match CONNECTION_FILE.str(&t)? {
            Some(text) if text.trim().is_empty() => {
                return Err(t.invalid(CONNECTION_FILE.name, "a file path"))
            }
            Some(text) => Some(expand_path(text, workspace_root)),
            None => None,
        };
        let kernel_name = match KERNEL_NAME.str(&t)? {
            Some(name) if !valid_kernel_name(name) => {
                return Err(t.invalid(
                    KERNEL_NAME.name,
                    "a kernelspec name (letters, digits, '.', '_' and '-')",
                ))
            }
            other => other.map(str::to_string),
        };
        let kernel = match (backend, connection_file, kernel_name) {
            (Backend::Jupyter, Some(_), Some(_)) => bail!(
                "[python] connection_file and kernel_name cannot both be set: connection_file \
                 attaches to a running kernel, kernel_name starts one per session"
            ),
            (Backend::Jupyter, Some(file), None) => Some(KernelTarget::Attach(file)),
            (Backend::Jupyter, None, Some(name)) => Some(KernelTarget::Start(name)),
            (Backend::Jupyter, None, None) => bail!(
                "[python] backend = \"jupyter\" needs connection_file (the JSON file of a \
                 running kernel, to attach to it) or kernel_name (a kernelspec such as \
                 \"python3\", to start one kernel per session)"
            ),
            (_, Some(_), _) => bail!(
                "[python] connection_file only applies to backend = \"jupyter\"; set that too"
            ),
            (_, _, Some(_)) => {
                bail!("[python] kernel_name only applies to backend = \"jupyter\"; set that too")
            }
            _ => None,
        };
        let venv = match VENV.str(&t)? {
            None => None,
            Some(text) if text.trim().is_empty() => {
                return Err(t.invalid(VENV.name, "a folder path"))
            }
            // Relative venv paths are relative to the workspace, like every path.
            Some(text) => Some(workspace_root.join(text)),
        };
        let interpreter = match INTERPRETER.str(&t)? {
            None => None,
            Some(text) if text.trim().is_empty() || text.contains('\0') => {
                return Err(t.invalid(INTERPRETER.name, "a path or a program name"))
            }
            Some(text) if !text.contains('/') && !text.starts_with('~') => {
                Some(PathBuf::from(text))
            }
            Some(text) => match toolbox_host::operator_path(text) {
                Ok(Some(path)) => Some(path),
                _ => {
                    return Err(t.invalid(
                        INTERPRETER.name,
                        "an absolute path, a path under ~/, or a program name on PATH",
                    ))
                }
            },
        };
        let millis = |key: Key, default: Duration| -> Result<Duration> {
            Ok(key.u64(&t)?.map_or(default, Duration::from_millis))
        };
        Ok(PythonConfig {
            backend,
            venv,
            interpreter,
            timeout: millis(TIMEOUT_MS, DEFAULT_TIMEOUT)?,
            install_timeout: millis(INSTALL_TIMEOUT_MS, DEFAULT_INSTALL_TIMEOUT)?,
            pip_args: PIP_ARGS.string_list(&t)?.unwrap_or_default(),
            kernel,
            kernel_timeout: millis(KERNEL_TIMEOUT_MS, DEFAULT_KERNEL_TIMEOUT)?,
            session_limits: SessionLimits {
                idle: millis(SESSION_IDLE_MS, crate::evict::DEFAULT_SESSION_IDLE)?,
                max_live: MAX_LIVE_SESSIONS
                    .u64(&t)?
                    .map_or(crate::evict::DEFAULT_MAX_LIVE_SESSIONS, |n| n as usize),
            },
            sandbox,
            sandbox_network: SANDBOX_NETWORK.bool(&t)?.unwrap_or(false),
        })
    }

    /// The Python found for this configuration at run time (see [`crate::discover`]).
    pub fn found(&self) -> Result<Arc<FoundPython>> {
        crate::discover::find(self.interpreter.as_deref())
    }

    /// The interpreter that pip, workers and lookups use: the venv's, else the one found.
    pub fn python(&self) -> Result<PathBuf> {
        match &self.venv {
            Some(venv) => Ok(venv.join("bin").join("python")),
            None => Ok(self.found()?.executable.clone()),
        }
    }

    /// The configured venv's site-packages folder (whether or not it exists yet), for the
    /// found interpreter's version.
    pub fn site_packages(&self) -> Option<PathBuf> {
        let found = self.found().ok()?;
        self.venv
            .as_deref()
            .map(|venv| venv_site_packages(venv, &found))
    }

    /// Where `kernel_install` puts packages (outside the jupyter backend): the configured
    /// venv, else the per-user one. Fails only when neither can be named.
    pub fn install_venv(&self) -> Result<InstallVenv> {
        match &self.venv {
            Some(path) => Ok(InstallVenv {
                path: path.clone(),
                configured: true,
            }),
            None => Ok(InstallVenv {
                path: user_venv()?,
                configured: false,
            }),
        }
    }

    /// The site-packages folders a run adds to `sys.path` (see `_sync_site` in driver.py):
    /// the configured venv's (only where the interpreter is not that venv's own python:
    /// `runs_venv_python` is true for isolated workers), else the per-user venv's once it
    /// exists. A per-user venv only appears whole (see [`ensure_venv_at`]), so an existing
    /// site-packages is never a half-made one.
    pub fn import_site_dirs(&self, runs_venv_python: bool) -> Vec<String> {
        let Ok(found) = self.found() else {
            return Vec::new();
        };
        let site = match &self.venv {
            Some(_) if runs_venv_python => return Vec::new(),
            Some(venv) => venv_site_packages(venv, &found),
            None => match user_venv() {
                // Only a venv: a folder of the user's own at that place is left alone.
                Ok(venv) if venv.join("pyvenv.cfg").is_file() => {
                    let site = venv_site_packages(&venv, &found);
                    if !site.is_dir() {
                        return Vec::new();
                    }
                    site
                }
                _ => return Vec::new(),
            },
        };
        vec![site.to_string_lossy().into_owned()]
    }
}

/// The venv `kernel_install` installs into, and whether the operator chose it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallVenv {
    /// The venv folder (absolute).
    pub path: PathBuf,
    /// `[python] venv` named it; otherwise it is the per-user venv.
    pub configured: bool,
}

impl InstallVenv {
    /// Its python.
    pub fn python(&self) -> PathBuf {
        self.path.join("bin").join("python")
    }

    /// How results and approval questions name it.
    pub fn describe(&self) -> String {
        if self.configured {
            format!("the venv {} ([python] venv)", self.path.display())
        } else {
            format!(
                "the per-user venv {} (toolbox's default; [python] venv chooses another)",
                self.path.display()
            )
        }
    }
}

/// A venv's site-packages folder for `python`'s version.
pub fn venv_site_packages(venv: &Path, python: &FoundPython) -> PathBuf {
    venv.join("lib")
        .join(format!("python{}", python.minor()))
        .join("site-packages")
}

/// The per-user venv `kernel_install` uses by default: `$XDG_DATA_HOME/toolbox/venv`, else
/// `~/.local/share/toolbox/venv`. Worked out once per process: every run asks for it (see
/// [`PythonConfig::import_site_dirs`]), and reading the environment scans all of it under
/// a lock (4k instructions a call, bench/BASELINE.md).
pub fn user_venv() -> Result<PathBuf> {
    static VENV: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    VENV.get_or_init(|| {
        user_venv_from(std::env::var_os("XDG_DATA_HOME"), std::env::var_os("HOME"))
            .map_err(|e| e.to_string())
    })
    .clone()
    .map_err(|e| anyhow::anyhow!(e))
}

/// [`user_venv`] from the two variables' values. As the XDG base directory specification
/// says, an empty or relative `XDG_DATA_HOME` is ignored.
pub fn user_venv_from(
    xdg_data_home: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Result<PathBuf> {
    let data = match xdg_data_home.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        _ => match home.map(PathBuf::from) {
            Some(home) if home.is_absolute() => home.join(".local").join("share"),
            _ => bail!(
                "the per-user Python venv has no place: neither XDG_DATA_HOME nor HOME is set \
                 to an absolute folder (set one, or [python] venv in toolbox.toml)"
            ),
        },
    };
    Ok(data.join("toolbox").join("venv"))
}

/// A kernelspec name as Jupyter allows them; never a path.
fn valid_kernel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `~/x` under the home folder, a relative path under the workspace, an absolute one as is.
fn expand_path(text: &str, workspace_root: &Path) -> PathBuf {
    match toolbox_host::operator_path(text) {
        Ok(Some(path)) => path,
        _ => workspace_root.join(text),
    }
}

/// Venvs already checked (or created) by this process.
static READY_VENVS: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Makes sure the configured venv exists and was made from the found interpreter's Python
/// version (the embedded interpreter imports its packages, so they must match); see
/// [`ensure_venv_at`]. Without `[python] venv` there is nothing to do: the per-user venv is
/// only made by `kernel_install`.
pub async fn ensure_venv(config: &PythonConfig, ctx: &ToolContext) -> Result<()> {
    let Some(venv) = &config.venv else {
        return Ok(());
    };
    ensure_venv_at(venv, "config [python] venv", &*config.found()?, ctx).await
}

/// Makes sure the venv `venv` exists, made from `base` (the interpreter found at run time)
/// or another of its Python version; `what` names it in messages (`config [python] venv`,
/// `the per-user venv`).
///
/// A missing venv is created with `--system-site-packages`, so the isolated worker (which
/// runs the venv's python) sees the same packages as the embedded interpreter (which sees the
/// found interpreter's and the venv's). It is made in a temporary folder beside its place
/// and renamed into it when complete: two processes creating it at once each make their own,
/// one rename wins and the other's copy is removed, and a creation that failed or was killed
/// half-way leaves nothing at `venv` (only a `.<name>.tmp-…` folder beside it). So a venv
/// found at `venv` is always a whole one.
pub async fn ensure_venv_at(
    venv: &Path,
    what: &str,
    base: &FoundPython,
    ctx: &ToolContext,
) -> Result<()> {
    let cfg_file = venv.join("pyvenv.cfg");
    // Checked once per process; a venv removed since is made again.
    if ready_venvs(|set| set.contains(venv)) && cfg_file.is_file() {
        return Ok(());
    }
    if !cfg_file.is_file() {
        if venv.exists()
            && std::fs::read_dir(venv)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            bail!(
                "{what} {} exists but is not a virtual environment (no pyvenv.cfg)",
                venv.display()
            );
        }
        ctx.emit_progress(format!("creating the Python venv {}", venv.display()));
        create_venv(venv, &base.executable)
            .await
            .with_context(|| format!("could not create {what} {}", venv.display()))?;
    }
    let text = std::fs::read_to_string(&cfg_file)
        .with_context(|| format!("cannot read {}", cfg_file.display()))?;
    let want = base.minor();
    let version = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| matches!(k.trim(), "version" | "version_info"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    if !(version == want || version.starts_with(&format!("{want}."))) {
        bail!(
            "{what} {} was made with Python {} but toolbox runs Python {} ({}); \
             remove it or recreate it with {} -m venv",
            venv.display(),
            if version.is_empty() {
                "(unknown)"
            } else {
                &version
            },
            want,
            base.describe(),
            base.executable.display()
        );
    }
    ready_venvs(|set| set.insert(venv.to_path_buf()));
    Ok(())
}

/// Makes the venv in a temporary folder beside `venv` and renames it into place (see
/// [`ensure_venv_at`]); when another process got there first, its venv is kept.
async fn create_venv(venv: &Path, base: &Path) -> Result<()> {
    let (Some(parent), Some(name)) = (venv.parent(), venv.file_name()) else {
        bail!("{} is not a folder path", venv.display());
    };
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create the folder {}", parent.display()))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let tmp = parent.join(format!(
        ".{}.tmp-{}-{stamp}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let made = build_venv(&tmp, venv, base).await;
    let placed = made.and_then(|()| match std::fs::rename(&tmp, venv) {
        Ok(()) => Ok(()),
        // Another process renamed its own venv into place first: use that one.
        Err(_) if venv.join("pyvenv.cfg").is_file() => Ok(()),
        Err(e) => Err(anyhow!("cannot move it into place: {e}")),
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    placed
}

/// Builds a venv at `tmp` that will live at `fin`, from the interpreter `base`.
async fn build_venv(tmp: &Path, fin: &Path, base: &Path) -> Result<()> {
    // Without its own pip: the base interpreter's pip is visible through the system
    // site-packages and installs into the venv when run by the venv's python. That takes a
    // fraction of a second instead of several for ensurepip.
    // Its prompt is the final folder's name, not the temporary one's.
    let prompt = fin
        .file_name()
        .map_or_else(|| "venv".into(), |n| n.to_string_lossy());
    run_quietly(
        base,
        &[
            "-I",
            "-m",
            "venv",
            "--system-site-packages",
            "--without-pip",
            &format!("--prompt={prompt}"),
        ],
        Some(tmp),
    )
    .await?;
    let python = tmp.join("bin").join("python");
    if run_quietly(&python, &["-I", "-m", "pip", "--version"], None)
        .await
        .is_err()
    {
        run_quietly(&python, &["-I", "-m", "ensurepip", "--default-pip"], None)
            .await
            .context("could not add pip to it")?;
    }
    // Python finds its venv from pyvenv.cfg beside bin/, wherever the folder is; only the
    // activate scripts (and pip's, after ensurepip) name the folder: give them the final one.
    let (from, to) = (tmp.as_os_str().as_bytes(), fin.as_os_str().as_bytes());
    let mut files = vec![tmp.join("pyvenv.cfg")];
    if let Ok(entries) = std::fs::read_dir(tmp.join("bin")) {
        files.extend(entries.flatten().map(|e| e.path()));
    }
    for file in files {
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            continue;
        };
        if !meta.is_file() || meta.len() > 1 << 20 {
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        if let Some(fixed) = replace_bytes(&bytes, from, to) {
            std::fs::write(&file, fixed)
                .with_context(|| format!("cannot rewrite {}", file.display()))?;
        }
    }
    Ok(())
}

/// `haystack` with every `from` replaced by `to`, or None when there is none.
fn replace_bytes(haystack: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    if from.is_empty() || !haystack.windows(from.len()).any(|w| w == from) {
        return None;
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while !rest.is_empty() {
        if rest.starts_with(from) {
            out.extend_from_slice(to);
            rest = &rest[from.len()..];
        } else {
            out.push(rest[0]);
            rest = &rest[1..];
        }
    }
    Some(out)
}

/// Runs `program args [extra]` and fails with its stderr when it fails.
///
/// Callers pass `-I` and this runs in `/`: with `-m`, Python would otherwise put the current
/// folder first on `sys.path`, and a planted `venv.py` or `pip.py` would run instead.
async fn run_quietly(program: &Path, args: &[&str], extra: Option<&Path>) -> Result<()> {
    let mut command = crate::common::python_command(program);
    command.current_dir("/").args(args);
    if let Some(extra) = extra {
        command.arg(extra);
    }
    let out = command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("cannot run {}", program.display()))?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn ready_venvs<T>(f: impl FnOnce(&mut HashSet<PathBuf>) -> T) -> T {
    let mut guard = READY_VENVS.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(HashSet::new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_keys() {
        let root = Path::new("/ws");
        let c = PythonConfig::from_value(None, root).unwrap();
        assert_eq!(c.backend, Backend::Embedded);
        assert_eq!(c.python().unwrap(), c.found().unwrap().executable);
        assert_eq!(c.interpreter, None);
        let c = PythonConfig::from_value(
            Some(
                &json!({"backend": "isolated", "venv": ".venv", "timeout_ms": 5000,
                         "pip_args": ["--no-index"]}),
            ),
            root,
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Isolated);
        assert_eq!(c.python().unwrap(), PathBuf::from("/ws/.venv/bin/python"));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.pip_args, ["--no-index"]);
        assert!(c.site_packages().unwrap().ends_with(format!(
            "python{}/site-packages",
            c.found().unwrap().minor()
        )));
    }

    #[test]
    fn bad_values_name_the_key() {
        let root = Path::new("/ws");
        let e = PythonConfig::from_value(Some(&json!({"backend": "docker"})), root)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "[python] backend must be \"embedded\", \"isolated\" or \"jupyter\", got \"docker\""
        );
        let e = PythonConfig::from_value(Some(&json!({"bakend": "isolated"})), root)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("[python] has an unknown key `bakend`"), "{e}");
        let e = PythonConfig::from_value(Some(&json!({"timeout_ms": "soon"})), root)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "[python] timeout_ms must be a whole number, got \"soon\""
        );
        let e = PythonConfig::from_value(Some(&json!({"pip_args": "--no-index"})), root)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pip_args must be a list of strings"), "{e}");
    }

    #[test]
    fn jupyter_needs_exactly_one_kernel_and_names_the_keys() {
        let root = Path::new("/ws");
        let parse = |v: Value| PythonConfig::from_value(Some(&v), root);
        let c = parse(json!({"backend": "jupyter", "connection_file": "k.json"})).unwrap();
        assert_eq!(c.backend, Backend::Jupyter);
        assert_eq!(
            c.kernel,
            Some(KernelTarget::Attach(PathBuf::from("/ws/k.json")))
        );
        assert_eq!(c.kernel_timeout, DEFAULT_KERNEL_TIMEOUT);
        let c = parse(json!({"backend": "jupyter", "kernel_name": "python3",
                             "kernel_timeout_ms": 5000}))
        .unwrap();
        assert_eq!(c.kernel, Some(KernelTarget::Start("python3".into())));
        assert_eq!(c.kernel_timeout, Duration::from_secs(5));
        let e = |v: Value| parse(v).unwrap_err().to_string();
        assert!(
            e(json!({"backend": "jupyter"})).starts_with(
                "[python] backend = \"jupyter\" needs connection_file (the JSON file of a \
                 running kernel"
            ),
            "{}",
            e(json!({"backend": "jupyter"}))
        );
        assert!(e(json!({"backend": "jupyter", "connection_file": "/k.json",
                         "kernel_name": "python3"}))
        .starts_with("[python] connection_file and kernel_name cannot both be set"));
        assert_eq!(
            e(json!({"connection_file": "/k.json"})),
            "[python] connection_file only applies to backend = \"jupyter\"; set that too"
        );
        assert_eq!(
            e(json!({"backend": "isolated", "kernel_name": "python3"})),
            "[python] kernel_name only applies to backend = \"jupyter\"; set that too"
        );
        for bad in ["../python3", "a/b", "", ".hidden", "py 3"] {
            let msg = e(json!({"backend": "jupyter", "kernel_name": bad}));
            assert!(
                msg.starts_with("[python] kernel_name must be a kernelspec name"),
                "{bad}: {msg}"
            );
        }
        assert_eq!(
            e(json!({"backend": "jupyter", "connection_file": " "})),
            "[python] connection_file must be a file path, got \" \""
        );
    }

    #[test]
    fn a_workspace_cannot_choose_or_point_at_a_kernel() {
        let rules = toolbox_core::trust::table_rules("python").expect("python rules");
        for key in [
            "connection_file",
            "kernel_name",
            "kernel_timeout_ms",
            "venv",
        ] {
            assert!(rules.rule(key).is_none(), "a workspace may set {key}");
        }
        match rules.rule("backend") {
            Some(Tighten::Ranked { order, .. }) => assert!(!order.contains(&"jupyter")),
            other => panic!("backend rule: {other:?}"),
        }
    }

    #[test]
    fn the_per_user_venv_follows_xdg_data_home_else_home() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert_eq!(
            user_venv_from(os("/data"), os("/home/u")).unwrap(),
            PathBuf::from("/data/toolbox/venv")
        );
        // Empty or relative XDG_DATA_HOME is ignored, as the XDG specification says.
        for xdg in [None, os(""), os("rel/data")] {
            assert_eq!(
                user_venv_from(xdg, os("/home/u")).unwrap(),
                PathBuf::from("/home/u/.local/share/toolbox/venv")
            );
        }
        let e = user_venv_from(None, os("")).unwrap_err().to_string();
        assert!(
            e.starts_with("the per-user Python venv has no place: neither XDG_DATA_HOME nor HOME"),
            "{e}"
        );
        // Without [python] venv installs go to the per-user venv, with it there.
        let c = PythonConfig::from_value(None, Path::new("/ws")).unwrap();
        if let Ok(user) = user_venv() {
            let target = c.install_venv().unwrap();
            assert_eq!((target.path, target.configured), (user, false));
        }
        let c =
            PythonConfig::from_value(Some(&json!({"venv": "/opt/v"})), Path::new("/ws")).unwrap();
        let target = c.install_venv().unwrap();
        assert_eq!(target.path, PathBuf::from("/opt/v"));
        assert!(target.configured);
        assert_eq!(target.describe(), "the venv /opt/v ([python] venv)");
        // An isolated worker runs the configured venv's python: nothing to add.
        assert!(c.import_site_dirs(true).is_empty());
        assert_eq!(
            c.import_site_dirs(false),
            [venv_site_packages(Path::new("/opt/v"), &c.found().unwrap()).to_string_lossy()]
        );
    }

    #[test]
    fn bytes_are_replaced_everywhere() {
        assert_eq!(
            replace_bytes(b"a/tmp/x b /tmp/x", b"/tmp/x", b"/final/venv").unwrap(),
            b"a/final/venv b /final/venv"
        );
        assert_eq!(replace_bytes(b"nothing", b"/tmp/x", b"/y"), None);
    }

    /// Two creations of one venv at once (two processes, say): both succeed, one venv is in
    /// place, whole, naming its own folder, and no temporary folder is left beside it.
    #[tokio::test]
    async fn concurrent_creations_leave_one_whole_venv() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("share/toolbox/venv");
        let base = crate::discover::find(None).unwrap().executable.clone();
        let (a, b) = tokio::join!(create_venv(&venv, &base), create_venv(&venv, &base));
        a.unwrap();
        b.unwrap();
        assert!(venv.join("pyvenv.cfg").is_file());
        assert!(venv.join("bin/python").exists());
        let names: Vec<String> = std::fs::read_dir(venv.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["venv"]);
        let activate = std::fs::read_to_string(venv.join("bin/activate")).unwrap();
        assert!(activate.contains(&*venv.to_string_lossy()), "{activate}");
        assert!(!activate.contains(".tmp-"), "{activate}");
        // Its python finds the venv where it is now.
        let out = std::process::Command::new(venv.join("bin/python"))
            .args(["-I", "-c", "import sys; print(sys.prefix)"])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            venv.to_string_lossy()
        );
    }

    /// A folder at the venv's place that is not a venv (no pyvenv.cfg) is never used, nor
    /// replaced: the call fails naming it.
    #[tokio::test]
    async fn a_folder_that_is_not_a_venv_is_refused_and_left_alone() {
        let (dir, ctx) = crate::test_support::setup("kernel_install", "s", json!({}));
        let venv = dir.path().join("data/toolbox/venv");
        std::fs::create_dir_all(venv.join("lib")).unwrap();
        std::fs::write(venv.join("notes.txt"), "mine").unwrap();
        let base = crate::discover::find(None).unwrap();
        let e = ensure_venv_at(&venv, "the per-user venv", &base, &ctx)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "the per-user venv {} exists but is not a virtual environment (no pyvenv.cfg)",
                venv.display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(venv.join("notes.txt")).unwrap(),
            "mine"
        );
        // An empty folder there is fine: the venv is made and renamed into its place.
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        ensure_venv_at(&empty, "config [python] venv", &base, &ctx)
            .await
            .unwrap();
        assert!(empty.join("pyvenv.cfg").is_file());
    }

    #[test]
    fn minor_version_is_parsed() {
        let v = crate::discover::find(None).unwrap().minor();
        assert!(v.starts_with("3."), "{v}");
        assert_eq!(v.matches('.').count(), 1, "{v}");
    }

    #[test]
    fn the_interpreter_key_is_a_path_or_a_program_name_and_the_operators_alone() {
        let root = Path::new("/ws");
        let c =
            PythonConfig::from_value(Some(&json!({"interpreter": "python3.12"})), root).unwrap();
        assert_eq!(c.interpreter, Some(PathBuf::from("python3.12")));
        let c =
            PythonConfig::from_value(Some(&json!({"interpreter": "/opt/py/bin/python3"})), root)
                .unwrap();
        assert_eq!(c.interpreter, Some(PathBuf::from("/opt/py/bin/python3")));
        let e = PythonConfig::from_value(Some(&json!({"interpreter": "bin/python"})), root)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[python] interpreter must be an absolute path"),
            "{e}"
        );
        let e = PythonConfig::from_value(Some(&json!({"interpreter": " "})), root)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[python] interpreter"), "{e}");
        // A workspace's own toolbox.toml cannot choose which program runs its code.
        assert!(TABLE.rule("interpreter").is_none());
        assert!(TABLE.rule("backend").is_some());
    }
}
