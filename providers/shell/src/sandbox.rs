//! The opt-in OS sandbox: Landlock for the filesystem, seccomp for the network.
//!
//! Everything is built in the parent before the fork — the Landlock ruleset with its path
//! descriptors open, the compiled BPF programs — and [`PreparedSandbox::apply_in_child`],
//! called from `pre_exec`, only makes the three kinds of system call that switch it on.
//! Restrictions apply to bash and are inherited by everything it starts; nothing can lift
//! them (`no_new_privs` is set first, as both mechanisms require).
//!
//! If the kernel cannot enforce what the mode promises, [`PreparedSandbox::prepare`] fails
//! and the command does not run. It never runs unsandboxed by surprise.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::config::SandboxMode;

/// Device files every mode may write, because ordinary shell code writes to them
/// (`>/dev/null`, `2>&1 >/dev/null`, `head -c 10 /dev/zero`, seeding `/dev/urandom`).
/// None of them stores anything.
pub const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// The Landlock ABI the sandbox needs at least: ABI 3 (Linux 6.2) is the first that also
/// controls truncation, without which `truncate -s 0 /etc/x` would still work.
const REQUIRED_ABI: i64 = 3;

/// A sandbox ready to be switched on in a child process.
#[derive(Debug)]
pub struct PreparedSandbox {
    /// The Landlock ruleset, fully populated.
    ruleset: OwnedFd,
    /// seccomp programs, installed in order.
    filters: Vec<BpfProgram>,
    summary: String,
}

impl PreparedSandbox {
    /// Builds the sandbox for `mode`. Under `workspace-write`, `writable` are the folders
    /// commands may write in (the workspace root, the scratchpad, the temp dir); missing
    /// optional ones are skipped, a missing first one (the workspace) is an error.
    pub fn prepare(mode: SandboxMode, network: bool, writable: &[PathBuf]) -> Result<Self> {
        if mode == SandboxMode::Off {
            bail!("internal error: no sandbox to prepare for mode off");
        }
        check_landlock()?;
        let ruleset =
            landlock_ruleset(mode, writable).context("cannot build the Landlock ruleset")?;
        let mut filters = vec![session_filter()?];
        if !network {
            filters.push(network_filter()?);
        }
        let places = if mode == SandboxMode::WorkspaceWrite {
            let shown: Vec<String> = writable.iter().map(|p| p.display().to_string()).collect();
            format!("writes allowed only in {}", shown.join(", "))
        } else {
            "no writes allowed".to_string()
        };
        let summary = format!(
            "{} ({places}; network {})",
            mode.as_str(),
            if network { "allowed" } else { "refused" }
        );
        Ok(PreparedSandbox {
            ruleset,
            filters,
            summary,
        })
    }

    /// One line for the result: mode, where writes may go, network.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Switches the sandbox on for the calling process. Runs in the forked child before
    /// exec, so it makes system calls only: no allocation, no locks.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        // SAFETY: plain system calls on data that lives in this (copied) address space.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::syscall(
                libc::SYS_landlock_restrict_self,
                self.ruleset.as_raw_fd(),
                0u32,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            for filter in &self.filters {
                // seccompiler's sock_filter has the kernel's layout, as libc's does.
                let program = libc::sock_fprog {
                    len: filter.len() as u16,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                if libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    &program as *const libc::sock_fprog,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// The kernel's Landlock ABI version, or the errno saying why there is none. Asked once.
fn landlock_abi() -> Result<i64, i32> {
    static ABI_VERSION: OnceLock<Result<i64, i32>> = OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only queries.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        if v < 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOSYS))
        } else {
            Ok(v)
        }
    })
}

/// Fails with an explanation unless the kernel can enforce the filesystem rules.
fn check_landlock() -> Result<()> {
    match landlock_abi() {
        Ok(v) if v >= REQUIRED_ABI => Ok(()),
        Ok(v) => bail!(
            "this kernel offers Landlock ABI {v}, but the sandbox needs ABI {REQUIRED_ABI} \
             (Linux 6.2 or later) to refuse every kind of write"
        ),
        Err(libc::EOPNOTSUPP) => bail!(
            "Landlock is built into this kernel but not enabled (add `landlock` to the `lsm=` \
             kernel boot parameter)"
        ),
        Err(errno) => bail!(
            "this kernel has no Landlock support (errno {errno}); it needs Linux 6.2 or later \
             built with CONFIG_SECURITY_LANDLOCK"
        ),
    }
}

