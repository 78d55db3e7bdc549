//! The store and the tools on real SQLite files in temporary workspaces. The same behaviour
//! through the executor is in `tests/tests/memory.rs`.

use std::path::Path;

use serde_json::{json, Value};
use toolbox_host::{ToolContext, ToolProvider, Workspace};

use super::*;
use crate::store::DB_NAME;

fn workspace() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    (dir, ws)
}

async fn call(p: &MemoryProvider, ws: &Workspace, tool: &str, args: Value) -> Result<String> {
    call_with(p, ws, tool, args, Value::Null).await
}

async fn call_with(
    p: &MemoryProvider,
    ws: &Workspace,
    tool: &str,
    args: Value,
    config: Value,
) -> Result<String> {
    let mut ctx = ToolContext::new(ws.clone(), "s1", "c1", tool);
    ctx.config = Arc::new(config);
    let out = p.call_tool(tool, args, &ctx).await?;
    Ok(out.text)
}

async fn save(p: &MemoryProvider, ws: &Workspace, args: Value) -> i64 {
    let out = call(p, ws, "memory__save", args).await.unwrap();
    out.trim_start_matches("Saved memory #")
        .trim_end_matches('.')
        .parse()
        .unwrap_or_else(|_| panic!("{out}"))
}

/// The ids in a search or list result, in order.
fn ids(out: &str) -> Vec<i64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("[#"))
        .map(|l| l[..l.find(']').unwrap()].parse().unwrap())
        .collect()
}

fn db(dir: &Path) -> std::path::PathBuf {
    dir.join(".toolbox").join(DB_NAME)
}

#[tokio::test]
async fn save_get_list_delete() {
    let (dir, ws) = workspace();
    let p = MemoryProvider::default();
    // Nothing is created by reading.
    assert_eq!(
        call(&p, &ws, "memory__list", json!({})).await.unwrap(),
        "No memories yet."
    );
    assert!(!db(dir.path()).exists());
    let a = save(
        &p,
        &ws,
        json!({"text": "first note", "title": "One", "tags": ["a", "b", "a"]}),
    )
    .await;
    let b = save(&p, &ws, json!({"text": "second note", "tags": "b, c"})).await;
    assert_eq!((a, b), (1, 2));
    let got = call(&p, &ws, "memory__get", json!({"id": "#1"}))
        .await
        .unwrap();
    assert!(got.starts_with("[#1] One — 20"), "{got}");
    assert!(
        got.contains("tags: a, b") && got.ends_with("\n\nfirst note"),
        "{got}"
    );
    let list = call(&p, &ws, "memory__list", json!({})).await.unwrap();
    assert_eq!(ids(&list), [2, 1], "{list}");
    let list = call(&p, &ws, "memory__list", json!({"tags": ["b", "c"]}))
        .await
        .unwrap();
    assert_eq!(ids(&list), [2], "{list}");
    let del = call(&p, &ws, "memory__delete", json!({"id": 1}))
        .await
        .unwrap();
    assert!(del.starts_with("Deleted [#1] One"), "{del}");
    let e = call(&p, &ws, "memory__get", json!({"id": 1}))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "memory__get: no memory with id 1 (memory__list and memory__search show the ids)"
    );
    // Deleted rows are gone from the index too.
    let s = call(&p, &ws, "memory__search", json!({"query": "first"}))
        .await
        .unwrap();
    assert_eq!(s, "No memories match \"first\".");
    // Ids are never reused.
    assert_eq!(save(&p, &ws, json!({"text": "third"})).await, 3);
    let mode = std::fs::metadata(db(dir.path())).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
}

#[tokio::test]
async fn chinese_is_found_by_two_one_and_many_characters() {
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    let zh = save(
        &p,
        &ws,
        json!({"text": "我们决定用SQLite做记忆数据库，支持全文搜索。", "title": "存储方案"}),
    )
    .await;
    let other = save(&p, &ws, json!({"text": "数学课在周三下午。"})).await;
    let en = save(&p, &ws, json!({"text": "An English note about databases."})).await;
    for (query, want) in [
        ("数据", vec![zh]),
        ("数据库", vec![zh]),
        ("记忆数据库", vec![zh]),
        ("存储", vec![zh]),
        ("周三", vec![other]),
        ("库", vec![zh]), // last character of a run: the tails column
        ("决", vec![zh]), // first character of a bigram
        ("SQLite 数据库", vec![zh]),
        ("databases", vec![en]),
    ] {
        let out = call(&p, &ws, "memory__search", json!({"query": query}))
            .await
            .unwrap();
        assert_eq!(ids(&out), want, "{query}: {out}");
    }
    let out = call(&p, &ws, "memory__search", json!({"query": "数据"}))
        .await
        .unwrap();
    assert!(out.contains("做记忆**数据**库"), "{out}");
    // "数学" shares one character with 数据 but is not a match for it.
    let out = call(&p, &ws, "memory__search", json!({"query": "数学"}))
        .await
        .unwrap();
    assert_eq!(ids(&out), [other], "{out}");
}

