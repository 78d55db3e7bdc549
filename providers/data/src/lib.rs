//! toolbox-data is the `data` provider: three tools that inspect, validate and convert
//! datasets in the workspace, streaming, in bounded memory.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `data__inspect` | read | a folder: each data file with its format, size and rows; a file: rows, columns with types, nulls, examples, min/max, sample rows, and for JSON records the inferred JSON Schema |
//! | `data__validate` | read | records against a JSON Schema (draft 2020-12) and `unique` / `required_nonempty` rules: counts, then the first errors with line and JSON pointer |
//! | `data__convert` | file write | any format to CSV, TSV, JSON, JSONL or Parquet, with `select`, `rename`, `dedupe_by`, `limit` and a JSON `template` per record |
//!
//! Formats ([`format`]): CSV and TSV (delimiter and quote sniffed, BOM skipped, ragged rows
//! reported), JSON (an array of objects), JSONL, Parquet and `.xlsx` (read only), with gzip
//! and zstd read transparently. Every file is opened beneath the workspace root
//! ([`source`]), read as a stream of records ([`records`]), and every input limit is a
//! documented `[data]` key ([`InputLimits`]): nothing is held whole but an xlsx sheet's shared
//! strings.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod convert;
pub mod csvtypes;
mod data_agent;
mod fast;
pub mod format;
mod inspect;
mod progress;
pub mod records;
pub mod source;
mod stats;
mod validate;
mod write;

use std::sync::{Arc, LazyLock};

use anyhow::{anyhow, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Arg, Args, Key, Prop, Table, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

toolbox_host::register_provider!("data", || Arc::new(DataProvider::default()));

/// The toolset every data tool belongs to.
const TOOLSET: &str = "data";

/// The input limits, each a `[data]` key. A file that passes one is refused with an error
/// naming the key, never read until memory runs out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputLimits {
    /// The longest line of JSONL, or record of CSV/TSV (quoted newlines included), in bytes.
    pub max_line_bytes: u64,
    /// The longest single value (a CSV cell, a string in a record), in bytes.
    pub max_cell_bytes: u64,
    /// The most bytes a gzip or zstd file may expand to; past 256 MiB a file that expands
    /// more than [`MAX_EXPANSION_RATIO`] times its compressed size is refused as a bomb.
    pub max_decompressed_bytes: u64,
    /// The most cells read from one xlsx sheet.
    pub max_xlsx_cells: u64,
    /// The most strings an xlsx's shared-strings table may hold (it is read whole).
    pub max_xlsx_strings: u64,
    /// The most bytes an xlsx's shared-strings table may expand to (it is read whole).
    pub max_xlsx_strings_bytes: u64,
    /// The most keys one JSON record may have (more is a bad row).
    pub max_record_keys: u64,
    /// The most distinct keys `unique` / `dedupe_by` remember (about 40 bytes each).
    pub max_unique_keys: u64,
    /// Threads that parse JSONL for Parquet output; 0 is as many as the machine has cores,
    /// at most 4.
    pub parse_threads: u64,
}

/// A compressed file may expand at most this many times its size once past
/// [`RATIO_FLOOR_BYTES`] (gzip itself cannot pass about 1032).
pub const MAX_EXPANSION_RATIO: u64 = 200;
/// The expansion ratio is only checked past this many decompressed bytes.
pub const RATIO_FLOOR_BYTES: u64 = 256 * 1024 * 1024;

impl Default for InputLimits {
    fn default() -> Self {
        DEFAULTS
    }
}

const DEFAULTS: InputLimits = InputLimits {
    max_line_bytes: 64 * 1024 * 1024,
    max_cell_bytes: 16 * 1024 * 1024,
    max_decompressed_bytes: 16 * 1024 * 1024 * 1024,
    max_xlsx_cells: 50_000_000,
    max_xlsx_strings: 5_000_000,
    max_xlsx_strings_bytes: 256 * 1024 * 1024,
    max_record_keys: 16_384,
    max_unique_keys: 20_000_000,
    parse_threads: 0,
};

// An untrusted workspace's toolbox.toml may only lower the [data] limits (and set
// parse_threads to a smaller positive number, never 0).
const MAX_LINE_BYTES: Key = Key::integer("max_line_bytes", 16, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_line_bytes));
const MAX_CELL_BYTES: Key =
    Key::integer("max_cell_bytes", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULTS.max_cell_bytes));
