//! Executor overhead per call: a trivial Read tool through the whole pipeline, with the
//! trajectory on and off. Run with `cargo bench -p toolbox-executor --bench overhead`.

use std::sync::Arc;

use async_trait::async_trait;
use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolOutput};
use toolbox_executor::{ExecutorConfig, PermissionMode, Registry, ToolExecutor, ToolRequest};
use toolbox_host::{EventSink, ToolContext, ToolProvider};

struct Echo;

#[async_trait]
impl ToolProvider for Echo {
    fn name(&self) -> &str {
        "bench"
    }
    fn list_tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo::new(
            "echo",
            "Returns its input.",
            json!({"type": "object"}),
        )]
    }
    async fn call_tool(
        &self,
        _tool: &str,
        args: Value,
        _ctx: &ToolContext,
    ) -> anyhow::Result<ToolOutput> {
        Ok(ToolOutput::text(args["text"].as_str().unwrap_or("")))
    }
}

fn executor(dir: &std::path::Path, trajectory: bool) -> ToolExecutor {
    let mut config = ExecutorConfig::new(dir);
    config.permissions.mode = PermissionMode::Full;
    config.trajectory = trajectory;
    let registry = Registry::from_providers([Arc::new(Echo) as Arc<dyn ToolProvider>]).unwrap();
    ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap()
}

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
