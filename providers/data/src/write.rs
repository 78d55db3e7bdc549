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

use crate::fast::Scalar;
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
                builders: Vec::new(),
                rows: 0,
                writer: None,
                schema: None,
                places: Vec::new(),
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
/// float, boolean, or text for anything else, nested values as JSON text); then each record
/// goes straight into the columns' Arrow builders, and every [`PARQUET_SAMPLE`] rows a batch
/// goes to a thread of its own that encodes, compresses (snappy) and writes it, while this
/// one reads on.
pub struct ParquetSink<'f> {
    out: Option<&'f mut File>,
    columns: Option<Vec<Arc<str>>>,
    pending: Vec<Vec<(Arc<str>, Value)>>,
    kinds: Vec<Kind>,
    builders: Vec<Builder>,
    rows: usize,
    writer: Option<BatchWriter>,
    schema: Option<Arc<Schema>>,
    /// For each column, its place in the row being appended (scratch).
    places: Vec<Option<usize>>,
}

/// One column's Arrow builder.
enum Builder {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Text(StringBuilder),
}

impl Builder {
    fn new(kind: Kind) -> Builder {
        match kind {
            Kind::Int => Builder::Int(Int64Builder::with_capacity(PARQUET_SAMPLE)),
            Kind::Float => Builder::Float(Float64Builder::with_capacity(PARQUET_SAMPLE)),
            Kind::Bool => Builder::Bool(BooleanBuilder::with_capacity(PARQUET_SAMPLE)),
            Kind::Text => Builder::Text(StringBuilder::with_capacity(
                PARQUET_SAMPLE,
                PARQUET_SAMPLE * 16,
            )),
        }
    }

    /// Appends a value that fits the column's kind (see [`fits`]); absent is null.
    fn push(&mut self, v: Option<&Value>) {
        match self {
            Builder::Int(b) => b.append_option(v.and_then(Value::as_i64)),
            Builder::Float(b) => b.append_option(v.and_then(Value::as_f64)),
            Builder::Bool(b) => b.append_option(v.and_then(Value::as_bool)),
            Builder::Text(b) => match v {
                None | Some(Value::Null) => b.append_null(),
                Some(Value::String(s)) => b.append_value(s),
                Some(other) => b.append_value(other.to_string()),
            },
        }
    }

