//! The Parquet writer of `data__convert`: column types chosen from the first records (or
//! given by a CSV reader), Arrow builders, and batches encoded and written on a thread of
//! their own; with the batchers the parallel readers fill.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::Arc;

use anyhow::{anyhow, Result};
use arrow_array::builder::{
    BooleanBuilder, Date32Builder, Float64Builder, Int64Builder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use parquet::schema::types::ColumnPath;
use serde_json::Value;

use super::{stray, Lookup, Reject, RejectKind, PARQUET_SAMPLE};
use crate::csvtypes::{self, ColType, Typed};
use crate::fast::Scalar;

/// A Parquet column's type, chosen from the first records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    Float,
    Bool,
    Text,
    /// A CSV date column: its values are the cells' text.
    Date,
    /// A CSV timestamp column without a zone.
    Ts,
    /// A CSV timestamp column with a zone, stored as UTC.
    TsTz,
}

impl Kind {
    fn arrow(self) -> DataType {
        match self {
            Kind::Int => DataType::Int64,
            Kind::Float => DataType::Float64,
            Kind::Bool => DataType::Boolean,
            Kind::Text => DataType::Utf8,
            Kind::Date => DataType::Date32,
            Kind::Ts => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::TsTz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        }
    }

    /// The kind of a CSV column's type.
    fn of(t: ColType) -> Kind {
        match t {
            ColType::Integer => Kind::Int,
            ColType::Number => Kind::Float,
            ColType::Boolean => Kind::Bool,
            ColType::Date => Kind::Date,
            ColType::Timestamp => Kind::Ts,
            ColType::TimestampTz => Kind::TsTz,
            ColType::String => Kind::Text,
        }
    }

    /// The CSV type whose cells a column of this kind takes (dates and timestamps).
    fn col_type(self) -> ColType {
        match self {
            Kind::Int => ColType::Integer,
            Kind::Float => ColType::Number,
            Kind::Bool => ColType::Boolean,
            Kind::Date => ColType::Date,
            Kind::Ts => ColType::Timestamp,
            Kind::TsTz => ColType::TimestampTz,
            Kind::Text => ColType::String,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Int => "int64",
            Kind::Float => "float64",
            Kind::Bool => "boolean",
            Kind::Text => "string",
            Kind::Date => "date",
            Kind::Ts => "timestamp",
            Kind::TsTz => "timestamp with time zone",
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
    /// The columns' names hashed, for a wide record (filled once the columns are set).
    column_set: HashSet<Arc<str>>,
    /// Column types a CSV reader chose, by output name.
    hints: HashMap<Arc<str>, Kind>,
}

impl<'f> ParquetSink<'f> {
    /// A Parquet writer into `file`; `columns`, when known, fixes the table's columns.
    pub(super) fn new(file: &'f mut File, columns: Option<Vec<Arc<str>>>) -> Self {
        ParquetSink {
            out: Some(file),
            columns,
            pending: Vec::new(),
            kinds: Vec::new(),
            builders: Vec::new(),
            rows: 0,
            writer: None,
            schema: None,
            places: Vec::new(),
            column_set: HashSet::new(),
            hints: HashMap::new(),
        }
    }

    /// The types of columns typed by a CSV reader, by output name (see
    /// [`Sink::set_column_types`](super::Sink::set_column_types)).
    pub(super) fn set_column_types(&mut self, types: impl Iterator<Item = (Arc<str>, ColType)>) {
        self.hints = types.map(|(c, t)| (c, Kind::of(t))).collect();
    }
}

/// One column's Arrow builder.
enum Builder {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Text(StringBuilder),
    Date(Date32Builder),
    Micros(TimestampMicrosecondBuilder, ColType),
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
            Kind::Date => Builder::Date(Date32Builder::with_capacity(PARQUET_SAMPLE)),
            Kind::Ts => Builder::Micros(
                TimestampMicrosecondBuilder::with_capacity(PARQUET_SAMPLE),
                ColType::Timestamp,
            ),
            Kind::TsTz => Builder::Micros(
                TimestampMicrosecondBuilder::with_capacity(PARQUET_SAMPLE).with_timezone("UTC"),
                ColType::TimestampTz,
            ),
        }
    }

