//! Containment: nothing a tool started outlives toolbox.
//!
//! Tools start processes in three ways: the shell provider spawns commands, the isolated
//! Python backend spawns workers, and — the hard case — code in the *embedded* Python
//! interpreter calls `subprocess.Popen` or `os.fork` from inside toolbox's own process. Such
//! children may call `setsid`, change process group or double-fork, so no process group or
//! session reaches them all. Containment therefore works at the level of toolbox itself, in
//! one of two modes chosen at run time on first use ([`ensure`]):
//!
//! - **cgroup** (preferred). toolbox creates `toolbox-<pid>-<nonce>/` below its own cgroup in
//!   every writable hierarchy it can use — cgroup v2 (`/sys/fs/cgroup`, or
//!   `/sys/fs/cgroup/unified` on a hybrid machine) and the v1 `freezer`, `pids` and `memory`
//!   hierarchies — starts the janitor (below), and then moves *itself* into `…/main` of one of
//!   them (v2 if present, else the v1 freezer, else pids or memory). Every process forked
//!   afterwards, by whatever thread or library, inherits that cgroup and cannot leave it
//!   without write access to the cgroup filesystem. Nested below toolbox's own cgroup, it stays
//!   inside whatever limits the machine already puts on toolbox. Per-command resource limits
//!   are sibling cgroups `…/cmd-<n>` (see [`crate::limits`]).
//! - **subreaper** (fallback when no hierarchy is writable, or `TOOLBOX_CONTAINMENT=subreaper`).
//!   toolbox becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans of its descendants
//!   are re-parented to toolbox instead of init, so its process tree holds everything its
//!   tools started until toolbox dies.
//!
//! **The janitor** is a small bash script, forked before toolbox moves into its cgroup (so it
//! stays outside), in a process group of its own, ignoring terminal signals. It reads
//! registrations from a pipe whose write end only toolbox holds and notices toolbox's death by
//! end-of-file on that pipe — or, when a process that toolbox forked without exec (Python's
//! `os.fork`) still holds the pipe, by finding toolbox's `/proc` entry dead or gone, checked
//! every 2 s. Then it kills the cgroups as a whole (`cgroup.kill` on v2; freeze, kill, thaw
//! with the v1 freezer; kill until empty otherwise), every registered process group and
//! session (shell commands) and every registered process (subreaper mode), and removes the
//! cgroups.
//!
//! [`shutdown`] does the same synchronously for a clean exit, SIGTERM or SIGINT: toolbox steps
//! back into the cgroup it came from, kills its own cgroups as a whole, and removes them; in
//! subreaper mode it kills its whole process tree but the janitor.
//!
//! **What cgroup mode cannot catch:** a tool process running as root (or with write access
//! to the cgroup filesystem) can move itself out of the cgroup on purpose; the shell sandbox
//! forbids that by making `/sys` read-only.
//!
//! **What the subreaper fallback cannot catch.** While toolbox is alive, its process tree is
//! complete, so a clean exit, SIGTERM or SIGINT stops everything. When toolbox is killed with
//! SIGKILL (or crashes), its descendants are re-parented to init and only the janitor can act.
//! It knows the process groups and sessions of shell commands, and every process that was in
//! toolbox's tree the last time [`Containment::note_descendants`] ran (after every Python run).
//! It misses a process started after that (by a thread or a process that a Python run left
//! running) that is in no registered shell session. A descendant that is re-parented to
//! toolbox and exits stays a zombie until toolbox exits, unless it belonged to a shell
//! command's session (the shell provider reaps those).
//!
//! The parts: `cgroups.rs` (the hierarchies found in `/proc`, toolbox's cgroups made,
//! emptied and removed), `procs.rs` (the process table read from `/proc`), `janitor.rs`
//! (starting the janitor, whose bash script is `janitor.sh`).

mod cgroups;
mod janitor;
mod procs;

use std::collections::HashSet;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use cgroups::{create_cgroups, pick_home};
pub(crate) use cgroups::{empty_cgroup, remove_cgroup};
pub use cgroups::{CgroupDir, CgroupVersion};
use janitor::start_janitor;
pub use janitor::JANITOR_SCRIPT;
pub use procs::{descendants, parse_stat, processes, ProcStat};

/// Environment variable choosing the mode: `auto` (default: cgroups when possible) or
/// `subreaper` (never touch cgroups).
pub const ENV_VAR: &str = "TOOLBOX_CONTAINMENT";

/// How long [`shutdown`] and a limit cgroup's cleanup wait for processes to die.
const KILL_WAIT: Duration = Duration::from_secs(3);

