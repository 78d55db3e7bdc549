//! The memory provider through the executor: saving, searching (English, Chinese, FTS5
//! syntax typed by a user, phrase ranking, tags), listing page by page, the size cap,
//! unknown ids, damaged and planted files, and two writers at once. Processes sharing one
//! file through the real binary are in `toolbox/tests/memory_cli.rs`.

use std::path::Path;

use serde_json::{json, Value};
use toolbox_executor::{ErrorKind, PermissionMode, ToolExecutor};

use toolbox as _;
use toolbox_tests::{assert_error, call, executor, executor_in, executor_with, fails, ok};

async fn save(exec: &ToolExecutor, args: Value) -> i64 {
    let out = ok(exec, "memory__save", args).await;
    out.strip_prefix("Saved memory #")
        .and_then(|s| s.strip_suffix('.'))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a save result: {out}"))
}

/// The ids of a search or list result, in the order shown.
fn ids(out: &str) -> Vec<i64> {
    out.lines()
        .filter_map(|l| l.strip_prefix("[#"))
        .filter_map(|l| l.split(']').next()?.parse().ok())
        .collect()
}

async fn search(exec: &ToolExecutor, args: Value) -> (Vec<i64>, String) {
    let out = ok(exec, "memory__search", args).await;
    (ids(&out), out)
}

fn db(root: &Path) -> std::path::PathBuf {
    root.join(".toolbox/memory.sqlite")
}

#[tokio::test]
async fn save_search_get_delete_in_english_and_chinese() {
    let (dir, exec) = executor(PermissionMode::Full);
    let en = save(
        &exec,
        json!({"text": "The deploy script needs AWS_REGION set before it runs.",
               "title": "Deploy gotcha", "tags": ["ops", "deploy"]}),
    )
    .await;
    let zh = save(
        &exec,
        json!({"text": "用户喜欢简洁的回答，不要长篇大论。\n讨论数据库时用中文。",
               "title": "用户偏好", "tags": ["偏好"]}),
    )
    .await;
    let ja = save(&exec, json!({"text": "東京の会議は来週の火曜日です。"})).await;
    assert_eq!((en, zh, ja), (1, 2, 3));
    assert!(db(dir.path()).is_file());

    let (found, out) = search(&exec, json!({"query": "deploy region"})).await;
    assert_eq!(found, [en], "{out}");
    assert!(out.contains("[#1] Deploy gotcha — "), "{out}");
    assert!(out.contains("tags: deploy, ops"), "{out}");
    assert!(out.contains("The **deploy** script"), "{out}");

    // Two Chinese characters inside a sentence, one character, a whole clause, a title.
    for query in ["数据", "回答", "简洁的回答", "偏好", "库", "中文"] {
        let (found, out) = search(&exec, json!({"query": query})).await;
        assert_eq!(found, [zh], "{query}: {out}");
    }
    let (_, out) = search(&exec, json!({"query": "数据"})).await;
    assert!(out.contains("讨论**数据**库时用中文"), "{out}");
    // Japanese kana and kanji too.
    let (found, _) = search(&exec, json!({"query": "会議"})).await;
    assert_eq!(found, [ja]);
    // Not a substring anywhere: nothing.
    let out = ok(&exec, "memory__search", json!({"query": "数学"})).await;
    assert_eq!(out, "No memories match \"数学\".");

    let got = ok(&exec, "memory__get", json!({"id": zh})).await;
    assert!(got.starts_with("[#2] 用户偏好 — "), "{got}");
    assert!(
        got.ends_with("用户喜欢简洁的回答，不要长篇大论。\n讨论数据库时用中文。"),
        "{got}"
    );
    let deleted = ok(&exec, "memory__delete", json!({"id": zh})).await;
    assert!(deleted.starts_with("Deleted [#2] 用户偏好"), "{deleted}");
    let out = ok(&exec, "memory__search", json!({"query": "数据"})).await;
    assert_eq!(out, "No memories match \"数据\".");
    fails(
        &exec,
        "memory__get",
        json!({"id": zh}),
        "memory__get: no memory with id 2",
    )
    .await;

    // A second executor on the same workspace (toolbox started again) sees the same store.
    let again = executor_in(dir.path(), PermissionMode::ReadOnly);
    let out = ok(&again, "memory__list", json!({})).await;
    assert_eq!(ids(&out), [ja, en], "{out}");
}

