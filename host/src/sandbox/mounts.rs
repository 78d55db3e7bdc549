//! The private mount namespace of a sandbox: toolbox's own files made read-only, folders
//! covered with an empty tmpfs. Prepared in the parent; in the child only system calls.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Result};

use super::{Reads, SandboxRules, PROTECTED};

/// The private mount namespace: toolbox's own files made read-only, folders covered with an
/// empty tmpfs. Prepared in the parent: every path and map is built here, [`Mounts::apply`]
/// only makes system calls.
#[derive(Debug)]
pub(super) struct Mounts {
    /// `Some((uid_map, gid_map))`: also enter a user namespace (not root), mapping the user
    /// and group to themselves.
    user_ns: Option<(Vec<u8>, Vec<u8>)>,
    keep_writable: Vec<CString>,
    /// Paths to make read-only, with the mount flags they already have (a read-only remount
    /// must keep nosuid, nodev, noexec and the atime flags, or a user namespace refuses it).
    read_only: Vec<(CString, libc::c_ulong)>,
    /// Folders covered by an empty tmpfs.
    pub(super) tmpfs: Vec<CString>,
    /// The working directory to enter again once the mounts exist.
    cwd: Option<CString>,
    /// For the summary: `.git/`, `.toolbox/`, `toolbox.toml`.
    pub(super) shown: Vec<String>,
}

