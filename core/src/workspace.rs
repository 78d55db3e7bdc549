use std::io;
use std::path::{Component, Path, PathBuf};

/// The folder inside the workspace where toolbox keeps its own data.
pub const TOOLBOX_DIR: &str = ".toolbox";

/// Why a path was refused. The message names the path the model gave.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error("path contains a NUL byte")]
    Nul,
    #[error("path {0:?} is outside the workspace")]
    Outside(String),
    #[error("path {path:?} leads outside the workspace through the symbolic link {link:?}")]
    SymlinkOutside { path: String, link: String },
    #[error("path {0:?} goes through a symbolic link whose target does not exist")]
    DanglingSymlink(String),
    #[error(
        "invalid session id {0:?}: use 1-128 characters of A-Z a-z 0-9 . _ - not starting with '.'"
    )]
    InvalidSession(String),
    #[error("path {path:?} goes through {file:?}, which is a file, not a directory")]
    NotADirectory { path: String, file: String },
    #[error("cannot resolve path {path:?}: {source}")]
    Io { path: String, source: io::Error },
}

/// Checks that a session id is safe to use as one folder name.
pub fn validate_session_id(sid: &str) -> Result<(), PathError> {
    let ok = !sid.is_empty()
        && sid.len() <= 128
        && !sid.starts_with('.')
        && sid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(PathError::InvalidSession(sid.to_string()))
    }
}

/// The session folders a model can name by a short logical prefix.
const SESSION_ROUTES: &[(&str, &str)] = &[
    ("output", "output"),
    ("outputs", "output"),
    ("scratchpad", "scratchpad"),
    ("scratch", "scratchpad"),
    ("input", "input"),
    ("inputs", "input"),
];

/// The jail every tool path goes through.
///
/// A path resolves inside the (canonical) root or is refused: `..` that climbs out, absolute
/// paths elsewhere, NUL bytes, and symbolic links that lead out. With a session active,
/// relative paths starting with `output/`, `outputs/`, `scratchpad/`, `scratch/`, `input/` or
/// `inputs/` go to `.toolbox/sessions/<sid>/{output,scratchpad,input}/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
    session: Option<String>,
}

