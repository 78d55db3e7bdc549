use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::OFlags;

use crate::dirfd::{self, Dir};
use toolbox_core::{InvalidSessionId, SessionId};

/// The folder inside the workspace where toolbox keeps its own data.
pub const TOOLBOX_DIR: &str = ".toolbox";

/// Why a path was refused. The message names the path the model gave.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("path is empty")]
    Empty,
    /// The path contains a NUL byte.
    #[error("path contains a NUL byte")]
    Nul,
    /// An absolute path outside the root, or a relative one that climbs out of it.
    #[error("path {0:?} is outside the workspace")]
    Outside(String),
    /// The kernel found the path leaving the root (through `..` or a link).
    #[error("path {0:?} leads outside the workspace (through '..' or a symbolic link)")]
    LeadsOutside(String),
    /// Too many links, or a link where none may be (`.toolbox/`'s folders).
    #[error("path {0:?} goes through too many symbolic links (or a link where none may be)")]
    Loop(String),
    /// The session id is not valid.
    #[error("{0}")]
    InvalidSession(#[from] InvalidSessionId),
    /// A part of the path that must be a folder is a file.
    #[error("{}", not_a_directory_message(path, file.as_deref()))]
    NotADirectory {
        /// The path as the model gave it.
        path: String,
        /// The part of the path that is a file, when it could be found.
        file: Option<String>,
    },
    /// The path (after links are followed) lies in toolbox's own folder `.toolbox/`, which
    /// tools may not write, outside this session's own folders.
    #[error(
        "path {0:?} is inside toolbox's own folder .toolbox/, which tools may not write: it \
         holds the session's records, plan and reviews. A tool writes in the workspace, or in \
         this session's own folders output/, scratchpad/ and input/ (name them so: \
         \"output/report.md\")"
    )]
    Protected(String),
    /// The path ends in `.`, `..` or `/`, where a file name is needed.
    #[error("path {0:?} does not name a file (it ends in '.', '..' or '/')")]
    NotAFileName(String),
    /// Any other I/O failure on the path (the error is kept).
    #[error("path {path:?}: {source}")]
    Io {
        /// The path as the model gave it.
        path: String,
        /// What the kernel said.
        source: io::Error,
    },
}

impl PathError {
    /// The error for an I/O failure on `path`, with the errno the kernel gave mapped to words.
    fn from_io(path: &str, e: io::Error) -> Self {
        match e.raw_os_error() {
            Some(code) if code == rustix::io::Errno::XDEV.raw_os_error() => {
                PathError::LeadsOutside(path.to_string())
            }
            Some(code) if code == rustix::io::Errno::LOOP.raw_os_error() => {
                PathError::Loop(path.to_string())
            }
            Some(code) if code == rustix::io::Errno::NOTDIR.raw_os_error() => {
                PathError::NotADirectory {
                    path: path.to_string(),
                    file: None,
                }
            }
            _ => PathError::Io {
                path: path.to_string(),
                source: e,
            },
        }
    }

    /// Whether the path (or a folder on the way) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, PathError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

fn not_a_directory_message(path: &str, file: Option<&str>) -> String {
    match file {
        Some(file) => {
            format!("path {path:?} goes through {file:?}, which is a file, not a directory")
        }
        None => format!("path {path:?} goes through something that is not a directory"),
    }
}

/// Checks that a session id is safe to use as one folder name.
pub fn validate_session_id(sid: &str) -> Result<(), PathError> {
    SessionId::parse(sid).map(|_| ()).map_err(Into::into)
}

/// A session folder a model names by a short logical prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFolder {
    /// `output/` (alias `outputs/`): what the session produces.
    Output,
    /// `scratchpad/` (alias `scratch/`): the session's working files.
    Scratchpad,
    /// `input/` (alias `inputs/`): what was given to the session.
    Input,
}

impl SessionFolder {
    /// The folder's name under `.toolbox/sessions/<sid>/`.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionFolder::Output => "output",
            SessionFolder::Scratchpad => "scratchpad",
            SessionFolder::Input => "input",
        }
    }

    fn from_prefix(name: &[u8]) -> Option<Self> {
        match name {
            b"output" | b"outputs" => Some(SessionFolder::Output),
            b"scratchpad" | b"scratch" => Some(SessionFolder::Scratchpad),
            b"input" | b"inputs" => Some(SessionFolder::Input),
            _ => None,
        }
    }

    const ALL: [SessionFolder; 3] = [
        SessionFolder::Output,
        SessionFolder::Scratchpad,
        SessionFolder::Input,
    ];
}

/// Where a [`WsPath`] starts: the workspace root, or one of the session's folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The workspace root.
    Root,
    /// One of the session's folders.
    Session(SessionFolder),
}

/// A path a model gave, parsed (not yet opened): a base and the rest, kept as written so the
/// kernel resolves every `.` and `..` against what is really on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsPath {
    base: Base,
    /// Relative to the base, as written (after the routing prefix); empty for the base itself.
    rel: PathBuf,
    /// The path as the model gave it, for messages.
    given: String,
}

impl WsPath {
    /// Where the path starts.
    pub fn base(&self) -> Base {
        self.base
    }

    /// The part after the base, as written.
    pub fn rel(&self) -> &Path {
        &self.rel
    }

