//! The provider's own long-lived thread, and the janitor process that outlives us.
//!
//! **Why a thread of our own.** Background jobs and sandboxed commands are forked with
//! `PR_SET_PDEATHSIG(SIGKILL)` so they die with toolbox. The kernel ties that signal to the
//! *thread* that forked, not to the process: if the forking thread exits, the command is
//! killed. tokio's blocking-pool threads exit after a few idle seconds, and a worker thread
//! can turn into one (`block_in_place`), so forking from whatever thread runs the call would
//! kill background jobs (and occasionally long commands) at random. These forks therefore
//! happen on one thread that lives as long as the process. It runs a small current-thread
//! tokio runtime that also drives background jobs, so a job does not depend on the runtime
//! of the call that started it either. (Plain foreground commands use `posix_spawn` on the
//! calling thread instead, see `process::spawn_posix`; they have no death signal and rely
//! on the janitor alone.)
//!
//! The forker knows nothing of supervision: `process` uses it to start and reap, and it
//! uses only host (`toolbox_host::sandbox` for the system calls).
//!
//! **Why a janitor.** `PR_SET_PDEATHSIG` reaches only the process we forked (bash), not the
//! processes bash starts. Every command's session is therefore registered with toolbox's
//! janitor (`toolbox_host::containment`), a small process that kills the process group and
//! every process of each session still registered when toolbox dies, however it dies. In
//! cgroup mode the janitor also kills toolbox's whole cgroup, which holds every command.

use std::process::{Child, Command};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Result};
use tokio::runtime::Handle;
use toolbox_host::sandbox::{self, PipedChild, Reap, Signal};

static FORKER: OnceLock<Result<Handle, String>> = OnceLock::new();

/// The handle of the provider thread's runtime, starting the thread on first use.
pub fn handle() -> Result<&'static Handle> {
    FORKER
        .get_or_init(start)
        .as_ref()
        .map_err(|e| anyhow!("cannot start the shell provider's thread: {e}"))
}

fn start() -> Result<Handle, String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("toolbox-shell".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = tx.send(Ok(runtime.handle().clone()));
            // Never returns: this thread must outlive every process it forks.
            runtime.block_on(std::future::pending::<()>());
        })
        .map_err(|e| e.to_string())?;
    rx.recv()
        .map_err(|_| "the thread stopped while starting".to_string())?
}

/// Starts `command` on the provider thread (see the module docs for why) and registers the
/// session it creates with the janitor.
///
/// If the caller stops waiting (its future is dropped), the new process group is killed and
/// reaped instead of being left running unsupervised.
pub async fn spawn(mut command: Command) -> Result<PipedChild, std::io::Error> {
    let forker = handle().map_err(std::io::Error::other)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    forker.spawn(async move {
        let spawned = command.spawn().and_then(piped);
        if let Ok(s) = &spawned {
            janitor_send('+', s.pid as u32);
        }
        if let Err(Ok(s)) = tx.send(spawned) {
            sandbox::signal_group(s.pid, Signal::KILL);
            janitor_send('-', s.pid as u32);
            reap_later(s.pid);
        }
    });
    rx.await
        .map_err(|_| std::io::Error::other("the shell provider's thread went away"))?
}

/// Takes over a child started by std: its pid and the read ends of its pipes. The `Child`
/// value is dropped: that neither kills nor waits for the process, which is reaped by pid.
fn piped(mut child: Child) -> std::io::Result<PipedChild> {
    let pid = child.id() as i32;
    match (child.stdout.take(), child.stderr.take()) {
        (Some(out), Some(err)) => Ok(PipedChild {
            pid,
            stdout: out.into(),
            stderr: err.into(),
        }),
        _ => {
            // Cannot happen with piped stdio; do not leave the command running if it does.
            sandbox::signal_group(pid, Signal::KILL);
            reap_later(pid);
            Err(std::io::Error::other(
                "the command's output pipes are missing",
            ))
        }
    }
}

/// Reaps a child that has been sent SIGKILL but may not have exited yet, without blocking
/// anyone: the provider thread polls it until it is gone.
pub fn reap_later(pid: i32) {
    if !matches!(sandbox::try_reap(pid), Reap::StillRunning) {
        return;
    }
    let Ok(forker) = handle() else {
        return;
    };
    forker.spawn(async move {
        while matches!(sandbox::try_reap(pid), Reap::StillRunning) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Tells toolbox's janitor (see `toolbox_host::containment`) that a command's session
/// started (`+`) or is fully stopped (`-`): if toolbox dies in between, the janitor kills the
/// process group and every process of the session.
pub fn janitor_send(op: char, id: u32) {
    let containment = toolbox_host::containment::ensure();
    match op {
        '+' => containment.register_group(id as i32),
        _ => containment.unregister_group(id as i32),
    }
}
