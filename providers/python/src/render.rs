//! A run's structured result as the text a model reads.

use serde_json::Value;

/// Renders a driver result as sections, each only when it has something:
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
pub fn render_result(result: &Value) -> String {
    let mut out = String::new();
    if let Some(notes) = result["notes"].as_array() {
        for note in notes.iter().filter_map(Value::as_str) {
            out.push_str("note: ");
            out.push_str(note);
            out.push('\n');
        }
    }
    for stream in ["stdout", "stderr"] {
        if let Some(text) = result[stream].as_str().filter(|t| !t.is_empty()) {
            section(&mut out, stream, text);
        }
    }
    if let Some(items) = result["display_data"].as_array().filter(|i| !i.is_empty()) {
        let lines: Vec<String> = items
            .iter()
            .map(|item| {
                let mime = item["mime_type"].as_str().unwrap_or("?");
                match (item["path"].as_str(), item["text"].as_str()) {
                    // `.toolbox/sessions/s1/output/figure-1.png (output/figure-1.png)`.
                    (Some(_), _) if item["real_path"].is_string() => {
                        format!("{mime} {}", item["real_path"].as_str().unwrap_or_default())
                    }
                    (Some(path), _) => format!("{mime} {path}"),
                    (None, Some(text)) => text.to_string(),
                    (None, None) => mime.to_string(),
                }
            })
            .collect();
        section(&mut out, "display_data", &lines.join("\n"));
    }
    if let Some(text) = result["result"]["text/plain"].as_str() {
        section(&mut out, "result", text);
    }
    if result["error"].is_object() {
        let error = &result["error"];
        let ename = error["ename"].as_str().unwrap_or("Error");
        let evalue = error["evalue"].as_str().unwrap_or("");
        out.push_str(&format!("[error] {ename}: {evalue}\n"));
        if let Some(tb) = error["traceback"].as_str() {
            out.push_str(tb.trim_end());
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
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
