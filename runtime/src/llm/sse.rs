//! An incremental Server-Sent Events parser.
//!
//! Feed it the bytes of a `text/event-stream` body as they arrive, in chunks of any size;
//! it returns each complete event. It follows the WHATWG rules for what matters here:
//!
//! - lines end in `\n`, `\r\n` or `\r`, also when the `\r` and `\n` arrive in two chunks;
//! - `data:` lines of one event are joined with `\n`; a blank line ends the event;
//! - lines starting with `:` are comments; one space after `field:` is dropped;
//! - `event:` names the event, `id:` sets the last event id (kept for later events);
//! - an event with no `data` line is not dispatched;
//! - a leading byte-order mark is ignored; invalid UTF-8 becomes U+FFFD.
//!
//! Unlike a browser, [`SseParser::finish`] also returns an event that the server ended the
//! stream with but did not close with a blank line. One event may not grow past a cap
//! ([`DEFAULT_MAX_EVENT_BYTES`] unless set), so a server that never ends a line cannot make
//! the parser buffer without bound.

use std::collections::VecDeque;
use std::time::Duration;

use super::{LlmError, LlmErrorKind};

/// The default cap on one event's size (its lines' bytes): 8 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// UTF-8's byte-order mark.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field; `None` when the event did not name itself (a "message").
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The last `id:` seen so far in the stream, if any.
    pub id: Option<String>,
}

/// The stream broke the parser's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// One event (or one line) grew past the cap.
    #[error("a stream event is larger than {limit} bytes")]
    EventTooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
}

/// An incremental `text/event-stream` parser; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct SseParser {
    /// The bytes of the line being read (no line ending yet).
    line: Vec<u8>,
    /// The last byte fed was a `\r`: a `\n` right after it belongs to the same line ending.
    after_cr: bool,
    /// Whether the start of the stream (and a possible BOM) has been looked at.
    started: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    last_id: Option<String>,
    /// Bytes of the lines of the event being built.
    event_bytes: usize,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the [`DEFAULT_MAX_EVENT_BYTES`] cap.
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that refuses an event larger than `max` bytes.
    pub fn with_max_event_bytes(max: usize) -> Self {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            started: false,
            event: None,
            data: String::new(),
            has_data: false,
            last_id: None,
            event_bytes: 0,
            max_event_bytes: max,
        }
    }

    /// Feeds the next bytes of the stream; returns the events they completed, in order.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        if !self.started {
            // A BOM counts only at the very start: hold back the first three bytes.
            let take = (BOM.len() - self.line.len()).min(chunk.len());
            self.line.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
            if self.line.len() < BOM.len() && BOM.starts_with(&self.line) {
                return Ok(events);
            }
            self.begin(&mut events)?;
        }
        self.scan(chunk, &mut events)?;
        Ok(events)
    }

    /// Ends the stream: returns the event still being built, if it has data (a server that
    /// closed without the final blank line).
    pub fn finish(&mut self) -> Result<Option<SseEvent>, SseError> {
        let mut events = Vec::new();
        if !self.started {
            self.begin(&mut events)?;
        }
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line);
        }
        self.after_cr = false;
        // Three held-back bytes cannot hold a whole event (`data\n\n` is six), so `events`
        // is empty here.
        Ok(events.into_iter().chain(self.dispatch()).last())
    }

    /// Drops a leading BOM from the held-back bytes and scans the rest.
    fn begin(&mut self, events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.started = true;
        let head = std::mem::take(&mut self.line);
        self.scan(head.strip_prefix(&BOM[..]).unwrap_or(&head), events)
    }

    fn scan(&mut self, bytes: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = bytes;
        if self.after_cr {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(pos) = rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
            self.grow(pos)?;
            self.line.extend_from_slice(&rest[..pos]);
            let line = std::mem::take(&mut self.line);
            if line.is_empty() {
                if let Some(event) = self.dispatch() {
                    events.push(event);
                }
            } else {
                self.process_line(&line);
            }
            let ending = rest[pos];
            rest = &rest[pos + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.grow(rest.len())?;
        self.line.extend_from_slice(rest);
        Ok(())
    }

    /// Counts `n` more bytes towards the event being built.
    fn grow(&mut self, n: usize) -> Result<(), SseError> {
        self.event_bytes = self.event_bytes.saturating_add(n);
        if self.event_bytes > self.max_event_bytes {
            return Err(SseError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        Ok(())
    }

    fn process_line(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match line.iter().position(|b| *b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.event = Some(value.into_owned()),
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            _ => {} // `retry` and unknown fields
        }
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        self.event_bytes = 0;
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            self.data.clear();
            return None;
        }
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id: self.last_id.clone(),
        })
    }
}

/// The events of a streamed HTTP response, read with an idle timeout and a cap on the bytes
/// of the whole body.
pub(crate) struct EventStream {
    response: reqwest::Response,
    parser: SseParser,
    queue: VecDeque<SseEvent>,
    ended: bool,
    idle: Duration,
    /// Body bytes read so far.
    read: usize,
    /// The most body bytes read (`[llm] max_response_bytes`).
    max_bytes: usize,
}

