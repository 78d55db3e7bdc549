//! CSV and TSV cells typed as a data tool reads them.
//!
//! CSV has no types, so a column's type is chosen from a sample of its first rows, as
//! DuckDB's sniffer does: integer, number (decimals, exponents, `inf`/`nan`), boolean, date,
//! timestamp (with or without a zone) or string. The same rules type a column for every
//! output: Parquet gets the matching logical type, JSON gets numbers and booleans (dates and
//! timestamps stay their text, which JSON has no type for). A cell that does not fit its
//! column after the sample is a bad row naming the line, the column, the value and the type,
//! never a silent drop. `types` overrides a column; `infer_types: false` keeps every cell
//! text.
//!
//! The rules, each on purpose:
//! - empty is null; in a column that is not text, `NA`, `N/A`, `NULL`, `None` and `#N/A`
//!   (any case) are null too (in a text column they stay text: `NA` may be Namibia);
//! - an integer has no leading zero (`007` is a code, and stays text), no `+`, and fits in
//!   64 bits (a longer one stays text rather than lose digits as a float);
//! - a number is a decimal (`1.50`, `.5`, `-3.`), with an optional exponent (`9.7e-05`);
//!   `inf`, `infinity` and `nan` (any case, signed) fit a number column but never make one;
//! - booleans are `true`/`false`/`yes`/`no`/`t`/`f` in any case (`0`/`1` are integers);
//! - a date is `YYYY-MM-DD` or `YYYY/MM/DD`; a timestamp is a date, then ` ` or `T`, then
//!   `HH:MM[:SS[.fraction]]`, then an optional zone (`Z`, `±HH`, `±HHMM`, `±HH:MM`); zoned
//!   ones are stored as the UTC instant;
//! - in the sample, integers and numbers make a number column, dates and timestamps a
//!   timestamp column; any other mix is text.

use std::sync::Arc;

use anyhow::{anyhow, Result};
use serde_json::{Number, Value};
use toolbox_core::Args;

/// Rows sampled to choose the types (DuckDB's default sample).
pub const SAMPLE_ROWS: usize = 20_480;
/// Bytes of cells sampled at most (the rows stop earlier when they are long).
pub const SAMPLE_BYTES: usize = 32 << 20;

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// 64-bit integers.
    Integer,
    /// 64-bit floats.
    Number,
    /// Booleans.
    Boolean,
    /// Calendar dates.
    Date,
    /// Timestamps without a zone (microseconds).
    Timestamp,
    /// Instants (microseconds since the epoch, UTC).
    TimestampTz,
    /// Text.
    String,
}

/// The names `types` takes.
pub const TYPE_NAMES: &[&str] = &[
    "string",
    "integer",
    "number",
    "boolean",
    "date",
    "timestamp",
];

impl ColType {
    /// Its name, as `data__inspect` reports it.
    pub fn name(self) -> &'static str {
        match self {
            ColType::Integer => "integer",
            ColType::Number => "number",
            ColType::Boolean => "boolean",
            ColType::Date => "date",
            ColType::Timestamp => "timestamp",
            ColType::TimestampTz => "timestamp with time zone",
            ColType::String => "string",
        }
    }

    /// A name of [`TYPE_NAMES`] (and a few common synonyms).
    pub fn parse(name: &str) -> Option<ColType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "string" | "text" | "str" | "varchar" => ColType::String,
            "integer" | "int" | "int64" | "bigint" => ColType::Integer,
            "number" | "float" | "double" | "float64" | "decimal" => ColType::Number,
            "boolean" | "bool" => ColType::Boolean,
            "date" => ColType::Date,
            "timestamp" | "datetime" => ColType::Timestamp,
            _ => return None,
        })
    }

    /// The JSON Schema type of its values in JSON output.
    pub fn expected(self) -> &'static str {
        match self {
            ColType::Integer => "an integer",
            ColType::Number => "a number",
            ColType::Boolean => "a boolean (true/false/yes/no/t/f)",
            ColType::Date => "a date (YYYY-MM-DD)",
            ColType::Timestamp => "a timestamp without a zone (YYYY-MM-DD HH:MM:SS)",
            ColType::TimestampTz => "a timestamp with a zone (YYYY-MM-DDTHH:MM:SSZ)",
            ColType::String => "text",
        }
    }
}

