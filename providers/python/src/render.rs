//! A run's result as the text a model reads.

use serde_json::{json, Value};

use crate::backend::{Display, RunResult};

/// Renders a result as sections, each only when it has something:
///
/// ```text
/// note: …
/// [stdout]
/// …
/// [stderr]
/// …
/// [display_data]
/// image/png output/figure-1.png
/// [result]
/// 2
/// [error] ZeroDivisionError: division by zero
/// Traceback (most recent call last):
///   File "<cell>", line 1, in <module>
/// ZeroDivisionError: division by zero
/// ```
///
/// A run with nothing to show says `(no output)`.
pub(crate) fn render(result: &RunResult) -> String {
    let mut out = String::new();
    for note in &result.notes {
        out.push_str("note: ");
        out.push_str(note);
        out.push('\n');
    }
    for (stream, text) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if !text.is_empty() {
            section(&mut out, stream, text);
        }
    }
    if !result.display_data.is_empty() {
        let lines: Vec<std::borrow::Cow<'_, str>> = result
            .display_data
            .iter()
            .map(|item| match item {
                // `.toolbox/sessions/s1/output/figure-1.png (output/figure-1.png)`.
                Display::File {
                    mime_type,
                    path,
                    real_path,
                } => format!("{mime_type} {}", real_path.as_deref().unwrap_or(path)).into(),
                Display::Text { text, .. } => text.as_str().into(),
                Display::Other { mime_type } => mime_type.as_str().into(),
            })
            .collect();
        section(&mut out, "display_data", &lines.join("\n"));
    }
    if let Some(value) = &result.value {
        section(&mut out, "result", &value.plain);
    }
    if let Some(error) = &result.error {
        out.push_str(&format!("[error] {}: {}\n", error.ename, error.evalue));
        if let Some(tb) = &error.traceback {
            out.push_str(tb.trim_end());
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
}

/// The result for programs, in the sidecar's shape (`stdout`, `stderr`, `display_data`,
/// `error`) plus the final expression's `result`, the `execution_count` and toolbox's `notes`.
/// Fields are always present (empty or `null`), so a program never guesses.
pub(crate) fn structured(result: &RunResult) -> Value {
    let display: Vec<Value> = result
        .display_data
        .iter()
        .map(|item| match item {
            Display::File {
                mime_type,
                path,
                real_path,
            } => json!({"mime_type": mime_type, "path": real_path.as_deref().unwrap_or(path)}),
            Display::Text {
                mime_type, text, ..
            } => json!({"mime_type": mime_type, "text": text}),
            Display::Other { mime_type } => json!({"mime_type": mime_type}),
        })
        .collect();
    json!({
        "stdout": result.stdout,
        "stderr": result.stderr,
        "display_data": display,
        "result": result.value.as_ref().map(|v| v.plain.as_str()),
        "error": result.error.as_ref().map(|e| json!({
            "ename": e.ename,
            "evalue": e.evalue,
            "traceback": e.traceback,
        })),
        "execution_count": result.execution_count,
        "notes": result.notes,
    })
}

/// The JSON Schema of [`structured`] (MCP `outputSchema`).
pub(crate) fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "display_data": {
                "type": "array",
                "description": "What display() showed and the figures saved, in order: a file has path, a text form has text.",
                "items": {
                    "type": "object",
                    "properties": {
                        "mime_type": {"type": "string"},
                        "path": {"type": "string"},
                        "text": {"type": "string"}
                    },
                    "required": ["mime_type"]
                }
            },
            "result": {"type": ["string", "null"], "description": "The final expression's value as text."},
            "error": {
                "type": ["object", "null"],
                "properties": {
                    "ename": {"type": "string"},
                    "evalue": {"type": "string"},
                    "traceback": {"type": ["string", "null"]}
                },
                "required": ["ename", "evalue"]
            },
            "execution_count": {"type": ["integer", "null"]},
            "notes": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["stdout", "stderr", "display_data", "result", "error", "execution_count", "notes"]
    })
}

/// `render` for a result in the `python` `CodeRunner`'s JSON shape.
pub fn render_result(result: &Value) -> String {
    render(&RunResult::from_driver(result.clone()))
}

fn section(out: &mut String, name: &str, text: &str) {
    out.push('[');
    out.push_str(name);
    out.push_str("]\n");
    out.push_str(text);
    if !text.ends_with('\n') {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_appear_only_when_present() {
        assert_eq!(
            render_result(&json!({"stdout": "", "error": null})),
            "(no output)\n"
        );
        let text = render_result(&json!({
            "notes": ["restarted"],
            "stdout": "hi\n",
            "stderr": "warn",
            "display_data": [{"mime_type": "image/png", "path": "output/figure-1.png"},
                             {"mime_type": "text/plain", "text": "shown"}],
            "result": {"text/plain": "2"},
            "error": {"ename": "ValueError", "evalue": "bad",
                      "traceback": "Traceback (most recent call last):\n  File \"<cell>\", line 1\nValueError: bad\n"}
        }));
        assert_eq!(
            text,
            "note: restarted\n[stdout]\nhi\n[stderr]\nwarn\n[display_data]\nimage/png output/figure-1.png\nshown\n[result]\n2\n[error] ValueError: bad\nTraceback (most recent call last):\n  File \"<cell>\", line 1\nValueError: bad\n"
        );
    }
}
