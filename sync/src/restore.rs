//! Restore: the newest manifest into an empty folder, every checksum verified, all or
//! nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use toolbox_host::Dir;

use crate::manifest::{check_path, is_sha256, FileEntry, CHUNK};
use crate::store::{SessionStore, StateStore, PARALLEL};
use crate::{sha256_hex, snapshot, SyncError};

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Files written.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The epoch of the session server that wrote the manifest (0 when there was none).
    pub from_epoch: u64,
    /// The turn that was running at that sync, which the resumed session server ends as
    /// interrupted.
    pub open_turn: Option<String>,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
}

impl SessionStore {
    /// Writes the files of the manifest HEAD named when this session server claimed its epoch
    /// into `root`, which must be empty (it is made if missing). Every blob's size and SHA-256
    /// is checked before it is written; on any failure (a blob missing or corrupt, a path
    /// that is not a plain relative path) everything written is removed again and the error
    /// says which file and why: a partial restore is never left to be served.
    ///
    /// A session with no manifest yet restores nothing (a first start).
    pub async fn restore_into(&mut self, root: &Path) -> Result<RestoreReport, SyncError> {
        let started = Instant::now();
        let Some(manifest) = self.manifest.clone() else {
            return Ok(RestoreReport::default());
        };
        std::fs::create_dir_all(root)
            .with_context(|| format!("cannot make the workspace {}", root.display()))?;
        let mut listing =
            std::fs::read_dir(root).with_context(|| format!("cannot list {}", root.display()))?;
        if listing.next().is_some() {
            return Err(anyhow!(
                "refusing to restore session {} into {}: the folder is not empty (resume into \
                 an empty folder)",
                self.session,
                root.display()
            )
            .into());
        }
        let corrupt = |why: String| SyncError::Corrupt {
            session: self.session.to_string(),
            why,
        };
        for file in &manifest.files {
            check_path(&file.path).map_err(&corrupt)?;
            if !file.blobs().into_iter().all(is_sha256) || !is_sha256(&file.sha256) {
                return Err(corrupt(format!(
                    "{}: a checksum in its entry is not a SHA-256",
                    file.path
                )));
            }
            if file.chunks.is_empty() && file.size > CHUNK as u64 {
                return Err(corrupt(format!(
                    "{}: {} bytes listed as one blob, but a file over {CHUNK} bytes is stored \
                     in pieces",
                    file.path, file.size
                )));
            }
            let pieces = file.size.div_ceil(CHUNK as u64);
            if !file.chunks.is_empty()
                && (file.size <= CHUNK as u64 || file.chunks.len() as u64 != pieces)
            {
                return Err(corrupt(format!(
                    "{}: {} pieces listed for {} bytes",
                    file.path,
                    file.chunks.len(),
                    file.size
                )));
            }
        }
        // The disk must hold it all, and the claim is checked before a byte is fetched (a
        // manifest may say anything: 64 GiB in one file).
        let needed: u64 = manifest
            .files
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.size));
        if let Some(free) = free_bytes(root) {
            if needed > free {
                return Err(anyhow!(
                    "refusing to restore session {}: its files need {needed} bytes and {} has \
                     {free} free",
                    self.session,
                    root.display()
                )
                .into());
            }
        }
        let store = self.store.clone();
        let session = self.session.to_string();
        // At most this many files at once, each one piece (at most CHUNK bytes) in memory at
        // a time: the bytes in flight stay under PARALLEL * 2 * CHUNK.
        let mut fetched = futures_util::stream::iter(manifest.files.iter().enumerate())
            .map(|(n, file)| {
                let store = store.clone();
                let session = session.clone();
                let root = root.to_path_buf();
                async move { (file, fetch_into(&store, &session, file, &root, n).await) }
            })
            .buffer_unordered(PARALLEL * 2);
        let mut report = RestoreReport {
            from_epoch: manifest.epoch,
            open_turn: manifest.open_turn.clone(),
            ..Default::default()
        };
        let mut failure: Option<SyncError> = None;
        while let Some((file, got)) = fetched.next().await {
            if let Err(e) = got {
                failure = Some(e);
                break;
            }
            report.files += 1;
            report.bytes += file.size;
        }
        // Dropping the stream drops every fetch in flight, and with each its temporary file.
        drop(fetched);
        if let Some(failure) = failure {
            empty_folder(root);
            return Err(failure);
        }
        // What was just written is what the manifest says: the next sync reads none of it.
        let rules = self.rules.clone();
        let root_path = root.to_path_buf();
        let walked = tokio::task::spawn_blocking(move || {
            let dir = Dir::open_path(&root_path)?;
            snapshot::walk(&dir, &rules)
        })
        .await
        .map_err(|e| anyhow!("the walk stopped: {e}"))??;
        let by_path: std::collections::HashMap<&str, &FileEntry> = manifest
            .files
            .iter()
            .map(|f| (f.path.as_str(), f))
            .collect();
        for found in walked.files {
            if let Some(entry) = by_path.get(found.rel.as_str()) {
                self.seen.insert(found.rel, (found.key, (*entry).clone()));
            }
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }
}