/// How the caller wants CSV cells typed: `types` and `infer_types`.
#[derive(Debug, Clone, Default)]
pub struct Typing {
    /// `false`: every cell stays text.
    pub off: bool,
    /// Columns whose type the caller chose.
    pub overrides: Vec<(String, ColType)>,
}

impl Typing {
    /// Reads `types` and `infer_types` from a data tool's arguments.
    pub fn from_args(args: &Args<'_>) -> Result<Typing> {
        let infer = crate::INFER_TYPES.bool(args)?;
        let mut overrides = Vec::new();
        let tool = args.tool();
        let named = |col: &str, t: &str| -> Result<(String, ColType)> {
            let ty = ColType::parse(t.trim()).ok_or_else(|| {
                anyhow!(
                    "{tool}: argument `types`: the type of {col:?} must be one of {}, not {t:?}",
                    TYPE_NAMES.join(", ")
                )
            })?;
            Ok((col.to_string(), ty))
        };
        let bad = |what: &str| {
            anyhow!(
                "{tool}: argument `types` must be \"column=type\" strings (types: {}), e.g. \
                 [\"zip=string\"], or an object {{\"zip\": \"string\"}}; {what}",
                TYPE_NAMES.join(", ")
            )
        };
        match crate::TYPES.opt_value(args) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (col, v) in m {
                    let t = v
                        .as_str()
                        .ok_or_else(|| bad(&format!("the type of {col:?} is not a string")))?;
                    overrides.push(named(col, t)?);
                }
            }
            Some(Value::Array(items)) => {
                for item in items {
                    let s = item
                        .as_str()
                        .ok_or_else(|| bad("an item is not a string"))?;
                    let (col, t) = s
                        .rsplit_once('=')
                        .filter(|(c, t)| !c.is_empty() && !t.is_empty())
                        .ok_or_else(|| bad(&format!("{s:?} has no `=`")))?;
                    overrides.push(named(col, t)?);
                }
            }
            Some(Value::String(s)) if s.is_empty() => {}
            Some(other) => return Err(bad(&format!("not {}", toolbox_core::json_kind(other)))),
        }
        Ok(Typing {
            off: !infer,
            overrides,
        })
    }

    /// Whether every cell stays text.
    pub fn is_off(&self) -> bool {
        self.off
    }
}

/// What one cell is, on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
enum Class {
    Empty = 1,
    NullWord = 2,
    Bool = 4,
    Int = 8,
    Float = 16,
    FloatWord = 32,
    Date = 64,
    Ts = 128,
    TsTz = 256,
    Text = 512,
}

fn is_null_word(s: &str) -> bool {
    s.len() <= 4
        && ["na", "n/a", "null", "none", "#n/a"]
            .iter()
            .any(|w| s.eq_ignore_ascii_case(w))
}

fn bool_word(s: &str) -> Option<bool> {
    if s.len() > 5 {
        return None;
    }
    let is = |w: &str| s.eq_ignore_ascii_case(w);
    if is("true") || is("yes") || is("t") {
        Some(true)
    } else if is("false") || is("no") || is("f") {
        Some(false)
    } else {
        None
    }
}

fn float_word(s: &str) -> Option<f64> {
    let (neg, w) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let x = if w.eq_ignore_ascii_case("inf") || w.eq_ignore_ascii_case("infinity") {
        f64::INFINITY
    } else if w.eq_ignore_ascii_case("nan") {
        f64::NAN
    } else {
        return None;
    };
    Some(if neg { -x } else { x })
}

/// The digits of an integer as a data tool writes one: `-?[0-9]+`, no leading zero, not
/// `-0`. Its value when it fits in 64 bits.
fn strict_int(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    // Accumulated as a negative number, which reaches i64::MIN.
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// Whether `b` is a decimal with a point or an exponent as [`Class::Float`] takes it.
fn strict_float(b: &[u8]) -> bool {
    let mut i = usize::from(b.first() == Some(&b'-'));
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_len = i - int_start;
    if int_len > 1 && b[int_start] == b'0' {
        return false;
    }
    let mut frac_len = 0;
    let mut point = false;
    if i < b.len() && b[i] == b'.' {
        point = true;
        i += 1;
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        frac_len = i - s;
    }
    if int_len + frac_len == 0 {
        return false;
    }
    let mut exp = false;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        exp = true;
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        let s = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == s {
            return false;
        }
    }
    i == b.len() && (point || exp)
}

