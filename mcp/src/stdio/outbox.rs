//! JSON-RPC replies and notifications as lines for [`Output`]: whole lines, written by
//! whoever sends them, so replies from concurrent calls never interleave and a client that
//! stops reading blocks nothing.

use std::sync::Arc;

use serde_json::{json, Value};

use super::writer::{Output, Sent};
use crate::jsonrpc;
use crate::output::MAX_QUEUED_OUTPUT_BYTES;

/// Where replies and notifications go.
#[derive(Clone)]
pub(super) struct Outbox {
    pub(super) output: Arc<Output>,
}

impl Outbox {
    /// `result` is already serialised JSON.
    pub(super) fn result(&self, id: &Value, result: &str) {
        self.send(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        ));
    }

    /// A `tools/call` result with one text item and, for a tool with an output schema, its
    /// `structuredContent` (see [`tool_result_line`]).
    pub(super) fn tool_result(
        &self,
        id: &Value,
        text: &str,
        structured: Option<&Value>,
        is_error: bool,
    ) {
        self.output
            .send(tool_result_line(id, text, structured, is_error), None);
    }

    pub(super) fn error(&self, id: &Value, code: i64, message: &str) {
        self.send(jsonrpc::error_response(id, code, message).to_string());
    }

    /// Replies are never dropped while the client reads stdout: there is one per request.
    pub(super) fn send(&self, mut text: String) {
        text.push('\n');
        // Dropped only once stdout is closed: the client is gone and nobody is left to tell.
        self.output.send(text.into_bytes(), None);
    }

    /// Sends a notification unless that would put more than
    /// [`MAX_QUEUED_OUTPUT_BYTES`] of them in the queue. False when it was dropped.
    pub(super) fn notify(&self, method: &str, params: Value) -> bool {
        let mut text = json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string();
        text.push('\n');
        self.output
            .send(text.into_bytes(), Some(MAX_QUEUED_OUTPUT_BYTES))
            != Sent::Dropped
    }
}

/// The reply line to a `tools/call` with one text item, written straight into the line: the
/// same JSON as building the object and printing it, without the object, its copies and the
/// second pass (a cell's reply is mostly this text).
fn tool_result_line(id: &Value, text: &str, structured: Option<&Value>, is_error: bool) -> Vec<u8> {
    let mut line = Vec::with_capacity(text.len() + 96);
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    // Writing to a Vec cannot fail, and a Value always serialises.
    let _ = serde_json::to_writer(&mut line, id);
    line.extend_from_slice(br#","result":{"content":[{"type":"text","text":"#);
    let _ = serde_json::to_writer(&mut line, text);
    line.extend_from_slice(b"}]");
    if let Some(structured) = structured {
        line.extend_from_slice(br#","structuredContent":"#);
        let _ = serde_json::to_writer(&mut line, structured);
    }
    line.extend_from_slice(if is_error {
        b",\"isError\":true}}\n"
    } else {
        b",\"isError\":false}}\n"
    });
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_result_line_is_the_json_of_the_reply_object() {
        for id in [json!(7), json!("a\"b"), json!(u64::MAX), json!(-3)] {
            for text in [
                "",
                "(no output)\n",
                "tab\t\"quote\" \\ é ✓ \u{1}",
                "[stdout]\nx\n",
            ] {
                for (is_error, structured) in [
                    (false, None),
                    (true, None),
                    (false, Some(json!({"exit_code": 0, "stdout": "é\n"}))),
                ] {
                    let line = tool_result_line(&id, text, structured.as_ref(), is_error);
                    assert_eq!(line.last(), Some(&b'\n'));
                    assert!(!line[..line.len() - 1].contains(&b'\n'), "one line");
                    let got: Value = serde_json::from_slice(&line).unwrap();
                    let mut want = json!({
                        "jsonrpc": "2.0",
                        "id": id,
                        "result": {
                            "content": [{ "type": "text", "text": text }],
                            "isError": is_error,
                        },
                    });
                    if let Some(structured) = structured {
                        want["result"]["structuredContent"] = structured;
                    }
                    assert_eq!(got, want);
                }
            }
        }
    }
}
