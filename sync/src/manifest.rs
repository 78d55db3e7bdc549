//! What one sync saw: every stored file with its size and checksum, and the epoch of the
//! session server that wrote it.

use serde::{Deserialize, Serialize};

/// The manifest format's version; a manifest of another version is refused on restore.
pub const VERSION: u32 = 1;

/// Files larger than this are stored in pieces of this size, each a blob of its own, so a
/// file that grows (a conversation, a trajectory, the events) re-uploads only its last piece.
pub const CHUNK: usize = 1024 * 1024;

/// One sync of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`VERSION`].
    pub version: u32,
    /// The session.
    pub session: String,
    /// The epoch of the session server that wrote it.
    pub epoch: u64,
    /// When it was written, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// The turn that was running when it was written, if any: a session server that resumes
    /// from this manifest ends that turn as interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_turn: Option<String>,
    /// Every stored file, sorted by path.
    pub files: Vec<FileEntry>,
}

/// One stored file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its path relative to the workspace root, `/`-separated, UTF-8.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its content, lowercase hex: also its blob's name.
    pub sha256: String,
    /// Whether it was executable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub executable: bool,
    /// For a file larger than [`CHUNK`]: the SHA-256 of each piece, in order (the blobs
    /// stored); empty for a file stored whole, as the blob named by `sha256`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chunks: Vec<String>,
}

impl FileEntry {
    /// The blobs that hold its content, in order.
    pub fn blobs(&self) -> Vec<&str> {
        if self.chunks.is_empty() {
            vec![self.sha256.as_str()]
        } else {
            self.chunks.iter().map(String::as_str).collect()
        }
    }
}

impl Manifest {
    /// The bytes of every file together.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Whether `other` stores exactly the same files (the epoch, time and turn aside).
    pub fn same_files(&self, other: &Manifest) -> bool {
        self.files == other.files && self.open_turn == other.open_turn
    }
}

/// The one rule for stored paths, for sync (a name that breaks it is skipped, and said so)
/// and restore (a manifest that lists one is refused): relative, `/`-separated, no empty,
/// `.` or `..` component, no NUL, at most 4096 bytes, each name at most 255. Any other byte
/// of a UTF-8 name is the file's own (a `\` is a plain character on Linux: `notes\draft.md`
/// is one name). The manifest comes from the store, which anyone with its credentials can
/// write: it is parsed like any other input.
pub(crate) fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > 4096 {
        return Err(format!("the stored path {path:?} is empty or too long"));
    }
    if path.starts_with('/') || path.contains('\0') {
        return Err(format!("the stored path {path:?} is not a relative path"));
    }
    if path.split('/').any(|part| part.len() > 255) {
        return Err(format!(
            "the stored path {path:?} has a name over 255 bytes"
        ));
    }
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err(format!(
                "the stored path {path:?} has an empty, '.' or '..' component"
            ));
        }
    }
    Ok(())
}

/// Whether `s` is 64 lowercase hex digits.
pub(crate) fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_paths_are_checked() {
        for good in [
            "a",
            "a/b.txt",
            ".toolbox/sessions/s/messages.jsonl",
            "notes\\draft.md",
        ] {
            assert!(check_path(good).is_ok(), "{good}");
        }
        for bad in ["", "/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/"] {
            assert!(check_path(bad).is_err(), "{bad}");
        }
    }
}