fn num2(b: &[u8], at: usize) -> Option<u32> {
    let (x, y) = (*b.get(at)?, *b.get(at + 1)?);
    (x.is_ascii_digit() && y.is_ascii_digit())
        .then(|| u32::from(x - b'0') * 10 + u32::from(y - b'0'))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// A date at the start of `b` (`YYYY-MM-DD` or `YYYY/MM/DD`): its day number.
fn date_prefix(b: &[u8]) -> Option<i64> {
    if b.len() < 10 || !b[..4].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let sep = b[4];
    if (sep != b'-' && sep != b'/') || b[7] != sep {
        return None;
    }
    let y = i64::from(num2(b, 0)? * 100 + num2(b, 2)?);
    let (m, d) = (num2(b, 5)?, num2(b, 8)?);
    let days_in = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap(y) => 29,
        2 => 28,
        _ => return None,
    };
    (d >= 1 && d <= days_in).then(|| days_from_civil(y, m, d))
}

/// A date or timestamp: `(micros since the epoch, zoned)`, or the day for a date alone.
enum When {
    Date(i64),
    Ts(i64, bool),
}

fn when(b: &[u8]) -> Option<When> {
    let days = date_prefix(b)?;
    if b.len() == 10 {
        return Some(When::Date(days));
    }
    if b[10] != b' ' && b[10] != b'T' {
        return None;
    }
    let h = num2(b, 11)?;
    if b.get(13) != Some(&b':') {
        return None;
    }
    let mi = num2(b, 14)?;
    let mut i = 16;
    let mut s = 0;
    let mut micros = 0i64;
    if b.get(i) == Some(&b':') {
        s = num2(b, i + 1)?;
        i += 3;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let frac = &b[start..i];
            if frac.is_empty() || frac.len() > 9 {
                return None;
            }
            let mut us = 0i64;
            for k in 0..6 {
                us = us * 10 + frac.get(k).map_or(0, |d| i64::from(d - b'0'));
            }
            micros = us;
        }
    }
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut offset = 0i64;
    let mut zoned = false;
    match b.get(i) {
        None => {}
        Some(b'Z') if i + 1 == b.len() => zoned = true,
        Some(&sign @ (b'+' | b'-')) => {
            let oh = num2(b, i + 1)?;
            let rest = &b[i + 3..];
            let om = match rest {
                [] => 0,
                [b':', _, _] => num2(rest, 1)?,
                [_, _] => num2(rest, 0)?,
                _ => return None,
            };
            if oh > 23 || om > 59 {
                return None;
            }
            offset = i64::from(oh * 60 + om) * 60;
            if sign == b'-' {
                offset = -offset;
            }
            zoned = true;
        }
        _ => return None,
    }
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + s) - offset;
    Some(When::Ts(secs * 1_000_000 + micros, zoned))
}

fn classify(s: &str) -> Class {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return Class::Empty;
    };
    if first.is_ascii_digit() || first == b'-' || first == b'.' {
        if strict_int(b).is_some() {
            return Class::Int;
        }
        if strict_float(b) || b == b"-0" {
            return Class::Float;
        }
        if first.is_ascii_digit() {
            return match when(b) {
                Some(When::Date(_)) => Class::Date,
                Some(When::Ts(_, false)) => Class::Ts,
                Some(When::Ts(_, true)) => Class::TsTz,
                None => Class::Text,
            };
        }
    }
    if bool_word(s).is_some() {
        return Class::Bool;
    }
    if is_null_word(s) {
        return Class::NullWord;
    }
    if float_word(s).is_some() {
        return Class::FloatWord;
    }
    Class::Text
}

/// Chooses column types from the sampled rows.
#[derive(Debug, Clone, Default)]
pub struct Sniffer {
    seen: Vec<u16>,
}

