//! The conversions' fast paths, which skip building JSON values per record: CSV cells
//! typed and written as JSON text straight from the reader's bytes, and JSONL records parsed
//! into borrowed scalars for the Parquet column builders. Each gives byte-for-byte what the
//! general path gives (tested against it); anything unusual is left to the general path.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, Write as _};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Number, Value};

use crate::csvtypes::{self, ColType, JsonCell, Typed};

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
#[cfg(test)]
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    push_json_bytes(out, s.as_bytes());
}

/// [`push_json_str`] of the bytes of a text (escaping works byte by byte: the bytes of
/// characters past ASCII are copied as they are).
fn push_json_bytes(out: &mut Vec<u8>, b: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&b[start..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(c >> 4)]);
            out.push(HEX[usize::from(c & 0xf)]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

/// Appends a CSV cell of a column of `ty` as the JSON value the general path makes of it
/// ([`csvtypes::to_value`]), as the writing thread of [`JsonRows`] does.
#[cfg(test)]
pub fn push_typed_cell(out: &mut Vec<u8>, ty: ColType, s: &str) -> bool {
    match csvtypes::json_cell(ty, s) {
        Some(kind) => {
            push_cell(out, kind, s.as_bytes());
            true
        }
        None => false,
    }
}

/// Appends a checked cell as JSON.
fn push_cell(out: &mut Vec<u8>, kind: JsonCell, cell: &[u8]) {
    match kind {
        JsonCell::Null => out.extend_from_slice(b"null"),
        JsonCell::Verbatim => out.extend_from_slice(cell),
        JsonCell::True => out.extend_from_slice(b"true"),
        JsonCell::False => out.extend_from_slice(b"false"),
        JsonCell::Text => push_json_bytes(out, cell),
        JsonCell::Number => {
            let x = std::str::from_utf8(cell).ok().and_then(csvtypes::number);
            match x {
                // As serde_json writes an f64: its shortest form.
                Some(x) if x.is_finite() => {
                    let _ = serde_json::to_writer(&mut *out, &x);
                }
                // `inf`, `nan`: JSON has no such number, so the text stays.
                Some(_) => push_json_bytes(out, cell),
                None => out.extend_from_slice(b"null"),
            }
        }
        JsonCell::Int => match std::str::from_utf8(cell).ok().and_then(|t| {
            csvtypes::typed(ColType::Integer, t).and_then(|v| match v {
                Typed::Int(i) => Some(i),
                _ => None,
            })
        }) {
            Some(i) => {
                let _ = write!(out, "{i}");
            }
            None => out.extend_from_slice(b"null"),
        },
    }
}

/// `"name":` for each column, as serde_json writes the key.
pub fn json_keys(header: &[Arc<str>]) -> Vec<Vec<u8>> {
    header
        .iter()
        .map(|k| {
            let mut key = serde_json::to_vec(&**k).unwrap_or_default();
            key.push(b':');
            key
        })
        .collect()
}

/// A top-level value of a JSONL record, its strings borrowed from the line when they
/// have no escapes; nested values are whole JSON values.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer serde_json read as signed (negative).
    I64(i64),
    /// An integer serde_json read as unsigned.
    U64(u64),
    /// Any other number.
    F64(f64),
    /// A string.
    Str(Cow<'a, str>),
    /// An array or an object.
    Nested(Value),
}

impl Scalar<'_> {
    /// The JSON value the general path holds for it.
    pub fn to_value(&self) -> Value {
        match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::I64(i) => Value::from(*i),
            Scalar::U64(u) => Value::from(*u),
            Scalar::F64(x) => Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Scalar::Str(s) => Value::String(s.to_string()),
            Scalar::Nested(v) => v.clone(),
        }
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
        // As serde_json's Value: a non-negative one is the same number read unsigned.
        Ok(match u64::try_from(v) {
            Ok(u) => Scalar::U64(u),
            Err(_) => Scalar::I64(v),
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
        Ok(if v.is_finite() {
            Scalar::F64(v)
        } else {
            Scalar::Null
        })
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E>(self, v: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_none<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
        Value::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(Scalar::Nested)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
        Value::deserialize(de::value::MapAccessDeserializer::new(map)).map(Scalar::Nested)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// A key, borrowed when it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The common shape of a JSONL record read without serde: a flat object whose strings have
/// no escapes and whose values are strings, numbers, booleans or null. `None` for anything
/// else (an escape, a nested value, a long integer, a syntax error), which
/// [`parse_row`] then reads with serde_json, so the values are always serde_json's.
fn scan_row<'de>(
    text: &'de str,
    columns: &[Arc<str>],
    row: &mut Vec<(usize, Scalar<'de>)>,
) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return (skip_ws(b, i + 1) == b.len()).then_some(0);
    }
    // The row's first `n` entries are this line's; the vector keeps its length from line to
    // line, so most values are stored in place rather than pushed.
    let mut n = 0;
    let mut hint = 0;
    let mut seen: u128 = 0;
    loop {
        let (key, next) = scan_str(text, i)?;
        i = skip_ws(b, next);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let (value, next) = scan_value(text, i)?;
        i = skip_ws(b, next);
        let at = if columns.get(hint).is_some_and(|c| same(c, key)) {
            hint
        } else {
            columns.iter().position(|c| same(c, key))?
        };
        hint = at + 1;
        // A repeated key (its last value wins) is told by a bit per column, so a row's work
        // stays linear; past 128 columns, by a look through the row.
        let repeat = match 1u128.checked_shl(at as u32) {
            Some(bit) if at < 128 => {
                let again = seen & bit != 0;
                seen |= bit;
                again
            }
            _ => row[..n].iter().any(|(c, _)| *c == at),
        };
        if repeat {
            if let Some(slot) = row[..n].iter_mut().find(|(c, _)| *c == at) {
                slot.1 = value;
            }
        } else if n < row.len() {
            row[n] = (at, value);
            n += 1;
        } else {
            row.push((at, value));
            n += 1;
        }
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => break,
            _ => return None,
        }
    }
    (skip_ws(b, i + 1) == b.len()).then_some(n)
}

/// Past JSON's whitespace from `i`.
#[inline]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// A string without escapes at `i` (its opening quote), and where it ends.
#[inline]
fn scan_str(text: &str, i: usize) -> Option<(&str, usize)> {
    let b = text.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'"' => return Some((&text[i + 1..j], j + 1)),
            b'\\' | 0..=0x1f => return None,
            _ => j += 1,
        }
    }
    None
}

