//! Helpers shared by the binary's integration tests (`mod common;` in each test file).

// Each test file uses some of these helpers, never all.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

/// The real `toolbox` binary run in `ws` with a clean environment: no `TOOLBOX_*` or
/// `RUST_LOG` from the developer's shell, no user config file (a developer's own
/// `~/.config/toolbox/config.toml` must not change what tests see), stdin from /dev/null.
pub fn toolbox(ws: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws);
    for (key, _) in std::env::vars() {
        if key.starts_with("TOOLBOX_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.env("XDG_CONFIG_HOME", ws.join(".no-user-config"));
    cmd.stdin(Stdio::null());
    cmd
}

/// Reads `stdout` line by line on a thread of its own, so a test can wait for a reply with a
/// timeout (`recv_timeout`) instead of blocking forever on a broken server.
pub fn line_reader(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// `toolbox mcp --mode full` serving the workspace `ws` (also its working directory), with
/// stderr discarded; the caller picks stdin and stdout.
pub fn mcp_full(ws: &Path) -> Command {
    let mut cmd = toolbox(ws);
    cmd.args(["mcp", "--mode", "full", "--workspace"])
        .arg(ws)
        .stderr(Stdio::null());
    cmd
}
