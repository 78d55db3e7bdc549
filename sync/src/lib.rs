//! toolbox-sync is the state store of a toolbox session: what a session server keeps off its
//! machine so that a lost machine means a session resumed elsewhere, not a session lost.
//!
//! - [`StateStore`]: a local folder (`file:///…`) or S3 (`s3://bucket/prefix`, the usual AWS
//!   environment) through the `object_store` crate.
//! - [`SessionStore`]: one session's view of it, held by the session server that claimed an
//!   epoch.
//!   [`SessionStore::claim`] claims epoch N by a create-if-absent write; [`SessionStore::sync`]
//!   uploads what changed as content-addressed blobs and a manifest, then moves the session's
//!   HEAD by a compare-and-swap; [`SessionStore::restore_into`] pulls the newest manifest into
//!   an empty folder and verifies every checksum first.
//!
//! The layout under the store's prefix:
//!
//! ```text
//! blobs/<sha256[..2]>/<sha256>                      file contents, shared by every session
//! sessions/<sid>/epochs/<epoch:020>                 one per claim, created if absent
//! sessions/<sid>/manifests/<epoch:020>-<n:020>.json what one sync saw
//! sessions/<sid>/heads/<n:020>                      the HEAD chain: {epoch, manifest, sha256}
//! ```
//!
//! **HEAD by compare-and-swap.** The HEAD pointer is the newest entry of the chain `heads/`.
//! A session server that read head `n` moves HEAD by creating `heads/<n+1>` if absent: the
//! write succeeds only when nobody wrote after `n`, which is a compare-and-swap built on the
//! one conditional write both backends have. `object_store`'s `LocalFileSystem` refuses
//! `PutMode::Update` (update-if-match) and implements `PutMode::Create` with a hard link,
//! which is atomic; S3 has `If-None-Match: *`. A session server that claims epoch N first
//! writes a head of its own (the fence), so a session server of an older epoch can never
//! again create the next head: its late uploads stay unreferenced, and on its failed write it
//! reads the newer epoch and stops ([`SyncError::Superseded`]).
//!
//! See docs/scale-out.md.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod manifest;
mod restore;
mod snapshot;
mod store;

pub use manifest::{FileEntry, Manifest};
pub use restore::RestoreReport;
pub use snapshot::{StoreRules, DEFAULT_EXCLUDES};
pub use store::{Head, SessionStore, StateStore, SyncReport};

/// Which epoch a session server claims: a number the placer counted, or the next one free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epoch {
    /// Exactly this epoch (1 or more); refused when taken or older than one claimed.
    Exactly(u64),
    /// The lowest epoch above every epoch claimed so far (`--epoch next`).
    Next,
}

impl std::str::FromStr for Epoch {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        if raw == "next" {
            return Ok(Epoch::Next);
        }
        match raw.parse::<u64>() {
            Ok(n) if n >= 1 => Ok(Epoch::Exactly(n)),
            _ => Err(format!(
                "{raw:?} is not an epoch: give a whole number from 1, or `next` for the \
                 lowest epoch above every one claimed so far"
            )),
        }
    }
}

/// What the session server loses when it moves: state that lives only in its processes.
pub const LOST_ON_MOVE: [&str; 3] = ["python", "background_jobs", "pending_approvals"];

/// Why a store operation failed, in the cases a session server acts on.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Another session server claimed this epoch first.
    #[error(
        "session {session}: epoch {epoch} was claimed already by another session server; start \
         with a higher --epoch"
    )]
    EpochTaken {
        /// The session.
        session: String,
        /// The epoch asked for.
        epoch: u64,
    },
    /// A newer epoch has claimed the session: this session server must stop.
    #[error(
        "session {session}: epoch {newer} has claimed this session, so this session server \
         (epoch {epoch}) is superseded"
    )]
    Superseded {
        /// The session.
        session: String,
        /// This session server's epoch.
        epoch: u64,
        /// The newer epoch.
        newer: u64,
    },
    /// The stored state is damaged: a restore refused, or a manifest that does not parse.
    #[error("the stored state of session {session} cannot be restored: {why}")]
    Corrupt {
        /// The session.
        session: String,
        /// What is wrong (the path and the checksum that did not match, say).
        why: String,
    },
    /// Anything else: the store cannot be reached, a file cannot be read.
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

impl From<object_store::Error> for SyncError {
    fn from(e: object_store::Error) -> Self {
        SyncError::Other(anyhow::Error::new(e))
    }
}

/// The SHA-256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// Lowercase hex of `bytes` (a finished digest).
pub(crate) fn hex_of(bytes: &[u8]) -> String {
    hex(bytes)
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests;
