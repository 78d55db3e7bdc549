//! The store itself, epochs, the HEAD chain and incremental sync.

use std::collections::{HashMap, HashSet};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use toolbox_core::SessionId;
use toolbox_host::Dir;

use crate::manifest::{FileEntry, Manifest, CHUNK, VERSION};
use crate::snapshot::{self, StatKey, StoreRules};
use crate::Epoch;
use crate::{sha256_hex, SyncError};

/// How many files a sync reads and uploads at once, and a restore fetches at once.
pub(crate) const PARALLEL: usize = 8;
/// The most a head may hold (a few numbers and a key).
const MAX_HEAD_BYTES: u64 = 64 * 1024;
/// The most a manifest may hold (about a million files).
const MAX_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// A state store: a local folder or an S3 bucket and prefix.
#[derive(Clone)]
pub struct StateStore {
    pub(crate) inner: Arc<dyn ObjectStore>,
    prefix: String,
    url: String,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("url", &self.url)
            .finish()
    }
}

impl StateStore {
    /// Opens the store at `url`: `file:///absolute/folder` (made if missing) or
    /// `s3://bucket/prefix`, configured from the usual `AWS_*` variables (`AWS_REGION`,
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`
    /// for a plain-HTTP endpoint such as a local test server).
    pub fn open(url: &str) -> Result<Self, SyncError> {
        let parsed = url::Url::parse(url).map_err(|e| {
            anyhow!(
                "--state-store {url:?}: not a URL ({e}); use file:///folder or s3://bucket/prefix"
            )
        })?;
        match parsed.scheme() {
            "file" => {
                let folder: PathBuf = parsed.to_file_path().map_err(|()| {
                    anyhow!("--state-store {url:?}: a file:// URL needs an absolute local path")
                })?;
                std::fs::create_dir_all(&folder).with_context(|| {
                    format!("cannot make the store folder {}", folder.display())
                })?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(&folder)?;
                Ok(StateStore {
                    inner: Arc::new(local),
                    prefix: String::new(),
                    url: url.to_string(),
                })
            }
            "s3" => {
                // reqwest is built without a crypto provider of its own: rustls gets ring's.
                let _ = rustls::crypto::ring::default_provider().install_default();
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
                let mut builder = AmazonS3Builder::from_env();
                // The binary moves these out of the environment first thing (so no tool's
                // process inherits them); toolbox's own code reads them back here.
                for (name, key) in [
                    ("AWS_ACCESS_KEY_ID", AmazonS3ConfigKey::AccessKeyId),
                    ("AWS_SECRET_ACCESS_KEY", AmazonS3ConfigKey::SecretAccessKey),
                    ("AWS_SESSION_TOKEN", AmazonS3ConfigKey::Token),
                ] {
                    if let Some(value) = toolbox_host::secrets::var(name) {
                        builder = builder.with_config(key, value);
                    }
                }
                let s3 = builder
                    .with_url(url)
                    .build()
                    .with_context(|| format!("--state-store {url:?}"))?;
                Ok(StateStore {
                    inner: Arc::new(s3),
                    prefix: parsed.path().trim_matches('/').to_string(),
                    url: url.to_string(),
                })
            }
            other => Err(anyhow!(
                "--state-store {url:?}: the scheme {other:?} is not supported; use file:///folder \
                 or s3://bucket/prefix"
            )
            .into()),
        }
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The object key of `rel` (`/`-separated) under the store's prefix.
    pub(crate) fn key(&self, rel: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(rel)
        } else {
            Path::from(format!("{}/{rel}", self.prefix))
        }
    }

    pub(crate) fn blob_key(&self, sha: &str) -> Path {
        self.key(&format!("blobs/{}/{sha}", &sha[..2]))
    }

    /// The numbers named by the objects directly under `rel` (`epochs/`, `heads/`).
    async fn numbers(&self, rel: &str) -> Result<Vec<u64>, SyncError> {
        let prefix = self.key(rel);
        let listed: Vec<_> = self.inner.list(Some(&prefix)).try_collect().await?;
        Ok(listed
            .iter()
            .filter_map(|meta| meta.location.filename()?.parse::<u64>().ok())
            .collect())
    }

    /// Writes `bytes` at `key` only if nothing is there: false when something was.
    async fn create(&self, key: &Path, bytes: Vec<u8>) -> Result<bool, SyncError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match self
            .inner
            .put_opts(key, PutPayload::from(bytes), options)
            .await
        {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The object at `key`, at most `max` bytes: its size is checked before its body is
    /// read, and the body is read only up to the limit (an object that grows meanwhile is
    /// refused too). `Ok(None)` when there is none.
    pub(crate) async fn get(&self, key: &Path, max: u64) -> Result<Option<Bytes>, SyncError> {
        let got = match self.inner.get(key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if got.meta.size > max {
            return Err(anyhow!(
                "{key} in the store has {} bytes, more than the {max} it may have",
                got.meta.size
            )
            .into());
        }
        let mut body = got.into_stream();
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            if out.len() as u64 + chunk.len() as u64 > max {
                return Err(
                    anyhow!("{key} in the store grew past the {max} bytes it may have").into(),
                );
            }
            out.extend_from_slice(&chunk);
        }
        Ok(Some(Bytes::from(out)))
    }
}

/// One entry of the HEAD chain: which manifest is the session's newest, and which epoch
/// put it there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Its place in the chain, from 1.
    pub index: u64,
    /// The epoch of the session server that wrote it.
    pub epoch: u64,
    /// The manifest's key under the store's prefix; none before the first sync.
    pub manifest: Option<String>,
    /// The manifest's SHA-256.
    pub manifest_sha256: Option<String>,
}

/// What one sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncReport {
    /// Files the manifest lists.
    pub files: usize,
    /// Their bytes.
    pub total_bytes: u64,
    /// Files read because their size, times or inode changed.
    pub read_files: usize,
    /// Blobs uploaded (content the store did not have).
    pub uploaded_blobs: usize,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// The manifest's bytes, when one was written.
    pub manifest_bytes: u64,
    /// Whether a manifest was written and HEAD moved (false: nothing changed).
    pub moved_head: bool,
    /// What was left out (links, names that are not UTF-8, files over the size limit).
    pub skipped: Vec<String>,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
}

/// A file a sync read: its place in the walk, checksum, size, its pieces' checksums (when in
/// pieces), and the blobs and bytes uploaded (none when the store had the content).
type Stored = (usize, String, u64, Vec<String>, (usize, u64));

/// One session's state in a store, held by the session server that claimed `epoch`.
pub struct SessionStore {
    pub(crate) store: StateStore,
    pub(crate) session: SessionId,
    epoch: u64,
    pub(crate) rules: StoreRules,
    /// The head this session server wrote last.
    head: Head,
    /// The manifest that head names.
    pub(crate) manifest: Option<Manifest>,
    /// Per path: what its stat said and what was stored, when it was last read (the memory
    /// store's stored size is its backup's, not the live file's).
    pub(crate) seen: HashMap<String, (StatKey, FileEntry)>,
    /// Blobs known to be in the store.
    pub(crate) known: HashSet<String>,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("store", &self.store)
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .field("head", &self.head)
            .finish()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl SessionStore {
    fn rel(&self, tail: &str) -> String {
        format!("sessions/{}/{tail}", self.session)
    }

    /// Claims `epoch` for `session`: creates `epochs/<epoch>` if absent (refused with
    /// [`SyncError::EpochTaken`] when another session server has it, [`SyncError::Superseded`]
    /// when a newer one exists), then writes the fence: a head of this epoch on top of the chain,
    /// naming the newest manifest. From then on no older epoch can move HEAD.
    pub async fn claim(
        store: StateStore,
        session: SessionId,
        epoch: u64,
        rules: StoreRules,
    ) -> Result<SessionStore, SyncError> {
        if epoch == 0 {
            return Err(anyhow!("--epoch must be 1 or more").into());
        }
        let mut me = SessionStore {
            store,
            session,
            epoch,
            rules,
            head: Head {
                index: 0,
                epoch,
                manifest: None,
                manifest_sha256: None,
            },
            manifest: None,
            seen: HashMap::new(),
            known: HashSet::new(),
        };
        let claim =
            serde_json::to_vec(&serde_json::json!({"epoch": epoch, "claimed_ms": now_ms()}))
                .expect("JSON");
        let key = me.store.key(&me.rel(&format!("epochs/{epoch:020}")));
        if !me.store.create(&key, claim).await? {
            return Err(SyncError::EpochTaken {
                session: me.session.to_string(),
                epoch,
            });
        }
        me.check_fence().await?;
        for _ in 0..1000 {
            let latest = me.latest_head().await?;
            if let Some(head) = &latest {
                if head.epoch > epoch {
                    return Err(me.superseded(head.epoch));
                }
            }
            let fence = Head {
                index: match &latest {
                    None => 1,
                    Some(h) => h.index.checked_add(1).ok_or_else(|| {
                        anyhow!("session {}: its HEAD chain is at its end", me.session)
                    })?,
                },
                epoch,
                manifest: latest.as_ref().and_then(|h| h.manifest.clone()),
                manifest_sha256: latest.as_ref().and_then(|h| h.manifest_sha256.clone()),
            };
            if me.write_head(&fence).await? {
                me.manifest = match (&fence.manifest, &fence.manifest_sha256) {
                    (Some(key), Some(sha)) => Some(me.read_manifest(key, sha).await?),
                    _ => None,
                };
                if let Some(manifest) = &me.manifest {
                    me.known.extend(
                        manifest
                            .files
                            .iter()
                            .flat_map(|f| f.blobs())
                            .map(str::to_string),
                    );
                }
                me.head = fence;
                return Ok(me);
            }
        }
        Err(anyhow!(
            "the HEAD of session {} kept moving while epoch {epoch} was claimed",
            me.session
        )
        .into())
    }

    /// Claims `epoch` as [`SessionStore::claim`] does, or with [`Epoch::Next`] the lowest
    /// epoch above every epoch claimed so far. Two session servers racing for the next epoch
    /// each get one of their own (the later is higher and fences the earlier), so a placer need not
    /// count epochs. Gives up after 64 lost races.
    pub async fn claim_epoch(
        store: StateStore,
        session: SessionId,
        epoch: Epoch,
        rules: StoreRules,
    ) -> Result<SessionStore, SyncError> {
        if let Epoch::Exactly(n) = epoch {
            return SessionStore::claim(store, session, n, rules).await;
        }
        let prefix = format!("sessions/{session}/epochs/");
        for _ in 0..64 {
            let newest = store.numbers(&prefix).await?.into_iter().max().unwrap_or(0);
            // A planted `epochs/18446744073709551615` must not wrap the next one to 0.
            let next = newest.checked_add(1).ok_or_else(|| {
                anyhow!(
                    "session {session}: epoch {newest} is claimed in the store, the highest \
                     there is, so no next epoch exists; the store is damaged or was written \
                     by someone else (remove that epoch's file if it is not yours)"
                )
            })?;
            match SessionStore::claim(store.clone(), session.clone(), next, rules.clone()).await {
                // Another session server took it, or a newer one, between the listing and the
                // claim.
                Err(SyncError::EpochTaken { .. }) | Err(SyncError::Superseded { .. }) => continue,
                other => return other,
            }
        }
        Err(anyhow!("session {session}: lost the race for the next epoch 64 times").into())
    }

    /// The epoch this session server holds.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The session.
    pub fn session(&self) -> &SessionId {
        &self.session
    }

    /// The head this session server wrote last.
    pub fn head(&self) -> &Head {
        &self.head
    }

    /// The manifest HEAD names, as this session server last wrote or restored it.
    pub fn manifest(&self) -> Option<&Manifest> {
        self.manifest.as_ref()
    }

    fn superseded(&self, newer: u64) -> SyncError {
        SyncError::Superseded {
            session: self.session.to_string(),
            epoch: self.epoch,
            newer,
        }
    }

    /// [`SyncError::Superseded`] when a newer epoch has claimed the session.
    pub async fn check_fence(&self) -> Result<(), SyncError> {
        let newest = self
            .store
            .numbers(&self.rel("epochs/"))
            .await?
            .into_iter()
            .max()
            .unwrap_or(0);
        if newest > self.epoch {
            return Err(self.superseded(newest));
        }
        Ok(())
    }

    /// The newest head of the chain, if any.
    pub async fn latest_head(&self) -> Result<Option<Head>, SyncError> {
        let Some(index) = self
            .store
            .numbers(&self.rel("heads/"))
            .await?
            .into_iter()
            .max()
        else {
            return Ok(None);
        };
        let key = self.store.key(&self.rel(&format!("heads/{index:020}")));
        let bytes = self
            .store
            .get(&key, MAX_HEAD_BYTES)
            .await?
            .ok_or_else(|| anyhow!("head {index} of session {} vanished", self.session))?;
        let head: Head = serde_json::from_slice(&bytes).map_err(|e| SyncError::Corrupt {
            session: self.session.to_string(),
            why: format!("head {index} does not parse: {e}"),
        })?;
        if head.index != index {
            return Err(SyncError::Corrupt {
                session: self.session.to_string(),
                why: format!("head {index} says it is head {}", head.index),
            });
        }
        Ok(Some(head))
    }

    /// Creates `head` if its place in the chain is free: the compare-and-swap of HEAD.
    async fn write_head(&self, head: &Head) -> Result<bool, SyncError> {
        let key = self
            .store
            .key(&self.rel(&format!("heads/{:020}", head.index)));
        self.store
            .create(&key, serde_json::to_vec(head).expect("JSON"))
            .await
    }

    pub(crate) async fn read_manifest(&self, key: &str, sha: &str) -> Result<Manifest, SyncError> {
        let corrupt = |why: String| SyncError::Corrupt {
            session: self.session.to_string(),
            why,
        };
        let bytes = self
            .store
            .get(&self.store.key(key), MAX_MANIFEST_BYTES)
            .await?
            .ok_or_else(|| corrupt(format!("the manifest {key} is missing")))?;
        let got = sha256_hex(&bytes);
        if got != sha {
            return Err(corrupt(format!(
                "the manifest {key} has checksum {got}, HEAD says {sha}"
            )));
        }
        let manifest: Manifest = serde_json::from_slice(&bytes)
            .map_err(|e| corrupt(format!("the manifest {key} does not parse: {e}")))?;
        if manifest.version != VERSION || manifest.session != self.session.as_str() {
            return Err(corrupt(format!(
                "the manifest {key} is of version {} and session {:?}",
                manifest.version, manifest.session
            )));
        }
        Ok(manifest)
    }

    /// Stores what changed in the workspace at `root` since the last sync, and moves HEAD to
    /// a manifest of everything stored. Unchanged files (same size, times and inode) are not
    /// read again, and content the store has is not uploaded again; when nothing changed,
    /// nothing is written. `open_turn` is the turn running now, if any.
    ///
    /// Fails with [`SyncError::Superseded`] when a newer epoch has claimed the session: then
    /// HEAD was not moved, and this session server must stop.
    pub async fn sync(
        &mut self,
        root: &FsPath,
        open_turn: Option<String>,
    ) -> Result<SyncReport, SyncError> {
        let started = Instant::now();
        self.check_fence().await?;
        let root_path = root.to_path_buf();
        let rules = self.rules.clone();
        let (dir, walked) = tokio::task::spawn_blocking(move || {
            let dir = Dir::open_path(&root_path)
                .with_context(|| format!("cannot open the workspace {}", root_path.display()))?;
            let walked = snapshot::walk(&dir, &rules)?;
            anyhow::Ok((Arc::new(dir), walked))
        })
        .await
        .map_err(|e| anyhow!("the walk stopped: {e}"))??;
        let mut report = SyncReport {
            skipped: walked.skipped,
            ..Default::default()
        };
        let mut entries: Vec<Option<FileEntry>> = vec![None; walked.files.len()];
        let mut to_read = Vec::new();
        for (i, found) in walked.files.iter().enumerate() {
            match self.seen.get(&found.rel) {
                Some((key, stored)) if *key == found.key => {
                    entries[i] = Some(FileEntry {
                        executable: found.executable,
                        ..stored.clone()
                    })
                }
                _ => to_read.push(i),
            }
        }
        report.read_files = to_read.len();
        let max = self.rules.max_file_bytes;
        let known = Arc::new(std::sync::Mutex::new(std::mem::take(&mut self.known)));
        let results: Vec<Result<Stored, SyncError>> =
            futures_util::stream::iter(to_read.iter().copied())
                .map(|i| {
                    let found = walked.files[i].clone();
                    let dir = dir.clone();
                    let root = root.to_path_buf();
                    let store = self.store.clone();
                    let known = known.clone();
                    async move {
                        let (bytes, sha) = tokio::task::spawn_blocking(move || {
                            let bytes = snapshot::read(&dir, &root, &found, max)?;
                            let sha = sha256_hex(&bytes);
                            anyhow::Ok((bytes, sha))
                        })
                        .await
                        .map_err(|e| anyhow!("a read stopped: {e}"))??;
                        let size = bytes.len() as u64;
                        let bytes = Bytes::from(bytes);
                        let pieces: Vec<Bytes> = if bytes.len() > CHUNK {
                            (0..bytes.len())
                                .step_by(CHUNK)
                                .map(|at| bytes.slice(at..(at + CHUNK).min(bytes.len())))
                                .collect()
                        } else {
                            vec![bytes]
                        };
                        let mut chunks = Vec::new();
                        let mut uploaded = (0, 0);
                        for piece in pieces {
                            let piece_sha = if chunks.is_empty() && piece.len() as u64 == size {
                                sha.clone()
                            } else {
                                sha256_hex(&piece)
                            };
                            if size as usize > CHUNK {
                                chunks.push(piece_sha.clone());
                            }
                            let fresh = !known
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .contains(&piece_sha);
                            if !fresh {
                                continue;
                            }
                            let key = store.blob_key(&piece_sha);
                            let there = match store.inner.head(&key).await {
                                Ok(meta) => meta.size == piece.len() as u64,
                                Err(object_store::Error::NotFound { .. }) => false,
                                Err(e) => return Err(SyncError::from(e)),
                            };
                            if !there {
                                uploaded.0 += 1;
                                uploaded.1 += piece.len() as u64;
                                store.inner.put(&key, PutPayload::from(piece)).await?;
                            }
                            known
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .insert(piece_sha);
                        }
                        Ok::<_, SyncError>((i, sha, size, chunks, uploaded))
                    }
                })
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
        self.known = std::mem::take(&mut *known.lock().unwrap_or_else(|e| e.into_inner()));
        for result in results {
            let (i, sha, size, chunks, (blobs, bytes)) = result?;
            let found = &walked.files[i];
            report.uploaded_blobs += blobs;
            report.uploaded_bytes += bytes;
            let entry = FileEntry {
                path: found.rel.clone(),
                // The memory store's size is its backup's, not the live file's.
                size,
                sha256: sha,
                executable: found.executable,
                chunks,
            };
            self.seen
                .insert(found.rel.clone(), (found.key, entry.clone()));
            entries[i] = Some(entry);
        }
        let files: Vec<FileEntry> = entries.into_iter().flatten().collect();
        let live: HashSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
        self.seen.retain(|path, _| live.contains(path.as_str()));
        let manifest = Manifest {
            version: VERSION,
            session: self.session.to_string(),
            epoch: self.epoch,
            created_ms: now_ms(),
            open_turn,
            files,
        };
        report.files = manifest.files.len();
        report.total_bytes = manifest.total_bytes();
        if self
            .manifest
            .as_ref()
            .is_some_and(|old| old.same_files(&manifest))
        {
            report.elapsed_ms = started.elapsed().as_millis() as u64;
            return Ok(report);
        }
        let index = self.head.index + 1;
        let bytes = serde_json::to_vec(&manifest).expect("JSON");
        let sha = sha256_hex(&bytes);
        let key = self.rel(&format!("manifests/{:020}-{index:020}.json", self.epoch));
        report.manifest_bytes = bytes.len() as u64;
        self.store
            .inner
            .put(&self.store.key(&key), PutPayload::from(bytes))
            .await?;
        let head = Head {
            index,
            epoch: self.epoch,
            manifest: Some(key),
            manifest_sha256: Some(sha),
        };
        if !self.write_head(&head).await? {
            let newer = self.latest_head().await?.map_or(0, |h| h.epoch);
            if newer > self.epoch {
                return Err(self.superseded(newer));
            }
            self.check_fence().await?;
            return Err(anyhow!(
                "head {index} of session {} was written by another session server of epoch \
                 {newer}",
                self.session
            )
            .into());
        }
        self.head = head;
        self.manifest = Some(manifest);
        report.moved_head = true;
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }
}
