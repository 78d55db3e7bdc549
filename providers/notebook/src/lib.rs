//! toolbox-notebook is the `notebook` provider: look at, change and run cells of Jupyter
//! notebooks (nbformat 4) in the workspace.
//!
//! | tool | alias | risk | what it does |
//! |---|---|---|---|
//! | `notebook__inspect` | | read | list cells: index, id, type, source preview, execution count, outputs |
//! | `notebook__edit` | `notebook_edit`, `file_manager__notebook_edit` | file_write | replace, insert or delete a cell by index or id |
//! | `notebook__run_cell` | | python | run a code cell in the session's Python; write outputs and execution count back |
//!
//! Notebooks are checked before anything changes ([`nb`]); a malformed file gets an error
//! saying where the problem is and is not touched. Every write is atomic and produces a
//! notebook that validates against nbformat 4.5.
//!
//! `notebook__run_cell` does not depend on the python provider: it runs the cell through
//! whatever [`toolbox_host::CodeRunner`] is registered for `python` (the python provider's,
//! when it is linked), so a cell and `run_python_code` share one session namespace.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod edit;
mod inspect;
pub mod nb;
mod run_cell;

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::LazyLock;
use toolbox_core::{Arg, Args, ToolInfo, ToolOutput};
use toolbox_host::{output, with_after_edit, ToolContext, ToolProvider, Tools, Workspace, WsPath};

use crate::nb::Notebook;

toolbox_host::register_provider!("notebook", || std::sync::Arc::new(
    NotebookProvider::default()
));

/// The toolsets every notebook tool belongs to (besides `notebook`, the provider name).
pub(crate) const TOOLSETS: &[&str] = &["notebook", "integrated_notebook"];

/// The `path` argument every notebook tool takes.
pub(crate) const PATH: Arg = Arg::string("path").aliases(&["notebook_path"]).required();
/// The description of [`PATH`].
pub(crate) const PATH_DOC: &str = "The .ipynb file, relative to the workspace.";
/// The `index` argument: a cell by its 0-based position ([`CellRef`]).
pub(crate) const INDEX: Arg =
    Arg::integer("index", 0, None).aliases(&["cell_index", "cell_number"]);
/// The `cell_id` argument: a cell by its id ([`CellRef`]).
pub(crate) const CELL_ID: Arg = Arg::string("cell_id").aliases(&["id"]);

/// The `notebook` provider. It holds no state.
#[derive(Debug, Default, Clone)]
pub struct NotebookProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for NotebookProvider {
    fn name(&self) -> &str {
        "notebook"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }

    fn preview(
        &self,
        tool: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Option<toolbox_core::Preview> {
        match tool {
            edit::NAME => edit::preview(args, ctx),
            _ => None,
        }
    }
}

/// Every notebook tool, each listed once.
static TOOLS: LazyLock<Tools<NotebookProvider>> = LazyLock::new(|| {
    Tools::<NotebookProvider>::new("notebook")
        .tool(inspect::info(), |_, _, args, ctx| {
            output(inspect::run(args, ctx))
        })
        // What another provider has to say about the file just written (host's AfterEdit
        // hook) is appended.
        .tool(edit::info(), |_, _, args, ctx| {
            Box::pin(async move {
                let path = std::iter::once(&PATH.name)
                    .chain(PATH.aliases)
                    .find_map(|k| args.get(*k).and_then(Value::as_str))
                    .map(str::to_string);
                let out = edit::run(args, ctx).await?;
                Ok(with_after_edit(out.into(), path.as_deref(), ctx).await)
            })
        })
        .tool(run_cell::info(), |_, _, args, ctx| {
            output(run_cell::run(args, ctx))
        })
});

/// A notebook the model named: parsed (not yet opened) against the call's workspace.
#[derive(Clone)]
pub(crate) struct NbPath {
    ws: Workspace,
    path: WsPath,
}

impl NbPath {
    /// Whether something is at the path (checked beneath the root; links inside followed).
    pub(crate) fn exists(&self) -> bool {
        self.ws.metadata(&self.path).is_ok()
    }
}

/// A notebook path parsed through the workspace jail; it must end in `.ipynb`.
pub(crate) fn notebook_path(tool: &str, ctx: &ToolContext, path: &str) -> Result<(NbPath, String)> {
    let p = ctx
        .workspace
        .locate(path)
        .map_err(|e| anyhow!("{tool}: {e}"))?;
    let shown = ctx.workspace.show(&p);
    if !shown.ends_with(".ipynb") {
        bail!("{tool}: {path:?} is not a .ipynb notebook");
    }
    Ok((
        NbPath {
            ws: ctx.workspace.clone(),
            path: p,
        },
        shown,
    ))
}

/// Loads a notebook on the blocking pool, opened beneath the workspace root, with errors
/// prefixed by the tool name.
pub(crate) async fn load(tool: &'static str, nb: NbPath, shown: String) -> Result<Notebook> {
    toolbox_host::blocking(format!("{tool}: the file task"), move || {
        let file = nb.ws.open_read(&nb.path).map_err(|e| match e {
            _ if e.is_not_found() => anyhow!("cannot read {shown}: it does not exist"),
            other => anyhow!("cannot read {shown}: {other}"),
        })?;
        Notebook::load(file, &shown)
    })
    .await?
    .map_err(|e| anyhow!("{tool}: {e}"))
}

/// Saves a notebook on the blocking pool: atomically, through the workspace, never through a
/// link, keeping the old file's permissions.
pub(crate) async fn save(
    tool: &'static str,
    mut notebook: Notebook,
    nb: NbPath,
    shown: String,
) -> Result<Notebook> {
    toolbox_host::blocking(format!("{tool}: the file task"), move || {
        let failed = |e: &dyn std::fmt::Display| anyhow!("{tool}: cannot write {shown}: {e}");
        let bytes = notebook.to_bytes().map_err(|e| failed(&e))?;
        nb.ws
            .write_atomic(&nb.path, &bytes, true)
            .map_err(|e| failed(&e))?;
        Ok(notebook)
    })
    .await?
}

/// Which cell a call means: `index` (alias `cell_index`, `cell_number`) or `cell_id`.
pub(crate) enum CellRef {
    Index(usize),
    Id(String),
}

impl CellRef {
    pub(crate) fn from_args(args: &Args<'_>) -> Result<Option<CellRef>> {
        let index = INDEX.opt_u64(args)?;
        let id = CELL_ID.opt_nonempty_str(args)?;
        match (index, id) {
            (Some(_), Some(_)) => bail!("{}: give either index or cell_id, not both", args.tool()),
            (Some(i), None) => Ok(Some(CellRef::Index(i as usize))),
            (None, Some(id)) => Ok(Some(CellRef::Id(id.to_string()))),
            (None, None) => Ok(None),
        }
    }

