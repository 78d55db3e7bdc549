//! `calls N`: N calls of a trivial tool through the whole executor pipeline (permission
//! check, risk rules, trajectory line, result shaping), on one current-thread runtime, in a
//! fresh temporary workspace. `bench/callgrind.py` counts its instructions for two values of
//! N; the difference is what the executor costs per call, with no transport and no provider
//! work in it.

use serde_json::json;
use toolbox_executor::ToolRequest;

#[path = "../benches/support/echo.rs"]
mod echo;

fn main() -> anyhow::Result<()> {
    let n: usize = match std::env::args().nth(1) {
        Some(n) => n
            .parse()
            .map_err(|_| anyhow::anyhow!("N: expected a count of calls, got {n:?}"))?,
        None => anyhow::bail!("usage: calls N"),
    };
    let dir = tempfile::tempdir()?;
    let exec = echo::executor(dir.path(), true);
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
