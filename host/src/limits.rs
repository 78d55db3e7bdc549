//! `[limits]`: memory, process and CPU-time limits for the processes tools start (shell
//! commands and the isolated Python worker; the embedded Python interpreter runs inside
//! toolbox and cannot be limited).
//!
//! ```toml
//! [limits]
//! memory_mb = 2048     # per process: RLIMIT_AS; per command: the cgroup memory limit
//! processes = 256      # per command: the cgroup pids limit (else RLIMIT_NPROC)
//! cpu_seconds = 600    # per process: RLIMIT_CPU (SIGXCPU, then SIGKILL 2 s later)
//! ```
//!
//! Every limit is off unless set (0 also means off). Two mechanisms, used together where
//! the machine allows:
//!
//! - **rlimits**, set in the child between fork and exec. They apply per process and are
//!   inherited: `RLIMIT_AS` caps each process's address space (reserved as well as used
//!   memory, so multi-threaded programs need more than they use), `RLIMIT_CPU` its CPU time.
//!   `RLIMIT_NPROC` counts *all* processes of the user and does not bind root at all, so it
//!   is used for `processes` only when no pids cgroup is available.
//! - **a cgroup per command** (`cmd-<n>` next to toolbox's own cgroup, see
//!   [`crate::containment`]) when containment runs in cgroup mode and the hierarchy offers
//!   the controller: `memory.limit_in_bytes` (v1) / `memory.max` (v2) bound the memory of the
//!   command and everything it starts together (swap included), `pids.max` their number of
//!   processes and threads. The cgroup's counters tell afterwards whether a limit was hit.
//!
//! A finished command is checked with [`PreparedLimits::diagnose`], which returns the limit it
//! ran into, if any; [`Limits::message`] says so in words that name the setting.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;

use crate::containment::{self, CgroupVersion, Mode};
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};

// Each limit is 0 (no limit) or at least the least value bash or Python can start under, which
// `Limits::from_config` checks. The memory ceiling is far above anything real and keeps the
// byte count below u64::MAX. An untrusted workspace's toolbox.toml may set or lower a limit,
// never lift one.
const MEMORY_MB: Key = Key::integer("memory_mb", 0, 1 << 30).workspace(Tighten::Limit);
const PROCESSES: Key = Key::integer("processes", 0, u64::MAX).workspace(Tighten::Limit);
const CPU_SECONDS: Key = Key::integer("cpu_seconds", 0, u64::MAX).workspace(Tighten::Limit);
/// The `[limits]` table.
pub const TABLE: Table = Table::new("limits", &[MEMORY_MB, PROCESSES, CPU_SECONDS]);
toolbox_core::register_table!(TABLE);

/// Seconds between SIGXCPU (the soft CPU limit) and SIGKILL (the hard one, or a caller's
/// watchdog for a renewable limit).
pub const CPU_HARD_EXTRA: u64 = 2;

/// The parsed `[limits]` table. `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory per process (RLIMIT_AS) and per command (the cgroup), in MiB.
    pub memory_mb: Option<u64>,
    /// Processes and threads per command (the pids cgroup, else RLIMIT_NPROC).
    pub processes: Option<u64>,
    /// CPU seconds per process (RLIMIT_CPU).
    pub cpu_seconds: Option<u64>,
}

/// Which limit a process ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// The memory limit.
    Memory,
    /// The process limit.
    Processes,
    /// The CPU time limit.
    Cpu,
}

impl Limits {
    /// Reads `[limits]` from the whole configuration (`ToolContext::config`); errors name the
    /// key.
    pub fn from_config(config: &Value) -> Result<Self> {
        let t = TABLE.read(config)?;
        // Below these, bash or Python cannot even start, which would only look like a bug.
        let limit = |key: &Key, min: u64| -> Result<Option<u64>> {
            match key.u64(&t)? {
                None | Some(0) => Ok(None),
                Some(n) if n < min => {
                    Err(t.invalid(key.name, &format!("at least {min} (or 0 for no limit)")))
                }
                Some(n) => Ok(Some(n)),
            }
        };
        Ok(Limits {
            memory_mb: limit(&MEMORY_MB, 32)?,
            processes: limit(&PROCESSES, 2)?,
            cpu_seconds: limit(&CPU_SECONDS, 1)?,
        })
    }

    /// Whether no limit is set.
    pub fn is_none(&self) -> bool {
        *self == Limits::default()
    }

