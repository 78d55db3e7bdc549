//! The python provider through the whole executor: aliases, sessions, permissions, the
//! executor's own timeout, the isolated backend chosen by configuration, and toolsets.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{
    CallStatus, ErrorKind, ExecutorConfig, PermissionMode, SchemaFormat, ToolCallInfo,
    ToolExecutor, ToolRequest,
};

use toolbox as _;

fn executor(mode: PermissionMode, toml: &str) -> (tempfile::TempDir, ToolExecutor) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = mode;
    config.apply_toml(toml).unwrap();
    (dir, ToolExecutor::new(config).unwrap())
}

async fn call(exec: &ToolExecutor, sid: &str, name: &str, args: Value) -> ToolCallInfo {
    exec.run(ToolRequest::new("t", name, args).session(sid))
        .await
}

/// The embedded interpreter runs one job at a time for the whole process, so tests that
/// measure timeouts must not queue behind another test's slow import: run them one by one.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

#[tokio::test]
async fn a_live_session_through_every_name() {
    let _serial = serial().await;
    let (_d, exec) = executor(PermissionMode::Full, "");
    let info = call(&exec, "s1", "run_python_code", json!({"code": "x = 1"})).await;
    assert_eq!(
        (info.status, info.result.as_str()),
        (CallStatus::Done, "(no output)\n")
    );
    assert_eq!(info.tool, "run_python_code");
    let info = call(&exec, "s1", "python", json!({"content": "x + 1"})).await;
    assert_eq!(info.result, "[result]\n2\n");
    let info = call(&exec, "s1", "python_exec", json!({"code": "x += 1; x"})).await;
    assert_eq!(info.result, "[result]\n2\n");
    // Another session does not see x.
    let info = call(&exec, "s2", "python", json!({"code": "x"})).await;
    assert_eq!(info.status, CallStatus::Done, "an exception is a result");
    assert!(
        info.result
            .starts_with("[error] NameError: name 'x' is not defined"),
        "{}",
        info.result
    );
    // The model gets {"status": ..., "result": ...}.
    let envelope: Value = serde_json::from_str(&info.envelope()).unwrap();
    assert_eq!(envelope["status"], "done");
    // Bad arguments are tool errors that name the argument.
    let info = call(&exec, "s1", "python", json!({"code": 5})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Tool));
    assert_eq!(
        info.result,
        "run_python_code: argument `code` must be a string, got a number 5"
    );
}

#[tokio::test]
async fn permissions_gate_python_but_not_lookups() {
    let _serial = serial().await;
    let (_d, exec) = executor(PermissionMode::ReadOnly, "");
    let info = call(&exec, "s1", "run_python_code", json!({"code": "1"})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    let info = call(&exec, "s1", "python_package", json!({"packages": ["x"]})).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    let info = call(
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
    let (_d, exec) = executor(PermissionMode::Full, "");
    call(&exec, "s1", "python", json!({"code": "kept = 1"})).await;
    // The executor's limit is shorter than the provider's: the executor drops the call and
    // the provider interrupts the code it left running.
    let request = ToolRequest::new("t", "python", json!({"code": "while True: pass"}))
        .session("s1")
        .timeout(Duration::from_millis(300));
    let info = exec.run(request).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Timeout));
    let started = Instant::now();
    let info = call(&exec, "s1", "python", json!({"code": "kept"})).await;
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
    let (_d, exec) = executor(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\ntimeout_ms = 500\n",
    );
    let info = call(
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
    let info = call(
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
    let (_d, exec) = executor(PermissionMode::Full, "[python]\nbackend = \"subprocess\"\n");
    let info = call(&exec, "s1", "python", json!({"code": "1"})).await;
    assert!(
        info.result
            .contains("config [python] backend must be \"embedded\" or \"isolated\""),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn integrated_notebook_is_python_notebook_and_registry_tools() {
    let _serial = serial().await;
    let (_d, exec) = executor(PermissionMode::Full, "");
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
            "kernel_install",
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

#[tokio::test]
async fn the_isolated_worker_runs_under_the_memory_limit_and_survives_it() {
    let _serial = serial().await;
    let (_d, exec) = executor(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\n[limits]\nmemory_mb = 200\n",
    );
    call(&exec, "s1", "python", json!({"code": "kept = 1"})).await;
    let info = call(
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
    let info = call(&exec, "s1", "python", json!({"code": "kept + 1"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert_eq!(info.result, "[result]\n2\n");
}

#[tokio::test]
async fn the_isolated_worker_is_stopped_by_the_cpu_limit_and_restarts() {
    let _serial = serial().await;
    let (_d, exec) = executor(
        PermissionMode::Full,
        "[python]\nbackend = \"isolated\"\n[limits]\ncpu_seconds = 1\n",
    );
    // The budget is per call: a first call's CPU time does not count against the next.
    let info = call(
        &exec,
        "s1",
        "python",
        json!({"code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let info = call(
        &exec,
        "s1",
        "python",
        json!({"code": "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"}),
    )
    .await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    let info = call(&exec, "s1", "python", json!({"code": "while True: pass"})).await;
    assert_eq!(info.status, CallStatus::Error, "{}", info.result);
    assert!(
        info.result.starts_with(
            "the code exceeded the CPU time limit of 1 s ([limits] cpu_seconds) and was stopped.\n"
        ),
        "{}",
        info.result
    );
    let info = call(&exec, "s1", "python", json!({"code": "1 + 1"})).await;
    assert_eq!(info.status, CallStatus::Done, "{}", info.result);
    assert!(info.result.ends_with("[result]\n2\n"), "{}", info.result);
    // Code that ignores SIGXCPU (and could raise its own soft limit) meets the watchdog.
    let info = call(
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

#[tokio::test]
async fn bad_limits_are_refused_naming_the_key() {
    let _serial = serial().await;
    let (_d, exec) = executor(PermissionMode::Full, "[limits]\nprocesses = \"many\"\n");
    let info = call(&exec, "s1", "python", json!({"code": "1"})).await;
    assert_eq!(info.status, CallStatus::Error);
    assert!(
        info.result
            .contains("[limits] processes must be a whole number, got \"many\""),
        "{}",
        info.result
    );
}
