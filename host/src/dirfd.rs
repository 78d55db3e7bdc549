//! Race-free filesystem primitives: everything is opened relative to a directory descriptor.
//!
//! A workspace is hostile: any folder in it may be swapped for a symbolic link to `/` between
//! a check and a use. So no path is ever checked and then opened by name. Paths a model gives
//! are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` relative to the
//! workspace root's descriptor: the kernel resolves every component, `..` and symbolic links
//! included, and refuses (EXDEV) anything that would leave the root at any moment. Single
//! names inside a folder already held open are opened with `O_NOFOLLOW`.
//!
//! Linux 5.6 or later is needed for `openat2`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// The resolution rules for every path a model gives.
const BENEATH: ResolveFlags = ResolveFlags::BENEATH.union(ResolveFlags::NO_MAGICLINKS);

/// `openat2` may fail with EAGAIN when a rename raced the lookup; it is safe to retry.
const EAGAIN_RETRIES: usize = 32;

/// Opens the existing folder `rel` beneath `dir` in one `openat2`, refusing any symbolic
/// link on the way (`RESOLVE_NO_SYMLINKS`): what a walk name by name with `O_NOFOLLOW` would
/// open, without a system call per name. Any error means "take the walk" (it creates what is
/// missing and names what is wrong).
pub(crate) fn open_dir_no_links(dir: BorrowedFd<'_>, rel: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY;
    let how = BENEATH.union(ResolveFlags::NO_SYMLINKS);
    Ok(rustix::fs::openat2(dir, rel, flags, Mode::empty(), how)?)
}

/// Opens `rel` (relative, `""` or `.` for `dir` itself) beneath `dir`.
pub(crate) fn open_beneath(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> io::Result<OwnedFd> {
    let rel: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    // openat2 is strict: O_PATH takes no other access flags.
    let flags = if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOCTTY
    };
    // openat2 refuses a mode without O_CREAT.
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(0o666)
    } else {
        Mode::empty()
    };
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir, rel, flags, mode, BENEATH) {
            Err(rustix::io::Errno::AGAIN) if tries < EAGAIN_RETRIES => tries += 1,
            Err(rustix::io::Errno::NOSYS) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "this kernel has no openat2 (Linux 5.6 or later is needed to open workspace files safely)",
                ))
            }
            other => return other.map_err(io::Error::from),
        }
    }
}

/// Opens the single name `name` inside `dir` without following a symbolic link there.
pub(crate) fn open_child(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::from_raw_mode(0o666),
    )
    .map_err(io::Error::from)
}

/// Opens the single name `name` inside `dir`, following a symbolic link there: only for a
/// folder the operator chose (a configured folder of agents), never inside the workspace.
pub(crate) fn open_child_following(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: OFlags,
) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Opens or creates the folder `name` inside `dir`, refusing a symbolic link or a file there.
///
/// This is how toolbox creates its own folders under `.toolbox/`: a planted link is an error
/// that says what was found, and nothing is ever created through it.
pub(crate) fn ensure_child_dir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    match open_child(dir, name, OFlags::DIRECTORY | OFlags::RDONLY) {
        Ok(fd) => Ok(fd),
        Err(e) => Err(explain_not_dir(dir, name, e)),
    }
}

/// Turns ELOOP/ENOTDIR on a single name into a message saying what is really there.
fn explain_not_dir(dir: BorrowedFd<'_>, name: &OsStr, e: io::Error) -> io::Error {
    match file_type_at(dir, name) {
        Ok(FileType::Symlink) => io::Error::other(format!(
                "{} is a symbolic link, not a folder; toolbox does not follow links in its own folders (remove it)",
                name.to_string_lossy()
            ),
        ),
        Ok(t) if t != FileType::Directory => io::Error::new(
            io::ErrorKind::NotADirectory,
            format!("{} is not a folder", name.to_string_lossy()),
        ),
        _ => e,
    }
}

/// The type of `name` inside `dir`, without following a link.
pub(crate) fn file_type_at(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<FileType> {
    let st = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileType::from_raw_mode(st.st_mode))
}

/// Opens or creates a regular file `name` in `dir` for appending, never through a link, and
/// refuses a file with more than one hard link (appending would change the other names too).
pub(crate) fn open_append_child(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    let fd = open_child(
        dir,
        name,
        // Readable too, so a caller can look at the last byte (a torn record) first.
        OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::NONBLOCK,
    )
    .map_err(|e| explain_link(dir, name, e))?;
    let file = File::from(fd);
    check_plain_file(&file, name)?;
    Ok(file)
}

