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

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Environment variable choosing the mode: `auto` (default: cgroups when possible) or
/// `subreaper` (never touch cgroups).
pub const ENV_VAR: &str = "TOOLBOX_CONTAINMENT";

/// How long [`shutdown`] and a limit cgroup's cleanup wait for processes to die.
const KILL_WAIT: Duration = Duration::from_secs(3);

/// The v1 controllers toolbox uses: freezer to stop a cgroup atomically, pids and memory for
/// limits. Any of them also tracks membership.
const V1_CONTROLLERS: &[&str] = &["freezer", "pids", "memory"];

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

/// The cgroup version of a hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    /// cgroup v1: one hierarchy per controller.
    V1,
    /// cgroup v2: one unified hierarchy.
    V2,
}

/// toolbox's own cgroup in one hierarchy.
#[derive(Debug, Clone)]
pub struct CgroupDir {
    /// Which cgroup version this hierarchy is.
    pub version: CgroupVersion,
    /// `…/toolbox-<pid>-<nonce>`.
    pub dir: PathBuf,
    /// The cgroup toolbox was in before, in this hierarchy.
    pub home: PathBuf,
    /// Controllers whose limits can be set on children of `dir` (`memory`, `pids`; a v1
    /// freezer hierarchy also lists `freezer`).
    pub controllers: Vec<String>,
    /// Whether toolbox itself lives in `dir/main`.
    pub holds_toolbox: bool,
}

