//! Output writers of `data__convert`: CSV, TSV, JSON (one array), JSONL and Parquet, each
//! streaming into the temporary file the workspace renames into place at the end.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use anyhow::Result;
use serde_json::Value;

use crate::csvtypes::ColType;
use crate::format::Format;

mod parquet_sink;
pub use parquet_sink::{LineBatcher, ParquetSink};

/// Records buffered to choose Parquet column types, and rows per Parquet batch.
pub const PARQUET_SAMPLE: usize = 8192;

/// A record that the output cannot take; the caller counts or fails on it.
#[derive(Debug)]
pub struct Reject(pub String, pub RejectKind);

/// Why the output cannot take a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    /// A key that is not among the output's columns (or not an object at all).
    NotInColumns,
    /// A value that does not fit its column's type.
    TypeMismatch,
}

/// One output record.
pub enum Out<'a> {
    /// Named fields in order (a table row, or a template that is an object).
    Fields(&'a [(Arc<str>, Value)]),
    /// A JSON text already written (a template that is not an object); JSON outputs only.
    Json(&'a [u8]),
}

/// Writes fields as one JSON object, in their order.
pub fn write_object(w: &mut impl Write, fields: &[(Arc<str>, Value)]) -> Result<()> {
    w.write_all(b"{")?;
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            w.write_all(b",")?;
        }
        serde_json::to_writer(&mut *w, &**k)?;
        w.write_all(b":")?;
        serde_json::to_writer(&mut *w, v)?;
    }
    w.write_all(b"}")?;
    Ok(())
}

