//! Reading, checking and writing `.ipynb` files (nbformat 4).
//!
//! A notebook is kept as a `serde_json::Value`, so fields toolbox does not know about (cell
//! metadata, widget state, attachments) survive an edit. Before anything is changed the
//! document is checked against the parts of the nbformat 4 schema that matter for a valid
//! write: top-level keys, cell types and their required fields, source and output shapes,
//! cell ids. A problem is reported with where it is, and the file is left untouched.
//!
//! Every write produces nbformat 4.5: cells lacking an id get one (random, 8 hex digits,
//! unique in the notebook, as Jupyter does), `nbformat_minor` is raised to 5 if lower, and
//! the file is replaced atomically (temporary file in the same folder, fsync, rename) with
//! Jupyter's layout (one-space indent, trailing newline).

use std::collections::HashSet;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Map, Value};

/// Notebooks larger than this are not loaded.
pub const MAX_NOTEBOOK_BYTES: u64 = 64 * 1024 * 1024;

const CELL_TYPES: &[&str] = &["code", "markdown", "raw"];

/// A parsed, checked notebook.
#[derive(Debug, Clone)]
pub struct Notebook {
    /// The whole document, including the fields toolbox does not know about.
    pub doc: Value,
}

impl Notebook {
    /// A new, empty nbformat 4.5 notebook with a Python 3 kernelspec.
    pub fn empty() -> Self {
        Notebook {
            doc: json!({
                "cells": [],
                "metadata": {
                    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                    "language_info": {"name": "python"}
                },
                "nbformat": 4,
                "nbformat_minor": 5
            }),
        }
    }

