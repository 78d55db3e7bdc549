//! The python provider through the whole executor: aliases, sessions, permissions, the
//! executor's own timeout, the isolated backend chosen by configuration, and toolsets.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{
    CallStatus, ErrorKind, ExecutorConfig, PermissionMode, SchemaFormat, ToolExecutor, ToolRequest,
};

use toolbox as _;
use toolbox_tests::{call_in, exchange, executor_toml};

/// The embedded interpreter runs one job at a time for the whole process, so tests that
/// measure timeouts must not queue behind another test's slow import: run them one by one.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

#[tokio::test]
async fn a_live_session_through_every_name() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(PermissionMode::Full, "");
    let info = call_in(&exec, "s1", "run_python_code", json!({"code": "x = 1"})).await;
    // The session's first result says where Python runs (not the workspace root); later
    // ones do not repeat it.
    assert_eq!(
        (info.status, info.result.as_str()),
        (
            CallStatus::Done,
            "note: Python runs in this session's scratchpad, .toolbox/sessions/s1/scratchpad \
             (scratchpad): relative paths in your code are relative to that folder, not to the \
             workspace root\n(no output)\n"
        )
    );
    assert_eq!(info.tool, "run_python_code");
    let info = call_in(&exec, "s1", "python", json!({"content": "x + 1"})).await;
    assert_eq!(info.result, "[result]\n2\n");
    let info = call_in(&exec, "s1", "python_exec", json!({"code": "x += 1; x"})).await;
    assert_eq!(info.result, "[result]\n2\n");
    // Another session does not see x.
    let info = call_in(&exec, "s2", "python", json!({"code": "x"})).await;
    assert_eq!(info.status, CallStatus::Done, "an exception is a result");
    assert!(
        info.result
            .contains("\n[error] NameError: name 'x' is not defined"),
        "{}",
        info.result
    );
    // The model gets {"status": ..., "result": ...}.
    let envelope: Value = serde_json::from_str(&info.envelope()).unwrap();
    assert_eq!(envelope["status"], "done");
    // Bad arguments are tool errors that name the argument.
    let info = call_in(&exec, "s1", "python", json!({"code": 5})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Tool));
    // The message names the tool as the call did (`python`, an alias).
    assert_eq!(
        info.result,
        "python: argument `code` must be a string, got a number 5"
    );
}

#[tokio::test]
async fn permissions_gate_python_but_not_lookups() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(PermissionMode::ReadOnly, "");
    let info = call_in(&exec, "s1", "run_python_code", json!({"code": "1"})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    let info = call_in(&exec, "s1", "python_package", json!({"packages": ["x"]})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    let info = call_in(
        &exec,
        "s1",
        "registry_lookup",
        json!({"query": "mean", "package": "statistics"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.contains("1. statistics.mean [function]"),
        "{}",
        info.result
    );
    let visible: Vec<String> = exec
        .visible_tools()
        .iter()
        .map(|t| t.info.name.clone())
        .collect();
    assert!(visible.contains(&"registry_lookup".to_string()));
    assert!(!visible.contains(&"run_python_code".to_string()));
}

#[tokio::test]
async fn the_executor_timeout_interrupts_embedded_code() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(PermissionMode::Full, "");
    call_in(&exec, "s1", "python", json!({"code": "kept = 1"})).await;
    // The executor's limit is shorter than the provider's: the executor drops the call and
    // the provider interrupts the code it left running.
    let request = ToolRequest::new("t", "python", json!({"code": "while True: pass"}))
        .session("s1")
        .timeout(Duration::from_millis(300));
    let info = exec.run(request).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Timeout));
    let started = Instant::now();
    let info = call_in(&exec, "s1", "python", json!({"code": "kept"})).await;
    assert_eq!(info.result, "[result]\n1\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn configuration_picks_the_isolated_backend() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\ntimeout_ms = 500\n",
    );
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "import os\nos.getpid()"}),
    )
    .await;
    let pid: u32 = info
        .result
        .trim()
        .rsplit('\n')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(pid, std::process::id(), "runs in a worker process");
    // The configured default timeout applies, and kills.
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "import time\ntime.sleep(60)"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result.contains(
            "timed out after 500 ms: the worker process was killed; the session was restarted"
        ),
        "{}",
        info.result
    );
    // A bad [python] table is a clear error.
    let (_d, exec) = executor_toml(PermissionMode::Full, "[python]\nbackend = \"subprocess\"\n");
    let info = call_in(&exec, "s1", "python", json!({"code": "1"})).await;
    assert!(
        info.result
            .contains("[python] backend must be \"embedded\", \"isolated\" or \"jupyter\""),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn integrated_notebook_is_python_notebook_and_registry_tools() {
    // Exactly the sidecar's group: python + notebook + lookup (kernel_install is not in it).
    let _serial = serial().await;
    let (_d, exec) = executor_toml(PermissionMode::Full, "");
    let schemas = exec
        .resolve_agent_tool_schemas(
            Some(&["integrated_notebook"]),
            PermissionMode::Full,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    let mut names: Vec<&str> = schemas
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "notebook__edit",
            "notebook__inspect",
            "notebook__run_cell",
            "registry_lookup",
            "run_python_code"
        ]
    );
    // In read_only mode only the reading tools remain.
    let schemas = exec
        .resolve_agent_tool_schemas(
            Some(&["integrated_notebook"]),
            PermissionMode::ReadOnly,
            SchemaFormat::Mcp,
        )
        .unwrap();
    let mut names: Vec<&str> = schemas
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["notebook__inspect", "registry_lookup"]);
}

