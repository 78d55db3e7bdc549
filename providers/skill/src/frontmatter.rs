//! SKILL.md: YAML frontmatter between `---` lines, then the instructions.
//!
//! A SKILL.md comes from a folder anyone may have written (a cloned repository's `skills/`),
//! so it is parsed defensively:
//!
//! - the file is capped ([`MAX_SKILL_MD_BYTES`]) and the frontmatter too
//!   ([`MAX_FRONTMATTER_BYTES`]);
//! - the YAML is read straight into the few fields a skill has, never into a generic tree:
//!   an alias is expanded only where a string is expected (one string), lists and maps are
//!   capped as they are read, and unknown keys are skipped without building anything. So a
//!   "billion laughs" document costs a bounded walk, not memory; yaml_serde's own caps
//!   (alias jumps, nesting depth 128) bound the walk;
//! - the parse runs under `catch_unwind` ([`toolbox_core::frontmatter::deserialize_map`]): a
//!   parser bug is a skipped skill, never a crash.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use toolbox_core::frontmatter::{self, set_once, OtherKeys, ScalarText as Text, SplitError};

use crate::name::SkillName;

/// A SKILL.md larger than this is refused (a skill's instructions go into a model's
/// context; anything this large belongs in `references/`).
pub const MAX_SKILL_MD_BYTES: u64 = 256 * 1024;
/// The frontmatter (between the `---` lines) may be at most this long.
pub const MAX_FRONTMATTER_BYTES: usize = 16 * 1024;
/// The longest description, in characters (the Agent Skills rule).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The longest `compatibility`, in characters (the Agent Skills rule).
pub const MAX_COMPATIBILITY_CHARS: usize = 500;
/// At most this many `allowed-tools` entries and `metadata` keys are accepted.
const MAX_LIST_ITEMS: usize = 128;
/// The longest single `allowed-tools` entry, `metadata` key or value, or `license`.
const MAX_ITEM_CHARS: usize = 1024;
/// Unknown keys beyond this many are not listed one by one.
const MAX_OTHER_KEYS_LISTED: usize = 16;

/// What a valid SKILL.md says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillMd {
    /// The `name`, parsed.
    pub name: SkillName,
    /// The `description`, trimmed.
    pub description: String,
    /// The optional `license`.
    pub license: Option<String>,
    /// The optional `compatibility` (what the skill needs from its environment).
    pub compatibility: Option<String>,
    /// The optional `allowed-tools`, one entry per tool (a space- or comma-separated string
    /// and a list are both accepted).
    pub allowed_tools: Vec<String>,
    /// The optional `metadata`, key by key, in file order.
    pub metadata: Vec<(String, String)>,
    /// Keys the Agent Skills format does not define (other agents' extensions); ignored.
    pub other_keys: Vec<String>,
    /// The instructions: everything after the frontmatter, trimmed.
    pub body: String,
}

/// Parses a SKILL.md's bytes for the skill folder `folder`. On failure, every problem found
/// (each a sentence naming the rule) is returned.
pub fn parse(bytes: &[u8], folder: &str) -> Result<SkillMd, Vec<String>> {
    if bytes.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(vec![format!(
            "SKILL.md is {} bytes, more than the {MAX_SKILL_MD_BYTES}-byte limit (move long \
             material to references/)",
            bytes.len()
        )]);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        vec![format!(
            "SKILL.md is not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        )]
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml, body) = split(text).map_err(|e| vec![e])?;
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(vec![format!(
            "the frontmatter is {} bytes, more than the {MAX_FRONTMATTER_BYTES}-byte limit",
            yaml.len()
        )]);
    }
    if yaml.trim().is_empty() {
        return Err(vec![
            "the frontmatter is empty: `name` and `description` are required".to_string(),
        ]);
    }
    let raw = read_yaml(yaml).map_err(|e| vec![e])?;
    check(raw, body, folder)
}

/// Splits off the frontmatter ([`frontmatter::split`]), saying what SKILL.md must look like.
fn split(text: &str) -> Result<(&str, &str), String> {
    frontmatter::split(text).map_err(|e| match e {
        SplitError::NoOpeningLine => "SKILL.md must begin with YAML frontmatter: a first line \
             `---`, the keys (`name`, `description`, …), then a line `---`"
            .to_string(),
        SplitError::NoClosingLine => e.to_string(),
    })
}