    /// Reads and checks a notebook already opened (through the workspace, beneath its root);
    /// `shown` is the path as the model knows it.
    pub fn load(file: File, shown: &str) -> Result<Self> {
        let meta = file
            .metadata()
            .map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
        if meta.len() > MAX_NOTEBOOK_BYTES {
            bail!(
                "{shown} is {} bytes; notebooks over {MAX_NOTEBOOK_BYTES} bytes are not handled",
                meta.len()
            );
        }
        let mut bytes = Vec::new();
        file.take(MAX_NOTEBOOK_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
        Self::parse(&bytes, shown)
    }

    /// Parses and checks the bytes of a notebook file; `shown` is the path as the model
    /// knows it.
    fn parse(bytes: &[u8], shown: &str) -> Result<Self> {
        let doc: Value = serde_json::from_slice(bytes).map_err(|e| {
            anyhow!("{shown} is not a valid notebook: it is not JSON ({e}); the file was left untouched")
        })?;
        if let Err(problem) = check(&doc) {
            bail!("{shown} is not a valid nbformat 4 notebook: {problem}; the file was left untouched");
        }
        Ok(Notebook { doc })
    }

    /// The cells, in order (none if the document has no `cells` list).
    pub fn cells(&self) -> &[Value] {
        self.doc["cells"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// The cells, to change; a document without a `cells` list gets an empty one first.
    pub fn cells_mut(&mut self) -> &mut Vec<Value> {
        if !self.doc["cells"].is_array() {
            self.doc["cells"] = json!([]);
        }
        // Just ensured it is an array.
        match self.doc["cells"].as_array_mut() {
            Some(cells) => cells,
            None => unreachable!("cells was just made an array"),
        }
    }

    /// `4.5` etc.
    pub fn version(&self) -> String {
        format!(
            "{}.{}",
            self.doc["nbformat"].as_u64().unwrap_or(4),
            self.doc["nbformat_minor"].as_u64().unwrap_or(0)
        )
    }

    /// The index of the cell with this id.
    pub fn find_id(&self, id: &str) -> Option<usize> {
        self.cells()
            .iter()
            .position(|c| c["id"].as_str() == Some(id))
    }

    fn ids(&self) -> HashSet<String> {
        self.cells()
            .iter()
            .filter_map(|c| c["id"].as_str().map(str::to_string))
            .collect()
    }

    /// A fresh id, unique in this notebook.
    pub fn new_id(&self) -> String {
        let taken = self.ids();
        loop {
            let id = random_id();
            if !taken.contains(&id) {
                return id;
            }
        }
    }

    /// Upgrades to nbformat 4.5 (every cell gets an id) so the written file validates.
    pub fn prepare_for_write(&mut self) {
        if self.doc["nbformat_minor"].as_u64().unwrap_or(0) < 5 {
            self.doc["nbformat_minor"] = json!(5);
        }
        let mut taken = self.ids();
        for cell in self.cells_mut() {
            if cell["id"].as_str().is_none() {
                let id = loop {
                    let id = random_id();
                    if taken.insert(id.clone()) {
                        break id;
                    }
                };
                cell["id"] = Value::String(id);
            }
        }
    }

    /// The notebook as the bytes to write: nbformat 4.5 with cell ids, in Jupyter's layout.
    /// Written atomically through the workspace (`Workspace::write_atomic`).
    pub fn to_bytes(&mut self) -> std::io::Result<Vec<u8>> {
        self.prepare_for_write();
        let mut text = to_jupyter_json(&self.doc)?;
        text.push('\n');
        Ok(text.into_bytes())
    }
}

/// A new cell of `cell_type` with `source`, in nbformat 4.5 shape.
pub fn new_cell(cell_type: &str, source: &str, id: String) -> Value {
    let mut cell = json!({
        "cell_type": cell_type,
        "id": id,
        "metadata": {},
        "source": source_lines(source),
    });
    if cell_type == "code" {
        cell["outputs"] = json!([]);
        cell["execution_count"] = Value::Null;
    }
    cell
}

/// Changes a cell's type, adding or removing the fields each type requires.
pub fn set_cell_type(cell: &mut Value, cell_type: &str) {
    cell["cell_type"] = json!(cell_type);
    if let Some(map) = cell.as_object_mut() {
        if cell_type == "code" {
            map.entry("outputs").or_insert_with(|| json!([]));
            map.entry("execution_count").or_insert(Value::Null);
            map.remove("attachments");
        } else {
            map.remove("outputs");
            map.remove("execution_count");
        }
    }
}

/// A cell's source as one string (nbformat allows a string or a list of lines).
pub fn source_text(cell: &Value) -> String {
    multiline(&cell["source"])
}

/// nbformat's multiline string (a string, or a list of strings to concatenate) as text.
pub fn multiline(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(Value::as_str).collect(),
        _ => String::new(),
    }
}

/// Text as Jupyter stores it: a list of lines, each but the last ending in "\n".
pub fn source_lines(text: &str) -> Value {
    Value::Array(
        text.split_inclusive('\n')
            .map(|l| Value::String(l.to_string()))
            .collect(),
    )
}

fn random_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS per process and varied per instance; mixing in a
    // counter and the time makes ids differ even within one process and one instant.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{:08x}", hasher.finish() as u32)
}

/// The nbformat 4 rules a notebook must satisfy before toolbox changes it.
fn check(doc: &Value) -> Result<(), String> {
    let top = doc
        .as_object()
        .ok_or("the top level is not a JSON object")?;
    for key in top.keys() {
        if !["cells", "metadata", "nbformat", "nbformat_minor"].contains(&key.as_str()) {
            return Err(format!("unexpected top-level key {key:?}"));
        }
    }
    match top.get("nbformat").and_then(Value::as_u64) {
        Some(4) => {}
        Some(n) => return Err(format!("it is nbformat {n}; only nbformat 4 is supported")),
        None => return Err("`nbformat` is missing or not a number".into()),
    }
    let minor = top
        .get("nbformat_minor")
        .and_then(Value::as_u64)
        .ok_or("`nbformat_minor` is missing or not a number")?;
    let metadata = top
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or("`metadata` is missing or not an object")?;
    if let Some(spec) = metadata.get("kernelspec") {
        let ok = spec["name"].is_string() && spec["display_name"].is_string();
        if !ok {
            return Err("metadata.kernelspec needs string `name` and `display_name`".into());
        }
    }
    if let Some(info) = metadata.get("language_info") {
        if !info["name"].is_string() {
            return Err("metadata.language_info needs a string `name`".into());
        }
    }
    let cells = top
        .get("cells")
        .and_then(Value::as_array)
        .ok_or("`cells` is missing or not an array")?;
    let mut ids = HashSet::new();
    for (i, cell) in cells.iter().enumerate() {
        check_cell(cell, minor).map_err(|p| format!("cell {i}: {p}"))?;
        if let Some(id) = cell["id"].as_str() {
            if !ids.insert(id) {
                return Err(format!("cell {i}: id {id:?} is used by an earlier cell"));
            }
        }
    }
    Ok(())
}

fn check_cell(cell: &Value, minor: u64) -> Result<(), String> {
    let map = cell.as_object().ok_or("not a JSON object")?;
    let cell_type = map
        .get("cell_type")
        .and_then(Value::as_str)
        .ok_or("`cell_type` is missing")?;
    if !CELL_TYPES.contains(&cell_type) {
        return Err(format!(
            "cell_type {cell_type:?} is not one of code, markdown, raw"
        ));
    }
    let allowed: &[&str] = match cell_type {
        "code" => &[
            "cell_type",
            "id",
            "metadata",
            "source",
            "outputs",
            "execution_count",
        ],
        _ => &["cell_type", "id", "metadata", "source", "attachments"],
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(format!("unexpected key {key:?} in a {cell_type} cell"));
        }
    }
    if !map.get("metadata").is_some_and(Value::is_object) {
        return Err("`metadata` is missing or not an object".into());
    }
    if !map.get("source").is_some_and(is_multiline) {
        return Err("`source` is missing or not a string or list of strings".into());
    }
    match map.get("id") {
        None if minor >= 5 => return Err("`id` is missing (required since nbformat 4.5)".into()),
        None => {}
        Some(id) => {
            let id = id.as_str().ok_or("`id` is not a string")?;
            let ok = (1..=64).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !ok {
                return Err(format!(
                    "id {id:?} is not 1-64 characters of letters, digits, - and _"
                ));
            }
        }
    }
    if cell_type == "code" {
        match map.get("execution_count") {
            Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some() => {}
            _ => return Err("`execution_count` is missing or not null or a whole number".into()),
        }
        let outputs = map
            .get("outputs")
            .and_then(Value::as_array)
            .ok_or("`outputs` is missing or not an array")?;
        for (j, output) in outputs.iter().enumerate() {
            check_output(output).map_err(|p| format!("output {j}: {p}"))?;
        }
    }
    Ok(())
}