impl Sniffer {
    /// A sniffer for `columns` columns.
    pub fn new(columns: usize) -> Sniffer {
        Sniffer {
            seen: vec![0; columns],
        }
    }

    /// Looks at one cell of column `i`.
    pub fn add(&mut self, i: usize, cell: &str) {
        if let Some(s) = self.seen.get_mut(i) {
            *s |= classify(cell) as u16;
        }
    }

    /// The type of each column, with the caller's overrides (unknown names are an error).
    pub fn types(&self, header: &[Arc<str>], typing: &Typing) -> Result<Vec<ColType>> {
        for (col, _) in &typing.overrides {
            if !header.iter().any(|h| **h == **col) {
                let names: Vec<String> = header.iter().take(50).map(|h| format!("{h:?}")).collect();
                return Err(anyhow!(
                    "`types` names {col:?}, which is not a column; the columns are {}",
                    names.join(", ")
                ));
            }
        }
        Ok(header
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let seen = self.seen.get(i).copied().unwrap_or(0);
                if typing.off {
                    return ColType::String;
                }
                match typing.overrides.iter().find(|(c, _)| **c == **h) {
                    Some((_, ColType::Timestamp)) if seen & Class::TsTz as u16 != 0 => {
                        ColType::TimestampTz
                    }
                    Some((_, t)) => *t,
                    None => decide(seen),
                }
            })
            .collect())
    }
}

fn decide(seen: u16) -> ColType {
    use Class as C;
    let s = seen & !(C::Empty as u16 | C::NullWord as u16);
    let only = |mask: u16| s != 0 && s & !mask == 0;
    let has = |c: Class| s & c as u16 != 0;
    if s == 0 || has(C::Text) {
        ColType::String
    } else if s == C::Bool as u16 {
        ColType::Boolean
    } else if only(C::Int as u16 | C::Float as u16 | C::FloatWord as u16) {
        if has(C::Float) || (has(C::Int) && has(C::FloatWord)) {
            ColType::Number
        } else if s == C::Int as u16 {
            ColType::Integer
        } else {
            ColType::String
        }
    } else if only(C::Date as u16 | C::Ts as u16 | C::TsTz as u16) {
        if s == C::Date as u16 {
            ColType::Date
        } else if s == C::TsTz as u16 {
            ColType::TimestampTz
        } else if !has(C::TsTz) {
            ColType::Timestamp
        } else {
            ColType::String
        }
    } else {
        ColType::String
    }
}

/// A cell as a value of its column's type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Typed<'a> {
    /// Null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (maybe not finite).
    Float(f64),
    /// Days since 1970-01-01.
    Date(i32),
    /// Microseconds since 1970-01-01 (UTC for a zoned column).
    Micros(i64),
    /// Text.
    Text(&'a str),
}

/// `s` as a value of `ty`, or `None` when it does not fit.
pub fn typed(ty: ColType, s: &str) -> Option<Typed<'_>> {
    if s.is_empty() {
        return Some(Typed::Null);
    }
    if ty == ColType::String {
        return Some(Typed::Text(s));
    }
    if is_null_word(s) {
        return Some(Typed::Null);
    }
    let b = s.as_bytes();
    match ty {
        ColType::String => Some(Typed::Text(s)),
        ColType::Boolean => bool_word(s).map(Typed::Bool),
        ColType::Integer => strict_int(b).or_else(|| lenient_int(s)).map(Typed::Int),
        ColType::Number => number(s).map(Typed::Float),
        ColType::Date => match when(b)? {
            When::Date(d) => i32::try_from(d).ok().map(Typed::Date),
            When::Ts(..) => None,
        },
        ColType::Timestamp => match when(b)? {
            When::Date(d) => Some(Typed::Micros(d.checked_mul(86_400_000_000)?)),
            When::Ts(us, false) => Some(Typed::Micros(us)),
            When::Ts(_, true) => None,
        },
        ColType::TimestampTz => match when(b)? {
            When::Ts(us, true) => Some(Typed::Micros(us)),
            _ => None,
        },
    }
}

