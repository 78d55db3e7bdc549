//! The real `toolbox` binary embeds the Python it was built against, whatever the
//! environment says (issue 4): PATH leading to another python3, LD_LIBRARY_PATH leading to
//! another libpython.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;
use toolbox_python::{BUILD_PYTHON_EXECUTABLE, BUILD_PYTHON_PREFIX, BUILD_PYTHON_VERSION};

const PROBE: &str = r#"{"code": "import os, sys\nprint(sys.version.replace('\\n', ' '))\nprint(sys.prefix)\nprint(sys.executable)\nprint(os.__file__)"}"#;

/// Runs `toolbox call run_python_code PROBE` with exactly the given environment.
fn probe(ws: &Path, env: &[(&str, &str)]) -> (i32, Value) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws)
        .env_clear()
        .envs(env.iter().copied())
        .args(["call", "--mode", "full", "run_python_code", PROBE])
        .stdin(Stdio::null());
    let out = cmd.output().expect("toolbox runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let envelope = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "not one JSON envelope: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), envelope)
}

fn assert_build_python(code: i32, envelope: &Value) {
    let result = common::without_folder_note(envelope["result"].as_str().unwrap_or_default());
    assert_eq!(code, 0, "{result}");
    assert_eq!(envelope["status"], "done", "{result}");
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines.first(), Some(&"[stdout]"), "{result}");
    assert_eq!(
        lines.get(1),
        Some(&BUILD_PYTHON_VERSION),
        "sys.version: {result}"
    );
    assert_eq!(
        lines.get(2),
        Some(&BUILD_PYTHON_PREFIX),
        "sys.prefix: {result}"
    );
    assert_eq!(
        lines.get(3),
        Some(&BUILD_PYTHON_EXECUTABLE),
        "sys.executable: {result}"
    );
    let os_module = lines.get(4).copied().unwrap_or_default();
    assert!(
        os_module.starts_with(BUILD_PYTHON_PREFIX),
        "the stdlib must come from the build prefix, got {os_module}"
    );
}

#[test]
fn a_misleading_path_does_not_change_the_embedded_python() {
    let ws = tempfile::tempdir().unwrap();
    // /usr/bin/python3 is Debian's Python here, a different build (and often version).
    let (code, envelope) = probe(ws.path(), &[("PATH", "/usr/bin:/bin"), ("HOME", "/root")]);
    assert_build_python(code, &envelope);
    // Nor do PYTHONHOME / PYTHONPATH meant for another interpreter.
    let (code, envelope) = probe(
        ws.path(),
        &[
            ("PATH", "/usr/bin:/bin"),
            ("PYTHONHOME", "/usr"),
            ("PYTHONPATH", "/usr/lib/python3/dist-packages"),
        ],
    );
    assert_build_python(code, &envelope);
}

#[test]
fn a_misleading_ld_library_path_does_not_swap_libpython() {
    let ws = tempfile::tempdir().unwrap();
    // Debian's libpython3.11.so.1.0 lives here. A DT_RUNPATH rpath loses to LD_LIBRARY_PATH;
    // the binary must carry a DT_RPATH (toolbox/build.rs: -Wl,--disable-new-dtags).
    let (code, envelope) = probe(
        ws.path(),
        &[
            ("PATH", "/usr/bin:/bin"),
            ("LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu:/usr/lib"),
        ],
    );
    assert_build_python(code, &envelope);
}

#[test]
fn call_examples_from_the_docs_work() {
    let ws = tempfile::tempdir().unwrap();
    let run = |tool: &str, args: &str| -> (i32, Value) {
        let out = Command::new(env!("CARGO_BIN_EXE_toolbox"))
            .current_dir(ws.path())
            .env_remove("TOOLBOX_CONFIG")
            .args(["call", "--mode", "full", tool, args])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        (
            out.status.code().unwrap_or(-1),
            serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        )
    };
    let (code, v) = run("run_python_code", r#"{"code": "x = 21\nx * 2"}"#);
    let result = v["result"].as_str().map(common::without_folder_note);
    assert_eq!((code, result), (0, Some("[result]\n42\n")));
    // An exception is a readable result (status done), with the traceback naming <cell>.
    let (code, v) = run("python", r#"{"code": "1/0"}"#);
    assert_eq!(code, 0, "{v}");
    let text = v["result"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("[error] ZeroDivisionError: division by zero"),
        "{text}"
    );
    assert!(text.contains("File \"<cell>\", line 1"), "{text}");
    // A refused install is an error (exit 1) naming the entry.
    let (code, v) = run(
        "kernel_install",
        r#"{"packages": ["-r", "requirements.txt"]}"#,
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap_or_default()
            .contains("refused package entry \"-r\""),
        "{v}"
    );
    let (code, v) = run(
        "registry_lookup",
        r#"{"query": "dumps", "package": "json"}"#,
    );
    assert_eq!(code, 0, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap_or_default()
            .contains("1. json.dumps [function]"),
        "{v}"
    );
}
