//! What `data__inspect` learns from a stream of records: per column counts, types, examples
//! and ranges, and for JSON records a JSON Schema merged across rows. Everything here is
//! bounded: a fixed number of columns, examples and nested keys.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

/// Columns followed in detail; more are counted by name only.
pub const MAX_COLUMNS: usize = 2000;
/// Distinct examples kept per column.
const EXAMPLES: usize = 3;
/// Characters of an example or sample value shown.
pub const SHOW_CHARS: usize = 120;
/// Keys followed per nested object of the inferred schema.
const SCHEMA_KEYS: usize = 200;
/// How deep the inferred schema goes.
const SCHEMA_DEPTH: usize = 4;

/// The kinds of value counted.
const KINDS: [&str; 8] = [
    "null", "boolean", "integer", "number", "string", "date", "object", "array",
];

/// One column's figures.
#[derive(Debug, Default)]
pub struct Column {
    name: Arc<str>,
    /// Rows where the column is present (JSON keys may be absent).
    present: u64,
    kinds: [u64; 8],
    examples: Vec<Value>,
    min: Option<f64>,
    max: Option<f64>,
    date_min: Option<String>,
    date_max: Option<String>,
    max_len: usize,
}

/// Every column's figures.
#[derive(Debug, Default)]
pub struct Table {
    columns: Vec<Column>,
    index: HashMap<Arc<str>, usize>,
    /// Columns past [`MAX_COLUMNS`], by name only, in order.
    extra: Vec<Arc<str>>,
    /// The same names, to tell a new one in constant time.
    extra_seen: std::collections::HashSet<Arc<str>>,
    /// Rows seen.
    pub rows: u64,
}

/// Whether `s` starts like an ISO 8601 date: `YYYY-MM-DD`, then nothing, `T` or a space.
pub fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
        && (b.len() == 10 || b[10] == b'T' || b[10] == b' ')
        && s.len() <= 40
}

/// A value cut to [`SHOW_CHARS`] characters for display.
pub fn shown(v: &Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > SHOW_CHARS => {
            let cut: String = s.chars().take(SHOW_CHARS).collect();
            Value::String(format!("{cut}…"))
        }
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => v.clone(),
        other => {
            let text = other.to_string();
            if text.chars().count() > SHOW_CHARS {
                let cut: String = text.chars().take(SHOW_CHARS).collect();
                Value::String(format!("{cut}…"))
            } else {
                other.clone()
            }
        }
    }
}

impl Table {
    /// Adds one record.
    pub fn add(&mut self, fields: &[(Arc<str>, Value)]) {
        self.rows += 1;
        for (name, value) in fields {
            let i = match self.index.get(name) {
                Some(&i) => i,
                None => {
                    if self.columns.len() >= MAX_COLUMNS {
                        if self.extra.len() < 10 * MAX_COLUMNS
                            && self.extra_seen.insert(name.clone())
                        {
                            self.extra.push(name.clone());
                        }
                        continue;
                    }
                    self.columns.push(Column {
                        name: name.clone(),
                        ..Column::default()
                    });
                    self.index.insert(name.clone(), self.columns.len() - 1);
                    self.columns.len() - 1
                }
            };
            self.columns[i].add(value);
        }
    }

    /// The columns as JSON, the first `show` in full; with how many were left out.
    pub fn report(&self, show: usize) -> (Vec<Value>, Vec<String>) {
        let cols = self
            .columns
            .iter()
            .take(show)
            .map(|c| c.report(self.rows))
            .collect();
        let left: Vec<String> = self
            .columns
            .iter()
            .skip(show)
            .map(|c| c.name.to_string())
            .chain(self.extra.iter().map(|n| n.to_string()))
            .collect();
        (cols, left)
    }

    /// How many columns were met.
    pub fn width(&self) -> usize {
        self.columns.len() + self.extra.len()
    }
}

