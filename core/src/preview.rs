//! What a call will do, shown to the person asked to approve it.
//!
//! A person approves an *effect*: a diff for an edit, the real path and the content for a
//! write, the command and its working folder for a shell command, numbered code for Python.
//! Each provider describes its own tools' previews beside their `info()`
//! (`toolbox_host::ToolProvider::preview`); any other tool gets
//! [`Preview::arguments`], its arguments as indented `key: value` lines. Never escaped JSON.
//!
//! This module is also the one renderer: [`Preview::to_text`] is what the terminal prints
//! (coloured only when asked) and what an MCP client's elicitation message says; the web
//! console gets the same [`Preview`] as JSON (a summary line and blocks of finished text)
//! and only lays the blocks out. Every string goes through [`terminal_safe`] before it is
//! rendered, so a preview cannot carry a control sequence to a terminal.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many lines of content or code a block shows before it says how many more there are.
pub const MAX_LINES: usize = 40;
/// The most characters one preview line keeps; longer lines are cut, saying so.
pub const MAX_LINE_CHARS: usize = 400;
/// The most lines of a diff a preview shows.
pub const MAX_DIFF_LINES: usize = 200;
/// Diffing two large, very different texts can take long: past this the diff is coarser.
const DIFF_DEADLINE: Duration = Duration::from_millis(200);

/// What one call will do: a one-line summary and blocks of text under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    /// One line: what happens where, e.g. `Write 40 bytes to notes.md (creates it)`.
    pub summary: String,
    /// What to look at before answering, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<PreviewBlock>,
}

/// One block of a [`Preview`]: finished text, and what kind of text it is (so a front end can
/// colour a diff's lines).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviewBlock {
    /// What the text is.
    pub kind: BlockKind,
    /// The text, already laid out (line numbers, indentation, diff markers), without a final
    /// newline.
    pub text: String,
}

/// The kinds of [`PreviewBlock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockKind {
    /// `key: value` lines.
    Fields,
    /// Source code with line numbers.
    Code,
    /// A unified diff: lines start with `+`, `-`, ` ` or `@@`.
    Diff,
    /// Any other text (file content, a command).
    Text,
}

impl Preview {
    /// A preview with only a summary line.
    pub fn new(summary: impl Into<String>) -> Self {
        Preview {
            summary: one_line(&summary.into()),
            blocks: Vec::new(),
        }
    }

    /// The preview of a tool that describes none: its name and its arguments as `key: value`
    /// lines.
    pub fn arguments(tool: &str, arguments: &Value) -> Self {
        let mut preview = Preview::new(format!("Run {tool}"));
        match arguments {
            Value::Object(map) if map.is_empty() => {}
            Value::Null => {}
            other => preview = preview.fields_of(other),
        }
        preview
    }

    /// Adds `key: value` lines for each `(key, value)`; a multi-line value is indented under
    /// its key.
    pub fn fields<K: AsRef<str>, V: AsRef<str>>(mut self, fields: &[(K, V)]) -> Self {
        let mut out = String::new();
        for (key, value) in fields {
            push_field(&mut out, 0, key.as_ref(), value.as_ref());
        }
        self.push(BlockKind::Fields, out);
        self
    }

    /// Adds a JSON value as indented `key: value` lines (objects by key, arrays by `-`).
    pub fn fields_of(mut self, value: &Value) -> Self {
        let mut out = String::new();
        push_value(&mut out, 0, value);
        self.push(BlockKind::Fields, out);
        self
    }

    /// Adds text shown as it is, at most [`MAX_LINES`] lines, then how many more there are.
    pub fn text(mut self, text: &str) -> Self {
        let mut out = String::new();
        let total = text.lines().count();
        for line in text.lines().take(MAX_LINES) {
            out.push_str(&cut_line(line));
            out.push('\n');
        }
        if total > MAX_LINES {
            let _ = writeln!(out, "… {} more lines", total - MAX_LINES);
        }
        self.push(BlockKind::Text, out);
        self
    }

    /// Adds source code with line numbers from 1, at most [`MAX_LINES`] lines, then how many
    /// more there are.
    pub fn code(mut self, source: &str) -> Self {
        let total = source.lines().count();
        let width = total.clamp(1, MAX_LINES).to_string().len();
        let mut out = String::new();
        for (i, line) in source.lines().take(MAX_LINES).enumerate() {
            let _ = writeln!(out, "{:>width$} │ {}", i + 1, cut_line(line));
        }
        if total > MAX_LINES {
            let _ = writeln!(out, "… {} more lines", total - MAX_LINES);
        }
        self.push(BlockKind::Code, out);
        self
    }

