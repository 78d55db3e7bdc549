//! The janitor: a small bash script (`janitor.sh`), forked before toolbox moves into its
//! cgroup, that kills what tools started once toolbox is gone (see the module above).

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use super::procs::start_time;
use super::CgroupDir;

/// The janitor script: `bash -c SCRIPT janitor TOOLBOX_PID TOOLBOX_START KIND:DIR...` with
/// the pipe on stdin. KIND is `v2`, `freezer` (a v1 freezer hierarchy) or `v1`. Pipe lines:
/// `+ID` / `-ID` a process group and session registered / stopped, `*PID:START` / `/PID:START`
/// a process (by pid and start time, so a reused pid is never killed) noted / gone.
pub const JANITOR_SCRIPT: &str = include_str!("janitor.sh");

/// Starts the janitor; returns the write end of its pipe and its pid.
pub(super) fn start_janitor(cgroups: &[CgroupDir]) -> std::io::Result<(std::io::PipeWriter, i32)> {
    let me = std::process::id() as i32;
    let started = start_time(me)?;
    // Both ends are close-on-exec: no process we start inherits the write end, so only this
    // process keeps the janitor waiting.
    let (reader, writer) = std::io::pipe()?;
    let mut janitor = Command::new("bash");
    janitor
        .args([
            "--noprofile",
            "--norc",
            "-c",
            JANITOR_SCRIPT,
            "toolbox-janitor",
        ])
        .arg(me.to_string())
        .arg(started.to_string())
        .args(cgroups.iter().map(CgroupDir::janitor_arg))
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::from(reader))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // The janitor is never waited for: it exits when toolbox does.
    let child = janitor.spawn()?;
    Ok((writer, child.id() as i32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::{Duration, Instant};

    use crate::containment::cgroups::scratch_cgroup;
    use crate::containment::procs::parse_stat;
    use crate::containment::CgroupVersion;

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

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_stat(pid, &s))
            .is_some_and(|p| p.state != 'Z' && p.state != 'X')
    }

    fn wait_gone(pid: i32, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) {
            assert!(Instant::now() < deadline, "{what} ({pid}) survived");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A private janitor watching a stand-in for toolbox (`owner`), with `cgroups`.
    fn private_janitor(
        owner: i32,
        cgroups: &[String],
    ) -> (std::process::Child, std::io::PipeWriter) {
        let (reader, writer) = std::io::pipe().unwrap();
        let janitor = Command::new("bash")
            .args(["-c", JANITOR_SCRIPT, "janitor"])
            .arg(owner.to_string())
            .arg(start_time(owner).unwrap().to_string())
            .args(cgroups)
            .stdin(Stdio::from(reader))
            .spawn()
            .unwrap();
        (janitor, writer)
    }

    #[test]
    fn the_janitor_kills_registered_groups_sessions_and_processes_when_its_pipe_closes() {
        let me = std::process::id() as i32;
        let (mut janitor, mut writer) = private_janitor(me, &[]);
        let mut victim = Command::new("sleep");
        victim.arg("300").process_group(0);
        let mut victim = victim.spawn().unwrap();
        let mut spared = Command::new("sleep");
        spared.arg("300").process_group(0);
        let mut spared = spared.spawn().unwrap();
        let mut noted = Command::new("sleep").arg("301").spawn().unwrap();
        // A session whose member moved to a process group of its own.
        let mut leader = Command::new("setsid")
            .args(["bash", "-c", "set -m; sleep 300 & echo $!; wait"])
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
        // SAFETY: getpgid has no memory-safety preconditions.
        assert_eq!(unsafe { libc::getpgid(mover) }, mover);
        let noted_pid = noted.id() as i32;
        writeln!(writer, "+{}", leader.id()).unwrap();
        writeln!(writer, "+{}", victim.id()).unwrap();
        writeln!(writer, "+{}", spared.id()).unwrap();
        writeln!(writer, "-{}", spared.id()).unwrap();
        writeln!(writer, "*{noted_pid}:{}", start_time(noted_pid).unwrap()).unwrap();
        // A stale registration (wrong start time) must not be killed.
        writeln!(writer, "*{}:1", spared.id()).unwrap();
        drop(writer);
        janitor.wait().unwrap();
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        let status = noted.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        leader.wait().unwrap();
        wait_gone(mover, "the session sweep missed the mover");
        assert!(
            spared.try_wait().unwrap().is_none(),
            "an unregistered group was killed"
        );
        spared.kill().unwrap();
        spared.wait().unwrap();
    }

    #[test]
    fn the_janitor_notices_a_dead_owner_even_if_the_pipe_stays_open() {
        // The "toolbox" here is a short-lived process; the test keeps the pipe open, like a
        // forked-without-exec child of toolbox would.
        let mut owner = Command::new("sleep").arg("0.2").spawn().unwrap();
        let (mut janitor, mut writer) = private_janitor(owner.id() as i32, &[]);
        let mut victim = Command::new("sleep");
        victim.arg("300").process_group(0);
        let mut victim = victim.spawn().unwrap();
        writeln!(writer, "+{}", victim.id()).unwrap();
        owner.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while janitor.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = victim.kill();
                let _ = janitor.kill();
                panic!("the janitor did not notice its owner's death");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = victim.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        drop(writer);
    }

    #[test]
    fn the_janitor_empties_and_removes_cgroups() {
        let mut tried = 0;
        for version in [CgroupVersion::V2, CgroupVersion::V1] {
            // A machine mounts one hierarchy or the other (or both): each one here is tried.
            let Some((dir, freezer)) = scratch_cgroup(version) else {
                continue;
            };
            tried += 1;
            let sub = dir.join("main");
            std::fs::create_dir(&sub).unwrap();
            // A process inside, which then leaves its session: only the cgroup reaches it.
            let procs = sub.join("cgroup.procs");
            let mut inside = Command::new("setsid");
            inside.args(["sleep", "302"]);
            let path = std::ffi::CString::new(procs.to_str().unwrap()).unwrap();
            // SAFETY: raw syscalls only, on a path prepared before the fork.
            unsafe {
                inside.pre_exec(move || {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    Ok(())
                });
            }
            let mut inside = inside.spawn().unwrap();
            let kind = if freezer { "freezer" } else { "v2" };
            let (mut janitor, writer) = private_janitor(
                std::process::id() as i32,
                &[format!("{kind}:{}", dir.display())],
            );
            drop(writer);
            janitor.wait().unwrap();
            let status = inside.wait().unwrap();
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9),
                "{version:?}"
            );
            assert!(!dir.exists(), "{} was not removed", dir.display());
        }
        assert!(
            tried > 0,
            "this test needs a writable cgroup (v2 or v1) for toolbox's containment; run it \
             where toolbox runs (as root, or with a delegated cgroup)"
        );
    }
}
