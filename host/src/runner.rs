use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::{inventory, ToolContext};

/// The future a [`CodeRunner`] returns.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Value>> + Send + 'a>>;

/// Runs code in the caller's live session, registered by the provider that owns the
/// interpreter and usable by others.
///
/// This is how `notebook__run_cell` executes a cell in the same Python session that
/// `run_python_code` uses, without the notebook crate depending on the python crate (see
/// the Architecture Invariant on [`ContentExtractor`](crate::ContentExtractor)). The
/// returned value is the runner's structured result (for Python: `stdout`, `stderr`,
/// `display_data`, `error`, `execution_count`, `result`), documented by the provider.
pub struct CodeRunner {
    /// Who registered it, e.g. `python`.
    pub provider: &'static str,
    /// The language it runs, e.g. `python`.
    pub language: &'static str,
    /// Runs `code` in the call's live session and returns what it printed and produced.
    pub run: for<'a> fn(code: &'a str, ctx: &'a ToolContext) -> RunFuture<'a>,
}

inventory::collect!(CodeRunner);

/// The runner for a language, if its provider is linked into this binary.
pub fn find_code_runner(language: &str) -> Option<&'static CodeRunner> {
    inventory::iter::<CodeRunner>
        .into_iter()
        .find(|r| r.language.eq_ignore_ascii_case(language))
}

/// Registers a [`CodeRunner`] at link time.
///
/// ```ignore
/// fn run<'a>(code: &'a str, ctx: &'a ToolContext) -> RunFuture<'a> {
///     Box::pin(async move { todo!("run `code` in the session of `ctx`") })
/// }
/// toolbox_host::register_code_runner!("python", "python", run);
/// ```
#[macro_export]
macro_rules! register_code_runner {
    ($provider:expr, $language:expr, $run:expr) => {
        $crate::inventory::submit! {
            $crate::CodeRunner { provider: $provider, language: $language, run: $run }
        }
    };
}
