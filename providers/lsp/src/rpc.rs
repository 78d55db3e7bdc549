//! JSON-RPC over a language server's stdio: `Content-Length` framed messages.
//!
//! A message is a header block (`Name: value` lines ending in `\r\n`, then an empty line)
//! followed by exactly `Content-Length` bytes of JSON. `Content-Type` is accepted and
//! ignored; any other header too. A message larger than [`MAX_MESSAGE_BYTES`] or a header
//! block longer than [`MAX_HEADER_BYTES`] is an error: the stream cannot be resynchronised,
//! so the server is treated as broken.

use std::io::{self, BufRead};

use serde_json::Value;

/// The largest message body accepted from a server.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// The longest header block accepted.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// One message, framed for the wire.
pub fn encode(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Reads the next message; `Ok(None)` at a clean end of stream (between messages).
pub fn read_message<R: BufRead>(reader: &mut R) -> io::Result<Option<Value>> {
    let mut length: Option<usize> = None;
    let mut header_bytes = 0usize;
    let mut first = true;
    loop {
        let mut line = Vec::new();
        let limit = (MAX_HEADER_BYTES + 1 - header_bytes) as u64;
        let n =
            <&mut R as std::io::Read>::take(&mut *reader, limit).read_until(b'\n', &mut line)?;
        if n == 0 {
            if first {
                return Ok(None);
            }
            return Err(broken("the stream ended inside a message header"));
        }
        first = false;
        header_bytes += n;
        if !line.ends_with(b"\n") {
            return Err(broken(&format!(
                "a message header is longer than {MAX_HEADER_BYTES} bytes"
            )));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        let Some((name, value)) = text.split_once(':') else {
            return Err(broken(&format!("a header line without ':': {text:?}")));
        };
        if name.trim().eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .trim()
                .parse()
                .map_err(|_| broken(&format!("Content-Length is not a number: {value:?}")))?;
            if n > MAX_MESSAGE_BYTES {
                return Err(broken(&format!(
                    "a message of {n} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
                )));
            }
            length = Some(n);
        }
    }
    let Some(length) = length else {
        return Err(broken("a message header has no Content-Length"));
    };
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            broken("the stream ended inside a message body")
        } else {
            e
        }
    })?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| broken(&format!("a message body is not JSON: {e}")))
}

fn broken(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::BufReader;

    fn read_all(bytes: &[u8]) -> Vec<io::Result<Option<Value>>> {
        let mut r = BufReader::with_capacity(3, bytes);
        let mut out = Vec::new();
        loop {
            let m = read_message(&mut r);
            let stop = !matches!(m, Ok(Some(_)));
            out.push(m);
            if stop {
                return out;
            }
        }
    }

    #[test]
    fn round_trips_messages_back_to_back() {
        let a = json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"s": "é\r\n"}});
        let b = json!({"jsonrpc": "2.0", "method": "y"});
        let mut bytes = encode(&a);
        bytes.extend(encode(&b));
        let got = read_all(&bytes);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap().as_ref().unwrap(), &a);
        assert_eq!(got[1].as_ref().unwrap().as_ref().unwrap(), &b);
        assert!(got[2].as_ref().unwrap().is_none());
    }

    #[test]
    fn length_counts_bytes_and_other_headers_are_ignored() {
        let body = r#"{"a":"ü"}"#;
        let bytes = format!(
            "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let got = read_all(bytes.as_bytes());
        assert_eq!(
            got[0].as_ref().unwrap().as_ref().unwrap(),
            &json!({"a": "ü"})
        );
    }

    #[test]
    fn broken_streams_are_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"Content-Type: x\r\n\r\n{}", "no Content-Length"),
            (b"Content-Length: ten\r\n\r\n", "not a number"),
            (b"Content-Length: 10\r\n\r\n{}", "inside a message body"),
            (b"Content-Length: 2\r\n", "inside a message header"),
            (b"Content-Length: 2\r\n\r\n{]", "not JSON"),
            (b"garbage\r\n\r\n", "without ':'"),
            (b"Content-Length: 999999999999\r\n\r\n", "over the"),
        ];
        for (bytes, want) in cases {
            let got = read_all(bytes);
            let err = got.last().unwrap().as_ref().unwrap_err().to_string();
            assert!(
                err.contains(want),
                "{:?}: {err}",
                String::from_utf8_lossy(bytes)
            );
        }
        let long = vec![b'x'; MAX_HEADER_BYTES + 10];
        let err = read_all(&long).pop().unwrap().unwrap_err().to_string();
        assert!(err.contains("longer than"), "{err}");
    }
}