#[tokio::test]
async fn fts_syntax_in_queries_is_plain_text() {
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    let id = save(
        &p,
        &ws,
        json!({"text": "Use C++ and node.js; cost: $5 (approx) \"quoted\" AND more"}),
    )
    .await;
    for query in [
        "\"",
        "\"\"",
        "AND",
        "OR",
        "NOT",
        "NEAR",
        "NEAR(a b)",
        "*",
        "a*",
        "*a",
        "cost:",
        ":",
        "title:cost",
        "(",
        ")",
        "(cost",
        "cost)",
        "^cost",
        "-cost",
        "+",
        "cost + $5",
        "{title}: x",
        "'",
        "\\",
        "%",
        "_",
        "c++",
        "node.js",
        "\"quoted\"",
        "AND AND",
        "a OR",
        "😀",
        "ा",
        "\u{0}",
        "tails : 库",
        "$5",
    ] {
        let out = call(&p, &ws, "memory__search", json!({"query": query})).await;
        let out = out.unwrap_or_else(|e| panic!("{query:?}: {e}"));
        assert!(
            out.starts_with("Found") || out.starts_with("No memories"),
            "{query:?}: {out}"
        );
    }
    for query in [
        "c++",
        "node.js",
        "\"quoted\"",
        "cost: (approx)",
        "$5",
        "AND more",
    ] {
        let out = call(&p, &ws, "memory__search", json!({"query": query}))
            .await
            .unwrap();
        assert_eq!(ids(&out), [id], "{query:?}: {out}");
    }
    // A query of symbols only is looked for as typed.
    let out = call(&p, &ws, "memory__search", json!({"query": "++"}))
        .await
        .unwrap();
    assert!(out.contains("Use C**++** and"), "{out}");
    let out = call(&p, &ws, "memory__search", json!({"query": "%"}))
        .await
        .unwrap();
    assert_eq!(out, "No memories match \"%\".");
}

#[tokio::test]
async fn exact_phrase_ranks_above_scattered_words_and_tags_filter_exactly() {
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    // Scattered: both words, several times, in a short text (bm25 alone would put it first).
    let scattered = save(
        &p,
        &ws,
        json!({"text": "brown brown brown quick quick quick", "tags": ["Rust"]}),
    )
    .await;
    let phrase = save(&p, &ws, json!({"text": "The story of a quick brown fox that jumped over the lazy dog in the park.", "tags": ["rust"]})).await;
    let one = save(
        &p,
        &ws,
        json!({"text": "only quick here", "tags": ["rust", "x"]}),
    )
    .await;
    let out = call(&p, &ws, "memory__search", json!({"query": "quick brown"}))
        .await
        .unwrap();
    assert_eq!(ids(&out), [phrase, scattered, one], "{out}");
    assert!(out.contains("a **quick** **brown** fox"), "{out}");
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "quick", "tags": ["rust"]}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&out).len(), 2, "{out}");
    assert!(
        !ids(&out).contains(&scattered),
        "tags compare exactly: {out}"
    );
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "quick", "tags": ["rust", "x"]}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&out), [one], "{out}");
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "quick", "tags": ["rus"]}),
    )
    .await
    .unwrap();
    assert_eq!(out, "No memories with tag rus match \"quick\".");
    // The longest tag there can be, in four-byte characters.
    let long_tag = "𝄞".repeat(64);
    let long = save(&p, &ws, json!({"text": "quick note", "tags": [long_tag]})).await;
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "quick", "tags": [long_tag]}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&out), [long], "{out}");
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "quick brown", "limit": 1}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&out), [phrase], "{out}");
}

#[tokio::test]
async fn words_in_very_many_memories_are_left_out_of_the_loosest_tier() {
    // In unit tests a word is "very common" past 4 memories (5,000 in a build).
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    for i in 0..5 {
        save(&p, &ws, json!({"text": format!("the note {i}")})).await;
    }
    let zebra = save(&p, &ws, json!({"text": "a zebra"})).await;
    let unicorn = save(&p, &ws, json!({"text": "the unicorn"})).await;
    // Neither all three words nor the phrase anywhere: any word, but not "the".
    let out = call(
        &p,
        &ws,
        "memory__search",
        json!({"query": "the zebra unicorn"}),
    )
    .await
    .unwrap();
    let mut found = ids(&out);
    found.sort();
    assert_eq!(found, [zebra, unicorn], "{out}");
    // On its own, a common word is still searched.
    let out = call(&p, &ws, "memory__search", json!({"query": "the"}))
        .await
        .unwrap();
    assert_eq!(ids(&out).len(), 6, "{out}");
}

