//! The kernel processes toolbox starts from kernelspecs: spawning, signalling, killing and
//! waiting on them, and the list the exit hook shuts down.
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
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use toolbox_host::sandbox::{self, Signal};

use super::spec::{is_bare_python, KernelSpec};
use super::wire::{random_hex, ConnectionInfo};

/// Lines of a kernel's own stdout/stderr kept for error messages.
const TAIL_LINES: usize = 30;

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
    // A process group toolbox created; a group that is gone is ESRCH.
    sandbox::signal_group(pid, Signal::KILL);
    if let Some(c) = toolbox_host::containment::current() {
        c.unregister_group(pid);
    }
}

/// Ports this process handed to kernels lately. A port is released for its kernel to bind,
/// so until the kernel has, the OS may offer it again: a second kernel started here
/// meanwhile (sessions start kernels in parallel) must not be given it too, or the two
/// kernels' channels would cross (seen as "sockets combination is not compatible").
static RECENT_PORTS: Mutex<VecDeque<u16>> = Mutex::new(VecDeque::new());

/// How many handed-out ports [`RECENT_PORTS`] remembers.
const RECENT_KEPT: usize = 512;

/// `n` free TCP ports on the loopback address, none handed to another kernel of this
/// process lately (bound together, then released for the kernel).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let mut recent = RECENT_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    // A port offered again stays bound here meanwhile, so the OS offers another.
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..n * 50 {
        if ports.len() == n {
            break;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .context("cannot find free ports on 127.0.0.1")?;
        let port = listener.local_addr()?.port();
        if !recent.contains(&port) && !ports.contains(&port) {
            ports.push(port);
        }
        held.push(listener);
    }
    if ports.len() < n {
        bail!("cannot find {n} free ports on 127.0.0.1 that no other kernel was given");
    }
    for port in &ports {
        if recent.len() == RECENT_KEPT {
            recent.pop_front();
        }
        recent.push_back(*port);
    }
    Ok(ports)
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
    if let Some(c) = toolbox_host::containment::current() {
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
        // The process group we created; a stale id is harmless (ESRCH).
        sandbox::signal_group(self.pid, Signal::INT);
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
        let name = match sandbox::signal_name(signal) {
            "SIGKILL" => " (SIGKILL)",
            "SIGSEGV" => " (SIGSEGV, a segmentation fault)",
            "SIGTERM" => " (SIGTERM)",
            "SIGABRT" => " (SIGABRT)",
            _ => "",
        };
        format!("was killed by signal {signal}{name}")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

#[cfg(test)]
mod tests {
    use super::free_ports;

    #[test]
    fn kernels_started_at_once_are_never_given_the_same_port() {
        // 16 starts at once, each given 5 ports released at once: as parallel sessions do.
        let picks: Vec<Vec<u16>> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..16)
                .map(|_| scope.spawn(|| free_ports(5).unwrap()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<u16> = picks.concat();
        assert_eq!(all.len(), 80);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 80, "a port was given twice");
    }
}
