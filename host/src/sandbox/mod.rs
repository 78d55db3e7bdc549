//! The one OS sandbox, and everything else a child process gets from toolbox: shell
//! commands, the isolated Python worker, Jupyter kernels and language servers are started
//! through here, so the providers keep no `unsafe` and no `libc` of their own for it.
//!
//! - [`ChildSetup`] (`child.rs`) is what a child gets between `fork` and `exec`, in one fixed
//!   order: a session of its own, death with toolbox, the `[limits]`, a working folder held
//!   by descriptor, a descriptor at a fixed number, and last the sandbox. It is the one
//!   `pre_exec` hook of every child a tool starts; [`send_fd`] hands a running child a
//!   descriptor over the socket it was given.
//! - [`spawn_in_session`] (`posix_spawn.rs`) starts a plain command in a session of its own
//!   with `posix_spawn`, the fast path that copies nothing of toolbox's memory.
//! - `group.rs`: what is done to a started child's process group afterwards: signals to the
//!   group ([`signal_group`]), to a session ([`signal_session`]), reaping ([`try_reap`]) and
//!   watching for its exit without reaping it ([`ExitWatch`]); [`signal_name`] for messages.
//!
//! The sandbox itself: Landlock for the filesystem, seccomp for the network and for mounts,
//! and a private mount namespace where a rule needs one (`mounts.rs`). Shell commands
//! (`[shell] sandbox`), the isolated Python worker (`[python] sandbox`) and language servers
//! all run under it, each with its own [`SandboxRules`].
//!
//! Everything is built in the parent before the fork — the Landlock ruleset with its path
//! descriptors open, the compiled BPF programs, every path of the mounts — and the child's
//! part, run from [`ChildSetup`]'s `pre_exec` hook, only makes system calls.
//! Restrictions apply to the child and are inherited by everything it starts; nothing can
//! lift them (`no_new_privs` is set first, as both mechanisms require).
//!
//! If the kernel cannot enforce what the rules promise, [`PreparedSandbox::prepare`] fails
//! and nothing runs. It never runs unsandboxed by surprise.
//!
//! - **Reads** are everywhere ([`Reads::Everywhere`], shell and Python: they run the user's
//!   tools) or only beneath a list of folders ([`Reads::Beneath`], language servers: the
//!   workspace, the system's folders and the server's own installation; `$HOME` and `/tmp`
//!   stay out of reach).
//! - **Writes** go only beneath [`SandboxRules::writable`] (and a few harmless devices).
//! - Under `workspace-write`, toolbox's own files in the workspace — `toolbox.toml`,
//!   `.toolbox/` (except this session's scratchpad, output and input folders) and `.git/` —
//!   stay read-only, as Codex protects its own folders. Landlock cannot deny a sub-path of a
//!   tree it allows, so the child first enters a private mount namespace (as root
//!   `unshare(CLONE_NEWNS)`; otherwise with a user namespace that maps the user to itself)
//!   and bind-mounts each of them onto itself read-only. The same namespace mounts an empty
//!   tmpfs over the folders [`SandboxRules::hide`] names (a language server's `/tmp` and
//!   `/run`, where other programs keep their Unix sockets). Mounting is then impossible for
//!   the child: Landlock refuses mount changes to a sandboxed process, and the seccomp filter
//!   refuses every mount system call (including `mount_setattr`, which no Landlock hook
//!   covers).

mod child;
mod group;
mod mounts;
#[cfg(target_env = "gnu")]
mod posix_spawn;

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

pub use child::{send_fd, ChildSetup};
pub use group::{
    group_exists, signal_group, signal_name, signal_process, signal_session, try_reap, ExitWatch,
    Reap, Signal,
};
use mounts::Mounts;
#[cfg(target_env = "gnu")]
pub use posix_spawn::{spawn_in_session, PipedChild};

/// Which OS sandbox wraps a command (`[shell] sandbox`, `[python] sandbox`, `--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// No sandbox: a command may do whatever toolbox itself may.
    Off,
    /// Read everywhere, write nowhere (except a few harmless device files).
    ReadOnly,
    /// Read everywhere, write in the workspace and the temp dir.
    WorkspaceWrite,
}