    /// Appends a value that fits the column's kind (see [`fits`]); absent is null.
    fn push(&mut self, v: Option<&Value>) {
        match self {
            Builder::Int(b) => b.append_option(v.and_then(Value::as_i64)),
            Builder::Float(b) => b.append_option(match v {
                // A CSV cell `inf` or `nan` arrives as its text (see `csvtypes::to_value`).
                Some(Value::String(s)) => csvtypes::number(s),
                v => v.and_then(Value::as_f64),
            }),
            Builder::Bool(b) => b.append_option(v.and_then(Value::as_bool)),
            Builder::Text(b) => match v {
                None | Some(Value::Null) => b.append_null(),
                Some(Value::String(s)) => b.append_value(s),
                Some(other) => b.append_value(other.to_string()),
            },
            Builder::Date(b) => b.append_option(match v.and_then(Value::as_str) {
                Some(s) => match csvtypes::typed(ColType::Date, s) {
                    Some(Typed::Date(d)) => Some(d),
                    _ => None,
                },
                None => None,
            }),
            Builder::Micros(b, t) => b.append_option(match v.and_then(Value::as_str) {
                Some(s) => match csvtypes::typed(*t, s) {
                    Some(Typed::Micros(us)) => Some(us),
                    _ => None,
                },
                None => None,
            }),
        }
    }

