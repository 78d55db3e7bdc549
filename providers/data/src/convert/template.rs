//! `data__convert`'s `template`: a JSON value whose strings hold `{column}` placeholders,
//! filled from each record by building JSON values, never by pasting text into JSON.
//!
//! A string that is exactly one placeholder becomes the column's value as it is (a number
//! stays a number); a placeholder among other text is replaced by the value's text (a
//! string as it is, `null` as nothing, anything else as JSON). `{{` and `}}` are literal
//! braces. Object keys are taken literally.

use anyhow::{bail, Result};
use serde_json::{Map, Value};

use crate::records::Record;

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// A value without placeholders.
    Literal(Value),
    /// A string that is exactly `{name}`.
    Whole(String),
    /// A string with placeholders among text.
    Mixed(Vec<Part>),
    /// An array of templates.
    Array(Vec<Template>),
    /// An object of templates.
    Object(Vec<(String, Template)>),
}

/// A piece of a [`Template::Mixed`] string.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Literal text.
    Text(String),
    /// A placeholder.
    Column(String),
}

/// A JSON value with its objects' keys in the order written (serde_json's map sorts them).
enum Ordered {
    Plain(Value),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(Value::String(v.to_string())))
            }
            fn visit_unit<E>(self) -> std::result::Result<Ordered, E> {
                Ok(Ordered::Plain(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Ordered>()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Ordered, A::Error> {
                let mut fields: Vec<(String, Ordered)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Ordered>()? {
                    fields.retain(|(name, _)| *name != k);
                    fields.push((k, v));
                }
                Ok(Ordered::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

impl Template {
    /// Parses a template from JSON text, keeping its keys in the order written.
    pub fn parse_text(text: &str) -> Result<Template> {
        let v: Ordered =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("not valid JSON text: {e}"))?;
        Template::from_ordered(&v)
    }

    fn from_ordered(v: &Ordered) -> Result<Template> {
        Ok(match v {
            Ordered::Plain(p) => Template::parse(p)?,
            Ordered::Array(items) => Template::Array(
                items
                    .iter()
                    .map(Template::from_ordered)
                    .collect::<Result<_>>()?,
            ),
            Ordered::Object(fields) => Template::Object(
                fields
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), Template::from_ordered(v)?)))
                    .collect::<Result<_>>()?,
            ),
        })
    }

    /// Parses a template value (objects in serde_json's key order; see [`Self::parse_text`]).
    pub fn parse(v: &Value) -> Result<Template> {
        Ok(match v {
            Value::String(s) => parse_string(s)?,
            Value::Array(items) => {
                Template::Array(items.iter().map(Template::parse).collect::<Result<_>>()?)
            }
            Value::Object(m) => Template::Object(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), Template::parse(v)?)))
                    .collect::<Result<_>>()?,
            ),
            other => Template::Literal(other.clone()),
        })
    }

    /// Every column a placeholder names, in order of appearance.
    pub fn columns(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect(&self, out: &mut Vec<String>) {
        match self {
            Template::Literal(_) => {}
            Template::Whole(c) => push_unique(out, c),
            Template::Mixed(parts) => {
                for p in parts {
                    if let Part::Column(c) = p {
                        push_unique(out, c);
                    }
                }
            }
            Template::Array(items) => items.iter().for_each(|t| t.collect(out)),
            Template::Object(fields) => fields.iter().for_each(|(_, t)| t.collect(out)),
        }
    }

    /// The value for one record; `Err(column)` when the record has no such field.
    pub fn apply(&self, rec: &Record) -> std::result::Result<Value, String> {
        Ok(match self {
            Template::Literal(v) => v.clone(),
            Template::Whole(c) => rec.get(c).cloned().ok_or_else(|| c.clone())?,
            Template::Mixed(parts) => {
                let mut s = String::new();
                for p in parts {
                    match p {
                        Part::Text(t) => s.push_str(t),
                        Part::Column(c) => match rec.get(c).ok_or_else(|| c.clone())? {
                            Value::String(v) => s.push_str(v),
                            Value::Null => {}
                            other => s.push_str(&other.to_string()),
                        },
                    }
                }
                Value::String(s)
            }
            Template::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|t| t.apply(rec))
                    .collect::<std::result::Result<_, _>>()?,
            ),
            Template::Object(fields) => {
                let mut m = Map::new();
                for (k, t) in fields {
                    m.insert(k.clone(), t.apply(rec)?);
                }
                Value::Object(m)
            }
        })
    }
}