impl SandboxMode {
    /// The name the settings give this mode, as messages show it.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Off => "off",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
        }
    }

    /// What a sandbox setting must be, for the error when it is not.
    pub const EXPECTED: &'static str = "\"off\", \"read-only\" or \"workspace-write\"";

    /// Parses a setting: `off`, `read-only`, `workspace-write` (any case, `_` for `-`).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "off" | "none" | "false" => Some(SandboxMode::Off),
            "read-only" | "readonly" => Some(SandboxMode::ReadOnly),
            "workspace-write" => Some(SandboxMode::WorkspaceWrite),
            _ => None,
        }
    }
}

/// How a workspace's `toolbox.toml` may change a sandbox setting (`[shell] sandbox`,
/// `[python] sandbox`): only towards a stricter mode.
pub const MODE_RULE: toolbox_core::trust::Tighten = toolbox_core::trust::Tighten::Ranked {
    order: &["off", "workspace-write", "read-only"],
    default: "off",
};

/// How a workspace may change a sandbox's network setting: only turn it off.
pub const NETWORK_RULE: toolbox_core::trust::Tighten = toolbox_core::trust::Tighten::Ranked {
    order: &["true", "false"],
    default: "false",
};

/// Device files every sandbox may write, because ordinary code writes to them
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

/// What `workspace-write` keeps read-only in the workspace root, when it exists.
pub const PROTECTED: &[&str] = &["toolbox.toml", ".toolbox", ".git"];

/// Where a command runs, for the read-only protection of toolbox's own files.
#[derive(Debug, Clone)]
pub struct ProtectSpec {
    /// The workspace root, which holds the [`PROTECTED`] names.
    pub root: PathBuf,
    /// Folders inside a protected one that stay writable (this session's scratchpad,
    /// output and input folders), when they exist.
    pub keep_writable: Vec<PathBuf>,
    /// The command's working directory: entered again once the mounts are in place, so
    /// that it, too, is seen through them.
    pub cwd: PathBuf,
}

/// Where a sandboxed program may read.
#[derive(Debug, Clone)]
pub enum Reads {
    /// Everywhere (shell commands and Python run the user's own tools).
    Everywhere,
    /// Only beneath these folders or files (missing ones are skipped), plus the writable
    /// folders and the devices.
    Beneath(Vec<PathBuf>),
}

/// What one sandbox allows. [`SandboxRules::for_mode`] gives a shell's or Python's;
/// [`SandboxRules::language_server`] a language server's.
#[derive(Debug, Clone)]
pub struct SandboxRules {
    /// Where it may read.
    pub reads: Reads,
    /// Folders it may write beneath. The first must exist when
    /// [`first_writable_required`](Self::first_writable_required) is set; others may be
    /// missing and are skipped.
    pub writable: Vec<PathBuf>,
    /// Whether the first writable folder must exist (the workspace under `workspace-write`).
    pub first_writable_required: bool,
    /// Whether it may open network sockets (anything but `AF_UNIX`).
    pub network: bool,
    /// toolbox's own files to keep read-only (a mount namespace is then required).
    pub protect: Option<ProtectSpec>,
    /// Folders to cover with an empty tmpfs in a private mount namespace, when one can be
    /// made here (skipped, and said in the summary, when not; a folder that holds something
    /// the program may read or write is never covered).
    pub hide: Vec<PathBuf>,
    /// Refuse `setsid` and `setpgid`, so stopping the process group stops everything it
    /// started (shell commands).
    pub confine_group: bool,
    /// How the summary names this sandbox (`workspace-write`, `language server`).
    pub label: String,
}

impl SandboxRules {
    /// The rules of a sandbox `mode` for shell commands and Python: read everywhere; under
    /// `workspace-write`, write beneath `writable` (the workspace first, which must exist)
    /// with toolbox's own files kept read-only as `protect` says.
    pub fn for_mode(
        mode: SandboxMode,
        network: bool,
        writable: &[PathBuf],
        protect: Option<&ProtectSpec>,
    ) -> Result<Self> {
        if mode == SandboxMode::Off {
            bail!("internal error: no sandbox to prepare for mode off");
        }
        let write = mode == SandboxMode::WorkspaceWrite;
        Ok(SandboxRules {
            reads: Reads::Everywhere,
            writable: if write { writable.to_vec() } else { Vec::new() },
            first_writable_required: write,
            network,
            protect: if write { protect.cloned() } else { None },
            hide: Vec::new(),
            confine_group: true,
            label: mode.as_str().to_string(),
        })
    }

