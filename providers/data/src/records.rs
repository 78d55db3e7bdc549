//! Reading a [`Source`] as a stream of records, pushed to a callback one at a time.
//!
//! A record is its fields in order, each a name and a JSON value. CSV, TSV and xlsx header
//! names are shared (`Arc<str>`); CSV and TSV cells arrive as strings ([`Source::format`]
//! says so), typed later by whoever reads them ([`typed_cell`], or the schema in
//! `data__validate`). A row that cannot be read is an [`Item::Bad`] with its line, which the
//! caller counts, skips or turns into an error.

use std::fmt;
use std::io::{self, BufRead};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Number, Value};

use crate::csvtypes::{self, ColType, Sniffer, Typing, SAMPLE_BYTES, SAMPLE_ROWS};
use crate::format::Format;
use crate::source::{Body, Source};
use crate::InputLimits;

/// A record's fields, in order.
pub type Fields = Vec<(Arc<str>, Value)>;
/// Fields, or why a row is bad.
type RowResult = std::result::Result<Fields, (BadKind, String)>;

/// One record: where it was, and its fields in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Its line (CSV, TSV, JSONL), record number (JSON) or row (Parquet, xlsx), from 1.
    pub at: u64,
    /// Name and value of each field, in order.
    pub fields: Vec<(Arc<str>, Value)>,
}

impl Record {
    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v)
    }

    /// The record as a JSON object.
    pub fn to_object(&self) -> Map<String, Value> {
        self.fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

/// Why a row could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadKind {
    /// A CSV row with another number of fields than the header.
    Ragged,
    /// Not parseable (bad JSON, not an object, not UTF-8).
    Malformed,
    /// Over `max_line_bytes` or `max_cell_bytes`.
    TooLarge,
    /// A CSV cell that does not fit its column's type (see [`crate::csvtypes`]).
    TypeMismatch,
}

impl BadKind {
    /// Its name, for counts.
    pub fn name(self) -> &'static str {
        match self {
            BadKind::Ragged => "ragged",
            BadKind::Malformed => "malformed",
            BadKind::TooLarge => "too_large",
            BadKind::TypeMismatch => "type_mismatch",
        }
    }
}

/// What the reader pushes.
#[derive(Debug)]
pub enum Item {
    /// A record.
    Record(Record),
    /// A row that could not be read.
    Bad {
        /// Where.
        at: u64,
        /// Why, as a kind.
        kind: BadKind,
        /// Why, in words.
        message: String,
    },
}

/// Whether to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next record.
    Go,
    /// Stop reading (a limit the caller set was reached).
    Stop,
}

/// How a read ended.
#[derive(Debug, Clone, Default)]
pub struct End {
    /// Whether every row was read (not stopped by the caller).
    pub complete: bool,
    /// The header, for formats that have one.
    pub header: Option<Vec<Arc<str>>>,
    /// For CSV and TSV read typed, each column's type.
    pub types: Option<Vec<ColType>>,
}

/// The word for a record's place in this format: "line", "record" or "row".
pub fn place_word(format: Format) -> &'static str {
    match format {
        Format::Csv | Format::Tsv | Format::Jsonl => "line",
        Format::Json => "record",
        Format::Parquet | Format::Xlsx => "row",
    }
}

/// Whether the format's values are all text (typed by the reader of the records).
pub fn text_cells(format: Format) -> bool {
    matches!(format, Format::Csv | Format::Tsv)
}

/// A cheap stop check, called every few thousand rows.
pub type Cancelled<'a> = &'a dyn Fn() -> bool;

/// Reads every record of `src`, pushing each to `f` until it says [`Flow::Stop`]. CSV and
/// TSV cells arrive as text.
pub fn read(
    src: Source,
    limits: &InputLimits,
    sheet: Option<&str>,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    read_typed(src, limits, sheet, None, cancelled, f)
}

