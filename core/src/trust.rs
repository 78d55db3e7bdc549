//! What a workspace's own `toolbox.toml` may change: only tightenings.
//!
//! The operator's settings (flags, `TOOLBOX_*`, the `TOOLBOX_CONFIG` file, the user's config
//! file) are trusted. The workspace's `toolbox.toml` arrives with the repository, so it is
//! not: it may lower a limit, shorten a timeout or pick a stricter option, and nothing else.
//! Each provider declares, next to its own config parsing, which keys of its table a
//! workspace may set and in which direction: each [`Key`](crate::config_table::Key) of its
//! [`Table`] says so with `.workspace(rule)`, and [`register_table!`](crate::register_table)
//! makes the table known. A key with no rule is refused when an untrusted workspace sets it.

use crate::config_table::Table;

/// How a workspace may change one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tighten {
    /// A whole number that may only go down from the operator's value (or this default).
    AtMost(u64),
    /// A whole number that may only go up from the operator's value (or this default).
    AtLeast(u64),
    /// One of `order`, least strict first; it may only move towards the end. The default is
    /// the value in force when the operator set none. Booleans are compared as `true`/`false`.
    Ranked {
        /// The values, least strict first.
        order: &'static [&'static str],
        /// The value in force when the operator set none.
        default: &'static str,
    },
    /// A limit where absent or 0 means "no limit": the workspace may set a positive value no
    /// larger than the operator's (any positive value when the operator set none), never 0.
    Limit,
    /// A list of strings the workspace may only add to (a deny list); the default is the list
    /// in force when the operator set none.
    AddToList(&'static [&'static str]),
}

/// One registered `[table]`: what a workspace may set in it is each [`Key`]'s rule.
///
/// [`Key`]: crate::config_table::Key
pub struct Registered(pub Table);

inventory::collect!(Registered);

/// The table registered as `table`, if any crate linked in declared it.
pub fn table_rules(table: &str) -> Option<&'static Table> {
    inventory::iter::<Registered>
        .into_iter()
        .map(|r| &r.0)
        .find(|r| r.name == table)
}

/// Registers a provider's [`Table`] (a `const`), so the executor knows which of its keys an
/// untrusted workspace may set, and how.
///
/// ```ignore
/// const SHELL: Table = Table::new("shell", &[MAX_JOBS, SANDBOX]);
/// toolbox_core::register_table!(SHELL);
/// ```
#[macro_export]
macro_rules! register_table {
    ($table:expr) => {
        $crate::inventory::submit! { $crate::trust::Registered($table) }
    };
}
