//! Which Python this process uses, found at run time: the binary links no libpython and
//! carries no interpreter's path from its build.
//!
//! The search, in order, stops at the first that is set:
//!
//! 1. `[python] interpreter` (operator config only; a workspace cannot name a program to run);
//! 2. the active virtual environment, `$VIRTUAL_ENV/bin/python`;
//! 3. `python3` on `PATH`.
//!
//! The one found is asked (`-I -S -c`, with a time limit) for its identity: `sys.version`, its
//! prefixes, its real `sys.executable` (a pyenv shim resolves to the interpreter behind it)
//! and where its shared libpython is, which the embedded backend loads. One without a shared
//! libpython can still run the isolated backend. A successful search is kept for the life of
//! the process; a failed one is tried again on the next call (Python may have been installed
//! meanwhile).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// How long the identity probe may take (a cold interpreter on a busy machine).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// The oldest Python the tools run on: the driver uses `socket.recv_fds` (3.9).
const MIN_PYTHON: (u32, u32) = (3, 9);
/// The oldest CPython the embedded backend runs on: its CPython layer is built for the
/// stable ABI of 3.10 (which reads a str's UTF-8 without copying it). 3.9 runs isolated.
const MIN_EMBEDDED: (u32, u32) = (3, 10);

/// Where the interpreter came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `[python] interpreter`.
    Config,
    /// `$VIRTUAL_ENV/bin/python`.
    VirtualEnv,
    /// `python3` on `PATH`.
    Path,
}

impl Source {
    /// How a message names it.
    pub fn describe(self) -> &'static str {
        match self {
            Source::Config => "[python] interpreter",
            Source::VirtualEnv => "the active virtual environment ($VIRTUAL_ENV)",
            Source::Path => "python3 on PATH",
        }
    }
}

/// An interpreter found at run time, and what it said about itself.
#[derive(Debug, Clone)]
pub struct FoundPython {
    /// Its `sys.executable` (a shim or symlink resolved by the interpreter itself).
    pub executable: PathBuf,
    /// Where it came from.
    pub source: Source,
    /// `sys.version`, on one line.
    pub version: String,
    /// `(major, minor)`.
    pub version_info: (u32, u32),
    /// `sys.prefix` (a venv's folder for a venv's python).
    pub prefix: PathBuf,
    /// `sys.base_prefix`.
    pub base_prefix: PathBuf,
    /// `sysconfig`'s `LIBDIR`, when it has one.
    pub libdir: Option<PathBuf>,
    /// Its shared libpython, or why the embedded backend cannot use this interpreter.
    pub library: Result<PathBuf, String>,
}

impl FoundPython {
    /// `3.11`.
    pub fn minor(&self) -> String {
        format!("{}.{}", self.version_info.0, self.version_info.1)
    }

    /// `/usr/bin/python3.11 (Python 3.11.2, python3 on PATH)`.
    pub fn describe(&self) -> String {
        let number = self.version.split_whitespace().next().unwrap_or("?");
        format!(
            "{} (Python {number}, from {})",
            self.executable.display(),
            self.source.describe()
        )
    }
}

/// Successful searches: the one without `[python] interpreter` (what nearly every call
/// asks for, looked up without hashing), and those by configured interpreter.
#[derive(Default)]
struct Found {
    default: Option<Arc<FoundPython>>,
    configured: HashMap<PathBuf, Arc<FoundPython>>,
}

static FOUND: Mutex<Option<Found>> = Mutex::new(None);

fn found<T>(f: impl FnOnce(&mut Found) -> T) -> T {
    f(FOUND
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Found::default))
}

/// The interpreter to use, `configured` being `[python] interpreter` if set (see the module's
/// documentation). The error names everything it looked for.
pub fn find(configured: Option<&Path>) -> Result<Arc<FoundPython>> {
    let cached = found(|found| match configured {
        None => found.default.clone(),
        Some(path) => found.configured.get(path).cloned(),
    });
    if let Some(python) = cached {
        return Ok(python);
    }
    let (candidate, source) = candidate(configured)?;
    let python = Arc::new(probe(&candidate, source)?);
    if python.version_info < MIN_PYTHON {
        bail!(
            "{} is Python {}.{}; toolbox's Python tools need Python {}.{} or later (set \
             [python] interpreter to a newer one)",
            python.executable.display(),
            python.version_info.0,
            python.version_info.1,
            MIN_PYTHON.0,
            MIN_PYTHON.1
        );
    }
    found(|found| match configured {
        None => found.default = Some(python.clone()),
        Some(path) => {
            found.configured.insert(path.to_path_buf(), python.clone());
        }
    });
    Ok(python)
}

/// The `LIBDIR` of an interpreter found already (it never starts a search): one named by
/// `[python] interpreter` first, else the one found without it.
pub(crate) fn known_libdir() -> Option<PathBuf> {
    found(|found| {
        found
            .configured
            .values()
            .next()
            .or(found.default.as_ref())
            .and_then(|python| python.libdir.clone())
    })
}

