//! `notebook__run_cell`: run one code cell in the session's Python and store its outputs.
//!
//! The cell runs through the `python` [`CodeRunner`](toolbox_host::CodeRunner), i.e. in the
//! same session namespace as `run_python_code` (working directory: the session scratchpad),
//! on whatever `[python] backend` says — with `jupyter`, in the user's own kernel.
//! Its result becomes nbformat outputs — `stream` (stdout, stderr), `display_data` (figures
//! as base64 `image/png`, `display()` calls), `execute_result` (the final expression) and
//! `error` — and they replace the cell's outputs together with the new `execution_count`.
//!
//! The notebook is read again after the run (a long run may overlap an edit) and the cell is
//! found by id; the write is atomic. If the run itself fails (timeout, crashed worker) the
//! notebook is not changed.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use base64::Engine;
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::ToolContext;

use crate::nb::{source_lines, source_text};
use crate::{load, notebook_path, save, CellRef, CELL_ID, INDEX, PATH, PATH_DOC, TOOLSETS};

pub const NAME: &str = "notebook__run_cell";
/// 0 is read as 1 ms, as it always was.
const TIMEOUT_MS: Arg = Arg::integer("timeout_ms", 0, None);
/// Figures larger than this are referenced by path instead of embedded.
const MAX_EMBEDDED_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Run one code cell of a Jupyter notebook in this session's live Python (the same \
         namespace run_python_code uses: variables carry over both ways; the working directory \
         is the session scratchpad) and write its outputs — printed text, figures, the final \
         expression's value, the error — and the execution count back into the .ipynb. \
         Returns the outputs as text. Cells run only when asked: run earlier cells first if \
         this one needs their variables.",
        object(&[
            PATH.doc(PATH_DOC),
            INDEX.doc("The code cell to run (0-based)."),
            CELL_ID.doc("The id of the code cell to run."),
            TIMEOUT_MS.doc(
                "Stop the cell after this many milliseconds (default: the python \
                 provider's configured limit).",
            ),
        ]),
    )
    .risk(ToolRisk::Code)
    .toolsets(TOOLSETS)
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?;
    let which =
        CellRef::from_args(&a)?.ok_or_else(|| anyhow!("{NAME} requires index or cell_id"))?;
    let timeout = TIMEOUT_MS
        .opt_u64(&a)?
        .map(|ms| Duration::from_millis(ms.max(1)));
    a.finish()?;
    let (abs, shown) = notebook_path(NAME, ctx, path)?;
    let nb = load(NAME, abs.clone(), shown.clone()).await?;
    let index = which.locate(NAME, &nb, &shown)?;
    let cell = &nb.cells()[index];
    if cell["cell_type"] != "code" {
        bail!(
            "{NAME}: cell {index} of {shown} is a {} cell; only code cells run",
            cell["cell_type"].as_str().unwrap_or("?")
        );
    }
    let source = source_text(cell);
    let cell_id = cell["id"].as_str().map(str::to_string);

    let runner = toolbox_host::find_code_runner("python").ok_or_else(|| {
        anyhow!("{NAME}: no Python runner is linked into this build (enable the toolbox feature `python`)")
    })?;
    let running = (runner.run)(&source, ctx);
    let result = match timeout {
        Some(limit) => tokio::time::timeout(limit, running).await.map_err(|_| {
            anyhow!(
                "{NAME} timed out after {} ms and the cell was stopped (the embedded interpreter \
                 and a Jupyter kernel interrupt it and keep the session; an isolated worker is \
                 killed and the session restarted); {shown} was not changed",
                limit.as_millis()
            )
        })?,
        None => running.await,
    }
    .map_err(|e| anyhow!("{e:#}\n\n{shown} was not changed."))?;

    let outputs = to_outputs(&result, ctx);
    let count = result["execution_count"].as_u64();

    // Read again: the notebook may have been edited while the cell ran.
    let mut nb = load(NAME, abs.clone(), shown.clone()).await?;
    let at = match &cell_id {
        Some(id) => nb.find_id(id),
        None => (index < nb.cells().len() && source_text(&nb.cells()[index]) == source)
            .then_some(index),
    }
    .ok_or_else(|| {
        anyhow!("{NAME}: the cell was changed or removed while it ran; its outputs were not written to {shown}")
    })?;
    let written = outputs.len();
    {
        let cell = &mut nb.cells_mut()[at];
        cell["outputs"] = Value::Array(outputs);
        cell["execution_count"] = count.map(Value::from).unwrap_or(Value::Null);
    }
    let nb = save(NAME, nb, abs, shown.clone()).await?;
    let id = nb.cells()[at]["id"].as_str().unwrap_or("?").to_string();
    let mut text = format!(
        "ran cell [{at}] id={id} of {shown} (execution_count {}); {written} outputs written to the notebook\n",
        count.map(|c| c.to_string()).unwrap_or_else(|| "none".into())
    );
    text.push_str(&render(&result));
    Ok(Value::String(text))
}

