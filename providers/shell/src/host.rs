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
//! **Why a janitor.** `PR_SET_PDEATHSIG` reaches only the process we forked (bash), not the
//! processes bash starts. So the first command also starts a tiny script (bash and awk), the
//! janitor, in its own process group, that reads "+ID"/"-ID" lines (a session being started
//! / fully stopped) from a pipe whose write end only toolbox holds. When toolbox dies,
//! however it dies, the pipe reaches end-of-file and the janitor kills the process group and
//! every process of each session still registered, then exits.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Result};
use tokio::runtime::Handle;

use crate::process::{try_reap, Reap, Spawned};

static HOST: OnceLock<Result<Handle, String>> = OnceLock::new();

/// The handle of the provider thread's runtime, starting the thread on first use.
pub fn handle() -> Result<&'static Handle> {
    HOST.get_or_init(start)
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
pub async fn spawn(mut command: Command) -> Result<Spawned, std::io::Error> {
    let host = handle().map_err(std::io::Error::other)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    host.spawn(async move {
        let spawned = command.spawn().and_then(Spawned::from_child);
        if let Ok(s) = &spawned {
            janitor_send('+', s.pid as u32);
        }
        if let Err(Ok(s)) = tx.send(spawned) {
            crate::process::signal_group(s.pid, libc::SIGKILL);
            janitor_send('-', s.pid as u32);
            reap_later(s.pid);
        }
    });
    rx.await
        .map_err(|_| std::io::Error::other("the shell provider's thread went away"))?
}

/// Reaps a child that has been sent SIGKILL but may not have exited yet, without blocking
/// anyone: the provider thread polls it until it is gone.
pub fn reap_later(pid: i32) {
    if !matches!(try_reap(pid), Reap::StillRunning) {
        return;
    }
    let Ok(host) = handle() else {
        return;
    };
    host.spawn(async move {
        while matches!(try_reap(pid), Reap::StillRunning) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// The write end of the janitor's pipe; `None` if the janitor could not be started.
static JANITOR: OnceLock<Option<std::io::PipeWriter>> = OnceLock::new();

/// Tells the janitor a session started (`+`) or is fully stopped (`-`).
pub fn janitor_send(op: char, id: u32) {
    let Some(writer) = JANITOR.get_or_init(start_janitor) else {
        return;
    };
    // One short line is below PIPE_BUF, so concurrent writes never interleave.
    let line = format!("{op}{id}\n");
    if let Err(e) = (&*writer).write_all(line.as_bytes()) {
        // Once is enough: the janitor does not come back.
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(target: "toolbox", error = %e, "cannot reach the shell janitor; commands left running by a crashed toolbox will not be cleaned up");
        }
    }
}

/// The janitor script. It ignores the signals a terminal sends, so Ctrl-C on toolbox does
/// not take it down before it has done its job.
const JANITOR_SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT PIPE
declare -A live=()
if command -v awk >/dev/null; then
  # awk keeps the set of live sessions: it reads the pipe in blocks (bash's `read` makes a
  # system call per byte) and prints what is still registered at end-of-file.
  for id in $(awk '/^\+/ { live[substr($0, 2)] = 1 } /^-/ { delete live[substr($0, 2)] } END { for (id in live) print id }'); do
    live[$id]=1
  done
else
  while IFS= read -r line; do
    case $line in
      +*) live[${line#+}]=1 ;;
      -*) unset "live[${line#-}]" ;;
    esac
  done
fi
(( ${#live[@]} )) || exit 0
# toolbox is gone: kill every process group it left behind ...
for id in "${!live[@]}"; do
  kill -KILL -- "-$id" 2>/dev/null
done
# ... and anything that moved to another process group of the same session.
for stat in /proc/[0-9]*/stat; do
  s=$(<"$stat") 2>/dev/null || continue
  # After the command name: state ppid pgrp session ...
  read -r _ _ _ sid _ <<< "${s##*) }"
  [[ -n ${live[$sid]:-} ]] && kill -KILL "${stat//[!0-9]/}" 2>/dev/null
done
exit 0
"#;

fn start_janitor() -> Option<std::io::PipeWriter> {
    let started = (|| -> std::io::Result<std::io::PipeWriter> {
        // Both ends are close-on-exec: no command we start inherits the write end, so only
        // this process keeps the janitor waiting.
        let (reader, writer) = std::io::pipe()?;
        let mut janitor = Command::new("bash");
        janitor
            .args(["--noprofile", "--norc", "-c", JANITOR_SCRIPT])
            .env_clear()
            .stdin(Stdio::from(reader))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        // The janitor is never waited for: it exits when toolbox does.
        let _child = janitor.spawn()?;
        Ok(writer)
    })();
    match started {
        Ok(writer) => Some(writer),
        Err(e) => {
            tracing::warn!(target: "toolbox", error = %e, "cannot start the shell janitor; commands left running by a crashed toolbox will not be cleaned up");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_janitor_script_is_valid_bash() {
        let out = Command::new("bash")
            .args(["-n", "-c", JANITOR_SCRIPT])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn the_janitor_kills_registered_sessions_when_its_pipe_closes() {
        // Run a private janitor (not the process-wide one) and close its pipe ourselves.
        let (reader, mut writer) = std::io::pipe().unwrap();
        let mut janitor = Command::new("bash")
            .args(["-c", JANITOR_SCRIPT])
            .stdin(Stdio::from(reader))
            .spawn()
            .unwrap();
        let mut victim = Command::new("sleep");
        victim.arg("300").process_group(0);
        let mut victim = victim.spawn().unwrap();
        let mut spared = Command::new("sleep");
        spared.arg("300").process_group(0);
        let mut spared = spared.spawn().unwrap();
        // A session whose member moved to a process group of its own.
        let mut leader = Command::new("setsid")
            .args([
                "bash",
                "-c",
                // With job control on, bash puts the background job in a process group of
                // its own (no interpreter start-up to wait for, unlike a pyenv shim).
                "set -m; sleep 300 & echo $!; wait",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(leader.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let mover: i32 = line.trim().parse().unwrap();
        // The job is in its own group, not the leader's: only the session sweep can reach it.
        let pgid = unsafe { libc::getpgid(mover) };
        assert_eq!(pgid, mover, "the job did not get a group of its own");
        writeln!(writer, "+{}", leader.id()).unwrap();
        writeln!(writer, "+{}", victim.id()).unwrap();
        writeln!(writer, "+{}", spared.id()).unwrap();
        writeln!(writer, "-{}", spared.id()).unwrap();
        drop(writer);
        janitor.wait().unwrap();
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        leader.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while crate::process::process_alive(mover) {
            assert!(
                std::time::Instant::now() < deadline,
                "the session sweep missed {mover}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            spared.try_wait().unwrap().is_none(),
            "an unregistered group was killed"
        );
        spared.kill().unwrap();
        spared.wait().unwrap();
    }
}