#[tokio::test]
async fn fts5_syntax_typed_by_a_user_is_plain_text() {
    let (_dir, exec) = executor(PermissionMode::Full);
    let id = save(
        &exec,
        json!({"text": "Pinned: \"serde\" AND tokio (1.x) -- see NEAR(a b) notes; col:value *glob*"}),
    )
    .await;
    for query in [
        "\"serde\"",
        "serde AND tokio",
        "tokio OR",
        "(1.x)",
        "NEAR(a b)",
        "col:value",
        "*glob*",
        "-- see",
        "\"unbalanced",
        "a\"b\"c",
        "NOT",
        "^",
        ":",
        "{col}: x",
        "'",
        "Pinned:",
        "\u{0}",
    ] {
        let info = call(&exec, "memory__search", json!({"query": query})).await;
        assert!(info.is_done(), "{query:?}: {}", info.result);
    }
    for query in ["\"serde\" AND tokio", "NEAR(a b)", "col:value", "*glob*"] {
        let (found, out) = search(&exec, json!({"query": query})).await;
        assert_eq!(found, [id], "{query:?}: {out}");
    }
}

#[tokio::test]
async fn an_exact_phrase_ranks_above_scattered_words() {
    let (_dir, exec) = executor(PermissionMode::Full);
    // Both words, often, in a short text: bm25 alone would rank this first.
    let scattered = save(
        &exec,
        json!({"text": "invalidation: cache layer, cache invalidation, cache layer"}),
    )
    .await;
    let phrase = save(
        &exec,
        json!({"text": "We spent a week on this. The hard part was layer invalidation of the old \
                        entries after a deploy, which nobody had documented anywhere."}),
    )
    .await;
    let one_word = save(&exec, json!({"text": "invalidation only"})).await;
    let (found, out) = search(&exec, json!({"query": "layer invalidation"})).await;
    assert_eq!(found, [phrase, scattered, one_word], "{out}");
    // The same for Chinese: the exact phrase first.
    let zh_scattered = save(
        &exec,
        json!({"text": "缓存很重要。失效很麻烦。缓存，失效。"}),
    )
    .await;
    let zh_phrase = save(
        &exec,
        json!({"text": "上周我们一直在处理缓存失效的问题，花了很多时间。"}),
    )
    .await;
    let (found, out) = search(&exec, json!({"query": "缓存失效"})).await;
    assert_eq!(found[0], zh_phrase, "{out}");
    assert!(found.contains(&zh_scattered), "{out}");
}

#[tokio::test]
async fn tags_filter_exactly_and_lists_page() {
    let (_dir, exec) = executor(PermissionMode::Full);
    let mut all = Vec::new();
    for i in 1..=7 {
        let tags = match i % 3 {
            0 => json!(["Project-X"]),
            1 => json!(["project-x", "db"]),
            _ => json!(["project-xy"]),
        };
        all.push(
            save(
                &exec,
                json!({"text": format!("note number {i} about the schema"), "tags": tags}),
            )
            .await,
        );
    }
    // Newest first, three at a time.
    let first = ok(&exec, "memory__list", json!({"limit": 3})).await;
    assert_eq!(ids(&first), [7, 6, 5], "{first}");
    assert!(first.contains("Memories 1–3 of 7, newest first"), "{first}");
    assert!(
        first.contains("4 more: call memory__list with offset 3."),
        "{first}"
    );
    let second = ok(&exec, "memory__list", json!({"limit": 3, "offset": 3})).await;
    assert_eq!(ids(&second), [4, 3, 2], "{second}");
    let third = ok(&exec, "memory__list", json!({"limit": 3, "offset": 6})).await;
    assert_eq!(ids(&third), [1], "{third}");
    assert!(!third.contains("more:"), "{third}");

    // Exact: not case-folded, not a prefix.
    let tagged = ok(&exec, "memory__list", json!({"tags": ["project-x"]})).await;
    assert_eq!(ids(&tagged), [7, 4, 1], "{tagged}");
    let tagged = ok(&exec, "memory__list", json!({"tags": "Project-X"})).await;
    assert_eq!(ids(&tagged), [6, 3], "{tagged}");
    let (found, out) = search(
        &exec,
        json!({"query": "schema", "tags": ["project-x", "db"]}),
    )
    .await;
    let mut sorted = found.clone();
    sorted.sort();
    assert_eq!(sorted, [1, 4, 7], "{out}");
    let out = ok(
        &exec,
        "memory__search",
        json!({"query": "schema", "tags": ["project"]}),
    )
    .await;
    assert_eq!(out, "No memories with tag project match \"schema\".");
    let (found, _) = search(&exec, json!({"query": "schema", "limit": 2})).await;
    assert_eq!(found.len(), 2);
}

