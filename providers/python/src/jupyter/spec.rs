//! Kernelspecs, and the kernel processes toolbox starts from them.
//!
//! A kernelspec is `<data dir>/kernels/<name>/kernel.json`. The data dirs are searched in
//! this order (the first match wins), like Jupyter's own list with the configured venv in
//! front of the user's folder:
//!
//! 1. every folder of `JUPYTER_PATH`,
//! 2. `<[python] venv>/share/jupyter`, then the activated environment's:
//!    `$VIRTUAL_ENV/share/jupyter` and `$CONDA_PREFIX/share/jupyter`,
//! 3. `JUPYTER_DATA_DIR`, else `$XDG_DATA_HOME/jupyter`, else `~/.local/share/jupyter`,
//! 4. the build interpreter's `<sys.prefix>/share/jupyter`,
//! 5. `/usr/local/share/jupyter` and `/usr/share/jupyter`.
//!
//! `argv` is run with `{connection_file}` and `{resource_dir}` substituted. An `argv[0]` of
//! `python` (or `python3`, `python3.X`) means the Python the kernelspec belongs to, as
//! jupyter_client reads it: `<prefix>/bin/python` when the spec lies in
//! `<prefix>/share/jupyter/kernels/`, else whatever `PATH` finds.
//!
//! A started kernel gets a private folder (mode 0700) holding its connection file (0600)
//! with a fresh random key and free loopback ports, removed once the kernel has answered
//! ([`Process::remove_connection_file`]); it runs in its own process group in the
//! session scratchpad, registered with toolbox's containment (so the janitor kills it if
//! toolbox dies) and with `JPY_PARENT_PID` set (ipykernel then exits when its parent does).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::wire::{random_hex, ConnectionInfo};

/// Lines of a kernel's own stdout/stderr kept for error messages.
const TAIL_LINES: usize = 30;

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
    dirs.push(PathBuf::from(crate::BUILD_PYTHON_PREFIX).join("share/jupyter"));
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

fn is_bare_python(program: &str) -> bool {
    match program.strip_prefix("python") {
        Some("") | Some("3") => true,
        Some(rest) => rest
            .strip_prefix("3.")
            .is_some_and(|minor| !minor.is_empty() && minor.chars().all(|c| c.is_ascii_digit())),
        None => false,
    }
}

/// A kernel process toolbox started.
pub struct Process {
    pub child: Child,
    pub pid: i32,
    /// Set once the process group was killed: never signal the id again (it may be reused).
    killed: bool,
    output_tail: Arc<Mutex<VecDeque<String>>>,
    /// The private folder of the connection file, until the kernel has read it.
    dir: Option<tempfile::TempDir>,
}

/// A kernel toolbox started, as the exit hook needs it.
#[derive(Clone)]
pub struct Started {
    pub pid: i32,
    pub info: ConnectionInfo,
    /// The private folder of its connection file.
    pub folder: PathBuf,
}

/// Every kernel process toolbox started and has not stopped yet.
static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());

