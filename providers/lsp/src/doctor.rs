//! The lsp provider's part of `toolbox doctor`: each language server `[lsp]` knows of (the
//! operator's, then the built-in ones when `builtin_servers` is on; not the disabled ones), and
//! whether its program is installed. Of the built-ins serving the same files, the first
//! installed is the one used.

use std::path::Path;

use serde_json::Value;
use toolbox_host::doctor::{DoctorFuture, Finding};

use crate::config::{find_program, LspConfig};

toolbox_host::register_doctor_check!("lsp", check);

fn check<'a>(config: &'a Value, _workspace: &'a Path) -> DoctorFuture<'a> {
    Box::pin(async move {
        let settings = match LspConfig::from_config(config) {
            Ok(settings) => settings,
            Err(e) => return vec![Finding::missing("[lsp]", format!("{e:#}"))],
        };
        let enabled = |name: &str| !settings.disabled.iter().any(|d| d == name);
        let builtins = if settings.builtin_servers {
            settings.builtins()
        } else {
            Vec::new()
        };
        settings
            .servers
            .values()
            .cloned()
            .chain(
                builtins
                    .into_iter()
                    .filter(|b| !settings.servers.contains_key(&b.name)),
            )
            .filter(|server| enabled(&server.name))
            .map(|server| {
                let subject = format!(
                    "language server {} (.{})",
                    server.name,
                    server.extensions.join(", .")
                );
                let program = &server.command[0];
                match find_program(program) {
                    Some(path) => Finding::ok(subject, path.display().to_string()),
                    None => Finding::missing(subject, format!("`{program}` is not installed")),
                }
            })
            .collect()
    })
}
