//! The `[python]` table of toolbox.toml, and which interpreter and venv a call uses.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{ConfigTable, ToolContext};

use crate::{BUILD_PYTHON_EXECUTABLE, BUILD_PYTHON_VERSION};

/// Where run_python_code executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The interpreter inside this process (pyo3), on one dedicated thread. The default.
    Embedded,
    /// One worker process per session, killed on timeout.
    Isolated,
}

/// The keys `[python]` accepts.
const KEYS: &[&str] = &[
    "backend",
    "venv",
    "timeout_ms",
    "install_timeout_ms",
    "pip_args",
];

// What an untrusted workspace's toolbox.toml may set in [python]: a stricter backend and
// shorter timeouts. `venv` and `pip_args` are the operator's alone.
toolbox_core::workspace_config_rules!(
    "python",
    [
        (
            "backend",
            Tighten::Ranked {
                order: &["embedded", "isolated"],
                default: "embedded"
            }
        ),
        ("timeout_ms", Tighten::AtMost(300_000)),
        ("install_timeout_ms", Tighten::AtMost(600_000)),
    ]
);

/// The default limit of one run when neither the call nor the config gives one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The default limit of one `pip install`.
pub const DEFAULT_INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct PythonConfig {
    pub backend: Backend,
    /// An absolute venv folder: pip installs there, the session imports from there.
    pub venv: Option<PathBuf>,
    pub timeout: Duration,
    pub install_timeout: Duration,
    /// Extra `pip install` arguments set by whoever runs toolbox (never by the model), e.g.
    /// `["--no-index", "--find-links", "/srv/wheels"]`.
    pub pip_args: Vec<String>,
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
        let t = ConfigTable::new("python", table, KEYS)?;
        let backend = match t.one_of("backend", &["embedded", "isolated"])? {
            Some("isolated") => Backend::Isolated,
            _ => Backend::Embedded,
        };
        let venv = match t.string("venv")? {
            None => None,
            Some(text) if text.trim().is_empty() => return Err(t.invalid("venv", "a folder path")),
            // Relative venv paths are relative to the workspace, like every path.
            Some(text) => Some(workspace_root.join(text)),
        };
        let millis = |key: &str, default: Duration| -> Result<Duration> {
            Ok(t.u64_in(key, 1, u64::MAX)?
                .map_or(default, Duration::from_millis))
        };
        Ok(PythonConfig {
            backend,
            venv,
            timeout: millis("timeout_ms", DEFAULT_TIMEOUT)?,
            install_timeout: millis("install_timeout_ms", DEFAULT_INSTALL_TIMEOUT)?,
            pip_args: t.string_list("pip_args")?.unwrap_or_default(),
        })
    }

    /// The interpreter that pip, workers and lookups use: the venv's, else the build one.
    pub fn interpreter(&self) -> PathBuf {
        match &self.venv {
            Some(venv) => venv.join("bin").join("python"),
            None => PathBuf::from(BUILD_PYTHON_EXECUTABLE),
        }
    }

    /// The venv's site-packages folder (whether or not it exists yet).
    pub fn site_packages(&self) -> Option<PathBuf> {
        self.venv.as_ref().map(|venv| {
            venv.join("lib")
                .join(format!("python{}", build_minor_version()))
                .join("site-packages")
        })
    }
}