/// [`read`], with CSV and TSV cells typed by their columns (see [`crate::csvtypes`]) when
/// `typing` is given: a cell that does not fit is a bad row ([`BadKind::TypeMismatch`]), and
/// [`End::types`] holds the columns' types.
pub fn read_typed(
    src: Source,
    limits: &InputLimits,
    sheet: Option<&str>,
    typing: Option<&Typing>,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    let shown = src.shown.clone();
    let d = src.csv_dialect();
    let result = match (src.format, src.body) {
        (Format::Csv | Format::Tsv, Body::Text(r)) => {
            read_csv(r, d, &src.meter, limits, typing, cancelled, f)
        }
        (Format::Jsonl, Body::Text(r)) => {
            src.meter.stop_measuring();
            read_jsonl(r, limits, cancelled, f)
        }
        (Format::Json, Body::Text(r)) => read_json(r, &src.meter, limits, cancelled, f),
        (Format::Parquet, Body::File(file)) => crate::records::pq::read(file, cancelled, f),
        (Format::Xlsx, Body::File(file)) => {
            crate::records::xl::read(file, sheet, limits, cancelled, f)
        }
        (format, _) => Err(anyhow!("cannot read {} from this source", format.name())),
    };
    result.map_err(|e| anyhow!("{shown}: {e:#}"))
}

/// Names for a header row: blanks become `column_N`, repeats get `_2`, `_3`, ….
pub fn header_names(raw: impl Iterator<Item = String>) -> Vec<Arc<str>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (i, name) in raw.enumerate() {
        let base = if name.trim().is_empty() {
            format!("column_{}", i + 1)
        } else {
            name
        };
        let mut name = base.clone();
        let mut n = 2;
        while !seen.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        out.push(Arc::from(name.as_str()));
    }
    out
}

fn read_csv(
    r: Box<dyn BufRead>,
    d: crate::source::Dialect,
    meter: &crate::source::Meter,
    limits: &InputLimits,
    typing: Option<&Typing>,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    read_csv_rows(r, d, meter, typing, cancelled, &mut |row| {
        f(row.into_item(limits))
    })
}

/// A raw CSV row as [`read_typed`] gives it: each cell checked ([`check_csv_cell`]) and, when
/// `types` are given, typed by its column; a cell that is wrong makes it a bad row.
pub fn csv_item(
    at: u64,
    rec: &csv::ByteRecord,
    header: &[Arc<str>],
    types: &[ColType],
    limits: &InputLimits,
) -> Item {
    match csv_fields(rec, header, types, limits) {
        Ok(fields) => Item::Record(Record { at, fields }),
        Err((kind, why)) => Item::Bad {
            at,
            kind,
            message: format!("line {at}: {why}"),
        },
    }
}

impl CsvRow<'_> {
    /// The row as [`read_typed`] gives it (see [`csv_item`]).
    pub fn into_item(self, limits: &InputLimits) -> Item {
        match self {
            CsvRow::Bad(bad) => bad,
            CsvRow::Row {
                at,
                header,
                types,
                rec,
            } => csv_item(at, rec, header, types, limits),
        }
    }
}

/// A CSV or TSV row as read, before its cells are checked and turned into values.
pub enum CsvRow<'a> {
    /// A row with as many fields as the header.
    Row {
        /// Its line.
        at: u64,
        /// The header's names.
        header: &'a [Arc<str>],
        /// The columns' types (empty when the cells are not typed).
        types: &'a [ColType],
        /// The raw fields, unchecked (see [`check_csv_cell`]).
        rec: &'a csv::ByteRecord,
    },
    /// A ragged row.
    Bad(Item),
}

