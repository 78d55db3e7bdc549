//! Kernelspecs: where they are found and what they say (the kernel processes started from
//! them are [`super::process`]'s).
//!
//! A kernelspec is `<data dir>/kernels/<name>/kernel.json`. The data dirs are searched in
//! this order (the first match wins), like Jupyter's own list with the configured venv in
//! front of the user's folder:
//!
//! 1. every folder of `JUPYTER_PATH`,
//! 2. `<[python] venv>/share/jupyter`, then the activated environment's:
//!    `$VIRTUAL_ENV/share/jupyter` and `$CONDA_PREFIX/share/jupyter`,
//! 3. `JUPYTER_DATA_DIR`, else `$XDG_DATA_HOME/jupyter`, else `~/.local/share/jupyter`,
//! 4. the found interpreter's `<sys.prefix>/share/jupyter`,
//! 5. `/usr/local/share/jupyter` and `/usr/share/jupyter`.
//!
//! `argv` is run with `{connection_file}` and `{resource_dir}` substituted. An `argv[0]` of
//! `python` (or `python3`, `python3.X`) means the Python the kernelspec belongs to, as
//! jupyter_client reads it: `<prefix>/bin/python` when the spec lies in
//! `<prefix>/share/jupyter/kernels/`, else whatever `PATH` finds.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// How a kernel wants to be interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterruptMode {
    /// SIGINT to the kernel's process group (Jupyter's default).
    Signal,
    /// An `interrupt_request` on the control channel.
    Message,
}

#[derive(Debug, Clone)]
pub struct KernelSpec {
    pub name: String,
    pub dir: PathBuf,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub interrupt_mode: InterruptMode,
}

/// The `kernels` folders searched, in order.
pub fn search_dirs(venv: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(path) = std::env::var_os("JUPYTER_PATH") {
        dirs.extend(std::env::split_paths(&path).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(venv) = venv {
        dirs.push(venv.join("share").join("jupyter"));
    }
    // The environment the user activated, as Jupyter itself prefers it in one: a venv
    // holding ipykernel makes `kernel_name = "python3"` find its kernel.
    for active in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(prefix) = std::env::var_os(active).filter(|p| !p.is_empty()) {
            dirs.push(PathBuf::from(prefix).join("share").join("jupyter"));
        }
    }
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    if let Some(dir) = std::env::var_os("JUPYTER_DATA_DIR").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(dir));
    } else if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(xdg).join("jupyter"));
    } else if let Some(home) = &home {
        dirs.push(PathBuf::from(home).join(".local/share/jupyter"));
    }
    if let Ok(python) = crate::discover::find(None) {
        dirs.push(python.prefix.join("share/jupyter"));
    }
    dirs.push(PathBuf::from("/usr/local/share/jupyter"));
    dirs.push(PathBuf::from("/usr/share/jupyter"));
    let mut seen = std::collections::HashSet::new();
    dirs.into_iter()
        .map(|d| d.join("kernels"))
        .filter(|d| seen.insert(d.clone()))
        .collect()
}

/// Finds kernelspec `name` (case-insensitive, as Jupyter does).
pub fn find(name: &str, venv: Option<&Path>) -> Result<KernelSpec> {
    let dirs = search_dirs(venv);
    let wanted = name.to_ascii_lowercase();
    let mut available = Vec::new();
    for dir in &dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().join("kernel.json").is_file())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        if let Some(found) = names.iter().find(|n| n.to_ascii_lowercase() == wanted) {
            let folder = dir.join(found);
            return read(found, &folder).with_context(|| {
                format!("the kernelspec {}", folder.join("kernel.json").display())
            });
        }
        available.extend(names);
    }
    available.sort();
    available.dedup();
    let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bail!(
        "[python] kernel_name {name:?}: no such kernelspec in {}{}",
        shown.join(", "),
        if available.is_empty() {
            " (no kernelspec is installed there: `python -m ipykernel install --user` adds one)"
                .to_string()
        } else {
            format!("; installed: {}", available.join(", "))
        }
    )
}

