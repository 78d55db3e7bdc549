//! The workspace jail: [`Workspace`] holds the root by descriptor, and every path a tool
//! touches is parsed here and opened beneath it.
//!
//! - `path.rs`: a model's path parsed without touching the disk ([`Workspace::locate`] into
//!   a [`WsPath`]), session routing (`output/`, `scratchpad/`, `input/`), [`PathError`], and
//!   how paths are shown back (`show`, `display`).
//! - `sessions.rs`: toolbox's own folders under `.toolbox/`, opened without following links,
//!   and the cache of the sessions' folders held open.
//! - `open.rs`: the opens beneath the root (`open_read`, `open_dir`, `write_atomic`,
//!   `open_append`, `create_dir_all`, `parent_of`), the check that no write lands in
//!   `.toolbox/`, and the real paths handed to other programs (`resolve`).
//!
//! The race-free primitives under all of it are [`Dir`](crate::Dir) and `dirfd.rs`, the
//! layer below: they know nothing of the workspace.

mod open;
mod path;
mod sessions;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;
use toolbox_core::SessionId;

pub use path::{validate_session_id, Base, PathError, SessionFolder, WsPath};
use sessions::HeldSession;

/// The folder inside the workspace where toolbox keeps its own data.
pub const TOOLBOX_DIR: &str = ".toolbox";

#[derive(Debug)]
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    /// The folders of the sessions met so far, held open (see [`Workspace::session_base`]).
    sessions: Mutex<HashMap<SessionId, HeldSession>>,
}

/// The jail every tool path goes through.
///
/// The root is held open by descriptor, and every path a model gives is opened relative to
/// it with `openat2(RESOLVE_BENEATH)`: `..` and symbolic links are resolved by the kernel
/// against what is on disk at that instant, and anything that would leave the root is refused.
/// Nothing is checked by name and then opened by name, so swapping a folder for a link in
/// between gains nothing. With a session active, relative paths starting with `output/`,
/// `outputs/`, `scratchpad/`, `scratch/`, `input/` or `inputs/` go to
/// `.toolbox/sessions/<sid>/{output,scratchpad,input}/`, which are opened without following
/// any link at all.
///
/// **Architecture Invariant:** every path a tool touches is parsed by [`Workspace::locate`]
/// and opened beneath the root by descriptor ([`Workspace::open_read`], `open_dir`,
/// `write_atomic`, `open_append`). No provider joins a model's string onto a path and opens
/// that by name; [`Workspace::resolve`] exists only to hand a path to another program.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: Arc<Root>,
    session: Option<SessionId>,
}

impl PartialEq for Workspace {
    fn eq(&self, other: &Self) -> bool {
        self.root.path == other.root.path && self.session == other.session
    }
}

impl Eq for Workspace {}

impl Workspace {
    /// The root must be an existing folder; it is canonicalised and held open.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Self> {
        let given = root.as_ref();
        let path = std::fs::canonicalize(given)
            .map_err(|e| io::Error::new(e.kind(), format!("workspace {}: {e}", given.display())))?;
        let fd = rustix::fs::open(
            &path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!(
                    "workspace {} is not a folder that can be opened: {e}",
                    path.display()
                ),
            )
        })?;
        Ok(Workspace {
            root: Arc::new(Root {
                path,
                fd,
                sessions: Mutex::default(),
            }),
            session: None,
        })
    }

    /// The same workspace with session routing for `sid`, parsed here.
    pub fn with_session(&self, sid: &str) -> Result<Self, PathError> {
        Ok(self.with_session_id(SessionId::parse(sid)?))
    }

    /// The same workspace with session routing for an already parsed id.
    pub fn with_session_id(&self, sid: SessionId) -> Self {
        Workspace {
            root: self.root.clone(),
            session: Some(sid),
        }
    }

    /// The workspace root as a path, for display and for handing to other programs.
    pub fn root(&self) -> &Path {
        &self.root.path
    }

    /// The root folder's descriptor, for opening relative to it.
    pub fn root_fd(&self) -> BorrowedFd<'_> {
        self.root.fd.as_fd()
    }

    /// The session whose folders `output/`, `scratchpad/` and `input/` route to, if any.
    pub fn session(&self) -> Option<&SessionId> {
        self.session.as_ref()
    }

    /// `<root>/.toolbox`, as a path for display. To open or create anything in it, use
    /// [`toolbox_subdir`](Self::toolbox_subdir).
    pub fn toolbox_dir(&self) -> PathBuf {
        self.root.path.join(TOOLBOX_DIR)
    }
}