/// Creates a new regular file `name` in `dir`; fails if anything is there already.
pub(crate) fn create_new_child(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<File> {
    let fd = open_child(dir, name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL)?;
    Ok(File::from(fd))
}

/// ELOOP from `O_NOFOLLOW` means a link was found where a file was expected; say so.
fn explain_link(dir: BorrowedFd<'_>, name: &OsStr, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc_eloop()) {
        if let Ok(FileType::Symlink) = file_type_at(dir, name) {
            return io::Error::other(format!(
                "{} is a symbolic link; toolbox does not write through links here",
                name.to_string_lossy()
            ));
        }
    }
    e
}

fn libc_eloop() -> i32 {
    rustix::io::Errno::LOOP.raw_os_error()
}

/// A regular file with exactly one name.
pub(crate) fn check_plain_file(file: &File, name: &OsStr) -> io::Result<()> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            name.to_string_lossy()
        )));
    }
    let links = std::os::unix::fs::MetadataExt::nlink(&meta);
    if links > 1 {
        return Err(io::Error::other(format!(
                "{} has {links} hard links; writing to it would also change the other names, so toolbox refuses",
                name.to_string_lossy()
            ),
        ));
    }
    Ok(())
}

/// One entry of a folder read through its descriptor.
#[derive(Debug, Clone)]
pub struct DirEntryInfo {
    /// The entry's name within the folder.
    pub name: OsString,
    /// The entry's own type (a link is a link; it is never followed).
    pub kind: EntryKind,
}

/// What a folder entry is, without following links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else: a device, a socket, a FIFO.
    Other,
}

impl EntryKind {
    /// The kind of a raw `st_mode`.
    pub fn of_mode(mode: u32) -> Self {
        Self::from_file_type(FileType::from_raw_mode(mode))
    }

    fn from_file_type(t: FileType) -> Self {
        match t {
            FileType::RegularFile => EntryKind::File,
            FileType::Directory => EntryKind::Dir,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }
    }
}

/// A folder held open by descriptor: its entries, and its children opened without following
/// links. Whatever is renamed or swapped meanwhile, a `Dir` keeps meaning the folder that was
/// opened, so a walk built on it never strays out of the workspace.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// Whether the descriptor's offset has moved (entries were read), so a new read must
    /// seek back to the start first.
    read_before: std::sync::atomic::AtomicBool,
}

