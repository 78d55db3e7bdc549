//! The store through a local folder: round trips, increments, epochs, damage.
//!
//! Every test starts from a [`Fixture`]: a local store and a workspace, with the claims,
//! syncs and restores the tests repeat. It lives here, not in toolbox-tests: it is built on
//! this crate's own types (`SessionStore`, `StateStore`), and a toolbox-tests that linked
//! toolbox-sync would give these unit tests a second copy of the crate whose types are not
//! this one's.

use std::future::Future;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use toolbox_core::SessionId;

use crate::{Epoch, RestoreReport, SessionStore, StateStore, StoreRules, SyncError, SyncReport};

// The store knows a database only from a provider's declaration: these tests declare the
// memory provider's (the memory crate is not linked into them), and a second database to
// show the store names no file itself.
toolbox_host::register_state_file!("memory", ".toolbox/memory.sqlite", SqliteDatabase);
toolbox_host::register_state_file!("test", ".toolbox/deeper/notes.db", SqliteDatabase);

/// A local store (`file://` on a folder of its own) and a workspace beside it, both removed
/// when the fixture is dropped; the session is always `s1`.
struct Fixture {
    store_dir: TempDir,
    ws: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            store_dir: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
        }
    }

    /// The store's folder, which its `file://` URL names.
    fn store_dir(&self) -> &Path {
        self.store_dir.path()
    }

    /// The workspace a session server syncs.
    fn ws(&self) -> &Path {
        self.ws.path()
    }

    /// Writes `text` at `rel` in the workspace.
    fn write(&self, rel: &str, text: &str) {
        write(self.ws(), rel, text);
    }

    /// The store, opened as a session server opens it.
    fn store(&self) -> StateStore {
        StateStore::open(&format!("file://{}", self.store_dir().display())).unwrap()
    }

    /// Claims `epoch` of the session, with the default rules.
    async fn claim(&self, epoch: u64) -> Result<SessionStore, SyncError> {
        SessionStore::claim(self.store(), sid(), epoch, StoreRules::default()).await
    }

    /// Claims the lowest free epoch (`--epoch next`); the future owns what it needs, so it
    /// can be spawned.
    fn claim_next(&self) -> impl Future<Output = Result<SessionStore, SyncError>> + Send + 'static {
        SessionStore::claim_epoch(self.store(), sid(), Epoch::Next, StoreRules::default())
    }

    /// A session server that claimed `epoch` and synced the workspace once, and what that sync
    /// did.
    async fn synced(&self, epoch: u64) -> (SessionStore, SyncReport) {
        let mut server = self.claim(epoch).await.unwrap();
        let report = server.sync(self.ws(), None).await.unwrap();
        (server, report)
    }

    /// A session server that claimed `epoch` and restored the store into a new folder: it, what
    /// the restore did, and the folder.
    async fn restored(&self, epoch: u64) -> (SessionStore, RestoreReport, TempDir) {
        let target = tempfile::tempdir().unwrap();
        let mut server = self.claim(epoch).await.unwrap();
        let report = server.restore_into(target.path()).await.unwrap();
        (server, report, target)
    }

    /// Claims `epoch` and restores into `target`, which must be refused with a message
    /// containing each of `needles` and leave `target` as it was. The error.
    async fn refused_restore_into(&self, epoch: u64, target: &Path, needles: &[&str]) -> SyncError {
        let before = tree(target);
        let result = self.claim(epoch).await.unwrap().restore_into(target).await;
        let e = assert_err_contains(result, needles);
        assert_eq!(tree(target), before, "a refused restore left files behind");
        e
    }

    /// [`Fixture::refused_restore_into`] a new, empty folder: nothing may be left in it.
    async fn refused_restore(&self, epoch: u64, needles: &[&str]) -> SyncError {
        let target = tempfile::tempdir().unwrap();
        let e = self
            .refused_restore_into(epoch, target.path(), needles)
            .await;
        assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 0);
        e
    }

    /// The blob file of content `sha` in the store.
    fn blob(&self, sha: &str) -> PathBuf {
        self.store_dir().join(format!("blobs/{}/{sha}", &sha[..2]))
    }
}

fn sid() -> SessionId {
    SessionId::parse("s1").unwrap()
}