/// An integer a person chose the type for: leading zeros and a `+` are fine.
fn lenient_int(s: &str) -> Option<i64> {
    let t = s.strip_prefix('+').unwrap_or(s);
    if t.is_empty() || !t.bytes().all(|c| c.is_ascii_digit() || c == b'-') {
        return None;
    }
    t.parse().ok()
}

/// A number cell's value.
pub fn number(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if strict_int(b).is_some() || strict_float(b) || b == b"-0" {
        return s.parse().ok();
    }
    if let Some(x) = float_word(s) {
        return Some(x);
    }
    // Leading zeros or a `+` when a person chose the type (or the integer is too long).
    let t = s.strip_prefix('+').unwrap_or(s);
    if t.bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'-' | b'.' | b'e' | b'E' | b'+'))
    {
        return t.parse().ok();
    }
    None
}

/// How the fast JSON path writes a checked cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonCell {
    /// `null`.
    Null,
    /// The cell's own text (a canonical integer).
    Verbatim,
    /// `true`.
    True,
    /// `false`.
    False,
    /// Parsed and written as serde_json writes the number (one that is not finite as its
    /// text, a JSON string).
    Number,
    /// An integer written as its value (leading zeros or a `+` dropped).
    Int,
    /// A JSON string of the text.
    Text,
}

/// How `s` goes to JSON in a column of `ty`, or `None` when it does not fit. Cheap: the
/// grammar is checked here, the number parsed only by the writer.
pub fn json_cell(ty: ColType, s: &str) -> Option<JsonCell> {
    if s.is_empty() {
        return Some(JsonCell::Null);
    }
    match ty {
        ColType::String => Some(JsonCell::Text),
        _ if is_null_word(s) => Some(JsonCell::Null),
        ColType::Integer => {
            if strict_int(s.as_bytes()).is_some() {
                Some(JsonCell::Verbatim)
            } else {
                lenient_int(s).map(|_| JsonCell::Int)
            }
        }
        ColType::Number => {
            let b = s.as_bytes();
            // The grammar only: the writer parses the number.
            let fits = strict_int(b).is_some()
                || strict_float(b)
                || b == b"-0"
                || float_word(s).is_some()
                || number(s).is_some();
            fits.then_some(JsonCell::Number)
        }
        ColType::Boolean => bool_word(s).map(|b| if b { JsonCell::True } else { JsonCell::False }),
        ColType::Date | ColType::Timestamp | ColType::TimestampTz => {
            typed(ty, s).map(|_| JsonCell::Text)
        }
    }
}

/// The JSON value of a cell of a column of `ty` (what the general path holds): numbers and
/// booleans as such, dates and timestamps as their text, and a float that is not finite
/// (`inf`, `nan`), which JSON has no number for, as its text too (a Parquet float column
/// reads it back as the float).
pub fn to_value(ty: ColType, s: &str) -> Option<Value> {
    Some(match typed(ty, s)? {
        Typed::Null => Value::Null,
        Typed::Bool(b) => Value::Bool(b),
        Typed::Int(i) => Value::from(i),
        Typed::Float(x) => Number::from_f64(x).map_or_else(|| Value::from(s), Value::Number),
        Typed::Date(_) | Typed::Micros(_) | Typed::Text(_) => Value::String(s.to_string()),
    })
}

