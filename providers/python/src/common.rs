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
    if let Some(paths) = library_path() {
        command.env("LD_LIBRARY_PATH", paths);
    }
    command
}

/// `LD_LIBRARY_PATH` for a Python process (see [`python_command`]): the found interpreter's
/// libdir, then the environment's entries; `None` when the environment sets none or no
/// interpreter was found yet (nothing to put first).
pub(crate) fn library_path() -> Option<std::ffi::OsString> {
    let current = std::env::var_os("LD_LIBRARY_PATH")?;
    let libdir = crate::discover::known_libdir()?;
    let paths = std::iter::once(libdir).chain(std::env::split_paths(&current));
    std::env::join_paths(paths).ok()
}