const MAX_DECOMPRESSED_BYTES: Key = Key::integer("max_decompressed_bytes", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_decompressed_bytes));
const MAX_XLSX_CELLS: Key =
    Key::integer("max_xlsx_cells", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULTS.max_xlsx_cells));
const MAX_XLSX_STRINGS: Key = Key::integer("max_xlsx_strings", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_xlsx_strings));
const MAX_XLSX_STRINGS_BYTES: Key = Key::integer("max_xlsx_strings_bytes", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_xlsx_strings_bytes));
const MAX_RECORD_KEYS: Key = Key::integer("max_record_keys", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_record_keys));
const MAX_UNIQUE_KEYS: Key = Key::integer("max_unique_keys", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULTS.max_unique_keys));
const PARSE_THREADS: Key = Key::integer("parse_threads", 0, 16).workspace(Tighten::Limit);
/// The `[data]` table: every key it understands.
const TABLE: Table = Table::new(
    "data",
    &[
        MAX_LINE_BYTES,
        MAX_CELL_BYTES,
        MAX_DECOMPRESSED_BYTES,
        MAX_XLSX_CELLS,
        MAX_XLSX_STRINGS,
        MAX_XLSX_STRINGS_BYTES,
        MAX_RECORD_KEYS,
        MAX_UNIQUE_KEYS,
        PARSE_THREADS,
    ],
);
toolbox_core::register_table!(TABLE);

impl InputLimits {
    /// The `[data]` table of the call's configuration, defaults for what it leaves out.
    pub fn from_ctx(ctx: &ToolContext) -> Result<InputLimits> {
        let read = || -> Result<InputLimits> {
            let t = TABLE.read(&ctx.config)?;
            let d = DEFAULTS;
            Ok(InputLimits {
                max_line_bytes: MAX_LINE_BYTES.u64(&t)?.unwrap_or(d.max_line_bytes),
                max_cell_bytes: MAX_CELL_BYTES.u64(&t)?.unwrap_or(d.max_cell_bytes),
                max_decompressed_bytes: MAX_DECOMPRESSED_BYTES
                    .u64(&t)?
                    .unwrap_or(d.max_decompressed_bytes),
                max_xlsx_cells: MAX_XLSX_CELLS.u64(&t)?.unwrap_or(d.max_xlsx_cells),
                max_xlsx_strings: MAX_XLSX_STRINGS.u64(&t)?.unwrap_or(d.max_xlsx_strings),
                max_xlsx_strings_bytes: MAX_XLSX_STRINGS_BYTES
                    .u64(&t)?
                    .unwrap_or(d.max_xlsx_strings_bytes),
                max_record_keys: MAX_RECORD_KEYS.u64(&t)?.unwrap_or(d.max_record_keys),
                max_unique_keys: MAX_UNIQUE_KEYS.u64(&t)?.unwrap_or(d.max_unique_keys),
                parse_threads: PARSE_THREADS.u64(&t)?.unwrap_or(d.parse_threads),
            })
        };
        read().map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))
    }
}

/// The `data` provider. It holds no state: every call reads its files afresh.
#[derive(Debug, Default, Clone)]
pub struct DataProvider {
    _private: (),
}