/// A module that, when imported, writes `marker` (an absolute path outside the workspace).
fn evil_module(marker: &std::path::Path) -> String {
    format!(
        "import pathlib\npathlib.Path({:?}).write_text('ran')\ndef pwned():\n    pass\n",
        marker.to_str().unwrap()
    )
}

/// registry_lookup is a Read tool, so it must never import workspace code: a planted
/// `evil.py` in the scratchpad, the workspace root or the output folder is not found.
#[tokio::test]
async fn registry_lookup_never_imports_workspace_code() {
    let _serial = serial().await;
    let markers = tempfile::tempdir().unwrap();
    let places = [
        ".toolbox/sessions/s1/scratchpad",
        "",
        ".toolbox/sessions/s1/output",
    ];
    for (i, place) in places.iter().enumerate() {
        let (dir, exec) = executor_toml(PermissionMode::ReadOnly, "");
        let marker = markers.path().join(format!("ran-{i}"));
        let folder = dir.path().join(place);
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(folder.join("evil.py"), evil_module(&marker)).unwrap();
        let info = call_in(
            &exec,
            "s1",
            "registry_lookup",
            json!({"query": "pwned", "package": "evil"}),
        )
        .await;
        assert!(!marker.exists(), "evil.py in {place:?} was imported");
        assert_eq!(info.status, CallStatus::Error, "{place:?}: {}", info.result);
        assert!(
            info.result.contains("cannot import evil")
                && info.result.contains("No module named 'evil'"),
            "{place:?}: {}",
            info.result
        );
        // A dotted query does not import it either, nor does the module-name search.
        for args in [json!({"query": "evil.pwned"}), json!({"query": "evil"})] {
            let info = call_in(&exec, "s1", "registry_lookup", args).await;
            assert!(!marker.exists(), "evil.py in {place:?} was imported");
            assert!(!info.result.contains("1. evil"), "{}", info.result);
        }
    }
    // The standard library is still searched, in read_only mode.
    let (_d, exec) = executor_toml(PermissionMode::ReadOnly, "");
    let info = call_in(
        &exec,
        "s1",
        "registry_lookup",
        json!({"query": "dumps", "package": "json"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.contains("1. json.dumps [function]"),
        "{}",
        info.result
    );
    // A name that is not a dotted identifier is refused before anything runs.
    let info = call_in(
        &exec,
        "s1",
        "registry_lookup",
        json!({"query": "x", "package": "evil; import os"}),
    )
    .await;
    assert_eq!(info.error_kind, Some(ErrorKind::Tool));
    assert!(
        info.result.contains("argument `package`")
            && info.result.contains("not an importable module name"),
        "{}",
        info.result
    );
}

/// A venv configured inside the workspace is workspace data (any file write can plant a
/// module or a `.pth` file in its site-packages), so lookups do not use it.
#[tokio::test]
async fn registry_lookup_ignores_a_venv_inside_the_workspace() {
    let _serial = serial().await;
    // The build interpreter, as the embedded session reports it, makes a real venv.
    let (_d, full) = executor_toml(PermissionMode::Full, "");
    let info = call_in(
        &full,
        "s1",
        "python",
        json!({"code": "import sys\nprint(sys.executable)\nprint('python%d.%d' % sys.version_info[:2])"}),
    )
    .await;
    let mut lines = info
        .result
        .lines()
        .skip_while(|l| *l == "[stdout]" || l.starts_with("note: "));
    let (python, version) = (lines.next().unwrap(), lines.next().unwrap());
    let (dir, exec) = executor_toml(PermissionMode::ReadOnly, "[python]\nvenv = \"venv\"\n");
    let venv = dir.path().join("venv");
    let made = std::process::Command::new(python)
        .args([
            "-I",
            "-m",
            "venv",
            "--without-pip",
            "--system-site-packages",
        ])
        .arg(&venv)
        .current_dir("/")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let markers = tempfile::tempdir().unwrap();
    let marker = markers.path().join("ran");
    let site = venv.join("lib").join(version).join("site-packages");
    std::fs::write(site.join("evil.py"), evil_module(&marker)).unwrap();
    // A .pth line starting with `import` runs at every start of the venv's python.
    std::fs::write(site.join("evil.pth"), "import evil\n").unwrap();
    let info = call_in(
        &exec,
        "s1",
        "registry_lookup",
        json!({"query": "pwned", "package": "evil"}),
    )
    .await;
    assert!(
        !marker.exists(),
        "the workspace venv was used: {}",
        info.result
    );
    assert!(
        info.result.contains("No module named 'evil'"),
        "{}",
        info.result
    );
    let info = call_in(
        &exec,
        "s1",
        "registry_lookup",
        json!({"query": "dumps", "package": "json"}),
    )
    .await;
    assert!(
        !marker.exists(),
        "the workspace venv was used: {}",
        info.result
    );
    assert!(
        info.result.contains("1. json.dumps [function]"),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn the_isolated_worker_runs_under_the_memory_limit_and_survives_it() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\n[limits]\nmemory_mb = 200\n",
    );
    call_in(&exec, "s1", "python", json!({"code": "kept = 1"})).await;
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "x = bytearray(1024**3)"}),
    )
    .await;
    assert!(
        info.result.starts_with(
            "note: the code exceeded the memory limit of 200 MiB ([limits] memory_mb)\n"
        ),
        "{}",
        info.result
    );
    assert!(
        info.result.contains("[error] MemoryError"),
        "{}",
        info.result
    );
    // The worker, and the session's state, survived; the executor too.
    let info = call_in(&exec, "s1", "python", json!({"code": "kept + 1"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert_eq!(info.result, "[result]\n2\n");
}

#[tokio::test]
async fn the_isolated_worker_is_stopped_by_the_cpu_limit_and_restarts() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\n[limits]\ncpu_seconds = 1\n",
    );
    // The budget is per call: a first call's CPU time does not count against the next.
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let info = call_in(&exec, "s1", "python", json!({"code": "while True: pass"})).await;
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result.starts_with(
            "the code exceeded the CPU time limit of 1 s ([limits] cpu_seconds) and was stopped.\n"
        ),
        "{}",
        info.result
    );
    let info = call_in(&exec, "s1", "python", json!({"code": "1 + 1"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.ends_with("[result]\n2\n"), "{}", info.result);
    // Code that ignores SIGXCPU (and could raise its own soft limit) meets the watchdog.
    let info = call_in(
        &exec,
        "s1",
        "python",
        json!({"code": "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result.starts_with(
            "the code exceeded the CPU time limit of 1 s ([limits] cpu_seconds) and was stopped.\n"
        ),
        "{}",
        info.result
    );
}

/// `PYTHONPATH` pointing into the workspace is ignored. The variable is set only in a child
/// process running this same test binary (setting it here would race the other tests).
#[test]
fn registry_lookup_ignores_pythonpath() {
    const CHILD: &str = "TOOLBOX_TEST_LOOKUP_CHILD_WORKSPACE";
    if let Some(workspace) = std::env::var_os(CHILD) {
        // The child: PYTHONPATH names the workspace, which holds evil.py.
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let mut config = ExecutorConfig::new(&workspace);
        config.permissions.mode = PermissionMode::ReadOnly;
        let exec = ToolExecutor::new(config).unwrap();
        let info = runtime.block_on(call_in(
            &exec,
            "s1",
            "registry_lookup",
            json!({"query": "pwned", "package": "evil"}),
        ));
        assert!(
            info.result.contains("No module named 'evil'"),
            "{}",
            info.result
        );
        return;
    }
    let workspace = tempfile::tempdir().unwrap();
    let markers = tempfile::tempdir().unwrap();
    let marker = markers.path().join("ran");
    std::fs::write(workspace.path().join("evil.py"), evil_module(&marker)).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "registry_lookup_ignores_pythonpath",
            "--nocapture",
        ])
        .env(CHILD, workspace.path())
        .env("PYTHONPATH", workspace.path())
        .env("PYTHONSTARTUP", workspace.path().join("evil.py"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
    assert!(!marker.exists(), "PYTHONPATH was honoured: {text}");
}

#[tokio::test]
async fn bad_limits_are_refused_naming_the_key() {
    let _serial = serial().await;
    let (_d, exec) = executor_toml(PermissionMode::Full, "[limits]\nprocesses = \"many\"\n");
    let info = call_in(&exec, "s1", "python", json!({"code": "1"})).await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result
            .contains("[limits] processes must be a whole number, got \"many\""),
        "{}",
        info.result
    );
}

/// The swap race of the security report: while a thread swaps the session scratchpad with a
/// link to a folder outside the workspace, relative writes of run_python_code, embedded and
/// isolated, all land in the scratchpad toolbox holds, never outside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_the_scratchpad_for_a_link_never_sends_writes_outside() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let _serial = serial().await;
    for backend in ["embedded", "isolated"] {
        let (dir, exec) = executor_toml(
            PermissionMode::Full,
            &format!("[python]\nbackend = \"{backend}\"\n"),
        );
        let outside = tempfile::tempdir().unwrap();
        let first = call_in(&exec, "s", "run_python_code", json!({"code": "import os"})).await;
        assert_eq!(
            first.status,
            CallStatus::Done,
            "{backend}: {}",
            first.result
        );
        let session = dir.path().join(".toolbox/sessions/s");
        let (pad, swap) = (session.join("scratchpad"), session.join("swap"));
        std::os::unix::fs::symlink(outside.path(), &swap).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, pad, swap) = (stop.clone(), pad.clone(), swap.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if exchange(&pad, &swap) {
                        n += 1;
                    }
                }
                n
            })
        };
        let deadline = Instant::now() + Duration::from_secs(4);
        let mut runs = 0;
        while Instant::now() < deadline && runs < 600 {
            let code = format!("open('w-{runs}.txt', 'w').write('x')");
            let info = call_in(&exec, "s", "run_python_code", json!({ "code": code })).await;
            assert_eq!(info.status, CallStatus::Done, "{backend}: {}", info.result);
            runs += 1;
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(
            swaps > 100,
            "{backend}: the race loop barely ran ({swaps} swaps)"
        );
        let leaked: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            leaked.is_empty(),
            "{backend}: {} of {runs} writes landed outside the workspace ({swaps} swaps)",
            leaked.len()
        );
        // Every write is in the folder toolbox held, whichever name it has now.
        let real = if std::fs::symlink_metadata(&pad).unwrap().is_dir() {
            pad
        } else {
            swap
        };
        let written = std::fs::read_dir(&real)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("w-")
            })
            .count();
        assert_eq!(written, runs, "{backend}");
    }
}

