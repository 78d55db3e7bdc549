//! The trivial tool of the executor's benchmarks (`benches/overhead.rs`) and of the
//! instruction count of `examples/calls.rs`: `bench.echo` returns its `text` argument, the
//! least a tool can do, so what is measured is the pipeline around it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolOutput};
use toolbox_executor::{ExecutorConfig, PermissionMode, Registry, ToolExecutor};
use toolbox_host::{EventSink, ToolContext, ToolProvider};

/// Returns its `text` argument.
pub struct Echo;

#[async_trait]
impl ToolProvider for Echo {
    fn name(&self) -> &str {
        "bench"
    }
    fn list_tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo::new(
            "echo",
            "Returns its input.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
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

/// An executor in mode full over `dir` with [`Echo`] as its only provider.
pub fn executor(dir: &std::path::Path, trajectory: bool) -> ToolExecutor {
    let mut config = ExecutorConfig::new(dir);
    config.permissions.mode = PermissionMode::Full;
    config.trajectory = trajectory;
    let registry = Registry::from_providers([Arc::new(Echo) as Arc<dyn ToolProvider>]).unwrap();
    ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap()
}