impl CgroupDir {
    /// Whether children of `dir` can be limited through `controller` (`memory`, `pids`).
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    fn janitor_arg(&self) -> String {
        let kind = match self.version {
            CgroupVersion::V2 => "v2",
            CgroupVersion::V1 if self.has("freezer") => "freezer",
            CgroupVersion::V1 => "v1",
        };
        format!("{kind}:{}", self.dir.display())
    }
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

/// The index of the cgroup toolbox should live in: v2 (one write kills it all), else the v1
/// freezer (stops it atomically), else any v1 hierarchy (kill until empty).
fn pick_home(cgroups: &[CgroupDir]) -> Option<usize> {
    let rank = |g: &CgroupDir| match g.version {
        CgroupVersion::V2 => 0,
        CgroupVersion::V1 if g.has("freezer") => 1,
        CgroupVersion::V1 if g.has("pids") => 2,
        CgroupVersion::V1 => 3,
    };
    (0..cgroups.len()).min_by_key(|&i| rank(&cgroups[i]))
}

/// One cgroup hierarchy this process is in, as mounted here.
#[derive(Debug, PartialEq)]
struct Hierarchy {
    version: CgroupVersion,
    /// For v1: the controllers of interest bound to it.
    controllers: Vec<String>,
    /// This process's cgroup folder in it.
    own: PathBuf,
}

/// The hierarchies toolbox can use, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
fn hierarchies(mountinfo: &str, proc_cgroup: &str) -> Vec<Hierarchy> {
    let mut found: Vec<Hierarchy> = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        if left.len() < 5 || right.len() < 3 {
            continue;
        }
        let (root, mount) = (unescape(left[3]), unescape(left[4]));
        let (version, controllers) = match right[0] {
            "cgroup2" => (CgroupVersion::V2, Vec::new()),
            "cgroup" => {
                let controllers: Vec<String> = right[2]
                    .split(',')
                    .filter(|o| V1_CONTROLLERS.contains(o))
                    .map(str::to_string)
                    .collect();
                if controllers.is_empty() {
                    continue;
                }
                (CgroupVersion::V1, controllers)
            }
            _ => continue,
        };
        // A hierarchy mounted twice (bind mounts) is used once.
        if found
            .iter()
            .any(|h| h.version == version && h.controllers == controllers)
        {
            continue;
        }
        let path = proc_cgroup.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (id, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            let matches = match version {
                CgroupVersion::V2 => id == "0" && list.is_empty(),
                CgroupVersion::V1 => list.split(',').any(|c| c == controllers[0]),
            };
            matches.then_some(path)
        });
        let Some(path) = path else {
            continue;
        };
        // The mount may show only a subtree (its root); this process must be inside it.
        let relative = if root == "/" {
            Some(path)
        } else {
            path.strip_prefix(root.as_str())
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        let Some(relative) = relative else {
            continue;
        };
        let relative = relative.trim_start_matches('/');
        let own = if relative.is_empty() {
            PathBuf::from(&mount)
        } else {
            Path::new(&mount).join(relative)
        };
        found.push(Hierarchy {
            version,
            controllers,
            own,
        });
    }
    found
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let code = std::str::from_utf8(&bytes[i + 1..i + 4])
                .ok()
                .filter(|s| s.bytes().all(|b| (b'0'..=b'7').contains(&b)))
                .and_then(|s| u8::from_str_radix(s, 8).ok());
            if let Some(code) = code {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Creates `toolbox-<pid>-<nonce>` in every usable hierarchy.
fn create_cgroups() -> Vec<CgroupDir> {
    let (Ok(mountinfo), Ok(proc_cgroup)) = (
        std::fs::read_to_string("/proc/self/mountinfo"),
        std::fs::read_to_string("/proc/self/cgroup"),
    ) else {
        return Vec::new();
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    let name = format!("toolbox-{}-{nonce:x}", std::process::id());
    let mut out = Vec::new();
    for h in hierarchies(&mountinfo, &proc_cgroup) {
        let dir = h.own.join(&name);
        if std::fs::create_dir(&dir).is_err() {
            continue;
        }
        let controllers = match h.version {
            CgroupVersion::V2 => enable_v2_controllers(&dir),
            CgroupVersion::V1 => h.controllers,
        };
        out.push(CgroupDir {
            version: h.version,
            dir,
            home: h.own,
            controllers,
            holds_toolbox: false,
        });
    }
    out
}

/// Lets children of a new v2 cgroup use the memory and pids controllers, where the parent
/// offers them. (toolbox itself then lives in a child, `main`: a v2 cgroup that hands out
/// controllers may not hold processes.)
fn enable_v2_controllers(dir: &Path) -> Vec<String> {
    let offered = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let mut enabled = Vec::new();
    for controller in ["memory", "pids"] {
        if offered.split_whitespace().any(|c| c == controller)
            && std::fs::write(dir.join("cgroup.subtree_control"), format!("+{controller}")).is_ok()
        {
            enabled.push(controller.to_string());
        }
    }
    enabled
}

/// Every process in a cgroup folder and the folders below it.
pub(crate) fn members(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    pids
}

/// Kills every process in a cgroup and below, and waits until it is empty (until
/// `deadline`). Without `exclude`, the whole cgroup is stopped at once first (`cgroup.kill`,
/// or the v1 freezer) so nothing can fork while it is being emptied; with it (toolbox is
/// inside), processes are killed until none but `exclude` is left.
pub(crate) fn empty_cgroup(
    dir: &Path,
    version: CgroupVersion,
    freezer: bool,
    exclude: Option<i32>,
    deadline: Instant,
) -> bool {
    let whole = exclude.is_none();
    if whole && version == CgroupVersion::V2 {
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    }
    let frozen = whole && freezer && freeze(dir, deadline);
    let mut first = true;
    loop {
        let targets: Vec<i32> = members(dir)
            .into_iter()
            .filter(|p| Some(*p) != exclude)
            .collect();
        for &pid in &targets {
            // SAFETY: kill has no memory-safety preconditions. A pid listed in cgroup.procs
            // is a live member, not a reused id.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        if frozen && first {
            // Killed frozen tasks die once thawed.
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        }
        first = false;
        if targets.is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Freezes a v1 freezer cgroup; true once it reports FROZEN.
fn freeze(dir: &Path, deadline: Instant) -> bool {
    let state = dir.join("freezer.state");
    if std::fs::write(&state, "FROZEN").is_err() {
        return false;
    }
    loop {
        match std::fs::read_to_string(&state) {
            Ok(s) if s.trim() == "FROZEN" => return true,
            Ok(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => return false,
        }
    }
}

/// Removes a cgroup folder and the (empty) cgroups below it; errors are ignored (the
/// janitor tries again when toolbox exits).
pub(crate) fn remove_cgroup(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The fields of `/proc/<pid>/stat` containment needs.
#[derive(Debug, Clone)]
pub struct ProcStat {
    /// The process id.
    pub pid: i32,
    /// `Z` for a zombie.
    pub state: char,
    /// The parent's process id.
    pub ppid: i32,
    /// The process group id.
    pub pgrp: i32,
    /// The session id.
    pub session: i32,
    /// Start time in clock ticks after boot: with the pid, a process's identity.
    pub start: u64,
}

/// Parses one `/proc/<pid>/stat` line.
pub fn parse_stat(pid: i32, stat: &str) -> Option<ProcStat> {
    // Fields after the command name, which may itself contain spaces and parentheses:
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    // cutime cstime priority nice num_threads itrealvalue starttime ...
    let rest: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(ProcStat {
        pid,
        state: rest.first()?.chars().next()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgrp: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// Every process on the system, as far as `/proc` shows it at this moment.
pub fn processes() -> Vec<ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// The descendants of `root` in a process table (not `root` itself).
pub fn descendants(root: i32, table: &[ProcStat]) -> Vec<&ProcStat> {
    let mut children: HashMap<i32, Vec<&ProcStat>> = HashMap::new();
    for p in table {
        children.entry(p.ppid).or_default().push(p);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    let mut seen = HashSet::from([root]);
    while let Some(pid) = stack.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if seen.insert(child.pid) {
                out.push(*child);
                stack.push(child.pid);
            }
        }
    }
    out
}

/// The start time of a process, for the janitor to recognise toolbox.
fn start_time(pid: i32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &stat)
        .map(|p| p.start)
        .ok_or_else(|| std::io::Error::other("unreadable /proc stat"))
}

/// The janitor script: `bash -c SCRIPT janitor TOOLBOX_PID TOOLBOX_START KIND:DIR...` with
/// the pipe on stdin. KIND is `v2`, `freezer` (a v1 freezer hierarchy) or `v1`. Pipe lines:
/// `+ID` / `-ID` a process group and session registered / stopped, `*PID:START` / `/PID:START`
/// a process (by pid and start time, so a reused pid is never killed) noted / gone.
pub const JANITOR_SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT PIPE
tb=$1 tb_start=$2
shift 2
declare -A live=() procs=()
st= start=
# Sets st (state) and start (start time) of process $1 from /proc/$1/stat.
stat_of() {
  local line
  { read -r line < "/proc/$1/stat"; } 2>/dev/null || return 1
  local -a f=(${line##*) })
  st=${f[0]} start=${f[19]}
}
# Whether process $1 with start time $2 is still running (a zombie is dead).
alive() { stat_of "$1" && [[ $st != [ZX] && $start == "$2" ]]; }
while :; do
  if IFS= read -r -t 2 line; then
    case $line in
      +*) live[${line:1}]=1 ;;
      -*) unset "live[${line:1}]" ;;
      \**) procs[${line:1}]=1 ;;
      /*) unset "procs[${line:1}]" ;;
    esac
  elif (( $? > 128 )); then
    # No news. A process toolbox forked without exec may hold the pipe open after toolbox
    # died, so look at toolbox itself.
    alive "$tb" "$tb_start" || break
  else
    break
  fi
done
# toolbox is gone. First stop every cgroup as a whole, so nothing inside forks away.
for entry in "$@"; do
  kind=${entry%%:*} dir=${entry#*:}
  case $kind in
    v2) [[ -e $dir/cgroup.kill ]] && echo 1 > "$dir/cgroup.kill" ;;
    freezer) echo FROZEN > "$dir/freezer.state" ;;
  esac
done 2>/dev/null
# Then the registered process groups ...
for id in "${!live[@]}"; do
  kill -KILL -- "-$id"
done 2>/dev/null
# ... anything that moved to another process group of the same sessions ...
if (( ${#live[@]} )); then
  for stat in /proc/[0-9]*/stat; do
    { read -r s < "$stat"; } 2>/dev/null || continue
    read -r _ _ _ sid _ <<< "${s##*) }"
    [[ -n ${live[$sid]:-} ]] && kill -KILL "${stat//[!0-9]/}" 2>/dev/null
  done
fi
# ... and the registered processes that are still the same processes.
for key in "${!procs[@]}"; do
  alive "${key%%:*}" "${key#*:}" && kill -KILL "${key%%:*}" 2>/dev/null
done
# Kill what is left in the cgroups until they are empty (bounded), thaw, and remove them.
(( $# )) || exit 0
for (( round = 0; round < 500; round++ )); do
  left=
  for entry in "$@"; do
    dir=${entry#*:}
    for f in "$dir"/cgroup.procs "$dir"/*/cgroup.procs; do
      [[ -r $f ]] || continue
      while read -r pid; do
        kill -KILL "$pid" && left=1
      done < "$f"
    done 2>/dev/null
    if (( round == 0 )) && [[ ${entry%%:*} == freezer ]]; then
      echo THAWED > "$dir/freezer.state"
    fi 2>/dev/null
  done
  [[ -z $left ]] && break
  sleep 0.01 2>/dev/null
done
for entry in "$@"; do
  dir=${entry#*:}
  for sub in "$dir"/*/; do
    [[ -d $sub ]] && rmdir "$sub"
  done
  rmdir "$dir"
done 2>/dev/null
exit 0
"#;

/// Starts the janitor; returns the write end of its pipe and its pid.
fn start_janitor(cgroups: &[CgroupDir]) -> std::io::Result<(std::io::PipeWriter, i32)> {
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

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:38 /sub /mnt/other\\040place rw,relatime - cgroup2 cgroup2 rw
";
    const PROC_CGROUP: &str = "\
8:pids:/
6:freezer:/
4:memory:/process_api/abc
1:cpu:/
0::/
";

    #[test]
    fn hierarchies_are_read_from_mountinfo() {
        let found = hierarchies(MOUNTINFO, PROC_CGROUP);
        let own: Vec<_> = found.iter().map(|h| h.own.display().to_string()).collect();
        assert_eq!(
            own,
            [
                "/sys/fs/cgroup/memory/process_api/abc",
                "/sys/fs/cgroup/freezer",
                "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/unified",
            ]
        );
        assert_eq!(found[0].controllers, ["memory"]);
        assert_eq!(found[3].version, CgroupVersion::V2);
        // A subtree mount that does not contain this process's cgroup is skipped, and an
        // escaped mount point is decoded.
        let inside = hierarchies(
            "50 31 0:38 /sub /mnt/other\\040place rw - cgroup2 cgroup2 rw\n",
            "0::/sub/x\n",
        );
        assert_eq!(inside[0].own, Path::new("/mnt/other place/x"));
        assert!(hierarchies(
            "50 31 0:38 /sub /mnt/x rw - cgroup2 cgroup2 rw\n",
            "0::/subway\n"
        )
        .is_empty());
    }

    #[test]
    fn the_home_cgroup_prefers_v2_then_the_freezer() {
        let g = |version, controllers: &[&str]| CgroupDir {
            version,
            dir: PathBuf::new(),
            home: PathBuf::new(),
            controllers: controllers.iter().map(|s| s.to_string()).collect(),
            holds_toolbox: false,
        };
        let v1 = CgroupVersion::V1;
        assert_eq!(
            pick_home(&[g(v1, &["memory"]), g(v1, &["freezer"]), g(v1, &["pids"])]),
            Some(1)
        );
        assert_eq!(
            pick_home(&[g(v1, &["freezer"]), g(CgroupVersion::V2, &[])]),
            Some(1)
        );
        assert_eq!(pick_home(&[]), None);
    }

    #[test]
    fn stat_lines_and_trees() {
        let p = parse_stat(
            7,
            "7 (a (b) c) S 1 7 7 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 0",
        )
        .unwrap();
        assert_eq!(
            (p.state, p.ppid, p.pgrp, p.session, p.start),
            ('S', 1, 7, 7, 12345)
        );
        let mk = |pid, ppid| ProcStat {
            pid,
            state: 'S',
            ppid,
            pgrp: pid,
            session: pid,
            start: 0,
        };
        let table = [mk(2, 1), mk(3, 2), mk(4, 3), mk(5, 1)];
        let mut d: Vec<i32> = descendants(2, &table).iter().map(|p| p.pid).collect();
        d.sort();
        assert_eq!(d, [3, 4]);
    }

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

    /// The first writable v2 or v1 freezer hierarchy, if this machine has one.
    fn scratch_cgroup(version: CgroupVersion) -> Option<(PathBuf, bool)> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let h = hierarchies(&mountinfo, &proc_cgroup)
            .into_iter()
            .find(|h| {
                h.version == version
                    && (version == CgroupVersion::V2
                        || h.controllers.iter().any(|c| c == "freezer"))
            })?;
        // Tests run in parallel: each scratch cgroup gets a name of its own.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = h
            .own
            .join(format!("toolbox-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        Some((dir, version == CgroupVersion::V1))
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

    #[test]
    fn empty_cgroup_kills_all_but_the_excluded() {
        let Some((dir, freezer)) =
            scratch_cgroup(CgroupVersion::V2).or_else(|| scratch_cgroup(CgroupVersion::V1))
        else {
            panic!(
                "this test needs a writable cgroup (v2 or v1) for toolbox's containment; run \
                 it where toolbox runs (as root, or with a delegated cgroup)"
            );
        };
        let procs = std::ffi::CString::new(dir.join("cgroup.procs").to_str().unwrap()).unwrap();
        let mut children = Vec::new();
        for _ in 0..2 {
            let mut cmd = Command::new("sleep");
            cmd.arg("303");
            let path = procs.clone();
            // SAFETY: raw syscalls only, on a path prepared before the fork.
            unsafe {
                cmd.pre_exec(move || {
                    let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    Ok(())
                });
            }
            children.push(cmd.spawn().unwrap());
        }
        let spared = children[0].id() as i32;
        let version = if freezer {
            CgroupVersion::V1
        } else {
            CgroupVersion::V2
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        assert!(!empty_cgroup(
            &dir,
            version,
            freezer,
            Some(spared),
            Instant::now()
        ));
        let status = children[1].wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert!(
            children[0].try_wait().unwrap().is_none(),
            "the excluded process was killed"
        );
        assert!(empty_cgroup(&dir, version, freezer, None, deadline));
        children[0].wait().unwrap();
        remove_cgroup(&dir);
        assert!(!dir.exists());
    }
}
