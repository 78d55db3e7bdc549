//! What every part of the crate needs and that needs nothing of the crate: the build
//! interpreter's identity, how a Python process is started, and how sessions are keyed.
//!
//! A leaf on purpose: it imports no other module of this crate, so the backends, the
//! installer, the configuration and the lookup can all use it without importing each other.

use std::path::{Path, PathBuf};

use tokio::process::Command;
use toolbox_host::ToolContext;

/// The interpreter pyo3 was built against (its `sys.executable`, baked in by build.rs).
pub const BUILD_PYTHON_EXECUTABLE: &str = env!("TOOLBOX_BUILD_PYTHON_EXECUTABLE");
/// `sys.version` of the build interpreter (newlines replaced by spaces).
pub const BUILD_PYTHON_VERSION: &str = env!("TOOLBOX_BUILD_PYTHON_VERSION");
/// `sys.prefix` of the build interpreter.
pub const BUILD_PYTHON_PREFIX: &str = env!("TOOLBOX_BUILD_PYTHON_PREFIX");
/// `sys.base_prefix` of the build interpreter.
pub const BUILD_PYTHON_BASE_PREFIX: &str = env!("TOOLBOX_BUILD_PYTHON_BASE_PREFIX");
/// The folder of the libpython the crate links, as pyo3 found it.
pub const BUILD_PYTHON_LIBDIR: &str = env!("TOOLBOX_BUILD_PYTHON_LIBDIR");

/// Sessions are per workspace: the same session id in two workspaces is two sessions.
pub(crate) fn session_key(ctx: &ToolContext) -> String {
    format!("{}::{}", ctx.workspace.root().display(), ctx.session_id)
}

/// A command running a Python executable (the build interpreter or a venv's) that loads
/// the libpython it was built with.
///
/// A shared-library Python finds its libpython through a DT_RUNPATH, which LD_LIBRARY_PATH
/// overrides: with `LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu` the pyenv python here would
/// load Debian's libpython and mix two Pythons. Putting the build libdir first keeps every
/// other entry working (native libraries of user code) and the interpreter whole.
pub fn python_command(program: &Path) -> Command {
    let mut command = Command::new(program);
    if let Some(current) = std::env::var_os("LD_LIBRARY_PATH") {
        if !BUILD_PYTHON_LIBDIR.is_empty() {
            let mut paths = vec![PathBuf::from(BUILD_PYTHON_LIBDIR)];
            paths.extend(std::env::split_paths(&current));
            if let Ok(joined) = std::env::join_paths(paths) {
                command.env("LD_LIBRARY_PATH", joined);
            }
        }
    }
    command
}
