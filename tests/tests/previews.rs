//! What a person is shown before a risky call runs: each real tool's preview, through the
//! executor in permission mode `auto`, as the approval request carries it. The request is
//! denied, so nothing runs: the preview itself must change nothing.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use toolbox as _;
use toolbox_core::BlockKind;
use toolbox_executor::{ApprovalDecision, ErrorKind, PermissionMode, ToolExecutor, ToolRequest};
use toolbox_host::{ApprovalRequest, EventSink, ToolEvent};
use toolbox_tests::{assert_error, executor_with_events, write_file};

type Slot = Arc<Mutex<Option<ToolExecutor>>>;

/// An executor in `auto` whose every approval request is recorded and denied.
fn asking() -> (
    tempfile::TempDir,
    ToolExecutor,
    Arc<Mutex<Vec<ApprovalRequest>>>,
) {
    asking_with(&[])
}

fn asking_with(
    tables: &[(&str, Value)],
) -> (
    tempfile::TempDir,
    ToolExecutor,
    Arc<Mutex<Vec<ApprovalRequest>>>,
) {
    let slot: Slot = Arc::default();
    let seen: Arc<Mutex<Vec<ApprovalRequest>>> = Arc::default();
    let sink = {
        let (slot, seen) = (slot.clone(), seen.clone());
        EventSink::new(move |event| {
            if let ToolEvent::ApprovalRequested(r) = event {
                seen.lock().unwrap().push(r.clone());
                let exec = slot.lock().unwrap().clone().unwrap();
                exec.respond_approval(&r.session_id, &r.call_id, ApprovalDecision::Deny);
            }
        })
    };
    let (dir, exec) = executor_with_events(PermissionMode::Auto, tables, sink);
    *slot.lock().unwrap() = Some(exec.clone());
    (dir, exec, seen)
}

/// The preview of one call of `tool` in session s1 (plain text), after the call was denied.
async fn preview_of(
    exec: &ToolExecutor,
    seen: &Arc<Mutex<Vec<ApprovalRequest>>>,
    tool: &str,
    args: Value,
) -> (ApprovalRequest, String) {
    let info = exec
        .run(ToolRequest::new("c1", tool, args).session("s1"))
        .await;
    assert_error(&info, ErrorKind::Denied, &[]);
    let request = seen.lock().unwrap().pop().expect("an approval request");
    let text = request.preview.to_text(false);
    // Never the arguments as escaped JSON.
    assert!(!text.contains("\\n") && !text.contains("\\\""), "{text}");
    (request, text)
}

#[tokio::test]
async fn a_write_shows_the_real_path_whether_it_replaces_and_the_content() {
    let (dir, exec, seen) = asking();
    let content: String = (1..=50).map(|i| format!("line {i}\n")).collect();
    let (_, text) = preview_of(
        &exec,
        &seen,
        "write_file",
        json!({"path": "output/hello.md", "content": content}),
    )
    .await;
    let summary = text.lines().next().unwrap();
    assert_eq!(
        summary,
        "Write 391 bytes to .toolbox/sessions/s1/output/hello.md (output/hello.md), a new file"
    );
    assert!(
        text.contains("\n  line 1\n") && text.contains("\n  line 40\n"),
        "{text}"
    );
    assert!(!text.contains("line 41"), "{text}");
    assert!(text.ends_with("… 10 more lines"), "{text}");
    assert!(!dir
        .path()
        .join(".toolbox/sessions/s1/output/hello.md")
        .exists());

    write_file(dir.path(), "notes.md", "old\n");
    let (_, text) = preview_of(
        &exec,
        &seen,
        "file_manager__write",
        json!({"path": "notes.md", "content": "new\n"}),
    )
    .await;
    assert!(
        text.starts_with("Write 4 bytes to notes.md, replacing all of its 4 bytes"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.md")).unwrap(),
        "old\n"
    );
}

#[tokio::test]
async fn an_edit_shows_a_unified_diff_and_one_that_would_fail_says_so() {
    let (dir, exec, seen) = asking();
    write_file(dir.path(), "src/app.py", "x = 1\ny = 2\nz = 3\n");
    let (request, text) = preview_of(
        &exec,
        &seen,
        "edit_file",
        json!({"path": "src/app.py", "old_string": "y = 2", "new_string": "y = 20"}),
    )
    .await;
    assert!(
        text.starts_with("Edit src/app.py (1 change at line 2)"),
        "{text}"
    );
    assert!(text.contains("--- src/app.py\n  +++ src/app.py"), "{text}");
    assert!(text.contains("\n  -y = 2\n  +y = 20\n"), "{text}");
    assert!(request
        .preview
        .blocks
        .iter()
        .any(|b| b.kind == BlockKind::Diff));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("src/app.py")).unwrap(),
        "x = 1\ny = 2\nz = 3\n"
    );
    let (_, text) = preview_of(
        &exec,
        &seen,
        "edit_file",
        json!({"path": "src/app.py", "old_string": "nowhere", "new_string": "x"}),
    )
    .await;
    assert!(text.contains("this edit will fail"), "{text}");
    assert!(text.contains("old_string was not found"), "{text}");
}

