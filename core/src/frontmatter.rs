//! Markdown files with YAML frontmatter (`---` lines around the keys, then the body): the
//! pieces every such file format shares. The skill provider's SKILL.md and the agent files
//! of [`agent`](crate::agent) are built on them.
//!
//! These files come from folders anyone may have written, so each format reads its YAML
//! straight into its own few fields with a `serde` visitor ([`deserialize_map`]), never into
//! a generic tree: an alias bomb under a key nobody reads is walked, not built, and
//! yaml_serde's own caps (alias jumps, nesting depth 128) bound the walk. Each format caps
//! its file and its frontmatter before parsing.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

/// Fills `slot` with `value` from the key `key`, or fails naming the key when it was given
/// already (a YAML mapping read by a visitor may repeat a key).
pub fn set_once<T, E: de::Error>(slot: &mut Option<T>, value: T, key: &str) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom(format!("`{key}` is given twice")));
    }
    Ok(())
}

/// The keys a format does not know, as a visitor meets them: each value is walked, not built
/// (an alias bomb under an unknown key allocates nothing); they are counted, and the first
/// few distinct ones are kept to name them.
#[derive(Debug, Default, Clone)]
pub struct OtherKeys {
    count: usize,
    kept: Vec<String>,
}

impl OtherKeys {
    /// Skips the value of `key` in `map` and notes the key, keeping at most `max` names.
    pub fn skip<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        key: String,
        max: usize,
    ) -> Result<(), A::Error> {
        map.next_value::<IgnoredAny>()?;
        self.count += 1;
        if self.kept.len() < max && !self.kept.contains(&key) {
            self.kept.push(key);
        }
        Ok(())
    }

    /// How many unknown keys there were.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The kept names as `show` writes them, then `… N more` for the rest.
    pub fn named(&self, show: impl Fn(&str) -> String) -> Vec<String> {
        let mut out: Vec<String> = self.kept.iter().map(|k| show(k)).collect();
        if self.count > self.kept.len() {
            out.push(format!("… {} more", self.count - self.kept.len()));
        }
        out
    }
}

/// Why a text has no frontmatter to split off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitError {
    /// The first line is not `---`.
    NoOpeningLine,
    /// No `---` (or `...`) line closes the frontmatter.
    NoClosingLine,
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitError::NoOpeningLine => f.write_str(
                "the file must begin with YAML frontmatter: a first line `---`, the keys, then \
                 a line `---`",
            ),
            SplitError::NoClosingLine => f.write_str("the frontmatter has no closing `---` line"),
        }
    }
}

impl std::error::Error for SplitError {}

/// Splits `---\n<yaml>\n---\n<body>` into the YAML and the body. The closing line may also
/// be `...`; trailing spaces and `\r` on either fence line are allowed. A byte-order mark is
/// not skipped here: strip it first.
///
/// ```
/// use toolbox_core::frontmatter::split;
/// let (yaml, body) = split("---\nname: a\n---\nBody\n").unwrap();
/// assert_eq!((yaml, body), ("name: a\n", "Body\n"));
/// ```
pub fn split(text: &str) -> Result<(&str, &str), SplitError> {
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(SplitError::NoOpeningLine);
    }
    let start = first.len();
    let mut at = start;
    for line in lines {
        let bare = line.trim_end();
        if bare == "---" || bare == "..." {
            return Ok((&text[start..at], &text[at + line.len()..]));
        }
        at += line.len();
    }
    Err(SplitError::NoClosingLine)
}

/// Reads the frontmatter `yaml` as a mapping with `visitor`. The parse runs under
/// `catch_unwind`, so a parser bug is an error, never a crash. Error messages count lines
/// from the top of the file (the `---` line above the YAML is line 1) and append `suffix`
/// to each position, e.g. `" of SKILL.md"`.
pub fn deserialize_map<'de, V: Visitor<'de>>(
    yaml: &'de str,
    visitor: V,
    suffix: &str,
) -> Result<V::Value, String> {
    let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let de = yaml_serde::Deserializer::from_str(yaml);
        de.deserialize_map(visitor)
    }));
    match parsed {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!(
            "the frontmatter is not valid: {}",
            file_lines(&e.to_string(), suffix)
        )),
        Err(_) => Err("the frontmatter could not be parsed (the YAML parser failed)".to_string()),
    }
}