/// The error of `result`, which must be one whose message contains each of `needles`.
fn assert_err_contains<T: std::fmt::Debug>(
    result: Result<T, SyncError>,
    needles: &[&str],
) -> SyncError {
    let e = result.expect_err("an error");
    let text = e.to_string();
    for needle in needles {
        assert!(text.contains(needle), "expected {needle:?} in: {text}");
    }
    e
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Every file under `root`, with its content.
fn tree(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_sync_restores_elsewhere_and_only_changes_are_uploaded() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha");
    fx.write("src/b.py", "print('b')");
    fx.write(".toolbox/sessions/s1/messages.jsonl", "{}\n");
    fx.write("node_modules/x/y.js", "skip me");
    std::fs::set_permissions(
        fx.ws().join("src/b.py"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let (mut server, first) = fx.synced(1).await;
    assert!(first.moved_head);
    assert_eq!(
        (first.files, first.uploaded_blobs, first.read_files),
        (3, 3, 3)
    );
    let again = server.sync(fx.ws(), None).await.unwrap();
    assert!(!again.moved_head, "{again:?}");
    assert_eq!((again.read_files, again.uploaded_blobs), (0, 0));
    fx.write("a.txt", "alpha, changed");
    let one = server.sync(fx.ws(), Some("turn_9".into())).await.unwrap();
    assert!(one.moved_head);
    assert_eq!(
        (one.read_files, one.uploaded_blobs, one.uploaded_bytes),
        (1, 1, 14)
    );
    assert!(one.manifest_bytes > 0);

    let (mut next, restored, elsewhere) = fx.restored(2).await;
    assert_eq!((restored.files, restored.from_epoch), (3, 1));
    assert_eq!(restored.open_turn.as_deref(), Some("turn_9"));
    let mut expected = tree(fx.ws());
    expected.retain(|(p, _)| !p.starts_with("node_modules"));
    assert_eq!(tree(elsewhere.path()), expected);
    let mode = std::fs::metadata(elsewhere.path().join("src/b.py"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o111,
        0o111
    );
    // The restored files are known: syncing them again reads and uploads nothing.
    let after = next
        .sync(elsewhere.path(), Some("turn_9".into()))
        .await
        .unwrap();
    assert_eq!(
        (after.read_files, after.uploaded_blobs, after.moved_head),
        (0, 0, false)
    );
}

#[tokio::test]
async fn an_epoch_is_claimed_once_and_a_newer_one_fences_the_old_session_server() {
    let fx = Fixture::new();
    fx.write("a.txt", "one");
    let (mut old, _) = fx.synced(1).await;
    match fx.claim(1).await {
        Err(SyncError::EpochTaken { epoch: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    let new = fx.claim(3).await.unwrap();
    let fence = new.head().clone();
    assert_eq!(fence.epoch, 3);
    fx.write("a.txt", "late write of the old session server");
    match old.sync(fx.ws(), None).await {
        Err(SyncError::Superseded {
            epoch: 1, newer: 3, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Even past the fence check, the old session server cannot move HEAD: its next place is
    // taken.
    assert_eq!(new.latest_head().await.unwrap().unwrap(), fence);
    match fx.claim(2).await {
        Err(SyncError::Superseded { newer: 3, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn epoch_next_takes_the_lowest_free_epoch_and_racers_each_get_their_own() {
    let fx = Fixture::new();
    assert_eq!(fx.claim_next().await.unwrap().epoch(), 1);
    fx.claim(5).await.unwrap();
    assert_eq!(fx.claim_next().await.unwrap().epoch(), 6);
    // Eight session servers asking for the next epoch at once: eight different epochs above 6.
    let racers: Vec<_> = (0..8).map(|_| tokio::spawn(fx.claim_next())).collect();
    let mut won = Vec::new();
    for racer in racers {
        won.push(racer.await.unwrap().unwrap().epoch());
    }
    won.sort();
    won.dedup();
    assert_eq!(won.len(), 8, "{won:?}");
    assert!(won[0] > 6, "{won:?}");
    let newest = *won.last().unwrap();
    let latest = fx.claim(1).await;
    assert!(
        matches!(
            latest,
            Err(SyncError::EpochTaken { .. }) | Err(SyncError::Superseded { .. })
        ),
        "{latest:?}"
    );
    assert_eq!(fx.claim_next().await.unwrap().epoch(), newest + 1);
    assert_eq!("next".parse::<Epoch>(), Ok(Epoch::Next));
    assert_eq!("7".parse::<Epoch>(), Ok(Epoch::Exactly(7)));
    for bad in ["0", "", "-3", "next2", "1.5"] {
        assert!(
            bad.parse::<Epoch>().unwrap_err().contains("`next`"),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn a_corrupt_or_missing_blob_refuses_the_restore_and_leaves_nothing() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha");
    fx.write("b.txt", "beta");
    fx.synced(1).await;
    let blob = fx.blob(&crate::sha256_hex(b"beta"));
    std::fs::write(&blob, "bet4").unwrap();
    let e = fx.refused_restore(2, &["b.txt", "damaged"]).await;
    assert!(matches!(e, SyncError::Corrupt { .. }), "{e}");
    std::fs::remove_file(&blob).unwrap();
    fx.refused_restore(3, &["missing"]).await;
    // Into a folder that is not empty: refused, whatever the store holds.
    let target = tempfile::tempdir().unwrap();
    write(target.path(), "mine.txt", "x");
    fx.refused_restore_into(4, target.path(), &["not empty"])
        .await;
}

#[tokio::test]
async fn a_damaged_manifest_is_refused() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha");
    let (server, _) = fx.synced(1).await;
    let key = server.head().manifest.clone().unwrap();
    let path = fx.store_dir().join(&key);
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("a.txt", "../x");
    std::fs::write(&path, text).unwrap();
    assert_err_contains(fx.claim(2).await, &["checksum"]);
}

#[tokio::test]
async fn the_memory_store_is_copied_with_what_its_wal_holds() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws().join(".toolbox")).unwrap();
    let db = fx.ws().join(".toolbox/memory.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;
         CREATE TABLE m(v TEXT); INSERT INTO m VALUES ('remember me');",
    )
    .unwrap();
    // The row is in the -wal file, not yet in the database file.
    assert!(
        std::fs::metadata(fx.ws().join(".toolbox/memory.sqlite-wal"))
            .unwrap()
            .len()
            > 0
    );
    let (_server, report) = fx.synced(1).await;
    assert_eq!(report.files, 1, "{report:?}");
    let (_next, _, elsewhere) = fx.restored(2).await;
    assert!(!elsewhere.path().join(".toolbox/memory.sqlite-wal").exists());
    let copy = rusqlite::Connection::open(elsewhere.path().join(".toolbox/memory.sqlite")).unwrap();
    let v: String = copy.query_row("SELECT v FROM m", [], |r| r.get(0)).unwrap();
    assert_eq!(v, "remember me");
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_session_server_racing_a_claim_never_writes_past_the_fence() {
    let (mut before_fence, mut superseded) = (0, 0);
    for round in 0..30 {
        let fx = Fixture::new();
        fx.write("a.txt", "one");
        let (mut old, _) = fx.synced(1).await;
        fx.write("a.txt", &format!("racing {round}"));
        let ws = fx.ws().to_path_buf();
        let racing = tokio::spawn(async move {
            let result = old.sync(&ws, None).await;
            (result, old.head().clone())
        });
        let new = fx.claim(2).await.unwrap();
        let fence = new.head().index;
        let (result, old_head) = racing.await.unwrap();
        match result {
            // It moved HEAD before the fence: the new session server restores what it wrote.
            Ok(report) if report.moved_head => {
                assert!(old_head.index < fence, "round {round}");
                before_fence += 1;
            }
            Ok(report) => panic!("round {round}: {report:?}"),
            Err(SyncError::Superseded { newer: 2, .. }) => superseded += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        let latest = new.latest_head().await.unwrap().unwrap();
        assert_eq!((latest.index, latest.epoch), (fence, 2), "round {round}");
    }
    eprintln!("the old session server moved HEAD before the fence {before_fence} times, was superseded {superseded} times");
}

#[tokio::test]
async fn a_growing_large_file_uploads_only_its_last_piece() {
    let fx = Fixture::new();
    let chunk = crate::manifest::CHUNK;
    let mut log: Vec<u8> = (0..chunk * 2 + chunk / 2)
        .map(|i| (i % 251) as u8)
        .collect();
    std::fs::write(fx.ws().join("events.jsonl"), &log).unwrap();
    let (mut server, first) = fx.synced(1).await;
    assert_eq!(
        (first.uploaded_blobs, first.uploaded_bytes),
        (3, log.len() as u64)
    );
    log.extend_from_slice(b"one more line\n");
    std::fs::write(fx.ws().join("events.jsonl"), &log).unwrap();
    let grown = server.sync(fx.ws(), None).await.unwrap();
    assert_eq!(
        (grown.uploaded_blobs, grown.uploaded_bytes),
        (1, (chunk / 2 + 14) as u64),
        "{grown:?}"
    );
    let (next, _, elsewhere) = fx.restored(2).await;
    assert_eq!(
        std::fs::read(elsewhere.path().join("events.jsonl")).unwrap(),
        log
    );
    // A damaged piece refuses the restore.
    let piece = &next.manifest().unwrap().files[0].chunks[1];
    let path = fx.blob(piece);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[7] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    fx.refused_restore(3, &["damaged"]).await;
}

/// Rewrites the manifest HEAD names with `change`, and HEAD's checksum of it, as someone
/// with the store's credentials could.
fn forge_manifest(store_dir: &Path, change: impl FnOnce(&mut serde_json::Value)) {
    let heads = store_dir.join("sessions/s1/heads");
    let mut names: Vec<_> = std::fs::read_dir(&heads)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let head_path = names.last().unwrap().clone();
    let mut head: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&head_path).unwrap()).unwrap();
    let key = head["manifest"].as_str().unwrap().to_string();
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(store_dir.join(&key)).unwrap()).unwrap();
    change(&mut manifest);
    let bytes = serde_json::to_vec(&manifest).unwrap();
    std::fs::write(store_dir.join(&key), &bytes).unwrap();
    head["manifest_sha256"] = crate::sha256_hex(&bytes).into();
    std::fs::write(&head_path, serde_json::to_vec(&head).unwrap()).unwrap();
}

/// Issue 37, point 4: a name a model wrote (`notes\draft.md`) syncs, and every later
/// restore takes it too: sync and restore share one rule for stored paths.
#[tokio::test]
async fn a_name_that_syncs_is_a_name_that_restores() {
    let fx = Fixture::new();
    fx.write("notes\\draft.md", "draft");
    fx.write("a b/c:d?.txt", "odd");
    let long = format!("{}/x", "d".repeat(250));
    fx.write(&long, "deep");
    let (_server, report) = fx.synced(1).await;
    assert_eq!(report.files, 3, "{report:?}");
    let (_next, _, elsewhere) = fx.restored(2).await;
    assert_eq!(tree(elsewhere.path()), tree(fx.ws()));
}

/// Issue 37, point 4: restore streams each piece to a file while hashing, checks sizes
/// before reading, and leaves nothing behind on any failure: a whole-file blob over the
/// piece size, a file claiming more than the disk holds (64 GiB), a piece larger than the
/// manifest says.
#[tokio::test]
async fn hostile_sizes_in_a_manifest_are_refused_before_anything_is_read() {
    let fx = Fixture::new();
    fx.write("a.txt", "alpha");
    let big = vec![7u8; crate::manifest::CHUNK * 2 + 10];
    std::fs::write(fx.ws().join("big.bin"), &big).unwrap();
    fx.synced(1).await;
    // A 2 MiB file claimed as one blob: refused (a file over a piece is stored in pieces).
    let whole = fx.blob(&crate::sha256_hex(&big));
    std::fs::create_dir_all(whole.parent().unwrap()).unwrap();
    std::fs::write(&whole, &big).unwrap();
    forge_manifest(fx.store_dir(), |m| {
        for f in m["files"].as_array_mut().unwrap() {
            if f["path"] == "big.bin" {
                f.as_object_mut().unwrap().remove("chunks");
            }
        }
    });
    fx.refused_restore(2, &["big.bin", "pieces"]).await;
    // 64 GiB claimed: refused for the disk, before a byte is fetched.
    forge_manifest(fx.store_dir(), |m| {
        let files = m["files"].as_array_mut().unwrap();
        files.retain(|f| f["path"] != "big.bin");
        let pieces = 64 * 1024;
        let sha = crate::sha256_hex(b"alpha");
        files.push(serde_json::json!({
            "path": "huge.bin", "size": 64u64 << 30, "sha256": sha,
            "chunks": vec![sha.clone(); pieces]
        }));
    });
    fx.refused_restore(3, &["free"]).await;
}

/// Issue 37, point 4: a planted `epochs/18446744073709551615` must not make `--epoch next`
/// wrap around to 0 (or panic): it is refused, naming the epoch.
#[tokio::test]
async fn the_highest_epoch_does_not_wrap() {
    let fx = Fixture::new();
    fx.claim(1).await.unwrap();
    let planted = fx
        .store_dir()
        .join("sessions/s1/epochs/18446744073709551615");
    std::fs::write(&planted, "{}").unwrap();
    assert_err_contains(fx.claim_next().await, &["18446744073709551615"]);
}

/// Any declared database is copied through the backup, wherever it is, and its side files
/// are left out; an undeclared one is copied as plain files, `-wal` included.
#[tokio::test]
async fn a_database_is_backed_up_because_a_provider_declared_it() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.ws().join(".toolbox/deeper")).unwrap();
    let wal_db = |path: &Path| {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;
             CREATE TABLE m(v TEXT); INSERT INTO m VALUES ('kept');",
        )
        .unwrap();
        conn
    };
    let _declared = wal_db(&fx.ws().join(".toolbox/deeper/notes.db"));
    let _undeclared = wal_db(&fx.ws().join("plain.db"));
    fx.synced(1).await;
    let (_next, _, elsewhere) = fx.restored(2).await;
    let restored = elsewhere.path();
    assert!(!restored.join(".toolbox/deeper/notes.db-wal").exists());
    let copy = rusqlite::Connection::open(restored.join(".toolbox/deeper/notes.db")).unwrap();
    let v: String = copy.query_row("SELECT v FROM m", [], |r| r.get(0)).unwrap();
    assert_eq!(v, "kept");
    // Not declared: a file like any other, so its -wal file travels beside it.
    assert!(restored.join("plain.db-wal").exists());
}