    /// Adds the unified diff from `old` to `new` (three lines of context), headed with
    /// `path`; at most [`MAX_DIFF_LINES`] lines, then how many more there are.
    pub fn diff(mut self, path: &str, old: &str, new: &str) -> Self {
        self.push(BlockKind::Diff, unified_diff(path, old, new));
        self
    }

    fn push(&mut self, kind: BlockKind, text: String) {
        let text = terminal_safe(text.trim_end_matches('\n'));
        if !text.is_empty() {
            self.blocks.push(PreviewBlock { kind, text });
        }
    }

    /// The preview as a person reads it: the summary, then each block, each line of a block
    /// indented by two spaces. With `ansi`, diff lines are coloured (added green, removed
    /// red, hunk headers cyan) and line numbers dimmed; without, plain text.
    pub fn to_text(&self, ansi: bool) -> String {
        let mut out = terminal_safe(&self.summary);
        for block in &self.blocks {
            out.push('\n');
            for line in block.text.lines() {
                let line = terminal_safe(line);
                let line = line.as_str();
                out.push_str("  ");
                match (ansi, block.kind) {
                    (true, BlockKind::Diff) => {
                        let colour = match line.as_bytes().first() {
                            _ if line.starts_with("+++") || line.starts_with("---") => "1",
                            Some(b'+') => "32",
                            Some(b'-') => "31",
                            Some(b'@') => "36",
                            _ => "",
                        };
                        if colour.is_empty() {
                            out.push_str(line);
                        } else {
                            let _ = write!(out, "\x1b[{colour}m{line}\x1b[0m");
                        }
                    }
                    (true, BlockKind::Code) => match line.split_once(" │ ") {
                        Some((number, code)) => {
                            let _ = write!(out, "\x1b[2m{number} │\x1b[0m {code}");
                        }
                        None => out.push_str(line),
                    },
                    _ => out.push_str(line),
                }
                out.push('\n');
            }
        }
        if out.ends_with('\n') {
            out.pop();
        }
        out
    }
}

/// `text` made safe to print on a terminal: every control character but newline and tab
/// (C0, DEL, C1, which includes ESC and CSI) and every bidirectional override or isolate is
/// replaced by a visible escape such as `\x1b` or `\u{202e}`, so text from a model, a tool or
/// a file can neither move the cursor, clear the screen, hide what follows nor reorder it.
pub fn terminal_safe(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if needs_escape(c) {
            if (c as u32) < 0x100 {
                let _ = write!(out, "\\x{:02x}", c as u32);
            } else {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional embeddings, overrides and isolates, and the marks that steer them.
        '\u{200e}' | '\u{200f}' | '\u{061c}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// A line with newlines and carriage returns shown as spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect()
}

/// At most [`MAX_LINE_CHARS`] characters of a line, saying how many were cut.
fn cut_line(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(MAX_LINE_CHARS) {
        None => line.to_string(),
        Some((at, _)) => {
            let rest = line[at..].chars().count();
            format!("{} … ({rest} more characters)", &line[..at])
        }
    }
}

fn push_field(out: &mut String, depth: usize, key: &str, value: &str) {
    let pad = "  ".repeat(depth);
    let key = one_line(key);
    if !value.contains('\n') {
        let _ = writeln!(out, "{pad}{key}: {}", cut_line(value));
        return;
    }
    let _ = writeln!(out, "{pad}{key}:");
    let total = value.lines().count();
    for line in value.lines().take(MAX_LINES) {
        let _ = writeln!(out, "{pad}  {}", cut_line(line));
    }
    if total > MAX_LINES {
        let _ = writeln!(out, "{pad}  … {} more lines", total - MAX_LINES);
    }
}

/// The most lines [`Preview::fields_of`] writes for one value.
const MAX_FIELD_LINES: usize = 200;

fn push_value(out: &mut String, depth: usize, value: &Value) {
    if out.lines().count() >= MAX_FIELD_LINES {
        return;
    }
    let pad = "  ".repeat(depth);
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                if out.lines().count() >= MAX_FIELD_LINES {
                    let _ = writeln!(out, "{pad}… (more fields)");
                    return;
                }
                match value {
                    Value::Object(inner) if !inner.is_empty() => {
                        let _ = writeln!(out, "{pad}{}:", one_line(key));
                        push_value(out, depth + 1, value);
                    }
                    Value::Array(items) if items.iter().any(|v| !is_scalar(v)) => {
                        let _ = writeln!(out, "{pad}{}:", one_line(key));
                        push_value(out, depth + 1, value);
                    }
                    other => push_field(out, depth, key, &scalar_text(other)),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                if is_scalar(item) {
                    let _ = writeln!(out, "{pad}- {}", cut_line(&one_line(&scalar_text(item))));
                } else {
                    let _ = writeln!(out, "{pad}-");
                    push_value(out, depth + 1, item);
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", cut_line(&one_line(&scalar_text(other))));
        }
    }
}

fn is_scalar(value: &Value) -> bool {
    !matches!(value, Value::Object(_) | Value::Array(_))
}

/// A value as a person reads it: a string as its text, `null` as `(none)`, an array of
/// scalars as a comma-separated list, an empty object or array as `{}` / `[]`.
fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(items) if items.is_empty() => "[]".into(),
        Value::Array(items) => items.iter().map(scalar_text).collect::<Vec<_>>().join(", "),
        Value::Object(_) => "{}".into(),
    }
}