/// A scalar at `i`, and where it ends; `None` for a nested value or anything unusual.
#[inline]
fn scan_value(text: &str, i: usize) -> Option<(Scalar<'_>, usize)> {
    let b = text.as_bytes();
    let word = |w: &[u8], v: Scalar<'static>| {
        b.get(i..i + w.len())
            .filter(|s| *s == w)
            .map(|_| (v, i + w.len()))
    };
    match *b.get(i)? {
        b'"' => scan_str(text, i).map(|(s, end)| (Scalar::Str(Cow::Borrowed(s)), end)),
        b't' => word(b"true", Scalar::Bool(true)),
        b'f' => word(b"false", Scalar::Bool(false)),
        b'n' => word(b"null", Scalar::Null),
        b'-' | b'0'..=b'9' => {
            let start = i;
            let mut j = i + usize::from(b[i] == b'-');
            let digits = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let n = j - digits;
            // JSON: one digit at least, and no leading zero.
            if n == 0 || (n > 1 && b[digits] == b'0') {
                return None;
            }
            let integer = !matches!(b.get(j), Some(b'.' | b'e' | b'E'));
            if integer && n <= 18 && !(n == 1 && b[digits] == b'0' && digits > start) {
                let v: i64 = text[digits..j].parse().ok()?;
                return Some(if digits > start {
                    (Scalar::I64(-v), j)
                } else {
                    (Scalar::U64(v as u64), j)
                });
            }
            // Anything else (a fraction, an exponent, -0, a long integer): serde_json's own
            // number, as the general path reads it.
            while j < b.len() && matches!(b[j], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                j += 1;
            }
            let v: Scalar<'_> = serde_json::from_str(&text[start..j]).ok()?;
            matches!(v, Scalar::I64(_) | Scalar::U64(_) | Scalar::F64(_)).then_some((v, j))
        }
        _ => None,
    }
}

