//! Integrity for state that lives where a tool could write it.
//!
//! A session's review state (a person confirmed the plan) is kept in the workspace, beside
//! files that Python, a shell command or a file tool can reach. What a model can write, it
//! can forge, so such a record counts only when it carries a seal: an HMAC-SHA256 under a key
//! that never enters the workspace nor a child's environment. A record without a valid seal
//! is read as if it were never written.
//!
//! The key, first found wins:
//! 1. `TOOLBOX_REVIEW_SECRET`, the operator's (session servers of one session on many
//!    machines share it, so a confirmation survives a move). The name matches the secret
//!    patterns, so it is taken out of the environment before any child starts
//!    ([`crate::secrets`]).
//! 2. A key file of the user's, made once: `$XDG_STATE_HOME/toolbox/review.key`, else
//!    `~/.local/state/toolbox/review.key` (32 random bytes, mode 0600, in a 0700 folder,
//!    never through a link). It is not used for a workspace that contains it.
//! 3. A key of this process alone: seals hold until toolbox exits, and a restarted toolbox
//!    reads every earlier seal as missing (a person is asked again). Never weaker, only less
//!    convenient.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// The operator's variable holding the key (any length; at least 16 bytes are required).
pub const SECRET_VAR: &str = "TOOLBOX_REVIEW_SECRET";
const KEY_FILE: &str = "review.key";
const KEY_BYTES: usize = 32;

/// Where the key in use came from, for `session__info` and the docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    /// `TOOLBOX_REVIEW_SECRET`.
    Operator,
    /// The user's key file.
    UserFile(PathBuf),
    /// This process only.
    Process,
}

impl std::fmt::Display for KeyOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyOrigin::Operator => write!(f, "the operator's {SECRET_VAR}"),
            KeyOrigin::UserFile(p) => write!(f, "the key file {}", p.display()),
            KeyOrigin::Process => f.write_str(
                "a key of this process only (seals do not survive a restart: set \
                 TOOLBOX_REVIEW_SECRET, or let toolbox keep ~/.local/state/toolbox/review.key)",
            ),
        }
    }
}

/// A key that seals records: [`Seal::sign`] and [`Seal::verify`].
pub struct Seal {
    key: hmac::Key,
    origin: KeyOrigin,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("origin", &self.origin)
            .finish()
    }
}

impl Seal {
    /// A seal with a given key (tests, and programs that manage their own).
    pub fn from_key(key: &[u8], origin: KeyOrigin) -> Self {
        Seal {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
            origin,
        }
    }

    /// Where the key came from.
    pub fn origin(&self) -> &KeyOrigin {
        &self.origin
    }

    /// The seal of `parts` for `purpose`, as 64 hex digits. Each part is length-prefixed, so
    /// no two different lists of parts are signed as the same bytes.
    pub fn sign(&self, purpose: &str, parts: &[&[u8]]) -> String {
        let tag = hmac::sign(&self.key, &framed(purpose, parts));
        hex(tag.as_ref())
    }

    /// Whether `seal` is the seal of `parts` for `purpose` (compared in constant time).
    pub fn verify(&self, purpose: &str, parts: &[&[u8]], seal: &str) -> bool {
        let Some(tag) = unhex(seal) else {
            return false;
        };
        hmac::verify(&self.key, &framed(purpose, parts), &tag).is_ok()
    }
}

fn framed(purpose: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + parts.iter().map(|p| p.len() + 8).sum::<usize>());
    for part in std::iter::once(purpose.as_bytes()).chain(parts.iter().copied()) {
        out.extend_from_slice(&(part.len() as u64).to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..32)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// SHA-256 of `parts` (length-prefixed), as 64 hex digits: what a seal binds a record to.
pub fn digest(parts: &[&[u8]]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, &framed("digest", parts)).as_ref())
}