    /// Appends a CSV cell already checked to fit (see [`csvtypes::typed`]).
    pub(crate) fn push_typed(&mut self, v: Typed<'_>) {
        match (self, v) {
            (Builder::Int(b), Typed::Int(i)) => b.append_value(i),
            (Builder::Float(b), Typed::Float(x)) => b.append_value(x),
            (Builder::Bool(b), Typed::Bool(x)) => b.append_value(x),
            (Builder::Text(b), Typed::Text(s)) => b.append_value(s),
            (Builder::Date(b), Typed::Date(d)) => b.append_value(d),
            (Builder::Micros(b, _), Typed::Micros(us)) => b.append_value(us),
            (Builder::Int(b), _) => b.append_null(),
            (Builder::Float(b), _) => b.append_null(),
            (Builder::Bool(b), _) => b.append_null(),
            (Builder::Text(b), _) => b.append_null(),
            (Builder::Date(b), _) => b.append_null(),
            (Builder::Micros(b, _), _) => b.append_null(),
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
            (Builder::Date(b), _) => b.append_null(),
            (Builder::Micros(b, _), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Text(b) => Arc::new(b.finish()),
            Builder::Date(b) => Arc::new(b.finish()),
            Builder::Micros(b, _) => Arc::new(b.finish()),
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
    /// `plain` names the columns written without a dictionary.
    fn start(file: File, schema: Arc<Schema>, plain: &[Arc<str>]) -> Result<BatchWriter> {
        let mut props = WriterProperties::builder().set_compression(Compression::SNAPPY);
        for c in plain {
            props =
                props.set_column_dictionary_enabled(ColumnPath::new(vec![c.to_string()]), false);
        }
        let props = props.build();
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

    pub(super) fn finish(mut self) -> Result<()> {
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
    pub(super) fn write(
        &mut self,
        m: &[(Arc<str>, Value)],
    ) -> Result<std::result::Result<(), Reject>> {
        if let Some(cols) = &self.columns {
            if self.column_set.len() != cols.len() {
                self.column_set = cols.iter().cloned().collect();
            }
            if let Some(k) = stray(m, cols, &self.column_set) {
                return Ok(Err(Reject(
                    format!(
                        "it has a key {k:?} that is not among the output's columns (set by the \
                         first records); use `select` to choose columns"
                    ),
                    RejectKind::NotInColumns,
                )));
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
        let look = Lookup::new(m);
        for (i, c) in cols.iter().enumerate() {
            if let Some(v) = look.get(c) {
                if !fits(self.kinds[i], v) {
                    return Ok(Err(Reject(
                        format!(
                            "column {c:?} is {} here ({}), but {} in the first records, which \
                             chose its Parquet type; set `types: [\"{c}=string\"]` for a \
                             CSV input, or `select` other columns",
                            toolbox_core::json_kind(v),
                            cut(v),
                            self.kinds[i].name()
                        ),
                        RejectKind::TypeMismatch,
                    )));
                }
            }
        }
        for (c, b) in cols.iter().zip(self.builders.iter_mut()) {
            b.push(look.get(c));
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
        if !append_json_line(
            cols,
            &self.kinds,
            &mut self.places,
            &mut self.builders,
            line,
            max_cell_bytes,
            &mut Vec::new(),
        ) {
            return Ok(false);
        }
        self.rows += 1;
        if self.rows >= PARQUET_SAMPLE {
            self.flush()?;
        }
        Ok(true)
    }

    /// Once the first records chose the columns and their types: what a [`LineBatcher`]
    /// needs to turn JSONL lines into batches this sink takes.
    pub fn batcher(&self, max_cell_bytes: u64) -> Option<LineBatcher> {
        self.writer.as_ref()?;
        Some(LineBatcher {
            columns: self.columns.clone()?.into(),
            kinds: self.kinds.clone().into(),
            schema: self.schema.clone()?,
            max_cell_bytes,
            places: Vec::new(),
            builders: self.kinds.iter().map(|k| Builder::new(*k)).collect(),
        })
    }

    /// Once the first records chose the columns: a [`CellBatcher`] for CSV rows of `types`
    /// (the header's, in order), when the columns are those types'.
    pub fn cell_batcher(&self, types: &[ColType], max_cell_bytes: u64) -> Option<CellBatcher> {
        self.writer.as_ref()?;
        let same = types.len() == self.kinds.len()
            && types
                .iter()
                .zip(&self.kinds)
                .all(|(t, k)| Kind::of(*t) == *k);
        if !same {
            return None;
        }
        Some(CellBatcher {
            types: types.into(),
            schema: self.schema.clone()?,
            max_cell_bytes,
            builders: types.iter().map(|t| Builder::new(Kind::of(*t))).collect(),
        })
    }

    /// Writes the first `max_rows` (all by default) of a batch made by a [`LineBatcher`] of
    /// this sink, after the rows the builders hold, so the output keeps the input's order.
    /// Returns the rows written.
    pub fn write_batch(&mut self, batch: RecordBatch, max_rows: Option<u64>) -> Result<u64> {
        let n = batch.num_rows() as u64;
        let take = max_rows.map_or(n, |m| m.min(n));
        let batch = if take < n {
            batch.slice(0, take as usize)
        } else {
            batch
        };
        self.flush()?;
        let writer = self.writer.as_mut().ok_or_else(|| anyhow!("no writer"))?;
        writer.send(Job::Batch(batch))?;
        Ok(take)
    }

    /// Chooses the schema from the pending records (once), then sends what the builders
    /// hold as a batch.
    fn flush(&mut self) -> Result<()> {
        if self.writer.is_none() {
            let cols: Vec<Arc<str>> = match self.columns.take() {
                Some(c) => c,
                None => {
                    let mut cols: Vec<Arc<str>> = Vec::new();
                    let mut seen: HashSet<Arc<str>> = HashSet::new();
                    for m in &self.pending {
                        for (k, _) in m {
                            if seen.insert(k.clone()) {
                                cols.push(k.clone());
                            }
                        }
                    }
                    cols
                }
            };
            let looks: Vec<Lookup<'_>> = self.pending.iter().map(|m| Lookup::new(m)).collect();
            let kinds: Vec<_> = cols
                .iter()
                .map(|c| match self.hints.get(c) {
                    Some(k) => *k,
                    None => choose_kind(looks.iter().filter_map(|l| l.get(c))),
                })
                .collect();
            // A column whose sample is mostly distinct values (ids, free text, measures)
            // gains nothing from a dictionary but the cost of building one.
            let plain: Vec<Arc<str>> = cols
                .iter()
                .filter(|c| mostly_distinct(looks.iter().filter_map(|l| l.get(c))))
                .cloned()
                .collect();
            drop(looks);
            self.kinds = kinds;
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
            self.writer = Some(BatchWriter::start(
                out.try_clone()?,
                schema.clone(),
                &plain,
            )?);
            self.schema = Some(schema);
            self.builders = self.kinds.iter().map(|k| Builder::new(*k)).collect();
            for m in std::mem::take(&mut self.pending) {
                let look = Lookup::new(&m);
                for (c, b) in cols.iter().zip(self.builders.iter_mut()) {
                    b.push(look.get(c));
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

    pub(super) fn finish(mut self) -> Result<()> {
        self.flush()?;
        match self.writer.take() {
            Some(w) => w.finish(),
            None => Ok(()),
        }
    }
}

/// Appends the JSONL record on `line` to `builders` (one per column of `cols`, typed
/// `kinds`) when every key is a column, every string within `max_cell_bytes` and every
/// value fits its column; `false`, with nothing appended, otherwise.
#[allow(clippy::too_many_arguments)]
fn append_json_line<'a>(
    cols: &[Arc<str>],
    kinds: &[Kind],
    places: &mut Vec<Option<usize>>,
    builders: &mut [Builder],
    line: &'a [u8],
    max_cell_bytes: u64,
    row: &mut Vec<(usize, Scalar<'a>)>,
) -> bool {
    let Some(n) = crate::fast::parse_row_into(line, cols, row) else {
        return false;
    };
    let row = &row[..n];
    places.clear();
    places.resize(cols.len(), None);
    for (place, (i, v)) in row.iter().enumerate() {
        let ok = match (kinds[*i], v) {
            (_, Scalar::Str(s)) if s.len() as u64 > max_cell_bytes => false,
            (_, Scalar::Null) | (Kind::Text, _) => true,
            (Kind::Int, Scalar::I64(_)) => true,
            (Kind::Int, Scalar::U64(u)) => i64::try_from(*u).is_ok(),
            (Kind::Float, Scalar::I64(_) | Scalar::U64(_) | Scalar::F64(_)) => true,
            (Kind::Bool, Scalar::Bool(_)) => true,
            _ => false,
        };
        if !ok {
            return false;
        }
        places[*i] = Some(place);
    }
    for (b, place) in builders.iter_mut().zip(places.iter()) {
        b.push_scalar(place.map(|p| &row[p].1));
    }
    true
}

/// Turns JSONL lines into Parquet batches for a [`ParquetSink`] whose first records chose
/// the columns, on any thread: the fast path of [`ParquetSink::write_json_line`], a chunk
/// of lines at a time, so several threads can parse while one writes.
pub struct LineBatcher {
    columns: Arc<[Arc<str>]>,
    kinds: Arc<[Kind]>,
    schema: Arc<Schema>,
    max_cell_bytes: u64,
    places: Vec<Option<usize>>,
    builders: Vec<Builder>,
}

impl Clone for LineBatcher {
    fn clone(&self) -> LineBatcher {
        LineBatcher {
            columns: self.columns.clone(),
            kinds: self.kinds.clone(),
            schema: self.schema.clone(),
            max_cell_bytes: self.max_cell_bytes,
            places: Vec::new(),
            builders: self.kinds.iter().map(|k| Builder::new(*k)).collect(),
        }
    }
}

impl LineBatcher {
    /// The batch of every line, in order, when each takes the fast path; `None` as soon as
    /// one does not (the caller then runs the lines through the general path, which says
    /// what is wrong).
    pub fn batch<'a>(&mut self, lines: impl Iterator<Item = &'a [u8]>) -> Option<RecordBatch> {
        let mut all = true;
        // One vector for every line's values: the lines all live in the chunk.
        let mut row = Vec::with_capacity(self.columns.len());
        for line in lines {
            if !append_json_line(
                &self.columns,
                &self.kinds,
                &mut self.places,
                &mut self.builders,
                line,
                self.max_cell_bytes,
                &mut row,
            ) {
                all = false;
                break;
            }
        }
        // Finishing empties the builders either way, ready for the next chunk.
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        if !all {
            return None;
        }
        RecordBatch::try_new(self.schema.clone(), arrays).ok()
    }
}

/// Turns chunks of CSV rows into Parquet batches for a [`ParquetSink`] whose columns are a
/// CSV header typed by [`csvtypes`], on any thread: each cell checked (size, UTF-8) and
/// typed by its column straight into the Arrow builders, without JSON values.
pub struct CellBatcher {
    types: Arc<[ColType]>,
    schema: Arc<Schema>,
    max_cell_bytes: u64,
    builders: Vec<Builder>,
}

impl Clone for CellBatcher {
    fn clone(&self) -> CellBatcher {
        CellBatcher {
            types: self.types.clone(),
            schema: self.schema.clone(),
            max_cell_bytes: self.max_cell_bytes,
            builders: self
                .types
                .iter()
                .map(|t| Builder::new(Kind::of(*t)))
                .collect(),
        }
    }
}

impl CellBatcher {
    /// The batch of every row's cells (`width` per row), when each fits; `None` as soon as
    /// one does not (the caller then runs the rows through the general path, which says
    /// what is wrong).
    pub fn batch<'a>(&mut self, cells: impl Iterator<Item = &'a [u8]>) -> Option<RecordBatch> {
        let width = self.types.len();
        let mut all = true;
        for (i, raw) in cells.enumerate() {
            let col = i % width;
            let typed = std::str::from_utf8(raw)
                .ok()
                .filter(|_| raw.len() as u64 <= self.max_cell_bytes)
                .and_then(|text| csvtypes::typed(self.types[col], text));
            match typed {
                Some(v) => self.builders[col].push_typed(v),
                None => {
                    all = false;
                    break;
                }
            }
        }
        // Finishing empties the builders either way, ready for the next chunk.
        let arrays: Vec<ArrayRef> = self.builders.iter_mut().map(Builder::finish).collect();
        if !all {
            return None;
        }
        RecordBatch::try_new(self.schema.clone(), arrays).ok()
    }
}

/// Whether more than half of the values (nulls aside) are distinct, among at least 64.
fn mostly_distinct<'a>(values: impl Iterator<Item = &'a Value>) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut n = 0usize;
    for v in values {
        match v {
            Value::Null => continue,
            Value::String(s) => seen.insert(std::borrow::Cow::Borrowed(s.as_str())),
            other => seen.insert(std::borrow::Cow::Owned(other.to_string())),
        };
        n += 1;
    }
    n >= 64 && seen.len() * 2 > n
}

fn fits(kind: Kind, v: &Value) -> bool {
    match (kind, v) {
        (_, Value::Null) | (Kind::Text, _) => true,
        (Kind::Int, Value::Number(n)) => n.is_i64(),
        (Kind::Float, Value::Number(_)) => true,
        (Kind::Float, Value::String(s)) => csvtypes::number(s).is_some_and(|x| !x.is_finite()),
        (Kind::Bool, Value::Bool(_)) => true,
        (Kind::Date | Kind::Ts | Kind::TsTz, Value::String(s)) => {
            csvtypes::typed(kind.col_type(), s).is_some()
        }
        _ => false,
    }
}

/// A value for a message: its JSON text, cut to 60 characters.
fn cut(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 60 {
        let mut t: String = text.chars().take(57).collect();
        t.push('…');
        t
    } else {
        text
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

#[cfg(test)]
mod tests {
    use parquet::basic::Encoding;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use serde_json::json;

    use super::*;
    use crate::format::Format;
    use crate::write::{Out, Sink};

    #[test]
    fn mostly_distinct_columns_are_written_without_a_dictionary() {
        let mut file = tempfile::tempfile().unwrap();
        let mut sink = Sink::new(Format::Parquet, &mut file, None);
        for i in 0..20_000i64 {
            let rec = [
                (Arc::from("id"), json!(i)),
                (
                    Arc::from("city"),
                    json!(["Oslo", "Quito", "Tartu"][i as usize % 3]),
                ),
                (Arc::from("note"), json!(format!("note {i}"))),
            ];
            sink.write(Out::Fields(&rec)).unwrap().unwrap();
        }
        sink.finish().unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let group = reader.metadata().row_group(0);
        let dictionary = |i: usize| {
            group
                .column(i)
                .encodings()
                .any(|e| e == Encoding::RLE_DICTIONARY)
        };
        assert!(!dictionary(0), "id is all distinct");
        assert!(dictionary(1), "city has three values");
        assert!(!dictionary(2), "note is all distinct");
        assert_eq!(reader.metadata().file_metadata().num_rows(), 20_000);
    }

    #[test]
    fn distinct_means_more_than_half_of_at_least_64() {
        let vals = |n: usize, m: usize| (0..n).map(move |i| json!(i % m)).collect::<Vec<_>>();
        assert!(mostly_distinct(vals(100, 100).iter()));
        assert!(!mostly_distinct(vals(100, 50).iter()));
        assert!(!mostly_distinct(vals(63, 63).iter()), "too few to tell");
        let with_nulls: Vec<Value> = vals(100, 100)
            .into_iter()
            .chain(std::iter::repeat_n(Value::Null, 500))
            .collect();
        assert!(mostly_distinct(with_nulls.iter()), "nulls do not count");
    }
}