/// Reads the CSV or TSV of `src` (which must be one), pushing each row raw: the header
/// is read, blank lines skipped and ragged rows reported, as [`read`] does; with `typing`,
/// the columns' types are chosen from the first rows and given with each row.
pub fn read_csv_raw(
    src: Source,
    typing: Option<&Typing>,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(CsvRow<'_>) -> Result<Flow>,
) -> Result<End> {
    let shown = src.shown.clone();
    let d = src.csv_dialect();
    let result = match src.body {
        Body::Text(r) if text_cells(src.format) => {
            read_csv_rows(r, d, &src.meter, typing, cancelled, f)
        }
        _ => Err(anyhow!("cannot read {} as CSV", src.format.name())),
    };
    result.map_err(|e| anyhow!("{shown}: {e:#}"))
}

fn read_csv_rows(
    r: Box<dyn BufRead>,
    d: crate::source::Dialect,
    meter: &crate::source::Meter,
    typing: Option<&Typing>,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(CsvRow<'_>) -> Result<Flow>,
) -> Result<End> {
    let mut rdr = csv::ReaderBuilder::new()
        .delimiter(d.delimiter)
        .quote(d.quote)
        .has_headers(false)
        .flexible(true)
        .buffer_capacity(64 * 1024)
        .from_reader(r);
    let mut rec = csv::ByteRecord::new();
    let io_err = |e: csv::Error| anyhow!("{}", e);
    if !rdr.read_byte_record(&mut rec).map_err(io_err)? {
        return Ok(End {
            complete: true,
            header: Some(Vec::new()),
            types: typing.map(|_| Vec::new()),
        });
    }
    meter.mark();
    if std::str::from_utf8(rec.as_slice()).is_err() {
        bail!(
            "its first line (the header) is not UTF-8 text: this is not a CSV or TSV file \
             (give `format` if it is another data format)"
        );
    }
    let header = header_names(
        rec.iter()
            .map(|field| String::from_utf8_lossy(field).into_owned()),
    );
    let mut n: u64 = 0;
    // Reads the next row that is not blank: its line, or None at the end.
    let mut next = |rdr: &mut csv::Reader<Box<dyn BufRead>>,
                    rec: &mut csv::ByteRecord|
     -> Result<Option<u64>> {
        loop {
            let at = rdr.position().line();
            if !rdr.read_byte_record(rec).map_err(io_err)? {
                return Ok(None);
            }
            meter.mark();
            n += 1;
            if n.is_multiple_of(4096) && cancelled() {
                bail!("cancelled");
            }
            // A blank line is no row.
            if rec.len() == 1 && rec.get(0).is_some_and(|x| x.is_empty()) && header.len() > 1 {
                continue;
            }
            return Ok(Some(at));
        }
    };
    // With typing, the first rows are held to choose the columns' types.
    let mut sample: Vec<(u64, csv::ByteRecord)> = Vec::new();
    let mut types: Vec<ColType> = Vec::new();
    let mut sampled_to_end = false;
    if let Some(typing) = typing {
        let mut sniffer = Sniffer::new(header.len());
        let mut bytes = 0usize;
        while sample.len() < SAMPLE_ROWS && bytes < SAMPLE_BYTES {
            let Some(at) = next(&mut rdr, &mut rec)? else {
                sampled_to_end = true;
                break;
            };
            if rec.len() == header.len() && !typing.is_off() {
                for (i, cell) in rec.iter().enumerate() {
                    if let Ok(text) = std::str::from_utf8(cell) {
                        sniffer.add(i, text);
                    }
                }
            }
            bytes += rec.as_slice().len();
            sample.push((at, std::mem::take(&mut rec)));
        }
        types = sniffer.types(&header, typing)?;
    }
    let mut push = |at: u64, rec: &csv::ByteRecord| -> Result<Flow> {
        let row = if rec.len() != header.len() {
            CsvRow::Bad(Item::Bad {
                at,
                kind: BadKind::Ragged,
                message: format!(
                    "line {at} has {} fields, the header has {}",
                    rec.len(),
                    header.len()
                ),
            })
        } else {
            CsvRow::Row {
                at,
                header: &header,
                types: &types,
                rec,
            }
        };
        f(row)
    };
    let stopped = |header: Vec<Arc<str>>, types: Vec<ColType>| End {
        complete: false,
        header: Some(header),
        types: typing.map(|_| types),
    };
    for (at, held) in &sample {
        if push(*at, held)? == Flow::Stop {
            return Ok(stopped(header, types));
        }
    }
    drop(sample);
    if !sampled_to_end {
        while let Some(at) = next(&mut rdr, &mut rec)? {
            if push(at, &rec)? == Flow::Stop {
                return Ok(stopped(header, types));
            }
        }
    }
    Ok(End {
        complete: true,
        header: Some(header),
        types: typing.map(|_| types),
    })
}

/// Checks one raw CSV cell as [`read`] does (its size, then UTF-8), giving its text.
pub fn check_csv_cell<'a>(
    name: &str,
    raw: &'a [u8],
    limits: &InputLimits,
) -> std::result::Result<&'a str, (BadKind, String)> {
    if raw.len() as u64 > limits.max_cell_bytes {
        return Err((
            BadKind::TooLarge,
            format!(
                "column {name:?} holds {} bytes, more than the {}-byte limit ([data] \
                 max_cell_bytes)",
                raw.len(),
                limits.max_cell_bytes
            ),
        ));
    }
    std::str::from_utf8(raw).map_err(|_| {
        (
            BadKind::Malformed,
            format!("column {name:?} is not valid UTF-8 text"),
        )
    })
}

