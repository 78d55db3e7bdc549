//! `notebook__inspect`: a notebook's cells at a glance, or one cell in full.

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::nb::{multiline, source_text, Notebook};
use crate::{load, notebook_path, CellRef, CELL_ID, INDEX, PATH, PATH_DOC, TOOLSETS};

pub const NAME: &str = "notebook__inspect";
/// Source lines shown per cell in the overview.
const PREVIEW_LINES: usize = 6;
/// Characters per shown line.
const LINE_CHARS: usize = 160;
/// Characters of one output's text in the single-cell view.
const OUTPUT_CHARS: usize = 4000;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Show a Jupyter notebook's cells: index, id, type, the first lines of the source, the \
         execution count and a summary of the outputs (streams, results, figures, errors). \
         Give index or cell_id to see one cell in full, with its outputs' text. Use the index \
         or id with notebook__edit and notebook__run_cell.",
        object(&[
            PATH.doc(PATH_DOC),
            INDEX.doc("Show only this cell (0-based), in full."),
            CELL_ID.doc("Show only the cell with this id, in full."),
        ]),
    )
    .toolsets(TOOLSETS)
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?;
    let which = CellRef::from_args(&a)?;
    a.finish()?;
    let (abs, shown) = notebook_path(NAME, ctx, path)?;
    let nb = load(NAME, abs, shown.clone()).await?;
    let text = match which {
        None => overview(&nb, &shown),
        Some(which) => {
            let index = which.locate(NAME, &nb, &shown)?;
            one_cell(&nb, index, &shown)
        }
    };
    Ok(Value::String(text))
}

fn overview(nb: &Notebook, shown: &str) -> String {
    let cells = nb.cells();
    let mut out = format!(
        "{shown}: nbformat {}{}, {} cells\n",
        nb.version(),
        kernel(nb),
        cells.len()
    );
    for (i, cell) in cells.iter().enumerate() {
        out.push('\n');
        out.push_str(&header(i, cell));
        out.push('\n');
        let source = source_text(cell);
        let lines: Vec<&str> = source.lines().collect();
        for line in lines.iter().take(PREVIEW_LINES) {
            out.push_str("    ");
            out.push_str(&cut(line, LINE_CHARS));
            out.push('\n');
        }
        if lines.len() > PREVIEW_LINES {
            out.push_str(&format!(
                "    … ({} more lines)\n",
                lines.len() - PREVIEW_LINES
            ));
        }
        if let Some(outputs) = cell["outputs"].as_array().filter(|o| !o.is_empty()) {
            let summary: Vec<String> = outputs.iter().map(summarize_output).collect();
            out.push_str(&format!("    outputs: {}\n", summary.join("; ")));
        }
    }
    out
}

fn kernel(nb: &Notebook) -> String {
    let meta = &nb.doc["metadata"];
    match (
        meta["kernelspec"]["display_name"].as_str(),
        meta["language_info"]["name"].as_str(),
    ) {
        (Some(k), _) => format!(", kernel {k}"),
        (None, Some(lang)) => format!(", language {lang}"),
        _ => String::new(),
    }
}

fn header(i: usize, cell: &Value) -> String {
    let kind = cell["cell_type"].as_str().unwrap_or("?");
    let id = cell["id"].as_str().unwrap_or("(none)");
    let mut text = format!("[{i}] id={id} {kind}");
    if kind == "code" {
        match cell["execution_count"].as_u64() {
            Some(n) => text.push_str(&format!(", execution_count {n}")),
            None => text.push_str(", not run"),
        }
    }
    text
}

fn summarize_output(output: &Value) -> String {
    match output["output_type"].as_str().unwrap_or("?") {
        "stream" => {
            let text = multiline(&output["text"]);
            format!(
                "{} ({} lines)",
                output["name"].as_str().unwrap_or("stream"),
                text.lines().count()
            )
        }
        "execute_result" => {
            let text = multiline(&output["data"]["text/plain"]);
            let first = text.lines().next().unwrap_or("");
            format!("result {}", cut(first, 60))
        }
        "display_data" => {
            let mimes: Vec<&str> = output["data"]
                .as_object()
                .map(|m| m.keys().map(String::as_str).collect())
                .unwrap_or_default();
            let main = mimes
                .iter()
                .find(|m| m.starts_with("image/"))
                .or_else(|| mimes.first())
                .copied()
                .unwrap_or("?");
            format!("display {main}")
        }
        "error" => format!(
            "error {}: {}",
            output["ename"].as_str().unwrap_or("?"),
            cut(output["evalue"].as_str().unwrap_or(""), 80)
        ),
        other => other.to_string(),
    }
}