#[tokio::test]
async fn bad_input_gets_errors_that_say_what_to_do() {
    let (_dir, exec) = executor(PermissionMode::Full);
    fails(
        &exec,
        "memory__save",
        json!({"text": ""}),
        "text is empty; a memory needs 1 to 65536 bytes of text ([memory] max_text_bytes)",
    )
    .await;
    fails(
        &exec,
        "memory__save",
        json!({"text": "长".repeat(21_846)}),
        "text is 65538 bytes, more than the 65536-byte limit ([memory] max_text_bytes)",
    )
    .await;
    fails(
        &exec,
        "memory__save",
        json!({}),
        "memory__save requires text",
    )
    .await;
    fails(
        &exec,
        "memory__search",
        json!({"query": " "}),
        "`query` is empty",
    )
    .await;
    fails(
        &exec,
        "memory__get",
        json!({"id": 42}),
        "no memory with id 42 (memory__list and memory__search show the ids)",
    )
    .await;
    save(&exec, json!({"text": "something"})).await;
    fails(
        &exec,
        "memory__delete",
        json!({"id": "#42"}),
        "no memory with id 42",
    )
    .await;
    fails(
        &exec,
        "memory__get",
        json!({"id": -1}),
        "must be a non-negative integer",
    )
    .await;

    // The operator may lower or raise the cap.
    let (_dir, small) = executor_with(
        PermissionMode::Full,
        &[("memory", json!({"max_text_bytes": 8}))],
    );
    fails(
        &small,
        "memory__save",
        json!({"text": "nine byte"}),
        "more than the 8-byte limit",
    )
    .await;
}

#[tokio::test]
async fn risky_tools_are_file_writes() {
    let (_dir, exec) = executor(PermissionMode::ReadOnly);
    let info = call(&exec, "memory__save", json!({"text": "x"})).await;
    assert_error(&info, ErrorKind::Denied, &[]);
    let info = call(&exec, "memory__delete", json!({"id": 1})).await;
    assert_error(&info, ErrorKind::Denied, &[]);
    // Reading an empty workspace works and creates no database.
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    assert_eq!(
        ok(&exec, "memory__search", json!({"query": "x"})).await,
        "No memories saved yet."
    );
    assert!(!db(dir.path()).exists());
}

#[tokio::test]
async fn a_corrupt_file_is_named_and_left_alone() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::create_dir_all(dir.path().join(".toolbox")).unwrap();
    let junk: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(db(dir.path()), &junk).unwrap();
    for (tool, args) in [
        ("memory__save", json!({"text": "x"})),
        ("memory__search", json!({"query": "x"})),
        ("memory__list", json!({})),
    ] {
        let e = fails(
            &exec,
            tool,
            args,
            ".toolbox/memory.sqlite is not a SQLite database",
        )
        .await;
        assert!(e.contains("leaves it as it is"), "{e}");
    }
    assert_eq!(
        std::fs::read(db(dir.path())).unwrap(),
        junk,
        "never recreated over"
    );

    // A store whose pages were damaged after it was written.
    let (dir, exec) = executor(PermissionMode::Full);
    for i in 0..50 {
        save(
            &exec,
            json!({"text": format!("note {i} {}", "filler ".repeat(200))}),
        )
        .await;
    }
    drop(exec);
    let path = db(dir.path());
    // Checkpoint the log into the file first, then scribble over every page but the first.
    let exec = executor_in(dir.path(), PermissionMode::Full);
    ok(&exec, "memory__list", json!({})).await;
    drop(exec);
    let _ = std::fs::remove_file(dir.path().join(".toolbox/memory.sqlite-wal"));
    let _ = std::fs::remove_file(dir.path().join(".toolbox/memory.sqlite-shm"));
    let mut bytes = std::fs::read(&path).unwrap();
    for b in bytes.iter_mut().skip(4096) {
        *b = 0x5a;
    }
    std::fs::write(&path, &bytes).unwrap();
    let exec = executor_in(dir.path(), PermissionMode::Full);
    let info = call(&exec, "memory__search", json!({"query": "note"})).await;
    assert_error(&info, ErrorKind::Tool, &[".toolbox/memory.sqlite"]);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[tokio::test]