/// The unified diff from `old` to `new` headed `--- path` / `+++ path`, at most
/// [`MAX_DIFF_LINES`] lines.
fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Patience)
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new);
    let path = one_line(path);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&path, &path)
        .to_string();
    let total = text.lines().count();
    let mut out = String::new();
    for line in text.lines().take(MAX_DIFF_LINES) {
        out.push_str(&cut_line(line));
        out.push('\n');
    }
    if total > MAX_DIFF_LINES {
        let _ = writeln!(out, "… {} more diff lines", total - MAX_DIFF_LINES);
    }
    if out.is_empty() {
        out.push_str("(no change)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arguments_are_key_value_lines_never_json() {
        let preview = Preview::arguments(
            "memory__save",
            &json!({"text": "line one\nline \"two\"", "tags": ["a", "b"], "n": 3, "x": null,
                    "nested": {"k": "v"}}),
        );
        let text = preview.to_text(false);
        assert_eq!(
            text,
            "Run memory__save\n  n: 3\n  nested:\n    k: v\n  tags: a, b\n  text:\n    line one\n    \
             line \"two\"\n  x: (none)",
            "{text}"
        );
        assert!(!text.contains("\\n") && !text.contains('{'));
    }

    #[test]
    fn code_is_numbered_and_long_content_says_how_much_more() {
        let source: String = (1..=45).map(|i| format!("x{i} = {i}\n")).collect();
        let text = Preview::new("Run Python").code(&source).to_text(false);
        assert!(text.contains("\n   1 │ x1 = 1\n"), "{text:?}");
        assert!(text.contains("40 │ x40 = 40"), "{text}");
        assert!(!text.contains("x41 = 41"), "{text}");
        assert!(text.ends_with("… 5 more lines"), "{text}");
        let text = Preview::new("w").text("a\nb\n").to_text(false);
        assert_eq!(text, "w\n  a\n  b");
    }

    #[test]
    fn a_diff_is_unified_and_coloured_only_when_asked() {
        let preview = Preview::new("Edit a.py").diff(
            "a.py",
            "x = 1\ny = 2\nz = 3\n",
            "x = 1\ny = 20\nz = 3\n",
        );
        let plain = preview.to_text(false);
        assert!(plain.contains("--- a.py"), "{plain}");
        assert!(plain.contains("\n  -y = 2\n  +y = 20\n"), "{plain}");
        assert!(plain.contains("@@ -1,3 +1,3 @@"), "{plain}");
        assert!(!plain.contains('\x1b'));
        let coloured = preview.to_text(true);
        assert!(coloured.contains("\x1b[32m+y = 20\x1b[0m"), "{coloured}");
        assert!(coloured.contains("\x1b[31m-y = 2\x1b[0m"), "{coloured}");
    }

    #[test]
    fn control_sequences_and_bidi_overrides_are_shown_escaped() {
        assert_eq!(terminal_safe("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            terminal_safe("a\x1b[2Jb\x07c\u{9b}d\r"),
            "a\\x1b[2Jb\\x07c\\x9bd\\x0d"
        );
        assert_eq!(terminal_safe("x\u{202e}y\u{2066}"), "x\\u{202e}y\\u{2066}");
        let preview = Preview::new("Run \x1b[8mhidden").text("\x1b[H\x1b[2Jfake");
        let text = preview.to_text(true);
        assert!(
            !text.contains("\x1b[8m") && !text.contains("\x1b[H"),
            "{text:?}"
        );
        assert!(text.contains("\\x1b[2Jfake"), "{text:?}");
    }

    #[test]
    fn previews_travel_as_json() {
        let preview = Preview::new("s").code("print(1)\n");
        let value = serde_json::to_value(&preview).unwrap();
        assert_eq!(
            value,
            json!({"summary": "s", "blocks": [{"kind": "code", "text": "1 │ print(1)"}]})
        );
        let back: Preview = serde_json::from_value(value).unwrap();
        assert_eq!(back, preview);
    }
}
