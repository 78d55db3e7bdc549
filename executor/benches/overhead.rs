//! Executor overhead per call: a trivial Read tool through the whole pipeline, with the
//! trajectory on and off. Run with `cargo bench -p toolbox-executor --bench overhead`.

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::json;
use toolbox_executor::ToolRequest;

#[path = "support/echo.rs"]
mod echo;
use echo::executor;

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("executor_overhead");
    for (label, trajectory) in [("trajectory_on", true), ("trajectory_off", false)] {
        let exec = executor(dir.path(), trajectory);
        let args = json!({"text": "hello"});
        group.bench_function(label, |b| {
            b.iter(|| {
                let request = ToolRequest::new("call_bench", "echo", args.clone()).session("bench");
                let info = rt.block_on(exec.run(request));
                assert!(info.is_done());
                info
            })
        });
    }
    group.finish();
    // The "on" figure only means something if every call really reached the file.
    let path = toolbox_executor::trajectory::trajectory_path(dir.path(), "bench");
    let lines = std::fs::read_to_string(&path)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    println!("trajectory lines written during the benchmark: {lines}");
    assert!(lines > 0, "trajectory was not written");
}

criterion_group!(benches, overhead);
criterion_main!(benches);
