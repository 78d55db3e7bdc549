//! `run_python_code` with `x = 1` through the whole executor on the jupyter backend,
//! attached to the kernel named by the connection file given as the first argument; the
//! second is the number of calls. Prints one JSON line with every call's time in µs.
//!
//! bench/jupyter_backend.sh runs it interleaved with jupyter_client's own round trip to the
//! same kernel (bench/jupyter_client_roundtrip.py) and compares the medians.

use std::time::Instant;

use serde_json::json;
use toolbox_executor::{ExecutorConfig, PermissionMode, ToolExecutor, ToolRequest};

// Links the provider so the executor's registry finds it.
use toolbox_python as _;

const WARM_UP: usize = 20;

fn main() {
    // `cargo bench` passes `--bench`; the real arguments are the others.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (Some(connection_file), Some(n)) = (args.first(), args.get(1)) else {
        eprintln!("usage: jupyter_roundtrip <connection file> <calls>");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("a number of calls");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let dir = tempfile::tempdir().expect("a temporary workspace");
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    config.providers.insert(
        "python".into(),
        json!({ "backend": "jupyter", "connection_file": connection_file }),
    );
    let executor = ToolExecutor::new(config).expect("an executor");
    let request =
        ToolRequest::new("bench", "run_python_code", json!({"code": "x = 1"})).session("bench");
    let mut times = Vec::with_capacity(n);
    runtime.block_on(async {
        // Connecting (and installing the helper) happens here, outside the measurement.
        for _ in 0..WARM_UP {
            let info = executor.run(request.clone()).await;
            assert!(info.is_done(), "{}", info.result);
        }
        for _ in 0..n {
            let started = Instant::now();
            let info = executor.run(request.clone()).await;
            times.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(info.result, "(no output)\n");
        }
    });
    println!("{}", json!({ "times_us": times }));
}
