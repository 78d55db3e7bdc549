//! A program started in a session of its own with `posix_spawn`: the fast path for plain
//! commands that need nothing run in the child (no sandbox, no limits, no death signal).

use std::ffi::{c_char, CString, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A just-started child: its pid (also its process group and session id) and the read ends
/// of its stdout and stderr pipes. Nothing reaps it but its owner (with
/// [`try_reap`](super::try_reap) on this pid).
#[derive(Debug)]
pub struct PipedChild {
    /// The child's pid, process group id and session id.
    pub pid: i32,
    /// The read end of its stdout.
    pub stdout: OwnedFd,
    /// The read end of its stderr.
    pub stderr: OwnedFd,
}

/// Starts `argv` (the program, found on toolbox's `PATH`, then its arguments) with
/// `posix_spawn` in a new session (`POSIX_SPAWN_SETSID`), in `cwd`, with exactly `env`,
/// stdin from /dev/null and stdout and stderr into fresh pipes; SIGPIPE back at its default
/// and no signal blocked.
///
/// glibc's posix_spawn uses `clone(CLONE_VM | CLONE_VFORK)`, so toolbox's memory is neither
/// copied nor write-protected as a `fork` would do (that copy and the page faults after it
/// are most of the cost of a fork-based spawn). What it cannot do is run code in the child,
/// so there is no [`ChildSetup`](super::ChildSetup) here: no death signal, no limits, no
/// sandbox.
pub fn spawn_in_session(
    argv: &[&str],
    cwd: &Path,
    env: &[(OsString, OsString)],
) -> io::Result<PipedChild> {
    fn check(rc: i32) -> io::Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::from_raw_os_error(rc))
        }
    }
    struct Actions(MaybeUninit<libc::posix_spawn_file_actions_t>);
    impl Drop for Actions {
        fn drop(&mut self) {
            // SAFETY: only constructed after a successful init.
            unsafe { libc::posix_spawn_file_actions_destroy(self.0.as_mut_ptr()) };
        }
    }
    struct Attr(MaybeUninit<libc::posix_spawnattr_t>);
    impl Drop for Attr {
        fn drop(&mut self) {
            // SAFETY: only constructed after a successful init.
            unsafe { libc::posix_spawnattr_destroy(self.0.as_mut_ptr()) };
        }
    }

    if argv.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no program to start",
        ));
    }
    let argv_owned = argv
        .iter()
        .map(|a| CString::new(*a))
        .collect::<Result<Vec<_>, _>>()?;
    let mut argv: Vec<*mut c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr() as *mut c_char)
        .collect();
    argv.push(std::ptr::null_mut());
    let env_owned = env
        .iter()
        .map(|(k, v)| {
            let mut entry = Vec::with_capacity(k.len() + v.len() + 1);
            entry.extend_from_slice(k.as_bytes());
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            CString::new(entry)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut envp: Vec<*mut c_char> = env_owned
        .iter()
        .map(|e| e.as_ptr() as *mut c_char)
        .collect();
    envp.push(std::ptr::null_mut());
    let cwd = CString::new(cwd.as_os_str().as_bytes())?;

    // All close-on-exec: the child gets them only as the dup2'd 0, 1 and 2.
    let (out_r, out_w) = std::io::pipe()?;
    let (err_r, err_w) = std::io::pipe()?;
    let devnull = std::fs::File::open("/dev/null")?;

    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer handed to libc points into a value that outlives the call, the
    // argv and envp arrays are NUL-terminated, and actions/attr are initialised before use
    // and destroyed by their guards.
    unsafe {
        let mut actions = Actions(MaybeUninit::uninit());
        check(libc::posix_spawn_file_actions_init(actions.0.as_mut_ptr()))?;
        let a = actions.0.as_mut_ptr();
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            devnull.as_raw_fd(),
            0,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            out_w.as_raw_fd(),
            1,
        ))?;
        check(libc::posix_spawn_file_actions_adddup2(
            a,
            err_w.as_raw_fd(),
            2,
        ))?;
        check(libc::posix_spawn_file_actions_addchdir_np(a, cwd.as_ptr()))?;

        let mut attr = Attr(MaybeUninit::uninit());
        check(libc::posix_spawnattr_init(attr.0.as_mut_ptr()))?;
        let t = attr.0.as_mut_ptr();
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(t, &empty))?;
        // Rust ignores SIGPIPE; the child must get the default (die on a broken pipe), as
        // std's own spawn arranges too.
        let mut defaults: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut defaults);
        libc::sigaddset(&mut defaults, libc::SIGPIPE);
        check(libc::posix_spawnattr_setsigdefault(t, &defaults))?;
        check(libc::posix_spawnattr_setflags(
            t,
            libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short,
        ))?;
        check(libc::posix_spawnp(
            &mut pid,
            argv[0],
            a,
            t,
            argv.as_ptr(),
            envp.as_ptr(),
        ))?;
    }
    Ok(PipedChild {
        pid,
        stdout: out_r.into(),
        stderr: err_r.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn a_session_of_its_own_with_both_streams() {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let child = spawn_in_session(
            &["bash", "-c", "ps -o pid=,pgid=,sid= -p $$; echo err >&2"],
            &std::env::temp_dir(),
            &env,
        )
        .unwrap();
        let mut out = String::new();
        std::fs::File::from(child.stdout)
            .read_to_string(&mut out)
            .unwrap();
        let mut err = String::new();
        std::fs::File::from(child.stderr)
            .read_to_string(&mut err)
            .unwrap();
        let ids: Vec<i32> = out
            .split_whitespace()
            .map(|id| id.parse().unwrap())
            .collect();
        assert_eq!(ids, [child.pid; 3], "{out}");
        assert_eq!(err, "err\n");
        loop {
            match super::super::try_reap(child.pid) {
                super::super::Reap::Exited(status) => break assert!(status.success()),
                super::super::Reap::StillRunning => {
                    std::thread::sleep(std::time::Duration::from_millis(5))
                }
                super::super::Reap::Gone => panic!("reaped by someone else"),
            }
        }
    }
}