impl Template {
    /// Whether the template is an object (so it can make table rows).
    pub fn is_object(&self) -> bool {
        matches!(self, Template::Object(_))
    }

    /// For an object template: its fields for one record, in the template's order.
    pub fn apply_fields(
        &self,
        rec: &Record,
    ) -> std::result::Result<Vec<(std::sync::Arc<str>, Value)>, String> {
        match self {
            Template::Object(fields) => fields
                .iter()
                .map(|(k, t)| Ok((std::sync::Arc::from(k.as_str()), t.apply(rec)?)))
                .collect(),
            other => Ok(vec![(std::sync::Arc::from("value"), other.apply(rec)?)]),
        }
    }

    /// Writes the value for one record as JSON text, keys in the template's order.
    pub fn write_json(&self, rec: &Record, out: &mut Vec<u8>) -> std::result::Result<(), String> {
        let put = |out: &mut Vec<u8>, v: &Value| {
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(out, v);
        };
        match self {
            Template::Array(items) => {
                out.push(b'[');
                for (i, t) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    t.write_json(rec, out)?;
                }
                out.push(b']');
            }
            Template::Object(fields) => {
                out.push(b'{');
                for (i, (k, t)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    let _ = serde_json::to_writer(&mut *out, k);
                    out.push(b':');
                    t.write_json(rec, out)?;
                }
                out.push(b'}');
            }
            Template::Whole(c) => put(out, rec.get(c).ok_or_else(|| c.clone())?),
            other => put(out, &other.apply(rec)?),
        }
        Ok(())
    }
}

fn push_unique(out: &mut Vec<String>, c: &str) {
    if !out.iter().any(|x| x == c) {
        out.push(c.to_string());
    }
}

fn parse_string(s: &str) -> Result<Template> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => bail!(
                            "template string {s:?} has an unclosed `{{`; write `{{{{` for a literal brace"
                        ),
                        Some(c) => name.push(c),
                    }
                }
                if name.is_empty() {
                    bail!("template string {s:?} has an empty `{{}}`");
                }
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                parts.push(Part::Column(name));
            }
            '}' => bail!("template string {s:?} has a lone `}}`; write `}}}}` for a literal brace"),
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(match parts.as_slice() {
        [] => Template::Literal(Value::String(String::new())),
        [Part::Column(c)] => Template::Whole(c.clone()),
        [Part::Text(t)] => Template::Literal(Value::String(t.clone())),
        _ => Template::Mixed(parts),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn rec(v: Value) -> Record {
        Record {
            at: 1,
            fields: v
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (Arc::from(k.as_str()), v.clone()))
                .collect(),
        }
    }

    #[test]
    fn values_are_substituted_not_pasted() {
        let t = Template::parse_text(
            r#"{"messages": [
            {"role": "user", "content": "{question}"},
            {"role": "assistant", "content": "A: {answer} ({n}) {{ok}}"}
        ], "n": "{n}"}"#,
        )
        .unwrap();
        assert_eq!(t.columns(), ["question", "answer", "n"]);
        let r = rec(json!({"question": "say \"hi\"\nnow", "answer": "}{", "n": 3}));
        let out = t.apply(&r).unwrap();
        assert_eq!(out["messages"][0]["content"], "say \"hi\"\nnow");
        assert_eq!(out["messages"][1]["content"], "A: }{ (3) {ok}");
        assert_eq!(out["n"], 3);
        assert_eq!(t.apply(&rec(json!({"question": 1}))), Err("answer".into()));
        let mut text = Vec::new();
        t.write_json(&r, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with(r#"{"messages":[{"role":"user","content":"say \"hi\"\nnow"}"#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), out);
    }

    #[test]
    fn bad_braces_are_refused() {
        assert!(Template::parse(&json!("{open")).is_err());
        assert!(Template::parse(&json!("x}")).is_err());
        assert!(Template::parse(&json!("{}")).is_err());
    }
}
