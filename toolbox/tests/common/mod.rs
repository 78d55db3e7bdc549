//! Helpers shared by the binary's integration tests (`mod common;` in each test file).

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
