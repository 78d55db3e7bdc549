//! `data__inspect`: what a data file (or each data file of a folder) holds.

use anyhow::{anyhow, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::ToolOutput;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::{Dir, EntryKind, ToolContext, Workspace, WsPath};

use crate::csvtypes::Typing;
use crate::format::Format;
use crate::progress::Progress;
use crate::records::{self, BadKind, Flow, Item};
use crate::source::{self, Body, ReadOptions};
use crate::stats::{self, Inferred, Table};
use crate::{
    format_prop, infer_types_prop, read_opts, reply, sheet_prop, types_prop, InputLimits, PATH,
    TOOLSET,
};

/// The tool's name.
pub const NAME: &str = "data__inspect";

/// Files listed from one folder, at most.
const MAX_FILES: usize = 200;
/// Folder levels walked below the one given.
const MAX_DEPTH: usize = 3;
/// Rows counted per file in a folder listing unless `max_rows` says otherwise.
const FOLDER_ROWS: u64 = 1_000_000;
/// Bad rows listed by line.
const BAD_SHOWN: usize = 5;
/// Sample rows shown unless `sample_rows` says otherwise.
const DEFAULT_SAMPLE_ROWS: u64 = 5;
/// The most sample rows shown: more is capped.
const MAX_SAMPLE_ROWS: u64 = 50;
/// Columns described in full unless `max_columns` says otherwise.
const DEFAULT_MAX_COLUMNS: u64 = 50;
/// The most columns described in full: more is capped.
const MAX_MAX_COLUMNS: u64 = 2000;

const SAMPLE_ROWS: Arg =
    Arg::integer("sample_rows", 0, Some(MAX_SAMPLE_ROWS)).default(DEFAULT_SAMPLE_ROWS);
const MAX_ROWS: Arg = Arg::integer("max_rows", 1, None);
const MAX_COLUMNS: Arg =
    Arg::integer("max_columns", 1, Some(MAX_MAX_COLUMNS)).default(DEFAULT_MAX_COLUMNS);

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        format!(
            "Inspect a dataset before working with it. For a folder (e.g. `input/`): each data \
             file with its format, size and row count. For a file (CSV, TSV, JSON array, JSONL, \
             Parquet, xlsx; .gz/.zst read transparently): the row count; each column with its \
             inferred type, null count, examples, min/max for numbers and dates; a few sample \
             rows; for JSON/JSONL the inferred JSON Schema of the records with key counts. \
             Streams in bounded memory: `max_rows` caps the rows read, and the result says \
             which figures are exact. Malformed and ragged rows are counted with their line \
             numbers. {}",
            crate::WAY_OF_WORKING
        ),
        object(&[
            PATH.doc("A data file or a folder in the workspace, e.g. `input/`."),
            format_prop(),
            sheet_prop(),
            SAMPLE_ROWS.doc(format!(
                "Sample rows to show (default {DEFAULT_SAMPLE_ROWS}, at most {MAX_SAMPLE_ROWS})."
            )),
            MAX_ROWS.doc(
                "Read at most this many rows (default: all of a file; 1000000 per file of a \
                 folder); figures then cover those rows only.",
            ),
            MAX_COLUMNS.doc(format!(
                "Columns described in full (default {DEFAULT_MAX_COLUMNS}); the rest are named."
            )),
            types_prop(),
            infer_types_prop(),
        ]),
    )
    .toolsets(&[TOOLSET])
    .output_schema(crate::output_schema())
    .aliases(&["inspect_data"])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    let opts = read_opts(&args)?;
    // A larger sample or more columns than the most are capped, not refused.
    let sample = SAMPLE_ROWS
        .opt_u64_at_least(&args)?
        .unwrap_or(DEFAULT_SAMPLE_ROWS)
        .min(MAX_SAMPLE_ROWS) as usize;
    let max_rows = MAX_ROWS.opt_u64(&args)?;
    let max_columns = MAX_COLUMNS
        .opt_u64_at_least(&args)?
        .unwrap_or(DEFAULT_MAX_COLUMNS)
        .min(MAX_MAX_COLUMNS) as usize;
    let typing = Typing::from_args(&args)?;
    args.finish()?;
    let limits = InputLimits::from_ctx(ctx)?;
    let ws = ctx.workspace.clone();
    let p = ws.locate(given).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let cancel = ctx.cancel.clone();
    let call = ctx.clone();
    let out = toolbox_host::blocking(format!("{NAME}: the inspection"), move || {
        let cancelled = || cancel.is_cancelled();
        let meta = ws.metadata(&p).map_err(|e| anyhow!("{e}"))?;
        if meta.is_dir() {
            folder(&ws, &p, &opts, &limits, max_rows, &cancelled)
        } else {
            file(
                &ws,
                &p,
                &opts,
                &limits,
                sample,
                max_rows,
                max_columns,
                &typing,
                &call,
                &cancelled,
            )
        }
    })
    .await?
    .map_err(|e| anyhow!("{NAME}: {e:#}"))?;
    reply(&out)
}