/// The frontmatter keys as read, before the rules are checked.
#[derive(Default)]
struct RawFrontmatter {
    name: Option<String>,
    description: Option<String>,
    license: Option<String>,
    compatibility: Option<String>,
    allowed_tools: Option<Vec<String>>,
    metadata: Option<Vec<(String, String)>>,
    other_keys: OtherKeys,
}

fn read_yaml(yaml: &str) -> Result<RawFrontmatter, String> {
    // Positions name the line of SKILL.md, counting the `---` line above the YAML.
    frontmatter::deserialize_map(yaml, FrontmatterVisitor, " of SKILL.md")
}

struct FrontmatterVisitor;

impl<'de> Visitor<'de> for FrontmatterVisitor {
    type Value = RawFrontmatter;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML mapping of keys such as `name:` and `description:`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawFrontmatter, A::Error> {
        let mut raw = RawFrontmatter::default();
        while let Some(key) = map.next_key::<String>()? {
            // yaml_serde's errors already name the key (`description: invalid type …`).
            match key.as_str() {
                "name" | "description" | "license" | "compatibility" => {
                    let value = map.next_value::<Text>()?.0;
                    let slot = match key.as_str() {
                        "name" => &mut raw.name,
                        "description" => &mut raw.description,
                        "license" => &mut raw.license,
                        _ => &mut raw.compatibility,
                    };
                    set_once(slot, value, &key)?;
                }
                "allowed-tools" => set_once(
                    &mut raw.allowed_tools,
                    map.next_value::<ToolList>()?.0,
                    &key,
                )?,
                "metadata" => set_once(&mut raw.metadata, map.next_value::<Metadata>()?.0, &key)?,
                _ => raw.other_keys.skip(&mut map, key, MAX_OTHER_KEYS_LISTED)?,
            }
        }
        Ok(raw)
    }
}

/// `allowed-tools`: a string of names separated by spaces or commas, or a list of names.
struct ToolList(Vec<String>);

impl<'de> de::Deserialize<'de> for ToolList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("tool names: a string separated by spaces or commas, or a list")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolList, E> {
                let tools: Vec<String> = v
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect();
                if tools.len() > MAX_LIST_ITEMS {
                    return Err(E::custom(format!("more than {MAX_LIST_ITEMS} tools")));
                }
                Ok(ToolList(tools))
            }
            fn visit_unit<E: de::Error>(self) -> Result<ToolList, E> {
                Ok(ToolList(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolList, A::Error> {
                let mut tools = Vec::new();
                while let Some(Text(tool)) = seq.next_element::<Text>()? {
                    if tools.len() == MAX_LIST_ITEMS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_LIST_ITEMS} tools"
                        )));
                    }
                    if tool.chars().count() > MAX_ITEM_CHARS {
                        return Err(de::Error::custom(format!(
                            "a tool name is longer than {MAX_ITEM_CHARS} characters"
                        )));
                    }
                    tools.push(tool);
                }
                Ok(ToolList(tools))
            }
        }
        d.deserialize_any(V)
    }
}

/// `metadata`: a mapping of keys to text.
struct Metadata(Vec<(String, String)>);