    /// [`Builder::push`] for a scalar of the fast path; the same value lands.
    fn push_scalar(&mut self, v: Option<&Scalar<'_>>) {
        match (self, v) {
            (Builder::Int(b), Some(Scalar::I64(i))) => b.append_value(*i),
            (Builder::Int(b), Some(Scalar::U64(u))) => b.append_option(i64::try_from(*u).ok()),
            (Builder::Float(b), Some(Scalar::I64(i))) => b.append_value(*i as f64),
            (Builder::Float(b), Some(Scalar::U64(u))) => b.append_value(*u as f64),
            (Builder::Float(b), Some(Scalar::F64(x))) => b.append_value(*x),
            (Builder::Bool(b), Some(Scalar::Bool(x))) => b.append_value(*x),
            (Builder::Text(b), Some(Scalar::Str(s))) => b.append_value(s),
            (Builder::Text(b), None | Some(Scalar::Null)) => b.append_null(),
            (Builder::Text(b), Some(Scalar::Nested(v))) => b.append_value(v.to_string()),
            (Builder::Text(b), Some(other)) => b.append_value(other.to_value().to_string()),
            (Builder::Int(b), _) => b.append_null(),
            (Builder::Float(b), _) => b.append_null(),
            (Builder::Bool(b), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
        }
    }
}

/// What the writing thread is sent.
enum Job {
    /// A batch to write.
    Batch(RecordBatch),
    /// The end: write the footer.
    Finish,
}

/// The thread that encodes and writes batches, fed through a short queue.
struct BatchWriter {
    jobs: Option<std::sync::mpsc::SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl BatchWriter {
    fn start(file: File, schema: Arc<Schema>) -> Result<BatchWriter> {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut writer = ArrowWriter::try_new(
            BufWriter::with_capacity(256 * 1024, file),
            schema,
            Some(props),
        )?;
        // Two batches queued at most: memory stays a few batches whatever the input.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(2);
        let thread = std::thread::Builder::new()
            .name("parquet-writer".into())
            .spawn(move || -> Result<()> {
                for job in rx {
                    match job {
                        Job::Batch(batch) => writer.write(&batch)?,
                        Job::Finish => {
                            let mut buf = writer.into_inner()?;
                            buf.flush()?;
                            return Ok(());
                        }
                    }
                }
                // The sender went away without finishing: the conversion failed.
                Ok(())
            })?;
        Ok(BatchWriter {
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    fn send(&mut self, job: Job) -> Result<()> {
        let sent = self.jobs.as_ref().map(|tx| tx.send(job).is_ok());
        if sent == Some(true) {
            return Ok(());
        }
        // The thread stopped early: its error says why.
        self.join()?;
        Err(anyhow!("the Parquet writer stopped"))
    }

    fn join(&mut self) -> Result<()> {
        self.jobs = None;
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow!("the Parquet writer panicked"))?,
            None => Ok(()),
        }
    }

    fn finish(mut self) -> Result<()> {
        self.send(Job::Finish)?;
        self.join()
    }
}

impl Drop for BatchWriter {
    fn drop(&mut self) {
        // Never leave the thread writing after the conversion gave up.
        let _ = self.join();
    }
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
        if self.writer.is_none() {
            self.pending.push(m.to_vec());
            if self.pending.len() >= PARQUET_SAMPLE {
                self.flush()?;
            }
            return Ok(Ok(()));
        }
        let cols = self.columns.as_deref().unwrap_or(&[]);
        for (i, c) in cols.iter().enumerate() {
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
        for (c, b) in cols.iter().zip(self.builders.iter_mut()) {
            b.push(get(m, c));
        }
        self.rows += 1;
        if self.rows >= PARQUET_SAMPLE {
            self.flush()?;
        }
        Ok(Ok(()))
    }

    /// The fast path of JSONL input: appends the record on `line` straight to the column
    /// builders when it is a JSON object whose keys are all columns, whose strings are within
    /// `max_cell_bytes` and whose values fit their columns. `false` (nothing appended) for
    /// anything else, and before the first records chose the columns: the caller then takes
    /// the general path, which appends or says what is wrong.
    pub fn write_json_line(&mut self, line: &[u8], max_cell_bytes: u64) -> Result<bool> {
        if self.writer.is_none() {
            return Ok(false);
        }
        let cols = self.columns.as_deref().unwrap_or(&[]);
        let Some(row) = crate::fast::parse_row(line, cols) else {
            return Ok(false);
        };
        self.places.clear();
        self.places.resize(cols.len(), None);
        for (place, (i, v)) in row.iter().enumerate() {
            let ok = match (self.kinds[*i], v) {
                (_, Scalar::Str(s)) if s.len() as u64 > max_cell_bytes => false,
                (_, Scalar::Null) | (Kind::Text, _) => true,
                (Kind::Int, Scalar::I64(_)) => true,
                (Kind::Int, Scalar::U64(u)) => i64::try_from(*u).is_ok(),
                (Kind::Float, Scalar::I64(_) | Scalar::U64(_) | Scalar::F64(_)) => true,
                (Kind::Bool, Scalar::Bool(_)) => true,
                _ => false,
            };
            if !ok {
                return Ok(false);
            }
            self.places[*i] = Some(place);
        }
        for (b, place) in self.builders.iter_mut().zip(&self.places) {
            b.push_scalar(place.map(|p| &row[p].1));
        }
        self.rows += 1;
        if self.rows >= PARQUET_SAMPLE {
            self.flush()?;
        }
        Ok(true)
    }

    /// Chooses the schema from the pending records (once), then sends what the builders
    /// hold as a batch.
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
            let out = self
                .out
                .take()
                .ok_or_else(|| anyhow!("the output is gone"))?;
            // The writing thread owns a second handle on the same open file.
            self.writer = Some(BatchWriter::start(out.try_clone()?, schema.clone())?);
            self.schema = Some(schema);
            self.builders = self.kinds.iter().map(|k| Builder::new(*k)).collect();
            for m in std::mem::take(&mut self.pending) {
                for (c, b) in cols.iter().zip(self.builders.iter_mut()) {
                    b.push(get(&m, c));
                }
                self.rows += 1;
            }
            self.columns = Some(cols);
        }
        if self.rows == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        self.rows = 0;
        let schema = self.schema.clone().ok_or_else(|| anyhow!("no schema"))?;
        let batch = RecordBatch::try_new(schema, arrays)?;
        let writer = self.writer.as_mut().ok_or_else(|| anyhow!("no writer"))?;
        writer.send(Job::Batch(batch))
    }

    fn finish(mut self) -> Result<()> {
        self.flush()?;
        match self.writer.take() {
            Some(w) => w.finish(),
            None => Ok(()),
        }
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
