//! [`TraceParent`]: a W3C Trace Context (`traceparent`, and `tracestate` with it) parsed once
//! from whatever carried it: an HTTP header, an MCP request's `_meta`, the router's request
//! to a host. A client is hostile until parsed, so the value is checked in full here and
//! nothing else ever reads the raw text.
//!
//! The format is version `00` of <https://www.w3.org/TR/trace-context/>:
//! `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lower-case, with neither id all
//! zeros. A later version is read by its first four fields, as the spec asks.

use std::fmt;

/// The longest `tracestate` kept (the spec's limit is 32 list members; 512 characters is
/// what it asks every vendor to propagate at least).
pub const MAX_TRACESTATE_CHARS: usize = 512;

/// A parsed W3C `traceparent`, with the `tracestate` that came with it (if it was valid).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
    state: Option<String>,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("traceparent {shown:?} is not a W3C trace context: {reason}")]
pub struct InvalidTraceParent {
    shown: String,
    reason: &'static str,
}

impl TraceParent {
    /// Builds one from its parts; `None` when an id is all zeros (the spec's invalid ids).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], sampled: bool) -> Option<Self> {
        (trace_id != [0; 16] && parent_id != [0; 8]).then_some(TraceParent {
            trace_id,
            parent_id,
            flags: u8::from(sampled),
            state: None,
        })
    }

    /// Parses a `traceparent` value.
    pub fn parse(raw: &str) -> Result<Self, InvalidTraceParent> {
        let refuse = |reason| InvalidTraceParent {
            shown: raw.chars().take(80).collect(),
            reason,
        };
        let raw_trimmed = raw.trim();
        let bytes = raw_trimmed.as_bytes();
        if bytes.len() < 55 {
            return Err(refuse("it is shorter than 55 characters"));
        }
        let version = hex_field(&bytes[0..2]).ok_or_else(|| refuse("the version is not hex"))?;
        if version[0] == 0xff {
            return Err(refuse("version ff is forbidden"));
        }
        if version[0] == 0 && bytes.len() != 55 {
            return Err(refuse("version 00 has exactly 55 characters"));
        }
        if version[0] != 0 && bytes.len() > 55 && bytes[55] != b'-' {
            return Err(refuse("a later version's extra fields must follow a '-'"));
        }
        if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return Err(refuse("the fields are not separated by '-'"));
        }
        let trace: [u8; 16] = hex_field(&bytes[3..35])
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| refuse("the trace id is not 32 lower-case hex digits"))?;
        let parent: [u8; 8] = hex_field(&bytes[36..52])
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| refuse("the parent id is not 16 lower-case hex digits"))?;
        let flags =
            hex_field(&bytes[53..55]).ok_or_else(|| refuse("the flags are not 2 hex digits"))?[0];
        if trace == [0; 16] {
            return Err(refuse("the trace id is all zeros"));
        }
        if parent == [0; 8] {
            return Err(refuse("the parent id is all zeros"));
        }
        Ok(TraceParent {
            trace_id: trace,
            parent_id: parent,
            flags,
            state: None,
        })
    }

    /// The trace context a carrier (HTTP headers, MCP's `_meta`, the environment) holds:
    /// `None` when there is no `traceparent` or it is invalid, which the W3C spec says to
    /// ignore (the receiver starts a trace of its own).
    pub fn from_carrier(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        TraceParent::parse(traceparent?)
            .ok()
            .map(|tp| tp.with_state(tracestate))
    }

    /// Adds a `tracestate`, kept only if it is printable ASCII within
    /// [`MAX_TRACESTATE_CHARS`]; anything else is left out (the spec lets a receiver drop it).
    pub fn with_state(mut self, state: Option<&str>) -> Self {
        self.state = state
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE_CHARS)
            .filter(|s| s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_string);
        self
    }

    /// The 16-byte trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The 8-byte id of the parent span.
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// Whether the caller recorded (sampled) its span.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lower-case hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The `tracestate` that came with it, if it was kept.
    pub fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
}

/// Version `00`, whatever version was read (the spec: send the version you speak).
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = if self.flags & 1 == 1 { "01" } else { "00" };
        let mut text = String::with_capacity(55);
        text.push_str("00-");
        text.push_str(&hex(&self.trace_id));
        text.push('-');
        text.push_str(&hex(&self.parent_id));
        text.push('-');
        text.push_str(flags);
        f.write_str(&text)
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Lower-case hex digits, two per byte; `None` for anything else.
fn hex_field(text: &[u8]) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    text.chunks(2)
        .map(|pair| match pair {
            [hi, lo] => Some(digit(*hi)? << 4 | digit(*lo)?),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_round_trips() {
        let tp = TraceParent::parse(GOOD).unwrap();
        assert!(tp.sampled());
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.to_string(), GOOD);
        let unsampled =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled());
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        for (raw, reason) in [
            ("", "shorter"),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                "trace id",
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                "all zeros",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                "all zeros",
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "forbidden",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
                "exactly 55",
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
                "separated",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
                "flags",
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0eé36-00f067aa0ba902b7-01",
                "trace id",
            ),
        ] {
            let err = TraceParent::parse(raw).unwrap_err().to_string();
            assert!(err.contains(reason), "{raw:?}: {err}");
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_fields() {
        let tp =
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
                .unwrap();
        assert_eq!(tp.to_string(), GOOD);
    }

    #[test]
    fn tracestate_is_kept_only_when_sane() {
        let tp = TraceParent::parse(GOOD).unwrap();
        assert_eq!(
            tp.clone().with_state(Some("congo=t61rcWkgMzE")).state(),
            Some("congo=t61rcWkgMzE")
        );
        assert_eq!(tp.clone().with_state(Some("a=b\nc")).state(), None);
        assert_eq!(tp.with_state(Some(&"x".repeat(600))).state(), None);
    }
}