/// What one file holds.
#[allow(clippy::too_many_arguments)]
fn file(
    ws: &Workspace,
    p: &WsPath,
    opts: &ReadOptions,
    limits: &InputLimits,
    sample: usize,
    max_rows: Option<u64>,
    max_columns: usize,
    typing: &Typing,
    call: &ToolContext,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    let src = source::open(ws, p, opts, limits)?;
    let mut progress = Progress::for_source(call, &src);
    let meter = src.meter.clone();
    let mut out = json!({
        "path": src.shown,
        "format": src.format.name(),
        "size_bytes": src.size,
    });
    if let Some(c) = src.compression.name() {
        out["compression"] = json!(c);
    }
    if let Some(note) = &src.note {
        out["note"] = json!(note);
    }
    if let Some(d) = src.dialect {
        out["delimiter"] = json!((d.delimiter as char).to_string());
    }
    let format = src.format;
    let text = records::text_cells(format);
    let json_records = matches!(format, Format::Json | Format::Jsonl);
    let mut table = Table::default();
    let mut schema = Inferred::default();
    let mut samples: Vec<Value> = Vec::new();
    let mut bad: [u64; 4] = [0; 4];
    let mut bad_shown: Vec<String> = Vec::new();
    let mut read_rows: u64 = 0;
    let sheet = opts.sheet.as_deref();
    let typing = text.then_some(typing);
    let end = records::read_typed(src, limits, sheet, typing, cancelled, &mut |item| {
        progress.tick(read_rows + 1, meter.file_bytes());
        match item {
            Item::Record(rec) => {
                read_rows += 1;
                table.add(&rec.fields);
                if json_records {
                    schema.add_record(&rec.fields);
                }
                if samples.len() < sample {
                    let row: serde_json::Map<String, Value> = rec
                        .fields
                        .iter()
                        .take(max_columns)
                        .map(|(k, v)| (k.to_string(), stats::shown(v)))
                        .collect();
                    samples.push(Value::Object(row));
                }
            }
            Item::Bad { kind, message, .. } => {
                read_rows += 1;
                bad[match kind {
                    BadKind::Ragged => 0,
                    BadKind::Malformed => 1,
                    BadKind::TooLarge => 2,
                    BadKind::TypeMismatch => 3,
                }] += 1;
                if bad_shown.len() < BAD_SHOWN {
                    bad_shown.push(message);
                }
            }
        }
        Ok(if max_rows.is_some_and(|m| read_rows >= m) {
            Flow::Stop
        } else {
            Flow::Go
        })
    })?;
    progress.finish(read_rows, meter.file_bytes());
    // Stopped exactly at the last row: the count is still exact if nothing follows, which
    // only another read would tell; say "at least".
    out["rows"] = json!(table.rows);
    out["rows_exact"] = json!(end.complete);
    out["figures_cover"] = json!(if end.complete {
        "every row".to_string()
    } else {
        format!("the first {read_rows} rows (max_rows)")
    });
    if bad.iter().any(|n| *n > 0) {
        out["bad_rows"] = json!({
            "ragged": bad[0],
            "malformed": bad[1],
            "too_large": bad[2],
            "type_mismatch": bad[3],
            "first": bad_shown,
        });
    }
    if let Some(h) = &end.header {
        if table.rows == 0 {
            out["columns"] = json!(h.iter().map(|c| json!({"name": &**c})).collect::<Vec<_>>());
        }
    }
    let width = table.width();
    if table.rows > 0 {
        let (mut cols, left) = table.report(max_columns);
        // CSV and TSV: the type each column is read and written as.
        if let (Some(types), Some(header)) = (&end.types, &end.header) {
            for c in cols.iter_mut() {
                let at = header.iter().position(|h| Some(&**h) == c["name"].as_str());
                if let Some(t) = at.and_then(|i| types.get(i)) {
                    c["type"] = json!(t.name());
                }
            }
        }
        out["column_count"] = json!(width);
        out["columns"] = json!(cols);
        if !left.is_empty() {
            let named: Vec<&String> = left.iter().take(200).collect();
            out["columns_left_out"] = json!({
                "count": left.len(),
                "names": named,
                "note": "described in full: the first max_columns columns; raise max_columns to see more",
            });
        }
    }
    if json_records && table.rows > 0 {
        let mut s = schema.schema();
        if let Value::Object(m) = &mut s {
            m.insert(
                "$schema".into(),
                json!("https://json-schema.org/draft/2020-12/schema"),
            );
        }
        out["json_schema"] = s;
    }
    out["sample_rows"] = json!(samples);
    Ok(out)
}