/// The runner's structured result as nbformat 4 outputs, in the order a notebook shows them.
fn to_outputs(result: &Value, ctx: &ToolContext) -> Vec<Value> {
    let mut outputs = Vec::new();
    for name in ["stdout", "stderr"] {
        if let Some(text) = result[name].as_str().filter(|t| !t.is_empty()) {
            outputs
                .push(json!({"output_type": "stream", "name": name, "text": source_lines(text)}));
        }
    }
    for item in result["display_data"].as_array().into_iter().flatten() {
        let mime = item["mime_type"].as_str().unwrap_or("text/plain");
        if let Some(path) = item["path"].as_str() {
            let data = match embed_file(ctx, path) {
                Ok(b64) => {
                    let mut data = json!({ "text/plain": [format!("<{mime} {path}>")] });
                    data[mime] = Value::String(b64);
                    data
                }
                // Too big or unreadable: say where it is instead.
                Err(why) => json!({ "text/plain": [format!("<{mime} {path}: {why}>")] }),
            };
            outputs.push(json!({"output_type": "display_data", "data": data, "metadata": {}}));
        } else if let Some(text) = item["text"].as_str() {
            let mut data = json!({ "text/plain": source_lines(text) });
            if let Some(html) = item["html"].as_str() {
                data["text/html"] = source_lines(html);
            }
            outputs.push(json!({"output_type": "display_data", "data": data, "metadata": {}}));
        }
    }
    if let Some(plain) = result["result"]["text/plain"].as_str() {
        let mut data = json!({ "text/plain": source_lines(plain) });
        if let Some(html) = result["result"]["text/html"].as_str() {
            data["text/html"] = source_lines(html);
        }
        outputs.push(json!({
            "output_type": "execute_result",
            "execution_count": result["execution_count"].as_u64(),
            "data": data,
            "metadata": {},
        }));
    }
    if result["error"].is_object() {
        let error = &result["error"];
        let traceback: Vec<Value> = error["traceback"]
            .as_str()
            .unwrap_or("")
            .lines()
            .map(|l| Value::String(l.to_string()))
            .collect();
        outputs.push(json!({
            "output_type": "error",
            "ename": error["ename"].as_str().unwrap_or("Error"),
            "evalue": error["evalue"].as_str().unwrap_or(""),
            "traceback": traceback,
        }));
    }
    outputs
}