fn started_list<T>(f: impl FnOnce(&mut Vec<Started>) -> T) -> T {
    f(&mut STARTED.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Empties the list of started kernels and returns it (for the exit hook).
pub fn take_started() -> Vec<Started> {
    started_list(std::mem::take)
}

/// Whether process `pid` still runs (neither gone nor a zombie).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// SIGKILL to process group `pid`.
pub fn kill_group(pid: i32) {
    // SAFETY: signalling a process group toolbox created; a group that is gone is ESRCH.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    if let Some(c) = toolbox_core::containment::current() {
        c.unregister_group(pid);
    }
}

/// Free TCP ports on the loopback address (bound together, then released for the kernel).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .context("cannot find free ports on 127.0.0.1")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

/// Writes a connection file with fresh ports and key, then starts the kernel in `cwd`.
pub fn spawn(spec: &KernelSpec, cwd: &Path) -> Result<(Process, ConnectionInfo)> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let ports = free_ports(5)?;
    let info = ConnectionInfo {
        ip: "127.0.0.1".into(),
        shell_port: ports[0],
        iopub_port: ports[1],
        stdin_port: ports[2],
        control_port: ports[3],
        hb_port: ports[4],
        key: random_hex(32)?,
        signature_scheme: "hmac-sha256".into(),
    };
    let dir = tempfile::Builder::new()
        .prefix("toolbox-kernel-")
        .tempdir()
        .context("cannot create a private folder for the kernel's connection file")?;
    let connection_file = dir.path().join("kernel.json");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&connection_file)
        .with_context(|| format!("cannot write {}", connection_file.display()))?;
    file.write_all(info.to_json(&spec.name).to_string().as_bytes())?;
    drop(file);

    let argv = spec.command_line(&connection_file);
    let mut command = if is_bare_python(
        Path::new(&argv[0])
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(""),
    ) {
        crate::common::python_command(Path::new(&argv[0]))
    } else {
        Command::new(&argv[0])
    };
    command
        .args(&argv[1..])
        .current_dir(cwd)
        // ipykernel picks its inline matplotlib backend when MPLBACKEND is unset; toolbox's
        // own environment may name another one.
        .env_remove("MPLBACKEND")
        .env("JPY_PARENT_PID", std::process::id().to_string())
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().with_context(|| {
        format!(
            "cannot start the kernel {:?} ({})",
            spec.name,
            argv.join(" ")
        )
    })?;
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| anyhow!("the kernel process has no pid"))?;
    if let Some(c) = toolbox_core::containment::current() {
        c.register_group(pid);
    }
    started_list(|list| {
        list.push(Started {
            pid,
            info: info.clone(),
            folder: dir.path().to_path_buf(),
        })
    });
    let output_tail = Arc::new(Mutex::new(VecDeque::new()));
    if let Some(out) = child.stdout.take() {
        keep_tail(BufReader::new(out), output_tail.clone());
    }
    if let Some(err) = child.stderr.take() {
        keep_tail(BufReader::new(err), output_tail.clone());
    }
    Ok((
        Process {
            child,
            pid,
            killed: false,
            output_tail,
            dir: Some(dir),
        },
        info,
    ))
}

fn keep_tail<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
    reader: BufReader<R>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    tokio::spawn(async move {
        let mut lines = reader.lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    });
}

impl Process {
    /// Whether the process has ended (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Interrupts the kernel with SIGINT to its process group, as Jupyter does.
    pub fn sigint(&self) {
        // SAFETY: signalling the process group we created; a stale id is harmless (ESRCH).
        unsafe {
            libc::kill(-self.pid, libc::SIGINT);
        }
    }

    /// Kills the kernel's process group (it and whatever it started).
    pub fn kill(&mut self) {
        if std::mem::replace(&mut self.killed, true) {
            return;
        }
        kill_group(self.pid);
        let _ = self.child.start_kill();
        let pid = self.pid;
        started_list(|list| list.retain(|k| k.pid != pid));
    }

    /// How the process ended, with the last lines it printed.
    pub async fn describe_exit(&mut self) -> String {
        let how = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await {
            Ok(Ok(status)) => describe_status(status),
            _ => "stopped answering".to_string(),
        };
        // Let the readers take what the process wrote before it ended.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let tail = self.output();
        if tail.is_empty() {
            how
        } else {
            format!("{how}; its last output:\n{tail}")
        }
    }

    /// Removes the connection file (and its folder) once the kernel has read it and
    /// answered: nothing else connects to a kernel toolbox started, and the key should not
    /// lie around, even if toolbox is killed before it can clean up.
    pub fn remove_connection_file(&mut self) {
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }

    /// Forgets what the kernel printed so far.
    pub fn forget_output(&self) {
        self.output_tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The last lines the kernel printed to its stdout and stderr.
    pub fn output(&self) -> String {
        let tail = self.output_tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Whatever the kernel started dies with its group, even after the kernel itself.
        self.kill();
    }
}

pub fn describe_status(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        let name = match signal {
            libc::SIGKILL => " (SIGKILL)",
            libc::SIGSEGV => " (SIGSEGV, a segmentation fault)",
            libc::SIGTERM => " (SIGTERM)",
            libc::SIGABRT => " (SIGABRT)",
            _ => "",
        };
        format!("was killed by signal {signal}{name}")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
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