#[tokio::test]
async fn paging() {
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    for i in 1..=5 {
        save(&p, &ws, json!({"text": format!("note {i}"), "tags": if i % 2 == 0 { json!(["even"]) } else { json!([]) }})).await;
    }
    let first = call(&p, &ws, "memory__list", json!({"limit": 2}))
        .await
        .unwrap();
    assert_eq!(ids(&first), [5, 4]);
    assert!(
        first.starts_with("Memories 1–2 of 5, newest first:"),
        "{first}"
    );
    assert!(
        first.ends_with("3 more: call memory__list with offset 2."),
        "{first}"
    );
    let last = call(&p, &ws, "memory__list", json!({"limit": 2, "offset": 4}))
        .await
        .unwrap();
    assert_eq!(ids(&last), [1]);
    assert!(!last.contains("more:"), "{last}");
    let past = call(&p, &ws, "memory__list", json!({"offset": 9}))
        .await
        .unwrap();
    assert_eq!(past, "No memories at offset 9: there are 5 memories.");
    let even = call(
        &p,
        &ws,
        "memory__list",
        json!({"tags": ["even"], "limit": 1, "offset": 1}),
    )
    .await
    .unwrap();
    assert_eq!(ids(&even), [2], "{even}");
    assert!(
        even.starts_with("Memories with tag even 2–2 of 2"),
        "{even}"
    );
}

#[tokio::test]
async fn bad_input_names_the_limit() {
    let (_dir, ws) = workspace();
    let p = MemoryProvider::default();
    let e = call(&p, &ws, "memory__save", json!({"text": "  \n"}))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("text is empty; a memory needs 1 to 65536 bytes"),
        "{e}"
    );
    let big = "x".repeat(65_537);
    let e = call(&p, &ws, "memory__save", json!({"text": big}))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "text is 65537 bytes, more than the 65536-byte limit ([memory] max_text_bytes)"
        ),
        "{e}"
    );
    assert!(
        call(&p, &ws, "memory__save", json!({"text": "x".repeat(65_536)}))
            .await
            .is_ok()
    );
    let config = json!({"memory": {"max_text_bytes": 10}});
    let e = call_with(
        &p,
        &ws,
        "memory__save",
        json!({"text": "eleven byte"}),
        config,
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("more than the 10-byte limit"), "{e}");
    let e = call(
        &p,
        &ws,
        "memory__save",
        json!({"text": "x", "tags": ["t".repeat(65)]}),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("64-character limit"), "{e}");
    let e = call(&p, &ws, "memory__get", json!({"id": "twelve"}))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("must be a non-negative integer"),
        "{e}"
    );
    let e = call(&p, &ws, "memory__delete", json!({"id": 7}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no memory with id 7"), "{e}");
    let e = call_with(
        &p,
        &ws,
        "memory__list",
        json!({}),
        json!({"memory": {"path": "rel/m.db"}}),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("[memory] path must be an absolute path"),
        "{e}"
    );
    let e = call_with(
        &p,
        &ws,
        "memory__list",
        json!({}),
        json!({"memory": {"pth": "x"}}),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("unknown key `pth`"), "{e}");
}

#[tokio::test]
async fn foreign_corrupt_and_newer_files_are_left_alone() {
    let p = MemoryProvider::default();
    // Not a database at all.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    let garbage = b"this is not a database, it is a shopping list\n".repeat(100);
    std::fs::write(db(dir.path()), &garbage).unwrap();
    for tool in ["memory__save", "memory__list"] {
        let e = call(&p, &ws, tool, json!({"text": "x"})).await;
        let e = if tool == "memory__list" {
            call(&p, &ws, tool, json!({})).await.unwrap_err()
        } else {
            e.unwrap_err()
        };
        let e = e.to_string();
        assert!(
            e.contains(".toolbox/memory.sqlite is not a SQLite database"),
            "{e}"
        );
        assert!(e.contains("leaves it as it is"), "{e}");
    }
    assert_eq!(std::fs::read(db(dir.path())).unwrap(), garbage);

    // Someone else's SQLite database.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    {
        let c = rusqlite::Connection::open(db(dir.path())).unwrap();
        c.execute_batch("CREATE TABLE accounts (id INTEGER, owner TEXT); INSERT INTO accounts VALUES (1, 'me');").unwrap();
    }
    let before = std::fs::read(db(dir.path())).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".toolbox/memory.sqlite is a SQLite database, but not a toolbox memory store"),
        "{e}"
    );
    assert_eq!(
        std::fs::read(db(dir.path())).unwrap(),
        before,
        "not even the journal mode changed"
    );

    // Ours, from a newer toolbox.
    let (dir, ws) = workspace();
    save(&p, &ws, json!({"text": "x"})).await;
    {
        let c = rusqlite::Connection::open(db(dir.path())).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
    }
    let p2 = MemoryProvider::default();
    let e = call(&p2, &ws, "memory__list", json!({}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("written by a newer toolbox (memory schema version 99"),
        "{e}"
    );

    // An empty file is a new store.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    std::fs::write(db(dir.path()), b"").unwrap();
    assert_eq!(save(&p, &ws, json!({"text": "x"})).await, 1);
    let c = rusqlite::Connection::open(db(dir.path())).unwrap();
    let v: i64 = c
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!((v, mode.as_str()), (1, "wal"));
}