    /// The path as the model gave it.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// Whether this is the base folder itself.
    pub fn is_base(&self) -> bool {
        segments(self.rel.as_os_str().as_bytes()).all(|s| s == b".")
    }

    /// The same base with `name` appended (a name found in a folder listing).
    pub fn join(&self, name: &OsStr) -> WsPath {
        let mut rel = self.rel.clone();
        rel.push(name);
        WsPath {
            base: self.base,
            given: format!(
                "{}/{}",
                self.given.trim_end_matches('/'),
                name.to_string_lossy()
            ),
            rel,
        }
    }

    /// The parent folder and the final name; refused when the last part is `.`, `..` or empty.
    fn split_last(&self) -> Result<(PathBuf, OsString), PathError> {
        let bytes = self.rel.as_os_str().as_bytes();
        let trimmed = bytes;
        let (parent, name) = match trimmed.iter().rposition(|&b| b == b'/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => (&trimmed[..0], trimmed),
        };
        if name.is_empty() || name == b"." || name == b".." {
            return Err(PathError::NotAFileName(self.given.clone()));
        }
        Ok((
            PathBuf::from(OsStr::from_bytes(parent)),
            OsStr::from_bytes(name).to_os_string(),
        ))
    }
}

/// The non-empty segments of a `/`-separated path, `.` and `..` included.
fn segments(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|&b| b == b'/').filter(|s| !s.is_empty())
}

#[derive(Debug)]
struct Root {
    path: PathBuf,
    fd: OwnedFd,
    /// The folders of the sessions met so far, held open (see [`Workspace::session_base`]).
    sessions: Mutex<HashMap<SessionId, HeldSession>>,
}

/// A session's `.toolbox/sessions/<sid>`, and those of its folders opened so far.
#[derive(Debug)]
struct HeldSession {
    base: Arc<OwnedFd>,
    folders: [Option<Arc<OwnedFd>>; 3],
    opened: std::time::Instant,
}