#[async_trait]
impl ToolProvider for DataProvider {
    fn name(&self) -> &str {
        "data"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// Every data tool, each listed once.
static TOOLS: LazyLock<Tools<DataProvider>> = LazyLock::new(|| {
    Tools::<DataProvider>::new("data")
        .tool(inspect::info(), |_, _, args, ctx| {
            output(inspect::run(args, ctx))
        })
        .tool(validate::info(), |_, _, args, ctx| {
            output(validate::run(args, ctx))
        })
        .tool(convert::info(), |_, _, args, ctx| {
            output(convert::run(args, ctx))
        })
        .family(data_agent::infos(), |_, tool, args, ctx| {
            output(data_agent::run(tool, args, ctx))
        })
});

/// The rules of working with data that every data tool's description carries, so a model
/// meets them whichever tool it reads first.
pub const WAY_OF_WORKING: &str = "Rules: use the data tools, not pandas code in \
run_python_code and never `shell`, for inspecting, validating and converting CSV/JSON/JSONL/\
Parquet/xlsx; `file_manager__write` is for small files only (large JSON, JSONL or CSV goes \
through data__convert, or Python with pathlib/json/csv). Temporary files go to `scratchpad/`; \
deliverables go to `output/`.";

/// The `path` of the reading tools (`data__inspect`, `data__validate`).
const PATH: Arg = Arg::string("path")
    .aliases(&["file_path", "file"])
    .required();
/// The input `format`, overriding the extension (read leniently: `ndjson`, `tab`, `pq` too).
const FORMAT: Arg = Arg::choice("format", format::INPUT_NAMES);
/// The xlsx `sheet`, by name or 0-based index (a number is accepted too).
const SHEET: Arg = Arg::string("sheet");
/// What a malformed row does.
const ON_ERROR: Arg = Arg::choice("on_error", &["fail", "skip"]);
/// A CSV column's type chosen by the caller. An array of strings, as `rename` is, so strict
/// schemas (closed objects only) can state it; an object is accepted too.
const TYPES: Arg = Arg::strings("types").aliases(&["column_types", "dtypes"]);
/// Whether CSV cells are typed at all.
const INFER_TYPES: Arg = Arg::boolean("infer_types").default_bool(true);

/// The `format` property of the reading tools.
fn format_prop() -> Prop {
    FORMAT.doc(
        "Input format, overriding the extension and the sniffed content (default: from the \
         extension, confirmed by sniffing; .gz and .zst are decompressed).",
    )
}

/// The `sheet` property: an xlsx sheet by name or index.
fn sheet_prop() -> Prop {
    SHEET.doc("For .xlsx: the sheet, by name or 0-based index (default: the first sheet).")
}

/// The `on_error` property.
fn on_error_prop() -> Prop {
    ON_ERROR.doc(
        "What a malformed row does: `fail` stops with its line number (default), `skip` \
         counts it and goes on.",
    )
}

/// The `types` property.
fn types_prop() -> Prop {
    TYPES.doc(
        "CSV/TSV only: a column's type instead of the one inferred from the first 20480 rows, \
         as \"column=type\" strings, e.g. [\"zip=string\", \"price=number\"] (types: string, \
         integer, number, boolean, date, timestamp; an object {\"zip\": \"string\"} is accepted \
         too).",
    )
}

/// The `infer_types` property.
fn infer_types_prop() -> Prop {
    INFER_TYPES.doc(
        "CSV/TSV only: type each column (integer, number, boolean, date, timestamp, string) \
         from its first 20480 rows (default true); false keeps every cell as text.",
    )
}

/// How a malformed row is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnError {
    Fail,
    Skip,
}

/// Reads `on_error`.
fn on_error_arg(args: &Args<'_>) -> Result<OnError> {
    Ok(match ON_ERROR.opt_choice(args)? {
        Some("skip") => OnError::Skip,
        _ => OnError::Fail,
    })
}

/// The reading options every tool shares: `format` and `sheet`.
fn read_opts(args: &Args<'_>) -> Result<source::ReadOptions> {
    let format = match FORMAT.opt_nonempty_str(args)? {
        None => None,
        Some(name) => Some(format::Format::parse_input(name).ok_or_else(|| {
            anyhow!(
                "{}: argument `format` must be one of {}, not {name:?}",
                args.tool(),
                format::INPUT_NAMES.join(", ")
            )
        })?),
    };
    let sheet = match SHEET.opt_value(args) {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) if n.as_u64().is_some() => Some(n.to_string()),
        Some(other) => {
            return Err(anyhow!(
                "{}: argument `sheet` must be a sheet name or a 0-based index, not {}",
                args.tool(),
                toolbox_core::json_kind(other)
            ))
        }
    };
    Ok(source::ReadOptions { format, sheet })
}

/// Pretty JSON text for the model, and the same object as the structured result for
/// programs (MCP `structuredContent`, `"structured"` over HTTP, `ToolCallInfo::structured`).
fn reply(v: &Value) -> Result<ToolOutput> {
    Ok(ToolOutput::new(serde_json::to_string_pretty(v)?, v.clone()))
}

/// Every data tool's structured result: the object its text shows, key for key (see
/// docs/providers/data.md for each tool's keys).
fn output_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "description": "The same object as the text result, as JSON."
    })
}