/// The program to ask, and where it came from.
fn candidate(configured: Option<&Path>) -> Result<(PathBuf, Source)> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(configured) = configured {
        if !configured.is_absolute() {
            // A program name: the first of that name on PATH.
            return configured
                .to_str()
                .and_then(|name| toolbox_host::find_program_in(name, &path))
                .map(|p| (p, Source::Config))
                .ok_or_else(|| {
                    anyhow!(
                        "[python] interpreter is {}, which is not on PATH ({})",
                        configured.display(),
                        path.to_string_lossy()
                    )
                });
        }
        if !toolbox_host::is_executable(configured) {
            bail!(
                "[python] interpreter is {}, which is not an executable file",
                configured.display()
            );
        }
        return Ok((configured.to_path_buf(), Source::Config));
    }
    let mut looked = vec!["[python] interpreter (not set)".to_string()];
    match std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        Some(venv) => {
            let python = Path::new(&venv).join("bin").join("python");
            if toolbox_host::is_executable(&python) {
                return Ok((python, Source::VirtualEnv));
            }
            looked.push(format!(
                "$VIRTUAL_ENV/bin/python ({} is not an executable file)",
                python.display()
            ));
        }
        None => looked.push("$VIRTUAL_ENV/bin/python (VIRTUAL_ENV is not set)".into()),
    }
    if let Some(python) = toolbox_host::find_program_in("python3", &path) {
        return Ok((python, Source::Path));
    }
    looked.push(format!(
        "python3 on PATH ({})",
        if path.is_empty() {
            "PATH is empty".to_string()
        } else {
            format!("not in {}", path.to_string_lossy())
        }
    ));
    bail!(
        "no Python interpreter found; looked for {}. Install Python 3 (for example `apt-get \
         install python3`), activate a virtual environment, or set [python] interpreter in \
         the user's toolbox.toml",
        looked.join(", then ")
    )
}

/// What the probe prints: one JSON object.
const PROBE: &str = r#"
import json, os, sys, sysconfig
v = sysconfig.get_config_var
# Without site (-S), a venv's sys.prefix is still its base's: find its pyvenv.cfg as site does.
prefix = sys.prefix
here = os.path.dirname(sys.executable)
for folder in (here, os.path.dirname(here)):
    if os.path.isfile(os.path.join(folder, "pyvenv.cfg")):
        prefix = folder
        break
print(json.dumps({
    "implementation": sys.implementation.name,
    "version": sys.version.replace("\n", " "),
    "version_info": list(sys.version_info[:2]),
    "executable": sys.executable,
    "prefix": prefix,
    "base_prefix": sys.base_prefix,
    "libdir": v("LIBDIR"),
    "multiarch": v("MULTIARCH"),
    "instsoname": v("INSTSONAME"),
    "ldlibrary": v("LDLIBRARY"),
    "ver": v("VERSION"),
    "abiflags": getattr(sys, "abiflags", ""),
}))
"#;

/// Asks `program` who it is: first without `LD_LIBRARY_PATH`, so a shared-library Python
/// finds its own libpython through its rpath (a `LD_LIBRARY_PATH` meant for something else
/// could swap in another installation's libpython of the same name), then, if that fails,
/// with the environment as it is (a Python that needs `LD_LIBRARY_PATH` to start at all).
fn probe(program: &Path, source: Source) -> Result<FoundPython> {
    match probe_with(program, source, false) {
        Err(e) if std::env::var_os("LD_LIBRARY_PATH").is_some() => {
            probe_with(program, source, true).map_err(|again| e.context(again))
        }
        other => other,
    }
}