fn check_output(output: &Value) -> Result<(), String> {
    let map = output.as_object().ok_or("not a JSON object")?;
    let kind = map
        .get("output_type")
        .and_then(Value::as_str)
        .ok_or("`output_type` is missing")?;
    let (required, allowed): (&[&str], &[&str]) = match kind {
        "stream" => (&["name", "text"], &["output_type", "name", "text"]),
        "display_data" => (
            &["data", "metadata"],
            &["output_type", "data", "metadata", "transient"],
        ),
        "execute_result" => (
            &["data", "metadata", "execution_count"],
            &["output_type", "data", "metadata", "execution_count"],
        ),
        "error" => (
            &["ename", "evalue", "traceback"],
            &["output_type", "ename", "evalue", "traceback"],
        ),
        other => return Err(format!("output_type {other:?} is not known")),
    };
    for key in required {
        if !map.contains_key(*key) {
            return Err(format!("a {kind} output needs `{key}`"));
        }
    }
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(format!("unexpected key {key:?} in a {kind} output"));
        }
    }
    if kind == "stream" && !is_multiline(&map["text"]) {
        return Err("a stream output's `text` must be a string or list of strings".into());
    }
    if matches!(kind, "display_data" | "execute_result") && !map["data"].is_object() {
        return Err(format!("a {kind} output's `data` must be an object"));
    }
    if kind == "error" && !map["traceback"].is_array() {
        return Err("an error output's `traceback` must be a list of strings".into());
    }
    Ok(())
}

fn is_multiline(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Array(items) => items.iter().all(Value::is_string),
        _ => false,
    }
}

