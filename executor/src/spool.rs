//! Large results go to disk; the model gets a head, a tail and the file's name.

use std::io::Write;

use serde_json::Value;
use toolbox_core::json_len;
use toolbox_host::Workspace;

/// Results of this many bytes or more are spooled by default.
pub const SPOOL_THRESHOLD_BYTES: usize = 16_384;
/// Characters of the start of a spooled result the model still sees.
pub const HEAD_CHARS: usize = 2000;
/// Characters of the end of a spooled result the model still sees.
pub const TAIL_CHARS: usize = 500;

/// What [`offload_if_large`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolOutcome {
    /// Small enough: the model sees the whole result.
    Inline(String),
    /// Written to `path` (relative to the workspace); the model sees `preview`.
    Spooled {
        /// Head, tail and a line naming the file: what the model sees.
        preview: String,
        /// The spool file, relative to the workspace.
        path: String,
    },
}

/// Writes `content` byte-exact to `.toolbox/tool_outputs/<unix_ms>__<call_id>.txt` when it
/// is at least `threshold` bytes, and returns the preview the model should see instead;
/// `reader` is the tool the preview tells the model to read the file with, if any.
///
/// If the file cannot be written the full content is returned inline: losing output is worse
/// than a long message.
pub fn offload_if_large(
    workspace: &Workspace,
    call_id: &str,
    content: String,
    threshold: usize,
    reader: Option<&str>,
) -> SpoolOutcome {
    if content.len() < threshold {
        return SpoolOutcome::Inline(content);
    }
    match write_spool_file(workspace, call_id, content.as_bytes()) {
        Ok(rel) => SpoolOutcome::Spooled {
            preview: preview(&content, &rel, content.len() as u64, reader),
            path: rel,
        },
        Err(e) => {
            tracing::warn!(target: "toolbox", call_id, error = %e, "could not spool a large result; returning it inline");
            SpoolOutcome::Inline(content)
        }
    }
}

pub use toolbox_host::safe_file_part;

fn write_spool_file(workspace: &Workspace, call_id: &str, bytes: &[u8]) -> std::io::Result<String> {
    let (mut file, rel) = toolbox_host::create_spool_file(workspace, call_id)?;
    if let Err(e) = file.write_all(bytes).and_then(|_| file.flush()) {
        toolbox_host::remove_spool_file(workspace, &rel);
        return Err(e);
    }
    Ok(rel)
}

/// The first [`HEAD_CHARS`] and last [`TAIL_CHARS`] characters, and a line naming the file
/// and, when the registry has one, the tool to read it with.
///
/// The executor names no tool of its own: `reader` comes from the running registry (the
/// first tool whose `ToolInfo::file_reader` is set), so a bundle without file_manager does
/// not send the model to a tool that does not exist.
pub fn preview(content: &str, rel_path: &str, total_bytes: u64, reader: Option<&str>) -> String {
    let total_chars = content.chars().count();
    let footer = match reader {
        Some(tool) => format!(
            "[Full output ({total_bytes} bytes) spooled to {rel_path}. Use {tool} if you need more.]"
        ),
        None => format!("[Full output ({total_bytes} bytes) spooled to {rel_path}.]"),
    };
    if total_chars <= HEAD_CHARS + TAIL_CHARS {
        return format!("{content}\n\n{footer}");
    }
    let head_end = content
        .char_indices()
        .nth(HEAD_CHARS)
        .map(|(i, _)| i)
        .unwrap_or(content.len());
    let tail_start = content
        .char_indices()
        .rev()
        .nth(TAIL_CHARS - 1)
        .map(|(i, _)| i)
        .unwrap_or(head_end);
    let omitted = total_chars - HEAD_CHARS - TAIL_CHARS;
    format!(
        "{}\n\n[... {omitted} characters omitted ...]\n\n{}\n\n{footer}",
        &content[..head_end],
        &content[tail_start..],
    )
}

/// The most bytes a structured result (MCP `structuredContent`, the HTTP API's
/// `"structured"`, the events) may take as JSON: it mirrors the text, which a model reads as
/// a preview of about 2.7 KB once it passes [`SPOOL_THRESHOLD_BYTES`], and some clients give
/// the model the structured value instead of the text.
pub const STRUCTURED_MAX_BYTES: usize = 32 * 1024;

