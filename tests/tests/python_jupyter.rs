//! The python provider's jupyter backend through the executor, attached to ipykernels the
//! tests start themselves (from the test venv, `TOOLBOX_TEST_PYTHON`): a namespace shared
//! with the kernel's owner and between sessions, figures, interrupts, a kernel killed
//! mid-call, bad connection files, notebook__run_cell in the kernel, and kernel_install
//! into the kernel's own interpreter.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{CallStatus, ErrorKind, ExecutorConfig, PermissionMode, ToolExecutor};

use toolbox as _;
use toolbox_tests::{call_in, executor_toml, test_python, write_file};

/// An ipykernel the test started, with `shared_value = 41` run at its start-up (what the
/// kernel's owner had loaded). Killed with its process group when dropped.
struct TestKernel {
    child: Child,
    connection_file: PathBuf,
    cwd: tempfile::TempDir,
}

impl TestKernel {
    fn start() -> TestKernel {
        Self::start_with(&test_python(), &[])
    }

    fn start_with(python: &Path, env: &[(&str, String)]) -> TestKernel {
        let cwd = tempfile::tempdir().unwrap();
        let connection_file = cwd.path().join("kernel-test.json");
        let mut command = Command::new(python);
        command
            .args(["-m", "ipykernel_launcher", "-f"])
            .arg(&connection_file)
            .arg("--IPKernelApp.exec_lines=['shared_value = 41']")
            .current_dir(cwd.path())
            // The kernel exits if the test process dies.
            .env("JPY_PARENT_PID", std::process::id().to_string())
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = command.spawn().unwrap();
        // ipykernel writes the connection file once its sockets are bound.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let complete = std::fs::read_to_string(&connection_file)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|v| v["hb_port"].is_u64());
            if complete {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the test kernel exited while starting: {status}");
            }
            assert!(Instant::now() < deadline, "the test kernel did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        TestKernel {
            child,
            connection_file,
            cwd,
        }
    }

