//! Restore: the newest manifest into an empty folder, every checksum verified, all or
//! nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context};
use futures_util::StreamExt;
use toolbox_host::Dir;

use crate::manifest::{check_path, is_sha256};
use crate::store::{SessionStore, PARALLEL};
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
            if !is_sha256(&file.sha256) {
                return Err(corrupt(format!(
                    "{}: {:?} is not a SHA-256",
                    file.path, file.sha256
                )));
            }
        }
        let store = self.store.clone();
        let mut fetched = futures_util::stream::iter(manifest.files.iter())
            .map(|file| {
                let store = store.clone();
                async move {
                    let got = store.get(&store.blob_key(&file.sha256)).await;
                    (file, got)
                }
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
                Ok(Some(bytes)) => bytes,
                Ok(None) => {
                    failure = Some(corrupt(format!(
                        "{}: its blob {} is missing from the store",
                        file.path, file.sha256
                    )));
                    break;
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if bytes.len() as u64 != file.size {
                failure = Some(corrupt(format!(
                    "{}: its blob {} has {} bytes, the manifest says {}",
                    file.path,
                    file.sha256,
                    bytes.len(),
                    file.size
                )));
                break;
            }
            let sha = sha256_hex(&bytes);
            if sha != file.sha256 {
                failure = Some(corrupt(format!(
                    "{}: its blob {} has checksum {sha}: the stored content is damaged",
                    file.path, file.sha256
                )));
                break;
            }
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
        let by_path: std::collections::HashMap<&str, (&str, u64)> = manifest
            .files
            .iter()
            .map(|f| (f.path.as_str(), (f.sha256.as_str(), f.size)))
            .collect();
        for found in walked.files {
            if let Some((sha, size)) = by_path.get(found.rel.as_str()) {
                self.seen
                    .insert(found.rel, (found.key, sha.to_string(), *size));
            }
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }
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
