//! The real `toolbox` binary shuts down the Jupyter kernels it started when it exits: each
//! is asked to shut down (so the kernel's own exit handlers run) and nothing outlives
//! toolbox, not even the kernel's connection file.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The test venv (scripts/test.sh makes it; `TOOLBOX_TEST_PYTHON` names its python), which
/// has ipykernel and its `python3` kernelspec.
fn test_venv() -> PathBuf {
    let python = std::env::var_os("TOOLBOX_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-venv/bin/python")
        });
    let venv = python
        .parent()
        .and_then(|b| b.parent())
        .unwrap()
        .to_path_buf();
    assert!(
        venv.join("share/jupyter/kernels/python3/kernel.json")
            .is_file(),
        "this test needs the test venv with ipykernel (scripts/test.sh, or TOOLBOX_TEST_PYTHON)"
    );
    venv
}

fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
        })
        .is_some_and(|dead| !dead)
}

#[test]
fn kernels_toolbox_started_are_shut_down_cleanly_at_exit() {
    let ws = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = elsewhere.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[python]\nbackend = \"jupyter\"\nkernel_name = \"python3\"\nvenv = {:?}\n",
            test_venv().to_str().unwrap()
        ),
    )
    .unwrap();
    let marker = elsewhere.path().join("clean-exit");
    // The kernel writes the marker only if it exits normally (atexit handlers do not run
    // when a process is killed).
    let code = format!(
        "import atexit, os, sys\natexit.register(lambda: open({:?}, 'w').write('bye'))\nprint(os.getpid())\nf = sys.argv[sys.argv.index('-f') + 1]\nprint(f)\nprint(os.path.exists(f))",
        marker.to_str().unwrap()
    );
    let out = common::toolbox(ws.path())
        .env("TOOLBOX_CONFIG", &config)
        .args(["call", "--mode", "full", "run_python_code"])
        .arg(json!({ "code": code }).to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let envelope: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "not one JSON envelope: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let result = envelope["result"].as_str().unwrap();
    assert_eq!(envelope["status"], "done", "{result}");
    let lines: Vec<&str> = common::without_folder_note(result).lines().collect();
    assert_eq!(lines[0], "[stdout]", "{result}");
    let pid: i32 = lines[1].parse().unwrap();
    let connection_file = PathBuf::from(lines[2]);
    assert_eq!(
        lines[3], "False",
        "the connection file is still there: {result}"
    );
    assert!(
        connection_file
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("toolbox-kernel-"),
        "{result}"
    );
    // toolbox has exited; its kernel must be gone (allow the process table a moment).
    let deadline = Instant::now() + Duration::from_secs(10);
    while running(pid) {
        if Instant::now() > deadline {
            // SAFETY: kill(2) of the leftover kernel, so the failure leaves nothing behind.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the kernel {pid} outlived toolbox");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("bye"),
        "the kernel was killed instead of being asked to shut down"
    );
    assert!(
        !connection_file.parent().unwrap().exists(),
        "the kernel's connection folder was left behind"
    );
    // Not even while it ran: toolbox removes it once the kernel has read it.
}

/// A user with an activated venv holding ipykernel (`VIRTUAL_ENV` set, no `[python] venv`)
/// expects `kernel_name = "python3"` to be that venv's kernel, as Jupyter finds it.
#[test]
fn the_activated_venvs_kernelspec_is_found() {
    let ws = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = elsewhere.path().join("config.toml");
    std::fs::write(
        &config,
        "[python]\nbackend = \"jupyter\"\nkernel_name = \"python3\"\n",
    )
    .unwrap();
    let venv = test_venv();
    let out = common::toolbox(ws.path())
        .env("TOOLBOX_CONFIG", &config)
        .env("VIRTUAL_ENV", &venv)
        .args(["call", "--mode", "full", "run_python_code"])
        .arg(json!({ "code": "import sys\nprint(sys.prefix)" }).to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let envelope: Value = serde_json::from_str(stdout.trim()).unwrap();
    let result = envelope["result"].as_str().unwrap();
    assert_eq!(envelope["status"], "done", "{result}");
    let prefix = std::fs::canonicalize(&venv).unwrap();
    let got = common::without_folder_note(result)
        .lines()
        .nth(1)
        .unwrap_or_default();
    assert_eq!(
        std::fs::canonicalize(got).unwrap_or_default(),
        prefix,
        "{result}"
    );
}