/// Fetches `file` into its place beneath `root`: each blob (the whole file, or its pieces
/// in order) is read with its size checked first, hashed and appended to a temporary file
/// beside the final name; the whole is checked, then renamed into place (never over
/// anything). A failure removes the temporary file.
async fn fetch_into(
    store: &StateStore,
    session: &str,
    file: &FileEntry,
    root: &Path,
    n: usize,
) -> Result<(), SyncError> {
    let corrupt = |why: String| SyncError::Corrupt {
        session: session.to_string(),
        why,
    };
    let path = root.join(&file.path);
    let parent = path
        .parent()
        .ok_or_else(|| corrupt(format!("{}: no folder to put it in", file.path)))?;
    std::fs::create_dir_all(parent)
        .map_err(|e| corrupt(format!("{}: cannot make its folder: {e}", file.path)))?;
    let part = parent.join(format!(".toolbox-restore-{}-{n}.part", std::process::id()));
    let mut temp = TempFile::create(&part)
        .map_err(|e| corrupt(format!("{}: cannot write it: {e}", file.path)))?;
    let blobs = file.blobs();
    let mut whole = ring::digest::Context::new(&ring::digest::SHA256);
    for (i, sha) in blobs.iter().enumerate() {
        let expected = if blobs.len() == 1 {
            file.size
        } else if i + 1 < blobs.len() {
            CHUNK as u64
        } else {
            file.size - CHUNK as u64 * (blobs.len() as u64 - 1)
        };
        let bytes = store
            .get(&store.blob_key(sha), expected)
            .await
            .map_err(|e| {
                corrupt(format!(
                    "{}: its blob {sha} is not the {expected} bytes the manifest says ({e})",
                    file.path
                ))
            })?
            .ok_or_else(|| {
                corrupt(format!(
                    "{}: its blob {sha} is missing from the store",
                    file.path
                ))
            })?;
        if bytes.len() as u64 != expected {
            return Err(corrupt(format!(
                "{}: its blob {sha} has {} bytes, the manifest says {expected}",
                file.path,
                bytes.len()
            )));
        }
        let got = sha256_hex(&bytes);
        if got != *sha {
            return Err(corrupt(format!(
                "{}: its blob {sha} has checksum {got}: the stored content is damaged",
                file.path
            )));
        }
        whole.update(&bytes);
        temp.file
            .write_all(&bytes)
            .map_err(|e| corrupt(format!("{}: cannot write it: {e}", file.path)))?;
    }
    let sum = crate::hex_of(whole.finish().as_ref());
    if blobs.len() > 1 && sum != file.sha256 {
        return Err(corrupt(format!(
            "{}: its pieces do not add up to its checksum {}: the stored content is damaged",
            file.path, file.sha256
        )));
    }
    if file.executable {
        temp.file
            .set_permissions(std::fs::Permissions::from_mode(0o755))
            .map_err(|e| corrupt(format!("{}: cannot write it: {e}", file.path)))?;
    }
    temp.keep_as(&path)
        .map_err(|e| corrupt(format!("{}: cannot write it: {e}", file.path)))
}

/// A temporary file that is removed unless [`TempFile::keep_as`] renames it into place.
struct TempFile {
    path: Option<std::path::PathBuf>,
    file: std::fs::File,
}

impl TempFile {
    fn create(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)?;
        Ok(TempFile {
            path: Some(path.to_path_buf()),
            file,
        })
    }

    /// Renames the file to `to`, which must not exist.
    fn keep_as(mut self, to: &Path) -> std::io::Result<()> {
        let from = self.path.take().expect("kept once");
        let renamed = rustix::fs::renameat_with(
            rustix::fs::CWD,
            &from,
            rustix::fs::CWD,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        );
        if let Err(e) = renamed {
            let _ = std::fs::remove_file(&from);
            return Err(e.into());
        }
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The bytes free for this user on the file system of `dir` (or its nearest existing
/// parent), if it can be asked.
fn free_bytes(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Removes everything in `root` (a failed restore's partial files).
fn empty_folder(root: &Path) {
    if let Ok(listing) = std::fs::read_dir(root) {
        for entry in listing.flatten() {
            let path = entry.path();
            let _ = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
        }
    }
}