fn csv_fields(
    rec: &csv::ByteRecord,
    header: &[Arc<str>],
    types: &[ColType],
    limits: &InputLimits,
) -> RowResult {
    let mut fields = Vec::with_capacity(header.len());
    for (i, (name, raw)) in header.iter().zip(rec.iter()).enumerate() {
        let text = check_csv_cell(name, raw, limits)?;
        let value = match types.get(i) {
            None => Value::String(text.to_string()),
            Some(&ty) => csvtypes::to_value(ty, text)
                .ok_or_else(|| (BadKind::TypeMismatch, csvtypes::mismatch(name, ty, text)))?,
        };
        fields.push((name.clone(), value));
    }
    Ok(fields)
}

/// Reads one line into `buf` (without its end), at most `max` bytes; a longer line is read
/// past and dropped. `Ok(None)` at the end, `Ok(Some(false))` for a line too long.
fn next_line(r: &mut dyn BufRead, buf: &mut Vec<u8>, max: u64) -> io::Result<Option<bool>> {
    buf.clear();
    let mut any = false;
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(if any { Some(!too_long) } else { None });
        }
        any = true;
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if (buf.len() + take) as u64 > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(if done { take + 1 } else { take });
        if done {
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(Some(!too_long));
        }
    }
}

fn read_jsonl(
    r: Box<dyn BufRead>,
    limits: &InputLimits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    read_jsonl_lines(r, limits, cancelled, &mut |line| {
        f(match line {
            JsonlLine::Line { at, bytes } => jsonl_item(at, bytes, limits, cancelled),
            JsonlLine::Bad(bad) => bad,
        })
    })
}

/// The record (or bad row) of JSONL line `at`, as [`read`] gives it.
pub fn jsonl_item(at: u64, bytes: &[u8], limits: &InputLimits, cancelled: Cancelled<'_>) -> Item {
    match parse_record(bytes, limits, cancelled) {
        Ok(fields) => Item::Record(Record { at, fields }),
        Err((kind, why)) => Item::Bad {
            at,
            kind,
            message: format!("line {at}: {why}"),
        },
    }
}

/// A JSONL line as read, before it is parsed.
pub enum JsonlLine<'a> {
    /// A line that is not blank, without its end.
    Line {
        /// Its number.
        at: u64,
        /// Its bytes.
        bytes: &'a [u8],
    },
    /// A line too long.
    Bad(Item),
}