#[tokio::test]
async fn a_shell_command_shows_the_command_its_real_folder_and_the_sandbox() {
    let (_dir, exec, seen) = asking_with(&[("shell", json!({"sandbox": "workspace-write"}))]);
    let (_, text) = preview_of(
        &exec,
        &seen,
        "bash",
        json!({"command": "rm -rf build\necho done", "timeout_ms": 5000}),
    )
    .await;
    assert!(
        text.starts_with("Run a shell command in .toolbox/sessions/s1/scratchpad (scratchpad)"),
        "{text}"
    );
    assert!(text.contains("\n  rm -rf build\n  echo done\n"), "{text}");
    assert!(text.contains("sandbox: workspace-write"), "{text}");
    assert!(text.contains("timeout: 5000 ms"), "{text}");
    let (_, text) = preview_of(
        &exec,
        &seen,
        "shell",
        json!({"command": "make", "cwd": "."}),
    )
    .await;
    assert!(text.starts_with("Run a shell command in ."), "{text}");
    assert!(text.contains("working folder: .\n"), "{text}");
}

#[tokio::test]
async fn python_shows_numbered_code_and_where_it_runs() {
    let (_dir, exec, seen) = asking();
    let (request, text) = preview_of(
        &exec,
        &seen,
        "python_exec",
        json!({"code": "import os\nprint(os.getcwd())"}),
    )
    .await;
    assert!(
        text.starts_with(
            "Run Python in session s1's interpreter (working folder \
             .toolbox/sessions/s1/scratchpad (scratchpad))"
        ),
        "{text}"
    );
    assert!(
        text.contains("1 │ import os\n  2 │ print(os.getcwd())"),
        "{text}"
    );
    assert!(request
        .preview
        .blocks
        .iter()
        .any(|b| b.kind == BlockKind::Code));
}

#[tokio::test]
async fn a_notebook_edit_shows_the_cell_diff() {
    let (dir, exec, seen) = asking();
    let nb = json!({
        "cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": ["x = 1\n", "y = 2"],
                   "outputs": [], "execution_count": null}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5
    });
    write_file(dir.path(), "a.ipynb", nb.to_string());
    let (_, text) = preview_of(
        &exec,
        &seen,
        "notebook_edit",
        json!({"path": "a.ipynb", "cell_id": "a", "source": "x = 1\ny = 3"}),
    )
    .await;
    assert!(
        text.starts_with("Replace the source of cell 0 of a.ipynb"),
        "{text}"
    );
    assert!(text.contains("-y = 2") && text.contains("+y = 3"), "{text}");
}

#[tokio::test]
async fn any_other_tool_shows_key_value_lines() {
    let (_dir, exec, seen) = asking();
    let (_, text) = preview_of(&exec, &seen, "memory__delete", json!({"id": 12})).await;
    assert_eq!(text, "Run memory__delete\n  id: 12");
}

/// kernel_install names the real venv the packages go into: the per-user one by default
/// (and whether this call makes it), the operator's `[python] venv` when set.
#[tokio::test]
async fn an_install_shows_the_real_target_venv() {
    let (_dir, exec, seen) = asking();
    let (_, text) = preview_of(
        &exec,
        &seen,
        "python_package",
        json!({"packages": ["requests", "rich"], "upgrade": true}),
    )
    .await;
    // This process's own per-user venv, read as toolbox reads it.
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_absolute())
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".local/share")
        });
    let venv = data.join("toolbox/venv");
    let made = if venv.join("pyvenv.cfg").is_file() {
        ""
    } else {
        ", created by this call"
    };
    assert_eq!(
        text,
        format!(
            "Install Python packages with pip\n  packages: requests, rich\n  into: the \
             per-user venv {} (toolbox's default; [python] venv chooses another){made}\n  \
             upgrade: yes",
            venv.display()
        )
    );
    let (_dir, exec, seen) = asking_with(&[("python", json!({"venv": "/opt/toolbox-venv"}))]);
    let (_, text) = preview_of(
        &exec,
        &seen,
        "kernel_install",
        json!({"packages": ["rich"]}),
    )
    .await;
    assert_eq!(
        text,
        "Install Python packages with pip\n  packages: rich\n  into: the venv \
         /opt/toolbox-venv ([python] venv), created by this call"
    );
}

/// A hostile argument cannot carry an escape sequence into the question.
#[tokio::test]
async fn control_sequences_in_arguments_are_shown_escaped() {
    let (_dir, exec, seen) = asking();
    let (_, text) = preview_of(
        &exec,
        &seen,
        "shell",
        json!({"command": "ls\u{1b}[2J\u{1b}[8m; rm -rf ~"}),
    )
    .await;
    assert!(!text.contains('\u{1b}'), "{text:?}");
    assert!(text.contains("ls\\x1b[2J\\x1b[8m; rm -rf ~"), "{text}");
}
