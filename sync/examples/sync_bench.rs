//! Figures for docs/scale-out.md (run by bench/sync.sh): per workspace shape, the first sync,
//! a sync after a one-file change, a sync with no change, and a restore into an empty
//! folder, against a local store. Prints figures, not verdicts.

use std::path::Path;
use std::time::Instant;

use toolbox_core::SessionId;
use toolbox_sync::{SessionStore, StateStore, StoreRules};

fn fill(root: &Path, files: usize, size: usize) {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / 100));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bytes = vec![0u8; size];
        for chunk in bytes.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let n = chunk.len();
            chunk.copy_from_slice(&seed.to_le_bytes()[..n]);
        }
        std::fs::write(dir.join(format!("f{i:05}.bin")), bytes).unwrap();
    }
}

#[tokio::main]
async fn main() {
    let shapes: [(&str, usize, usize); 3] = [
        ("1 MB (16 x 64 KiB)", 16, 64 * 1024),
        ("100 MB (100 x 1 MiB)", 100, 1024 * 1024),
        ("10,000 small files (10,000 x 1 KiB)", 10_000, 1024),
    ];
    println!(
        "profile: {}",
        if cfg!(debug_assertions) {
            "dev"
        } else {
            "release"
        }
    );
    for (name, files, size) in shapes {
        let top = tempfile::tempdir().unwrap();
        let (store_dir, ws, elsewhere) = (
            top.path().join("store"),
            top.path().join("ws"),
            top.path().join("b"),
        );
        std::fs::create_dir_all(&ws).unwrap();
        fill(&ws, files, size);
        let store = StateStore::open(&format!("file://{}", store_dir.display())).unwrap();
        let sid = SessionId::parse("bench").unwrap();
        let mut server = SessionStore::claim(store.clone(), sid.clone(), 1, StoreRules::default())
            .await
            .unwrap();
        let first = server.sync(&ws, None).await.unwrap();
        let quiet = server.sync(&ws, None).await.unwrap();
        let changed = ws.join("d000/f00000.bin");
        let mut bytes = std::fs::read(&changed).unwrap();
        bytes[0] ^= 0xff;
        std::fs::write(&changed, &bytes).unwrap();
        let one = server.sync(&ws, None).await.unwrap();
        let started = Instant::now();
        let mut next = SessionStore::claim(store, sid, 2, StoreRules::default())
            .await
            .unwrap();
        let restored = next.restore_into(&elsewhere).await.unwrap();
        let restore_ms = started.elapsed().as_millis();
        println!("{name}");
        println!(
            "  first sync:        {} files, {} bytes uploaded, {} ms",
            first.files, first.uploaded_bytes, first.elapsed_ms
        );
        println!(
            "  no change:         {} bytes uploaded, moved HEAD {}, {} ms",
            quiet.uploaded_bytes, quiet.moved_head, quiet.elapsed_ms
        );
        println!(
            "  one-file change:   {} blob(s), {} bytes + manifest {} bytes, {} ms",
            one.uploaded_blobs, one.uploaded_bytes, one.manifest_bytes, one.elapsed_ms
        );
        println!(
            "  restore (claim + fetch + verify + write): {} files, {} bytes, {} ms",
            restored.files, restored.bytes, restore_ms
        );
        println!("  worst-case loss on kill -9: writes of the last --sync-every (10 s) + {} ms of sync, plus the running call", one.elapsed_ms);
    }
}