/// yaml_serde counts lines from the start of the frontmatter; the file has the `---` line
/// above it, so `at line 3 column 5` becomes `at line 4 column 5{suffix}` (every position in
/// the message: libyaml names the problem's and its context's).
pub fn file_lines(message: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(message.len() + 32);
    let mut rest = message;
    while let Some(i) = rest.find("at line ") {
        let (before, after) = rest.split_at(i + "at line ".len());
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let Ok(n) = after[..digits].parse::<u64>() else {
            rest = after;
            continue;
        };
        out.push_str(&(n + 1).to_string());
        rest = &after[digits..];
        if let Some(r) = rest.strip_prefix(" column ") {
            let d = r.bytes().take_while(u8::is_ascii_digit).count();
            out.push_str(" column ");
            out.push_str(&r[..d]);
            rest = &r[d..];
        }
        out.push_str(suffix);
    }
    out.push_str(rest);
    out
}

/// A YAML scalar read as text: a string as written, a number or boolean as it prints
/// (`name: 123` is `"123"`), an empty value or `null` as `""`. A list or a mapping is a
/// type error naming the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalarText(pub String);

impl<'de> de::Deserialize<'de> for ScalarText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ScalarText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("text")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<ScalarText, E> {
                Ok(ScalarText(v.to_string()))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ScalarText, E> {
                Ok(ScalarText(String::new()))
            }
            fn visit_none<E: de::Error>(self) -> Result<ScalarText, E> {
                Ok(ScalarText(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::{IgnoredAny, MapAccess};

    #[test]
    fn split_finds_the_fences() {
        assert_eq!(split("---\na: 1\n---\nbody"), Ok(("a: 1\n", "body")));
        assert_eq!(
            split("---\r\na: 1\r\n...\r\nbody\r\n"),
            Ok(("a: 1\r\n", "body\r\n"))
        );
        assert_eq!(split("---\n---\n"), Ok(("", "")));
        assert_eq!(split("---\na: 1\n---"), Ok(("a: 1\n", "")));
        assert_eq!(split("# Title\n"), Err(SplitError::NoOpeningLine));
        assert_eq!(split(""), Err(SplitError::NoOpeningLine));
        assert_eq!(split("---\na: 1\n"), Err(SplitError::NoClosingLine));
        // A `---` inside the body is the body's.
        assert_eq!(
            split("---\na: 1\n---\nx\n---\n"),
            Ok(("a: 1\n", "x\n---\n"))
        );
    }

    #[test]
    fn positions_count_from_the_top_of_the_file() {
        assert_eq!(
            file_lines("bad at line 3 column 5, while at line 1 column 2", " of X"),
            "bad at line 4 column 5 of X, while at line 2 column 2 of X"
        );
        assert_eq!(file_lines("nothing here", ""), "nothing here");
        assert_eq!(file_lines("at line x", "!"), "at line x");
    }

    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<(String, String)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                if key == "skip" {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                out.push((key, map.next_value::<ScalarText>()?.0));
            }
            Ok(out)
        }
    }

    #[test]
    fn a_mapping_is_read_with_a_visitor_and_errors_name_the_file_line() {
        let got = deserialize_map("a: 1\nb: true\nc:\nd: x y\nskip: [1, {2: 3}]\n", Keys, "");
        assert_eq!(
            got.unwrap(),
            [
                ("a".into(), "1".into()),
                ("b".into(), "true".into()),
                ("c".into(), "".into()),
                ("d".into(), "x y".into())
            ]
        );
        let e = deserialize_map("a: 1\nb: [1]\n", Keys, " of f.md").unwrap_err();
        assert_eq!(
            e,
            "the frontmatter is not valid: b: invalid type: sequence, expected text at line 3 \
             column 4 of f.md"
        );
        let e = deserialize_map("- a\n", Keys, "").unwrap_err();
        assert!(e.contains("expected a mapping"), "{e}");
    }
}
