//! Shared libraries loaded at run time, for the one provider that needs it: the python
//! provider loads the libpython of an interpreter found at run time (so the binary links
//! none), then its own CPython layer, carried inside the binary as bytes.
//!
//! A library loaded here is never unloaded (CPython cannot be), so its symbols stay valid for
//! the life of the process.

use std::ffi::{c_void, CStr, CString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A loaded shared library.
#[derive(Debug)]
pub struct Library {
    handle: *mut c_void,
    /// What it was loaded from, for messages.
    name: String,
}

// SAFETY: the handle is a process-wide token of the loader, never closed, and dlsym may be
// called from any thread.
unsafe impl Send for Library {}
// SAFETY: as above; &Library only reads through the loader.
unsafe impl Sync for Library {}

/// The loader's last error, as text.
fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a C string valid until the next dl* call on this thread.
    unsafe {
        let text = libc::dlerror();
        if text.is_null() {
            "(no message from the loader)".into()
        } else {
            CStr::from_ptr(text).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// Loads the library at `path` with every symbol bound now and made global: libraries
    /// loaded after it (and the Python extensions those load) resolve against it.
    pub fn open_global(path: &Path) -> Result<Library, String> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
        // SAFETY: a NUL-terminated path; loading runs the library's initialisers, which is
        // what loading it means.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(format!("cannot load {}: {}", path.display(), last_error()));
        }
        Ok(Library {
            handle,
            name: path.display().to_string(),
        })
    }

    /// Loads a library held in memory (`bytes`), under `name` for messages: from an
    /// anonymous memory file, or, where that cannot be mapped executable, from a private
    /// temporary file removed as soon as it is loaded. Its symbols stay local to it.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Library, String> {
        let from_memfd = memfd_with(name, bytes).and_then(|fd| {
            let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
            let library = Self::open_local(&path, name)?;
            // Kept open for good: the loader knows the library by that path, and a later
            // load from a reused descriptor number would be handed this one instead.
            std::mem::forget(fd);
            Ok(library)
        });
        match from_memfd {
            Ok(library) => Ok(library),
            Err(memfd_error) => Self::from_temp_file(name, bytes)
                .map_err(|e| format!("{e} (and from memory: {memfd_error})")),
        }
    }

    fn from_temp_file(name: &str, bytes: &[u8]) -> Result<Library, String> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(".{name}-{}-{stamp}.so", std::process::id()));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700)
            .open(&path)
            .and_then(|mut file| file.write_all(bytes));
        let loaded = written
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
            .and_then(|()| Self::open_local(&path, name));
        let _ = std::fs::remove_file(&path);
        loaded
    }

    fn open_local(path: &Path, name: &str) -> Result<Library, String> {
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
        // SAFETY: as in open_global.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {name}: {}", last_error()));
        }
        Ok(Library {
            handle,
            name: name.to_string(),
        })
    }

    /// The address of the symbol `symbol`.
    pub fn symbol(&self, symbol: &CStr) -> Result<*mut c_void, String> {
        // SAFETY: a live handle (never closed) and a NUL-terminated name.
        let address = unsafe { libc::dlsym(self.handle, symbol.as_ptr()) };
        if address.is_null() {
            Err(format!("{} has no symbol {symbol:?}", self.name))
        } else {
            Ok(address)
        }
    }

    /// The file the loader mapped the symbol `symbol` from, if it knows: the real path of a
    /// library opened by name or through a symlink.
    pub fn file_of(&self, symbol: &CStr) -> Option<PathBuf> {
        let address = self.symbol(symbol).ok()?;
        // SAFETY: dladdr only reads the loader's tables; the zeroed Dl_info is plain data,
        // and dli_fname, when set, is a C string the loader owns.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            if libc::dladdr(address, &mut info) == 0 || info.dli_fname.is_null() {
                return None;
            }
            let name = CStr::from_ptr(info.dli_fname).to_bytes();
            Some(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
        }
    }
}

/// An anonymous memory file holding `bytes`.
fn memfd_with(name: &str, bytes: &[u8]) -> Result<OwnedFd, String> {
    let c_name = CString::new(name).map_err(|_| format!("{name:?} contains a NUL byte"))?;
    // SAFETY: a NUL-terminated name; the descriptor is owned at once.
    let fd = unsafe { libc::memfd_create(c_name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)
        .map_err(|e| format!("cannot fill the memory file: {e}"))?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_loads_from_a_file_and_from_memory_and_names_its_symbols() {
        // libm: small, and loading a second copy of it harms nothing.
        let libm = Library::open_global(Path::new("libm.so.6")).unwrap();
        let cos = libm.symbol(c"cos").unwrap();
        let e = libm.symbol(c"no_such_symbol_here").unwrap_err();
        assert!(e.contains("no_such_symbol_here"), "{e}");

        let path = libm.file_of(c"cos").expect("libm's file");
        assert!(path.is_absolute(), "{}", path.display());
        let bytes = std::fs::read(&path).unwrap();
        let copy = Library::from_bytes("libm-copy", &bytes).unwrap();
        let copied_cos = copy.symbol(c"cos").unwrap();
        assert_ne!(copied_cos, cos, "a second copy, not the loaded one");

        let e = Library::open_global(Path::new("/nonexistent/libnothing.so")).unwrap_err();
        assert!(e.contains("/nonexistent/libnothing.so"), "{e}");
        let e = Library::from_bytes("garbage", b"not an ELF file").unwrap_err();
        assert!(e.contains("garbage"), "{e}");
    }
}