impl Workspace {
    /// The root must exist; it is canonicalised so every check compares real paths.
    pub fn new(root: impl AsRef<Path>) -> io::Result<Self> {
        let root = std::fs::canonicalize(root.as_ref()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("workspace {}: {e}", root.as_ref().display()),
            )
        })?;
        if !root.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace {} is not a directory", root.display()),
            ));
        }
        Ok(Workspace {
            root,
            session: None,
        })
    }

    /// The same workspace with session routing for `sid`.
    pub fn with_session(&self, sid: &str) -> Result<Self, PathError> {
        validate_session_id(sid)?;
        Ok(Workspace {
            root: self.root.clone(),
            session: Some(sid.to_string()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// `<root>/.toolbox`
    pub fn toolbox_dir(&self) -> PathBuf {
        self.root.join(TOOLBOX_DIR)
    }

    /// `<root>/.toolbox/sessions/<sid>/<kind>` for kind `output`, `scratchpad` or `input`;
    /// without a session, `<root>/<kind>`.
    pub fn session_dir(&self, kind: &str) -> PathBuf {
        match &self.session {
            Some(sid) => self.toolbox_dir().join("sessions").join(sid).join(kind),
            None => self.root.join(kind),
        }
    }

    /// The session scratchpad, created if missing: the default working directory of code.
    pub fn scratchpad(&self) -> io::Result<PathBuf> {
        let dir = self.session_dir("scratchpad");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The session output folder, created if missing.
    pub fn output_dir(&self) -> io::Result<PathBuf> {
        let dir = self.session_dir("output");
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Resolves a path a model gave to an absolute path inside the workspace.
    ///
    /// The path need not exist (a file about to be written); every part of it that does
    /// exist is followed through symbolic links and must stay inside the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathError> {
        if path.is_empty() {
            return Err(PathError::Empty);
        }
        if path.contains('\0') {
            return Err(PathError::Nul);
        }
        let given = Path::new(path);
        let relative: PathBuf = if given.is_absolute() {
            let normal = normalize(given).ok_or_else(|| PathError::Outside(path.into()))?;
            match normal.strip_prefix(&self.root) {
                Ok(rest) => rest.to_path_buf(),
                Err(_) => return Err(PathError::Outside(path.into())),
            }
        } else {
            let routed = self.route(given);
            normalize(&routed).ok_or_else(|| PathError::Outside(path.into()))?
        };
        self.follow_links(path, &relative)
    }

    /// Like [`resolve`](Self::resolve) but the path must exist.
    pub fn resolve_existing(&self, path: &str) -> Result<PathBuf, PathError> {
        let p = self.resolve(path)?;
        match std::fs::symlink_metadata(&p) {
            Ok(_) => Ok(p),
            Err(source) => Err(PathError::Io {
                path: path.to_string(),
                source,
            }),
        }
    }

    /// How to show a resolved path to the model: relative to the root with `/` separators
    /// (`.` for the root itself), and inside the active session's folders by the short name
    /// the model uses (`output/report.md`, not `.toolbox/sessions/<sid>/output/report.md`).
    pub fn display(&self, abs: &Path) -> String {
        if self.session.is_some() {
            for kind in ["output", "scratchpad", "input"] {
                if let Ok(rest) = abs.strip_prefix(self.session_dir(kind)) {
                    return join_slash(kind, rest);
                }
            }
        }
        match abs.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
            Ok(rel) => rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            Err(_) => abs.display().to_string(),
        }
    }

    fn route(&self, given: &Path) -> PathBuf {
        let Some(sid) = &self.session else {
            return given.to_path_buf();
        };
        let mut comps = given
            .components()
            .skip_while(|c| matches!(c, Component::CurDir));
        let Some(Component::Normal(first)) = comps.next() else {
            return given.to_path_buf();
        };
        let Some((_, kind)) = SESSION_ROUTES
            .iter()
            .find(|(name, _)| first.to_str() == Some(name))
        else {
            return given.to_path_buf();
        };
        let mut routed = PathBuf::from(TOOLBOX_DIR);
        routed.push("sessions");
        routed.push(sid);
        routed.push(kind);
        routed.extend(comps);
        routed
    }

    /// Canonicalises the deepest existing ancestor and checks it is still inside the root.
    fn follow_links(&self, original: &str, relative: &Path) -> Result<PathBuf, PathError> {
        let full = self.root.join(relative);
        let mut existing = full.as_path();
        let mut missing: Vec<&std::ffi::OsStr> = Vec::new();
        loop {
            match std::fs::canonicalize(existing) {
                Ok(real) => {
                    if !real.starts_with(&self.root) {
                        return Err(PathError::SymlinkOutside {
                            path: original.to_string(),
                            link: self.display(existing),
                        });
                    }
                    let mut out = real;
                    out.extend(missing.iter().rev());
                    return Ok(out);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if std::fs::symlink_metadata(existing).is_ok() {
                        return Err(PathError::DanglingSymlink(original.to_string()));
                    }
                    match (existing.parent(), existing.file_name()) {
                        (Some(parent), Some(name)) => {
                            missing.push(name);
                            existing = parent;
                        }
                        _ => {
                            return Err(PathError::Io {
                                path: original.to_string(),
                                source: e,
                            })
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                    // Some ancestor is a regular file; name it.
                    let file = existing
                        .ancestors()
                        .find(|a| a.is_file())
                        .map(|a| self.display(a))
                        .unwrap_or_else(|| self.display(existing));
                    return Err(PathError::NotADirectory {
                        path: original.to_string(),
                        file,
                    });
                }
                Err(source) => {
                    return Err(PathError::Io {
                        path: original.to_string(),
                        source,
                    })
                }
            }
        }
    }
}

fn join_slash(first: &str, rest: &Path) -> String {
    let mut out = first.to_string();
    for c in rest.components() {
        out.push('/');
        out.push_str(&c.as_os_str().to_string_lossy());
    }
    out
}

/// Removes `.` and resolves `..` lexically; `None` when `..` climbs above the start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for comp in path.components() {
        match comp {
            Component::CurDir => {}
            Component::ParentDir => {
                if depth == 0 {
                    return None;
                }
                out.pop();
                depth -= 1;
            }
            Component::Normal(part) => {
                out.push(part);
                depth += 1;
            }
            Component::RootDir | Component::Prefix(_) => out.push(comp.as_os_str()),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn plain_and_nested_paths_resolve_inside() {
        let (_d, ws) = ws();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("./a/../c").unwrap(), ws.root().join("c"));
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
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
        std::os::unix::fs::symlink(outside.path(), ws.root().join("out")).unwrap();
        std::fs::create_dir(ws.root().join("real")).unwrap();
        std::os::unix::fs::symlink(ws.root().join("real"), ws.root().join("in")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        let e = ws.resolve("out/secret").unwrap_err();
        assert!(matches!(e, PathError::SymlinkOutside { .. }), "{e}");
        assert_eq!(ws.resolve("in/f").unwrap(), ws.root().join("real/f"));
        assert!(matches!(
            ws.resolve("dangling"),
            Err(PathError::DanglingSymlink(_))
        ));
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
            ws.display(&base.join("output/a.png")),
            ".toolbox/sessions/s1/output/a.png"
        );
        // Routing cannot be used to climb out.
        assert!(s.resolve("output/../../../../../x").is_err());
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
