//! The memory store through the real binary: separate `toolbox call` processes saving to one
//! workspace at the same time, and what a workspace's own `toolbox.toml` may set in
//! `[memory]`.

use std::path::Path;

use serde_json::Value;

mod common;
use common::toolbox;

/// `toolbox call TOOL ARGS --mode full`: exit code, envelope, stderr.
fn call(ws: &Path, tool: &str, args: &str) -> (i32, Value, String) {
    let out = toolbox(ws)
        .args(["call", tool, args, "--mode", "full"])
        .output()
        .expect("toolbox runs");
    let envelope = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        envelope,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn processes_saving_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    const WRITERS: usize = 3;
    const EACH: usize = 8;
    // Every process starts on a workspace with no store yet: the first ones race to create
    // the file and its schema, the rest to write.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let ws = ws.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let args = serde_json::json!({
                        "text": format!("process {w} wrote note {i} 并发写入"),
                        "tags": [format!("writer-{w}")],
                    })
                    .to_string();
                    let (code, v, err) = call(&ws, "memory__save", &args);
                    assert_eq!(code, 0, "{v} {err}");
                    assert!(
                        v["result"].as_str().unwrap().starts_with("Saved memory #"),
                        "{v}"
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let (code, v, err) = call(&ws, "memory__list", r#"{"limit": 1}"#);
    assert_eq!(code, 0, "{err}");
    let total = WRITERS * EACH;
    let out = v["result"].as_str().unwrap();
    assert!(out.contains(&format!("1–1 of {total},")), "{out}");
    for w in 0..WRITERS {
        let args = format!(r#"{{"query": "并发", "tags": ["writer-{w}"], "limit": 50}}"#);
        let (_, v, _) = call(&ws, "memory__search", &args);
        let out = v["result"].as_str().unwrap();
        assert!(out.starts_with(&format!("Found {EACH} memories")), "{out}");
    }
}

#[test]
fn a_workspace_may_lower_the_text_cap_but_not_move_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let elsewhere = dir.path().join("elsewhere.sqlite");
    std::fs::write(
        ws.join("toolbox.toml"),
        format!("[memory]\npath = {:?}\n", elsewhere.to_str().unwrap()),
    )
    .unwrap();
    let (code, _, err) = call(&ws, "memory__save", r#"{"text": "x"}"#);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[memory] path"), "{err}");
    assert!(err.contains("only tighten"), "{err}");
    assert!(!elsewhere.exists());

    std::fs::write(
        ws.join("toolbox.toml"),
        "[memory]\nmax_text_bytes = 999999\n",
    )
    .unwrap();
    let (code, _, err) = call(&ws, "memory__save", r#"{"text": "x"}"#);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[memory] max_text_bytes"), "{err}");

    std::fs::write(ws.join("toolbox.toml"), "[memory]\nmax_text_bytes = 4\n").unwrap();
    let (code, v, _) = call(&ws, "memory__save", r#"{"text": "five!"}"#);
    assert_eq!(code, 1, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .contains("more than the 4-byte limit"),
        "{v}"
    );
    let (code, v, _) = call(&ws, "memory__save", r#"{"text": "four"}"#);
    assert_eq!(code, 0, "{v}");

    // The operator may move it.
    std::fs::remove_file(ws.join("toolbox.toml")).unwrap();
    let operator = dir.path().join("operator.toml");
    std::fs::write(
        &operator,
        format!("[memory]\npath = {:?}\n", elsewhere.to_str().unwrap()),
    )
    .unwrap();
    let out = toolbox(&ws)
        .env("TOOLBOX_CONFIG", &operator)
        .args([
            "call",
            "memory__save",
            r#"{"text": "user-wide"}"#,
            "--mode",
            "full",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(elsewhere.is_file());
}