/// Jupyter's own layout: `json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False)`.
fn to_jupyter_json(doc: &Value) -> std::io::Result<String> {
    let sorted = sort_keys(doc);
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b" ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(&sorted, &mut ser).map_err(std::io::Error::other)?;
    String::from_utf8(out).map_err(std::io::Error::other)
}

/// Sorted keys whatever serde_json's map type is (it preserves insertion order when some
/// crate in the build enables `preserve_order`).
fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), sort_keys(&map[k]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal(cells: Value, minor: u64) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": minor}),
        )
        .unwrap()
    }

    #[test]
    fn problems_are_located() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "it is not JSON"),
            (b"[]".to_vec(), "top level is not a JSON object"),
            (
                serde_json::to_vec(
                    &json!({"cells": [], "metadata": {}, "nbformat": 3, "nbformat_minor": 0}),
                )
                .unwrap(),
                "nbformat 3",
            ),
            (
                minimal(
                    json!([{"cell_type": "code", "source": "", "metadata": {}}]),
                    4,
                ),
                "cell 0: `execution_count`",
            ),
            (
                minimal(
                    json!([{"cell_type": "markdown", "source": 3, "metadata": {}}]),
                    4,
                ),
                "cell 0: `source`",
            ),
            (
                minimal(
                    json!([{"cell_type": "heading", "source": "", "metadata": {}}]),
                    4,
                ),
                "cell_type \"heading\"",
            ),
            (
                minimal(
                    json!([{"cell_type": "markdown", "source": "", "metadata": {}}]),
                    5,
                ),
                "`id` is missing",
            ),
            (
                minimal(
                    json!([{"id": "a", "cell_type": "markdown", "source": "", "metadata": {}},
                               {"id": "a", "cell_type": "markdown", "source": "", "metadata": {}}]),
                    5,
                ),
                "cell 1: id \"a\" is used by an earlier cell",
            ),
            (
                minimal(
                    json!([{"cell_type": "code", "source": "", "metadata": {}, "execution_count": null,
                                "outputs": [{"output_type": "stream", "name": "stdout"}]}]),
                    4,
                ),
                "cell 0: output 0: a stream output needs `text`",
            ),
        ];
        for (bytes, want) in cases {
            let e = Notebook::parse(&bytes, "nb.ipynb").unwrap_err().to_string();
            assert!(e.starts_with("nb.ipynb is not a valid"), "{e}");
            assert!(e.contains(want), "{want}: {e}");
            assert!(e.ends_with("the file was left untouched"), "{e}");
        }
    }

    #[test]
    fn writing_upgrades_to_4_5_with_ids_and_jupyter_layout() {
        let bytes = minimal(
            json!([{"cell_type": "markdown", "source": ["# T\n", "x"], "metadata": {}},
                   {"cell_type": "code", "source": "1", "metadata": {}, "execution_count": null, "outputs": []}]),
            4,
        );
        let mut nb = Notebook::parse(&bytes, "nb.ipynb").unwrap();
        let written = nb.to_bytes().unwrap();
        let text = String::from_utf8(written.clone()).unwrap();
        assert!(text.ends_with("}\n"));
        assert!(text.starts_with("{\n \"cells\": [\n  {\n"), "{text}");
        let again = Notebook::parse(&written, "nb.ipynb").unwrap();
        assert_eq!(again.version(), "4.5");
        let ids: Vec<&str> = again
            .cells()
            .iter()
            .map(|c| c["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|i| i.len() == 8));
        assert_eq!(source_text(&again.cells()[0]), "# T\nx");
    }

    #[test]
    fn cells_change_type_cleanly() {
        let mut cell = new_cell("code", "a\nb\n", "x1".into());
        assert_eq!(cell["source"], json!(["a\n", "b\n"]));
        set_cell_type(&mut cell, "markdown");
        assert!(cell.get("outputs").is_none() && cell.get("execution_count").is_none());
        set_cell_type(&mut cell, "code");
        assert_eq!(cell["outputs"], json!([]));
        assert!(check_cell(&cell, 5).is_ok());
    }
}
