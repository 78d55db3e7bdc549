//! What the embedded backend cannot interrupt: a long computation inside a C call.
//!
//! Its own test binary, because it leaves the process-global interpreter busy for a while.
//! `hashlib.pbkdf2_hmac` stands in for a large numpy or pandas operation: one C call that
//! runs for seconds without returning to Python or making a system call a signal could wake.

use std::time::{Duration, Instant};

use serde_json::json;
use toolbox_host::{ToolContext, ToolProvider, Workspace};
use toolbox_python::PythonProvider;

async fn run(ctx: &ToolContext, code: &str, timeout_ms: Option<u64>) -> Result<String, String> {
    let mut args = json!({ "code": code });
    if let Some(ms) = timeout_ms {
        args["timeout_ms"] = json!(ms);
    }
    match PythonProvider::default()
        .call_tool("run_python_code", args, ctx)
        .await
    {
        // The text the model sees; the structured result beside it is not looked at here.
        Ok(output) => Ok(without_folder_note(output.text)),
        Err(e) => Err(format!("{e:#}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_c_call_cannot_be_interrupted_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path())
        .unwrap()
        .with_session("s")
        .unwrap();
    let ctx = ToolContext::new(ws, "s", "call-blocked", "run_python_code");

    // Calibrate: how many iterations make at least 4 seconds on this machine (well past the
    // 200 ms timeout plus the 2 s grace). The fastest of five samples, so that a busy moment
    // while calibrating cannot make the call too short.
    let text = run(
        &ctx,
        "import hashlib, time\ndef took():\n    t = time.perf_counter()\n    hashlib.pbkdf2_hmac('sha256', b'x', b'y', 100_000)\n    return time.perf_counter() - t\nrate = 100_000 / min(took() for _ in range(5))\nrounds = int(rate * 4)\nrounds > 0",
        None,
    )
    .await
    .unwrap();
    assert_eq!(text, "[result]\nTrue\n");

    let started = Instant::now();
    let e = run(
        &ctx,
        "import hashlib\nbefore = 1\nhashlib.pbkdf2_hmac('sha256', b'x', b'y', rounds)\nafter = 1",
        Some(200),
    )
    .await
    .unwrap_err();
    let reported = started.elapsed();
    // The call gives up after the timeout plus the 2 s grace, well before the C call ends.
    assert!(reported < Duration::from_millis(3500), "{reported:?}");
    assert!(
        e.starts_with("run_python_code timed out after 200 ms and the code could not be stopped"),
        "{e}"
    );
    assert!(
        e.contains("later calls are refused until it finishes"),
        "{e}"
    );

    // Meanwhile every call is refused at once, with the reason.
    let refused_at = Instant::now();
    let e = run(&ctx, "1 + 1", None).await.unwrap_err();
    // "At once" next to the seconds the C call still needs; loose for shared CI machines.
    assert!(refused_at.elapsed() < Duration::from_millis(1500));
    assert!(
        e.starts_with("run_python_code: the embedded Python interpreter is still busy with an earlier call (call call-blocked, session s)"),
        "{e}"
    );
    assert!(e.contains("backend = \"isolated\""), "{e}");

    // Once the C call returns, the pending interrupt stops the rest of that cell, and the
    // interpreter is free again with the session intact.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        match run(&ctx, "(before, 'after' in globals())", None).await {
            Ok(text) => break text,
            Err(e) if e.contains("still busy") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(text, "[result]\n(1, False)\n");
    assert!(started.elapsed() >= Duration::from_millis(2000));
}

/// A result without the note a new session's first Python result begins with.
fn without_folder_note(text: String) -> String {
    match text.strip_prefix("note: Python runs in this session's scratchpad") {
        Some(rest) => rest
            .split_once('\n')
            .map(|(_, r)| r.to_string())
            .unwrap_or_default(),
        None => text,
    }
}
