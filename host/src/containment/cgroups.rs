//! toolbox's cgroups: the hierarchies this process is in (from `/proc/self/mountinfo` and
//! `/proc/self/cgroup`), `toolbox-<pid>-<nonce>/` made in each writable one, and a cgroup
//! emptied (killed as a whole where the kernel can) and removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The v1 controllers toolbox uses: freezer to stop a cgroup atomically, pids and memory for
/// limits. Any of them also tracks membership.
const V1_CONTROLLERS: &[&str] = &["freezer", "pids", "memory"];

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

    pub(super) fn janitor_arg(&self) -> String {
        let kind = match self.version {
            CgroupVersion::V2 => "v2",
            CgroupVersion::V1 if self.has("freezer") => "freezer",
            CgroupVersion::V1 => "v1",
        };
        format!("{kind}:{}", self.dir.display())
    }
}

/// The index of the cgroup toolbox should live in: v2 (one write kills it all), else the v1
/// freezer (stops it atomically), else any v1 hierarchy (kill until empty).
pub(super) fn pick_home(cgroups: &[CgroupDir]) -> Option<usize> {
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
pub(super) struct Hierarchy {
    version: CgroupVersion,
    /// For v1: the controllers of interest bound to it.
    controllers: Vec<String>,
    /// This process's cgroup folder in it.
    own: PathBuf,
}

/// The hierarchies toolbox can use, from `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub(super) fn hierarchies(mountinfo: &str, proc_cgroup: &str) -> Vec<Hierarchy> {
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
pub(super) fn create_cgroups() -> Vec<CgroupDir> {
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
pub(super) fn members(dir: &Path) -> Vec<i32> {
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

/// The first writable v2 or v1 freezer hierarchy, if this machine has one: a scratch cgroup
/// of its own for a test, and whether it is a v1 freezer.
#[cfg(test)]
pub(super) fn scratch_cgroup(version: CgroupVersion) -> Option<(PathBuf, bool)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let h = hierarchies(&mountinfo, &proc_cgroup)
        .into_iter()
        .find(|h| {
            h.version == version
                && (version == CgroupVersion::V2 || h.controllers.iter().any(|c| c == "freezer"))
        })?;
    use std::sync::atomic::{AtomicU64, Ordering};
    // Tests run in parallel: each scratch cgroup gets a name of its own.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = h
        .own
        .join(format!("toolbox-test-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir).ok()?;
    Some((dir, version == CgroupVersion::V1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

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