/// Whether two short texts (a key and a column name) are equal: compared in line, since a
/// call to `memcmp` per key cost more than the comparison.
#[inline]
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// [`parse_row_into`] into a new vector.
#[cfg(test)]
pub fn parse_row<'de>(line: &'de [u8], columns: &[Arc<str>]) -> Option<Vec<(usize, Scalar<'de>)>> {
    let mut row = Vec::with_capacity(columns.len());
    let n = parse_row_into(line, columns, &mut row)?;
    row.truncate(n);
    Some(row)
}

/// Reads one JSON object whose keys are all among `columns` into the first `n` entries of
/// `row` as `(column, value)` pairs in first-seen order, a repeated key's last value winning
/// (as the general reader does), and gives `n`; a caller parsing many lines of one buffer
/// reuses one vector (entries past `n` are left from earlier lines). `None` for anything
/// else (not an object, invalid JSON, trailing text, another key): the general path then
/// reads the line and says what is wrong.
pub fn parse_row_into<'de>(
    line: &'de [u8],
    columns: &[Arc<str>],
    row: &mut Vec<(usize, Scalar<'de>)>,
) -> Option<usize> {
    parse_row_serde(line, columns, row)
}

fn parse_row_serde<'de>(
    line: &'de [u8],
    columns: &[Arc<str>],
    row: &mut Vec<(usize, Scalar<'de>)>,
) -> Option<usize> {
    struct Row<'c> {
        columns: &'c [Arc<str>],
    }
    impl<'de> DeserializeSeed<'de> for Row<'_> {
        type Value = Vec<(usize, Scalar<'de>)>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Row<'_> {
        type Value = Vec<(usize, Scalar<'de>)>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let cols = self.columns;
            let mut row: Vec<(usize, Scalar<'de>)> = Vec::with_capacity(cols.len());
            let mut hint = 0;
            while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
                let at = if cols.get(hint).is_some_and(|c| same(c, &k)) {
                    hint
                } else {
                    cols.iter()
                        .position(|c| same(c, &k))
                        .ok_or_else(|| de::Error::custom("another key"))?
                };
                hint = at + 1;
                let v: Scalar<'de> = map.next_value()?;
                match row.iter_mut().find(|(i, _)| *i == at) {
                    Some(slot) => slot.1 = v,
                    None => row.push((at, v)),
                }
            }
            Ok(row)
        }
    }
    // One UTF-8 check of the whole line, rather than one per string (from_slice's).
    let text = std::str::from_utf8(line).ok()?;
    if let Some(n) = scan_row(text, columns, row) {
        return Some(n);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    *row = Row { columns }.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(row.len())
}

/// CSV rows whose cells were checked (size, UTF-8), on their way to a thread that types
/// them, writes them as JSON objects (one a line, or the elements of one array) and writes
/// those to the file: the reading thread parses CSV while this one writes JSON.
pub struct JsonRows {
    columns: usize,
    types: Vec<ColType>,
    batch: CellBatch,
    jobs: Option<SyncSender<Job>>,
    spare: Receiver<CellBatch>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

/// Rows of cells: their bytes end to end, and where each cell ends.
#[derive(Default)]
struct CellBatch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    /// How each cell is written, checked by the reading thread.
    kinds: Vec<JsonCell>,
    rows: usize,
}

enum Job {
    Rows(CellBatch),
    Finish,
}

/// Rows a batch holds before it goes to the writing thread.
const BATCH_ROWS: usize = 4096;

impl JsonRows {
    /// Starts the writing thread on `file` (a handle of the output), for rows of `keys`
    /// (see [`json_keys`]) whose columns are of `types`; `array` for JSON, else JSONL.
    pub fn start(
        file: File,
        keys: Vec<Vec<u8>>,
        types: Vec<ColType>,
        array: bool,
    ) -> io::Result<JsonRows> {
        let columns = keys.len();
        // Two batches queued, two more being filled or written: memory stays a few MiB.
        let (jobs, todo) = std::sync::mpsc::sync_channel::<Job>(2);
        let (give_back, spare) = std::sync::mpsc::sync_channel::<CellBatch>(4);
        let thread = std::thread::Builder::new()
            .name("json-writer".into())
            .spawn(move || -> io::Result<()> {
                let mut file = FileWriter::start(file)?;
                let mut out: Vec<u8> = Vec::with_capacity(OUT_BYTES + 64 * 1024);
                let mut n: u64 = 0;
                for job in todo {
                    let mut batch = match job {
                        Job::Rows(b) => b,
                        Job::Finish => {
                            if array {
                                out.extend_from_slice(if n == 0 { b"[]\n" } else { b"\n]\n" });
                            }
                            file.write(out)?;
                            return file.finish();
                        }
                    };
                    let mut start = 0;
                    let mut cells = batch.ends.iter().zip(&batch.kinds);
                    for _ in 0..batch.rows {
                        if array {
                            out.extend_from_slice(if n == 0 { b"[\n" } else { b",\n" });
                        }
                        out.push(b'{');
                        for (i, key) in keys.iter().enumerate() {
                            let (end, kind) = cells
                                .next()
                                .map_or((start, JsonCell::Null), |(e, k)| (*e, *k));
                            let cell = &batch.bytes[start..end];
                            start = end;
                            if i > 0 {
                                out.push(b',');
                            }
                            out.extend_from_slice(key);
                            push_cell(&mut out, kind, cell);
                        }
                        out.push(b'}');
                        if !array {
                            out.push(b'\n');
                        }
                        n += 1;
                        if out.len() >= OUT_BYTES {
                            out = file.write(out)?;
                        }
                    }
                    batch.bytes.clear();
                    batch.ends.clear();
                    batch.kinds.clear();
                    batch.rows = 0;
                    let _ = give_back.try_send(batch);
                }
                // The reader went away without finishing: the conversion failed.
                Ok(())
            })?;
        Ok(JsonRows {
            columns,
            types,
            batch: CellBatch::default(),
            jobs: Some(jobs),
            spare,
            thread: Some(thread),
        })
    }

    /// Types and queues one row (as many cells as the keys) when every cell is within
    /// `max_cell_bytes`, valid UTF-8 (checked as one text, then that no cell splits a
    /// character) and fits its column's type; `false`, queuing nothing, otherwise: the
    /// caller checks cell by cell, and says which is wrong.
    pub fn try_push(&mut self, rec: &csv::ByteRecord, max_cell_bytes: u64) -> io::Result<bool> {
        let Ok(all) = std::str::from_utf8(rec.as_slice()) else {
            return Ok(false);
        };
        let mark = (self.batch.ends.len(), self.batch.kinds.len());
        let base = self.batch.bytes.len();
        let mut start = 0;
        for (cell, ty) in rec.iter().take(self.columns).zip(&self.types) {
            let end = start + cell.len();
            let kind = all
                .get(start..end)
                .filter(|_| cell.len() as u64 <= max_cell_bytes)
                .and_then(|text| csvtypes::json_cell(*ty, text));
            let Some(kind) = kind else {
                self.batch.ends.truncate(mark.0);
                self.batch.kinds.truncate(mark.1);
                return Ok(false);
            };
            self.batch.ends.push(base + end);
            self.batch.kinds.push(kind);
            start = end;
        }
        self.batch.bytes.extend_from_slice(&rec.as_slice()[..start]);
        self.row_done()?;
        Ok(true)
    }

    fn row_done(&mut self) -> io::Result<()> {
        self.batch.rows += 1;
        if self.batch.rows >= BATCH_ROWS {
            let next = self.spare.try_recv().unwrap_or_default();
            let full = std::mem::replace(&mut self.batch, next);
            self.send(Job::Rows(full))?;
        }
        Ok(())
    }

    fn send(&mut self, job: Job) -> io::Result<()> {
        if self.jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok()) {
            return Ok(());
        }
        // The thread stopped early: its error says why.
        self.join()?;
        Err(io::Error::other("the JSON writer stopped"))
    }

    fn join(&mut self) -> io::Result<()> {
        self.jobs = None;
        join_worker(&mut self.thread, "the JSON writer")
    }

    /// Writes the rows queued and the end of the output, and waits for the thread.
    pub fn finish(mut self) -> io::Result<()> {
        if self.batch.rows > 0 {
            let last = std::mem::take(&mut self.batch);
            self.send(Job::Rows(last))?;
        }
        self.send(Job::Finish)?;
        self.join()
    }
}

