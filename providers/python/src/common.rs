//! What every part of the crate needs: how a Python process is started, and how sessions
//! are keyed.
//!
//! Nearly a leaf: of this crate it imports only [`crate::discover`] (itself a leaf), so the
//! backends, the installer, the configuration and the lookup can all use it without
//! importing each other.

use std::path::Path;

use tokio::process::Command;
use toolbox_host::ToolContext;

/// Sessions are per workspace: the same session id in two workspaces is two sessions.
pub(crate) fn session_key(ctx: &ToolContext) -> String {
    format!("{}::{}", ctx.workspace.root().display(), ctx.session_id)
}

/// A command running a Python executable (the interpreter found, or a venv's) that loads
/// the libpython it was built with.
///
/// A shared-library Python finds its libpython through a DT_RUNPATH, which LD_LIBRARY_PATH
/// overrides: with `LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu` the pyenv python here would
/// load Debian's libpython and mix two Pythons. Putting the found interpreter's libdir first
/// keeps every other entry working (native libraries of user code) and the interpreter
/// whole.
pub fn python_command(program: &Path) -> Command {
    let mut command = Command::new(program);
    if let Some(current) = std::env::var_os("LD_LIBRARY_PATH") {
        if let Some(libdir) = crate::discover::known_libdir() {
            let mut paths = vec![libdir];
            paths.extend(std::env::split_paths(&current));
            if let Ok(joined) = std::env::join_paths(paths) {
                command.env("LD_LIBRARY_PATH", joined);
            }
        }
    }
    command
}
