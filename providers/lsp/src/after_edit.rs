//! Diagnostics after edits: with `[lsp] diagnostics_after_edit = true`, a tool that wrote a
//! file (file_manager's write and edit, notebook's edit) ends its result with the errors a
//! *running* server reports for that file. Registered through host's `AfterEdit` hook, so
//! those providers do not depend on this one. It never starts a server, never fails the
//! edit, and waits at most `[lsp] diagnostics_wait_ms`.

use toolbox_host::{AfterEditFuture, ToolContext};

use crate::call::{sync, Env};
use crate::config::LspConfig;
use crate::diagnostics::{format_items, settle};

/// At most this many errors are appended.
const MAX_ERRORS: usize = 10;

toolbox_host::register_after_edit!("lsp", check);

fn check<'a>(path: &'a str, ctx: &'a ToolContext) -> AfterEditFuture<'a> {
    Box::pin(async move {
        let cfg = LspConfig::from_config(&ctx.config).ok()?;
        if !cfg.diagnostics_after_edit {
            return None;
        }
        let env = Env::new("lsp", ctx).ok()?;
        let doc = env.doc(path).await.ok()?;
        let server = crate::pool::running(&env.root())
            .into_iter()
            .find(|s| s.spec.extensions.contains(&doc.ext))?;
        let before = server.publication_seq();
        let sent = sync(&server, &doc).await.ok()?;
        settle(&env, &server, &doc, before, sent).await.ok()?;
        let items = server.published(&doc.uri)?.items;
        let errors = format_items(&env, &doc.uri, &items, 1);
        let name = &server.spec.name;
        if errors.is_empty() {
            return Some(format!(
                "lsp ({name}): no errors in {} after this edit",
                doc.shown
            ));
        }
        let mut out = format!(
            "lsp ({name}): {} error{} in {} after this edit",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" },
            doc.shown
        );
        for e in errors.iter().take(MAX_ERRORS) {
            out.push('\n');
            out.push_str(e);
        }
        if errors.len() > MAX_ERRORS {
            out.push_str(&format!(
                "\n… {} more (lsp__diagnostics)",
                errors.len() - MAX_ERRORS
            ));
        }
        Some(out)
    })
}