/// `3.11` from `3.11.7 (main, …)`.
pub fn build_minor_version() -> String {
    let number = BUILD_PYTHON_VERSION
        .split_whitespace()
        .next()
        .unwrap_or(BUILD_PYTHON_VERSION);
    number.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// Venvs already checked (or created) by this process.
static READY_VENVS: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Makes sure the configured venv exists and was made from the build interpreter's Python
/// version (the embedded interpreter imports its packages, so they must match).
///
/// A missing venv is created with `--system-site-packages`, so the isolated worker (which
/// runs the venv's python) sees the same packages as the embedded interpreter (which sees the
/// build interpreter's and the venv's).
pub async fn ensure_venv(config: &PythonConfig, ctx: &ToolContext) -> Result<()> {
    let Some(venv) = &config.venv else {
        return Ok(());
    };
    if ready_venvs(|set| set.contains(venv)) {
        return Ok(());
    }
    let cfg_file = venv.join("pyvenv.cfg");
    if !cfg_file.is_file() {
        if venv.exists()
            && std::fs::read_dir(venv)
                .map(|mut d| d.next().is_some())
                .unwrap_or(true)
        {
            bail!(
                "config [python] venv {} exists but is not a virtual environment (no pyvenv.cfg)",
                venv.display()
            );
        }
        ctx.emit_progress(format!("creating the Python venv {}", venv.display()));
        // Without its own pip: the base interpreter's pip is visible through the system
        // site-packages and installs into the venv when run by the venv's python. That takes
        // a fraction of a second instead of several for ensurepip.
        run_quietly(
            BUILD_PYTHON_EXECUTABLE.as_ref(),
            &[
                "-I",
                "-m",
                "venv",
                "--system-site-packages",
                "--without-pip",
            ],
            Some(venv),
        )
        .await
        .with_context(|| format!("could not create the venv {}", venv.display()))?;
        let python = venv.join("bin").join("python");
        if run_quietly(&python, &["-I", "-m", "pip", "--version"], None)
            .await
            .is_err()
        {
            run_quietly(&python, &["-I", "-m", "ensurepip", "--default-pip"], None)
                .await
                .with_context(|| format!("could not add pip to the venv {}", venv.display()))?;
        }
    }
    let text = std::fs::read_to_string(&cfg_file)
        .with_context(|| format!("cannot read {}", cfg_file.display()))?;
    let want = build_minor_version();
    let version = text
        .lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| matches!(k.trim(), "version" | "version_info"))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    if !(version == want || version.starts_with(&format!("{want}."))) {
        bail!(
            "config [python] venv {} was made with Python {} but toolbox embeds Python {}; \
             recreate it with {BUILD_PYTHON_EXECUTABLE} -m venv",
            venv.display(),
            if version.is_empty() {
                "(unknown)"
            } else {
                &version
            },
            want
        );
    }
    ready_venvs(|set| set.insert(venv.clone()));
    Ok(())
}

/// Runs `program args [extra]` and fails with its stderr when it fails.
///
/// Callers pass `-I` and this runs in `/`: with `-m`, Python would otherwise put the current
/// folder first on `sys.path`, and a planted `venv.py` or `pip.py` would run instead.
async fn run_quietly(program: &Path, args: &[&str], extra: Option<&Path>) -> Result<()> {
    let mut command = crate::isolated::python_command(program);
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
        assert_eq!(c.interpreter(), PathBuf::from(BUILD_PYTHON_EXECUTABLE));
        let c = PythonConfig::from_value(
            Some(
                &json!({"backend": "isolated", "venv": ".venv", "timeout_ms": 5000,
                         "pip_args": ["--no-index"]}),
            ),
            root,
        )
        .unwrap();
        assert_eq!(c.backend, Backend::Isolated);
        assert_eq!(c.interpreter(), PathBuf::from("/ws/.venv/bin/python"));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.pip_args, ["--no-index"]);
        assert!(c
            .site_packages()
            .unwrap()
            .ends_with(format!("python{}/site-packages", build_minor_version())));
    }

    #[test]
    fn bad_values_name_the_key() {
        let root = Path::new("/ws");
        let e = PythonConfig::from_value(Some(&json!({"backend": "docker"})), root)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "[python] backend must be \"embedded\" or \"isolated\", got \"docker\""
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
    fn minor_version_is_parsed() {
        let v = build_minor_version();
        assert!(v.starts_with("3."), "{v}");
        assert_eq!(v.matches('.').count(), 1, "{v}");
    }
}