impl Mounts {
    /// The mounts `rules` need, or `None`; with the reason some folders could not be covered
    /// (no namespace here), for the summary. Protection needs a namespace; covering is best
    /// effort.
    pub(super) fn prepare(rules: &SandboxRules) -> Result<(Option<Self>, Option<String>)> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| anyhow!("{} contains a NUL byte", p.display()))
        };
        // A folder holding something the program may use is never covered (a workspace
        // under /tmp stays visible).
        let used: Vec<&PathBuf> = match &rules.reads {
            Reads::Everywhere => rules.writable.iter().collect(),
            Reads::Beneath(roots) => roots.iter().chain(rules.writable.iter()).collect(),
        };
        let hide: Vec<&PathBuf> = rules
            .hide
            .iter()
            .filter(|dir| dir.is_dir() && !used.iter().any(|u| u.starts_with(dir)))
            .collect();
        if rules.protect.is_none() && hide.is_empty() {
            return Ok((None, None));
        }
        let user_ns = match (namespace_support(), &rules.protect) {
            (Ok(user_ns), _) => user_ns,
            (Err(e), Some(_)) => bail!(
                "toolbox.toml, .toolbox/ and .git/ cannot be kept read-only: a private mount \
                 namespace is not available here ({e})"
            ),
            (Err(e), None) => {
                return Ok((
                    None,
                    Some(format!(
                        "{} stay visible (no private mount namespace here: {e})",
                        hide.iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(" and ")
                    )),
                ))
            }
        };
        let mut read_only = Vec::new();
        let mut shown = Vec::new();
        let mut keep_writable = Vec::new();
        let mut cwd = None;
        if let Some(spec) = &rules.protect {
            for name in PROTECTED {
                let path = spec.root.join(name);
                // Follows symlinks: a link makes its target read-only (only ever stricter).
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                shown.push(if meta.is_dir() {
                    format!("{name}/")
                } else {
                    name.to_string()
                });
                let path = c(&path)?;
                let flags = mount_flags(&path);
                read_only.push((path, flags));
            }
            keep_writable = spec
                .keep_writable
                .iter()
                .filter(|p| p.is_dir())
                .map(|p| c(p))
                .collect::<Result<Vec<_>>>()?;
            cwd = Some(c(&spec.cwd)?);
        }
        let tmpfs = hide.iter().map(|p| c(p)).collect::<Result<Vec<_>>>()?;
        let user_ns = user_ns.then(|| {
            // SAFETY: getuid/getgid have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            (
                format!("{uid} {uid} 1\n").into_bytes(),
                format!("{gid} {gid} 1\n").into_bytes(),
            )
        });
        Ok((
            Some(Mounts {
                user_ns,
                keep_writable,
                read_only,
                tmpfs,
                cwd,
                shown,
            }),
            None,
        ))
    }

    /// In the forked child: a private mount namespace with the protected paths read-only and
    /// the covered folders empty.
    pub(super) fn apply(&self) -> std::io::Result<()> {
        enter_namespace(self.user_ns.as_ref())?;
        let none = std::ptr::null::<libc::c_char>();
        // SAFETY: mount and chdir with NUL-terminated strings built before the fork.
        unsafe {
            // This namespace's own mounts must not propagate back to the parent's.
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for dir in &self.tmpfs {
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    c"mode=0700,size=64m".as_ptr().cast(),
                ))?;
            }
            // Writable folders inside a protected one become mounts of their own first, so
            // the recursive bind below carries them along, still writable.
            for dir in &self.keep_writable {
                check(libc::mount(
                    dir.as_ptr(),
                    dir.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            for (path, flags) in &self.read_only {
                check(libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    none,
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    none,
                    path.as_ptr(),
                    none,
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                    std::ptr::null(),
                ))?;
            }
            // The working directory was entered before the mounts existed, so it still
            // points below them (a cwd inside .git/ would stay writable): enter it again.
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
        }
        Ok(())
    }
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `unshare` into a new mount namespace, with a user namespace when `maps` are given (the
/// uid and gid maps to write). System calls only: runs in a forked child.
fn enter_namespace(maps: Option<&(Vec<u8>, Vec<u8>)>) -> std::io::Result<()> {
    let flags = if maps.is_some() {
        libc::CLONE_NEWUSER | libc::CLONE_NEWNS
    } else {
        libc::CLONE_NEWNS
    };
    // SAFETY: unshare with flags only.
    check(unsafe { libc::unshare(flags) })?;
    if let Some((uid_map, gid_map)) = maps {
        // An unprivileged process may map only its own ids, and the gid map only after
        // giving up setgroups.
        write_proc(c"/proc/self/setgroups", b"deny")?;
        write_proc(c"/proc/self/uid_map", uid_map)?;
        write_proc(c"/proc/self/gid_map", gid_map)?;
    }
    Ok(())
}

/// Writes `data` to a /proc file with raw system calls.
fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if written != data.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

/// The per-mount flags a path's mount already has, as `mount(2)` flags.
fn mount_flags(path: &std::ffi::CStr) -> libc::c_ulong {
    // SAFETY: statvfs fills a plain struct from a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid, writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ]
    .iter()
    .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
    .fold(0, |acc, (_, ms)| acc | ms)
}

/// Whether a private mount namespace can be made here, asked once by trying it in a
/// throw-away child: `Ok(false)` plainly (root), `Ok(true)` inside a user namespace, or why
/// not.
fn namespace_support() -> Result<bool, String> {
    static SUPPORT: OnceLock<Result<bool, String>> = OnceLock::new();
    SUPPORT
        .get_or_init(|| {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let mut errors = Vec::new();
            for user_ns in [false, true] {
                if !user_ns && !root {
                    continue;
                }
                match probe_namespace(user_ns) {
                    Ok(()) => return Ok(user_ns),
                    Err(e) if user_ns => errors.push(format!("user namespace: {e}")),
                    Err(e) => errors.push(format!("unshare(CLONE_NEWNS): {e}")),
                }
            }
            Err(format!(
                "{}; unprivileged user namespaces may be disabled (sysctl \
                 user.max_user_namespaces, kernel.apparmor_restrict_unprivileged_userns)",
                errors.join("; ")
            ))
        })
        .clone()
}

fn probe_namespace(user_ns: bool) -> std::io::Result<()> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let maps = user_ns.then(|| {
        (
            format!("{uid} {uid} 1\n").into_bytes(),
            format!("{gid} {gid} 1\n").into_bytes(),
        )
    });
    let mut probe = std::process::Command::new("bash");
    probe
        .args(["--noprofile", "--norc", "-c", ":"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: the hook only makes system calls on data built before the fork.
    unsafe {
        probe.pre_exec(move || {
            enter_namespace(maps.as_ref())?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))
        });
    }
    let status = probe.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "the probe ended with {status}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{ProtectSpec, SandboxMode};

    /// Runs `script` in bash after `protection` is applied; returns stdout and stderr.
    fn run_protected(protection: Mounts, script: &str) -> (String, String) {
        let protection = std::sync::Arc::new(protection);
        let mut cmd = std::process::Command::new("bash");
        cmd.args(["-c", script]);
        let hook = protection.clone();
        // SAFETY: apply only makes system calls on data built before the fork.
        unsafe {
            cmd.pre_exec(move || hook.apply());
        }
        let out = cmd.output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn protect(spec: &ProtectSpec) -> Mounts {
        let rules = SandboxRules::for_mode(
            SandboxMode::WorkspaceWrite,
            false,
            std::slice::from_ref(&spec.root),
            Some(spec),
        )
        .unwrap();
        Mounts::prepare(&rules)
            .unwrap()
            .0
            .expect("a mount namespace here")
    }

    fn protected_workspace() -> (tempfile::TempDir, ProtectSpec) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("toolbox.toml"), "").unwrap();
        std::fs::create_dir_all(root.join(".toolbox/sessions/s1/scratchpad")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        let spec = ProtectSpec {
            keep_writable: vec![root.join(".toolbox/sessions/s1/scratchpad")],
            cwd: root.join(".git"),
            root,
        };
        (dir, spec)
    }

    const PROBE_WRITES: &str = "touch x 2>/dev/null && echo cwd-writable; \
        cd ..; echo a 2>/dev/null >> toolbox.toml && echo toml-writable; \
        touch .toolbox/y 2>/dev/null && echo toolbox-writable; \
        touch .toolbox/sessions/s1/scratchpad/z && echo scratch-ok; \
        touch plain && echo plain-ok";

    #[test]
    fn protected_paths_are_read_only_and_kept_folders_writable() {
        let (_dir, spec) = protected_workspace();
        let protection = protect(&spec);
        assert_eq!(protection.shown, ["toolbox.toml", ".toolbox/", ".git/"]);
        let (out, err) = run_protected(protection, PROBE_WRITES);
        assert_eq!(out, "scratch-ok\nplain-ok\n", "{err}");
    }

    #[test]
    fn the_user_namespace_variant_protects_the_same() {
        // What a non-root user gets; root can take the same path (it maps itself to itself).
        if let Err(e) = probe_namespace(true) {
            panic!(
                "this test needs user namespaces (the sandbox a non-root user gets): {e}; \
                 enable them (kernel.unprivileged_userns_clone) where toolbox runs"
            );
        }
        let (_dir, spec) = protected_workspace();
        let mut protection = protect(&spec);
        // SAFETY: getuid/getgid have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        protection.user_ns = Some((
            format!("{uid} {uid} 1\n").into_bytes(),
            format!("{gid} {gid} 1\n").into_bytes(),
        ));
        let (out, err) = run_protected(protection, &format!("{PROBE_WRITES}; id -u"));
        assert_eq!(out, format!("scratch-ok\nplain-ok\n{uid}\n"), "{err}");
    }
}
