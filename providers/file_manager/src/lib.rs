//! toolbox-file-manager is the `file_manager` provider: six tools that let a model look at and
//! change files inside the workspace.
//!
//! | tool | alias | risk | what it does |
//! |---|---|---|---|
//! | `file_manager__list` | `list_dir` | read | list a directory, optionally a few levels deep |
//! | `file_manager__read` | `read_file` | read | show a text file with line numbers, a window at a time |
//! | `file_manager__write` | `write_file` | file_write | create, replace (atomically) or append to a small text file |
//! | `file_manager__edit` | `edit_file` | file_write | replace an exact string in a text file |
//! | `file_manager__glob` | `glob_search` | read | find files by glob pattern, honouring `.gitignore` |
//! | `file_manager__grep` | `grep_search` | read | search file contents by regex, honouring `.gitignore` |
//!
//! Every path goes through [`Workspace::resolve`](toolbox_host::Workspace::resolve), so the
//! jail and the session routing (`output/`, `scratchpad/`, `input/`) apply to every tool, and
//! every path shown to the model is workspace-relative. Filesystem work runs on tokio's
//! blocking pool; the walks behind list, glob and grep watch the call's cancellation token.
//! Results are plain text written for a model to read.
//!
//! The crate registers itself with [`toolbox_host::register_provider!`]; a binary gets it by
//! linking the umbrella crate with the `file_manager` feature.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod edit;
mod glob;
mod grep;
mod list;
mod read;
mod text;
mod walk;
mod write;

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::{Arg, Preview, ToolInfo, ToolOutput};
use toolbox_host::{output, with_after_edit, ToolContext, ToolProvider, Tools};

toolbox_host::register_provider!("file_manager", || std::sync::Arc::new(
    FileManager::default()
));

/// The toolset every file_manager tool belongs to.
const TOOLSET: &str = "files";

/// The `path` of the tools that need one file: read, write and edit.
const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
/// The `path` of the tools that default to the workspace root (`"."`): list, glob and grep.
/// An empty string is read as not given.
const FOLDER: Arg = Arg::string("path").aliases(&["file_path"]);
/// The `pattern` of glob and grep.
const PATTERN: Arg = Arg::string("pattern").required();

/// The `file_manager` provider. It holds no state: every call carries its own context.
#[derive(Debug, Default, Clone)]
pub struct FileManager {
    // Private so the provider can gain configuration later without a breaking change.
    _private: (),
}

#[async_trait]
impl ToolProvider for FileManager {
    fn name(&self) -> &str {
        "file_manager"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }

    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        match tool {
            write::NAME => write::preview(args, ctx),
            edit::NAME => edit::preview(args, ctx),
            _ => None,
        }
    }
}

/// Every file_manager tool, each listed once.
static TOOLS: LazyLock<Tools<FileManager>> = LazyLock::new(|| {
    Tools::<FileManager>::new("file_manager")
        .tool(list::info(), |_, _, args, ctx| output(list::run(args, ctx)))
        .tool(read::info(), |_, _, args, ctx| output(read::run(args, ctx)))
        // What another provider has to say about the file just written (the lsp provider's
        // diagnostics) is appended through host's AfterEdit hook.
        .tool(write::info(), |_, _, args, ctx| {
            Box::pin(async move {
                let path = after_edit_path(&args);
                let out = write::run(args, ctx).await?;
                Ok(with_after_edit(out.into(), path.as_deref(), ctx).await)
            })
        })
        .tool(edit::info(), |_, _, args, ctx| {
            Box::pin(async move {
                let path = after_edit_path(&args);
                let out = edit::run(args, ctx).await?;
                Ok(with_after_edit(out.into(), path.as_deref(), ctx).await)
            })
        })
        .tool(glob::info(), |_, _, args, ctx| output(glob::run(args, ctx)))
        .tool(grep::info(), |_, _, args, ctx| output(grep::run(args, ctx)))
});