impl Column {
    fn add(&mut self, v: &Value) {
        self.present += 1;
        let kind = match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                self.min = Some(self.min.map_or(x, |m| m.min(x)));
                self.max = Some(self.max.map_or(x, |m| m.max(x)));
                if n.is_i64() || n.is_u64() {
                    2
                } else {
                    3
                }
            }
            Value::String(s) => {
                self.max_len = self.max_len.max(s.chars().count());
                if is_date(s) {
                    if self.date_min.as_deref().is_none_or(|m| s.as_str() < m) {
                        self.date_min = Some(s.clone());
                    }
                    if self.date_max.as_deref().is_none_or(|m| s.as_str() > m) {
                        self.date_max = Some(s.clone());
                    }
                    5
                } else {
                    4
                }
            }
            Value::Object(_) => 6,
            Value::Array(_) => 7,
        };
        self.kinds[kind] += 1;
        if kind != 0 && self.examples.len() < EXAMPLES {
            let ex = shown(v);
            if !self.examples.contains(&ex) {
                self.examples.push(ex);
            }
        }
    }

    fn report(&self, rows: u64) -> Value {
        let nulls = self.kinds[0] + (rows - self.present);
        let mut kinds: Vec<(&str, u64)> = KINDS
            .iter()
            .zip(self.kinds.iter())
            .skip(1)
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (*k, *n))
            .collect();
        // Integers among numbers are numbers.
        if kinds.iter().any(|(k, _)| *k == "number") {
            if let Some(pos) = kinds.iter().position(|(k, _)| *k == "integer") {
                let n = kinds.remove(pos).1;
                if let Some(x) = kinds.iter_mut().find(|(k, _)| *k == "number") {
                    x.1 += n;
                }
            }
        }
        let ty = match kinds.as_slice() {
            [] => "null".to_string(),
            [(k, _)] => k.to_string(),
            many => {
                let mut m = many.to_vec();
                m.sort_by_key(|k| std::cmp::Reverse(k.1));
                format!(
                    "mixed ({})",
                    m.iter()
                        .map(|(k, n)| format!("{k} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        };
        let mut out = json!({
            "name": &*self.name,
            "type": ty,
            "nulls": nulls,
            "examples": self.examples,
        });
        if let (Some(min), Some(max)) = (self.min, self.max) {
            out["min"] = num(min);
            out["max"] = num(max);
        }
        if let (Some(min), Some(max)) = (&self.date_min, &self.date_max) {
            out["min_date"] = json!(min);
            out["max_date"] = json!(max);
        }
        if self.max_len > 0 {
            out["max_length"] = json!(self.max_len);
        }
        out
    }
}

fn num(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        json!(x as i64)
    } else {
        json!(x)
    }
}

/// A JSON Schema inferred from values, merged as more are seen.
#[derive(Debug, Default)]
pub struct Inferred {
    seen: u64,
    /// Counts per kind, as in [`KINDS`] (dates count as strings here).
    kinds: [u64; 8],
    props: Vec<(String, Inferred)>,
    index: HashMap<String, usize>,
    /// Objects seen (for `required`).
    objects: u64,
    /// Keys past [`SCHEMA_KEYS`] were seen.
    more_keys: bool,
    items: Option<Box<Inferred>>,
}

impl Inferred {
    /// Adds a record's fields as one object.
    pub fn add_record(&mut self, fields: &[(Arc<str>, Value)]) {
        self.seen += 1;
        self.kinds[6] += 1;
        self.objects += 1;
        for (k, v) in fields {
            if let Some(child) = self.child(k) {
                child.add(v, 1);
            }
        }
    }

    fn child(&mut self, k: &str) -> Option<&mut Inferred> {
        let i = match self.index.get(k) {
            Some(&i) => i,
            None if self.props.len() < SCHEMA_KEYS => {
                self.props.push((k.to_string(), Inferred::default()));
                self.index.insert(k.to_string(), self.props.len() - 1);
                self.props.len() - 1
            }
            None => {
                self.more_keys = true;
                return None;
            }
        };
        Some(&mut self.props[i].1)
    }

    fn add(&mut self, v: &Value, depth: usize) {
        self.seen += 1;
        let kind = match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(n) if n.is_i64() || n.is_u64() => 2,
            Value::Number(_) => 3,
            Value::String(_) => 4,
            Value::Object(_) => 6,
            Value::Array(_) => 7,
        };
        self.kinds[kind] += 1;
        if depth >= SCHEMA_DEPTH {
            return;
        }
        match v {
            Value::Object(m) => {
                self.objects += 1;
                for (k, v) in m {
                    if let Some(child) = self.child(k) {
                        child.add(v, depth + 1);
                    }
                }
            }
            Value::Array(items) => {
                let node = self.items.get_or_insert_with(Box::default);
                for item in items.iter().take(1000) {
                    node.add(item, depth + 1);
                }
            }
            _ => {}
        }
    }

    /// The schema, with `x-count` (how many times a key was present) on each property.
    pub fn schema(&self) -> Value {
        let mut types: Vec<&str> = Vec::new();
        for (i, k) in KINDS.iter().enumerate() {
            if self.kinds[i] > 0 && *k != "date" {
                types.push(k);
            }
        }
        if types.contains(&"number") {
            types.retain(|t| *t != "integer");
        }
        let mut out = Map::new();
        match types.as_slice() {
            [] => {}
            [one] => {
                out.insert("type".into(), json!(one));
            }
            many => {
                out.insert("type".into(), json!(many));
            }
        }
        if !self.props.is_empty() {
            let mut props = Map::new();
            let mut required = Vec::new();
            for (k, child) in &self.props {
                let mut s = child.schema();
                s["x-count"] = json!(child.seen);
                props.insert(k.clone(), s);
                if child.seen == self.objects {
                    required.push(json!(k));
                }
            }
            out.insert("properties".into(), Value::Object(props));
            if !required.is_empty() {
                out.insert("required".into(), Value::Array(required));
            }
            if self.more_keys {
                out.insert(
                    "x-note".into(),
                    json!(format!("more than {SCHEMA_KEYS} keys; the rest left out")),
                );
            }
        }
        if let Some(items) = &self.items {
            if items.seen > 0 {
                out.insert("items".into(), items.schema());
            }
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: Value) -> Vec<(Arc<str>, Value)> {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (Arc::from(k.as_str()), v.clone()))
            .collect()
    }

    #[test]
    fn columns_count_types_nulls_and_ranges() {
        let mut t = Table::default();
        t.add(&rec(json!({"a": 1, "d": "2024-01-05", "s": "x"})));
        t.add(&rec(json!({"a": 2.5, "d": "2023-12-31"})));
        t.add(&rec(
            json!({"a": null, "d": "2024-03-01T10:00:00", "s": "y"}),
        ));
        let (cols, left) = t.report(10);
        assert!(left.is_empty());
        assert_eq!(cols[0]["type"], "number");
        assert_eq!(cols[0]["nulls"], 1);
        assert_eq!(cols[0]["min"], 1);
        assert_eq!(cols[0]["max"], 2.5);
        assert_eq!(cols[1]["type"], "date");
        assert_eq!(cols[1]["min_date"], "2023-12-31");
        assert_eq!(cols[1]["max_date"], "2024-03-01T10:00:00");
        assert_eq!(cols[2]["nulls"], 1, "absent counts as null");
        let (cols, left) = t.report(1);
        assert_eq!(cols.len(), 1);
        assert_eq!(left, ["d", "s"]);
    }

    #[test]
    fn schemas_merge_across_records() {
        let mut s = Inferred::default();
        s.add_record(&rec(json!({"id": 1, "tags": ["a"], "m": {"x": 1}})));
        s.add_record(&rec(json!({"id": 2.5, "m": {"x": 2, "y": "z"}})));
        let schema = s.schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["id", "m"]));
        assert_eq!(schema["properties"]["id"]["type"], "number");
        assert_eq!(schema["properties"]["tags"]["x-count"], 1);
        assert_eq!(schema["properties"]["tags"]["items"]["type"], "string");
        assert_eq!(schema["properties"]["m"]["required"], json!(["x"]));
    }
}