    /// The index of the cell in `nb`, or an error listing what exists.
    pub(crate) fn locate(&self, tool: &str, nb: &Notebook, shown: &str) -> Result<usize> {
        let count = nb.cells().len();
        match self {
            CellRef::Index(i) if *i < count => Ok(*i),
            CellRef::Index(i) => bail!(
                "{tool}: {shown} has {count} cells (indexes 0-{}); there is no cell {i}",
                count.saturating_sub(1)
            ),
            CellRef::Id(id) => nb.find_id(id).ok_or_else(|| {
                anyhow!(
                    "{tool}: {shown} has no cell with id {id:?} (notebook__inspect lists the ids)"
                )
            }),
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use serde_json::{json, Value};
    use tempfile::TempDir;
    use toolbox_host::{ToolContext, ToolProvider, Workspace};

    use crate::NotebookProvider;

    pub fn setup(tool: &str) -> (TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path())
            .unwrap()
            .with_session("s1")
            .unwrap();
        (dir, ToolContext::new(ws, "s1", "call-1", tool))
    }

    pub async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<String, String> {
        match NotebookProvider::default().call_tool(tool, args, ctx).await {
            Ok(output) => Ok(output.text),
            Err(e) => Err(format!("{e:#}")),
        }
    }

    /// A small nbformat 4.5 notebook: markdown, code with outputs, code.
    pub fn sample() -> Value {
        json!({
            "cells": [
                {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Title\n", "Some text."]},
                {"cell_type": "code", "id": "load", "metadata": {}, "execution_count": 1,
                 "source": ["x = 41\n", "print('hi')\n", "x + 1"],
                 "outputs": [
                    {"output_type": "stream", "name": "stdout", "text": ["hi\n"]},
                    {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                     "data": {"text/plain": ["42"]}}
                 ]},
                {"cell_type": "code", "id": "plot", "metadata": {"tags": ["keep"]}, "execution_count": null,
                 "source": "y = x * 2", "outputs": []}
            ],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5
        })
    }

    pub fn put(ctx: &ToolContext, rel: &str, nb: &Value) {
        std::fs::write(
            ctx.workspace.root().join(rel),
            serde_json::to_string_pretty(nb).unwrap(),
        )
        .unwrap();
    }

    pub fn get(ctx: &ToolContext, rel: &str) -> Value {
        serde_json::from_slice(&std::fs::read(ctx.workspace.root().join(rel)).unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolbox_core::ToolRisk;
    use toolbox_host::registered_providers;

    #[test]
    fn three_tools_risks_aliases_toolsets() {
        let tools = NotebookProvider::default().list_tools();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["notebook__inspect", "notebook__edit", "notebook__run_cell"]
        );
        let by = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
        assert_eq!(by("notebook__inspect").risk, ToolRisk::Read);
        assert_eq!(by("notebook__edit").risk, ToolRisk::FileWrite);
        assert_eq!(
            by("notebook__edit").aliases,
            ["notebook_edit", "file_manager__notebook_edit"]
        );
        assert_eq!(by("notebook__run_cell").risk, ToolRisk::Code);
        assert_eq!(
            by("notebook__edit").toolsets,
            ["notebook", "integrated_notebook", "files"]
        );
        for t in tools.iter().filter(|t| t.name != "notebook__edit") {
            assert_eq!(t.toolsets, TOOLSETS);
            assert_eq!(t.input_schema["additionalProperties"], false);
            for (name, p) in t.input_schema["properties"].as_object().unwrap() {
                let kind = p["type"].as_str().unwrap();
                assert!(["string", "integer", "boolean"].contains(&kind), "{name}");
                assert!(p["description"].as_str().is_some_and(|d| !d.is_empty()));
            }
            assert!(t.description.len() > 80, "{}", t.name);
        }
        assert!(registered_providers().iter().any(|r| r.name == "notebook"));
    }
}