/// The path a write or edit names (`path` or its alias `file_path`), for the after-edit hook.
fn after_edit_path(args: &Value) -> Option<String> {
    std::iter::once(&PATH.name)
        .chain(PATH.aliases)
        .find_map(|k| args.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

/// Runs filesystem work on the blocking pool so a slow disk never stalls the runtime.
async fn blocking<T, F>(tool: &'static str, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    toolbox_host::blocking(format!("{tool}: the file task"), work).await?
}

/// The error every long walk stops with when its call is cancelled.
fn cancelled(tool: &str) -> anyhow::Error {
    anyhow!("{tool}: cancelled")
}

#[cfg(test)]
mod test_support {
    use serde_json::Value;
    use tempfile::TempDir;
    use toolbox_host::{ToolContext, ToolProvider, Workspace};

    use crate::FileManager;

    /// A fresh workspace with session `s1` and a context for `tool`.
    pub fn setup(tool: &str) -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path())
            .unwrap()
            .with_session("s1")
            .unwrap();
        let ctx = ToolContext::new(ws, "s1", "call-1", tool);
        (dir, ctx)
    }

    /// Calls a tool through the provider; Ok carries the text result, Err the message.
    pub async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<String, String> {
        match FileManager::default().call_tool(tool, args, ctx).await {
            Ok(output) => Ok(output.text),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Writes a file below the workspace root, creating its folders.
    pub fn put(ctx: &ToolContext, rel: &str, content: impl AsRef<[u8]>) {
        let path = ctx.workspace.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn get(ctx: &ToolContext, rel: &str) -> String {
        std::fs::read_to_string(ctx.workspace.root().join(rel)).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use serde_json::json;
    use toolbox_core::ToolRisk;
    use toolbox_host::registered_providers;

    #[test]
    fn six_tools_with_simple_closed_schemas() {
        let tools = FileManager::default().list_tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "file_manager__list",
                "file_manager__read",
                "file_manager__write",
                "file_manager__edit",
                "file_manager__glob",
                "file_manager__grep"
            ]
        );
        for t in &tools {
            assert_eq!(t.toolsets, ["files"], "{}", t.name);
            assert_eq!(t.aliases.len(), 1, "{}", t.name);
            let s = &t.input_schema;
            assert_eq!(s["type"], "object");
            assert_eq!(s["additionalProperties"], false);
            for (name, p) in s["properties"].as_object().unwrap() {
                let kind = p["type"].as_str().unwrap();
                assert!(["string", "integer", "boolean"].contains(&kind), "{name}");
                assert!(
                    p["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{}.{name}",
                    t.name
                );
            }
            for r in s["required"].as_array().unwrap() {
                assert!(s["properties"].get(r.as_str().unwrap()).is_some());
            }
            assert!(t.description.len() > 80, "{}", t.name);
        }
        let risk = |n: &str| tools.iter().find(|t| t.name == n).unwrap().risk;
        assert_eq!(risk("file_manager__write"), ToolRisk::FileWrite);
        assert_eq!(risk("file_manager__edit"), ToolRisk::FileWrite);
        assert_eq!(risk("file_manager__grep"), ToolRisk::Read);
        let write = tools
            .iter()
            .find(|t| t.name == "file_manager__write")
            .unwrap();
        assert!(write.description.contains("SMALL"));
        assert!(write.description.contains("run_python_code"));
    }

    #[test]
    fn registered_under_its_name() {
        let reg = registered_providers()
            .into_iter()
            .find(|r| r.name == "file_manager")
            .expect("file_manager is registered");
        assert_eq!((reg.build)().name(), "file_manager");
    }

    #[tokio::test]
    async fn only_canonical_names_dispatch_and_unknown_tools_are_refused() {
        let (_d, ctx) = setup("file_manager__read");
        put(&ctx, "a.txt", "hi\n");
        assert!(
            call(&ctx, "file_manager__read", json!({"file_path": "a.txt"}))
                .await
                .unwrap()
                .contains("hi")
        );
        // Aliases are the registry's business (tests/tests/schemas.rs); the provider never
        // sees one.
        let e = call(&ctx, "read_file", json!({"file_path": "a.txt"}))
            .await
            .unwrap_err();
        assert!(e.contains("no tool named read_file"), "{e}");
        let e = call(&ctx, "file_manager__nope", json!({}))
            .await
            .unwrap_err();
        assert!(e.contains("no tool named file_manager__nope"), "{e}");
    }

    #[tokio::test]
    async fn path_escapes_give_the_jail_error_everywhere() {
        let (_d, ctx) = setup("any");
        let cases = [
            ("file_manager__list", json!({"path": "../x"})),
            ("file_manager__read", json!({"path": "../x"})),
            (
                "file_manager__write",
                json!({"path": "../x", "content": "y"}),
            ),
            (
                "file_manager__edit",
                json!({"path": "../x", "old_string": "a", "new_string": "b"}),
            ),
            (
                "file_manager__glob",
                json!({"pattern": "*", "path": "../x"}),
            ),
            (
                "file_manager__grep",
                json!({"pattern": "a", "path": "/etc"}),
            ),
        ];
        for (tool, args) in cases {
            let e = call(&ctx, tool, args).await.unwrap_err();
            assert!(e.starts_with(&format!("{tool}: path ")), "{e}");
            assert!(e.contains("is outside the workspace"), "{e}");
        }
    }

    #[tokio::test]
    async fn unknown_arguments_and_wrong_types_are_named() {
        let (_d, ctx) = setup("file_manager__read");
        let e = call(&ctx, "file_manager__read", json!({"path": "a", "lines": 3}))
            .await
            .unwrap_err();
        assert!(e.contains("unknown argument `lines`"), "{e}");
        let e = call(&ctx, "file_manager__read", json!({}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__read requires path");
        let e = call(
            &ctx,
            "file_manager__read",
            json!({"path": "a", "limit": "x"}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            "file_manager__read: argument `limit` must be a non-negative integer, got a string \"x\""
        );
    }
}