/// Reads the JSONL of `src` (which must be JSONL) a line at a time, unparsed: blank lines
/// are skipped and lines over `max_line_bytes` reported, as [`read`] does.
pub fn read_jsonl_raw(
    src: Source,
    limits: &InputLimits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(JsonlLine<'_>) -> Result<Flow>,
) -> Result<End> {
    let shown = src.shown.clone();
    let result = match (src.format, src.body) {
        (Format::Jsonl, Body::Text(r)) => {
            src.meter.stop_measuring();
            read_jsonl_lines(r, limits, cancelled, f)
        }
        (format, _) => Err(anyhow!("cannot read {} as JSONL", format.name())),
    };
    result.map_err(|e| anyhow!("{shown}: {e:#}"))
}

fn read_jsonl_lines(
    mut r: Box<dyn BufRead>,
    limits: &InputLimits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(JsonlLine<'_>) -> Result<Flow>,
) -> Result<End> {
    let mut buf = Vec::new();
    let mut at: u64 = 0;
    while let Some(fits) = next_line(&mut *r, &mut buf, limits.max_line_bytes)? {
        at += 1;
        if at.is_multiple_of(4096) && cancelled() {
            bail!("cancelled");
        }
        let line = if !fits {
            JsonlLine::Bad(Item::Bad {
                at,
                kind: BadKind::TooLarge,
                message: format!(
                    "line {at} is longer than {} bytes, the limit ([data] max_line_bytes)",
                    limits.max_line_bytes
                ),
            })
        } else {
            if buf.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            JsonlLine::Line { at, bytes: &buf }
        };
        if f(line)? == Flow::Stop {
            return Ok(End {
                complete: false,
                header: None,
                types: None,
            });
        }
    }
    Ok(End {
        complete: true,
        header: None,
        types: None,
    })
}

/// Parses one JSON object, keeping its keys in order.
fn parse_record(bytes: &[u8], limits: &InputLimits, cancelled: Cancelled<'_>) -> RowResult {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = ElementSeed::new(limits, cancelled)
        .deserialize(&mut de)
        .and_then(|el| de.end().map(|()| el));
    match parsed {
        Ok(Element::Object(fields)) => check_cells(fields, limits),
        Ok(Element::Other(v)) => Err((
            BadKind::Malformed,
            format!("{}, not a JSON object", toolbox_core::json_kind(&v)),
        )),
        Err(e) if e.to_string().starts_with(TOO_MANY_KEYS) => {
            // serde_json's own "at line 1 column N" says nothing more for a one-line record.
            let text = e.to_string();
            let why = text.split(" at line ").next().unwrap_or(&text).to_string();
            Err((BadKind::TooLarge, why))
        }
        Err(e) => Err((BadKind::Malformed, format!("invalid JSON: {e}"))),
    }
}

/// How an error for a record with too many keys begins (a bad row, counted as too large).
const TOO_MANY_KEYS: &str = "the record has more than";

fn check_cells(fields: Vec<(Arc<str>, Value)>, limits: &InputLimits) -> RowResult {
    for (k, v) in &fields {
        if let Value::String(s) = v {
            if s.len() as u64 > limits.max_cell_bytes {
                return Err((
                    BadKind::TooLarge,
                    format!(
                        "key {k:?} holds {} bytes, more than the {}-byte limit ([data] \
                         max_cell_bytes)",
                        s.len(),
                        limits.max_cell_bytes
                    ),
                ));
            }
        }
    }
    Ok(fields)
}

/// A JSON value as read for a record: an object with its keys in order, or anything else.
enum Element {
    Object(Vec<(Arc<str>, Value)>),
    Other(Value),
}

/// Reads one [`Element`]: at most `[data] max_record_keys` keys, a repeated key found by
/// hash (the work is linear in the record's size), and the call's cancellation looked at
/// every few thousand keys, so even one huge record stops when its call does.
#[derive(Clone, Copy)]
struct ElementSeed<'a> {
    max_keys: u64,
    cancelled: Cancelled<'a>,
}

impl<'a> ElementSeed<'a> {
    fn new(limits: &InputLimits, cancelled: Cancelled<'a>) -> Self {
        ElementSeed {
            max_keys: limits.max_record_keys,
            cancelled,
        }
    }
}

impl<'de> DeserializeSeed<'de> for ElementSeed<'_> {
    type Value = Element;
    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> std::result::Result<Element, D::Error> {
        d.deserialize_any(ElementVisitor(self))
    }
}

struct ElementVisitor<'a>(ElementSeed<'a>);

