//! What people and models read (issue 37, point 8, "Messages"):
//!
//! - no message has a long run of spaces in the middle of a sentence, the mark of a line
//!   continuation written without its `\` (the review refusal of `toolbox call --approve`
//!   read "…--approve          yes or no…");
//! - a refusal names the tool as it was called: `bash` is refused as `bash`, not `shell`.

use std::path::Path;

use serde_json::json;
use toolbox as _;
use toolbox_executor::PermissionMode;
use toolbox_tests::{call, executor};

/// The workspace's Rust sources a user or a model reads messages from (not tests, benches or
/// examples, where aligned columns are meant).
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if ![
                "target",
                "tests",
                "examples",
                "benches",
                ".git",
                "node_modules",
            ]
            .contains(&name.as_str())
            {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && !name.ends_with("tests.rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_message_has_a_broken_line_continuation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    sources(root, &mut files);
    assert!(files.len() > 100, "found {} files", files.len());
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut in_tests = false;
        for (n, line) in text.lines().enumerate() {
            if line.starts_with("#[cfg(test)]") {
                in_tests = true;
            }
            if in_tests || line.trim_start().starts_with("//") {
                continue;
            }
            // A run of 6 or more spaces between two words, inside a string on this line,
            // not after a `\n` (code and tables shown as they are).
            let bytes = line.as_bytes();
            let Some(quote) = line.find('"') else {
                continue;
            };
            let mut i = quote + 1;
            while i < bytes.len() {
                if bytes[i] == b' ' {
                    let start = i;
                    while i < bytes.len() && bytes[i] == b' ' {
                        i += 1;
                    }
                    let before = &line[..start];
                    let after_word = before
                        .chars()
                        .last()
                        .is_some_and(|c| c.is_alphanumeric() || ",.;:)".contains(c));
                    let code = before.ends_with("\\n") || before.contains("\\n ");
                    if i - start >= 6 && after_word && !code && i < bytes.len() && bytes[i] != b'"'
                    {
                        found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                    }
                } else {
                    i += 1;
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "broken line continuations:\n{}",
        found.join("\n")
    );
}

#[tokio::test]
async fn a_refusal_names_the_tool_as_it_was_called() {
    let (_dir, exec) = executor(PermissionMode::ReadOnly);
    let got = call(&exec, "bash", json!({"command": "true"})).await;
    assert!(got.result.contains("tool bash "), "{}", got.result);
    assert!(!got.result.contains("tool shell "), "{}", got.result);
    // Mode auto with nobody to ask: the refusal after the wait says `bash` too.
    let dir = tempfile::tempdir().unwrap();
    let mut config = toolbox_executor::ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Auto;
    config.approval_timeout = std::time::Duration::from_millis(50);
    let exec = toolbox_executor::ToolExecutor::new(config).unwrap();
    let got = call(&exec, "bash", json!({"command": "true"})).await;
    assert!(got.result.contains("tool bash "), "{}", got.result);
    assert!(!got.result.contains("tool shell "), "{}", got.result);
}
