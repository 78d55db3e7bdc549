use std::future::Future;
use std::pin::Pin;

use toolbox_core::ToolOutput;

use crate::{inventory, ToolContext};

/// The future an [`AfterEdit`] check returns: a note for the model, or nothing to say.
pub type AfterEditFuture<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// A check run on a file right after a tool wrote it, registered by one provider and run by
/// the tools that write files.
///
/// This is how `file_manager__write`, `file_manager__edit` and `notebook__edit` report the
/// errors a running language server finds in what they just wrote (the lsp provider, with
/// `[lsp] diagnostics_after_edit = true`), without depending on it (see the Architecture
/// Invariant on [`ContentExtractor`](crate::ContentExtractor)). A check bounds its own time,
/// never fails the edit, and says nothing when it has nothing to say.
pub struct AfterEdit {
    /// Who registered it, e.g. `lsp`.
    pub provider: &'static str,
    /// Looks at `path` (as the model gave it, to be parsed with `ctx.workspace.locate`).
    pub check: for<'a> fn(path: &'a str, ctx: &'a ToolContext) -> AfterEditFuture<'a>,
}

inventory::collect!(AfterEdit);

/// Runs every linked [`AfterEdit`] check on `path` and appends what they say to the text a
/// tool returns.
pub async fn with_after_edit(
    mut result: ToolOutput,
    path: Option<&str>,
    ctx: &ToolContext,
) -> ToolOutput {
    let Some(path) = path else {
        return result;
    };
    for hook in inventory::iter::<AfterEdit> {
        if let Some(note) = (hook.check)(path, ctx).await {
            result.text.push_str("\n\n");
            result.text.push_str(&note);
        }
    }
    result
}

/// Registers an [`AfterEdit`] check at link time.
///
/// ```ignore
/// fn check<'a>(path: &'a str, ctx: &'a ToolContext) -> AfterEditFuture<'a> {
///     Box::pin(async move { None })
/// }
/// toolbox_host::register_after_edit!("lsp", check);
/// ```
#[macro_export]
macro_rules! register_after_edit {
    ($provider:expr, $check:expr) => {
        $crate::inventory::submit! {
            $crate::AfterEdit { provider: $provider, check: $check }
        }
    };
}
