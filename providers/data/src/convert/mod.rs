//! `data__convert`: any input format to CSV, TSV, JSON, JSONL or Parquet, with `select`,
//! `rename`, `dedupe_by`, `limit` and a `template`, written atomically.

mod parallel;
mod template;

use std::collections::hash_map::RandomState;
use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::ToolOutput;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::{PathError, ToolContext};

use crate::csvtypes::{ColType, Typing};
use crate::format::{Compression, Format, OUTPUT_NAMES};
use crate::progress::Progress;
use crate::records::{self, BadKind, CsvRow, Flow, Item, JsonlLine};
use crate::write::{Out, RejectKind, Sink};
use crate::{fast, source};
use crate::{
    format_prop, infer_types_prop, on_error_arg, on_error_prop, read_opts, reply, sheet_prop,
    types_prop, InputLimits, OnError, TOOLSET,
};
use template::Template;

/// The tool's name.
pub const NAME: &str = "data__convert";

// The data agent's tools build calls of this one with these names (data_agent.rs).
pub(crate) const PATH: Arg = Arg::string("path")
    .aliases(&["input", "file_path"])
    .required();
pub(crate) const OUTPUT: Arg = Arg::string("output")
    .aliases(&["output_path", "out"])
    .required();
/// The output format (read leniently, as `format` is).
pub(crate) const TO: Arg = Arg::choice("to", OUTPUT_NAMES).aliases(&["output_format"]);
pub(crate) const SELECT: Arg = Arg::strings("select").aliases(&["columns"]);
/// Renames: an array of "old=new" strings, or an object.
pub(crate) const RENAME: Arg = Arg::strings("rename");
pub(crate) const DEDUPE_BY: Arg = Arg::strings("dedupe_by").aliases(&["dedupe"]);
pub(crate) const LIMIT: Arg = Arg::integer("limit", 1, None).aliases(&["max_rows"]);
/// JSON text, a string template, or a JSON value.
pub(crate) const TEMPLATE: Arg = Arg::string("template");
const GUARD_FORMULAS: Arg = Arg::boolean("guard_formulas").default_bool(true);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        format!(
            "Convert a data file (CSV, TSV, JSON array, JSONL, Parquet, xlsx; .gz/.zst) to CSV, \
             TSV, JSON, JSONL or Parquet, streaming, in bounded memory: the way to write large \
             JSON, JSONL or CSV files. Optional steps, in this order: `select` columns, \
             `rename` them, drop duplicates by `dedupe_by` keys, apply a `template`, stop \
             after `limit` rows. A `template` is a JSON value whose strings hold `{{column}}` \
             placeholders, filled per record as values (quotes and newlines stay valid JSON); \
             e.g. chat training JSONL: {{\"messages\":[{{\"role\":\"user\",\"content\":\"{{question}}\"}},\
             {{\"role\":\"assistant\",\"content\":\"{{answer}}\"}}]}}. The output is written \
             atomically (nothing half-written on failure); paths under `output/` go to the \
             session's output folder. Returns rows in, rows out, rows dropped and why, and the \
             real output path. {}",
            crate::WAY_OF_WORKING
        ),
        object(&[
            PATH.doc("The input data file in the workspace."),
            OUTPUT.doc(
                "Where to write, e.g. `output/train.jsonl`; the extension gives the format \
                 unless `to` is set. Replaced if it exists.",
            ),
            TO.doc("Output format (default: from the output's extension)."),
            format_prop(),
            sheet_prop(),
            SELECT.doc("Columns (keys) to keep, in this order (default: all)."),
            RENAME.doc(
                "Renames as \"old=new\" strings (an object {\"old\": \"new\"} is accepted too).",
            ),
            DEDUPE_BY.doc(
                "Keep only the first record for each combination of these columns' values \
                 (names after rename).",
            ),
            LIMIT.doc("Write at most this many records."),
            TEMPLATE.doc(
                "A JSON template (JSON text; an object is accepted too) applied to each record; \
                 `{column}` placeholders use names after rename; `{{` and `}}` are literal \
                 braces.",
            ),
            on_error_prop(),
            types_prop(),
            infer_types_prop(),
            GUARD_FORMULAS.doc(
                "For CSV/TSV output: text cells starting with =, +, -, @, a tab or a carriage \
                 return get a leading ' so a spreadsheet shows them instead of running them as \
                 formulas (default true; false writes them as they are, for a program rather \
                 than a spreadsheet).",
            ),
        ]),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&[TOOLSET])
    .output_schema(crate::output_schema())
    .aliases(&["convert_data"])
}