#[tokio::test]
async fn links_at_the_database_are_refused() {
    let p = MemoryProvider::default();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("victim.sqlite");
    std::fs::write(&target, b"").unwrap();

    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    std::os::unix::fs::symlink(&target, db(dir.path())).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".toolbox/memory.sqlite is a symbolic link"),
        "{e}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"");

    // A dangling link is refused too, and nothing is created where it points.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    let nowhere = outside.path().join("made-by-toolbox.sqlite");
    std::os::unix::fs::symlink(&nowhere, db(dir.path())).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("is a symbolic link"), "{e}");
    assert!(!nowhere.exists());

    // A link where SQLite keeps its write-ahead log.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(".toolbox/memory.sqlite-wal")).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(".toolbox/memory.sqlite-wal is a symbolic link"),
        "{e}"
    );

    // A hard link to a file elsewhere in the workspace.
    let (dir, ws) = workspace();
    std::fs::create_dir(dir.path().join(".toolbox")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"").unwrap();
    std::fs::hard_link(dir.path().join("notes.txt"), db(dir.path())).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("has 2 hard links"), "{e}");

    // `.toolbox` itself a link.
    let (dir, ws) = workspace();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".toolbox")).unwrap();
    let e = call(&p, &ws, "memory__save", json!({"text": "x"}))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("symbolic link"), "{e}");
}

#[tokio::test]
async fn a_file_replaced_between_calls_is_opened_anew() {
    let (dir, ws) = workspace();
    let p = MemoryProvider::default();
    save(&p, &ws, json!({"text": "old store"})).await;
    std::fs::remove_file(db(dir.path())).unwrap();
    let _ = std::fs::remove_file(dir.path().join(".toolbox/memory.sqlite-wal"));
    let _ = std::fs::remove_file(dir.path().join(".toolbox/memory.sqlite-shm"));
    assert_eq!(save(&p, &ws, json!({"text": "new store"})).await, 1);
    let list = call(&p, &ws, "memory__list", json!({})).await.unwrap();
    assert_eq!(ids(&list), [1]);
    assert!(list.contains("new store"), "{list}");
}

#[tokio::test]
async fn an_operator_path_moves_the_store() {
    let (dir, ws) = workspace();
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("deep/er/memory.sqlite");
    let config = json!({"memory": {"path": file.to_str().unwrap()}});
    let p = MemoryProvider::default();
    call_with(
        &p,
        &ws,
        "memory__save",
        json!({"text": "user-wide"}),
        config.clone(),
    )
    .await
    .unwrap();
    assert!(file.is_file());
    assert!(!db(dir.path()).exists());
    let (_dir2, ws2) = workspace();
    let out = call_with(
        &p,
        &ws2,
        "memory__search",
        json!({"query": "user-wide"}),
        config,
    )
    .await
    .unwrap();
    assert_eq!(ids(&out), [1], "{out}");
    assert_eq!(
        operator_path("~/m.sqlite").unwrap(),
        Path::new(&std::env::var("HOME").unwrap()).join("m.sqlite")
    );
}

#[test]
fn workspace_rules_allow_only_a_lower_text_cap() {
    let rules = toolbox_core::trust::table_rules("memory").unwrap();
    assert!(rules.rule("path").is_none());
    assert!(matches!(
        rules.rule("max_text_bytes"),
        Some(Tighten::AtMost(DEFAULT_MAX_TEXT_BYTES))
    ));
}

#[test]
fn connections_racing_to_create_the_store_all_succeed() {
    // Each thread has its own cache, so its own connection, like separate processes.
    for round in 0..40 {
        let (_dir, ws) = workspace();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (ws, barrier) = (ws.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let stores = crate::store::Stores::default();
                    barrier.wait();
                    let store = stores
                        .get(&crate::store::Location::Workspace(ws), true)
                        .unwrap_or_else(|e| panic!("round {round}, thread {t}: {e:#}"))
                        .unwrap();
                    let mut store = store.lock().unwrap();
                    store.save(None, &format!("thread {t}"), &[]).unwrap()
                })
            })
            .collect();
        let mut ids: Vec<i64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        ids.sort();
        assert_eq!(ids, [1, 2, 3, 4], "round {round}");
    }
}