    /// "memory 256 MiB, 64 processes, 10 s of CPU"; empty without limits.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(mb) = self.memory_mb {
            parts.push(format!("memory {mb} MiB"));
        }
        if let Some(n) = self.processes {
            parts.push(format!("{n} processes"));
        }
        if let Some(s) = self.cpu_seconds {
            parts.push(format!("{s} s of CPU"));
        }
        parts.join(", ")
    }

    /// What to tell the model: `subject` is "the command" or "the code".
    pub fn message(&self, exceeded: Exceeded, subject: &str) -> String {
        match exceeded {
            Exceeded::Memory => format!(
                "{subject} exceeded the memory limit of {} MiB ([limits] memory_mb)",
                self.memory_mb.unwrap_or(0)
            ),
            Exceeded::Processes => format!(
                "{subject} hit the process limit of {} ([limits] processes): starting another \
                 process or thread failed",
                self.processes.unwrap_or(0)
            ),
            Exceeded::Cpu => format!(
                "{subject} exceeded the CPU time limit of {} s ([limits] cpu_seconds) and was \
                 stopped",
                self.cpu_seconds.unwrap_or(0)
            ),
        }
    }

    /// Builds everything a child needs to put itself under these limits: the rlimit values
    /// and, in cgroup mode, a fresh limit cgroup. Call before forking.
    pub fn prepare(&self) -> PreparedLimits {
        self.prepare_inner(false)
    }

    /// Like [`prepare`](Self::prepare), for a process that lives across calls (the isolated
    /// Python worker): the hard CPU limit is left unbounded, so that [`renew_cpu_budget`]
    /// can move the soft limit (SIGXCPU) before each call without privileges. Code that
    /// raises its own soft limit or ignores SIGXCPU must then be stopped by the caller,
    /// watching [`cpu_time`].
    pub fn prepare_renewable(&self) -> PreparedLimits {
        self.prepare_inner(true)
    }

    fn prepare_inner(&self, renewable: bool) -> PreparedLimits {
        let group = if self.memory_mb.is_some() || self.processes.is_some() {
            LimitGroup::create(self)
        } else {
            None
        };
        let (group, join) = match group {
            Some((group, join)) => (Some(Arc::new(group)), join),
            None => (None, Vec::new()),
        };
        let pids_cgroup = group.as_ref().is_some_and(|g| g.pids.is_some());
        let mut rlimits = Vec::new();
        if let Some(mb) = self.memory_mb {
            let bytes = mb * 1024 * 1024;
            rlimits.push((Resource::AddressSpace, bytes, bytes));
        }
        if let (Some(n), false) = (self.processes, pids_cgroup) {
            rlimits.push((Resource::Processes, n, n));
        }
        if let Some(s) = self.cpu_seconds {
            let hard = if renewable {
                libc::RLIM_INFINITY
            } else {
                s + CPU_HARD_EXTRA
            };
            rlimits.push((Resource::Cpu, s, hard));
        }
        PreparedLimits {
            limits: *self,
            rlimits,
            join,
            group,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Resource {
    AddressSpace,
    Processes,
    Cpu,
}

/// Limits ready to be applied in a child process.
#[derive(Debug)]
pub struct PreparedLimits {
    limits: Limits,
    /// (resource, soft, hard).
    rlimits: Vec<(Resource, u64, u64)>,
    /// `cgroup.procs` of the limit cgroup in each hierarchy, opened before the fork.
    join: Vec<OwnedFd>,
    group: Option<Arc<LimitGroup>>,
}

impl PreparedLimits {
    /// The limits these were prepared from.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The command's limit cgroup, if one could be made. Keep it until the command is over:
    /// dropping it kills what is left inside and removes it.
    pub fn group(&self) -> Option<Arc<LimitGroup>> {
        self.group.clone()
    }

    /// Puts the calling process under the limits: joins the limit cgroup and sets the
    /// rlimits. Runs in the forked child before exec (from
    /// [`ChildSetup`](crate::sandbox::ChildSetup)'s hook), so it only makes system calls.
    pub(crate) fn apply_in_child(&self) -> std::io::Result<()> {
        for fd in &self.join {
            // "0" is the writing process itself.
            // SAFETY: write on a descriptor this (copied) process owns, from a static buffer.
            if unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) } != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for &(resource, soft, hard) in &self.rlimits {
            let limit = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            // SAFETY: setrlimit reads a valid rlimit struct.
            let rc = unsafe {
                match resource {
                    Resource::AddressSpace => libc::setrlimit(libc::RLIMIT_AS, &limit),
                    Resource::Processes => libc::setrlimit(libc::RLIMIT_NPROC, &limit),
                    Resource::Cpu => libc::setrlimit(libc::RLIMIT_CPU, &limit),
                }
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// The cgroup counters now, to compare a later [`diagnose`](Self::diagnose) against (a
    /// worker that lives across calls).
    pub fn counters(&self) -> Counters {
        self.group
            .as_ref()
            .map(|g| g.counters())
            .unwrap_or_default()
    }

    /// Which limit, if any, a process under these limits ran into. `signal` is the signal
    /// that ended it, `failed` whether it ended unsuccessfully, `output` what it printed on
    /// stderr (or the name of the Python exception), for the limits that only show there.
    pub fn diagnose(
        &self,
        since: Counters,
        signal: Option<i32>,
        failed: bool,
        output: &str,
    ) -> Option<Exceeded> {
        let now = self.counters();
        let l = &self.limits;
        if l.memory_mb.is_some() && now.oom_kills > since.oom_kills {
            return Some(Exceeded::Memory);
        }
        if l.cpu_seconds.is_some() && signal == Some(libc::SIGXCPU) {
            return Some(Exceeded::Cpu);
        }
        if !failed {
            return None;
        }
        if l.processes.is_some() && now.pid_refusals > since.pid_refusals {
            return Some(Exceeded::Processes);
        }
        if l.memory_mb.is_some()
            && (now.memory_failures > since.memory_failures || mentions_memory(output))
        {
            return Some(Exceeded::Memory);
        }
        if l.processes.is_some() && mentions_fork_failure(output) {
            return Some(Exceeded::Processes);
        }
        None
    }
}

/// Whether output reads like a failed allocation.
fn mentions_memory(output: &str) -> bool {
    [
        "MemoryError",
        "Cannot allocate memory",
        "memory exhausted",
        "out of memory",
        "Out of memory",
        "bad_alloc",
        "failed to allocate",
    ]
    .iter()
    .any(|p| output.contains(p))
}

/// Whether output reads like a refused fork.
fn mentions_fork_failure(output: &str) -> bool {
    [
        "Resource temporarily unavailable",
        "fork: retry",
        "Cannot fork",
        "can't fork",
        "BlockingIOError",
    ]
    .iter()
    .any(|p| output.contains(p))
}

/// The CPU time (user and system, all threads) a process has used so far.
pub fn cpu_time(pid: i32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the name).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_millis(ticks * 1000 / per_second))
}

/// Moves the soft CPU limit of a process started with
/// [`prepare_renewable`](Limits::prepare_renewable) to `seconds` beyond what it has used, so
/// a long-lived worker gets the limit per call rather than over its whole life. Returns the
/// CPU time used so far. (Raising a soft limit up to the hard one needs no privilege.)
pub fn renew_cpu_budget(pid: i32, seconds: u64) -> Option<Duration> {
    let used = cpu_time(pid)?;
    let limit = libc::rlimit {
        rlim_cur: (used + Duration::from_secs(seconds)).as_secs_f64().ceil() as libc::rlim_t,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: prlimit reads a valid struct and writes nothing (null old limit).
    unsafe {
        libc::prlimit(pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut());
    }
    Some(used)
}

/// A cgroup's counters of limit hits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Processes the out-of-memory killer killed for the memory limit.
    pub oom_kills: u64,
    /// Times memory use ran into the limit (v1 failcnt, v2 `max` events).
    pub memory_failures: u64,
    /// Forks refused by pids.max.
    pub pid_refusals: u64,
}

/// One command's limit cgroup: `cmd-<n>` below toolbox's cgroup, in the hierarchies that
/// carry the memory and pids controllers. Dropping it kills whatever is still inside and
/// removes it.
#[derive(Debug)]
pub struct LimitGroup {
    memory: Option<(CgroupVersion, PathBuf)>,
    pids: Option<(CgroupVersion, PathBuf)>,
}

impl LimitGroup {
    /// Creates the cgroups and opens their `cgroup.procs` for the child to join; `None` when
    /// containment has no cgroup with the controllers these limits need.
    fn create(limits: &Limits) -> Option<(LimitGroup, Vec<OwnedFd>)> {
        let c = containment::ensure();
        if c.mode() != Mode::Cgroup {
            return None;
        }
        // One hierarchy per controller, v2 first.
        let pick = |controller: &str| {
            let mut with: Vec<_> = c.cgroups().iter().filter(|g| g.has(controller)).collect();
            with.sort_by_key(|g| g.version != CgroupVersion::V2);
            with.first().map(|g| (g.version, g.dir.clone()))
        };
        let name = c.child_name();
        let mut group = LimitGroup {
            memory: None,
            pids: None,
        };
        let mut join = Vec::new();
        let mut made: Vec<PathBuf> = Vec::new();
        let mut set_up = |parent: &Path, files: &[(&str, String, bool)]| -> Option<PathBuf> {
            let dir = parent.join(&name);
            if !made.contains(&dir) {
                std::fs::create_dir(&dir).ok()?;
                made.push(dir.clone());
                let procs = File::options()
                    .write(true)
                    .open(dir.join("cgroup.procs"))
                    .ok()?;
                join.push(OwnedFd::from(procs));
            }
            for (file, value, required) in files {
                let written = std::fs::write(dir.join(file), value);
                if written.is_err() && *required {
                    return None;
                }
            }
            Some(dir)
        };
        if let (Some(mb), Some((version, parent))) = (limits.memory_mb, pick("memory")) {
            let bytes = (mb * 1024 * 1024).to_string();
            let files: Vec<(&str, String, bool)> = match version {
                // memsw (memory + swap) must not be below the memory limit: set after it.
                CgroupVersion::V1 => vec![
                    ("memory.limit_in_bytes", bytes.clone(), true),
                    ("memory.memsw.limit_in_bytes", bytes, false),
                ],
                // No swap, and an out-of-memory kill takes the whole command.
                CgroupVersion::V2 => vec![
                    ("memory.max", bytes, true),
                    ("memory.swap.max", "0".into(), false),
                    ("memory.oom.group", "1".into(), false),
                ],
            };
            group.memory = set_up(&parent, &files).map(|d| (version, d));
        }
        if let (Some(n), Some((version, parent))) = (limits.processes, pick("pids")) {
            group.pids =
                set_up(&parent, &[("pids.max", n.to_string(), true)]).map(|d| (version, d));
        }
        if group.memory.is_none() && group.pids.is_none() {
            for dir in &made {
                containment::remove_cgroup(dir);
            }
            return None;
        }
        Some((group, join))
    }

    /// Whether the memory limit is enforced by this cgroup (not only by RLIMIT_AS).
    pub fn limits_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// Whether the process limit is enforced by this cgroup.
    pub fn limits_processes(&self) -> bool {
        self.pids.is_some()
    }

    /// What the cgroup's counters say now: peaks and limit hits.
    pub fn counters(&self) -> Counters {
        let mut c = Counters::default();
        if let Some((version, dir)) = &self.memory {
            match version {
                CgroupVersion::V1 => {
                    c.oom_kills = keyed(&dir.join("memory.oom_control"), "oom_kill");
                    c.memory_failures = std::fs::read_to_string(dir.join("memory.failcnt"))
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0);
                }
                CgroupVersion::V2 => {
                    let events = dir.join("memory.events");
                    c.oom_kills = keyed(&events, "oom_kill");
                    c.memory_failures = keyed(&events, "max");
                }
            }
        }
        if let Some((_, dir)) = &self.pids {
            c.pid_refusals = keyed(&dir.join("pids.events"), "max");
        }
        c
    }

    /// Kills every process in the group and waits (briefly) until they are gone.
    pub fn kill_all(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for (version, dir) in self.dirs() {
            containment::empty_cgroup(dir, *version, false, None, deadline);
        }
    }

    fn dirs(&self) -> impl Iterator<Item = &(CgroupVersion, PathBuf)> {
        let pids = self
            .pids
            .as_ref()
            .filter(|p| self.memory.as_ref().is_none_or(|m| m.1 != p.1));
        self.memory.iter().chain(pids)
    }
}

impl Drop for LimitGroup {
    fn drop(&mut self) {
        self.kill_all();
        for (_, dir) in self.dirs() {
            containment::remove_cgroup(dir);
        }
    }
}

/// The number after `key` in a flat-keyed cgroup file (`oom_kill 3`).
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines().find_map(|line| {
                let (k, v) = line.split_once(' ')?;
                (k == key).then(|| v.trim().parse().ok()).flatten()
            })
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parsing_defaults_and_errors_that_name_the_key() {
        assert!(Limits::from_config(&json!({})).unwrap().is_none());
        assert!(Limits::from_config(&json!({"limits": {}}))
            .unwrap()
            .is_none());
        let l = Limits::from_config(
            &json!({"limits": {"memory_mb": 256, "processes": "64", "cpu_seconds": 0}}),
        )
        .unwrap();
        assert_eq!(
            l,
            Limits {
                memory_mb: Some(256),
                processes: Some(64),
                cpu_seconds: None
            }
        );
        assert_eq!(l.summary(), "memory 256 MiB, 64 processes");
        let e = |v: Value| {
            Limits::from_config(&json!({ "limits": v }))
                .unwrap_err()
                .to_string()
        };
        assert!(e(json!({"memroy_mb": 1})).contains("[limits] has an unknown key `memroy_mb`"));
        assert!(e(json!({"memory_mb": "lots"})).contains("memory_mb must be a whole number"));
        assert!(e(json!({"memory_mb": -5})).contains("memory_mb must be a whole number"));
        assert!(e(json!({"memory_mb": 8})).contains("memory_mb must be at least 32"));
        assert!(e(json!({"processes": 1})).contains("processes must be at least 2"));
        assert!(e(json!({"cpu_seconds": 1.5})).contains("cpu_seconds must be a whole number"));
        assert!(e(json!(5)).contains("[limits] must be a table"));
    }

    #[test]
    fn messages_name_the_setting() {
        let l = Limits {
            memory_mb: Some(256),
            processes: Some(10),
            cpu_seconds: Some(3),
        };
        assert_eq!(
            l.message(Exceeded::Memory, "the command"),
            "the command exceeded the memory limit of 256 MiB ([limits] memory_mb)"
        );
        assert!(l
            .message(Exceeded::Processes, "the code")
            .contains("process limit of 10 ([limits] processes)"));
        assert!(l
            .message(Exceeded::Cpu, "the command")
            .contains("CPU time limit of 3 s ([limits] cpu_seconds)"));
    }

    #[test]
    fn diagnosis_from_signals_and_output() {
        let l = Limits {
            memory_mb: Some(64),
            processes: Some(10),
            cpu_seconds: Some(1),
        };
        let p = PreparedLimits {
            limits: l,
            rlimits: Vec::new(),
            join: Vec::new(),
            group: None,
        };
        let none = Counters::default();
        assert_eq!(
            p.diagnose(none, Some(libc::SIGXCPU), true, ""),
            Some(Exceeded::Cpu)
        );
        assert_eq!(
            p.diagnose(none, None, true, "Traceback ...\nMemoryError\n"),
            Some(Exceeded::Memory)
        );
        assert_eq!(
            p.diagnose(
                none,
                None,
                true,
                "bash: fork: retry: Resource temporarily unavailable"
            ),
            Some(Exceeded::Processes)
        );
        // A successful command that prints the words is not blamed on a limit.
        assert_eq!(p.diagnose(none, None, false, "MemoryError"), None);
        assert_eq!(p.diagnose(none, None, true, "plain failure"), None);
        let unlimited = Limits::default().prepare();
        assert_eq!(unlimited.diagnose(none, None, true, "MemoryError"), None);
    }

    #[test]
    fn rlimits_are_applied_in_a_child() {
        let l = Limits {
            memory_mb: Some(64),
            processes: None,
            cpu_seconds: Some(5),
        };
        // Only rlimits here: the cgroup part is covered through the providers' tests.
        let p = PreparedLimits {
            limits: l,
            rlimits: vec![
                (Resource::AddressSpace, 64 << 20, 64 << 20),
                (Resource::Cpu, 5, 5 + CPU_HARD_EXTRA),
            ],
            join: Vec::new(),
            group: None,
        };
        let p = Arc::new(p);
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["-c", "ulimit -v; ulimit -t"]);
        crate::sandbox::ChildSetup::new()
            .limits(Some(p.clone()))
            .apply_to(&mut cmd);
        let out = cmd.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "65536\n5\n");
    }

    #[test]
    fn keyed_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.events");
        std::fs::write(&f, "low 0\nhigh 0\nmax 7\noom 1\noom_kill 2\n").unwrap();
        assert_eq!(keyed(&f, "max"), 7);
        assert_eq!(keyed(&f, "oom_kill"), 2);
        assert_eq!(keyed(&f, "nope"), 0);
        assert_eq!(keyed(&dir.path().join("missing"), "max"), 0);
    }
}