impl<'de> Visitor<'de> for ElementVisitor<'_> {
    type Value = Element;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Element, A::Error> {
        let ElementSeed {
            max_keys,
            cancelled,
        } = self.0;
        let mut fields: Vec<(Arc<str>, Value)> = Vec::new();
        // Past a few keys, where each key sits: a repeated key is found by hash.
        let mut index: Option<std::collections::HashMap<Arc<str>, usize>> = None;
        while let Some((k, v)) = map.next_entry::<String, Value>()? {
            if fields.len() % 4096 == 4095 && cancelled() {
                return Err(serde::de::Error::custom("cancelled"));
            }
            // A repeated key: the last one wins, as in serde_json.
            let slot = match &index {
                Some(index) => index.get(k.as_str()).copied(),
                None => fields.iter().position(|(name, _)| **name == *k),
            };
            if let Some(i) = slot {
                fields[i].1 = v;
                continue;
            }
            if fields.len() as u64 >= max_keys {
                return Err(serde::de::Error::custom(format!(
                    "{TOO_MANY_KEYS} {max_keys} keys, the limit ([data] max_record_keys)"
                )));
            }
            let name: Arc<str> = Arc::from(k.as_str());
            if let Some(index) = &mut index {
                index.insert(name.clone(), fields.len());
            } else if fields.len() == 32 {
                let mut built: std::collections::HashMap<Arc<str>, usize> = fields
                    .iter()
                    .enumerate()
                    .map(|(i, (n, _))| (n.clone(), i))
                    .collect();
                built.insert(name.clone(), fields.len());
                index = Some(built);
            }
            fields.push((name, v));
        }
        Ok(Element::Object(fields))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<Element, A::Error> {
        Value::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(Element::Other)
    }

    fn visit_bool<E>(self, v: bool) -> std::result::Result<Element, E> {
        Ok(Element::Other(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> std::result::Result<Element, E> {
        Ok(Element::Other(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> std::result::Result<Element, E> {
        Ok(Element::Other(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> std::result::Result<Element, E> {
        Ok(Element::Other(
            Number::from_f64(v).map_or(Value::Null, Value::Number),
        ))
    }

    fn visit_str<E>(self, v: &str) -> std::result::Result<Element, E> {
        Ok(Element::Other(Value::String(v.to_string())))
    }

    fn visit_unit<E>(self) -> std::result::Result<Element, E> {
        Ok(Element::Other(Value::Null))
    }
}

/// Streams the elements of one top-level JSON array to the callback, in bounded memory.
fn read_json(
    r: Box<dyn BufRead>,
    meter: &crate::source::Meter,
    limits: &InputLimits,
    cancelled: Cancelled<'_>,
    f: &mut dyn FnMut(Item) -> Result<Flow>,
) -> Result<End> {
    struct Seed<'a> {
        f: &'a mut dyn FnMut(Item) -> Result<Flow>,
        meter: &'a crate::source::Meter,
        limits: &'a InputLimits,
        cancelled: Cancelled<'a>,
        stop: &'a mut Option<anyhow::Result<()>>,
    }
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(
            self,
            d: D,
        ) -> std::result::Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON array of objects")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            let mut at = 0u64;
            while let Some(el) =
                seq.next_element_seed(ElementSeed::new(self.limits, self.cancelled))?
            {
                self.meter.mark();
                at += 1;
                if at.is_multiple_of(4096) && (self.cancelled)() {
                    *self.stop = Some(Err(anyhow!("cancelled")));
                    return Err(serde::de::Error::custom("stopped"));
                }
                let item = match el {
                    Element::Object(fields) => match check_cells(fields, self.limits) {
                        Ok(fields) => Item::Record(Record { at, fields }),
                        Err((kind, why)) => Item::Bad {
                            at,
                            kind,
                            message: format!("record {at}: {why}"),
                        },
                    },
                    Element::Other(v) => Item::Bad {
                        at,
                        kind: BadKind::Malformed,
                        message: format!(
                            "record {at} is {}, not a JSON object",
                            toolbox_core::json_kind(&v)
                        ),
                    },
                };
                match (self.f)(item) {
                    Ok(Flow::Go) => {}
                    Ok(Flow::Stop) => {
                        *self.stop = Some(Ok(()));
                        return Err(serde::de::Error::custom("stopped"));
                    }
                    Err(e) => {
                        *self.stop = Some(Err(e));
                        return Err(serde::de::Error::custom("stopped"));
                    }
                }
            }
            Ok(())
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<(), A::Error> {
            // One object on its own is one record.
            let el =
                ElementVisitor(ElementSeed::new(self.limits, self.cancelled)).visit_map(map)?;
            if let Element::Object(fields) = el {
                let item = Item::Record(Record { at: 1, fields });
                if let Err(e) = (self.f)(item) {
                    *self.stop = Some(Err(e));
                    return Err(serde::de::Error::custom("stopped"));
                }
            }
            Ok(())
        }
    }
    let mut stop = None;
    let mut de = serde_json::Deserializer::from_reader(r);
    let seed = Seed {
        f,
        meter,
        limits,
        cancelled,
        stop: &mut stop,
    };
    let result = seed.deserialize(&mut de).and_then(|()| de.end());
    match (result, stop) {
        (_, Some(Ok(()))) => Ok(End {
            complete: false,
            header: None,
            types: None,
        }),
        (_, Some(Err(e))) => Err(e),
        (Ok(()), None) => Ok(End {
            complete: true,
            header: None,
            types: None,
        }),
        (Err(e), None) => Err(anyhow!("invalid JSON: {e}")).context("not a JSON array of objects"),
    }
}

/// The value a CSV cell most plainly is: empty is `null`; `true`/`false`; an integer or a
/// number whose text is exactly how JSON writes it (so `007`, `1e3` or `1.50` stay text and
/// nothing is lost); anything else a string.
pub fn typed_cell(s: &str) -> Value {
    if s.is_empty() {
        return Value::Null;
    }
    match s {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    let b = s.as_bytes();
    let numeric = b[0] == b'-' || b[0].is_ascii_digit();
    if numeric {
        if let Ok(i) = s.parse::<i64>() {
            if i.to_string() == s {
                return Value::from(i);
            }
        } else if let Ok(x) = s.parse::<f64>() {
            if x.is_finite() {
                if let Some(n) = Number::from_f64(x) {
                    if n.to_string() == s {
                        return Value::Number(n);
                    }
                }
            }
        }
    }
    Value::String(s.to_string())
}

pub mod pq;
pub mod xl;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_typed_without_loss() {
        assert_eq!(typed_cell(""), Value::Null);
        assert_eq!(typed_cell("42"), Value::from(42));
        assert_eq!(typed_cell("-3"), Value::from(-3));
        assert_eq!(typed_cell("007"), Value::from("007"));
        assert_eq!(typed_cell("1.5"), serde_json::json!(1.5));
        assert_eq!(typed_cell("1.50"), Value::from("1.50"));
        assert_eq!(typed_cell("true"), Value::Bool(true));
        assert_eq!(typed_cell("NaN"), Value::from("NaN"));
    }

    #[test]
    fn lines_are_capped_and_skipped_past() {
        let data = b"short\r\n0123456789abcdef\nend";
        let mut r: &[u8] = data;
        let mut buf = Vec::new();
        assert_eq!(next_line(&mut r, &mut buf, 8).unwrap(), Some(true));
        assert_eq!(buf, b"short");
        assert_eq!(next_line(&mut r, &mut buf, 8).unwrap(), Some(false));
        assert_eq!(next_line(&mut r, &mut buf, 8).unwrap(), Some(true));
        assert_eq!(buf, b"end");
        assert_eq!(next_line(&mut r, &mut buf, 8).unwrap(), None);
    }

    #[test]
    fn headers_are_named_and_unique() {
        let h = header_names(["a", "", "a"].into_iter().map(String::from));
        let h: Vec<&str> = h.iter().map(|s| &**s).collect();
        assert_eq!(h, ["a", "column_2", "a_2"]);
    }
}

#[cfg(test)]
mod wide_record_tests {
    use super::*;

    fn wide(keys: usize) -> Vec<u8> {
        let mut text = String::from("{");
        for i in 0..keys {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!("\"k{i}\":{i}"));
        }
        text.push('}');
        text.into_bytes()
    }

    #[test]
    fn keys_past_the_limit_are_a_bad_row_and_repeats_still_take_the_last_value() {
        let limits = InputLimits {
            max_record_keys: 1000,
            ..InputLimits::default()
        };
        let (kind, why) = parse_record(&wide(1001), &limits, &|| false).unwrap_err();
        assert_eq!(kind, BadKind::TooLarge);
        assert_eq!(
            why,
            "the record has more than 1000 keys, the limit ([data] max_record_keys)"
        );
        let fields = parse_record(&wide(1000), &limits, &|| false).unwrap();
        assert_eq!(fields.len(), 1000);
        // A repeated key past the hashed threshold replaces the first, in its place.
        let mut text = wide(100);
        text.pop();
        text.extend_from_slice(b",\"k50\":\"again\"}");
        let fields = parse_record(&text, &limits, &|| false).unwrap();
        assert_eq!(fields.len(), 100);
        assert_eq!(&*fields[50].0, "k50");
        assert_eq!(fields[50].1, Value::String("again".into()));
    }

    #[test]
    fn a_cancelled_call_stops_inside_one_wide_record() {
        let limits = InputLimits {
            max_record_keys: 1_000_000,
            ..InputLimits::default()
        };
        let (kind, why) = parse_record(&wide(20_000), &limits, &|| true).unwrap_err();
        assert_eq!(kind, BadKind::Malformed);
        assert!(why.contains("cancelled"), "{why}");
    }
}