fn embed_file(ctx: &ToolContext, path: &str) -> Result<String, String> {
    use std::io::Read;
    let p = ctx.workspace.locate(path).map_err(|e| e.to_string())?;
    let file = ctx.workspace.open_read(&p).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    if size > MAX_EMBEDDED_IMAGE_BYTES {
        return Err(format!("{size} bytes, too large to embed"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_EMBEDDED_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let mut b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    b64.push('\n');
    Ok(b64)
}

/// The run as text for the model (the same sections run_python_code shows).
fn render(result: &Value) -> String {
    let mut out = String::new();
    for note in result["notes"].as_array().into_iter().flatten() {
        if let Some(note) = note.as_str() {
            out.push_str(&format!("note: {note}\n"));
        }
    }
    for name in ["stdout", "stderr"] {
        if let Some(text) = result[name].as_str().filter(|t| !t.is_empty()) {
            out.push_str(&format!("[{name}]\n{}\n", text.trim_end_matches('\n')));
        }
    }
    let items: Vec<String> = result["display_data"]
        .as_array()
        .into_iter()
        .flatten()
        .map(
            |item| match (item["path"].as_str(), item["text"].as_str()) {
                (Some(path), _) => format!("{} {path}", item["mime_type"].as_str().unwrap_or("?")),
                (None, Some(text)) => text.to_string(),
                _ => "?".to_string(),
            },
        )
        .collect();
    if !items.is_empty() {
        out.push_str(&format!("[display_data]\n{}\n", items.join("\n")));
    }
    if let Some(plain) = result["result"]["text/plain"].as_str() {
        out.push_str(&format!("[result]\n{}\n", plain.trim_end_matches('\n')));
    }
    if result["error"].is_object() {
        let e = &result["error"];
        out.push_str(&format!(
            "[error] {}: {}\n{}\n",
            e["ename"].as_str().unwrap_or("Error"),
            e["evalue"].as_str().unwrap_or(""),
            e["traceback"].as_str().unwrap_or("").trim_end()
        ));
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use toolbox_host::RunFuture;

    // The python provider is not linked into this crate's tests; a stand-in runner answers
    // like it does, so the conversion to nbformat outputs is tested without Python.
    fn fake_runner<'a>(code: &'a str, ctx: &'a ToolContext) -> RunFuture<'a> {
        Box::pin(async move {
            if code.contains("sleep") {
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
            if code.contains("crash") {
                bail!(
                    "{}: the Python worker process was killed by signal 11",
                    ctx.tool
                );
            }
            let png = ctx.workspace.output_dir().unwrap().join("figure-1.png");
            std::fs::write(&png, b"\x89PNG fake").unwrap();
            Ok(json!({
                "execution_count": 7,
                "stdout": "hello\n",
                "stderr": "",
                "result": {"text/plain": "42"},
                "display_data": [{"mime_type": "image/png", "path": "output/figure-1.png"}],
                "error": {"ename": "ValueError", "evalue": "bad",
                          "traceback": "Traceback (most recent call last):\n  File \"<cell>\", line 1\nValueError: bad"},
                "notes": []
            }))
        })
    }
    toolbox_host::register_code_runner!("fake-python", "python", fake_runner);

    #[tokio::test]
    async fn outputs_and_count_are_written_back() {
        let (_d, ctx) = setup(NAME);
        put(&ctx, "a.ipynb", &sample());
        let text = call(&ctx, NAME, json!({"path": "a.ipynb", "cell_id": "plot"}))
            .await
            .unwrap();
        assert!(
            text.starts_with(
                "ran cell [2] id=plot of a.ipynb (execution_count 7); 4 outputs written"
            ),
            "{text}"
        );
        assert!(text.contains("[stdout]\nhello\n[display_data]\nimage/png output/figure-1.png\n[result]\n42\n[error] ValueError: bad\n"), "{text}");
        let nb = get(&ctx, "a.ipynb");
        let cell = &nb["cells"][2];
        assert_eq!(cell["execution_count"], 7);
        assert_eq!(cell["metadata"]["tags"], json!(["keep"]));
        let outputs = cell["outputs"].as_array().unwrap();
        let kinds: Vec<&str> = outputs
            .iter()
            .map(|o| o["output_type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["stream", "display_data", "execute_result", "error"]);
        assert_eq!(outputs[0]["text"], json!(["hello\n"]));
        let b64 = outputs[1]["data"]["image/png"].as_str().unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap(),
            b"\x89PNG fake"
        );
        assert_eq!(outputs[2]["execution_count"], 7);
        assert_eq!(outputs[3]["traceback"][1], "  File \"<cell>\", line 1");
    }

    #[tokio::test]
    async fn failures_leave_the_notebook_alone() {
        let (_d, ctx) = setup(NAME);
        let mut nb = sample();
        nb["cells"][2]["source"] = json!("crash()");
        nb["cells"][1]["source"] = json!("sleep()");
        put(&ctx, "a.ipynb", &nb);
        let before = std::fs::read(ctx.workspace.root().join("a.ipynb")).unwrap();
        let e = call(&ctx, NAME, json!({"path": "a.ipynb", "index": 2}))
            .await
            .unwrap_err();
        assert!(
            e.contains("killed by signal 11") && e.ends_with("a.ipynb was not changed."),
            "{e}"
        );
        let e = call(
            &ctx,
            NAME,
            json!({"path": "a.ipynb", "index": 1, "timeout_ms": 50}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("timed out after 50 ms"), "{e}");
        let e = call(&ctx, NAME, json!({"path": "a.ipynb", "index": 0}))
            .await
            .unwrap_err();
        assert!(
            e.contains("cell 0 of a.ipynb is a markdown cell; only code cells run"),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({"path": "a.ipynb"}))
            .await
            .unwrap_err();
        assert_eq!(e, "notebook__run_cell requires index or cell_id");
        assert_eq!(
            std::fs::read(ctx.workspace.root().join("a.ipynb")).unwrap(),
            before
        );
    }
}