impl Drop for JsonRows {
    fn drop(&mut self) {
        // Never leave the thread writing after the conversion gave up.
        let _ = self.join();
    }
}

/// Waits for a worker thread (once its queue is closed), passing on its error; a panic is an
/// error naming `what`.
fn join_worker(thread: &mut Option<JoinHandle<io::Result<()>>>, what: &str) -> io::Result<()> {
    match thread.take() {
        Some(t) => t
            .join()
            .map_err(|_| io::Error::other(format!("{what} panicked")))?,
        None => Ok(()),
    }
}

/// Bytes of JSON gathered before each write to the file.
const OUT_BYTES: usize = 1 << 20;

/// A thread that writes full buffers to a file, in order, and hands them back empty: the
/// kernel's copy into the page cache (a large share of writing a big output) runs beside
/// the formatting rather than in turn with it.
struct FileWriter {
    full: Option<SyncSender<Vec<u8>>>,
    empty: Receiver<Vec<u8>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl FileWriter {
    fn start(mut file: File) -> io::Result<FileWriter> {
        // Two buffers queued, one being written, one being filled: 4 MiB.
        let (full, todo) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        let (back, empty) = std::sync::mpsc::sync_channel::<Vec<u8>>(3);
        let thread = std::thread::Builder::new()
            .name("file-writer".into())
            .spawn(move || -> io::Result<()> {
                for mut buf in todo {
                    file.write_all(&buf)?;
                    buf.clear();
                    let _ = back.try_send(buf);
                }
                file.flush()
            })?;
        Ok(FileWriter {
            full: Some(full),
            empty,
            thread: Some(thread),
        })
    }

    /// Queues `buf` to be written; returns an empty buffer to fill next.
    fn write(&mut self, buf: Vec<u8>) -> io::Result<Vec<u8>> {
        if self.full.as_ref().is_none_or(|tx| tx.send(buf).is_err()) {
            // The thread stopped early: its error says why.
            self.join()?;
            return Err(io::Error::other("the file writer stopped"));
        }
        Ok(self
            .empty
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(OUT_BYTES + 64 * 1024)))
    }