    /// A new kernel on the connection file of `old` (which must be dead): same ports, same
    /// key, as a restart by Jupyter.
    fn start_again(old: &TestKernel) -> TestKernel {
        let before = std::fs::read_to_string(&old.connection_file).unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let connection_file = cwd.path().join("kernel-test.json");
        std::fs::write(&connection_file, &before).unwrap();
        let mut command = Command::new(test_python());
        command
            .args(["-m", "ipykernel_launcher", "-f"])
            .arg(&connection_file)
            .arg("--IPKernelApp.exec_lines=['shared_value = 41']")
            .current_dir(cwd.path())
            .env("JPY_PARENT_PID", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = command.spawn().unwrap();
        let info: Value = serde_json::from_str(&before).unwrap();
        let shell = format!("127.0.0.1:{}", info["shell_port"]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&shell).is_err() {
            assert!(
                Instant::now() < deadline,
                "the restarted kernel did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        TestKernel {
            child,
            connection_file,
            cwd,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn kill(&mut self) {
        // SAFETY: kill(2) of the process group this test created.
        unsafe { libc::kill(-self.pid(), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for TestKernel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An executor in full mode whose `[python]` attaches to `kernel` (plus `extra` lines).
fn attached(kernel: &TestKernel, extra: &str) -> (tempfile::TempDir, ToolExecutor) {
    let toml = format!(
        "[python]\nbackend = \"jupyter\"\nconnection_file = {:?}\n{extra}",
        kernel.connection_file.to_str().unwrap()
    );
    executor_toml(PermissionMode::Full, &toml)
}

async fn run(exec: &ToolExecutor, session: &str, code: &str) -> toolbox_executor::ToolCallInfo {
    call_in(exec, session, "run_python_code", json!({ "code": code })).await
}

async fn done(exec: &ToolExecutor, session: &str, code: &str) -> String {
    let info = run(exec, session, code).await;
    assert_eq!(info.status, CallStatus::Done, "{code:?}: {}", info.result);
    info.result
}

#[tokio::test]
async fn an_attached_kernel_shares_its_namespace_with_the_owner_and_every_session() {
    let kernel = TestKernel::start();
    let (dir, exec) = attached(&kernel, "");
    // Set by the kernel's owner before toolbox attached.
    assert_eq!(
        done(&exec, "s1", "shared_value + 1").await,
        "[result]\n42\n"
    );
    done(&exec, "s1", "from_tool = 'set by toolbox'").await;
    // The kernel is one namespace: another session sees it too.
    assert_eq!(
        done(&exec, "s2", "from_tool").await,
        "[result]\n'set by toolbox'\n"
    );
    // toolbox leaves the kernel's working directory alone; OUTPUT_DIR is the calling
    // session's output folder.
    let text = done(&exec, "s2", "import os\nprint(os.getcwd())\nOUTPUT_DIR").await;
    let output = dir.path().join(".toolbox/sessions/s2/output");
    assert_eq!(
        text,
        format!(
            "[stdout]\n{}\n[result]\n'{}'\n",
            kernel.cwd.path().display(),
            output.display()
        )
    );
    // Streams, display() and errors, rendered as the other backends render them.
    assert_eq!(
        done(
            &exec,
            "s1",
            "import sys\nprint('out')\nprint('err', file=sys.stderr)\ndisplay('shown')\n[1, 2]"
        )
        .await,
        "[stdout]\nout\n[stderr]\nerr\n[display_data]\n'shown'\n[result]\n[1, 2]\n"
    );
    let text = done(&exec, "s1", "def half(n):\n    return n / 0\nhalf(4)").await;
    assert!(
        text.starts_with(
            "[error] ZeroDivisionError: division by zero\nTraceback (most recent call last):\n  \
             File \"<cell>\", line 3, in <module>\n    half(4)\n  File \"<cell>\", line 2, in half\n"
        ),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "ANSI colours left: {text:?}");
    // A matplotlib figure (ipykernel's inline backend) lands in the session's output folder.
    let text = done(
        &exec,
        "s1",
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);",
    )
    .await;
    assert_eq!(
        text,
        "[display_data]\nimage/png .toolbox/sessions/s1/output/figure-1.png (output/figure-1.png)\n"
    );
    let png = std::fs::read(dir.path().join(".toolbox/sessions/s1/output/figure-1.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    // Nothing of toolbox's is left in the user's namespace but OUTPUT_DIR.
    let text = done(
        &exec,
        "s1",
        "sorted(k for k in globals() if 'toolbox' in k.lower() or k in ('SRC', 'IP', 'm', 'old'))",
    )
    .await;
    assert_eq!(text, "[result]\n[]\n");
}

#[tokio::test]
async fn an_interrupted_sleep_leaves_the_attached_kernel_usable() {
    let kernel = TestKernel::start();
    let (_d, exec) = attached(&kernel, "");
    done(&exec, "s1", "kept = 'still here'").await;
    let info = call_in(
        &exec,
        "s1",
        "run_python_code",
        json!({"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", "timeout_ms": 2000}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result.starts_with(
            "run_python_code timed out after 2000 ms: the code was interrupted \
             (KeyboardInterrupt was raised inside it)"
        ),
        "{}",
        info.result
    );
    assert!(
        info.result.contains("[stdout]\nsleeping\n"),
        "{}",
        info.result
    );
    assert!(
        info.result
            .contains("    time.sleep(60)\nKeyboardInterrupt"),
        "{}",
        info.result
    );
    assert_eq!(
        done(&exec, "s1", "(kept, shared_value)").await,
        "[result]\n('still here', 41)\n"
    );
}

#[tokio::test]
async fn an_attached_kernel_killed_mid_call_gives_a_clear_error() {
    let mut kernel = TestKernel::start();
    let (_d, exec) = attached(&kernel, "");
    done(&exec, "s1", "x = 1").await;
    let pid = kernel.pid();
    // Killed once the code is running (it says so by creating a file).
    let mark = kernel.cwd.path().join("running");
    let seen = mark.clone();
    let killer = std::thread::spawn(move || {
        for _ in 0..6000 {
            if seen.exists() {
                // SAFETY: kill(2) of the process group this test created.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
    let code = format!(
        "import time\nopen({:?}, 'w').close()\ntime.sleep(60)",
        mark.to_str().unwrap()
    );
    let info = run(&exec, "s1", &code).await;
    assert!(killer.join().unwrap(), "the code never ran");
    kernel.kill();
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result.starts_with(&format!(
            "run_python_code: the attached kernel (connection file {}) died during the call (it \
             stopped answering, heartbeat included, for ",
            kernel.connection_file.display()
        )),
        "{}",
        info.result
    );
    assert!(
        info.result.contains(
            "its state (variables, imports) is lost. toolbox did not start this kernel and \
             cannot restart it"
        ),
        "{}",
        info.result
    );
    // The next call says at once that nothing is there any more.
    let info = run(&exec, "s1", "x").await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result
            .contains("cannot attach to the Jupyter kernel of [python] connection_file")
            && info.result.contains("its shell port")
            && info.result.contains("is the kernel running?"),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn a_kernel_its_owner_restarted_is_found_again_and_the_loss_is_said() {
    let mut kernel = TestKernel::start();
    let (_d, exec) = attached(&kernel, "");
    done(&exec, "s1", "before_restart = 1").await;
    // The owner restarts the kernel: a new process on the same connection file (same ports
    // and key), as Jupyter's restart does.
    kernel.kill();
    let restarted = TestKernel::start_again(&kernel);
    // The test's blocking waits above held up its (single-threaded) runtime; a moment
    // passes before the next call, as it does between an owner's restart and a tool call.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = run(&exec, "s1", "'before_restart' in globals()").await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.starts_with(&format!(
            "note: the attached kernel (connection file {}) was restarted since toolbox's \
             previous call (by its owner?): variables and imports from before that are gone\n",
            kernel.connection_file.display()
        )),
        "{}",
        info.result
    );
    assert!(
        info.result.ends_with("[result]\nFalse\n"),
        "{}",
        info.result
    );
    // The helper is back: tracebacks are the plain ones again.
    let text = done(&exec, "s1", "1 / 0").await;
    assert!(
        text.starts_with("[error] ZeroDivisionError: division by zero\nTraceback (most recent call last):\n  File \"<cell>\", line 1"),
        "{text}"
    );
    assert_eq!(done(&exec, "s1", "shared_value").await, "[result]\n41\n");
    drop(restarted);
}

#[tokio::test]
async fn a_kernel_that_stops_answering_does_not_hang_the_call() {
    let kernel = TestKernel::start();
    // A call of up to five minutes; the kernel freezes (SIGSTOP: sockets open, no answers,
    // heartbeat included) once the code runs.
    let (_d, exec) = attached(&kernel, "timeout_ms = 300000\n");
    let pid = kernel.pid();
    let mark = kernel.cwd.path().join("running");
    let seen = mark.clone();
    let freezer = std::thread::spawn(move || {
        for _ in 0..6000 {
            if seen.exists() {
                // SAFETY: kill(2) of the process group this test created.
                unsafe { libc::kill(-pid, libc::SIGSTOP) };
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    });
    let code = format!(
        "import time\nopen({:?}, 'w').close()\ntime.sleep(60)",
        mark.to_str().unwrap()
    );
    let info = run(&exec, "s1", &code).await;
    assert!(freezer.join().unwrap(), "the code never ran");
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result
            .contains("died during the call (it stopped answering, heartbeat included, for "),
        "{}",
        info.result
    );
    // SAFETY: as above; the kernel is killed with its group when `kernel` drops.
    unsafe { libc::kill(-pid, libc::SIGCONT) };
}

#[tokio::test]
async fn bad_connection_files_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let fails = |file: PathBuf, extra: &'static str| async move {
        let toml = format!(
            "[python]\nbackend = \"jupyter\"\nconnection_file = {:?}\n{extra}",
            file.to_str().unwrap()
        );
        let (_d, exec) = executor_toml(PermissionMode::Full, &toml);
        let info = run(&exec, "s1", "1").await;
        assert_eq!(info.status, CallStatus::Error, "{}", info.result);
        assert_eq!(info.error_kind, Some(ErrorKind::Tool), "{}", info.result);
        info.result
    };
    let prefix = |file: &Path| {
        format!(
            "run_python_code: cannot attach to the Jupyter kernel of [python] connection_file {}: ",
            file.display()
        )
    };

    let missing = dir.path().join("missing.json");
    let e = fails(missing.clone(), "").await;
    assert!(
        e.starts_with(&format!(
            "{}cannot read the connection file {}: No such file or directory",
            prefix(&missing),
            missing.display()
        )),
        "{e}"
    );

    let garbage = write_file(dir.path(), "garbage.json", "{not json");
    let e = fails(garbage.clone(), "").await;
    assert!(
        e.starts_with(&format!(
            "{}{} is not a usable Jupyter connection file: it is not JSON",
            prefix(&garbage),
            garbage.display()
        )),
        "{e}"
    );

    let no_port = write_file(
        dir.path(),
        "no-port.json",
        r#"{"key": "k", "ip": "127.0.0.1"}"#,
    );
    let e = fails(no_port.clone(), "").await;
    assert!(
        e.ends_with("`shell_port` is missing or not a port number"),
        "{e}"
    );

    // Well-formed, but nothing listens on its ports.
    let ports: Vec<u16> = (0..5)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect::<Vec<_>>()
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    let stale = write_file(
        dir.path(),
        "stale.json",
        json!({"shell_port": ports[0], "iopub_port": ports[1], "stdin_port": ports[2],
               "control_port": ports[3], "hb_port": ports[4], "ip": "127.0.0.1",
               "key": "k", "transport": "tcp", "signature_scheme": "hmac-sha256"})
        .to_string(),
    );
    let e = fails(stale.clone(), "").await;
    assert!(
        e.starts_with(&format!(
            "{}nothing answers on 127.0.0.1:{}, its shell port (",
            prefix(&stale),
            ports[0]
        )) && e.ends_with("): is the kernel running?"),
        "{e}"
    );

    // A live kernel, but the wrong key: it drops every message toolbox signs.
    let kernel = TestKernel::start();
    let mut info: Value =
        serde_json::from_str(&std::fs::read_to_string(&kernel.connection_file).unwrap()).unwrap();
    info["key"] = json!("not-the-key");
    let wrong_key = write_file(dir.path(), "wrong-key.json", info.to_string());
    let e = fails(wrong_key.clone(), "kernel_timeout_ms = 2000").await;
    assert!(
        e.starts_with(&format!(
            "{}it did not answer kernel_info_request within [python] kernel_timeout_ms",
            prefix(&wrong_key)
        )),
        "{e}"
    );
    // Attaching is bounded by the call's own timeout as well: a silent kernel costs a call
    // its timeout_ms, not the 60 s of kernel_timeout_ms.
    let e = fails(wrong_key.clone(), "timeout_ms = 1500").await;
    assert!(
        e.starts_with(&format!(
            "{}it did not answer kernel_info_request within the call's timeout (1500 ms)",
            prefix(&wrong_key)
        )),
        "{e}"
    );
}

#[test]
fn a_workspace_cannot_switch_to_a_kernel_or_point_at_one() {
    let ws = tempfile::tempdir().unwrap();
    write_file(
        ws.path(),
        "toolbox.toml",
        "[python]\nbackend = \"jupyter\"\nconnection_file = \"/tmp/kernel.json\"\nkernel_name = \"python3\"\n",
    );
    let mut config = ExecutorConfig::new(ws.path());
    let e = config
        .apply_workspace_restrictions()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("[python] backend = \"jupyter\": must be one of embedded, isolated"),
        "{e}"
    );
    assert!(e.contains("[python] connection_file = "), "{e}");
    assert!(e.contains("[python] kernel_name = "), "{e}");
}

#[tokio::test]
async fn notebook_cells_run_in_the_attached_kernel() {
    let kernel = TestKernel::start();
    let (dir, exec) = attached(&kernel, "");
    let nb = json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [
            {"cell_type": "code", "id": "use", "metadata": {}, "execution_count": null,
             "outputs": [], "source": "print('owner loaded', shared_value)\nshared_value * 2"},
            {"cell_type": "code", "id": "plot", "metadata": {}, "execution_count": null,
             "outputs": [], "source": "import matplotlib.pyplot as plt\nplt.plot([1, 2]);"},
        ]
    });
    write_file(dir.path(), "a.ipynb", nb.to_string());
    for cell in ["use", "plot"] {
        let info = call_in(
            &exec,
            "nb",
            "notebook__run_cell",
            json!({"path": "a.ipynb", "cell_id": cell}),
        )
        .await;
        assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    }
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a.ipynb")).unwrap())
            .unwrap();
    let outputs = &written["cells"][0]["outputs"];
    assert_eq!(outputs[0]["text"], json!(["owner loaded 41\n"]));
    assert_eq!(outputs[1]["output_type"], "execute_result");
    assert_eq!(outputs[1]["data"]["text/plain"], json!(["82"]));
    let figure = &written["cells"][1]["outputs"][0];
    assert_eq!(figure["output_type"], "display_data");
    assert!(figure["data"]["image/png"]
        .as_str()
        .is_some_and(|b64| b64.starts_with("iVBORw0KGgo")));
    // The kernel's own count, as its owner sees it.
    assert!(written["cells"][1]["execution_count"].as_u64().unwrap() >= 2);
}

/// A minimal pure-Python wheel, written by hand (the python provider's test script).
const WHEEL_BUILDER: &str = include_str!("../../providers/python/tests/make_wheel.py");

#[tokio::test]
async fn kernel_install_goes_into_the_attached_kernels_own_interpreter() {
    let python = test_python();
    let work = tempfile::tempdir().unwrap();
    // The kernel runs a Python of its own: a fresh venv (its packages visible through
    // PYTHONPATH, so ipykernel imports) that toolbox's configuration never names.
    let venv = work.path().join("kernel-venv");
    let status = Command::new(&python)
        .args(["-m", "venv", "--without-pip", "--system-site-packages"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(status.success());
    let site = Command::new(&python)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = String::from_utf8(site.stdout).unwrap().trim().to_string();
    let wheels = work.path().join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    let status = Command::new(&python)
        .args(["-c", WHEEL_BUILDER, "toolbox_kernel_demo", "0.1.0"])
        .arg(&wheels)
        .status()
        .unwrap();
    assert!(status.success());
    let kernel_python = venv.join("bin/python");
    let kernel = TestKernel::start_with(&kernel_python, &[("PYTHONPATH", site)]);
    let (_d, exec) = attached(
        &kernel,
        &format!(
            "pip_args = [\"--no-index\", \"--find-links\", {:?}]\n",
            wheels.to_str().unwrap()
        ),
    );
    let text = done(&exec, "s1", "import toolbox_kernel_demo").await;
    assert!(text.contains("ModuleNotFoundError"), "{text}");
    let info = call_in(
        &exec,
        "s1",
        "kernel_install",
        json!({"packages": ["toolbox-kernel-demo==0.1.0"]}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.starts_with(&format!(
            "Installed into the kernel's own interpreter {} (its sys.executable): \
             toolbox-kernel-demo==0.1.0.",
            kernel_python.display()
        )),
        "{}",
        info.result
    );
    // The live kernel imports it now, from its own venv.
    assert_eq!(
        done(
            &exec,
            "s1",
            "import toolbox_kernel_demo\n(toolbox_kernel_demo.hello(), toolbox_kernel_demo.__file__.startswith(__import__('sys').prefix))"
        )
        .await,
        "[result]\n('hello from toolbox_kernel_demo', True)\n"
    );
    // The test venv (toolbox's own Python environment here) was not touched.
    let base = Command::new(&python)
        .args(["-c", "import toolbox_kernel_demo"])
        .output()
        .unwrap();
    assert!(!base.status.success());
}