fn probe_with(program: &Path, source: Source, keep_library_path: bool) -> Result<FoundPython> {
    let what = || format!("{} (from {})", program.display(), source.describe());
    let mut command = std::process::Command::new(program);
    if !keep_library_path {
        command.env_remove("LD_LIBRARY_PATH");
    }
    let mut child = command
        // -S: no site module, a third of a bare start; the one thing it would tell, a venv's
        // prefix, the probe finds itself.
        .args(["-I", "-S", "-c", PROBE])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the Python interpreter {}", what()))?;
    let started = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if started.elapsed() > PROBE_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the Python interpreter {} did not answer within {} s",
                what(),
                PROBE_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "the Python interpreter {} failed ({}): {}",
            what(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let info: Value = serde_json::from_str(text.trim()).map_err(|e| {
        anyhow!(
            "the Python interpreter {} answered oddly ({e}): {text}",
            what()
        )
    })?;
    parse(&info, program, source)
}

fn parse(info: &Value, program: &Path, source: Source) -> Result<FoundPython> {
    let text = |key: &str| info[key].as_str().unwrap_or_default().to_string();
    let path = |key: &str| Some(text(key)).filter(|s| !s.is_empty()).map(PathBuf::from);
    let number = |i: usize| info["version_info"][i].as_u64().unwrap_or(0) as u32;
    let version_info = (number(0), number(1));
    let executable = path("executable").unwrap_or_else(|| program.to_path_buf());
    let libdir = path("libdir");
    let library = if text("implementation") != "cpython" {
        Err(format!(
            "the embedded backend needs CPython, and {} is {}",
            executable.display(),
            text("implementation")
        ))
    } else if version_info < MIN_EMBEDDED {
        Err(format!(
            "the embedded backend needs CPython {}.{} or later, and {} is {}.{}",
            MIN_EMBEDDED.0,
            MIN_EMBEDDED.1,
            executable.display(),
            version_info.0,
            version_info.1
        ))
    } else {
        shared_library(info, libdir.as_deref(), &executable)
    };
    Ok(FoundPython {
        executable,
        source,
        version: text("version"),
        version_info,
        prefix: path("prefix").unwrap_or_default(),
        base_prefix: path("base_prefix").unwrap_or_default(),
        libdir,
        library,
    })
}

/// Where the interpreter's shared libpython is: its `INSTSONAME` or `LDLIBRARY` (when a
/// shared object), else `libpython<VERSION><ABIFLAGS>.so[.1.0]`, in `LIBDIR`, `LIBDIR/<MULTIARCH>`
/// or `<base_prefix>/lib`. Debian's `python3` is linked statically but its libpython3.X
/// package puts the shared one in `LIBDIR`, which serves.
fn shared_library(
    info: &Value,
    libdir: Option<&Path>,
    executable: &Path,
) -> Result<PathBuf, String> {
    let text = |key: &str| info[key].as_str().unwrap_or_default().to_string();
    let base = format!("libpython{}{}", text("ver"), text("abiflags"));
    let mut names: Vec<String> = [text("instsoname"), text("ldlibrary")]
        .into_iter()
        .filter(|name| name.contains(".so"))
        .collect();
    names.push(format!("{base}.so.1.0"));
    names.push(format!("{base}.so"));
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(libdir) = libdir {
        dirs.push(libdir.to_path_buf());
        let multiarch = text("multiarch");
        if !multiarch.is_empty() {
            dirs.push(libdir.join(multiarch));
        }
    }
    if let Some(base_prefix) = info["base_prefix"].as_str().filter(|s| !s.is_empty()) {
        dirs.push(Path::new(base_prefix).join("lib"));
    }
    for dir in &dirs {
        for name in &names {
            // Names from sysconfig are single file names; anything else is not ours to open.
            if name.contains('/') {
                continue;
            }
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "the embedded backend needs a shared libpython, and {} has none (looked for {} in {}); \
         it was built without --enable-shared, or its libpython package is not installed \
         (on Debian: apt-get install libpython{}{})",
        executable.display(),
        names.join(", "),
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        text("ver"),
        text("abiflags"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_interpreter_without_a_shared_libpython_says_where_it_looked() {
        let info = json!({
            "implementation": "cpython", "version": "3.12.1 (main)", "version_info": [3, 12],
            "executable": "/opt/py/bin/python3.12", "prefix": "/opt/py", "base_prefix": "/opt/py",
            "libdir": "/nonexistent/lib", "multiarch": "x86_64-linux-gnu",
            "instsoname": "libpython3.12.a", "ldlibrary": "libpython3.12.a", "ver": "3.12",
            "abiflags": "",
        });
        let found = parse(&info, Path::new("/opt/py/bin/python3"), Source::Path).unwrap();
        assert_eq!(found.minor(), "3.12");
        let e = found.library.unwrap_err();
        assert!(e.contains("libpython3.12.so.1.0"), "{e}");
        assert!(e.contains("/nonexistent/lib/x86_64-linux-gnu"), "{e}");
        assert!(e.contains("--enable-shared"), "{e}");

        let old = json!({"implementation": "cpython", "version_info": [3, 9], "executable": "/p"});
        let e = parse(&old, Path::new("/p"), Source::Path)
            .unwrap()
            .library
            .unwrap_err();
        assert!(e.contains("3.10 or later"), "{e}");
        let pypy = json!({"implementation": "pypy", "version_info": [3, 10], "executable": "/p"});
        let e = parse(&pypy, Path::new("/p"), Source::Path)
            .unwrap()
            .library
            .unwrap_err();
        assert!(e.contains("needs CPython"), "{e}");
    }

    #[test]
    fn a_venvs_python_is_probed_as_the_venv_with_its_bases_libpython() {
        let base = find(None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("venv");
        let made = std::process::Command::new(&base.executable)
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success());
        let found = probe(&venv.join("bin/python"), Source::VirtualEnv).unwrap();
        // The probe runs without site, which is what sets a venv's prefix in Python itself.
        assert_eq!(found.prefix, venv);
        assert_eq!(found.base_prefix, base.base_prefix);
        assert_eq!(found.version, base.version);
        assert_eq!(found.library, base.library);
        assert!(
            found.executable.starts_with(&venv),
            "{}",
            found.executable.display()
        );
    }

    #[test]
    fn a_configured_interpreter_that_is_not_a_program_is_refused_by_name() {
        let e = find(Some(Path::new("/nonexistent/python3"))).unwrap_err();
        assert!(
            e.to_string()
                .contains("[python] interpreter is /nonexistent/python3"),
            "{e}"
        );
    }
}
