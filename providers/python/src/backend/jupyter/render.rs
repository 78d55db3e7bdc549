//! What a kernel sent for one request, as the [`RunResult`] every backend returns: streams,
//! the value, display data (PNG images saved as `output/figure-<n>.png` through the
//! workspace) and the error with its traceback in plain text.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use serde_json::{Map, Value};
use toolbox_host::ToolContext;

use super::execute::Collected;
use super::wire;
use crate::backend::{Display, RunError, RunResult, Shown};

/// The collected messages as a run's result (figures saved under `output/`).
pub(super) fn to_result(c: Collected, ctx: &ToolContext) -> RunResult {
    let mut notes = Vec::new();
    let mut display_data = Vec::new();
    for data in &c.displays {
        display_data.push(display_item(data, ctx, &mut notes));
    }
    let value = c.result.as_ref().map(|data| {
        let plain = data
            .get("text/plain")
            .and_then(text_of)
            .or_else(|| data.keys().next().map(|k| format!("<{k}>")))
            .unwrap_or_default();
        Shown {
            plain,
            html: data.get("text/html").and_then(text_of),
        }
    });
    let error = c.error.as_ref().map(|e| {
        let lines: Vec<String> = e["traceback"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        RunError {
            ename: e["ename"].as_str().unwrap_or("Error").to_string(),
            evalue: wire::strip_ansi(e["evalue"].as_str().unwrap_or("")),
            traceback: Some(wire::strip_ansi(&lines.join("\n"))),
        }
    });
    RunResult {
        execution_count: c.execution_count,
        stdout: c.stdout.finish(),
        stderr: c.stderr.finish(),
        value,
        display_data,
        error,
        interrupted: false,
        stopped: None,
        notes,
    }
}

/// Jupyter allows a text value as a string or a list of strings.
fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(Value::as_str).collect()),
        _ => None,
    }
}

fn display_item(data: &Map<String, Value>, ctx: &ToolContext, notes: &mut Vec<String>) -> Display {
    if let Some(png) = data.get("image/png").and_then(text_of) {
        let saved = base64::engine::general_purpose::STANDARD
            .decode(png.trim().replace('\n', ""))
            .map_err(|e| anyhow!("the kernel sent PNG data that is not base64: {e}"))
            .and_then(|bytes| save_figure(ctx, &bytes));
        match saved {
            Ok(path) => {
                return Display::File {
                    mime_type: "image/png".into(),
                    path: path.to_string_lossy().into_owned(),
                    real_path: None,
                }
            }
            Err(e) => notes.push(format!("a figure could not be saved: {e:#}")),
        }
    }
    if let Some(text) = data.get("text/plain").and_then(text_of) {
        return Display::Text {
            mime_type: "text/plain".into(),
            text,
            html: data.get("text/html").and_then(text_of),
        };
    }
    Display::Other {
        mime_type: data.keys().next().cloned().unwrap_or_default(),
    }
}

/// Writes a PNG as the next free `output/figure-<n>.png` (created exclusively, never through
/// a link), the name the other backends give figures; returns its absolute path.
fn save_figure(ctx: &ToolContext, png: &[u8]) -> Result<PathBuf> {
    use std::io::Write;
    let folder = ctx
        .workspace
        .output_dir()
        .context("cannot create the session output folder")?;
    let located = ctx.workspace.locate("output").map_err(|e| anyhow!("{e}"))?;
    let dir = ctx
        .workspace
        .open_dir(&located)
        .map_err(|e| anyhow!("{e}"))?;
    let highest = dir
        .entries()?
        .iter()
        .filter_map(|e| figure_number(&e.name.to_string_lossy()))
        .max()
        .unwrap_or(0);
    for n in highest + 1..highest + 1000 {
        let name = format!("figure-{n}.png");
        match dir.create_new(std::ffi::OsStr::new(&name)) {
            Ok(mut file) => {
                file.write_all(png)?;
                return Ok(folder.join(name));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("no free figure-<n>.png name in output/")
}

fn figure_number(name: &str) -> Option<u64> {
    name.strip_prefix("figure-")?
        .strip_suffix(".png")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_names() {
        assert_eq!(figure_number("figure-12.png"), Some(12));
        assert_eq!(figure_number("figure-x.png"), None);
        assert_eq!(figure_number("figure-1.jpg"), None);
    }
}