    /// The rules of a language server: it reads the workspace (never writes it), the
    /// system's folders ([`SYSTEM_READ_ROOTS`] and [`ETC_READ`]), its own installation
    /// (`install`) and whatever the operator adds, and writes only `private` (its `HOME` and
    /// `TMPDIR`). `/tmp` and `/run` are covered with empty tmpfs mounts where a mount
    /// namespace can be made.
    pub fn language_server(
        workspace: &Path,
        private: &Path,
        install: &[PathBuf],
        network: bool,
    ) -> Self {
        let mut reads: Vec<PathBuf> = vec![workspace.to_path_buf()];
        reads.extend(SYSTEM_READ_ROOTS.iter().map(PathBuf::from));
        reads.extend(ETC_READ.iter().map(|name| Path::new("/etc").join(name)));
        reads.extend(install.iter().cloned());
        SandboxRules {
            reads: Reads::Beneath(reads),
            writable: vec![private.to_path_buf()],
            first_writable_required: true,
            network,
            protect: None,
            hide: vec![PathBuf::from("/tmp"), PathBuf::from("/run")],
            confine_group: false,
            label: "language server".to_string(),
        }
    }
}

/// System folders a language server may read: programs, libraries and headers, the kernel's
/// views of the process and the machine. Not `/home`, `/root`, `/tmp`, `/var`, `/srv`,
/// `/mnt` or `/media`.
pub const SYSTEM_READ_ROOTS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc", "/sys",
];

/// What of `/etc` a language server may read: the loader's cache, names of users and
/// groups, time zones, certificates, and the links Debian's alternatives make. Not the
/// rest (`shadow`, `ssh/`, credentials of services).
pub const ETC_READ: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "hosts",
    "os-release",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "mime.types",
    "clangd",
    "gcc",
    "fonts",
];

/// A sandbox ready to be switched on in a child process.
#[derive(Debug)]
pub struct PreparedSandbox {
    /// The Landlock ruleset, fully populated (none for [`PreparedSandbox::network_only`]).
    ruleset: Option<OwnedFd>,
    /// seccomp programs, installed in order.
    filters: Vec<BpfProgram>,
    /// The private mount namespace: read-only binds, covered folders.
    mounts: Option<Mounts>,
    summary: String,
}

impl PreparedSandbox {
    /// Builds the sandbox for shell commands and Python under `mode` (see
    /// [`SandboxRules::for_mode`]).
    pub fn prepare(
        mode: SandboxMode,
        network: bool,
        writable: &[PathBuf],
        protect: Option<&ProtectSpec>,
    ) -> Result<Self> {
        Self::with_rules(&SandboxRules::for_mode(mode, network, writable, protect)?)
    }