fn one_cell(nb: &Notebook, index: usize, shown: &str) -> String {
    let cell = &nb.cells()[index];
    let mut out = format!("{shown}: {}\n", header(index, cell));
    if let Some(tags) = cell["metadata"]["tags"].as_array() {
        let tags: Vec<&str> = tags.iter().filter_map(Value::as_str).collect();
        out.push_str(&format!("tags: {}\n", tags.join(", ")));
    }
    out.push_str("--- source ---\n");
    let source = source_text(cell);
    out.push_str(&source);
    if !source.ends_with('\n') {
        out.push('\n');
    }
    if let Some(outputs) = cell["outputs"].as_array() {
        for (j, output) in outputs.iter().enumerate() {
            out.push_str(&format!(
                "--- output {j}: {} ---\n",
                summarize_output(output)
            ));
            let text = match output["output_type"].as_str() {
                Some("stream") => multiline(&output["text"]),
                Some("execute_result") | Some("display_data") => {
                    let data = &output["data"];
                    match data["text/plain"].is_null() {
                        false => multiline(&data["text/plain"]),
                        true => String::new(),
                    }
                }
                Some("error") => output["traceback"]
                    .as_array()
                    .map(|lines| {
                        lines
                            .iter()
                            .filter_map(Value::as_str)
                            .map(strip_ansi)
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default(),
                _ => String::new(),
            };
            if !text.is_empty() {
                out.push_str(&cut(&text, OUTPUT_CHARS));
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// Jupyter tracebacks carry terminal colour codes; a model reads plain text.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn overview_lists_cells_with_ids_previews_and_outputs() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.ipynb", &sample());
        let text = call(&ctx, NAME, json!({"path": "a.ipynb"})).await.unwrap();
        assert!(
            text.starts_with("a.ipynb: nbformat 4.5, kernel Python 3, 3 cells\n"),
            "{text}"
        );
        assert!(
            text.contains("[0] id=intro markdown\n    # Title\n    Some text.\n"),
            "{text}"
        );
        assert!(
            text.contains("[1] id=load code, execution_count 1\n    x = 41\n"),
            "{text}"
        );
        assert!(
            text.contains("    outputs: stdout (1 lines); result 42\n"),
            "{text}"
        );
        assert!(
            text.contains("[2] id=plot code, not run\n    y = x * 2\n"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn one_cell_in_full_and_errors() {
        let (_d, ctx) = setup(NAME);
        let mut nb = sample();
        nb["cells"][1]["outputs"].as_array_mut().unwrap().push(
            json!({"output_type": "error", "ename": "ValueError", "evalue": "bad",
                         "traceback": ["\u{1b}[0;31mValueError\u{1b}[0m: bad"]}),
        );
        put(&ctx, "a.ipynb", &nb);
        let text = call(&ctx, NAME, json!({"path": "a.ipynb", "cell_id": "load"}))
            .await
            .unwrap();
        assert!(
            text.contains("--- source ---\nx = 41\nprint('hi')\nx + 1\n"),
            "{text}"
        );
        assert!(
            text.contains("--- output 0: stdout (1 lines) ---\nhi\n"),
            "{text}"
        );
        assert!(
            text.contains("--- output 2: error ValueError: bad ---\nValueError: bad\n"),
            "{text}"
        );
        let e = call(&ctx, NAME, json!({"path": "a.ipynb", "index": 7}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "notebook__inspect: a.ipynb has 3 cells (indexes 0-2); there is no cell 7"
        );
        let e = call(&ctx, NAME, json!({"path": "a.ipynb", "cell_id": "nope"}))
            .await
            .unwrap_err();
        assert!(e.contains("has no cell with id \"nope\""), "{e}");
        let e = call(&ctx, NAME, json!({"path": "a.txt"}))
            .await
            .unwrap_err();
        assert!(e.contains("is not a .ipynb notebook"), "{e}");
        let e = call(&ctx, NAME, json!({"path": "../a.ipynb"}))
            .await
            .unwrap_err();
        assert!(e.contains("outside the workspace"), "{e}");
        std::fs::write(ctx.workspace.root().join("bad.ipynb"), "{\"cells\": 3}").unwrap();
        let e = call(&ctx, NAME, json!({"path": "bad.ipynb"}))
            .await
            .unwrap_err();
        assert!(
            e.contains("bad.ipynb is not a valid nbformat 4 notebook"),
            "{e}"
        );
    }
}
