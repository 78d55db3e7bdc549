//! `run_python_code` with `x = 1` through the whole executor (gate, run, normalise, record),
//! on the embedded and the isolated backend. bench/python_vs_ipykernel.sh puts these next to
//! the same cell executed in an ipykernel through jupyter_client.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use toolbox_executor::{ExecutorConfig, PermissionMode, ToolExecutor, ToolRequest};

// Links the provider so the executor's registry finds it.
use toolbox_python as _;

fn run_python_code(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let mut group = c.benchmark_group("run_python_code");
    for backend in ["embedded", "isolated"] {
        let dir = tempfile::tempdir().expect("a temporary workspace");
        let mut config = ExecutorConfig::new(dir.path());
        config.permissions.mode = PermissionMode::Full;
        config
            .providers
            .insert("python".into(), json!({ "backend": backend }));
        let executor = Arc::new(ToolExecutor::new(config).expect("an executor"));
        let request =
            ToolRequest::new("bench", "run_python_code", json!({"code": "x = 1"})).session("bench");
        // Start the interpreter (or the worker) outside the measurement, as a live session.
        let warm = runtime.block_on(executor.run(request.clone()));
        assert!(warm.is_done(), "{}", warm.result);
        group.bench_function(backend, |b| {
            b.iter(|| runtime.block_on(executor.run(request.clone())))
        });
    }
    group.finish();
}

criterion_group!(benches, run_python_code);
criterion_main!(benches);