    /// Builds the sandbox `rules` describe, or says why this machine cannot enforce it.
    pub fn with_rules(rules: &SandboxRules) -> Result<Self> {
        check_landlock()?;
        let ruleset = landlock_ruleset(rules).context("cannot build the Landlock ruleset")?;
        let mut filters = vec![session_filter(rules.confine_group)?];
        if !rules.network {
            filters.push(network_filter()?);
        }
        let (mounts, uncovered) = Mounts::prepare(rules)?;
        let mut places = match (&rules.reads, rules.writable.is_empty()) {
            (Reads::Everywhere, true) => "no writes allowed".to_string(),
            (Reads::Everywhere, false) => {
                let shown: Vec<String> = rules
                    .writable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                format!("writes allowed only in {}", shown.join(", "))
            }
            (Reads::Beneath(_), _) => {
                let shown: Vec<String> = rules
                    .writable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect();
                format!(
                    "reads only the workspace, the system's folders and its own \
                     installation; writes only in {}",
                    shown.join(", ")
                )
            }
        };
        if let Some(m) = mounts.as_ref().filter(|m| !m.shown.is_empty()) {
            places.push_str(&format!(", except read-only {}", m.shown.join(", ")));
        }
        if let Some(m) = mounts.as_ref().filter(|m| !m.tmpfs.is_empty()) {
            let hidden: Vec<String> = m
                .tmpfs
                .iter()
                .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned())
                .collect();
            places.push_str(&format!("; {} private and empty", hidden.join(" and ")));
        }
        if let Some(why) = uncovered {
            places.push_str(&format!("; {why}"));
        }
        let summary = format!(
            "{} ({places}; network {})",
            rules.label,
            if rules.network { "allowed" } else { "refused" }
        );
        Ok(PreparedSandbox {
            ruleset: Some(ruleset),
            filters,
            mounts,
            summary,
        })
    }

    /// Only the network refused (no filesystem rules): for a program the operator chose to
    /// run outside the filesystem sandbox. seccomp works on every kernel toolbox runs on.
    pub fn network_only() -> Result<Self> {
        Ok(PreparedSandbox {
            ruleset: None,
            filters: vec![network_filter()?],
            mounts: None,
            summary: "no filesystem sandbox; network refused".to_string(),
        })
    }

    /// One line for the result: mode, where writes may go, network.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Switches the sandbox on for the calling process. Runs in the forked child before
    /// exec (from [`ChildSetup`]'s hook), so it makes system calls only: no allocation, no
    /// locks.
    pub(crate) fn apply_in_child(&self) -> std::io::Result<()> {
        // The mounts first: once Landlock and seccomp are on, nothing can mount any more.
        if let Some(mounts) = &self.mounts {
            mounts.apply()?;
        }
        // SAFETY: plain system calls on data that lives in this (copied) address space.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(ruleset) = &self.ruleset {
                if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
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

/// Whether this kernel can enforce the sandbox, or why not (for a note where a program may
/// run without it, and for `toolbox doctor`-like reports).
pub fn availability() -> Result<()> {
    check_landlock()
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

fn landlock_ruleset(rules: &SandboxRules) -> Result<OwnedFd> {
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
    let mut ruleset = match &rules.reads {
        // Read and execute everywhere.
        Reads::Everywhere => ruleset.add_rule(PathBeneath::new(
            open(Path::new("/"))?,
            AccessFs::from_read(ABI::V5),
        ))?,
        Reads::Beneath(roots) => {
            let mut ruleset = ruleset;
            for root in roots {
                // A missing optional root (no /lib32 here) is simply not there to read.
                if let Ok(fd) = PathFd::new(root) {
                    let access = if std::fs::metadata(root).is_ok_and(|m| m.is_dir()) {
                        AccessFs::from_read(ABI::V5)
                    } else {
                        AccessFs::from_read(ABI::V5) & AccessFs::from_file(ABI::V5)
                    };
                    ruleset = ruleset.add_rule(PathBeneath::new(fd, access))?;
                }
            }
            ruleset
        }
    };
    for (i, dir) in rules.writable.iter().enumerate() {
        match PathFd::new(dir) {
            Ok(fd) => {
                ruleset = ruleset.add_rule(PathBeneath::new(fd, AccessFs::from_all(ABI::V5)))?
            }
            // The workspace (or a server's private folder) must be there; the temp dir may
            // be missing.
            Err(e) if i == 0 && rules.first_writable_required => {
                bail!("cannot open the workspace {}: {e}", dir.display())
            }
            Err(_) => {}
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

/// No mount changes, so the read-only mounts of toolbox's own files stay: every mount system
/// call fails with EPERM. With `confine_group`, no escape from the process group either:
/// `setsid` and `setpgid` fail with EPERM, so stopping the group really stops everything the
/// command started. (Our own `setsid` runs before the filter is installed.)
fn session_filter(confine_group: bool) -> Result<BpfProgram> {
    let mut rules = BTreeMap::new();
    if confine_group {
        rules.insert(libc::SYS_setsid, vec![]);
        rules.insert(libc::SYS_setpgid, vec![]);
    }
    for call in [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
    ] {
        rules.insert(call, vec![]);
    }
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
        assert!(!session_filter(true).unwrap().is_empty());
        let e = PreparedSandbox::prepare(SandboxMode::Off, false, &[], None).unwrap_err();
        assert!(e.to_string().contains("mode off"));
    }

    #[test]
    fn a_missing_workspace_is_an_error_not_a_silent_gap() {
        let e = PreparedSandbox::prepare(
            SandboxMode::WorkspaceWrite,
            false,
            &[PathBuf::from("/nonexistent/workspace")],
            None,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot open the workspace"),
            "{e:#}"
        );
    }
}