    fn join(&mut self) -> io::Result<()> {
        self.full = None;
        join_worker(&mut self.thread, "the file writer")
    }

    /// Writes what is queued, flushes, and waits for the thread.
    fn finish(mut self) -> io::Result<()> {
        self.join()
    }
}

impl Drop for FileWriter {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strings that test the edges of typing and escaping.
    fn awkward() -> Vec<String> {
        let mut v: Vec<String> = [
            "",
            "0",
            "-0",
            "00",
            "007",
            "-007",
            "42",
            "-3",
            "+5",
            "1.5",
            "1.50",
            "1e5",
            "1E5",
            "1e+5",
            "100000.0",
            "1e21",
            "1e-7",
            "0.1",
            "-0.0",
            "0.0",
            ".5",
            "5.",
            "-",
            "--1",
            "NaN",
            "inf",
            "-inf",
            "Infinity",
            "true",
            "false",
            "True",
            "null",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
            "123456789012345678901234567890",
            "1.7976931348623157e308",
            "1e400",
            "5e-324",
            "12.345",
            "2024-05-06",
            " 1",
            "1 ",
            "1_000",
            "0x10",
            "a\"b",
            "back\\slash",
            "line\nbreak",
            "cr\r\nlf",
            "tab\there",
            "\u{0}\u{1}\u{1f}\u{7f}",
            "\u{8}\u{c}",
            "Zürich",
            "日本語",
            "emoji 😀",
            "\u{2028}\u{2029}",
            "</script>",
            "comma, inside",
            "'single'",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for c in 0u32..0x80 {
            v.push(format!("x{}y", char::from_u32(c).unwrap()));
        }
        v
    }

    #[test]
    fn cells_type_and_escape_as_the_general_path_does() {
        let types = [
            ColType::Integer,
            ColType::Number,
            ColType::Boolean,
            ColType::Date,
            ColType::Timestamp,
            ColType::TimestampTz,
            ColType::String,
        ];
        for s in awkward() {
            for ty in types {
                let mut fast = Vec::new();
                let fits = push_typed_cell(&mut fast, ty, &s);
                let general = csvtypes::to_value(ty, &s);
                assert_eq!(fits, general.is_some(), "cell {s:?} as {ty:?}");
                let general = serde_json::to_vec(&general.unwrap_or(Value::Null)).unwrap();
                if fits {
                    assert_eq!(
                        String::from_utf8_lossy(&fast),
                        String::from_utf8_lossy(&general),
                        "cell {s:?} as {ty:?}"
                    );
                }
            }
            let mut text = Vec::new();
            push_json_str(&mut text, &s);
            assert_eq!(text, serde_json::to_vec(&s).unwrap(), "string {s:?}");
        }
    }

    #[test]
    fn rows_parse_to_the_values_the_general_reader_gives() {
        let cols: Vec<Arc<str>> = ["a", "b", "c"].iter().map(|s| Arc::from(*s)).collect();
        let lines: &[&str] = &[
            r#"{"a":1,"b":"x","c":true}"#,
            r#"{"c":-0,"a":-5,"b":"esc\"aped\n"}"#,
            r#"{"a":18446744073709551615,"b":1e5,"c":-0.0}"#,
            r#"{"a":[1,{"z":2}],"b":{"k":null},"a":3}"#,
            r#"  {"b" : null}  "#,
            r#"{"\u0061":1}"#,
            r#"{}"#,
            // The scan without serde: flat rows, every number form, repeats, spaces.
            r#"{"a":0,"b":"plain","c":null}"#,
            r#"{"a":-5,"b":"x","a":123456789012345678,"c":false}"#,
            r#"{"a":1234567890123456789,"b":-1234567890123456789,"c":-0}"#,
            r#"{"a":1.5e3,"b":-0.25,"c":1E-7}"#,
            "{ \"a\" :\t7 ,\r\n\"b\": \"s p\" }",
            r#"{"b":"Zürich 😀","a":true}"#,
        ];
        for line in lines {
            let row = parse_row(line.as_bytes(), &cols).expect(line);
            let general: serde_json::Map<String, Value> = serde_json::from_str(line).unwrap();
            assert_eq!(row.len(), general.len(), "{line}");
            for (i, v) in &row {
                assert_eq!(Some(&v.to_value()), general.get(&*cols[*i]), "{line}");
            }
        }
        for bad in [
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":1,}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":1,"d":2}"#,
            r#"[1]"#,
            r#"{"a":1} x"#,
            r#"{"a":"#,
            "7",
        ] {
            assert!(parse_row(bad.as_bytes(), &cols).is_none(), "{bad}");
        }
    }
}