/// Each data file of a folder, walked by descriptor.
fn folder(
    ws: &Workspace,
    p: &WsPath,
    opts: &ReadOptions,
    limits: &InputLimits,
    max_rows: Option<u64>,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    let dir = ws.open_dir(p).map_err(|e| anyhow!("{e}"))?;
    let mut files: Vec<Value> = Vec::new();
    let mut others: u64 = 0;
    let mut more = false;
    walk(
        ws,
        &dir,
        p,
        0,
        opts,
        limits,
        max_rows.unwrap_or(FOLDER_ROWS),
        cancelled,
        &mut files,
        &mut others,
        &mut more,
    )?;
    let mut out = json!({
        "folder": ws.show(p),
        "data_files": files,
        "other_files": others,
    });
    if more {
        out["note"] = json!(format!(
            "more than {MAX_FILES} data files (or folders deeper than {MAX_DEPTH}); the rest left out"
        ));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn walk(
    ws: &Workspace,
    dir: &Dir,
    at: &WsPath,
    depth: usize,
    opts: &ReadOptions,
    limits: &InputLimits,
    max_rows: u64,
    cancelled: &dyn Fn() -> bool,
    files: &mut Vec<Value>,
    others: &mut u64,
    more: &mut bool,
) -> Result<()> {
    for entry in dir.entries()? {
        if cancelled() {
            return Err(anyhow!("cancelled"));
        }
        let child = at.join(&entry.name);
        let name = entry.name.to_string_lossy();
        match entry.kind {
            EntryKind::Dir => {
                if name.starts_with('.') {
                    continue;
                }
                if depth + 1 > MAX_DEPTH {
                    *more = true;
                    continue;
                }
                if let Ok(sub) = dir.open_dir(&entry.name) {
                    walk(
                        ws,
                        &sub,
                        &child,
                        depth + 1,
                        opts,
                        limits,
                        max_rows,
                        cancelled,
                        files,
                        others,
                        more,
                    )?;
                }
            }
            EntryKind::File => {
                let (format, _) = Format::from_name(&name);
                if format.is_none() {
                    *others += 1;
                    continue;
                }
                if files.len() >= MAX_FILES {
                    *more = true;
                    continue;
                }
                let shown = ws.show(&child);
                let row = match dir.open_file(&entry.name) {
                    Ok(f) => count_rows(f, shown.clone(), opts, limits, max_rows, cancelled),
                    Err(e) => Err(anyhow!("cannot open: {e}")),
                };
                files.push(match row {
                    Ok(v) => v,
                    Err(e) => json!({"path": shown, "error": format!("{e:#}")}),
                });
            }
            _ => *others += 1,
        }
    }
    Ok(())
}

/// One folder entry: format, size, rows.
fn count_rows(
    file: std::fs::File,
    shown: String,
    opts: &ReadOptions,
    limits: &InputLimits,
    max_rows: u64,
    cancelled: &dyn Fn() -> bool,
) -> Result<Value> {
    let size = file.metadata()?.len();
    let opts = ReadOptions {
        format: None,
        sheet: opts.sheet.clone(),
    };
    let src = source::open_file(file, size, shown.clone(), &opts, limits)?;
    let mut out = json!({
        "path": shown,
        "format": src.format.name(),
        "size_bytes": size,
    });
    if let Some(note) = &src.note {
        out["note"] = json!(note);
    }
    if src.format == Format::Parquet {
        if let Body::File(f) = src.body {
            out["rows"] = json!(records::pq::row_count(f)?);
            out["rows_exact"] = json!(true);
        }
        return Ok(out);
    }
    let mut rows: u64 = 0;
    let mut bad: u64 = 0;
    let end = records::read(src, limits, opts.sheet.as_deref(), cancelled, &mut |item| {
        match item {
            Item::Record(_) => rows += 1,
            Item::Bad { .. } => bad += 1,
        }
        Ok(if rows + bad >= max_rows {
            Flow::Stop
        } else {
            Flow::Go
        })
    })?;
    out["rows"] = json!(rows);
    out["rows_exact"] = json!(end.complete);
    if bad > 0 {
        out["bad_rows"] = json!(bad);
    }
    Ok(out)
}