/// How tool processes are kept in reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// toolbox and everything it starts live in a cgroup of their own.
    Cgroup,
    /// toolbox is a child subreaper; no cgroup.
    Subreaper,
    /// Neither could be set up (only the janitor's process groups and sessions remain).
    None,
}

/// The process-wide containment state.
pub struct Containment {
    mode: Mode,
    cgroups: Vec<CgroupDir>,
    janitor: Option<std::io::PipeWriter>,
    janitor_pid: Option<i32>,
    /// Processes reported to the janitor in subreaper mode, by (pid, start time).
    noted: Mutex<HashSet<(i32, u64)>>,
    next_child: AtomicU64,
    warned: AtomicBool,
    shut_down: AtomicBool,
}

static STATE: OnceLock<Containment> = OnceLock::new();

/// Sets containment up on first use (cgroup or subreaper, and the janitor) and returns it.
/// Call it before starting any process for a tool.
pub fn ensure() -> &'static Containment {
    STATE.get_or_init(Containment::start)
}

/// The containment state if [`ensure`] has run.
pub fn current() -> Option<&'static Containment> {
    STATE.get()
}

/// Kills everything tools started, now, and removes toolbox's cgroups; for a clean exit or a
/// termination signal, just before the process exits. Bounded in time; a no-op if nothing
/// was ever contained.
///
/// The hooks registered with [`before_shutdown`] run first, once, so that processes which
/// can stop cleanly (a Jupyter kernel asked to shut down) get the chance before the kill.
pub fn shutdown() {
    let hooks = std::mem::take(&mut *SHUTDOWN_HOOKS.lock().unwrap_or_else(|e| e.into_inner()));
    for hook in hooks {
        hook();
    }
    if let Some(c) = STATE.get() {
        c.shutdown();
    }
}

static SHUTDOWN_HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Registers `hook` to run at the start of [`shutdown`], before everything left is killed.
///
/// A hook asks its own processes to stop (a kernel's `shutdown_request`, say) and must bound
/// its own time: [`shutdown`] runs on the way out of the process. Registering the same
/// function twice runs it once.
pub fn before_shutdown(hook: fn()) {
    let mut hooks = SHUTDOWN_HOOKS.lock().unwrap_or_else(|e| e.into_inner());
    if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
        hooks.push(hook);
    }
}