impl EventStream {
    /// Reads `response`'s body as events, waiting at most `idle` for each chunk, and failing
    /// as soon as more than `max_bytes` have arrived.
    pub(crate) fn new(response: reqwest::Response, idle: Duration, max_bytes: usize) -> Self {
        EventStream {
            response,
            parser: SseParser::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES.min(max_bytes)),
            queue: VecDeque::new(),
            ended: false,
            idle,
            read: 0,
            max_bytes,
        }
    }

    /// The next event, or `None` at the end of the body.
    pub(crate) async fn next(&mut self) -> Result<Option<SseEvent>, LlmError> {
        loop {
            if let Some(event) = self.queue.pop_front() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = tokio::time::timeout(self.idle, self.response.chunk())
                .await
                .map_err(|_| {
                    LlmError::new(
                        LlmErrorKind::Timeout,
                        format!(
                            "the response stream sent nothing for {} ms (idle_timeout_ms, \
                             TOOLBOX_LLM_IDLE_TIMEOUT_MS)",
                            self.idle.as_millis()
                        ),
                    )
                })?
                .map_err(|e| {
                    LlmError::new(
                        LlmErrorKind::Transport,
                        format!(
                            "the connection broke while the response streamed: {}",
                            error_chain(&e)
                        ),
                    )
                })?;
            let events = match chunk {
                Some(bytes) => {
                    // Counted before anything is parsed: what is past the cap is never kept.
                    self.read = self.read.saturating_add(bytes.len());
                    if self.read > self.max_bytes {
                        self.ended = true;
                        self.queue.clear();
                        return Err(super::transport::too_large(self.max_bytes));
                    }
                    self.parser.feed(&bytes)
                }
                None => {
                    self.ended = true;
                    self.parser.finish().map(|e| e.into_iter().collect())
                }
            }
            .map_err(|e| LlmError::new(LlmErrorKind::BadResponse, format!("{e}")))?;
            self.queue.extend(events);
        }
    }
}

/// An error and its sources, `a: b: c` (core's one printer).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    toolbox_core::error::chain(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.map(str::to_string),
            data: data.to_string(),
            id: id.map(str::to_string),
        }
    }

    /// Feeds `chunks` one by one and then finishes.
    fn parse(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.feed(c).unwrap());
        }
        out.extend(p.finish().unwrap());
        out
    }

    #[test]
    fn events_fields_and_comments() {
        let got = parse(&[
            b": a comment\nevent: ping\ndata: {}\n\ndata:no-space\nid: 7\n\nevent: x\n\ndata: y\n\n",
        ]);
        assert_eq!(
            got,
            vec![
                ev(Some("ping"), "{}", None),
                ev(None, "no-space", Some("7")),
                // `event: x` alone has no data and is dropped; the id is kept.
                ev(None, "y", Some("7")),
            ]
        );
    }

    #[test]
    fn every_line_ending() {
        for text in [
            &b"data: a\ndata: b\n\ndata: c\n\n"[..],
            b"data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n",
            b"data: a\rdata: b\r\rdata: c\r\r",
        ] {
            assert_eq!(
                parse(&[text]),
                vec![ev(None, "a\nb", None), ev(None, "c", None)],
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn any_split_gives_the_same_events() {
        let text = "\u{feff}event: e\r\ndata: h\u{e9}llo \u{1F600}\r\ndata:\r\n\r\n: c\rdata: z\r\rdata: last";
        let whole = parse(&[text.as_bytes()]);
        assert_eq!(
            whole,
            vec![
                ev(Some("e"), "h\u{e9}llo \u{1F600}\n", None),
                ev(None, "z", None),
                ev(None, "last", None),
            ]
        );
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            assert_eq!(
                parse(&[&bytes[..cut], &bytes[cut..]]),
                whole,
                "cut at {cut}"
            );
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(parse(&singles), whole);
    }

    #[test]
    fn a_cr_at_the_end_of_a_chunk_then_lf() {
        assert_eq!(
            parse(&[b"data: a\r", b"\n", b"\r", b"\ndata: b\n\n"]),
            vec![ev(None, "a", None), ev(None, "b", None)]
        );
    }

    #[test]
    fn the_last_event_is_flushed_at_the_end() {
        assert_eq!(parse(&[b"data: tail\n"]), vec![ev(None, "tail", None)]);
        assert_eq!(parse(&[b"data: tail"]), vec![ev(None, "tail", None)]);
        assert_eq!(parse(&[b"event: only\n"]), vec![]);
        assert_eq!(parse(&[b""]), vec![]);
        assert_eq!(parse(&[b"da"]), vec![]);
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(
            parse(&[b"data: a\xffb\n\n"]),
            vec![ev(None, "a\u{fffd}b", None)]
        );
    }

    #[test]
    fn an_event_larger_than_the_cap_is_an_error() {
        let mut p = SseParser::with_max_event_bytes(16);
        assert_eq!(
            p.feed(b"data: 0123456789\n\n").unwrap(),
            vec![ev(None, "0123456789", None)]
        );
        // Many small lines of one event add up…
        let e = p.feed(b"data: 01234\ndata: 56789\n").unwrap_err();
        assert_eq!(e, SseError::EventTooLarge { limit: 16 });
        // …and so does one line that never ends.
        let mut p = SseParser::with_max_event_bytes(16);
        assert!(p.feed(b"data: 0123456789").is_ok());
        assert!(p.feed(b"0123456789").is_err());
    }
}
