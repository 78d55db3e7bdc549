//! toolbox's own folders under `.toolbox/`, each opened without following a link, and the
//! sessions' folders (`.toolbox/sessions/<sid>/{output,scratchpad,input}`) held open after
//! their first use, so a session's call opens one name instead of walking four.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use rustix::fs::OFlags;
use toolbox_core::SessionId;

use super::{SessionFolder, Workspace, TOOLBOX_DIR};
use crate::dirfd::{self, Dir};

/// A session's `.toolbox/sessions/<sid>`, and those of its folders opened so far.
#[derive(Debug)]
pub(super) struct HeldSession {
    base: Arc<OwnedFd>,
    folders: [Option<Arc<OwnedFd>>; 3],
    opened: std::time::Instant,
}

/// How many session folders a workspace holds open; past that, the set starts over.
const MAX_OPEN_SESSIONS: usize = 256;
/// Folders held this long are let go when another session opens its own (and opened again
/// on their session's next use): an idle server does not hold them for good.
const HELD_SESSION_EXPIRY: std::time::Duration = std::time::Duration::from_secs(10 * 60);

impl Workspace {
    /// Opens (creating as needed) `.toolbox/<parts...>` without following any symbolic link:
    /// each part must be a real folder. A planted link is an error naming it; nothing is
    /// created through it. Each part must be a plain name.
    pub fn toolbox_subdir(&self, parts: &[&OsStr]) -> io::Result<Dir> {
        self.internal_dir(parts, true)
    }

    /// Creates the folder of a new session, `.toolbox/sessions/<sid>`, only if it does not
    /// exist yet: `Ok(true)` when this call made it, `Ok(false)` when it was there. One
    /// `mkdir`, so of two processes choosing the same id at once exactly one gets it.
    pub fn claim_session(&self, sid: &SessionId) -> io::Result<bool> {
        let sessions = self.toolbox_subdir(&[OsStr::new("sessions")])?;
        match rustix::fs::mkdirat(
            sessions.as_fd(),
            sid.as_str(),
            rustix::fs::Mode::from_raw_mode(0o755),
        ) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::EXIST) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the existing `.toolbox/<parts...>` without following any link and without
    /// creating anything: for readers (a missing folder is `NotFound`).
    pub fn existing_toolbox_subdir(&self, parts: &[&OsStr]) -> io::Result<Dir> {
        self.internal_dir(parts, false)
    }

