//! The notebook provider through the executor, running cells in the python provider's
//! session, with every written notebook validated by the Python `nbformat` package.

use std::path::Path;

use serde_json::{json, Value};
use toolbox_executor::{CallStatus, ErrorKind, PermissionMode, ToolCallInfo, ToolExecutor};

use toolbox as _;
use toolbox_tests::{assert_error, test_python};

fn executor(toml: &str) -> (tempfile::TempDir, ToolExecutor) {
    toolbox_tests::executor_toml(PermissionMode::Full, toml)
}

async fn call(exec: &ToolExecutor, name: &str, args: Value) -> ToolCallInfo {
    toolbox_tests::call_in(exec, "nb", name, args).await
}

/// nbformat.validate on the file as written; returns "nbformat.minor".
fn validate(python: &Path, path: &Path) -> String {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import sys, nbformat\nnb = nbformat.read(sys.argv[1], as_version=nbformat.NO_CONVERT)\nnbformat.validate(nb)\nprint(f'{nb.nbformat}.{nb.nbformat_minor}')",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} does not validate:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn build_run_and_validate_a_notebook_sharing_the_session() {
    let python = test_python();
    let venv = python.parent().unwrap().parent().unwrap();
    for backend in ["embedded", "isolated"] {
        let (dir, exec) = executor(&format!(
            "[python]\nbackend = \"{backend}\"\nvenv = \"{}\"\n",
            venv.display()
        ));
        let path = dir.path().join("analysis.ipynb");
        let cells = [
            ("markdown", "# Analysis"),
            (
                "code",
                "import matplotlib.pyplot as plt\nvalues = [3, 1, 2]\nprint('loaded', len(values))",
            ),
            ("code", "plt.plot(values)\nsum(values)"),
            ("code", "values[10]"),
        ];
        for (kind, source) in cells {
            let info = call(&exec, "notebook_edit", json!({"path": "analysis.ipynb", "operation": "insert", "cell_type": kind, "source": source})).await;
            assert_eq!(info.status, CallStatus::Done, "{}", info.result);
            assert_eq!(validate(&python, &path), "4.5");
        }
        let info = call(
            &exec,
            "notebook__run_cell",
            json!({"path": "analysis.ipynb", "index": 1}),
        )
        .await;
        assert_eq!(info.status, CallStatus::Done, "{}", info.result);
        assert!(
            info.result.starts_with("ran cell [1] id="),
            "{}",
            info.result
        );
        assert!(
            info.result.contains("[stdout]\nloaded 3\n"),
            "{}",
            info.result
        );
        // The cell's variables are in the same session run_python_code uses, and back.
        let info = call(
            &exec,
            "run_python_code",
            json!({"code": "values.append(4); len(values)"}),
        )
        .await;
        // The session's first run_python_code result also names its working folder.
        assert!(
            info.result.ends_with("[result]\n4\n"),
            "{backend}: {}",
            info.result
        );
        let info = call(
            &exec,
            "notebook__run_cell",
            json!({"path": "analysis.ipynb", "index": 2}),
        )
        .await;
        assert!(
            info.result
                .contains("[display_data]\nimage/png output/figure-1.png\n[result]\n10\n"),
            "{backend}: {}",
            info.result
        );
        let info = call(
            &exec,
            "notebook__run_cell",
            json!({"path": "analysis.ipynb", "index": 3}),
        )
        .await;
        assert_eq!(
            info.status,
            CallStatus::Done,
            "an exception is written as an error output"
        );
        assert!(
            info.result
                .contains("[error] IndexError: list index out of range"),
            "{}",
            info.result
        );
        assert_eq!(validate(&python, &path), "4.5");

        let nb: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells[1]["execution_count"], 1, "{backend}");
        assert_eq!(
            cells[1]["outputs"][0],
            json!({"output_type": "stream", "name": "stdout", "text": ["loaded 3\n"]})
        );
        assert_eq!(
            cells[2]["execution_count"], 3,
            "run_python_code ran in between"
        );
        let kinds: Vec<&str> = cells[2]["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["output_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["display_data", "execute_result"]);
        let png = cells[2]["outputs"][0]["data"]["image/png"]
            .as_str()
            .unwrap();
        assert!(
            png.starts_with("iVBORw0KGgo"),
            "base64 of a PNG: {}",
            &png[..20]
        );
        assert_eq!(cells[2]["outputs"][1]["data"]["text/plain"], json!(["10"]));
        let error = &cells[3]["outputs"][0];
        assert_eq!(error["output_type"], "error");
        assert_eq!(error["ename"], "IndexError");
        let traceback: Vec<&str> = error["traceback"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert!(
            traceback.contains(&"  File \"<cell>\", line 1, in <module>"),
            "{traceback:?}"
        );

        // The overview shows what ran.
        let info = call(
            &exec,
            "notebook__inspect",
            json!({"path": "analysis.ipynb"}),
        )
        .await;
        assert!(info.result.contains("code, execution_count 3\n    plt.plot(values)\n    sum(values)\n    outputs: display image/png; result 10\n"), "{}", info.result);
        assert!(
            info.result
                .contains("outputs: error IndexError: list index out of range"),
            "{}",
            info.result
        );
    }
}

#[tokio::test]
async fn an_old_notebook_is_upgraded_and_a_broken_one_left_alone() {
    let python = test_python();
    let (dir, exec) = executor("");
    // nbformat 4.2, no cell ids, source as one string: edits write valid 4.5.
    let old = json!({
        "cells": [{"cell_type": "code", "execution_count": null, "metadata": {}, "outputs": [], "source": "a = 1"}],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 2
    });
    let path = dir.path().join("old.ipynb");
    std::fs::write(&path, serde_json::to_string(&old).unwrap()).unwrap();
    let info = call(
        &exec,
        "notebook__edit",
        json!({"path": "old.ipynb", "index": 0, "source": "a = 2\na"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert_eq!(validate(&python, &path), "4.5");
    let info = call(
        &exec,
        "notebook__run_cell",
        json!({"path": "old.ipynb", "index": 0}),
    )
    .await;
    assert!(info.result.ends_with("[result]\n2\n"), "{}", info.result);
    assert_eq!(validate(&python, &path), "4.5");

    let broken = br#"{"cells": [{"cell_type": "code", "source": "x"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}"#;
    let bad = dir.path().join("broken.ipynb");
    std::fs::write(&bad, broken).unwrap();
    for (tool, args) in [
        ("notebook__inspect", json!({"path": "broken.ipynb"})),
        (
            "notebook__edit",
            json!({"path": "broken.ipynb", "operation": "insert", "source": "y"}),
        ),
        (
            "notebook__run_cell",
            json!({"path": "broken.ipynb", "index": 0}),
        ),
    ] {
        assert_error(
            &call(&exec, tool, args).await,
            ErrorKind::Tool,
            &["broken.ipynb is not a valid nbformat 4 notebook: cell 0: `metadata` is missing"],
        );
        assert_eq!(
            std::fs::read(&bad).unwrap(),
            broken,
            "{tool} changed the file"
        );
    }
}