fn read(name: &str, dir: &Path) -> Result<KernelSpec> {
    let text = std::fs::read_to_string(dir.join("kernel.json"))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| anyhow!("is not JSON: {e}"))?;
    let argv: Vec<String> = v["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if argv.is_empty() || argv.len() != v["argv"].as_array().map_or(0, Vec::len) {
        bail!("`argv` must be a non-empty list of strings");
    }
    let env = v["env"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default();
    let interrupt_mode = match v["interrupt_mode"].as_str() {
        None | Some("signal") => InterruptMode::Signal,
        Some("message") => InterruptMode::Message,
        Some(other) => bail!("`interrupt_mode` {other:?} is neither \"signal\" nor \"message\""),
    };
    Ok(KernelSpec {
        name: name.to_string(),
        dir: dir.to_path_buf(),
        argv,
        env,
        interrupt_mode,
    })
}

impl KernelSpec {
    /// The command line, with the connection file and resource folder filled in.
    pub fn command_line(&self, connection_file: &Path) -> Vec<String> {
        let mut argv: Vec<String> = self
            .argv
            .iter()
            .map(|a| {
                a.replace("{connection_file}", &connection_file.to_string_lossy())
                    .replace("{resource_dir}", &self.dir.to_string_lossy())
            })
            .collect();
        if is_bare_python(&argv[0]) {
            if let Some(python) = self.own_python() {
                argv[0] = python.to_string_lossy().into_owned();
            }
        }
        argv
    }

    /// `<prefix>/bin/python3` for a spec in `<prefix>/share/jupyter/kernels/<name>`.
    fn own_python(&self) -> Option<PathBuf> {
        let kernels = self.dir.parent()?;
        let jupyter = kernels.parent()?;
        let share = jupyter.parent()?;
        if kernels.file_name()? != "kernels"
            || jupyter.file_name()? != "jupyter"
            || share.file_name()? != "share"
        {
            return None;
        }
        let bin = share.parent()?.join("bin");
        ["python3", "python"]
            .iter()
            .map(|n| bin.join(n))
            .find(|p| p.is_file())
    }
}

/// Whether `program` names "the Python" rather than a path (`python`, `python3`, `python3.X`).
pub fn is_bare_python(program: &str) -> bool {
    match program.strip_prefix("python") {
        Some("") | Some("3") => true,
        Some(rest) => rest
            .strip_prefix("3.")
            .is_some_and(|minor| !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit())),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernelspecs_are_found_read_and_filled_in() {
        let prefix = tempfile::tempdir().unwrap();
        let spec_dir = prefix.path().join("share/jupyter/kernels/Py-Test");
        std::fs::create_dir_all(&spec_dir).unwrap();
        std::fs::write(
            spec_dir.join("kernel.json"),
            r#"{"argv": ["python", "-m", "ipykernel_launcher", "-f", "{connection_file}",
                         "--res={resource_dir}"],
                "display_name": "t", "language": "python", "interrupt_mode": "message",
                "env": {"A": "1"}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(prefix.path().join("bin")).unwrap();
        std::fs::write(prefix.path().join("bin/python3"), "").unwrap();
        let spec = find("py-test", Some(prefix.path())).unwrap();
        assert_eq!(spec.name, "Py-Test");
        assert_eq!(spec.interrupt_mode, InterruptMode::Message);
        assert_eq!(spec.env, [("A".to_string(), "1".to_string())]);
        let argv = spec.command_line(Path::new("/run/k.json"));
        assert_eq!(argv[0], prefix.path().join("bin/python3").to_string_lossy());
        assert_eq!(argv[4], "/run/k.json");
        assert_eq!(argv[5], format!("--res={}", spec_dir.display()));

        let e = find("nope", Some(prefix.path())).unwrap_err().to_string();
        assert!(
            e.starts_with("[python] kernel_name \"nope\": no such kernelspec in "),
            "{e}"
        );
        assert!(e.contains("installed: ") && e.contains("Py-Test"), "{e}");

        std::fs::write(spec_dir.join("kernel.json"), r#"{"argv": []}"#).unwrap();
        let e = format!("{:#}", find("py-test", Some(prefix.path())).unwrap_err());
        assert!(
            e.ends_with("`argv` must be a non-empty list of strings"),
            "{e}"
        );
    }

    #[test]
    fn bare_python_names() {
        for yes in ["python", "python3", "python3.11"] {
            assert!(is_bare_python(yes), "{yes}");
        }
        for no in ["python2", "python3.", "/usr/bin/python", "ipython", "R"] {
            assert!(!is_bare_python(no), "{no}");
        }
    }
}