/// How many session folders a workspace holds open; past that, the set starts over.
const MAX_OPEN_SESSIONS: usize = 256;
/// Folders held this long are let go when another session opens its own (and opened again
/// on their session's next use): an idle server does not hold them for good.
const HELD_SESSION_EXPIRY: std::time::Duration = std::time::Duration::from_secs(10 * 60);

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

    /// Opens the regular file `name` directly in the root for reading, never through a link
    /// (a workspace's own `toolbox.toml`, say).
    pub fn open_root_file(&self, name: &str) -> io::Result<File> {
        let fd = dirfd::open_child(
            self.root_fd(),
            OsStr::new(name),
            OFlags::RDONLY | OFlags::NONBLOCK,
        )?;
        dirfd::regular_file(fd, OsStr::new(name))
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
    fn session_folder(&self, kind: SessionFolder, create: bool) -> io::Result<Dir> {
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

    /// Parses a path a model gave, without touching the disk: empty, NUL, absolute paths
    /// outside the root and `..` that climbs above the base are refused here; everything else
    /// is left for the kernel to resolve when the path is opened.
    pub fn locate(&self, path: &str) -> Result<WsPath, PathError> {
        if path.is_empty() {
            return Err(PathError::Empty);
        }
        if path.contains('\0') {
            return Err(PathError::Nul);
        }
        let bytes = path.as_bytes();
        let (base, rest): (Base, &[u8]) = if bytes[0] == b'/' {
            let root = self.root.path.as_os_str().as_bytes();
            // The literal root, then '/' or the end: no '.', '..' or '//' tricks before it.
            let rest = bytes
                .strip_prefix(root)
                .filter(|r| r.is_empty() || r[0] == b'/' || root == b"/")
                .ok_or_else(|| PathError::Outside(path.to_string()))?;
            (Base::Root, trim_leading_slashes(rest))
        } else {
            self.route(bytes)
        };
        let mut depth: i64 = 0;
        for seg in segments(rest) {
            match seg {
                b"." => {}
                b".." => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(PathError::Outside(path.to_string()));
                    }
                }
                _ => depth += 1,
            }
        }
        Ok(WsPath {
            base,
            rel: PathBuf::from(OsStr::from_bytes(rest)),
            given: path.to_string(),
        })
    }

    /// Splits off a session prefix (`output/…`) when a session is active.
    fn route<'a>(&self, bytes: &'a [u8]) -> (Base, &'a [u8]) {
        if self.session.is_none() {
            return (Base::Root, bytes);
        }
        // Leading "./" segments do not change where the path points.
        let mut rest = bytes;
        while let Some(r) = rest.strip_prefix(b"./") {
            rest = trim_leading_slashes(r);
        }
        let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
        match SessionFolder::from_prefix(&rest[..end]) {
            Some(kind) => (Base::Session(kind), trim_leading_slashes(&rest[end..])),
            None => (Base::Root, bytes),
        }
    }

    /// The descriptor a path's base stands for.
    fn base_dir(&self, p: &WsPath, create: bool) -> Result<BaseFd<'_>, PathError> {
        match p.base {
            Base::Root => Ok(BaseFd::Root(self.root_fd())),
            Base::Session(kind) => self
                .session_folder(kind, create)
                .map(BaseFd::Owned)
                .map_err(|e| PathError::from_io(&p.given, e)),
        }
    }

    /// Names the first part of `p` that exists but is not a folder, for a clearer error.
    fn name_non_folder(&self, p: &WsPath, e: PathError) -> PathError {
        let PathError::NotADirectory { path, file: None } = e else {
            return e;
        };
        let segs: Vec<&[u8]> = segments(p.rel.as_os_str().as_bytes()).collect();
        let file = self.base_dir(p, false).ok().and_then(|base| {
            (1..segs.len()).find_map(|i| {
                let prefix = join_segments(&segs[..i]);
                let fd = dirfd::open_beneath(base.fd(), &prefix, OFlags::PATH).ok()?;
                let st = rustix::fs::fstat(&fd).ok()?;
                (!rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir()).then(|| {
                    self.show(&WsPath {
                        base: p.base,
                        rel: prefix,
                        given: String::new(),
                    })
                })
            })
        });
        PathError::NotADirectory { path, file }
    }

    /// Opens an existing regular file for reading. Links are followed only while they stay
    /// inside; FIFOs, devices and folders are refused without blocking.
    pub fn open_read(&self, p: &WsPath) -> Result<File, PathError> {
        self.open_read_sized(p).map(|(file, _)| file)
    }

    /// [`Self::open_read`], with the file's size when it was opened.
    pub fn open_read_sized(&self, p: &WsPath) -> Result<(File, u64), PathError> {
        let base = self.base_dir(p, false)?;
        dirfd::open_beneath(base.fd(), &p.rel, OFlags::RDONLY | OFlags::NONBLOCK)
            .and_then(|fd| dirfd::regular_file_sized(fd, OsStr::new(&p.given)))
            .map_err(|e| self.name_non_folder(p, PathError::from_io(&p.given, e)))
    }

    /// Opens an existing folder.
    pub fn open_dir(&self, p: &WsPath) -> Result<Dir, PathError> {
        let base = self.base_dir(p, false)?;
        dirfd::open_beneath(base.fd(), &p.rel, OFlags::DIRECTORY | OFlags::RDONLY)
            .map(Dir::from_fd)
            .map_err(|e| PathError::from_io(&p.given, e))
    }

    /// Metadata of what the path names (links inside followed).
    pub fn metadata(&self, p: &WsPath) -> Result<std::fs::Metadata, PathError> {
        let base = self.base_dir(p, false)?;
        dirfd::open_beneath(base.fd(), &p.rel, OFlags::PATH)
            .and_then(|fd| File::from(fd).metadata())
            .map_err(|e| PathError::from_io(&p.given, e))
    }

    /// Creates the folder and every missing parent, never through a link that leads out.
    pub fn create_dir_all(&self, p: &WsPath) -> Result<Dir, PathError> {
        let base = self.base_dir(p, true)?;
        let err = |e| PathError::from_io(&p.given, e);
        match dirfd::open_beneath(base.fd(), &p.rel, OFlags::DIRECTORY | OFlags::RDONLY) {
            Ok(fd) => {
                self.check_writable(p, fd.as_fd())?;
                return Ok(Dir::from_fd(fd));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        // Find the deepest existing prefix, then create the rest one name at a time inside
        // the folder just opened, so a swap in between cannot redirect the creation.
        let segs: Vec<&[u8]> = segments(p.rel.as_os_str().as_bytes()).collect();
        let mut have = 0;
        let mut dir: OwnedFd =
            dirfd::open_beneath(base.fd(), Path::new(""), OFlags::DIRECTORY).map_err(err)?;
        for i in (0..segs.len()).rev() {
            let prefix = join_segments(&segs[..i]);
            match dirfd::open_beneath(base.fd(), &prefix, OFlags::DIRECTORY | OFlags::RDONLY) {
                Ok(fd) => {
                    dir = fd;
                    have = i;
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(err(e)),
            }
        }
        // Nothing is created inside toolbox's own folder: the folder the new ones go in is
        // checked first, and `.toolbox` itself is never created by a tool.
        self.check_writable(p, dir.as_fd())?;
        for seg in &segs[have..] {
            if self.is_root_toolbox_name(p, dir.as_fd(), seg)? {
                return Err(PathError::Protected(p.given.clone()));
            }
            if *seg == b"." || *seg == b".." {
                // `missing/..` would name something that does not exist yet.
                return Err(PathError::Io {
                    path: p.given.clone(),
                    source: io::Error::new(io::ErrorKind::NotFound, "no such folder"),
                });
            }
            dir = dirfd::ensure_child_dir(dir.as_fd(), OsStr::from_bytes(seg)).map_err(err)?;
        }
        Ok(Dir::from_fd(dir))
    }

    /// The folder a file path lives in (created when `create` is set) and the file's name.
    pub fn parent_of(&self, p: &WsPath, create: bool) -> Result<(Dir, OsString), PathError> {
        let (parent, name) = p.split_last()?;
        let parent = WsPath {
            base: p.base,
            rel: parent,
            given: p.given.clone(),
        };
        let dir = if create {
            self.create_dir_all(&parent)
        } else {
            self.open_dir(&parent)
        }
        .map_err(|e| self.name_non_folder(p, e))?;
        // Every write a tool makes takes its folder from here: the folder it got is checked,
        // after the kernel followed every link, so no spelling reaches `.toolbox/`.
        self.check_writable(p, dir.as_fd())?;
        if self.is_root_toolbox_name(p, dir.as_fd(), name.as_bytes())? {
            return Err(PathError::Protected(p.given.clone()));
        }
        Ok((dir, name))
    }

    /// Whether `name` in `dir` is the root's `.toolbox` (a tool may not create it, as a file
    /// or a folder, nor replace it).
    fn is_root_toolbox_name(
        &self,
        p: &WsPath,
        dir: BorrowedFd<'_>,
        name: &[u8],
    ) -> Result<bool, PathError> {
        if name != TOOLBOX_DIR.as_bytes() || p.base != Base::Root {
            return Ok(false);
        }
        let here = rustix::fs::fstat(dir).map_err(|e| PathError::from_io(&p.given, e.into()))?;
        let root = rustix::fs::fstat(self.root_fd())
            .map_err(|e| PathError::from_io(&p.given, e.into()))?;
        Ok(same_file(&here, &root))
    }

    /// Refuses a write into `dir` when `dir` lies in `.toolbox/` anywhere but this session's
    /// own `output/`, `scratchpad/` or `input/` (or below them). The folder is walked up by
    /// descriptor (`..` of what the kernel opened, compared by device and inode), so links,
    /// `..` and bind-free renames of the spelling all end at the same answer. A path based in
    /// a session folder is held beneath it by the kernel and needs no walk.
    fn check_writable(&self, p: &WsPath, dir: BorrowedFd<'_>) -> Result<(), PathError> {
        if p.base != Base::Root {
            return Ok(());
        }
        let err = |e: rustix::io::Errno| PathError::from_io(&p.given, e.into());
        let root = rustix::fs::fstat(self.root_fd()).map_err(err)?;
        let toolbox = match rustix::fs::statat(
            self.root_fd(),
            TOOLBOX_DIR,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            // No `.toolbox` yet: nothing can be inside it.
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(err(e)),
        };
        // The chain of folders from `dir` up to the root (or to `/`, for a folder that is
        // not beneath the root at all, which the open would have refused).
        let mut chain: Vec<(OwnedFd, rustix::fs::Stat)> = Vec::new();
        let mut current = rustix::io::fcntl_dupfd_cloexec(dir, 0).map_err(err)?;
        const MAX_DEPTH: usize = 4096;
        for _ in 0..MAX_DEPTH {
            let st = rustix::fs::fstat(&current).map_err(err)?;
            if same_file(&st, &root) {
                break;
            }
            let up = rustix::fs::openat(
                &current,
                "..",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(err)?;
            let up_st = rustix::fs::fstat(&up).map_err(err)?;
            chain.push((current, st));
            if same_file(&up_st, &st) {
                // `/`: the folder is not beneath the root.
                return Err(PathError::LeadsOutside(p.given.clone()));
            }
            current = up;
        }
        // chain[last] is the child of the root on the way; is it `.toolbox`?
        let Some(top) = chain.len().checked_sub(1) else {
            return Ok(()); // the root itself
        };
        if !same_file(&chain[top].1, &toolbox) {
            return Ok(());
        }
        // Inside `.toolbox/`: allowed only below sessions/<this session>/<one of its folders>.
        let allowed = (|| {
            let sid = self.session.as_ref()?;
            let sessions = chain.get(top.checked_sub(1)?)?;
            let session = chain.get(top.checked_sub(2)?)?;
            let folder = chain.get(top.checked_sub(3)?)?;
            let named =
                |parent: &(OwnedFd, rustix::fs::Stat), name: &str, child: &rustix::fs::Stat| {
                    rustix::fs::statat(&parent.0, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|st| same_file(&st, child))
                };
            let ok = named(&chain[top], "sessions", &sessions.1)
                && named(sessions, sid.as_str(), &session.1)
                && SessionFolder::ALL
                    .iter()
                    .any(|kind| named(session, kind.as_str(), &folder.1));
            ok.then_some(())
        })();
        match allowed {
            Some(()) => Ok(()),
            None => Err(PathError::Protected(p.given.clone())),
        }
    }

    /// Replaces (or creates) the file atomically: the bytes go to a temporary file in the same
    /// folder, opened there by descriptor, which is then renamed over the name. A link at the
    /// name is refused, never written through; a hard-linked file is replaced by a new file,
    /// so its other names keep their content. The file's permission bits are kept.
    pub fn write_atomic(
        &self,
        p: &WsPath,
        bytes: &[u8],
        create_dirs: bool,
    ) -> Result<(), PathError> {
        let (dir, name) = self.parent_of(p, create_dirs)?;
        replace_in(&dir, &name, |f| f.write_all(bytes)).map_err(|e| PathError::from_io(&p.given, e))
    }

    /// Opens a file for appending (creating it), never through a link, and refuses a file
    /// with more than one hard link.
    pub fn open_append(&self, p: &WsPath, create_dirs: bool) -> Result<File, PathError> {
        let (dir, name) = self.parent_of(p, create_dirs)?;
        dirfd::open_append_child(dir.as_fd(), &name).map_err(|e| PathError::from_io(&p.given, e))
    }

    /// The real absolute path of what `p` names, or, when it does not exist, of its deepest
    /// existing folder followed by the missing names. Resolved by the kernel, beneath the
    /// root. For handing a path to another program (a working directory, a script); for
    /// reading and writing, open through the workspace instead.
    pub fn real_path(&self, p: &WsPath) -> Result<PathBuf, PathError> {
        let base = self.base_dir(p, false)?;
        let err = |e| PathError::from_io(&p.given, e);
        let segs: Vec<&[u8]> = segments(p.rel.as_os_str().as_bytes()).collect();
        for i in (0..=segs.len()).rev() {
            let prefix = join_segments(&segs[..i]);
            match dirfd::open_beneath(base.fd(), &prefix, OFlags::PATH) {
                Ok(fd) => {
                    let mut real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                        .map_err(err)?;
                    for seg in &segs[i..] {
                        if *seg == b"." || *seg == b".." {
                            return Err(err(io::Error::new(
                                io::ErrorKind::NotFound,
                                "no such folder",
                            )));
                        }
                        real.push(OsStr::from_bytes(seg));
                    }
                    if !real.starts_with(&self.root.path) {
                        return Err(PathError::LeadsOutside(p.given.clone()));
                    }
                    return Ok(real);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound && i > 0 => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(err(io::Error::new(io::ErrorKind::NotFound, "not found")))
    }

    /// Resolves a path a model gave to the real absolute path inside the workspace (see
    /// [`real_path`](Self::real_path)). The path need not exist.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathError> {
        let p = self.locate(path)?;
        if let Base::Session(kind) = p.base {
            // A session folder that is not there yet is created, never through a link.
            self.session_folder(kind, true)
                .map_err(|e| PathError::from_io(path, e))?;
        }
        self.real_path(&p)
    }

    /// Like [`resolve`](Self::resolve) but the path must exist.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, PathError> {
        let p = self.locate(path)?;
        self.metadata(&p)?;
        self.real_path(&p)
    }

    /// How to show a parsed path to the model: relative to the root with `/` separators, the
    /// session's folders by their short names, `.` for the root itself. Lexical: `a/../b` is
    /// shown as `b`.
    pub fn show(&self, p: &WsPath) -> String {
        let mut parts: Vec<&[u8]> = Vec::new();
        for seg in segments(p.rel.as_os_str().as_bytes()) {
            match seg {
                b"." => {}
                b".." => {
                    parts.pop();
                }
                s => parts.push(s),
            }
        }
        let rest = parts
            .iter()
            .map(|s| String::from_utf8_lossy(s))
            .collect::<Vec<_>>()
            .join("/");
        match p.base {
            Base::Root if rest.is_empty() => ".".to_string(),
            Base::Root => rest,
            Base::Session(kind) if rest.is_empty() => kind.as_str().to_string(),
            Base::Session(kind) => format!("{}/{rest}", kind.as_str()),
        }
    }

    /// Where a parsed path really is, for results and for people: the workspace-relative
    /// path, and for a path in a session folder the short name the model used after it, as
    /// in `.toolbox/sessions/s1/output/hello.md (output/hello.md)`. Lexical, like
    /// [`show`](Self::show).
    pub fn show_real(&self, p: &WsPath) -> String {
        let short = self.show(p);
        match (p.base, &self.session) {
            (Base::Session(kind), Some(sid)) => {
                let rest = short
                    .strip_prefix(kind.as_str())
                    .unwrap_or("")
                    .trim_start_matches('/');
                let real = if rest.is_empty() {
                    format!("{TOOLBOX_DIR}/sessions/{sid}/{}", kind.as_str())
                } else {
                    format!("{TOOLBOX_DIR}/sessions/{sid}/{}/{rest}", kind.as_str())
                };
                format!("{real} ({short})")
            }
            _ => short,
        }
    }

    /// Like [`show_real`](Self::show_real) for an absolute path inside the workspace (a
    /// working folder, a file a program wrote).
    pub fn display_real(&self, abs: &Path) -> String {
        let short = self.display(abs);
        let Some(real) = self.relative_to_root(abs) else {
            return abs.display().to_string();
        };
        if real == short {
            real
        } else {
            format!("{real} ({short})")
        }
    }

    /// How to show an absolute path inside the workspace to the model: relative to the root
    /// with `/` separators (`.` for the root itself), and inside the active session's folders
    /// by the short name the model uses (`output/report.md`, not
    /// `.toolbox/sessions/<sid>/output/report.md`).
    pub fn display(&self, abs: &Path) -> String {
        if self.session.is_some() {
            for kind in SessionFolder::ALL {
                if let Ok(rest) = abs.strip_prefix(self.session_dir(kind.as_str())) {
                    return join_slash(kind.as_str(), rest);
                }
            }
        }
        self.relative_to_root(abs)
            .unwrap_or_else(|| abs.display().to_string())
    }

    /// `abs` relative to the root with `/` separators (`.` for the root itself); `None`
    /// outside the workspace.
    fn relative_to_root(&self, abs: &Path) -> Option<String> {
        let rel = abs.strip_prefix(&self.root.path).ok()?;
        if rel.as_os_str().is_empty() {
            return Some(".".to_string());
        }
        Some(
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
        )
    }
}

/// A base folder's descriptor: the root's (borrowed) or a session folder's (owned).
enum BaseFd<'a> {
    Root(BorrowedFd<'a>),
    Owned(Dir),
}

impl BaseFd<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            BaseFd::Root(fd) => *fd,
            BaseFd::Owned(dir) => dir.as_fd(),
        }
    }
}

/// Whether two stats name the same file (device and inode).
fn same_file(a: &rustix::fs::Stat, b: &rustix::fs::Stat) -> bool {
    a.st_dev == b.st_dev && a.st_ino == b.st_ino
}

fn trim_leading_slashes(mut b: &[u8]) -> &[u8] {
    while let Some(r) = b.strip_prefix(b"/") {
        b = r;
    }
    b
}

fn join_segments(segs: &[&[u8]]) -> PathBuf {
    let mut out = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(s);
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

fn join_slash(first: &str, rest: &Path) -> String {
    let mut out = first.to_string();
    for c in rest.components() {
        out.push('/');
        out.push_str(&c.as_os_str().to_string_lossy());
    }
    out
}

/// Replaces `name` in `dir` atomically with what `fill` writes: the content goes to a fresh
/// temporary file created in the same folder by descriptor, is flushed to disk, takes over the
/// old file's permission bits and is renamed over the name in one step. If anything fails
/// before the rename, the old file is untouched and the temporary file is removed. A
/// read-only file is refused (a rename would replace it regardless of the user's intent); a
/// folder is refused; a link at the name is replaced, never written through.
pub(crate) fn replace_in(
    dir: &Dir,
    name: &OsStr,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mode = match dir.symlink_metadata(name) {
        Ok(st) => match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Directory => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "it is a folder, not a file",
                ))
            }
            rustix::fs::FileType::RegularFile if st.st_mode & 0o222 == 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    "the file is read-only",
                ))
            }
            rustix::fs::FileType::RegularFile => Some(st.st_mode & 0o7777),
            rustix::fs::FileType::Symlink => {
                return Err(io::Error::other("it is a symbolic link; toolbox does not replace or write through links (write to the file it points to)",
                ))
            }
            _ => {
                return Err(io::Error::other("it is not a regular file",
                ))
            }
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    // Keep the name well under the usual 255-byte limit.
    let base: String = name.to_string_lossy().chars().take(80).collect();
    let mut created = None;
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let candidate = OsString::from(format!(".{base}.{}.{n}.toolbox-tmp", std::process::id()));
        match dirfd::create_new_child(dir.as_fd(), &candidate) {
            Ok(f) => {
                created = Some((candidate, f));
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    let Some((tmp_name, mut file)) = created else {
        return Err(io::Error::other("no free temporary file name"));
    };
    let result = (|| {
        fill(&mut file)?;
        if let Some(mode) = mode {
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        file.sync_all()?;
        drop(file);
        rustix::fs::renameat(dir.as_fd(), &tmp_name, dir.as_fd(), name)?;
        Ok(())
    })();
    match result {
        Ok(()) => {
            // Make the rename itself durable; failure here does not undo a completed replace.
            let _ = rustix::fs::fsync(dir.as_fd());
            Ok(())
        }
        Err(e) => {
            let _ = rustix::fs::unlinkat(dir.as_fd(), &tmp_name, rustix::fs::AtFlags::empty());
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    fn read(ws: &Workspace, path: &str) -> Result<String, PathError> {
        let p = ws.locate(path)?;
        let mut f = ws.open_read(&p)?;
        let mut s = String::new();
        io::Read::read_to_string(&mut f, &mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn plain_and_nested_paths_resolve_inside() {
        let (_d, ws) = ws();
        std::fs::create_dir(ws.root().join("a")).unwrap();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("./a/../c").unwrap(), ws.root().join("c"));
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        assert_eq!(ws.show(&ws.locate("./a/../c").unwrap()), "c");
    }

    #[test]
    fn escapes_are_refused() {
        let (_d, ws) = ws();
        assert!(matches!(ws.resolve("../x"), Err(PathError::Outside(_))));
        assert!(matches!(
            ws.resolve("a/../../x"),
            Err(PathError::Outside(_))
        ));
        assert!(matches!(
            ws.resolve("/etc/passwd"),
            Err(PathError::Outside(_))
        ));
        assert!(matches!(ws.resolve("a\0b"), Err(PathError::Nul)));
        assert!(matches!(ws.resolve(""), Err(PathError::Empty)));
    }

    #[test]
    fn paths_are_resolved_on_disk_not_lexically() {
        let (_d, ws) = ws();
        std::fs::write(ws.root().join("a.txt"), "A").unwrap();
        // A file is not a folder, even with a trailing '.' or '/'.
        read(&ws, "a.txt").unwrap();
        let e = read(&ws, "a.txt/.").unwrap_err();
        assert!(matches!(e, PathError::NotADirectory { .. }), "{e}");
        assert!(read(&ws, "a.txt/").is_err());
        // A missing folder cannot be climbed out of with '..'.
        let e = read(&ws, "typo/../a.txt").unwrap_err();
        assert!(e.is_not_found(), "{e}");
        // An absolute path must spell the root exactly.
        let root = ws.root().to_str().unwrap().to_string();
        let parent = ws.root().parent().unwrap().to_str().unwrap().to_string();
        let name = ws.root().file_name().unwrap().to_str().unwrap().to_string();
        let typo = format!("{parent}/{name}-typo/../{name}/a.txt");
        assert!(matches!(read(&ws, &typo), Err(PathError::Outside(_))));
        assert_eq!(read(&ws, &format!("{root}/a.txt")).unwrap(), "A");
    }

    #[test]
    fn absolute_inside_is_fine() {
        let (_d, ws) = ws();
        let abs = ws.root().join("x/y");
        assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap(), abs);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_out_are_refused_and_in_are_followed() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join("out")).unwrap();
        std::fs::create_dir(ws.root().join("real")).unwrap();
        std::fs::write(ws.root().join("real/f"), "in").unwrap();
        std::os::unix::fs::symlink("real", ws.root().join("in")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        let e = read(&ws, "out/secret").unwrap_err();
        assert!(matches!(e, PathError::LeadsOutside(_)), "{e}");
        let e = ws.resolve("out/secret").unwrap_err();
        assert!(matches!(e, PathError::LeadsOutside(_)), "{e}");
        assert_eq!(read(&ws, "in/f").unwrap(), "in");
        assert_eq!(ws.resolve("in/f").unwrap(), ws.root().join("real/f"));
        assert!(read(&ws, "dangling").is_err());
    }

    #[test]
    fn writes_never_follow_links() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("t");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, ws.root().join("link")).unwrap();
        let e = ws
            .write_atomic(&ws.locate("link").unwrap(), b"new", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(ws.open_append(&ws.locate("link").unwrap(), false).is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // Hard links: the atomic replace leaves the other name alone; append refuses.
        std::fs::write(outside.path().join("h"), "outside").unwrap();
        std::fs::hard_link(outside.path().join("h"), ws.root().join("hl")).unwrap();
        let e = ws
            .open_append(&ws.locate("hl").unwrap(), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("hard links"), "{e}");
        ws.write_atomic(&ws.locate("hl").unwrap(), b"mine", false)
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.path().join("h")).unwrap(),
            "outside"
        );
        // Folders are created beneath the root only.
        std::os::unix::fs::symlink(outside.path(), ws.root().join("outdir")).unwrap();
        assert!(ws
            .write_atomic(&ws.locate("outdir/new/x").unwrap(), b"x", true)
            .is_err());
        assert!(!outside.path().join("new").exists());
        ws.write_atomic(&ws.locate("deep/er/x").unwrap(), b"x", true)
            .unwrap();
        assert_eq!(std::fs::read(ws.root().join("deep/er/x")).unwrap(), b"x");
    }

    #[test]
    fn toolbox_folders_refuse_planted_links() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.root().join(TOOLBOX_DIR)).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join(".toolbox/tool_outputs"))
            .unwrap();
        let e = ws
            .toolbox_subdir(&[OsStr::new("tool_outputs")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("symbolic link"), "{e}");
        let s = ws.with_session("s1").unwrap();
        std::fs::create_dir_all(ws.root().join(".toolbox/sessions")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.root().join(".toolbox/sessions/s1")).unwrap();
        assert!(s.scratchpad().is_err());
        assert!(s.resolve("output/x").is_err());
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn a_session_folder_held_open_is_walked_again_once_deleted() {
        let (_d, ws) = ws();
        let outside = tempfile::tempdir().unwrap();
        let s = ws.with_session("s1").unwrap();
        let base = ws.root().join(".toolbox/sessions/s1");
        assert_eq!(s.scratchpad().unwrap(), base.join("scratchpad"));
        // The folder alone deleted: made again, not the deleted one handed out.
        std::fs::remove_dir(base.join("scratchpad")).unwrap();
        let fd = s.hold_folder(SessionFolder::Scratchpad).unwrap();
        assert!(rustix::fs::fstat(&fd).unwrap().st_nlink > 0);
        assert!(base.join("scratchpad").is_dir());
        // The whole session deleted behind toolbox's back: made again where it belongs.
        std::fs::remove_dir_all(&base).unwrap();
        s.scratchpad().unwrap();
        assert!(base.join("scratchpad").is_dir());
        std::fs::write(base.join("scratchpad/x"), "x").unwrap();
        // Another Workspace value of the same root (a later call) sees the same folder.
        let again = ws.with_session("s1").unwrap();
        assert_eq!(
            std::fs::read_to_string(again.resolve("scratchpad/x").unwrap()).unwrap(),
            "x"
        );
        // Deleted and replaced by a link to elsewhere: refused, nothing made through it.
        std::fs::remove_dir_all(&base).unwrap();
        std::os::unix::fs::symlink(outside.path(), &base).unwrap();
        let e = s.scratchpad().unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(s.output_dir().is_err());
        assert!(s.resolve("output/x").is_err());
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
        // A session folder's own folder planted as a link is refused too.
        std::fs::remove_file(&base).unwrap();
        s.scratchpad().unwrap();
        std::os::unix::fs::symlink(outside.path(), base.join("output")).unwrap();
        let e = s.output_dir().unwrap_err().to_string();
        assert!(
            e.contains("symbolic link") && e.contains("sessions/s1/output"),
            "{e}"
        );
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }

    #[test]
    fn session_routing() {
        let (_d, ws) = ws();
        let s = ws.with_session("s1").unwrap();
        let base = ws.root().join(".toolbox/sessions/s1");
        assert_eq!(
            s.resolve("output/a.png").unwrap(),
            base.join("output/a.png")
        );
        assert_eq!(
            s.resolve("outputs/a.png").unwrap(),
            base.join("output/a.png")
        );
        assert_eq!(
            s.resolve("./scratch/t.py").unwrap(),
            base.join("scratchpad/t.py")
        );
        assert_eq!(s.resolve("scratchpad").unwrap(), base.join("scratchpad"));
        assert_eq!(s.resolve("inputs/d.csv").unwrap(), base.join("input/d.csv"));
        assert_eq!(
            s.resolve("outputs2/x").unwrap(),
            ws.root().join("outputs2/x")
        );
        // Without a session nothing is routed.
        assert_eq!(ws.resolve("output/a").unwrap(), ws.root().join("output/a"));
        // Session folders are shown by their short names.
        assert_eq!(s.display(&base.join("output/a.png")), "output/a.png");
        assert_eq!(s.display(&base.join("scratchpad")), "scratchpad");
        assert_eq!(s.display(&ws.root().join("src/x.rs")), "src/x.rs");
        assert_eq!(
            s.show(&s.locate("outputs/./a.png").unwrap()),
            "output/a.png"
        );
        assert_eq!(
            ws.display(&base.join("output/a.png")),
            ".toolbox/sessions/s1/output/a.png"
        );
        // Routing cannot be used to climb out.
        assert!(s.resolve("output/../../../../../x").is_err());
        assert!(s.resolve("output/../x").is_err());
    }

    #[test]
    fn tools_never_write_in_toolbox_own_folder_but_the_sessions_folders() {
        let (_d, ws) = ws();
        let s1 = ws.with_session("s1").unwrap();
        let write = |w: &Workspace, path: &str| {
            let p = w.locate(path)?;
            w.write_atomic(&p, b"forged", true)
        };
        // Before `.toolbox` exists, a tool cannot create it, as a folder or as a file.
        for path in [".toolbox/sessions/s1/plan.json", ".toolbox", "./.toolbox/x"] {
            let e = write(&s1, path).unwrap_err();
            assert!(matches!(e, PathError::Protected(_)), "{path}: {e}");
        }
        assert!(!ws.root().join(".toolbox").exists() || ws.root().join(".toolbox").is_dir());
        // Once it exists (the session's folders made by toolbox), every spelling of a path
        // in it is refused: plain, with `..`, through a relative link to the folder, to a
        // folder inside it, and for another session's own folders.
        s1.resolve("output/x").unwrap();
        s1.resolve("scratchpad/x").unwrap();
        s1.resolve("input/x").unwrap();
        ws.with_session("s2").unwrap().resolve("output/x").unwrap();
        let root = ws.root().to_path_buf();
        std::os::unix::fs::symlink(".toolbox", root.join("tb")).unwrap();
        std::os::unix::fs::symlink(".toolbox/sessions/s1", root.join("sess")).unwrap();
        std::os::unix::fs::symlink(".toolbox/sessions/s1/output", root.join("out1")).unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        for path in [
            ".toolbox/sessions/s1/plan.json",
            ".toolbox/x",
            "src/../.toolbox/sessions/s1/plan.json",
            "tb/sessions/s1/plan.json",
            "tb/new/deep/file",
            "sess/plan.json",
            "sess/output/../plan.json",
            ".toolbox/sessions/s2/output/x.txt",
            ".toolbox/trajectories/s1/tool_calls.jsonl",
            ".toolbox",
            &format!("{}/.toolbox/sessions/s1/plan.json", root.display()),
        ] {
            let e = write(&s1, path).unwrap_err();
            assert!(matches!(e, PathError::Protected(_)), "{path}: {e}");
            assert!(e.to_string().contains("output/"), "{e}");
            let p = s1.locate(path).unwrap();
            assert!(
                matches!(s1.open_append(&p, true), Err(PathError::Protected(_))),
                "{path}: append"
            );
        }
        assert!(!root.join(".toolbox/sessions/s1/plan.json").exists());
        assert!(!root.join(".toolbox/new").exists());
        // This session's own folders stay open, however they are spelled.
        for path in [
            "output/a.txt",
            ".toolbox/sessions/s1/output/b.txt",
            ".toolbox/sessions/s1/scratchpad/deep/c.txt",
            "sess/input/d.txt",
            "out1/e.txt",
            "src/f.txt",
        ] {
            write(&s1, path).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        // Without a session, nothing in `.toolbox/` is a tool's to write.
        assert!(matches!(
            write(&ws, ".toolbox/sessions/s1/output/g.txt"),
            Err(PathError::Protected(_))
        ));
        // Reading is not writing: spool files and plans stay readable.
        std::fs::write(root.join(".toolbox/sessions/s1/plan.json"), "{}").unwrap();
        assert_eq!(read(&s1, ".toolbox/sessions/s1/plan.json").unwrap(), "{}");
    }

    #[test]
    fn session_ids_are_checked() {
        let (_d, ws) = ws();
        for bad in ["", "..", ".hidden", "a/b", "a b", &"x".repeat(129)] {
            assert!(ws.with_session(bad).is_err(), "{bad:?}");
        }
        assert!(ws.with_session("default").is_ok());
        assert!(ws.with_session("chat-2026_11.29").is_ok());
    }
}
