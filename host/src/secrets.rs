//! Secrets in the environment: read once at start-up, then out of reach of model-run code.
//!
//! toolbox holds credentials (LLM keys, the serve token, image and web-search keys) that the
//! code it runs for a model must never see. A deny list on each child is not enough: a shell
//! command can read `/proc/$PPID/environ`, and embedded Python shares toolbox's own process.
//! So the binary calls [`capture_and_scrub`] first thing, while it has one thread:
//!
//! - every variable whose name matches [`SECRET_PATTERNS`] is copied into this module and
//!   removed from the process environment, so no child inherits it and embedded Python's
//!   `os.environ` never has it;
//! - its value in the original environment block, which `/proc/<pid>/environ` shows however
//!   the environment changes later, is overwritten with `*`;
//! - the process is made non-dumpable, so that a child that is not root cannot read toolbox's
//!   `/proc/<pid>/environ` or `/proc/<pid>/mem` at all.
//!
//! toolbox's own code reads such a variable with [`var`], which looks here first.

use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::{Mutex, OnceLock};

/// Names of variables that hold secrets (`*` is any run of characters; ASCII case ignored).
/// The shell's `[shell] deny_env` starts from the same list.
pub const SECRET_PATTERNS: &[&str] = &[
    "*_API_KEY",
    "*_API_TOKEN",
    "*_TOKEN",
    "*_SECRET",
    "*_SECRET_KEY",
    "*_ACCESS_KEY",
    "*_AUTH_TOKEN",
    "*_PASSWORD",
    "TOOLBOX_SERVE_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    // OTLP export headers carry a collector's API key (Langfuse, Honeycomb, Grafana).
    "OTEL_EXPORTER_OTLP_*HEADERS",
];

fn store() -> &'static Mutex<HashMap<OsString, OsString>> {
    static STORE: OnceLock<Mutex<HashMap<OsString, OsString>>> = OnceLock::new();
    STORE.get_or_init(Mutex::default)
}

/// Whether `name` matches `pattern` (`*` any run of characters, ASCII case ignored).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let p = pattern.as_bytes();
    let n = name.as_bytes();
    // A greedy matcher that backtracks to the last star: linear for these short names.
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi].eq_ignore_ascii_case(&n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// Whether `name` is one of [`SECRET_PATTERNS`].
pub fn is_secret_name(name: &str) -> bool {
    SECRET_PATTERNS.iter().any(|p| name_matches(p, name))
}

/// Moves every secret variable out of the environment (see the module documentation) and
/// makes the process non-dumpable. Returns how many variables were moved.
///
/// # Safety
///
/// Call it before any other thread exists (first thing in `main`): it changes the process
/// environment, which other threads may be reading.
pub unsafe fn capture_and_scrub() -> usize {
    // SAFETY: the caller's promise.
    let moved = unsafe { move_out(is_secret_name) };
    // SAFETY: a plain prctl; on failure the process simply stays dumpable.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    moved
}

/// Moves every variable matching one of `patterns` (an operator's `[shell] deny_env`) out of
/// the environment as [`capture_and_scrub`] moves secrets: no child toolbox starts (a shell
/// command, the Python worker, pip, a kernel, a language server) inherits it, and embedded
/// Python never sees it; toolbox's own code still reads it with [`var`]. Returns how many
/// variables were moved.
///
/// # Safety
///
/// Call it before any code that is not Rust's `std::env` reads the environment on another
/// thread (the binary calls it right after loading its configuration, before any tool runs):
/// it changes the process environment.
pub unsafe fn withhold(patterns: &[String]) -> usize {
    if patterns.is_empty() {
        return 0;
    }
    // SAFETY: the caller's promise.
    unsafe { move_out(|name| patterns.iter().any(|p| name_matches(p, name))) }
}

/// Moves the variables whose names `matches` into the store, overwriting their values in the
/// original environment block first.
///
/// # Safety
///
/// As [`capture_and_scrub`]: nothing else may read the environment meanwhile.
unsafe fn move_out(matches: impl Fn(&str) -> bool) -> usize {
    let names: Vec<OsString> = std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| name.to_str().is_some_and(&matches))
        .collect();
    let mut kept = store().lock().unwrap_or_else(|e| e.into_inner());
    for name in &names {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        if let Ok(cname) = CString::new(name.as_bytes()) {
            // SAFETY: no concurrent environment access (the caller's promise); getenv
            // returns the value's bytes in the environment block (the original one, shown
            // by /proc/self/environ, for variables the process started with),
            // NUL-terminated; they are overwritten in place, their length unchanged, before
            // the variable is removed from the environment.
            unsafe {
                let at = libc::getenv(cname.as_ptr());
                if !at.is_null() {
                    let len = libc::strlen(at);
                    std::ptr::write_bytes(at, b'*', len);
                }
            }
        }
        std::env::remove_var(name);
        kept.insert(name.clone(), value);
    }
    names.len()
}

