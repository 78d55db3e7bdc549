//! A skill's name: parsed once, here, into a type every path is built from.
//!
//! A skill name arrives from a model (`skill`, `skill_resource`, `skill:<name>/…`) and from
//! files (a folder's name, a SKILL.md's `name`), so it is hostile until parsed: `..`, `a/b`
//! or a NUL would otherwise walk out of a skill root. Like core's `SessionId`, nothing in
//! this crate looks a skill up or opens its folder from a raw string.

use std::fmt;

/// Longest accepted skill name, in characters (all ASCII, so also bytes).
pub const MAX_NAME_LEN: usize = 64;

/// A valid skill name: 1 to 64 characters of `a-z 0-9 -`, not starting or ending with `-`
/// and without `--` (the Agent Skills rule). Always a plain folder name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SkillName(String);

/// Why a skill name was refused. The message quotes the name (escaped and cut) and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSkillName {
    shown: String,
    reason: &'static str,
}

impl fmt::Display for InvalidSkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid skill name {}: {}; a skill name is 1-64 characters of a-z, 0-9 and -, \
             not starting or ending with - and without --",
            self.shown, self.reason
        )
    }
}

impl std::error::Error for InvalidSkillName {}

impl SkillName {
    /// Parses a name, refusing anything that is not a valid skill name.
    pub fn parse(raw: &str) -> Result<Self, InvalidSkillName> {
        let reason = if raw.is_empty() {
            Some("it is empty")
        } else if raw.chars().count() > MAX_NAME_LEN {
            Some("it is longer than 64 characters")
        } else if raw.bytes().any(|b| b.is_ascii_uppercase()) {
            Some("it has upper-case letters")
        } else if !raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            Some("it has a character other than a-z, 0-9 and -")
        } else if raw.starts_with('-') || raw.ends_with('-') {
            Some("it starts or ends with -")
        } else if raw.contains("--") {
            Some("it has -- in it")
        } else {
            None
        };
        match reason {
            None => Ok(SkillName(raw.to_string())),
            Some(reason) => Err(InvalidSkillName {
                // Debug-escaped and cut, so a hostile name cannot flood or forge a message.
                shown: format!("{:?}", raw.chars().take(80).collect::<String>()),
                reason,
            }),
        }
    }

    /// The name as text, which is also the skill's folder name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SkillName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SkillName({:?})", self.0)
    }
}

impl std::str::FromStr for SkillName {
    type Err = InvalidSkillName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SkillName::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names() {
        for ok in ["a", "pdf-report", "x1-2y", &"a".repeat(64)] {
            assert_eq!(SkillName::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn hostile_and_invalid_names_are_refused_with_the_rule() {
        let cases = [
            ("", "it is empty"),
            (&"a".repeat(65), "longer than 64"),
            ("PDF", "upper-case"),
            ("..", "other than a-z"),
            ("../x", "other than a-z"),
            ("a/b", "other than a-z"),
            ("a\0b", "other than a-z"),
            ("a_b", "other than a-z"),
            ("报告", "other than a-z"),
            ("-a", "starts or ends"),
            ("a-", "starts or ends"),
            ("a--b", "has --"),
        ];
        for (raw, want) in cases {
            let e = SkillName::parse(raw).unwrap_err().to_string();
            assert!(e.contains(want), "{raw:?}: {e}");
            assert!(e.starts_with("invalid skill name "), "{e}");
        }
        // A control character is shown escaped.
        let e = SkillName::parse("a\nb").unwrap_err().to_string();
        assert!(e.contains(r#""a\nb""#), "{e}");
    }
}
