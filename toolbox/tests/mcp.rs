//! `toolbox mcp` driven by a real MCP client: the Python `mcp` package (installed by
//! scripts/test.sh) through initialize, tools/list and tools/call.

use std::process::Command;

#[test]
fn python_mcp_client_against_toolbox_mcp() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), "hello from the workspace\n").unwrap();
    let python = std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_toolbox"))
        .arg(ws.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mcp client failed (is the Python `mcp` package installed? scripts/test.sh installs it)\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}
