//! A connection to a kernel (with the kernel's process when toolbox started it), and the
//! slot a call finds it in: the types the rest of the backend shares.

use std::path::PathBuf;

use super::process::Process;
use super::spec::InterruptMode;
use super::wire::{Channels, ConnectionInfo, Session};

/// One connection to a kernel, and the kernel's process when toolbox started it.
pub(super) struct Kernel {
    pub(super) channels: Channels,
    pub(super) session: Session,
    pub(super) info: ConnectionInfo,
    pub(super) process: Option<Process>,
    pub(super) interrupt: InterruptMode,
    /// Whether toolbox's helper is installed (an IPython kernel).
    pub(super) helper: bool,
    /// The kernel in words, for messages.
    pub(super) name: String,
    pub(super) hb_seq: u64,
    pub(super) bad_signatures: u64,
    pub(super) executable: Option<PathBuf>,
    /// The kernel's own session id (in the header of everything it sends); a new one means
    /// the kernel was restarted behind toolbox's back (an attached kernel's owner did).
    pub(super) kernel_session: String,
    /// Set when a reply came from a kernel session other than `kernel_session`.
    pub(super) restarted_as: Option<String>,
}

/// What the jupyter backend keeps per slot: its kernel, and what to tell its next call.
#[derive(Default)]
pub(crate) struct Slot {
    pub(super) kernel: Option<Kernel>,
    /// Said at the start of the next result (e.g. the kernel was restarted).
    pub(super) note: Option<String>,
    /// When the slot's last call ended.
    pub(super) last_used: Option<std::time::Instant>,
}