fn landlock_ruleset(mode: SandboxMode, writable: &[PathBuf]) -> Result<OwnedFd> {
    let ruleset = Ruleset::default()
        // What the sandbox promises must be enforced in full, or creating it fails.
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V3))?
        // Hardening newer kernels add is taken where available: device ioctls (ABI 5, e.g.
        // TIOCSTI on a terminal), signals to and abstract unix sockets of processes outside
        // the sandbox (ABI 6).
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI::V5))?
        .scope(Scope::from_all(ABI::V6))?
        .create()?;
    let open =
        |path: &Path| PathFd::new(path).map_err(|e| anyhow!("cannot open {}: {e}", path.display()));
    // Read and execute everywhere.
    let mut ruleset = ruleset.add_rule(PathBeneath::new(
        open(Path::new("/"))?,
        AccessFs::from_read(ABI::V5),
    ))?;
    if mode == SandboxMode::WorkspaceWrite {
        for (i, dir) in writable.iter().enumerate() {
            match PathFd::new(dir) {
                Ok(fd) => {
                    ruleset = ruleset.add_rule(PathBeneath::new(fd, AccessFs::from_all(ABI::V5)))?
                }
                // The workspace must be there; the temp dir may be missing.
                Err(e) if i == 0 => bail!("cannot open the workspace {}: {e}", dir.display()),
                Err(_) => {}
            }
        }
    }
    for device in WRITABLE_DEVICES {
        if let Ok(fd) = PathFd::new(device) {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, AccessFs::from_file(ABI::V5)))?;
        }
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| anyhow!("Landlock is not supported by this kernel"))
}

fn target_arch() -> Result<TargetArch> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        bail!("the sandbox's seccomp filters are not available on this CPU architecture")
    }
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> Result<BpfProgram> {
    // Any other architecture's system calls (an i386 binary on x86_64) kill the process:
    // seccompiler checks the audit arch first, so the numbers below cannot be bypassed.
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        target_arch()?,
    )
    .map_err(|e| anyhow!("cannot build the seccomp filter: {e}"))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| anyhow!("cannot compile the seccomp filter: {e}"))
}

/// No network: `socket()` for anything but AF_UNIX fails with EACCES, and io_uring (which can
/// create sockets without the `socket` system call) is unavailable.
fn network_filter() -> Result<BpfProgram> {
    let not_unix = SeccompRule::new(vec![SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .map_err(|e| anyhow!("seccomp condition: {e}"))?])
    .map_err(|e| anyhow!("seccomp rule: {e}"))?;
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_socket, vec![not_unix]);
    rules.insert(libc::SYS_io_uring_setup, vec![]);
    compile(rules, libc::EACCES)
}

/// No escape from the process group: `setsid` and `setpgid` fail with EPERM, so stopping
/// the group really stops everything the command started. (Our own `setsid` runs before the
/// filter is installed.)
fn session_filter() -> Result<BpfProgram> {
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_setsid, vec![]);
    rules.insert(libc::SYS_setpgid, vec![]);
    compile(rules, libc::EPERM)
}

/// The Landlock ABI this kernel offers (`None` when unavailable).
#[cfg(test)]
fn kernel_abi() -> Option<i64> {
    landlock_abi().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_supports_the_sandbox() {
        // The development machines report ABI 7; the tests below rely on enforcement.
        let abi = kernel_abi().expect("Landlock available");
        assert!(abi >= REQUIRED_ABI, "ABI {abi}");
    }

    #[test]
    fn filters_compile_and_off_is_refused() {
        assert!(!network_filter().unwrap().is_empty());
        assert!(!session_filter().unwrap().is_empty());
        let e = PreparedSandbox::prepare(SandboxMode::Off, false, &[]).unwrap_err();
        assert!(e.to_string().contains("mode off"));
    }

    #[test]
    fn a_missing_workspace_is_an_error_not_a_silent_gap() {
        let e = PreparedSandbox::prepare(
            SandboxMode::WorkspaceWrite,
            false,
            &[PathBuf::from("/nonexistent/workspace")],
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot open the workspace"),
            "{e:#}"
        );
    }
}