/// What one conversion is asked to do.
struct Plan {
    to: Format,
    select: Option<Vec<String>>,
    rename: Vec<(String, String)>,
    dedupe_by: Vec<String>,
    limit: Option<u64>,
    template: Option<Template>,
    on_error: OnError,
    limits: InputLimits,
    guard_formulas: bool,
    /// How CSV and TSV cells are typed (no template).
    typing: Typing,
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    let output = OUTPUT.str(&args)?;
    let to = TO.opt_nonempty_str(&args)?;
    let opts = read_opts(&args)?;
    let select = SELECT
        .opt_str_list(&args)?
        .map(|v| v.into_iter().map(str::to_string).collect::<Vec<_>>())
        .filter(|v| !v.is_empty());
    let rename = rename_arg(RENAME.opt_value(&args))?;
    let dedupe_by: Vec<String> = DEDUPE_BY
        .opt_str_list(&args)?
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    let limit = LIMIT.opt_u64(&args)?;
    let template = TEMPLATE.opt_value(&args).cloned();
    let on_error = on_error_arg(&args)?;
    let guard_formulas = GUARD_FORMULAS.bool(&args)?;
    let typing = Typing::from_args(&args)?;
    args.finish()?;
    let template = match template {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        // JSON text; a plain string like "Q: {question}" is a string template.
        Some(Value::String(s)) => Some(match Template::parse_text(&s) {
            Err(_) if !s.trim_start().starts_with(['{', '[', '"']) => {
                Template::parse(&Value::String(s))
            }
            other => other,
        }),
        Some(v) => Some(Template::parse(&v)),
    }
    .transpose()
    .map_err(|e| anyhow!("{NAME}: argument `template`: {e}"))?;
    let ws = ctx.workspace.clone();
    let out_p = ws.locate(output).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let out_shown = ws.show(&out_p);
    let (named, compression) = Format::from_name(&out_shown);
    if compression != Compression::None {
        bail!("{NAME}: compressed output ({out_shown}) is not supported; write it uncompressed");
    }
    let to = match to {
        Some(name) => Format::parse_output(name).ok_or_else(|| {
            anyhow!(
                "{NAME}: argument `to` must be one of {}, not {name:?}",
                OUTPUT_NAMES.join(", ")
            )
        })?,
        None => match named {
            Some(Format::Xlsx) => bail!("{NAME}: xlsx is read only; write csv or parquet"),
            Some(f) => f,
            None => bail!(
                "{NAME}: cannot tell the output format from {out_shown:?}; give it an extension \
                 ({}) or set `to`",
                OUTPUT_NAMES.join(", ")
            ),
        },
    };
    if let Some(t) = &template {
        if matches!(to, Format::Csv | Format::Tsv | Format::Parquet) && !t.is_object() {
            bail!(
                "{NAME}: a template for {} output must be a JSON object (its keys are the columns)",
                to.name()
            );
        }
    }
    let plan = Plan {
        to,
        select,
        rename,
        dedupe_by,
        limit,
        template,
        on_error,
        limits: InputLimits::from_ctx(ctx)?,
        guard_formulas,
        typing,
    };
    let in_p = ws.locate(given).map_err(|e| anyhow!("{NAME}: {e}"))?;
    // `format` is the input's; a model that meant the output's (`"format": "jsonl"` for a
    // CSV file) gets a parse error about the input, so a failure then says which is which.
    let format_hint = opts.format.and_then(|f| {
        let in_shown = ws.show(&in_p);
        let (by_name, _) = Format::from_name(&in_shown);
        (by_name != Some(f) && (by_name.is_some() || f == plan.to)).then(|| {
            format!(
                ". Note: `format` is the format of the input ({in_shown} was read as {}); the \
                 output's format is `to` (or the output's extension)",
                f.name()
            )
        })
    });
    let cancel = ctx.cancel.clone();
    let call = ctx.clone();
    let out = toolbox_host::blocking(format!("{NAME}: the conversion"), move || {
        let cancelled = || cancel.is_cancelled();
        let src = source::open(&ws, &in_p, &opts, &plan.limits)?;
        let progress = Progress::for_source(&call, &src);
        let (dir, name) = ws.parent_of(&out_p, true).map_err(|e| match e {
            PathError::NotAFileName(_) | PathError::NotADirectory { file: Some(_), .. } => {
                anyhow!("{e}")
            }
            other => anyhow!("cannot create the folder for {out_shown}: {other}"),
        })?;
        let mut result: Option<Result<Value>> = None;
        let written = dir.replace_with(&name, |file| {
            let r = plan.convert(src, opts.sheet.as_deref(), file, &cancelled, progress);
            let failed = r.is_err();
            result = Some(r);
            if failed {
                Err(std::io::Error::other("the conversion failed"))
            } else {
                Ok(())
            }
        });
        match (result, written) {
            (Some(Err(e)), _) => Err(e.context(format!("nothing was written to {out_shown}"))),
            (_, Err(e)) => Err(anyhow!(
                "cannot write {out_shown}: {e}; nothing was written"
            )),
            (Some(Ok(mut report)), Ok(())) => {
                report["output"] = json!(ws.show_real(&out_p));
                if let Ok(m) = ws.metadata(&out_p) {
                    report["output_bytes"] = json!(m.len());
                }
                Ok(report)
            }
            (None, Ok(())) => Err(anyhow!("the conversion did not run")),
        }
    })
    .await?
    .map_err(|e| anyhow!("{NAME}: {e:#}{}", format_hint.unwrap_or_default()))?;
    reply(&out)
}