/// The message of a cell that does not fit its column.
pub fn mismatch(column: &str, ty: ColType, s: &str) -> String {
    let shown: String = if s.chars().count() > 60 {
        let mut t: String = s.chars().take(57).collect();
        t.push('…');
        t
    } else {
        s.to_string()
    };
    format!(
        "column {column:?}: {shown:?} is not {} (the column's type, chosen from \
         the first {SAMPLE_ROWS} rows); set `types: [\"{column}=string\"]` to keep the \
         column as text",
        ty.expected()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(cells: &[&str]) -> ColType {
        let mut s = Sniffer::new(1);
        for c in cells {
            s.add(0, c);
        }
        s.types(&[Arc::from("a")], &Typing::default()).unwrap()[0]
    }

    #[test]
    fn columns_are_typed_as_a_data_tool_reads_them() {
        assert_eq!(col(&["1", "-2", ""]), ColType::Integer);
        assert_eq!(col(&["1.50", "13.80"]), ColType::Number);
        assert_eq!(col(&["9.7e-05", "1", "NA"]), ColType::Number);
        assert_eq!(col(&[".5", "-3.", "1E3"]), ColType::Number);
        assert_eq!(col(&["nan", "1"]), ColType::Number);
        assert_eq!(col(&["nan", "inf"]), ColType::String);
        assert_eq!(col(&["007", "12"]), ColType::String);
        assert_eq!(col(&["+5"]), ColType::String);
        assert_eq!(col(&["99999999999999999999"]), ColType::String);
        assert_eq!(col(&["true", "No", "YES"]), ColType::Boolean);
        assert_eq!(col(&["t", "F"]), ColType::Boolean);
        assert_eq!(col(&["F", "M"]), ColType::String);
        assert_eq!(col(&["0", "1"]), ColType::Integer);
        assert_eq!(col(&["2024-01-02", "2012/01/31"]), ColType::Date);
        assert_eq!(col(&["2024-02-30"]), ColType::String);
        assert_eq!(
            col(&[
                "2013-01-01 10:00:00",
                "2013-01-01T10:00:00.123",
                "2013-01-02"
            ]),
            ColType::Timestamp
        );
        assert_eq!(
            col(&["2013-01-01T10:00:00Z", "2013-01-01 10:00+02:00"]),
            ColType::TimestampTz
        );
        assert_eq!(
            col(&["2013-01-01T10:00:00Z", "2013-01-01"]),
            ColType::String
        );
        assert_eq!(col(&["10:00:00"]), ColType::String);
        assert_eq!(col(&["NA", ""]), ColType::String);
        assert_eq!(col(&["1", "x"]), ColType::String);
    }

    #[test]
    fn cells_get_their_columns_values() {
        assert_eq!(typed(ColType::Integer, "NA"), Some(Typed::Null));
        assert_eq!(typed(ColType::String, "NA"), Some(Typed::Text("NA")));
        assert_eq!(typed(ColType::Integer, "1.5"), None);
        assert_eq!(typed(ColType::Integer, "007"), Some(Typed::Int(7)));
        assert_eq!(
            typed(ColType::Number, "9.7e-05"),
            Some(Typed::Float(9.7e-05))
        );
        assert_eq!(typed(ColType::Date, "1970-01-02"), Some(Typed::Date(1)));
        assert_eq!(
            typed(ColType::Date, "2000-03-01"),
            Some(Typed::Date(11_017))
        );
        assert_eq!(
            typed(ColType::TimestampTz, "2013-01-01T10:00:00+02:00"),
            typed(ColType::TimestampTz, "2013-01-01T08:00:00Z")
        );
        assert_eq!(
            typed(ColType::Timestamp, "1970-01-01 00:00:01.5"),
            Some(Typed::Micros(1_500_000))
        );
        assert_eq!(typed(ColType::Timestamp, "1970-01-01T00:00:01Z"), None);
        assert_eq!(
            to_value(ColType::Number, "1.50"),
            Some(serde_json::json!(1.5))
        );
        assert_eq!(to_value(ColType::Number, "nan"), Some(Value::from("nan")));
        assert_eq!(to_value(ColType::Boolean, "Yes"), Some(Value::Bool(true)));
        assert_eq!(
            to_value(ColType::Date, "2012/01/31"),
            Some(Value::from("2012/01/31"))
        );
    }

    #[test]
    fn json_cells_agree_with_values() {
        for (ty, s) in [
            (ColType::Integer, "-12"),
            (ColType::Integer, "+12"),
            (ColType::Integer, "0012"),
            (ColType::Number, "1.50"),
            (ColType::Number, "1e3"),
            (ColType::Number, "-inf"),
            (ColType::Boolean, "no"),
            (ColType::Date, "2024-01-02"),
            (ColType::String, "NA"),
            (ColType::Number, "NA"),
        ] {
            assert_eq!(json_cell(ty, s).is_some(), to_value(ty, s).is_some(), "{s}");
        }
        assert_eq!(json_cell(ColType::Integer, "1.5"), None);
        assert_eq!(json_cell(ColType::Boolean, "maybe"), None);
    }
}
