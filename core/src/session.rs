//! The session id: parsed once, here, into a type every path is built from.
//!
//! A session id names folders (`.toolbox/trajectories/<sid>/`, `.toolbox/sessions/<sid>/`), so
//! a raw id from a model, a client or a command line is hostile until parsed: `../../x`,
//! `/tmp/abs`, `a\b` or a NUL would otherwise walk out of `.toolbox/`. Nothing else in toolbox
//! validates ids or builds paths from strings; it takes a [`SessionId`].

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Longest accepted session id, in bytes (all ASCII, so also characters).
pub const MAX_SESSION_ID_LEN: usize = 128;

/// A session id that is safe as one folder name: 1 to 128 characters of `A-Z a-z 0-9 . _ -`,
/// not starting with `.` (so never `.` or `..`, and never hidden).
///
/// Cheap to clone. Serialises as its string; deserialising validates.
///
/// **Architecture Invariant:** a raw session id is parsed into a `SessionId` once, at every
/// entry point (the executor's `run`, the CLI's `--session`, MCP), before anything is
/// written; every path built from a session comes from a `SessionId`, never from a string.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(Arc<str>);

/// Why a session id was refused. The message quotes the id (escaped) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid session id {shown}: {reason}; use 1-128 characters of A-Z a-z 0-9 . _ - not starting with '.'"
)]
pub struct InvalidSessionId {
    shown: String,
    reason: &'static str,
}

impl SessionId {
    /// The session used when a request names none.
    pub const DEFAULT: &'static str = "default";

    /// Parses an id, refusing anything that is not a plain folder name.
    pub fn parse(raw: &str) -> Result<Self, InvalidSessionId> {
        let reason = if raw.is_empty() {
            Some("it is empty")
        } else if raw.len() > MAX_SESSION_ID_LEN {
            Some("it is longer than 128 characters")
        } else if raw.starts_with('.') {
            Some("it starts with '.'")
        } else if raw.contains('\0') {
            Some("it contains a NUL byte")
        } else if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some("it contains a character other than A-Z a-z 0-9 . _ -")
        } else {
            None
        };
        match reason {
            None => Ok(SessionId(Arc::from(raw))),
            Some(reason) => Err(InvalidSessionId {
                // Debug-escaped and cut, so a hostile id cannot flood or forge a message.
                shown: format!("{:?}", raw.chars().take(140).collect::<String>()),
                reason,
            }),
        }
    }

    /// The session `default`.
    pub fn default_session() -> Self {
        SessionId(Arc::from(Self::DEFAULT))
    }

    /// The id as text, which is also its folder name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for SessionId {
    fn default() -> Self {
        Self::default_session()
    }
}

impl FromStr for SessionId {
    type Err = InvalidSessionId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::parse(s)
    }
}

impl TryFrom<&str> for SessionId {
    type Error = InvalidSessionId;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        SessionId::parse(s)
    }
}

impl TryFrom<String> for SessionId {
    type Error = InvalidSessionId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        SessionId::parse(&s)
    }
}

impl std::ops::Deref for SessionId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<std::path::Path> for SessionId {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&*self.0)
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl serde::Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        SessionId::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_ids_are_refused_with_a_reason() {
        let long = "x".repeat(129);
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "../../../escape",
            "/abs",
            "/tmp/abs",
            "a/b",
            "a\\b",
            "a\0b",
            &long,
            "é",
            "会话",
            ".hidden",
            "a b",
            "a\nb",
        ] {
            let e = SessionId::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid session id"), "{bad:?}: {e}");
        }
        assert!(SessionId::parse("a\0b")
            .unwrap_err()
            .to_string()
            .contains("NUL"));
        assert!(SessionId::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("longer than 128"));
    }

    #[test]
    fn plain_ids_pass_and_round_trip_through_serde() {
        for good in ["default", "chat-2026_11.29", &"x".repeat(128), "A"] {
            let sid = SessionId::parse(good).unwrap();
            assert_eq!(sid.as_str(), good);
            let json = serde_json::to_string(&sid).unwrap();
            let back: SessionId = serde_json::from_str(&json).unwrap();
            assert_eq!(back, sid);
        }
        assert!(serde_json::from_str::<SessionId>("\"../x\"").is_err());
    }
}