impl<'de> de::Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Metadata;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of keys to text")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Metadata, E> {
                Ok(Metadata(Vec::new()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
                let mut entries: Vec<(String, String)> = Vec::new();
                while let Some(Text(key)) = map.next_key::<Text>()? {
                    let Text(value) = map.next_value::<Text>()?;
                    if entries.len() == MAX_LIST_ITEMS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_LIST_ITEMS} keys"
                        )));
                    }
                    if key.chars().count() > MAX_ITEM_CHARS
                        || value.chars().count() > MAX_ITEM_CHARS
                    {
                        return Err(de::Error::custom(format!(
                            "`{}` is longer than {MAX_ITEM_CHARS} characters",
                            key.chars().take(40).collect::<String>()
                        )));
                    }
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("`{key}` is given twice")));
                    }
                    entries.push((key, value));
                }
                Ok(Metadata(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// The Agent Skills rules on what was read; every broken rule is reported.
fn check(raw: RawFrontmatter, body: &str, folder: &str) -> Result<SkillMd, Vec<String>> {
    let mut problems = Vec::new();
    let name = match raw.name.as_deref().map(str::trim) {
        None => {
            problems.push("`name` is missing (it is required)".to_string());
            None
        }
        Some(given) => match SkillName::parse(given) {
            Err(e) => {
                problems.push(format!("`name`: {e}"));
                None
            }
            Ok(name) if name.as_str() != folder => {
                problems.push(format!(
                    "`name` is {:?} but the folder is {:?}: they must be the same",
                    name.as_str(),
                    folder
                ));
                None
            }
            Ok(name) => Some(name),
        },
    };
    let description = match raw.description.as_deref().map(str::trim) {
        None => {
            problems.push("`description` is missing (it is required)".to_string());
            None
        }
        Some("") => {
            problems.push("`description` is empty (1-1024 characters are required)".to_string());
            None
        }
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => {
            problems.push(format!(
                "`description` is {} characters, more than {MAX_DESCRIPTION_CHARS}",
                d.chars().count()
            ));
            None
        }
        Some(d) => Some(d.to_string()),
    };
    if let Some(c) = &raw.compatibility {
        if c.chars().count() > MAX_COMPATIBILITY_CHARS {
            problems.push(format!(
                "`compatibility` is {} characters, more than {MAX_COMPATIBILITY_CHARS}",
                c.chars().count()
            ));
        }
    }
    if let Some(l) = &raw.license {
        if l.chars().count() > MAX_ITEM_CHARS {
            problems.push(format!(
                "`license` is longer than {MAX_ITEM_CHARS} characters (name the license, or \
                 point to a file)"
            ));
        }
    }
    match (name, description) {
        (Some(name), Some(description)) if problems.is_empty() => {
            let other_keys = raw.other_keys.named(str::to_string);
            Ok(SkillMd {
                name,
                description,
                license: raw.license.map(|l| l.trim().to_string()),
                compatibility: raw.compatibility.map(|c| c.trim().to_string()),
                allowed_tools: raw.allowed_tools.unwrap_or_default(),
                metadata: raw.metadata.unwrap_or_default(),
                other_keys,
                body: body.trim().to_string(),
            })
        }
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str, folder: &str) -> SkillMd {
        parse(text.as_bytes(), folder).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn bad(text: &str, folder: &str) -> String {
        match parse(text.as_bytes(), folder) {
            Ok(md) => panic!("{}: parsed as {md:?}", &text[..text.len().min(200)]),
            Err(problems) => problems.join(" | "),
        }
    }

    #[test]
    fn a_full_skill_md() {
        let md = ok(
            "---\nname: pdf-report\ndescription: >\n  Build PDF reports\n  from CSV.\n\
             license: MIT\ncompatibility: Python 3.10+\nallowed-tools: Read, run_python_code\n\
             metadata:\n  author: me\n  version: 1.2\nx-extra: [1, 2]\n---\n\n# Steps\n\nDo it.\n",
            "pdf-report",
        );
        assert_eq!(md.name.as_str(), "pdf-report");
        assert_eq!(md.description, "Build PDF reports from CSV.");
        assert_eq!(md.license.as_deref(), Some("MIT"));
        assert_eq!(md.compatibility.as_deref(), Some("Python 3.10+"));
        assert_eq!(md.allowed_tools, ["Read", "run_python_code"]);
        assert_eq!(
            md.metadata,
            [
                ("author".into(), "me".into()),
                ("version".into(), "1.2".into())
            ]
        );
        assert_eq!(md.other_keys, ["x-extra"]);
        assert_eq!(md.body, "# Steps\n\nDo it.");
    }

    #[test]
    fn chinese_descriptions_count_characters_not_bytes() {
        let long = "报".repeat(1000); // 3000 bytes, 1000 characters
        let md = ok(
            &format!("---\nname: cn\ndescription: {long}\n---\nbody"),
            "cn",
        );
        assert_eq!(md.description.chars().count(), 1000);
        let e = bad(
            &format!("---\nname: cn\ndescription: {}\n---\n", "报".repeat(1025)),
            "cn",
        );
        assert!(e.contains("1025 characters, more than 1024"), "{e}");
    }

    #[test]
    fn crlf_bom_and_list_forms() {
        let md = ok(
            "\u{feff}---\r\nname: a\r\ndescription: d\r\nallowed-tools: [x, y]\r\n---\r\nbody\r\n",
            "a",
        );
        assert_eq!(md.allowed_tools, ["x", "y"]);
        assert_eq!(md.body, "body");
    }

    #[test]
    fn every_rule_is_named() {
        let cases: &[(&str, &str, &str)] = &[
            ("no frontmatter", "a", "must begin with YAML frontmatter"),
            ("---\nname: a\n", "a", "no closing `---`"),
            ("---\n---\nbody", "a", "the frontmatter is empty"),
            ("---\ndescription: d\n---\n", "a", "`name` is missing"),
            ("---\nname: a\n---\n", "a", "`description` is missing"),
            ("---\nname: a\ndescription: ''\n---\n", "a", "`description` is empty"),
            ("---\nname: b\ndescription: d\n---\n", "a", "`name` is \"b\" but the folder is \"a\""),
            ("---\nname: Bad_Name\ndescription: d\n---\n", "Bad_Name", "invalid skill name"),
            ("---\nname: a\ndescription: [1]\n---\n", "a", "description: invalid type: sequence, expected text at line 3 column 14 of SKILL.md"),
            ("---\nname: a\nname: a\ndescription: d\n---\n", "a", "`name` is given twice"),
            ("---\n- a\n- b\n---\n", "a", "expected a YAML mapping"),
            ("---\nname: a\ndescription: d: e\n---\n", "a", "not valid"),
            ("---\nname: a\ndescription: d\nmetadata: [1]\n---\n", "a", "metadata: invalid type"),
            ("---\nname: a\ndescription: d\nallowed-tools: {a: 1}\n---\n", "a", "allowed-tools: invalid type"),
        ];
        for (text, folder, want) in cases {
            let e = bad(text, folder);
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // Both missing fields are reported at once.
        let e = bad("---\nlicense: MIT\n---\n", "a");
        assert!(e.contains("`name` is missing") && e.contains("`description` is missing"));
    }

    #[test]
    fn yaml_errors_name_the_line_of_skill_md() {
        let e = bad("---\nname: a\ndescription: \"open\n---\nbody\n", "a");
        assert!(
            e.ends_with(
                "found unexpected end of stream at line 4 column 1 of SKILL.md, while \
                 scanning a quoted scalar at line 3 column 14 of SKILL.md"
            ),
            "{e}"
        );
        let e = bad("---\nname: a\n  bad: indent\ndescription: d\n---\n", "a");
        assert!(e.ends_with("at line 3 column 6 of SKILL.md"), "{e}");
    }

    #[test]
    fn sizes_are_capped() {
        let big = format!(
            "---\nname: a\ndescription: d\n---\n{}",
            "x".repeat(300 * 1024)
        );
        assert!(bad(&big, "a").contains("more than the 262144-byte limit"));
        let fm = format!(
            "---\nname: a\ndescription: d\nx: {}\n---\n",
            "y".repeat(20_000)
        );
        assert!(
            bad(&fm, "a").contains("frontmatter is 20"),
            "{}",
            bad(&fm, "a")
        );
        let e = parse(b"---\nname: a\xff\n---\n", "a").unwrap_err().join("");
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn billion_laughs_and_deep_nesting_are_bounded() {
        // Ten levels of ten aliases each: 10^10 strings if expanded.
        let mut yaml = String::from("---\nname: a\ndescription: d\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..10 {
            let p = i - 1;
            yaml.push_str(&format!(
                "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        // Under an unknown key it is walked (within yaml_serde's repetition limit) or
        // refused, never built.
        let laughs = format!("{yaml}---\nbody");
        match parse(laughs.as_bytes(), "a") {
            Ok(md) => assert_eq!(md.name.as_str(), "a"),
            Err(e) => assert!(e.join("").contains("repetition limit"), "{e:?}"),
        }
        // Where a list is expected, the aliased lists are refused at the first element.
        let tools = format!(
            "{}allowed-tools: *a9\n---\n",
            yaml.trim_end_matches("---\n")
        );
        let e = bad(&tools, "a");
        assert!(
            e.contains("allowed-tools") || e.contains("repetition"),
            "{e}"
        );
        // Deep nesting: skipped in one linear pass under an unknown key, refused at
        // yaml_serde's depth limit where a value is read.
        let nest = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
        let md = ok(
            &format!("---\nname: a\ndescription: d\nx: {nest}\n---\n"),
            "a",
        );
        assert_eq!(md.other_keys, ["x"]);
        let e = bad(
            &format!("---\nname: a\ndescription: d\nallowed-tools: {nest}\n---\n"),
            "a",
        );
        assert!(
            e.contains("allowed-tools") || e.contains("recursion limit"),
            "{}",
            &e[..e.len().min(300)]
        );
    }
}