/// The seal for records of the workspace at `root`: the operator's key, else the user's key
/// file unless it lies inside `root`, else this process's key. Loaded once per process.
pub fn for_workspace(root: &Path) -> &'static Seal {
    static OPERATOR: OnceLock<Option<Seal>> = OnceLock::new();
    static USER: OnceLock<Option<(PathBuf, Seal)>> = OnceLock::new();
    static PROCESS: OnceLock<Seal> = OnceLock::new();
    let operator = OPERATOR.get_or_init(|| {
        let secret = crate::secrets::var(SECRET_VAR)?;
        if secret.len() < 16 {
            tracing::warn!(
                "{SECRET_VAR} is shorter than 16 bytes and is not used: review seals use \
                 another key"
            );
            return None;
        }
        Some(Seal::from_key(secret.as_bytes(), KeyOrigin::Operator))
    });
    if let Some(seal) = operator {
        return seal;
    }
    let user = USER.get_or_init(|| match user_key_file() {
        Some(path) => match load_or_create(&path) {
            Ok(key) => Some((
                path.clone(),
                Seal::from_key(&key, KeyOrigin::UserFile(path)),
            )),
            Err(e) => {
                tracing::warn!(
                    "the review key file {} cannot be used ({e}); review seals last as long \
                     as this process",
                    path.display()
                );
                None
            }
        },
        None => None,
    });
    if let Some((path, seal)) = user {
        let inside = std::fs::canonicalize(root).is_ok_and(|root| path.starts_with(&root));
        if !inside {
            return seal;
        }
    }
    PROCESS.get_or_init(|| {
        let mut key = [0u8; KEY_BYTES];
        SystemRandom::new()
            .fill(&mut key)
            .expect("the system's random source works");
        Seal::from_key(&key, KeyOrigin::Process)
    })
}

/// `$XDG_STATE_HOME/toolbox/review.key`, else `$HOME/.local/state/toolbox/review.key`;
/// `None` without either (the folder is canonicalised when it exists).
fn user_key_file() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
            if !Path::new(&home).is_absolute() {
                return None;
            }
            Path::new(&home).join(".local/state")
        }
    };
    let base = std::fs::canonicalize(&base).unwrap_or(base);
    Some(base.join("toolbox").join(KEY_FILE))
}

/// Reads the key file, or makes it: 32 random bytes written to a fresh file that is then
/// linked into place, so two processes starting at once agree on one key. The file must be
/// a regular file of this user's, not a link, readable by no one else.
fn load_or_create(path: &Path) -> std::io::Result<Vec<u8>> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the key file has no folder"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    match read_key(path) {
        Ok(key) => return Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut key = [0u8; KEY_BYTES];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| std::io::Error::other("the system's random source failed"))?;
    let tmp = dir.join(format!(".{KEY_FILE}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    file.write_all(&key)?;
    file.sync_all()?;
    drop(file);
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key.to_vec()),
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path),
        Err(e) => Err(e),
    }
}

fn read_key(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_file() || meta.uid() != me || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} must be a regular file of this user's that no one else can read (mode 0600)",
            show(path.as_os_str())
        )));
    }
    let mut key = Vec::new();
    file.take(4096).read_to_end(&mut key)?;
    if key.len() < 16 {
        return Err(std::io::Error::other(format!(
            "{} holds fewer than 16 bytes",
            show(path.as_os_str())
        )));
    }
    Ok(key)
}

fn show(path: &OsStr) -> String {
    String::from_utf8_lossy(path.as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_verifies_only_its_own_parts_and_purpose() {
        let seal = Seal::from_key(b"0123456789abcdef0123", KeyOrigin::Process);
        let tag = seal.sign("review", &[b"s1", b"plan", b"confirmed"]);
        assert_eq!(tag.len(), 64);
        assert!(seal.verify("review", &[b"s1", b"plan", b"confirmed"], &tag));
        assert!(!seal.verify("review", &[b"s1", b"plan", b"draft"], &tag));
        assert!(!seal.verify("other", &[b"s1", b"plan", b"confirmed"], &tag));
        // Parts are framed: moving a byte from one part to the next changes the seal.
        assert!(!seal.verify("review", &[b"s1p", b"lan", b"confirmed"], &tag));
        assert!(!seal.verify("review", &[b"s1", b"plan", b"confirmed"], "00"));
        assert!(!seal.verify("review", &[b"s1", b"plan", b"confirmed"], &"0".repeat(64)));
        let other = Seal::from_key(b"another key entirely", KeyOrigin::Process);
        assert!(!other.verify("review", &[b"s1", b"plan", b"confirmed"], &tag));
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
    }

    #[test]
    fn the_key_file_is_made_once_private_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/toolbox/review.key");
        let first = load_or_create(&path).unwrap();
        assert_eq!(first.len(), KEY_BYTES);
        assert_eq!(load_or_create(&path).unwrap(), first, "the same key again");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let folder = std::fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(folder.permissions().mode() & 0o777, 0o700);
        // A key others can read is refused, as is a link in its place.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create(&path)
            .unwrap_err()
            .to_string()
            .contains("0600"));
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("planted");
        std::fs::write(&elsewhere, [7u8; 32]).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(load_or_create(&path).is_err());
    }
}