    fn internal_dir(&self, parts: &[&OsStr], create: bool) -> io::Result<Dir> {
        let mut names: Vec<&OsStr> = Vec::with_capacity(parts.len() + 1);
        names.push(OsStr::new(TOOLBOX_DIR));
        names.extend_from_slice(parts);
        let mut rel = PathBuf::new();
        for name in &names {
            let bytes = name.as_bytes();
            if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{name:?} is not a plain folder name"),
                ));
            }
            rel.push(name);
        }
        // Usually every folder exists already (a session's scratchpad on its second call):
        // one system call instead of a mkdir and an open per name.
        if let Ok(fd) = dirfd::open_dir_no_links(self.root.fd.as_fd(), &rel) {
            return Ok(Dir::from_fd(fd));
        }
        let mut current: Option<OwnedFd> = None;
        let mut shown = PathBuf::new();
        for name in names {
            shown.push(name);
            let parent = match &current {
                Some(fd) => fd.as_fd(),
                None => self.root.fd.as_fd(),
            };
            let next = if create {
                dirfd::ensure_child_dir(parent, name)
            } else {
                dirfd::open_child(parent, name, OFlags::DIRECTORY | OFlags::RDONLY)
            }
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", shown.display())))?;
            current = Some(next);
        }
        Ok(Dir::from_fd(current.expect("at least .toolbox")))
    }

    /// `<root>/.toolbox/sessions/<sid>/<kind>`, as a path; without a session, `<root>/<kind>`.
    pub fn session_dir(&self, kind: &str) -> PathBuf {
        match &self.session {
            Some(sid) => self
                .toolbox_dir()
                .join("sessions")
                .join(sid.as_str())
                .join(kind),
            None => self.root.path.join(kind),
        }
    }

    /// Opens a session folder (creating it when asked), never through a symbolic link.
    pub(super) fn session_folder(&self, kind: SessionFolder, create: bool) -> io::Result<Dir> {
        let sid = self
            .session
            .as_ref()
            .expect("session folders are only routed with a session");
        let name = OsStr::new(kind.as_str());
        let mut fresh = false;
        loop {
            let base = self.session_base(sid, create, fresh)?;
            // Opened first, made only when missing: a mkdirat that finds the folder there
            // still locks the parent, and cost more than the open. (ensure_child_dir also
            // explains a planted link or file.)
            let opened =
                match dirfd::open_child(base.as_fd(), name, OFlags::DIRECTORY | OFlags::RDONLY) {
                    Err(_) if create => dirfd::ensure_child_dir(base.as_fd(), name),
                    opened => opened,
                };
            match opened {
                Ok(fd) => return Ok(Dir::from_fd(fd)),
                // The session folder held open may have been deleted since: look again once.
                Err(e) if e.kind() == io::ErrorKind::NotFound && !fresh => fresh = true,
                Err(e) => {
                    let shown = Path::new(TOOLBOX_DIR)
                        .join("sessions")
                        .join(sid.as_str())
                        .join(name);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{}: {e}", shown.display()),
                    ));
                }
            }
        }
    }

    /// `.toolbox/sessions/<sid>`, opened (never through a link) on the session's first use
    /// and held open after: a session folder is then one lookup in it rather than a walk of
    /// four names from the root, on every call of the session. `fresh` drops what is held
    /// and walks again (the folder was deleted). A session folder renamed elsewhere in the
    /// workspace is still the session's while it is held (see [`HELD_SESSION_EXPIRY`]), like a
    /// working directory.
    fn session_base(&self, sid: &SessionId, create: bool, fresh: bool) -> io::Result<Arc<OwnedFd>> {
        let mut sessions = self.held_sessions();
        if !fresh {
            if let Some(held) = sessions.get(sid) {
                return Ok(held.base.clone());
            }
        }
        let dir = self.internal_dir(&[OsStr::new("sessions"), OsStr::new(sid.as_str())], create)?;
        let base = Arc::new(dir.into_fd());
        if sessions.len() >= MAX_OPEN_SESSIONS {
            sessions.clear();
        }
        let now = std::time::Instant::now();
        sessions.retain(|_, held| now.duration_since(held.opened) < HELD_SESSION_EXPIRY);
        let held = HeldSession {
            base: base.clone(),
            folders: Default::default(),
            opened: now,
        };
        sessions.insert(sid.clone(), held);
        Ok(base)
    }

    fn held_sessions(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, HeldSession>> {
        self.root
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A session folder, created if missing (never through a link), opened on first use and
    /// held open after. What is held is checked to be still linked (one `fstat`): a folder
    /// deleted meanwhile is made again. This spares each call of a session the open and
    /// close of its working folder, which cost more than the call's other system calls.
    fn held_folder(&self, sid: &SessionId, kind: SessionFolder) -> io::Result<Arc<OwnedFd>> {
        let slot = SessionFolder::ALL
            .iter()
            .position(|k| *k == kind)
            .expect("every kind is in ALL");
        let held = self
            .held_sessions()
            .get(sid)
            .and_then(|held| held.folders[slot].clone());
        if let Some(fd) = held {
            if rustix::fs::fstat(&fd).is_ok_and(|st| st.st_nlink > 0) {
                return Ok(fd);
            }
        }
        let fd = Arc::new(self.session_folder(kind, true)?.into_fd());
        if let Some(held) = self.held_sessions().get_mut(sid) {
            held.folders[slot] = Some(fd.clone());
        }
        Ok(fd)
    }

    /// The folder `parts` names inside the session folder `kind` (`input/a/b` for
    /// `[a, b]`), each name opened without following any link, and created when `create` is
    /// set: for files a front end hands over from outside (an upload). Each part must be a
    /// plain name (not empty, `.` or `..`, without `/` or NUL); the caller parses it.
    ///
    /// # Panics
    ///
    /// Without a session.
    pub fn session_subdir(
        &self,
        kind: SessionFolder,
        parts: &[&OsStr],
        create: bool,
    ) -> io::Result<Dir> {
        let mut dir = self.session_folder(kind, create)?.into_fd();
        for part in parts {
            let plain = !part.is_empty()
                && *part != OsStr::new(".")
                && *part != OsStr::new("..")
                && !part.as_bytes().contains(&b'/')
                && !part.as_bytes().contains(&0);
            if !plain {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{:?} is not a plain folder name", part.to_string_lossy()),
                ));
            }
            dir = if create {
                dirfd::ensure_child_dir(dir.as_fd(), part)?
            } else {
                dirfd::open_child(dir.as_fd(), part, OFlags::DIRECTORY | OFlags::RDONLY)?
            };
        }
        Ok(Dir::from_fd(dir))
    }

    /// The session scratchpad, created if missing (never through a planted link): the default
    /// working directory of code. Without a session, `<root>/scratchpad`.
    pub fn scratchpad(&self) -> io::Result<PathBuf> {
        self.ensure_folder(SessionFolder::Scratchpad)
    }

    /// The session output folder, created if missing (never through a planted link).
    pub fn output_dir(&self) -> io::Result<PathBuf> {
        self.ensure_folder(SessionFolder::Output)
    }

    fn ensure_folder(&self, kind: SessionFolder) -> io::Result<PathBuf> {
        self.hold_folder(kind)?;
        Ok(self.session_dir(kind.as_str()))
    }

    /// The session folder `kind`, created if missing (never through a planted link) and held
    /// open: code that must work in it (`fchdir`) then uses the very folder that was checked,
    /// not whatever its path names a moment later. No path is built: a caller that needs one
    /// (to tell it once) asks [`Self::session_dir`]. Without a session, `<root>/<kind>`.
    pub fn hold_folder(&self, kind: SessionFolder) -> io::Result<Arc<OwnedFd>> {
        match &self.session {
            Some(sid) => self.held_folder(sid, kind),
            None => Ok(Arc::new(dirfd::ensure_child_dir(
                self.root_fd(),
                OsStr::new(kind.as_str()),
            )?)),
        }
    }
}