impl Containment {
    fn start() -> Containment {
        let wanted = std::env::var(ENV_VAR).unwrap_or_default();
        let allow_cgroups = match wanted.trim().to_ascii_lowercase().as_str() {
            "" | "auto" | "cgroup" => true,
            "subreaper" => false,
            other => {
                tracing::warn!(target: "toolbox", value = other, "{ENV_VAR} must be auto or subreaper; using auto");
                true
            }
        };
        let mut cgroups = if allow_cgroups {
            create_cgroups()
        } else {
            Vec::new()
        };
        // Forked before toolbox moves into its cgroup, so the janitor stays outside it.
        let (janitor, janitor_pid) = match start_janitor(&cgroups) {
            Ok((writer, pid)) => (Some(writer), Some(pid)),
            Err(e) => {
                tracing::warn!(target: "toolbox", error = %e, "cannot start the janitor; processes left running by a crashed toolbox will not be cleaned up");
                (None, None)
            }
        };
        let mut mode = Mode::Subreaper;
        if let Some(i) = pick_home(&cgroups) {
            let main = cgroups[i].dir.join("main");
            let moved = std::fs::create_dir(&main).and_then(|_| {
                std::fs::write(main.join("cgroup.procs"), std::process::id().to_string())
            });
            match moved {
                Ok(()) => {
                    cgroups[i].holds_toolbox = true;
                    mode = Mode::Cgroup;
                }
                Err(e) => {
                    tracing::debug!(target: "toolbox", error = %e, "cannot move into a cgroup of its own; falling back to a subreaper");
                    for g in &cgroups {
                        remove_cgroup(&g.dir);
                    }
                    cgroups.clear();
                }
            }
        }
        if mode == Mode::Subreaper {
            // SAFETY: prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
                mode = Mode::None;
            }
        }
        tracing::debug!(target: "toolbox", ?mode, cgroups = ?cgroups.iter().map(|g| g.dir.display().to_string()).collect::<Vec<_>>(), "containment ready");
        Containment {
            mode,
            cgroups,
            janitor,
            janitor_pid,
            noted: Mutex::new(HashSet::new()),
            next_child: AtomicU64::new(1),
            warned: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
        }
    }

    /// How this process contains what its tools start.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// toolbox's cgroups, one per hierarchy (empty unless the mode is [`Mode::Cgroup`]).
    pub fn cgroups(&self) -> &[CgroupDir] {
        &self.cgroups
    }

    /// One line for logs and docs: the mode and the cgroup folders.
    pub fn summary(&self) -> String {
        match self.mode {
            Mode::Cgroup => format!(
                "cgroup ({})",
                self.cgroups
                    .iter()
                    .map(|g| g.dir.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Mode::Subreaper => "subreaper".into(),
            Mode::None => "none".into(),
        }
    }

    /// A fresh name for a child cgroup (a limit group).
    pub(crate) fn child_name(&self) -> String {
        format!("cmd-{}", self.next_child.fetch_add(1, Ordering::Relaxed))
    }

    /// Tells the janitor about a process group (and session) of this id, e.g. a shell
    /// command's: if toolbox dies, the janitor kills the group and every process of the
    /// session.
    pub fn register_group(&self, id: i32) {
        self.send(&format!("+{id}\n"));
    }

    /// The group registered with [`register_group`](Self::register_group) is fully stopped.
    pub fn unregister_group(&self, id: i32) {
        self.send(&format!("-{id}\n"));
    }

    fn send(&self, line: &str) {
        let Some(writer) = &self.janitor else {
            return;
        };
        // One short line is below PIPE_BUF, so concurrent writes never interleave.
        if let Err(e) = (&*writer).write_all(line.as_bytes()) {
            // Once is enough: the janitor does not come back.
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(target: "toolbox", error = %e, "cannot reach the janitor; processes left running by a crashed toolbox will not be cleaned up");
            }
        }
    }

    /// In subreaper mode: tells the janitor which processes are in toolbox's tree now, so it
    /// can kill them if toolbox is killed. A no-op with cgroups (the cgroup holds them).
    pub fn note_descendants(&self) {
        if self.mode == Mode::Cgroup || self.janitor.is_none() {
            return;
        }
        let me = std::process::id() as i32;
        let table = processes();
        let now: HashSet<(i32, u64)> = descendants(me, &table)
            .into_iter()
            .filter(|p| p.state != 'Z' && Some(p.pid) != self.janitor_pid)
            .map(|p| (p.pid, p.start))
            .collect();
        let mut noted = self.noted.lock().unwrap_or_else(|e| e.into_inner());
        for (pid, start) in now.difference(&noted) {
            self.send(&format!("*{pid}:{start}\n"));
        }
        for (pid, start) in noted.difference(&now) {
            self.send(&format!("/{pid}:{start}\n"));
        }
        *noted = now;
    }

    /// In subreaper mode: reaps the zombies of session `session` (a shell command's) that were
    /// re-parented to toolbox. Nothing else waits for them; the session leader itself is left
    /// to its owner.
    pub fn reap_orphans(&self, session: i32) {
        if self.mode != Mode::Subreaper {
            return;
        }
        let me = std::process::id() as i32;
        for p in processes() {
            if p.ppid == me && p.state == 'Z' && p.session == session && p.pid != session {
                let mut status = 0;
                // SAFETY: plain system call; the pid is our own zombie child.
                unsafe {
                    libc::waitpid(p.pid, &mut status, libc::WNOHANG);
                }
            }
        }
    }

    fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = std::process::id() as i32;
        let deadline = Instant::now() + KILL_WAIT;
        match self.mode {
            Mode::Cgroup => {
                // Step back out, so each cgroup can be killed as a whole without toolbox.
                let mut outside = true;
                for g in self.cgroups.iter().filter(|g| g.holds_toolbox) {
                    if std::fs::write(g.home.join("cgroup.procs"), me.to_string()).is_err() {
                        outside = false;
                    }
                }
                for g in &self.cgroups {
                    let exclude = (!outside).then_some(me);
                    empty_cgroup(&g.dir, g.version, g.has("freezer"), exclude, deadline);
                }
                if outside {
                    for g in &self.cgroups {
                        remove_cgroup(&g.dir);
                    }
                }
                // A thread that forked after toolbox stepped out put its child in the old
                // cgroup, out of reach of the kill above: it is still toolbox's child.
                self.kill_descendants(me, deadline);
            }
            Mode::Subreaper | Mode::None => self.kill_descendants(me, deadline),
        }
    }

    /// Kills toolbox's process tree, but the janitor, until it is empty or `deadline`.
    fn kill_descendants(&self, me: i32, deadline: Instant) {
        loop {
            let table = processes();
            let targets: Vec<i32> = descendants(me, &table)
                .into_iter()
                .filter(|p| p.state != 'Z' && Some(p.pid) != self.janitor_pid)
                .map(|p| p.pid)
                .collect();
            if targets.is_empty() || Instant::now() >= deadline {
                return;
            }
            for pid in targets {
                // SAFETY: kill has no memory-safety preconditions; these are our
                // descendants, alive (not reaped), so the pids are not reused.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