/// A variable's value: a secret [`capture_and_scrub`] took out of the environment, else the
/// environment's. Empty values count as unset.
pub fn var(name: &str) -> Option<String> {
    let kept = store()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(OsStr::new(name))
        .cloned();
    kept.or_else(|| std::env::var_os(name))
        .and_then(|v| v.into_string().ok())
        .filter(|v| !v.is_empty())
}

/// Secrets shorter than this are not searched for in [`redact`]: a two-letter value would
/// blank out ordinary words.
const MIN_REDACTED_CHARS: usize = 8;

/// `text` with every secret [`capture_and_scrub`] took out of the environment replaced by
/// `<redacted>`: for text that leaves toolbox for somewhere a secret must not go (an
/// exported span).
pub fn redact(text: &str) -> String {
    let kept = store().lock().unwrap_or_else(|e| e.into_inner());
    let mut out = text.to_string();
    for value in kept.values() {
        if let Some(value) = value.to_str() {
            if value.chars().count() >= MIN_REDACTED_CHARS && out.contains(value) {
                out = out.replace(value, "<redacted>");
            }
        }
    }
    out
}

/// The longest secret [`take_from_fd`] reads.
const MAX_FD_SECRET_BYTES: usize = 4096;

/// Reads a secret's first line from an inherited descriptor (`--token-fd 3`: a pipe the
/// starting program wrote the token into), then closes the descriptor. Unlike a file, a pipe
/// leaves nothing behind for code that runs later as the same user, and neither the secret
/// nor a path to it appears in the command line. Standard input, output and error are
/// refused (a typo would read the terminal or hang).
pub fn take_from_fd(fd: i32) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    if fd < 3 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("descriptor {fd} is standard input, output or error; pass the one the secret was written to (3 or above)"),
        ));
    }
    // SAFETY: F_GETFD only asks whether the descriptor is open; it touches no memory.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("descriptor {fd} is not open in this process"),
        ));
    }
    // SAFETY: the descriptor is open (checked above) and is handed to us to take: nothing
    // else in this process uses it, and the File closes it when dropped.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.take(MAX_FD_SECRET_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    if line.len() > MAX_FD_SECRET_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the secret on descriptor {fd} is longer than {MAX_FD_SECRET_BYTES} bytes"),
        ));
    }
    String::from_utf8(line.to_vec())
        .map(|s| s.trim().to_string())
        .map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the secret on descriptor {fd} is not UTF-8"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_taken_from_a_pipe_and_the_pipe_closed() {
        use std::io::Write;
        use std::os::fd::IntoRawFd;
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"s3cret-token-value\nignored\n").unwrap();
        drop(writer);
        let fd = reader.into_raw_fd();
        assert_eq!(take_from_fd(fd).unwrap(), "s3cret-token-value");
        // SAFETY: only asks whether the descriptor is open.
        let open = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(open < 0, "closed after reading");
        assert!(take_from_fd(1)
            .unwrap_err()
            .to_string()
            .contains("standard"));
        assert!(take_from_fd(999_999)
            .unwrap_err()
            .to_string()
            .contains("not open"));
    }

    #[test]
    fn secret_names() {
        for yes in [
            "OPENAI_API_KEY",
            "anthropic_api_key",
            "GITHUB_TOKEN",
            "TOOLBOX_SERVE_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY_ID",
            "DB_PASSWORD",
        ] {
            assert!(is_secret_name(yes), "{yes}");
        }
        for no in [
            "PATH",
            "HOME",
            "OPENAI_API_KEY_ID",
            "TOKENIZERS_PARALLELISM",
            "LANG",
        ] {
            assert!(!is_secret_name(no), "{no}");
        }
    }
}
