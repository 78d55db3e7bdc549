//! The opens beneath the root: every file and folder a tool reads or writes, by descriptor
//! with `openat2(RESOLVE_BENEATH)`; the check that a write never lands in `.toolbox/` but in
//! this session's own folders; and the real paths handed to other programs.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use super::path::{join_segments, segments};
use super::{Base, PathError, SessionFolder, Workspace, WsPath, TOOLBOX_DIR};
use crate::dirfd::{self, Dir};

impl Workspace {
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
        dirfd::replace_in(&dir, &name, |f| f.write_all(bytes))
            .map_err(|e| PathError::from_io(&p.given, e))
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
