//! `calls N`: N calls of a trivial tool through the whole executor pipeline (permission
//! check, risk rules, trajectory line, result shaping), on one current-thread runtime, in a
//! fresh temporary workspace. `bench/callgrind.py` counts its instructions for two values of
//! N; the difference is what the executor costs per call, with no transport and no provider
//! work in it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolOutput};
use toolbox_executor::{ExecutorConfig, PermissionMode, Registry, ToolExecutor, ToolRequest};
use toolbox_host::{EventSink, ToolContext, ToolProvider};

/// Returns its `text` argument: the least a tool can do.
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

fn main() -> anyhow::Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| anyhow::anyhow!("N: expected a count of calls, got {n:?}"))?,
        None => anyhow::bail!("usage: calls N"),
    };
    let dir = tempfile::tempdir()?;
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    let registry = Registry::from_providers([Arc::new(Echo) as Arc<dyn ToolProvider>])?;
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let args = json!({"text": "hello"});
    for i in 0..n {
        let request = ToolRequest::new(format!("call_{i}"), "echo", args.clone()).session("bench");
        let info = rt.block_on(exec.run(request));
        anyhow::ensure!(info.is_done(), "call {i} failed: {info:?}");
    }
    Ok(())
}
