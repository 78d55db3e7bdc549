//! A path a model gives, parsed without touching the disk: its base (the root or a session
//! folder), the rest as written, and why a path is refused; and how a path is shown back.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use toolbox_core::{InvalidSessionId, SessionId};

use super::{Workspace, TOOLBOX_DIR};

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
    pub(super) fn from_io(path: &str, e: io::Error) -> Self {
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

    pub(super) const ALL: [SessionFolder; 3] = [
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
    pub(super) base: Base,
    /// Relative to the base, as written (after the routing prefix); empty for the base itself.
    pub(super) rel: PathBuf,
    /// The path as the model gave it, for messages.
    pub(super) given: String,
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
    pub(super) fn split_last(&self) -> Result<(PathBuf, OsString), PathError> {
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
pub(super) fn segments(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|&b| b == b'/').filter(|s| !s.is_empty())
}

impl Workspace {
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

fn trim_leading_slashes(mut b: &[u8]) -> &[u8] {
    while let Some(r) = b.strip_prefix(b"/") {
        b = r;
    }
    b
}

pub(super) fn join_segments(segs: &[&[u8]]) -> PathBuf {
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
