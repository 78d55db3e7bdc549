//! Round trip of `shell` running `true` through the whole executor (permission mode full,
//! trajectory on), next to bare spawns of `bash -c true` from Rust.
//!
//! ```text
//! CARGO_TARGET_DIR=/tmp/target-shell cargo bench -p toolbox-shell --bench roundtrip
//! ```
//!
//! The target is an executor round trip within 1.5× of the bare `std::process::Command`.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use toolbox_executor::{ExecutorConfig, PermissionMode, Registry, ToolExecutor, ToolRequest};
use toolbox_shell::Shell;

/// An executor in mode full with trajectories on, over the shell provider alone.
fn build_executor(workspace: &std::path::Path, shell: serde_json::Value) -> ToolExecutor {
    let mut config = ExecutorConfig::new(workspace);
    config.permissions.mode = PermissionMode::Full;
    config.trajectory = true;
    config.providers.insert("shell".into(), shell);
    let registry =
        Registry::from_providers([Arc::new(Shell::new()) as Arc<dyn toolbox_host::ToolProvider>])
            .expect("registry");
    ToolExecutor::with_registry(config, registry, Default::default()).expect("executor")
}

fn roundtrip(c: &mut Criterion) {
    let workspace = tempfile::tempdir().expect("temp workspace");
    let executor = build_executor(workspace.path(), json!({}));
    // Sandboxed commands are forked (the sandbox is switched on in the child before exec),
    // so they cost more; shown for reference, not part of the 1.5x target.
    let sandboxed = build_executor(workspace.path(), json!({"sandbox": "workspace-write"}));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // One call first, so the provider's thread and the janitor are already running.
    let warm = runtime.block_on(executor.run(ToolRequest::new(
        "warm",
        "shell",
        json!({"command": "true"}),
    )));
    assert!(warm.is_done(), "{}", warm.result);

    let mut group = c.benchmark_group("bash -c true");
    group
        .sample_size(200)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(2));
    group.bench_function("std::process::Command output()", |b| {
        b.iter(|| {
            let out = std::process::Command::new("bash")
                .args(["-c", "true"])
                .output()
                .expect("bash runs");
            assert!(out.status.success());
        })
    });
    group.bench_function("tokio::process::Command output()", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let out = tokio::process::Command::new("bash")
                    .args(["-c", "true"])
                    .output()
                    .await
                    .expect("bash runs");
                assert!(out.status.success());
            })
        })
    });
    let mut n = 0u64;
    group.bench_function("executor shell {command: true}", |b| {
        b.iter(|| {
            n += 1;
            let info = runtime.block_on(executor.run(ToolRequest::new(
                format!("bench-{n}"),
                "shell",
                json!({"command": "true"}),
            )));
            assert!(info.is_done(), "{}", info.result);
        })
    });
    group.bench_function(
        "executor shell {command: true}, sandbox workspace-write",
        |b| {
            b.iter(|| {
                n += 1;
                let info = runtime.block_on(sandboxed.run(ToolRequest::new(
                    format!("bench-{n}"),
                    "shell",
                    json!({"command": "true"}),
                )));
                assert!(info.is_done(), "{}", info.result);
            })
        },
    );
    group.finish();
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);
