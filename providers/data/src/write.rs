//! Output writers of `data__convert`: CSV, TSV, JSON (one array), JSONL and Parquet, each
//! streaming into the temporary file the workspace renames into place at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use arrow_array::builder::{BooleanBuilder, Float64Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use serde_json::Value;

use crate::format::Format;

/// Records buffered to choose Parquet column types, and rows per Parquet batch.
pub const PARQUET_SAMPLE: usize = 8192;

/// A record that the output cannot take; the caller counts or fails on it.
#[derive(Debug)]
pub struct Reject(pub String);

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
            },
            Format::Json => Sink::Json {
                w: BufWriter::with_capacity(256 * 1024, file),
                n: 0,
            },
            Format::Jsonl => Sink::Jsonl(BufWriter::with_capacity(256 * 1024, file)),
            Format::Parquet | Format::Xlsx => Sink::Parquet(Box::new(ParquetSink {
                out: Some(file),
                columns,
                pending: Vec::new(),
                kinds: Vec::new(),
                writer: None,
                schema: None,
            })),
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
                )))
            }
            (
                Sink::Delimited {
                    w,
                    columns,
                    started,
                    row,
                },
                Out::Fields(fields),
            ) => {
                let cols =
                    columns.get_or_insert_with(|| fields.iter().map(|(k, _)| k.clone()).collect());
                if !*started {
                    w.write_record(cols.iter().map(|c| c.as_bytes()))?;
                    *started = true;
                }
                if let Some((k, _)) = fields.iter().find(|(k, _)| !cols.contains(k)) {
                    return Ok(Err(Reject(format!(
                        "it has a key {k:?} that is not among the output's columns (set by the \
                         first record); use `select` to choose columns"
                    ))));
                }
                row.clear();
                for c in cols.iter() {
                    row.push(match fields.iter().find(|(k, _)| k == c).map(|(_, v)| v) {
                        None | Some(Value::Null) => String::new(),
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                    });
                }
                w.write_record(row.iter())?;
            }
            (Sink::Parquet(p), Out::Fields(fields)) => return p.write(fields),
        }
        Ok(Ok(()))
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
                ..
            } => {
                if !started {
                    if let Some(cols) = &columns {
                        w.write_record(cols.iter().map(|c| c.as_bytes()))?;
                    }
                }
                w.flush()?;
            }
            Sink::Parquet(p) => p.finish()?,
        }
        Ok(())
    }
}

/// A Parquet column's type, chosen from the first records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Bool,
    Text,
}

impl Kind {
    fn arrow(self) -> DataType {
        match self {
            Kind::Int => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Bool => DataType::Boolean,
            Kind::Text => DataType::Utf8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Int => "int64",
            Kind::Float => "float64",
            Kind::Bool => "boolean",
            Kind::Text => "string",
        }
    }
}

/// The Parquet writer: the first [`PARQUET_SAMPLE`] records choose the column types (integer,
/// float, boolean, or text for anything else, nested values as JSON text); then batches of
/// as many rows go to the file, snappy-compressed.
pub struct ParquetSink<'f> {
    out: Option<&'f mut File>,
    columns: Option<Vec<Arc<str>>>,
    pending: Vec<Vec<(Arc<str>, Value)>>,
    kinds: Vec<Kind>,
    writer: Option<ArrowWriter<BufWriter<&'f mut File>>>,
    schema: Option<Arc<Schema>>,
}

impl<'f> ParquetSink<'f> {
    fn write(&mut self, m: &[(Arc<str>, Value)]) -> Result<std::result::Result<(), Reject>> {
        if let Some(cols) = &self.columns {
            if let Some((k, _)) = m.iter().find(|(k, _)| !cols.contains(k)) {
                return Ok(Err(Reject(format!(
                    "it has a key {k:?} that is not among the output's columns (set by the \
                     first records); use `select` to choose columns"
                ))));
            }
        }
        if self.writer.is_some() {
            for (i, c) in self.columns.iter().flatten().enumerate() {
                if let Some(v) = get(m, c) {
                    if !fits(self.kinds[i], v) {
                        return Ok(Err(Reject(format!(
                            "column {c:?} is {} here, but {} in the first records, which \
                             chose its Parquet type",
                            toolbox_core::json_kind(v),
                            self.kinds[i].name()
                        ))));
                    }
                }
            }
        }
        self.pending.push(m.to_vec());
        if self.pending.len() >= PARQUET_SAMPLE {
            self.flush()?;
        }
        Ok(Ok(()))
    }

