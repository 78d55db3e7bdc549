//! `notebook__edit`: replace, insert or delete one cell.

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::ToolContext;

use crate::nb::{new_cell, set_cell_type, source_lines, Notebook};
use crate::{load, notebook_path, save, CellRef, CELL_ID, INDEX, PATH, PATH_DOC, TOOLSETS};

pub const NAME: &str = "notebook__edit";
const OPERATION: Arg =
    Arg::choice("operation", &["replace", "insert", "delete"]).aliases(&["edit_mode"]);
const SOURCE: Arg = Arg::string("source").aliases(&["new_source"]);
const CELL_TYPE: Arg = Arg::choice("cell_type", &["code", "markdown", "raw"]);

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Change one cell of a Jupyter notebook. operation replace (the default) sets the \
         source (and optionally the type) of the cell given by index or cell_id; a code cell's \
         old outputs are cleared. insert adds a new cell: at position index, or right after \
         cell_id, or at the end when neither is given; inserting into a missing .ipynb creates \
         the notebook. delete removes the cell. The file is rewritten atomically as valid \
         nbformat 4.5; new cells get ids. Run code cells with notebook__run_cell.",
        object(&[
            PATH.doc(PATH_DOC),
            OPERATION.doc("replace (default), insert or delete."),
            INDEX.doc("0-based cell index: the cell to replace or delete, or where to insert."),
            CELL_ID.doc("The id of the cell to replace or delete, or to insert after."),
            SOURCE.doc("The cell's new source (required for replace and insert)."),
            CELL_TYPE.doc(
                "Type of the new cell (insert: default code) or the type to change to \
                 (replace: default unchanged).",
            ),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    // The data agent's sidecar names it among the file manager's tools.
    .aliases(&["notebook_edit", "file_manager__notebook_edit"])
    // The data agent groups notebook_edit with its file tools: `[files]` has it too.
    .toolsets(&[TOOLSETS[0], TOOLSETS[1], "files"])
    .named(Vocabulary::DataAgent, "notebook_edit")
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?;
    let operation = OPERATION.opt_choice(&a)?.unwrap_or("replace");
    let which = CellRef::from_args(&a)?;
    let source = SOURCE.opt_str(&a)?;
    let cell_type = CELL_TYPE.opt_choice(&a)?;
    a.finish()?;
    let (abs, shown) = notebook_path(NAME, ctx, path)?;

    let mut nb = if operation == "insert" && !abs.exists() {
        Notebook::empty()
    } else {
        load(NAME, abs.clone(), shown.clone()).await?
    };
    let message = match operation {
        "insert" => {
            let source = source.ok_or_else(|| anyhow!("{NAME}: insert requires source"))?;
            let at = match &which {
                None => nb.cells().len(),
                Some(CellRef::Index(i)) if *i <= nb.cells().len() => *i,
                Some(CellRef::Index(i)) => bail!(
                    "{NAME}: cannot insert at index {i}: {shown} has {} cells (insert at 0-{})",
                    nb.cells().len(),
                    nb.cells().len()
                ),
                Some(which @ CellRef::Id(_)) => which.locate(NAME, &nb, &shown)? + 1,
            };
            let kind = cell_type.unwrap_or("code");
            let id = nb.new_id();
            nb.cells_mut()
                .insert(at, new_cell(kind, source, id.clone()));
            format!("inserted {kind} cell id={id} at index {at}")
        }
        "delete" => {
            let which = which.ok_or_else(|| anyhow!("{NAME}: delete requires index or cell_id"))?;
            let at = which.locate(NAME, &nb, &shown)?;
            let removed = nb.cells_mut().remove(at);
            format!(
                "deleted {} cell id={} at index {at}",
                removed["cell_type"].as_str().unwrap_or("?"),
                removed["id"].as_str().unwrap_or("(none)")
            )
        }
        _ => {
            let which =
                which.ok_or_else(|| anyhow!("{NAME}: replace requires index or cell_id"))?;
            let source = source.ok_or_else(|| anyhow!("{NAME}: replace requires source"))?;
            let at = which.locate(NAME, &nb, &shown)?;
            let cell = &mut nb.cells_mut()[at];
            if let Some(kind) = cell_type {
                set_cell_type(cell, kind);
            }
            cell["source"] = source_lines(source);
            // Outputs of the old source would describe code that no longer exists.
            if cell["cell_type"] == "code" {
                cell["outputs"] = json!([]);
                cell["execution_count"] = Value::Null;
            }
            format!(
                "replaced {} cell at index {at}",
                cell["cell_type"].as_str().unwrap_or("?")
            )
        }
    };
    let nb = save(NAME, nb, abs, shown.clone()).await?;
    // Where it really is: `.toolbox/sessions/s1/output/a.ipynb (output/a.ipynb)`.
    let real = ctx
        .workspace
        .locate(path)
        .map(|p| ctx.workspace.show_real(&p))
        .unwrap_or(shown);
    Ok(Value::String(format!(
        "{message} of {real} ({} cells now)",
        nb.cells().len()
    )))
}

/// What an edit would do to the cell's source, as a unified diff, with the notebook's real
/// path. Changes nothing.
pub(crate) fn preview(args: &Value, ctx: &ToolContext) -> Option<toolbox_core::Preview> {
    let a = Args::new(NAME, args).ok()?;
    let path = PATH.str(&a).ok()?;
    let operation = OPERATION.opt_nonempty_str(&a).ok()?.unwrap_or("replace");
    let which = CellRef::from_args(&a).ok()?;
    let source = SOURCE.opt_str(&a).ok()?.unwrap_or("");
    let p = ctx.workspace.locate(path).ok()?;
    let real = ctx.workspace.show_real(&p);
    let shown = ctx.workspace.show(&p);
    let nb = ctx
        .workspace
        .open_read(&p)
        .ok()
        .and_then(|file| Notebook::load(file, &shown).ok());
    let fail = |why: String| {
        Some(toolbox_core::Preview::new(format!(
            "Edit {real}: this will fail: {why}"
        )))
    };
    let cell_text = |nb: &Notebook, at: usize| -> String {
        match &nb.cells()[at]["source"] {
            Value::String(s) => s.clone(),
            Value::Array(lines) => lines.iter().filter_map(Value::as_str).collect(),
            _ => String::new(),
        }
    };
    let (summary, before, after) = match (operation, nb) {
        ("insert", None) => (
            format!("Create {real} with one cell"),
            String::new(),
            source.to_string(),
        ),
        (_, None) => return fail("the notebook cannot be read".into()),
        ("insert", Some(nb)) => {
            let at = match &which {
                None => nb.cells().len(),
                Some(CellRef::Index(i)) => *i,
                Some(w @ CellRef::Id(_)) => match w.locate(NAME, &nb, &shown) {
                    Ok(i) => i + 1,
                    Err(e) => return fail(format!("{e:#}")),
                },
            };
            (
                format!("Insert a cell at index {at} of {real}"),
                String::new(),
                source.to_string(),
            )
        }
        ("delete", Some(nb)) => {
            let w = which?;
            match w.locate(NAME, &nb, &shown) {
                Ok(at) => (
                    format!("Delete cell {at} of {real}"),
                    cell_text(&nb, at),
                    String::new(),
                ),
                Err(e) => return fail(format!("{e:#}")),
            }
        }
        (_, Some(nb)) => {
            let w = which?;
            match w.locate(NAME, &nb, &shown) {
                Ok(at) => (
                    format!("Replace the source of cell {at} of {real}"),
                    cell_text(&nb, at),
                    source.to_string(),
                ),
                Err(e) => return fail(format!("{e:#}")),
            }
        }
    };
    Some(toolbox_core::Preview::new(summary).diff(&shown, &before, &after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    #[tokio::test]
    async fn replace_insert_delete_by_index_and_id() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.ipynb", &sample());
        let r = call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "cell_id": "load", "source": "x = 1\nx"}),
        )
        .await
        .unwrap();
        assert_eq!(r, "replaced code cell at index 1 of a.ipynb (3 cells now)");
        let nb = get(&ctx, "a.ipynb");
        assert_eq!(nb["cells"][1]["source"], json!(["x = 1\n", "x"]));
        assert_eq!(nb["cells"][1]["outputs"], json!([]));
        assert_eq!(nb["cells"][1]["execution_count"], Value::Null);
        assert_eq!(
            nb["cells"][2]["metadata"]["tags"],
            json!(["keep"]),
            "metadata kept"
        );

        let r = call(&ctx, NAME, json!({"notebook_path": "a.ipynb", "edit_mode": "insert",
                                                   "cell_id": "intro", "new_source": "## Part 2", "cell_type": "markdown"}))
            .await
            .unwrap();
        assert!(r.starts_with("inserted markdown cell id="), "{r}");
        assert!(r.ends_with("at index 1 of a.ipynb (4 cells now)"), "{r}");
        let nb = get(&ctx, "a.ipynb");
        let id = nb["cells"][1]["id"].as_str().unwrap();
        assert_eq!(id.len(), 8);
        assert!(nb["cells"][1].get("outputs").is_none());

        call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "operation": "insert", "index": 0, "source": "import os"}),
        )
        .await
        .unwrap();
        call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "operation": "insert", "source": "last = True"}),
        )
        .await
        .unwrap();
        let nb = get(&ctx, "a.ipynb");
        assert_eq!(nb["cells"].as_array().unwrap().len(), 6);
        assert_eq!(nb["cells"][0]["source"], json!(["import os"]));
        assert_eq!(nb["cells"][0]["outputs"], json!([]));
        assert_eq!(nb["cells"][5]["source"], json!(["last = True"]));

        let r = call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "operation": "delete", "index": 5}),
        )
        .await
        .unwrap();
        assert!(r.starts_with("deleted code cell id="), "{r}");
        // replace can change the type: markdown -> code gains outputs.
        call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "cell_id": "intro", "source": "1 + 1", "cell_type": "code"}),
        )
        .await
        .unwrap();
        let nb = get(&ctx, "a.ipynb");
        let intro = &nb["cells"][1];
        assert_eq!(intro["cell_type"], "code");
        assert_eq!(intro["outputs"], json!([]));
    }

    /// Strict-mode clients send every property: null, or "" where null is not allowed.
    #[tokio::test]
    async fn null_and_empty_optional_arguments_are_absent() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.ipynb", &sample());
        let r = call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "operation": null, "index": 1, "cell_id": null,
                   "source": "y = 2", "cell_type": null}),
        )
        .await
        .unwrap();
        assert_eq!(r, "replaced code cell at index 1 of a.ipynb (3 cells now)");
        let r = call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "operation": "", "index": 1, "cell_id": "",
                   "source": "z = 3", "cell_type": ""}),
        )
        .await
        .unwrap();
        assert_eq!(r, "replaced code cell at index 1 of a.ipynb (3 cells now)");
        assert_eq!(get(&ctx, "a.ipynb")["cells"][1]["source"], json!(["z = 3"]));
    }

    #[tokio::test]
    async fn insert_creates_a_notebook_and_errors_are_clear() {
        let (_d, ctx) = setup(NAME);
        let r = call(
            &ctx,
            NAME,
            json!({"path": "output/new.ipynb", "operation": "insert", "source": "print(1)"}),
        )
        .await
        .unwrap();
        assert!(
            r.ends_with(
                "at index 0 of .toolbox/sessions/s1/output/new.ipynb (output/new.ipynb) (1 cells \
                 now)"
            ),
            "{r}"
        );
        let nb: Value = serde_json::from_slice(
            &std::fs::read(ctx.workspace.resolve("output/new.ipynb").unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(nb["nbformat_minor"], 5);
        assert_eq!(nb["metadata"]["kernelspec"]["name"], "python3");

        put(&ctx, "a.ipynb", &sample());
        let cases = [
            (
                json!({"path": "a.ipynb", "source": "x"}),
                "replace requires index or cell_id",
            ),
            (
                json!({"path": "a.ipynb", "index": 0}),
                "replace requires source",
            ),
            (
                json!({"path": "a.ipynb", "operation": "delete"}),
                "delete requires index or cell_id",
            ),
            (
                json!({"path": "a.ipynb", "operation": "move", "index": 0}),
                "`operation` must be one of replace, insert, delete, got \"move\"",
            ),
            (
                json!({"path": "a.ipynb", "index": 0, "cell_id": "load", "source": "x"}),
                "either index or cell_id, not both",
            ),
            (
                json!({"path": "a.ipynb", "operation": "insert", "index": 9, "source": "x"}),
                "cannot insert at index 9",
            ),
            (
                json!({"path": "a.ipynb", "index": 0, "source": "x", "cell_type": "sql"}),
                "`cell_type` must be one of code, markdown, raw, got \"sql\"",
            ),
            (
                json!({"path": "missing.ipynb", "index": 0, "source": "x"}),
                "cannot read missing.ipynb",
            ),
        ];
        for (args, want) in cases {
            let e = call(&ctx, NAME, args.clone()).await.unwrap_err();
            assert!(e.starts_with("notebook__edit"), "{e}");
            assert!(e.contains(want), "{args}: {e}");
        }
    }

    #[tokio::test]
    async fn malformed_notebooks_are_left_byte_identical() {
        let (_d, ctx) = setup(NAME);
        let broken: &[&[u8]] = &[
            b"{\"cells\": [}",
            b"{\"cells\": [{\"cell_type\": \"code\", \"source\": \"x\"}], \"metadata\": {}, \"nbformat\": 4, \"nbformat_minor\": 5}",
            b"{\"cells\": [], \"metadata\": {}, \"nbformat\": 3, \"nbformat_minor\": 0}",
        ];
        for bytes in broken {
            let path = ctx.workspace.root().join("bad.ipynb");
            std::fs::write(&path, bytes).unwrap();
            for args in [
                json!({"path": "bad.ipynb", "operation": "insert", "source": "x"}),
                json!({"path": "bad.ipynb", "index": 0, "source": "x"}),
                json!({"path": "bad.ipynb", "operation": "delete", "index": 0}),
            ] {
                let e = call(&ctx, NAME, args).await.unwrap_err();
                assert!(e.contains("bad.ipynb is not a valid"), "{e}");
                assert!(e.contains("left untouched"), "{e}");
                assert_eq!(&std::fs::read(&path).unwrap(), bytes);
            }
        }
        // No temporary files left behind either.
        let names: Vec<_> = std::fs::read_dir(ctx.workspace.root())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("toolbox"))
            .collect();
        assert!(names.iter().all(|n| n == ".toolbox"), "{names:?}");
    }
}