/// An output being written.
pub enum Sink<'f> {
    /// CSV or TSV.
    Delimited {
        /// The writer.
        w: Box<csv::Writer<BufWriter<&'f mut File>>>,
        /// The columns, fixed by the first record (or the input's header).
        columns: Option<Vec<Arc<str>>>,
        /// Whether the header is written.
        started: bool,
        /// Scratch row.
        row: Vec<String>,
        /// The columns' names hashed, for a wide record (filled once the columns are set).
        col_set: HashSet<Arc<str>>,
        /// Whether text that a spreadsheet would run as a formula gets a leading `'`.
        guard: bool,
        /// How many cells (and header names) were guarded so.
        guarded: u64,
    },
    /// JSON array.
    Json {
        /// The writer.
        w: BufWriter<&'f mut File>,
        /// Records written so far.
        n: u64,
    },
    /// JSON Lines.
    Jsonl(BufWriter<&'f mut File>),
    /// Parquet.
    Parquet(Box<ParquetSink<'f>>),
}

impl<'f> Sink<'f> {
    /// A writer of `format` into `file`; `columns`, when known, fixes a table's header.
    pub fn new(format: Format, file: &'f mut File, columns: Option<Vec<Arc<str>>>) -> Sink<'f> {
        match format {
            Format::Csv | Format::Tsv => Sink::Delimited {
                w: Box::new(
                    csv::WriterBuilder::new()
                        .delimiter(if format == Format::Tsv { b'\t' } else { b',' })
                        .from_writer(BufWriter::with_capacity(256 * 1024, file)),
                ),
                columns,
                started: false,
                row: Vec::new(),
                col_set: HashSet::new(),
                guard: true,
                guarded: 0,
            },
            Format::Json => Sink::Json {
                w: BufWriter::with_capacity(256 * 1024, file),
                n: 0,
            },
            Format::Jsonl => Sink::Jsonl(BufWriter::with_capacity(256 * 1024, file)),
            Format::Parquet | Format::Xlsx => {
                Sink::Parquet(Box::new(ParquetSink::new(file, columns)))
            }
        }
    }

    /// For Parquet: the types of columns typed by a CSV reader, by output name; they are
    /// the columns' Parquet types, whatever the first records hold (dates and timestamps
    /// arrive as their text). Other formats ignore it.
    pub fn set_column_types(&mut self, types: impl Iterator<Item = (Arc<str>, ColType)>) {
        if let Sink::Parquet(p) = self {
            p.set_column_types(types);
        }
    }

    /// Writes one record.
    pub fn write(&mut self, rec: Out<'_>) -> Result<std::result::Result<(), Reject>> {
        match (self, rec) {
            (Sink::Jsonl(w), rec) => {
                match rec {
                    Out::Fields(f) => write_object(w, f)?,
                    Out::Json(bytes) => w.write_all(bytes)?,
                }
                w.write_all(b"\n")?;
            }
            (Sink::Json { w, n }, rec) => {
                w.write_all(if *n == 0 { b"[\n" } else { b",\n" })?;
                match rec {
                    Out::Fields(f) => write_object(w, f)?,
                    Out::Json(bytes) => w.write_all(bytes)?,
                }
                *n += 1;
            }
            (Sink::Delimited { .. } | Sink::Parquet(_), Out::Json(_)) => {
                return Ok(Err(Reject(
                    "a CSV, TSV or Parquet row must be an object".to_string(),
                    RejectKind::NotInColumns,
                )))
            }
            (
                Sink::Delimited {
                    w,
                    columns,
                    started,
                    row,
                    col_set,
                    guard,
                    guarded,
                },
                Out::Fields(fields),
            ) => {
                let cols =
                    columns.get_or_insert_with(|| fields.iter().map(|(k, _)| k.clone()).collect());
                if !*started {
                    let header: Vec<String> = cols
                        .iter()
                        .map(|c| formula_guarded(c, *guard, guarded))
                        .collect();
                    w.write_record(header.iter())?;
                    *started = true;
                }
                if col_set.len() != cols.len() {
                    *col_set = cols.iter().cloned().collect();
                }
                if let Some(k) = stray(fields, cols, col_set) {
                    return Ok(Err(Reject(
                        format!(
                            "it has a key {k:?} that is not among the output's columns (set by \
                             the first record); use `select` to choose columns"
                        ),
                        RejectKind::NotInColumns,
                    )));
                }
                row.clear();
                let look = Lookup::new(fields);
                for c in cols.iter() {
                    row.push(match look.get(c) {
                        None | Some(Value::Null) => String::new(),
                        Some(Value::String(s)) => formula_guarded(s, *guard, guarded),
                        Some(other) => other.to_string(),
                    });
                }
                w.write_record(row.iter())?;
            }
            (Sink::Parquet(p), Out::Fields(fields)) => return p.write(fields),
        }
        Ok(Ok(()))
    }

    /// For CSV and TSV: whether text a spreadsheet would run as a formula (starting with `=`,
    /// `+`, `-`, `@`, a tab or a carriage return) is written with a leading `'` (the
    /// default), so the sheet shows it instead of running it. Other formats ignore it.
    pub fn set_formula_guard(&mut self, on: bool) {
        if let Sink::Delimited { guard, .. } = self {
            *guard = on;
        }
    }

    /// How many CSV/TSV cells and header names were guarded so far.
    pub fn guarded(&self) -> u64 {
        match self {
            Sink::Delimited { guarded, .. } => *guarded,
            _ => 0,
        }
    }

    /// Writes what is pending and the format's end.
    pub fn finish(self) -> Result<()> {
        match self {
            Sink::Jsonl(mut w) => w.flush()?,
            Sink::Json { mut w, n } => {
                w.write_all(if n == 0 { b"[]\n" } else { b"\n]\n" })?;
                w.flush()?;
            }
            Sink::Delimited {
                mut w,
                columns,
                started,
                guard,
                mut guarded,
                ..
            } => {
                if !started {
                    if let Some(cols) = &columns {
                        let header: Vec<String> = cols
                            .iter()
                            .map(|c| formula_guarded(c, guard, &mut guarded))
                            .collect();
                        w.write_record(header.iter())?;
                    }
                }
                w.flush()?;
            }
            Sink::Parquet(p) => p.finish()?,
        }
        Ok(())
    }
}

/// `text` as a CSV cell: with `guard`, text a spreadsheet would take for a formula gets a
/// leading `'` (OWASP's advice for CSV injection), counted in `guarded`. Numbers are
/// never text here, so `-5` as a number is written as it is.
fn formula_guarded(text: &str, guard: bool, guarded: &mut u64) -> String {
    if guard && text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        *guarded += 1;
        format!("'{text}")
    } else {
        text.to_string()
    }
}

/// A record's fields by name: a scan for a few, a hash map past [`LOOKUP_SCAN`], so the work
/// on a wide record (thousands of keys, each column looked up) stays linear in its size.
pub(super) struct Lookup<'a> {
    fields: &'a [(Arc<str>, Value)],
    map: Option<HashMap<&'a str, &'a Value>>,
}

/// Up to this many fields a scan is faster than hashing.
const LOOKUP_SCAN: usize = 32;

impl<'a> Lookup<'a> {
    pub(super) fn new(fields: &'a [(Arc<str>, Value)]) -> Self {
        let map =
            (fields.len() > LOOKUP_SCAN).then(|| fields.iter().map(|(k, v)| (&**k, v)).collect());
        Lookup { fields, map }
    }

    pub(super) fn get(&self, name: &str) -> Option<&'a Value> {
        match &self.map {
            Some(map) => map.get(name).copied(),
            None => self
                .fields
                .iter()
                .find(|(k, _)| &**k == name)
                .map(|(_, v)| v),
        }
    }
}

/// The first key of `fields` not in `cols` (with `set`, the same names hashed).
pub(super) fn stray<'a>(
    fields: &'a [(Arc<str>, Value)],
    cols: &[Arc<str>],
    set: &HashSet<Arc<str>>,
) -> Option<&'a Arc<str>> {
    if cols.len() <= LOOKUP_SCAN {
        fields.iter().map(|(k, _)| k).find(|k| !cols.contains(k))
    } else {
        fields.iter().map(|(k, _)| k).find(|k| !set.contains(*k))
    }
}
