//! Files of toolbox's own state that a provider keeps in the workspace, declared by the
//! provider, so that whatever copies a workspace (the session store of session server mode)
//! learns from the declarations how to copy each one, instead of naming another crate's
//! files.

/// How a state file is copied so that the copy is consistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// A SQLite database: copied through SQLite's online backup API, so what a committed
    /// transaction wrote is in the copy even while it sits in the `-wal` file. Its side
    /// files (`-wal`, `-shm`, `-journal`) are never copied themselves.
    SqliteDatabase,
}

/// A state file a provider keeps. Register it with [`register_state_file!`].
#[derive(Debug)]
pub struct StateFile {
    /// The provider that keeps it, e.g. `memory`.
    pub provider: &'static str,
    /// Its path from the workspace root, e.g. `.toolbox/memory.sqlite`.
    pub path: &'static str,
    /// How to copy it.
    pub kind: StateKind,
}

impl StateFile {
    /// The files that belong to this one and are never copied themselves (SQLite's side
    /// files), as paths from the workspace root.
    pub fn side_files(&self) -> Vec<String> {
        match self.kind {
            StateKind::SqliteDatabase => ["-wal", "-shm", "-journal"]
                .iter()
                .map(|suffix| format!("{}{suffix}", self.path))
                .collect(),
        }
    }
}

inventory::collect!(StateFile);

/// Every state file the linked-in providers declared, sorted by path.
pub fn state_files() -> Vec<&'static StateFile> {
    let mut all: Vec<_> = inventory::iter::<StateFile>.into_iter().collect();
    all.sort_by_key(|f| f.path);
    all
}

/// Declares a state file a provider keeps in the workspace:
///
/// ```ignore
/// toolbox_host::register_state_file!("memory", ".toolbox/memory.sqlite", SqliteDatabase);
/// ```
#[macro_export]
macro_rules! register_state_file {
    ($provider:expr, $path:expr, $kind:ident) => {
        $crate::inventory::submit! {
            $crate::StateFile {
                provider: $provider,
                path: $path,
                kind: $crate::StateKind::$kind,
            }
        }
    };
}