async fn a_planted_link_at_the_database_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.sqlite");
    std::fs::write(&victim, b"").unwrap();
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::create_dir_all(dir.path().join(".toolbox")).unwrap();
    std::os::unix::fs::symlink(&victim, db(dir.path())).unwrap();
    for (tool, args) in [
        ("memory__save", json!({"text": "secret"})),
        ("memory__list", json!({})),
    ] {
        fails(
            &exec,
            tool,
            args,
            ".toolbox/memory.sqlite is a symbolic link; toolbox does not follow links in its own folder",
        )
        .await;
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        b"",
        "nothing written through the link"
    );
    assert!(!outside.path().join("victim.sqlite-wal").exists());
}

#[test]
fn two_writers_at_once_lose_nothing() {
    // Two executors, each with its own provider and SQLite connection, saving at the same
    // time on one fresh workspace: both race to create the file, then to write.
    let dir = tempfile::tempdir().unwrap();
    const EACH: usize = 60;
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let root = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let exec = executor_in(&root, PermissionMode::Full);
                rt.block_on(async {
                    for i in 0..EACH {
                        save(&exec, json!({"text": format!("writer{w} note{i}"), "tags": [format!("w{w}")]})).await;
                        if i % 10 == 0 {
                            ok(&exec, "memory__search", json!({"query": format!("writer{w}")})).await;
                        }
                    }
                });
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let exec = executor_in(dir.path(), PermissionMode::Full);
    rt.block_on(async {
        for w in 0..2 {
            let out = ok(
                &exec,
                "memory__list",
                json!({"tags": [format!("w{w}")], "limit": 1}),
            )
            .await;
            assert!(out.contains(&format!("1–1 of {EACH},")), "{out}");
        }
        let all = ok(&exec, "memory__list", json!({"limit": 100, "offset": 100})).await;
        assert!(all.contains(&format!("of {}", 2 * EACH)), "{all}");
    });
}

#[test]
fn risks_and_the_memory_toolset() {
    let (_dir, exec) = executor(PermissionMode::Full);
    let names = |mode: PermissionMode| -> Vec<String> {
        exec.resolve_agent_tool_schemas(
            Some(&["memory"]),
            mode,
            toolbox_executor::SchemaFormat::Mcp,
        )
        .unwrap()
        .into_iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
    };
    let mut all = names(PermissionMode::Full);
    all.sort();
    assert_eq!(
        all,
        [
            "memory__delete",
            "memory__get",
            "memory__list",
            "memory__save",
            "memory__search"
        ]
    );
    let mut read = names(PermissionMode::ReadOnly);
    read.sort();
    assert_eq!(read, ["memory__get", "memory__list", "memory__search"]);
}

/// The memory provider declares its store, so the session store (session server mode)
/// copies it through SQLite's backup API without naming it (issue 40, point 3).
#[test]
fn the_memory_store_is_a_declared_state_file() {
    let declared: Vec<_> = toolbox_host::state_files()
        .into_iter()
        .map(|f| (f.provider, f.path, f.kind))
        .collect();
    assert!(
        declared.contains(&(
            "memory",
            ".toolbox/memory.sqlite",
            toolbox_host::StateKind::SqliteDatabase
        )),
        "{declared:?}"
    );
}