/// A pipe offered as idle work, recording which thread took it up.
struct OfferedPipe {
    read: std::os::fd::OwnedFd,
    taken_by: std::sync::Mutex<Vec<String>>,
}

impl toolbox_host::handoff::IdleWork for OfferedPipe {
    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.read)
    }
    fn finished(&self) -> bool {
        false
    }
    fn watch(&self, _watching: bool) {}
    fn take(&self) {
        use std::io::Read;
        let mut byte = [0u8; 1];
        let _ = std::fs::File::from(self.read.try_clone().unwrap()).read(&mut byte);
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.taken_by.lock().unwrap().push(name);
    }
}

/// The python provider hands out its interpreter thread's idle slot through the registry
/// (no process-wide offer in host): every executor finds the same one, and work offered
/// there is taken up by the embedded interpreter's own thread while it is idle. This is the
/// path `toolbox mcp` offers its input on.
#[tokio::test]
async fn work_offered_in_the_python_providers_idle_slot_is_taken_by_its_thread() {
    let _serial = serial().await;
    let (_d1, first) = executor_toml(PermissionMode::Full, "");
    let (_d2, second) = executor_toml(PermissionMode::Full, "");
    let slots = first.registry().idle_slots();
    assert_eq!(slots.len(), 1, "one provider (python) has an idle thread");
    let other = second.registry().idle_slots();
    assert!(
        std::sync::Arc::ptr_eq(&slots[0], &other[0]),
        "the process's one thread"
    );

    let (read, mut write) = std::io::pipe().unwrap();
    let work = std::sync::Arc::new(OfferedPipe {
        read: read.into(),
        taken_by: Default::default(),
    });
    let offer = slots[0].offer(work.clone());
    // A call starts the interpreter (if no test did yet); once idle, its thread watches the pipe.
    let info = call_in(&first, "idle", "run_python_code", json!({"code": "1"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    std::io::Write::write_all(&mut write, b"x").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while work.taken_by.lock().unwrap().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the idle Python thread never took the work"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(work.taken_by.lock().unwrap()[0], "toolbox-python");
    drop(offer);
    assert!(slots[0].work().is_none());
}

/// The last line of a result's `[stdout]`.
fn last_stdout_line(result: &str) -> String {
    let stdout = result
        .split_once("[stdout]\n")
        .unwrap_or_else(|| panic!("no [stdout] in {result}"))
        .1;
    let stdout = stdout.split("\n[").next().unwrap();
    stdout.trim_end().lines().last().unwrap_or("").to_string()
}

/// Issue 25 point 7: code finds the session scratchpad in `PYTHON_EXEC_SCRATCHPAD` (the
/// folder exists when it runs), in cells and in `script_path` runs, on the embedded and the
/// isolated backends; temporary files made there are in the scratchpad, files written under
/// `OUTPUT_DIR` land in `output/`; each session sees its own.
#[tokio::test]
async fn python_code_finds_its_scratchpad_in_python_exec_scratchpad() {
    let _serial = serial().await;
    for backend in ["embedded", "isolated"] {
        let (dir, exec) = executor_toml(
            PermissionMode::Full,
            &format!("[python]\nbackend = \"{backend}\"\n"),
        );
        let sessions = dir.path().join(".toolbox/sessions");
        let code = "import os, tempfile\n\
                    p = os.environ['PYTHON_EXEC_SCRATCHPAD']\n\
                    assert os.path.isabs(p) and os.path.isdir(p), p\n\
                    fd, tmp = tempfile.mkstemp(dir=p, suffix='.tmp')\n\
                    os.write(fd, b'partial'); os.close(fd)\n\
                    with open(os.path.join(OUTPUT_DIR, 'report.txt'), 'w') as f:\n    f.write('done')\n\
                    print(os.path.realpath(tmp))";
        let info = call_in(&exec, "a", "run_python_code", json!({ "code": code })).await;
        assert_eq!(info.status, CallStatus::Done, "{backend}: {}", info.result);
        assert!(
            !info.result.contains("[error]"),
            "{backend}: {}",
            info.result
        );
        let tmp = std::path::PathBuf::from(last_stdout_line(&info.result));
        let scratch = sessions.join("a/scratchpad").canonicalize().unwrap();
        assert!(
            tmp.starts_with(&scratch) && tmp.is_file(),
            "{backend}: {} is not in {}",
            tmp.display(),
            scratch.display()
        );
        assert_eq!(
            std::fs::read_to_string(sessions.join("a/output/report.txt")).unwrap(),
            "done",
            "{backend}"
        );

        // Another session, run next in the same interpreter, sees its own scratchpad.
        let show = "import os\nprint(os.environ['PYTHON_EXEC_SCRATCHPAD'])";
        let info = call_in(&exec, "b", "run_python_code", json!({ "code": show })).await;
        assert_eq!(
            last_stdout_line(&info.result),
            sessions.join("b/scratchpad").to_string_lossy(),
            "{backend}: {}",
            info.result
        );
        // A script run sees it too, and the first session gets its own back.
        std::fs::write(dir.path().join("show.py"), show).unwrap();
        let info = call_in(
            &exec,
            "a",
            "run_python_code",
            json!({ "script_path": "show.py" }),
        )
        .await;
        assert_eq!(
            last_stdout_line(&info.result),
            sessions.join("a/scratchpad").to_string_lossy(),
            "{backend}: {}",
            info.result
        );
    }
}

/// A minimal pure-Python wheel, written by hand (the python provider's test script).
const WHEEL_BUILDER: &str = include_str!("../../providers/python/tests/make_wheel.py");

/// Issue 25 point 7: `kernel_install` installs into the per-user venv
/// (`$XDG_DATA_HOME/toolbox/venv`), made on first use, never into the build interpreter's
/// own site-packages nor the workspace's `.venv`, and the next `run_python_code` imports the
/// package, embedded and isolated; with `[python] venv` set by the operator it goes there
/// instead, and the per-user venv is not made. Offline: pip sees only a folder of wheels the
/// test writes. `XDG_DATA_HOME` and `HOME` are set only in a child process running this same
/// test binary (setting them here would race the other tests).
#[test]
fn kernel_install_uses_the_per_user_venv_unless_the_operator_names_one() {
    const CHILD: &str = "TOOLBOX_TEST_USER_VENV_CHILD";
    if let Some(work) = std::env::var_os(CHILD) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(per_user_venv_child(std::path::Path::new(&work)));
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kernel_install_uses_the_per_user_venv_unless_the_operator_names_one",
            "--nocapture",
        ])
        .env(CHILD, work.path())
        .env("XDG_DATA_HOME", work.path().join("data"))
        .env("HOME", work.path().join("home"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
}

async fn per_user_venv_child(work: &std::path::Path) {
    // The build interpreter, as the embedded session reports it.
    let (_d, exec) = executor_toml(PermissionMode::Full, "");
    let info = call_in(
        &exec,
        "s0",
        "run_python_code",
        json!({"code": "import sys\nprint(sys.executable)"}),
    )
    .await;
    let build_python = last_stdout_line(&info.result);
    let wheels = work.join("wheels");
    std::fs::create_dir(&wheels).unwrap();
    for name in ["toolbox_user_venv_demo", "toolbox_operator_venv_demo"] {
        let status = std::process::Command::new(&build_python)
            .args(["-c", WHEEL_BUILDER, name, "0.1.0"])
            .arg(&wheels)
            .status()
            .unwrap();
        assert!(status.success());
    }
    let pip_args = format!(
        "pip_args = [\"--no-index\", \"--find-links\", {:?}]\n",
        wheels.to_str().unwrap()
    );
    let user_venv = work.join("data/toolbox/venv");

    // (2) The operator's [python] venv: packages go there; the per-user venv is not made.
    let operator_venv = work.join("operator-venv");
    let (_d, exec) = executor_toml(
        PermissionMode::Full,
        &format!(
            "[python]\nvenv = {:?}\n{pip_args}",
            operator_venv.to_str().unwrap()
        ),
    );
    let info = call_in(
        &exec,
        "s1",
        "python_package",
        json!({"packages": ["toolbox-operator-venv-demo==0.1.0"]}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.starts_with(&format!(
            "Installed into the venv {} ([python] venv): toolbox-operator-venv-demo==0.1.0.",
            operator_venv.display()
        )),
        "{}",
        info.result
    );
    let info = call_in(
        &exec,
        "s1",
        "run_python_code",
        json!({"code": "import toolbox_operator_venv_demo as m\nprint(m.__file__)"}),
    )
    .await;
    assert!(
        last_stdout_line(&info.result).starts_with(operator_venv.to_str().unwrap()),
        "{}",
        info.result
    );
    assert!(!user_venv.exists(), "the per-user venv was made");

    // (1) The default: the per-user venv, made by the first install.
    let (dir, exec) = executor_toml(PermissionMode::Full, &format!("[python]\n{pip_args}"));
    let info = call_in(
        &exec,
        "s1",
        "run_python_code",
        json!({"code": "import toolbox_user_venv_demo"}),
    )
    .await;
    assert!(
        info.result.contains("ModuleNotFoundError"),
        "{}",
        info.result
    );
    // A project venv in the workspace, which installs must leave alone.
    let project_venv = dir.path().join(".venv");
    let made = std::process::Command::new(&build_python)
        .args(["-I", "-m", "venv", "--without-pip"])
        .arg(&project_venv)
        .current_dir("/")
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    assert!(!user_venv.exists());

    let info = call_in(
        &exec,
        "s1",
        "kernel_install",
        json!({"packages": ["toolbox-user-venv-demo==0.1.0"]}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(
        info.result.starts_with(&format!(
            "Installed into the per-user venv {} (toolbox's default; [python] venv chooses \
             another): toolbox-user-venv-demo==0.1.0.",
            user_venv.display()
        )),
        "{}",
        info.result
    );
    assert!(user_venv.join("pyvenv.cfg").is_file());
    // Made beside its place and renamed: nothing else is left there.
    let beside: Vec<_> = std::fs::read_dir(work.join("data/toolbox"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["venv"]);

    // The next run imports it, from the per-user venv, in the same live session.
    let check = "import toolbox_user_venv_demo as m\nprint(m.hello())\nprint(m.__file__)";
    let info = call_in(&exec, "s1", "run_python_code", json!({ "code": check })).await;
    assert!(
        info.result.contains("hello from toolbox_user_venv_demo"),
        "{}",
        info.result
    );
    let file = last_stdout_line(&info.result);
    assert!(
        file.starts_with(user_venv.to_str().unwrap()),
        "imported from {file}, not from {}",
        user_venv.display()
    );
    // An isolated worker (the build interpreter in a process of its own) imports it too.
    let (_d2, isolated) = executor_toml(
        PermissionMode::Full,
        &format!("[python]\nbackend = \"isolated\"\n{pip_args}"),
    );
    let info = call_in(&isolated, "s1", "run_python_code", json!({ "code": check })).await;
    assert!(
        last_stdout_line(&info.result).starts_with(user_venv.to_str().unwrap()),
        "{}",
        info.result
    );

    // Neither the build interpreter nor the project's .venv got it.
    let base = std::process::Command::new(&build_python)
        .args(["-I", "-c", "import toolbox_user_venv_demo"])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(!base.status.success(), "the build interpreter was changed");
    let project = std::process::Command::new(project_venv.join("bin/python"))
        .args(["-I", "-c", "import toolbox_user_venv_demo"])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(!project.status.success(), "the project .venv was changed");
}