/// `rename`: `["old=new", …]` or `{"old": "new"}`.
fn rename_arg(v: Option<&Value>) -> Result<Vec<(String, String)>> {
    let bad = || {
        anyhow!(
            "{NAME}: argument `rename` must be an array of \"old=new\" strings or an object \
             {{\"old\": \"new\"}}"
        )
    };
    match v {
        None => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or_else(bad)?.to_string())))
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                let s = item.as_str().ok_or_else(bad)?;
                let (old, new) = s.split_once('=').ok_or_else(bad)?;
                if old.is_empty() || new.is_empty() {
                    return Err(bad());
                }
                Ok((old.to_string(), new.to_string()))
            })
            .collect(),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => rename_arg(Some(&Value::Array(vec![Value::String(s.clone())]))),
        Some(_) => Err(bad()),
    }
}

/// What runs the rows of a chunk a worker gave back, one by one, through the general path.
type Replay<'a, C> = &'a mut dyn FnMut(C, &mut Run, &mut Sink<'_>) -> Result<Flow>;

/// The counts and memory of one conversion, shared by its general and fast paths.
struct Run {
    in_format: Format,
    fixed_columns: bool,
    hasher: (RandomState, RandomState),
    seen: HashSet<u128>,
    rows_in: u64,
    rows_out: u64,
    /// By reason, in the order of [`DROPPED`].
    dropped: [u64; 7],
    first_checked: bool,
    stopped: bool,
    json_buf: Vec<u8>,
    /// Reports how far the read is, on long work.
    progress: Progress,
    /// The input's bytes read so far, for the progress.
    meter: source::Meter,
}

impl Run {
    /// Counts `n` rows read, and reports progress now and then.
    fn count_in(&mut self, n: u64) {
        self.rows_in += n;
        self.progress.tick(self.rows_in, self.meter.file_bytes());
    }
}

/// The reasons a row is dropped, as the result names them.
const DROPPED: [&str; 7] = [
    "malformed",
    "ragged",
    "too_large",
    "duplicate",
    "missing_field",
    "not_in_columns",
    "type_mismatch",
];

fn bad_slot(kind: BadKind) -> usize {
    match kind {
        BadKind::Malformed => 0,
        BadKind::Ragged => 1,
        BadKind::TooLarge => 2,
        BadKind::TypeMismatch => 6,
    }
}

impl Plan {
    /// Whether the records go to the output as they are (no step changes them but `limit`).
    fn plain(&self) -> bool {
        self.select.is_none()
            && self.rename.is_empty()
            && self.dedupe_by.is_empty()
            && self.template.is_none()
    }

    fn convert(
        &self,
        src: source::Source,
        sheet: Option<&str>,
        file: &mut std::fs::File,
        cancelled: &dyn Fn() -> bool,
        progress: Progress,
    ) -> Result<Value> {
        let in_shown = src.shown.clone();
        let in_format = src.format;
        let note = src.note.clone();
        let mut guarded = 0u64;
        let mut run = Run {
            in_format,
            fixed_columns: matches!(
                in_format,
                Format::Csv | Format::Tsv | Format::Parquet | Format::Xlsx
            ),
            hasher: (RandomState::new(), RandomState::new()),
            seen: HashSet::new(),
            rows_in: 0,
            rows_out: 0,
            dropped: [0; 7],
            first_checked: false,
            stopped: false,
            json_buf: Vec::new(),
            meter: src.meter.clone(),
            progress,
        };
        let fast_csv = records::text_cells(in_format)
            && matches!(self.to, Format::Json | Format::Jsonl)
            && self.plain();
        let fast_jsonl = in_format == Format::Jsonl && self.to == Format::Parquet && self.plain();
        let fast_csv_parquet =
            records::text_cells(in_format) && self.to == Format::Parquet && self.plain();
        if fast_csv {
            // CSV cells checked here and sent raw to a thread that types them and writes
            // them as JSON text: no JSON values are built.
            let array = self.to == Format::Json;
            let mut rows: Option<fast::JsonRows> = None;
            records::read_csv_raw(src, Some(&self.typing), cancelled, &mut |row| match row {
                CsvRow::Bad(item) => self.bad(item, &mut run),
                CsvRow::Row {
                    at,
                    header,
                    types,
                    rec,
                } => {
                    let rows = match &mut rows {
                        Some(r) => r,
                        None => rows.insert(fast::JsonRows::start(
                            file.try_clone()?,
                            fast::json_keys(header),
                            types.to_vec(),
                            array,
                        )?),
                    };
                    if !rows.try_push(rec, self.limits.max_cell_bytes)? {
                        // Cell by cell, to name the first that is wrong as the general
                        // path does.
                        return match records::csv_item(at, rec, header, types, &self.limits) {
                            bad @ Item::Bad { .. } => self.bad(bad, &mut run),
                            Item::Record(_) => {
                                bail!(
                                    "line {at}: the fast path refused a row the general path takes"
                                )
                            }
                        };
                    }
                    run.count_in(1);
                    self.written(Ok(()), at, &mut run)
                }
            })?;
            match rows {
                Some(r) => r.finish()?,
                None => fast::JsonRows::start(file.try_clone()?, Vec::new(), Vec::new(), array)?
                    .finish()?,
            }
        } else {
            let mut sink = Sink::new(self.to, file, None);
            sink.set_formula_guard(self.guard_formulas);
            if fast_jsonl {
                self.jsonl_to_parquet(src, cancelled, &mut run, &mut sink)?;
            } else if fast_csv_parquet {
                self.csv_to_parquet(src, cancelled, &mut run, &mut sink)?;
            } else if records::text_cells(in_format) && self.template.is_none() {
                // CSV cells typed by their columns, whose types the output keeps.
                let mut typed = false;
                records::read_csv_raw(src, Some(&self.typing), cancelled, &mut |row| {
                    if let (false, CsvRow::Row { header, types, .. }) = (typed, &row) {
                        typed = true;
                        sink.set_column_types(self.output_types(header, types));
                    }
                    self.handle(row.into_item(&self.limits), &mut run, &mut sink)
                })?;
            } else {
                records::read(src, &self.limits, sheet, cancelled, &mut |item| {
                    self.handle(item, &mut run, &mut sink)
                })?;
            }
            guarded = sink.guarded();
            sink.finish()?;
        }
        run.progress.finish(run.rows_in, run.meter.file_bytes());
        let (rows_in, rows_out, dropped) = (run.rows_in, run.rows_out, run.dropped);
        let dropped_map: serde_json::Map<String, Value> = DROPPED
            .iter()
            .zip(dropped.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| (k.to_string(), json!(n)))
            .collect();
        let mut out = json!({
            "input": in_shown,
            "input_format": in_format.name(),
            "output_format": self.to.name(),
            "rows_in": rows_in,
            "rows_out": rows_out,
            "rows_dropped": dropped.iter().sum::<u64>(),
            "dropped": dropped_map,
        });
        if run.stopped {
            out["stopped_at_limit"] = json!(format!(
                "stopped after {rows_out} rows (limit); the rest of the input was not read"
            ));
        }
        if let Some(note) = note {
            out["note"] = json!(note);
        }
        if guarded > 0 {
            out["formula_cells_guarded"] = json!(format!(
                "{guarded} text cells began like a spreadsheet formula (=, +, -, @, tab, CR) \
                 and were written with a leading ' so a spreadsheet shows them (set \
                 guard_formulas: false to write them as they are)"
            ));
        }
        Ok(out)
    }

    /// JSONL to Parquet with no step but `limit`: line by line until the first records
    /// chose the columns, then in chunks that workers turn into batches (see
    /// [`parallel`]), written in input order.
    fn jsonl_to_parquet(
        &self,
        src: source::Source,
        cancelled: &dyn Fn() -> bool,
        run: &mut Run,
        sink: &mut Sink<'_>,
    ) -> Result<()> {
        let shown = src.shown.clone();
        let mut pool: Option<parallel::Pool> = None;
        let mut chunk = parallel::Chunk::default();
        records::read_jsonl_raw(src, &self.limits, cancelled, &mut |line| {
            let Some(workers) = &mut pool else {
                let flow = self.jsonl_line(line, run, sink, cancelled)?;
                if let Sink::Parquet(p) = &*sink {
                    if let Some(batcher) = p.batcher(self.limits.max_cell_bytes) {
                        pool = Some(parallel::Pool::start(&batcher, self.limits.parse_threads)?);
                    }
                }
                return Ok(flow);
            };
            chunk.push(line);
            if !chunk.full() {
                return Ok(Flow::Go);
            }
            let full = std::mem::replace(&mut chunk, workers.fresh());
            self.send_chunk(full, workers, run, sink, &mut |c, run, sink| {
                self.replay_lines(c, run, sink)
            })
        })?;
        let Some(mut workers) = pool else {
            return Ok(());
        };
        self.drain(chunk, &mut workers, run, sink, &mut |c, run, sink| {
            self.replay_lines(c, run, sink)
        })
        .map_err(|e| anyhow!("{shown}: {e:#}"))
    }

    /// Lines a worker gave back: the reading thread looks at the cancellation between
    /// chunks, and each record's work is linear and capped in keys.
    fn replay_lines(
        &self,
        chunk: parallel::Chunk,
        run: &mut Run,
        sink: &mut Sink<'_>,
    ) -> Result<Flow> {
        chunk.replay(&mut |line| self.jsonl_line(line, run, sink, &|| false))
    }

    /// Sends a chunk to the workers, once the results it must wait for are written; a
    /// result without a batch goes through `replay`.
    fn send_chunk<C: parallel::Work>(
        &self,
        chunk: C,
        workers: &mut parallel::Pool<C>,
        run: &mut Run,
        sink: &mut Sink<'_>,
        replay: Replay<'_, C>,
    ) -> Result<Flow> {
        while workers.must_wait(&chunk) {
            let Some(parsed) = workers.next()? else {
                break;
            };
            if self.parsed(parsed, workers, run, sink, replay)? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        workers.submit(chunk)?;
        Ok(Flow::Go)
    }

    /// A chunk back from the workers: its batch written (up to the limit), or, when a row
    /// did not take the fast path, its rows one by one through `replay`.
    fn parsed<C: parallel::Work>(
        &self,
        parsed: parallel::Parsed<C>,
        workers: &mut parallel::Pool<C>,
        run: &mut Run,
        sink: &mut Sink<'_>,
        replay: Replay<'_, C>,
    ) -> Result<Flow> {
        let (Some(batch), Sink::Parquet(p)) = (parsed.batch, &mut *sink) else {
            return replay(parsed.chunk, run, sink);
        };
        let room = self.limit.map(|l| l.saturating_sub(run.rows_out));
        let n = p.write_batch(batch, room)?;
        workers.recycle(parsed.chunk);
        run.count_in(n);
        run.rows_out += n;
        if self.limit.is_some_and(|l| run.rows_out >= l) {
            run.stopped = true;
            return Ok(Flow::Stop);
        }
        Ok(Flow::Go)
    }

    /// The end of a parallel conversion: the chunk being filled, then every result still
    /// out, in order.
    fn drain<C: parallel::Work>(
        &self,
        chunk: C,
        workers: &mut parallel::Pool<C>,
        run: &mut Run,
        sink: &mut Sink<'_>,
        replay: Replay<'_, C>,
    ) -> Result<()> {
        if run.stopped {
            return Ok(());
        }
        if !chunk.is_empty() && self.send_chunk(chunk, workers, run, sink, replay)? == Flow::Stop {
            return Ok(());
        }
        while let Some(parsed) = workers.next()? {
            if self.parsed(parsed, workers, run, sink, replay)? == Flow::Stop {
                break;
            }
        }
        Ok(())
    }

    /// CSV or TSV to Parquet with no step but `limit`: row by row through the general path
    /// until the first rows chose the columns' encodings, then in chunks of raw rows that
    /// workers check, type and turn into batches (see [`parallel`]), written in input order.
    fn csv_to_parquet(
        &self,
        src: source::Source,
        cancelled: &dyn Fn() -> bool,
        run: &mut Run,
        sink: &mut Sink<'_>,
    ) -> Result<()> {
        let shown = src.shown.clone();
        let mut pool: Option<parallel::Pool<parallel::CellChunk>> = None;
        let mut chunk = parallel::CellChunk::default();
        let mut columns: Option<(Vec<Arc<str>>, Vec<ColType>)> = None;
        let threads = self.limits.parse_threads;
        let max_cell = self.limits.max_cell_bytes;
        // Rows a worker gave back, one by one through the general path.
        let replay_with = |header: &[Arc<str>],
                           types: &[ColType],
                           chunk: parallel::CellChunk,
                           run: &mut Run,
                           sink: &mut Sink<'_>|
         -> Result<Flow> {
            chunk.replay(header.len(), &mut |at, row| {
                let item = match row {
                    Ok(rec) => records::csv_item(at, rec, header, types, &self.limits),
                    Err(bad) => bad,
                };
                self.handle(item, run, sink)
            })
        };
        records::read_csv_raw(src, Some(&self.typing), cancelled, &mut |row| {
            let (header, types) = match row {
                CsvRow::Row { header, types, .. } => (header, types),
                CsvRow::Bad(_) => (&[][..], &[][..]),
            };
            if columns.is_none() && !header.is_empty() {
                sink.set_column_types(self.output_types(header, types));
                columns = Some((header.to_vec(), types.to_vec()));
            }
            let Some(workers) = &mut pool else {
                let flow = self.handle(row.into_item(&self.limits), run, sink)?;
                if let (Sink::Parquet(p), Some((_, types))) = (&*sink, &columns) {
                    if let Some(batcher) = p.cell_batcher(types, max_cell) {
                        pool = Some(parallel::Pool::start_with(
                            threads,
                            "csv-parse",
                            move || {
                                let mut b = batcher.clone();
                                move |c: &parallel::CellChunk| {
                                    if c.has_bad() {
                                        None
                                    } else {
                                        b.batch(c.cells())
                                    }
                                }
                            },
                        )?);
                    }
                }
                return Ok(flow);
            };
            match row {
                CsvRow::Bad(item) => chunk.push_bad(item),
                CsvRow::Row { at, rec, .. } => chunk.push_row(at, rec),
            }
            if !chunk.full() {
                return Ok(Flow::Go);
            }
            let full = std::mem::replace(&mut chunk, workers.fresh());
            let (header, types) = columns
                .as_ref()
                .map(|(h, t)| (&h[..], &t[..]))
                .unwrap_or_default();
            self.send_chunk(full, workers, run, sink, &mut |c, run, sink| {
                replay_with(header, types, c, run, sink)
            })
        })?;
        let (Some(mut workers), Some((header, types))) = (pool, &columns) else {
            return Ok(());
        };
        self.drain(chunk, &mut workers, run, sink, &mut |c, run, sink| {
            replay_with(header, types, c, run, sink)
        })
        .map_err(|e| anyhow!("{shown}: {e:#}"))
    }

    /// One JSONL line to Parquet on the reading thread: straight into the column builders
    /// when it can, else through every step of the general path.
    fn jsonl_line(
        &self,
        line: JsonlLine<'_>,
        run: &mut Run,
        sink: &mut Sink<'_>,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<Flow> {
        match line {
            JsonlLine::Bad(item) => self.bad(item, run),
            JsonlLine::Line { at, bytes } => {
                if let Sink::Parquet(p) = sink {
                    if p.write_json_line(bytes, self.limits.max_cell_bytes)? {
                        run.count_in(1);
                        return self.written(Ok(()), at, run);
                    }
                }
                let item = records::jsonl_item(at, bytes, &self.limits, cancelled);
                self.handle(item, run, sink)
            }
        }
    }

    /// Counts a bad row, or fails on it (`on_error: "fail"`).
    fn fail_or_count(&self, run: &mut Run, slot: usize, message: String) -> Result<()> {
        if self.on_error == OnError::Fail {
            bail!("{message} (on_error: \"skip\" drops such rows, counted, and goes on)");
        }
        run.dropped[slot] += 1;
        Ok(())
    }

    /// After a record went to the output (or was refused by it): counts, and stops at the
    /// limit.
    fn written(
        &self,
        written: std::result::Result<(), crate::write::Reject>,
        at: u64,
        run: &mut Run,
    ) -> Result<Flow> {
        if let Err(reject) = written {
            self.fail_or_count(
                run,
                match reject.1 {
                    RejectKind::NotInColumns => 5,
                    RejectKind::TypeMismatch => 6,
                },
                format!(
                    "{} {}: {}",
                    records::place_word(run.in_format),
                    at,
                    reject.0
                ),
            )?;
            return Ok(Flow::Go);
        }
        run.rows_out += 1;
        if self.limit.is_some_and(|l| run.rows_out >= l) {
            run.stopped = true;
            return Ok(Flow::Stop);
        }
        Ok(Flow::Go)
    }

    /// A row that could not be read: counted, or the end (`on_error: "fail"`).
    fn bad(&self, item: Item, run: &mut Run) -> Result<Flow> {
        run.count_in(1);
        match item {
            Item::Bad { kind, message, .. } => self.fail_or_count(run, bad_slot(kind), message)?,
            Item::Record(r) => bail!(
                "{} {}: not a bad row",
                records::place_word(run.in_format),
                r.at
            ),
        }
        Ok(Flow::Go)
    }

    /// The general path: one record (or bad row) through every step to the output.
    fn handle(&self, item: Item, run: &mut Run, sink: &mut Sink<'_>) -> Result<Flow> {
        let mut rec = match item {
            Item::Record(r) => r,
            bad => return self.bad(bad, run),
        };
        run.count_in(1);
        if !run.first_checked && run.fixed_columns {
            run.first_checked = true;
            self.check_columns(&rec)?;
        }
        // With a template, CSV cells stay text.
        if let Some(sel) = &self.select {
            let mut fields = Vec::with_capacity(sel.len());
            for name in sel {
                let v = match rec.fields.iter_mut().find(|(k, _)| &**k == name.as_str()) {
                    Some((_, v)) => std::mem::take(v),
                    None => Value::Null,
                };
                fields.push((Arc::from(name.as_str()), v));
            }
            rec.fields = fields;
        }
        for (old, new) in &self.rename {
            if let Some(slot) = rec.fields.iter_mut().find(|(k, _)| &**k == old.as_str()) {
                slot.0 = Arc::from(new.as_str());
            }
        }
        if !self.dedupe_by.is_empty() {
            let mut a = run.hasher.0.build_hasher();
            let mut b = run.hasher.1.build_hasher();
            for k in &self.dedupe_by {
                let text = rec
                    .get(k)
                    .map_or_else(|| "\u{0}absent".to_string(), Value::to_string);
                a.write(text.as_bytes());
                a.write_u8(0xff);
                b.write(text.as_bytes());
                b.write_u8(0xff);
            }
            let h = (u128::from(a.finish()) << 64) | u128::from(b.finish());
            if !run.seen.insert(h) {
                run.dropped[3] += 1;
                return Ok(Flow::Go);
            }
            if run.seen.len() as u64 > self.limits.max_unique_keys {
                bail!(
                    "more than {} distinct `dedupe_by` keys to remember, the limit ([data] \
                     max_unique_keys)",
                    self.limits.max_unique_keys
                );
            }
        }
        let written = match &self.template {
            None => sink.write(Out::Fields(&rec.fields))?,
            Some(t) => {
                // JSON output takes the template's JSON as it is written; the other formats
                // take its fields.
                let applied = if matches!(self.to, Format::Json | Format::Jsonl) {
                    run.json_buf.clear();
                    t.write_json(&rec, &mut run.json_buf).map(|()| None)
                } else {
                    t.apply_fields(&rec).map(Some)
                };
                match applied {
                    Ok(None) => sink.write(Out::Json(&run.json_buf))?,
                    Ok(Some(fields)) => sink.write(Out::Fields(&fields))?,
                    Err(col) => {
                        self.fail_or_count(
                            run,
                            4,
                            format!(
                                "{} {}: no field {col:?} for the template",
                                records::place_word(run.in_format),
                                rec.at
                            ),
                        )?;
                        return Ok(Flow::Go);
                    }
                }
            }
        };
        self.written(written, rec.at, run)
    }

    /// The CSV columns' types under their output names (after `select` and `rename`).
    fn output_types<'a>(
        &'a self,
        header: &'a [Arc<str>],
        types: &'a [ColType],
    ) -> impl Iterator<Item = (Arc<str>, ColType)> + 'a {
        header.iter().zip(types).filter_map(move |(name, ty)| {
            if let Some(sel) = &self.select {
                if !sel.iter().any(|c| **c == **name) {
                    return None;
                }
            }
            let out = self
                .rename
                .iter()
                .find(|(old, _)| **old == **name)
                .map_or_else(|| name.clone(), |(_, new)| Arc::from(new.as_str()));
            Some((out, *ty))
        })
    }

    /// For inputs with a header: every name `select`, `rename`, `dedupe_by` and the template
    /// use must be a column.
    fn check_columns(&self, rec: &records::Record) -> Result<()> {
        let have: Vec<&str> = rec.fields.iter().map(|(k, _)| &**k).collect();
        let list = || {
            let mut s = have
                .iter()
                .take(50)
                .map(|c| format!("{c:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            if have.len() > 50 {
                s.push_str(", …");
            }
            s
        };
        if let Some(sel) = &self.select {
            if let Some(bad) = sel.iter().find(|c| !have.contains(&c.as_str())) {
                bail!(
                    "`select` names {bad:?}, which is not a column; the columns are {}",
                    list()
                );
            }
        }
        for (old, _) in &self.rename {
            let known = match &self.select {
                Some(sel) => sel.contains(old),
                None => have.contains(&old.as_str()),
            };
            if !known {
                bail!(
                    "`rename` names {old:?}, which is not a column; the columns are {}",
                    list()
                );
            }
        }
        let after: Vec<String> = match &self.select {
            Some(sel) => sel.clone(),
            None => have.iter().map(|s| s.to_string()).collect(),
        }
        .into_iter()
        .map(|c| {
            self.rename
                .iter()
                .find(|(o, _)| *o == c)
                .map_or(c, |(_, n)| n.clone())
        })
        .collect();
        let check = |what: &str, names: &[String]| -> Result<()> {
            if let Some(bad) = names.iter().find(|c| !after.contains(c)) {
                bail!(
                    "{what} names {bad:?}, which is not a column (after select and rename); \
                     the columns are {}",
                    after
                        .iter()
                        .take(50)
                        .map(|c| format!("{c:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            Ok(())
        };
        check("`dedupe_by`", &self.dedupe_by)?;
        if let Some(t) = &self.template {
            check("the template", &t.columns())?;
        }
        Ok(())
    }
}