/// Holds a structured result to the limits of the text it mirrors:
///
/// - when the text was spooled (`spool_path`), every string longer than the text preview is
///   cut to the same head and tail, with a line naming how much was left out and where the
///   whole output is;
/// - whatever the text did, the value stays within [`STRUCTURED_MAX_BYTES`]: strings are cut
///   harder, then the largest arrays lose their last items, and last, only a note remains.
///
/// An object gets `omitted_bytes` (added to one the tool set), `spool_path` and, when items
/// went, `omitted_items`; these keys are never required by an output schema, so the value
/// still validates.
pub fn bound_structured(value: Value, spool_path: Option<&str>) -> Value {
    let mut value = value;
    let mut omitted_bytes: u64 = 0;
    let mut omitted_items: u64 = 0;
    let mut size = json_len(&value);
    if spool_path.is_none() && size <= STRUCTURED_MAX_BYTES {
        return value;
    }
    let marker = |n: u64| match spool_path {
        Some(path) => format!("\n\n[... {n} bytes omitted; the whole output is in {path} ...]\n\n"),
        None => format!("\n\n[... {n} bytes omitted ...]\n\n"),
    };
    cut_strings(
        &mut value,
        HEAD_CHARS,
        TAIL_CHARS,
        &mut omitted_bytes,
        &marker,
    );
    size = json_len(&value);
    if size > STRUCTURED_MAX_BYTES {
        cut_strings(&mut value, 200, 100, &mut omitted_bytes, &marker);
        size = json_len(&value);
    }
    for _ in 0..16 {
        if size <= STRUCTURED_MAX_BYTES
            || !shorten_largest_array(&mut value, size - STRUCTURED_MAX_BYTES, &mut omitted_items)
        {
            break;
        }
        size = json_len(&value);
    }
    let annotate = |map: &mut serde_json::Map<String, Value>, omitted_bytes: u64| {
        if omitted_bytes > 0 {
            let before = map
                .get("omitted_bytes")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            map.insert("omitted_bytes".into(), Value::from(before + omitted_bytes));
        }
        if let Some(path) = spool_path {
            map.insert("spool_path".into(), Value::from(path));
        }
        if omitted_items > 0 {
            map.insert("omitted_items".into(), Value::from(omitted_items));
        }
    };
    if let Value::Object(map) = &mut value {
        annotate(map, omitted_bytes);
    }
    if json_len(&value) > STRUCTURED_MAX_BYTES {
        // Too many keys to cut: only what was left out, and where the whole is.
        let mut map = serde_json::Map::new();
        map.insert(
            "note".into(),
            Value::from(format!(
                "the structured result was larger than {STRUCTURED_MAX_BYTES} bytes; the text \
                 result holds it (or the spool file)"
            )),
        );
        annotate(&mut map, omitted_bytes.max(size as u64));
        value = Value::Object(map);
    }
    value
}

/// Cuts every string longer than `head + tail` characters to its first `head` and last
/// `tail`, with `marker` between, adding the bytes left out to `omitted`.
fn cut_strings(
    value: &mut Value,
    head: usize,
    tail: usize,
    omitted: &mut u64,
    marker: &dyn Fn(u64) -> String,
) {
    match value {
        Value::String(s) => {
            // Cheap first: only a string with more bytes than characters allowed is looked at.
            if s.len() <= head + tail || s.chars().count() <= head + tail + 100 {
                return;
            }
            let head_end = s.char_indices().nth(head).map_or(s.len(), |(i, _)| i);
            let tail_start = s
                .char_indices()
                .rev()
                .nth(tail.saturating_sub(1))
                .map_or(head_end, |(i, _)| i);
            let left_out = (tail_start - head_end) as u64;
            *omitted += left_out;
            *s = format!("{}{}{}", &s[..head_end], marker(left_out), &s[tail_start..]);
        }
        Value::Array(items) => {
            for item in items {
                cut_strings(item, head, tail, omitted, marker);
            }
        }
        Value::Object(map) => {
            for (_, item) in map.iter_mut() {
                cut_strings(item, head, tail, omitted, marker);
            }
        }
        _ => {}
    }
}

/// One step down a JSON value: a key of an object, or an index of an array.
enum Step {
    Key(String),
    Index(usize),
}

