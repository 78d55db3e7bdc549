//! Restore: the newest manifest into an empty folder, every checksum verified, all or
//! nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use toolbox_host::Dir;

use bytes::Bytes;

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
    /// The epoch of the host that wrote the manifest (0 when there was none).
    pub from_epoch: u64,
    /// The turn that was running at that sync, which the resumed host ends as interrupted.
    pub open_turn: Option<String>,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
}

impl SessionStore {
    /// Writes the files of the manifest HEAD named when this host claimed its epoch into
    /// `root`, which must be empty (it is made if missing). Every blob's size and SHA-256
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
            let pieces = (file.size as usize).div_ceil(CHUNK);
            if !file.chunks.is_empty()
                && (file.size as usize <= CHUNK || file.chunks.len() != pieces)
            {
                return Err(corrupt(format!(
                    "{}: {} pieces listed for {} bytes",
                    file.path,
                    file.chunks.len(),
                    file.size
                )));
            }
        }
        let store = self.store.clone();
        let session = self.session.to_string();
        let mut fetched = futures_util::stream::iter(manifest.files.iter())
            .map(|file| {
                let store = store.clone();
                let session = session.clone();
                async move { (file, fetch(&store, &session, file).await) }
            })
            .buffer_unordered(PARALLEL * 2);
        let mut report = RestoreReport {
            from_epoch: manifest.epoch,
            open_turn: manifest.open_turn.clone(),
            ..Default::default()
        };
        let mut failure: Option<SyncError> = None;
        while let Some((file, got)) = fetched.next().await {
            let bytes = match got {
                Ok(bytes) => bytes,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if let Err(e) = write_new(root, &file.path, &bytes, file.executable) {
                failure = Some(corrupt(format!("{}: cannot write it: {e}", file.path)));
                break;
            }
            report.files += 1;
            report.bytes += file.size;
        }
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

/// The content of `file`: its blob, or its pieces in order, each checked against its size
/// and SHA-256, then the whole.
async fn fetch(store: &StateStore, session: &str, file: &FileEntry) -> Result<Bytes, SyncError> {
    let corrupt = |why: String| SyncError::Corrupt {
        session: session.to_string(),
        why,
    };
    let blobs = file.blobs();
    let mut whole = Vec::with_capacity(if blobs.len() > 1 {
        file.size as usize
    } else {
        0
    });
    let mut single = None;
    for (n, sha) in blobs.iter().enumerate() {
        let bytes = store.get(&store.blob_key(sha)).await?.ok_or_else(|| {
            corrupt(format!(
                "{}: its blob {sha} is missing from the store",
                file.path
            ))
        })?;
        let expected = if blobs.len() == 1 {
            file.size
        } else if n + 1 < blobs.len() {
            CHUNK as u64
        } else {
            file.size - (CHUNK * (blobs.len() - 1)) as u64
        };
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
        if blobs.len() == 1 {
            single = Some(bytes);
        } else {
            whole.extend_from_slice(&bytes);
        }
    }
    let bytes = single.unwrap_or_else(|| Bytes::from(whole));
    if blobs.len() > 1 && sha256_hex(&bytes) != file.sha256 {
        return Err(corrupt(format!(
            "{}: its pieces do not add up to its checksum {}: the stored content is damaged",
            file.path, file.sha256
        )));
    }
    Ok(bytes)
}

/// Writes a new file at `rel` beneath `root` (a folder this restore made and nobody else
/// writes), its folders made as needed.
fn write_new(root: &Path, rel: &str, bytes: &[u8], executable: bool) -> std::io::Result<()> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&path)?;
    file.write_all(bytes)?;
    if executable {
        file.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
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