    /// Chooses the schema from the pending records (once), then writes them as a batch.
    fn flush(&mut self) -> Result<()> {
        if self.writer.is_none() {
            let cols: Vec<Arc<str>> = match self.columns.take() {
                Some(c) => c,
                None => {
                    let mut cols: Vec<Arc<str>> = Vec::new();
                    for m in &self.pending {
                        for (k, _) in m {
                            if !cols.contains(k) {
                                cols.push(k.clone());
                            }
                        }
                    }
                    cols
                }
            };
            self.kinds = cols
                .iter()
                .map(|c| choose_kind(self.pending.iter().filter_map(|m| get(m, c))))
                .collect();
            // A sampled record that does not fit the chosen type cannot happen: the type
            // was chosen from them.
            let schema = Arc::new(Schema::new(
                cols.iter()
                    .zip(&self.kinds)
                    .map(|(c, k)| Field::new(&**c, k.arrow(), true))
                    .collect::<Vec<_>>(),
            ));
            let props = WriterProperties::builder()
                .set_compression(Compression::SNAPPY)
                .build();
            let out = self
                .out
                .take()
                .ok_or_else(|| anyhow!("the output is gone"))?;
            self.writer = Some(ArrowWriter::try_new(
                BufWriter::with_capacity(256 * 1024, out),
                schema.clone(),
                Some(props),
            )?);
            self.schema = Some(schema);
            self.columns = Some(cols);
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let cols = self.columns.as_deref().unwrap_or(&[]);
        let arrays: Vec<ArrayRef> = cols
            .iter()
            .zip(&self.kinds)
            .map(|(c, k)| build(*k, self.pending.iter().map(|m| get(m, c))))
            .collect();
        let writer = self.writer.as_mut().ok_or_else(|| anyhow!("no writer"))?;
        let schema = self.schema.clone().ok_or_else(|| anyhow!("no schema"))?;
        writer.write(&RecordBatch::try_new(schema, arrays)?)?;
        self.pending.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.flush()?;
        if let Some(w) = self.writer.take() {
            let mut buf = w.into_inner()?;
            buf.flush()?;
        }
        Ok(())
    }
}

fn get<'a>(fields: &'a [(Arc<str>, Value)], name: &str) -> Option<&'a Value> {
    fields.iter().find(|(k, _)| &**k == name).map(|(_, v)| v)
}

fn fits(kind: Kind, v: &Value) -> bool {
    match (kind, v) {
        (_, Value::Null) | (Kind::Text, _) => true,
        (Kind::Int, Value::Number(n)) => n.is_i64(),
        (Kind::Float, Value::Number(_)) => true,
        (Kind::Bool, Value::Bool(_)) => true,
        _ => false,
    }
}

fn choose_kind<'a>(values: impl Iterator<Item = &'a Value>) -> Kind {
    let mut kind: Option<Kind> = None;
    for v in values {
        let k = match v {
            Value::Null => continue,
            Value::Bool(_) => Kind::Bool,
            Value::Number(n) if n.is_i64() => Kind::Int,
            Value::Number(_) => Kind::Float,
            _ => Kind::Text,
        };
        kind = Some(match (kind, k) {
            (None, k) => k,
            (Some(a), b) if a == b => a,
            (Some(Kind::Int), Kind::Float) | (Some(Kind::Float), Kind::Int) => Kind::Float,
            _ => Kind::Text,
        });
    }
    kind.unwrap_or(Kind::Text)
}

fn build<'a>(kind: Kind, values: impl Iterator<Item = Option<&'a Value>>) -> ArrayRef {
    match kind {
        Kind::Int => {
            let mut b = Int64Builder::new();
            for v in values {
                b.append_option(v.and_then(Value::as_i64));
            }
            Arc::new(b.finish())
        }
        Kind::Float => {
            let mut b = Float64Builder::new();
            for v in values {
                b.append_option(v.and_then(Value::as_f64));
            }
            Arc::new(b.finish())
        }
        Kind::Bool => {
            let mut b = BooleanBuilder::new();
            for v in values {
                b.append_option(v.and_then(Value::as_bool));
            }
            Arc::new(b.finish())
        }
        Kind::Text => {
            let mut b = StringBuilder::new();
            for v in values {
                match v {
                    None | Some(Value::Null) => b.append_null(),
                    Some(Value::String(s)) => b.append_value(s),
                    Some(other) => b.append_value(other.to_string()),
                }
            }
            Arc::new(b.finish())
        }
    }
}