/// Removes items from the end of the largest array in `value` (by its size as JSON) until
/// about `excess` bytes are gone, at least one item; false when no array has an item.
fn shorten_largest_array(value: &mut Value, excess: usize, omitted: &mut u64) -> bool {
    fn find(value: &Value, path: &mut Vec<Step>, best: &mut Option<(usize, Vec<Step>)>) {
        match value {
            Value::Array(items) => {
                let len = json_len(value);
                if !items.is_empty() && best.as_ref().is_none_or(|(b, _)| len > *b) {
                    let copy = path
                        .iter()
                        .map(|s| match s {
                            Step::Key(k) => Step::Key(k.clone()),
                            Step::Index(i) => Step::Index(*i),
                        })
                        .collect();
                    *best = Some((len, copy));
                }
                for (i, item) in items.iter().enumerate() {
                    path.push(Step::Index(i));
                    find(item, path, best);
                    path.pop();
                }
            }
            Value::Object(map) => {
                for (k, item) in map {
                    path.push(Step::Key(k.clone()));
                    find(item, path, best);
                    path.pop();
                }
            }
            _ => {}
        }
    }
    let mut best = None;
    find(value, &mut Vec::new(), &mut best);
    let Some((_, path)) = best else {
        return false;
    };
    let mut at = value;
    for step in &path {
        at = match (step, at) {
            (Step::Key(k), Value::Object(map)) => match map.get_mut(k) {
                Some(next) => next,
                None => return false,
            },
            (Step::Index(i), Value::Array(items)) => match items.get_mut(*i) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    let Value::Array(items) = at else {
        return false;
    };
    let mut gone = 0usize;
    while let Some(last) = items.pop() {
        gone += json_len(&last) + 1;
        *omitted += 1;
        if gone >= excess {
            break;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structured_result_is_held_to_the_texts_limits() {
        // Small and not spooled: untouched.
        let small = serde_json::json!({"stdout": "hi", "exit_code": 0});
        assert_eq!(bound_structured(small.clone(), None), small);
        // Spooled: long fields cut to the preview's head and tail, with the file named.
        let big = "a".repeat(3_000_000);
        let got = bound_structured(
            serde_json::json!({"stdout": big, "stderr": "", "omitted_bytes": 10}),
            Some(".toolbox/tool_outputs/1__c.txt"),
        );
        let out = got["stdout"].as_str().unwrap();
        assert!(out.starts_with(&"a".repeat(HEAD_CHARS)), "the head");
        assert!(out.ends_with(&"a".repeat(TAIL_CHARS)));
        assert!(
            out.contains("bytes omitted; the whole output is in .toolbox/tool_outputs/1__c.txt")
        );
        assert_eq!(
            got["omitted_bytes"],
            10 + 3_000_000 - (HEAD_CHARS + TAIL_CHARS) as u64
        );
        assert_eq!(got["spool_path"], ".toolbox/tool_outputs/1__c.txt");
        assert!(json_len(&got) <= STRUCTURED_MAX_BYTES);
        // Many fields, many items: within the cap whatever the shape, items counted.
        let many: Vec<Value> = (0..50_000)
            .map(|i| serde_json::json!({"text": format!("item {i} {}", "x".repeat(100))}))
            .collect();
        let got = bound_structured(
            serde_json::json!({"display_data": many, "stdout": ""}),
            None,
        );
        assert!(json_len(&got) <= STRUCTURED_MAX_BYTES, "{}", json_len(&got));
        assert!(got["omitted_items"].as_u64().unwrap() > 40_000);
        assert!(got["display_data"].as_array().unwrap().len() > 10);
        // A multibyte string is cut on character boundaries.
        let got = bound_structured(serde_json::json!({"s": "é".repeat(100_000)}), Some("f"));
        assert!(got["s"].as_str().unwrap().starts_with("éé"));
        // An object of too many small keys ends as the note alone.
        let keys: serde_json::Map<String, Value> = (0..20_000)
            .map(|i| (format!("k{i}"), Value::from(i)))
            .collect();
        let got = bound_structured(Value::Object(keys), Some("f"));
        assert!(got["note"].as_str().unwrap().contains("larger than"));
        assert_eq!(got["spool_path"], "f");
    }

    #[test]
    fn small_results_stay_inline() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let out = offload_if_large(&ws, "c1", "hello".into(), 16, None);
        assert_eq!(out, SpoolOutcome::Inline("hello".into()));
        assert!(!dir.path().join(".toolbox").exists());
    }

    #[test]
    fn large_results_are_spooled_byte_exact_with_char_safe_preview() {
        let dir = tempfile::tempdir().unwrap();
        // Multi-byte characters everywhere, so a byte cut would panic or corrupt.
        let content: String = (0..10_000)
            .map(|i| if i % 2 == 0 { 'é' } else { '语' })
            .collect();
        let ws = Workspace::new(dir.path()).unwrap();
        let out = offload_if_large(&ws, "call/../x:1", content.clone(), 16_384, Some("reader"));
        let SpoolOutcome::Spooled { preview, path } = out else {
            panic!("not spooled")
        };
        assert!(path.starts_with(".toolbox/tool_outputs/"));
        assert!(path.ends_with("__call____x_1.txt"), "{path}");
        let on_disk = std::fs::read(dir.path().join(&path)).unwrap();
        assert_eq!(on_disk, content.as_bytes());
        let head: String = content.chars().take(HEAD_CHARS).collect();
        let tail: String = content.chars().skip(10_000 - TAIL_CHARS).collect();
        assert!(preview.starts_with(&head));
        assert!(preview.contains(&format!("{tail}\n\n[Full output")));
        assert!(preview.contains("[... 7500 characters omitted ...]"));
        assert!(
            preview.ends_with("Use reader if you need more.]"),
            "{preview}"
        );
    }

    #[test]
    fn without_a_reader_no_tool_is_named() {
        let p = preview("short", ".toolbox/tool_outputs/1__c.txt", 5, None);
        assert_eq!(
            p,
            "short\n\n[Full output (5 bytes) spooled to .toolbox/tool_outputs/1__c.txt.]"
        );
    }

    #[test]
    fn same_id_same_millisecond_does_not_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let a = write_spool_file(&ws, "x", b"a").unwrap();
        let b = write_spool_file(&ws, "x", b"b").unwrap();
        assert_ne!(a, b);
    }
}