impl Dir {
    pub(crate) fn from_fd(fd: OwnedFd) -> Self {
        Dir {
            fd,
            read_before: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The folder's descriptor, for opening relative to it.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The descriptor itself, for a caller that keeps it (to `fchdir` into the folder).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }

    /// The entries, sorted by name, without `.` and `..`.
    ///
    /// Read with `getdents64` straight from this folder's own descriptor (no second open of
    /// the folder), from the start each time.
    pub fn entries(&self) -> io::Result<Vec<DirEntryInfo>> {
        use std::mem::MaybeUninit;
        use std::sync::atomic::Ordering;
        if self.read_before.swap(true, Ordering::Relaxed) {
            rustix::fs::seek(&self.fd, rustix::fs::SeekFrom::Start(0))?;
        }
        let mut buf: Vec<MaybeUninit<u8>> = Vec::with_capacity(32 * 1024);
        buf.resize(32 * 1024, MaybeUninit::uninit());
        let mut raw = rustix::fs::RawDir::new(&self.fd, &mut buf);
        let mut out = Vec::new();
        while let Some(entry) = raw.next() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name).to_os_string();
            let mut t = entry.file_type();
            if t == FileType::Unknown {
                t = file_type_at(self.fd.as_fd(), &name).unwrap_or(FileType::Unknown);
            }
            out.push(DirEntryInfo {
                name,
                kind: EntryKind::from_file_type(t),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Opens the child folder `name`; a link there is refused (ELOOP or ENOTDIR).
    pub fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        open_child(self.as_fd(), name, OFlags::DIRECTORY | OFlags::RDONLY).map(Dir::from_fd)
    }

    /// Opens the child `name` for reading if it is a regular file; a link is refused, and a
    /// FIFO or device is refused without blocking.
    pub fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let fd = open_child(self.as_fd(), name, OFlags::RDONLY | OFlags::NONBLOCK)?;
        regular_file(fd, name)
    }

    /// Opens (creating) the child `name` for appending: never through a link, and a file
    /// with other hard links is refused.
    pub fn open_append(&self, name: &OsStr) -> io::Result<File> {
        open_append_child(self.as_fd(), name)
    }

    /// Like [`open_append`](Self::open_append), for a file of lines: also says whether its
    /// last line was cut short (a crash mid-write), so the caller can end it before writing
    /// a line of its own and records never glue together.
    pub fn open_append_lines(&self, name: &OsStr) -> io::Result<(File, bool)> {
        use std::os::unix::fs::FileExt;
        let file = self.open_append(name)?;
        let len = file.metadata()?.len();
        let mut last = [0u8; 1];
        let torn = len > 0 && file.read_at(&mut last, len - 1).is_ok() && last[0] != b'\n';
        Ok((file, torn))
    }

    /// Creates the new regular file `name` (fails if anything is there), never through a link.
    pub fn create_new(&self, name: &OsStr) -> io::Result<File> {
        create_new_child(self.as_fd(), name)
    }

    /// Replaces `name` atomically with `bytes` (temporary file, then rename).
    pub fn write_atomic(&self, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
        use std::io::Write;
        replace_in(self, name, |f| f.write_all(bytes))
    }

    /// Replaces `name` atomically with what `fill` writes into the temporary file, as
    /// [`write_atomic`](Self::write_atomic) does with its bytes.
    pub fn replace_with(
        &self,
        name: &OsStr,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        replace_in(self, name, fill)
    }

    /// Opens the folder at `path`, following links: for a folder the operator named (a
    /// configured root), never for a path a model or a workspace gave.
    pub fn open_path(path: &Path) -> io::Result<Dir> {
        rustix::fs::open(
            path,
            OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map(Dir::from_fd)
        .map_err(io::Error::from)
    }

    /// Opens the folder `rel` beneath this folder, following links only while they stay
    /// beneath it (`openat2(RESOLVE_BENEATH)`): `..` or a link that leads out is refused.
    pub fn open_dir_beneath(&self, rel: &Path) -> io::Result<Dir> {
        open_beneath(self.as_fd(), rel, OFlags::DIRECTORY | OFlags::RDONLY).map(Dir::from_fd)
    }

    /// The real absolute path of this folder as the kernel sees it now (for display and
    /// for handing to another program; open through the descriptor instead).
    pub fn real_path(&self) -> io::Result<std::path::PathBuf> {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Opens `rel` beneath this folder, following links only while they stay beneath it, for
    /// reading if it is a regular file.
    pub fn open_file_beneath(&self, rel: &Path) -> io::Result<File> {
        let fd = open_beneath(self.as_fd(), rel, OFlags::RDONLY | OFlags::NONBLOCK)?;
        regular_file(fd, rel.as_os_str())
    }

    /// Where the link `name` points (its text, not followed).
    pub fn read_link(&self, name: &OsStr) -> io::Result<std::path::PathBuf> {
        let target = rustix::fs::readlinkat(self.as_fd(), name, Vec::new())?;
        Ok(std::path::PathBuf::from(OsStr::from_bytes(
            target.as_bytes(),
        )))
    }

    /// Metadata of the child `name`, not following a link.
    pub fn symlink_metadata(&self, name: &OsStr) -> io::Result<rustix::fs::Stat> {
        rustix::fs::statat(self.as_fd(), name, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
    }

    /// The size and modification time of the child `name` (not following links).
    pub fn size_and_mtime(&self, name: &OsStr) -> io::Result<(u64, i64)> {
        let st = self.symlink_metadata(name)?;
        Ok((st.st_size as u64, st.st_mtime))
    }
}

/// Turns a read descriptor into a `File`, refusing anything but a regular file. The
/// `O_NONBLOCK` it was opened with stays: it means nothing for a regular file, and clearing
/// it would cost two system calls per file on the hot path of a search.
pub(crate) fn regular_file(fd: OwnedFd, name: &OsStr) -> io::Result<File> {
    regular_file_sized(fd, name).map(|(file, _)| file)
}

/// [`regular_file`], with the file's size from the same `fstat` (a caller that needs the
/// size then saves a second `stat`).
pub(crate) fn regular_file_sized(fd: OwnedFd, name: &OsStr) -> io::Result<(File, u64)> {
    let st = rustix::fs::fstat(&fd)?;
    let t = FileType::from_raw_mode(st.st_mode);
    if t != FileType::RegularFile {
        let what = match t {
            FileType::Directory => "a folder",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            FileType::CharacterDevice | FileType::BlockDevice => "a device",
            _ => "not a regular file",
        };
        return Err(io::Error::new(
            if t == FileType::Directory {
                io::ErrorKind::IsADirectory
            } else {
                io::ErrorKind::Other
            },
            format!("{} is {what}", Path::new(name).display()),
        ));
    }
    Ok((File::from(fd), st.st_size as u64))
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
        match create_new_child(dir.as_fd(), &candidate) {
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
