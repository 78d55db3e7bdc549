//! `data__validate`: records against a JSON Schema (draft 2020-12) and simple rules.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::io::Read;
use std::sync::Arc;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::ToolOutput;
use toolbox_core::{Arg, Args, Prop, ToolInfo};
use toolbox_host::{ToolContext, Workspace};

use crate::progress::Progress;
use crate::records::{self, place_word, Flow, Item, Record};
use crate::source;
use crate::{
    format_prop, on_error_arg, on_error_prop, read_opts, reply, sheet_prop, InputLimits, OnError,
    PATH, TOOLSET,
};

/// The tool's name.
pub const NAME: &str = "data__validate";

/// The largest schema file read.
const MAX_SCHEMA_BYTES: u64 = 4 * 1024 * 1024;
/// Errors listed unless `max_errors` says otherwise.
const DEFAULT_MAX_ERRORS: u64 = 20;
/// The most errors listed: more is capped.
const MAX_MAX_ERRORS: u64 = 1000;

/// The JSON Schema: JSON text, an object, or a file's path.
pub(crate) const SCHEMA: Arg = Arg::string("schema").aliases(&["json_schema"]);
pub(crate) const UNIQUE: Arg = Arg::strings("unique");
pub(crate) const REQUIRED_NONEMPTY: Arg = Arg::strings("required_nonempty");
/// Also the data agent's `max_errors`, which this tool's cap applies to.
pub(crate) const MAX_ERRORS: Arg =
    Arg::integer("max_errors", 1, Some(MAX_MAX_ERRORS)).default(DEFAULT_MAX_ERRORS);

/// The `max_errors` property (the data agent's too).
pub(crate) fn max_errors_prop() -> Prop {
    MAX_ERRORS.doc(format!(
        "Errors listed (default {DEFAULT_MAX_ERRORS}, at most {MAX_MAX_ERRORS})."
    ))
}

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        format!(
            "Validate every record of a data file (CSV, TSV, JSON array, JSONL, Parquet, xlsx; \
             .gz/.zst) against a JSON Schema (draft 2020-12) and optional rules: `unique` \
             fields and `required_nonempty` fields. CSV cells are typed by the schema first, \
             so \"42\" passes `type: integer`. Returns the counts of valid and invalid \
             records, then the first errors, each with its line (or row), the JSON pointer \
             and the message. A bad schema is reported with its JSON pointer. {}",
            crate::WAY_OF_WORKING
        ),
        object(&[
            PATH.doc("The data file in the workspace."),
            SCHEMA.doc(
                "The JSON Schema: JSON text (an object is accepted too), or the path of a .json \
                 file in the workspace or a skill (`skill:<name>/<path>`). Optional when rules \
                 are given.",
            ),
            UNIQUE.doc("Fields whose values must not repeat across records (each on its own)."),
            REQUIRED_NONEMPTY.doc("Fields that must be present and not null, empty or blank."),
            format_prop(),
            sheet_prop(),
            on_error_prop(),
            max_errors_prop(),
        ]),
    )
    .toolsets(&[TOOLSET])
    .output_schema(crate::output_schema())
    .aliases(&["validate_data"])
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let args = Args::new(NAME, &args)?;
    let given = PATH.str(&args)?;
    let schema_arg = SCHEMA.opt_value(&args).cloned();
    let unique: Vec<String> = UNIQUE
        .opt_str_list(&args)?
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    let nonempty: Vec<String> = REQUIRED_NONEMPTY
        .opt_str_list(&args)?
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    let opts = read_opts(&args)?;
    let on_error = on_error_arg(&args)?;
    // More errors than the most are capped, not refused.
    let max_errors = MAX_ERRORS
        .opt_u64_at_least(&args)?
        .unwrap_or(DEFAULT_MAX_ERRORS)
        .min(MAX_MAX_ERRORS) as usize;
    args.finish()?;
    let schema = match schema_arg {
        None => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(v) => Some(load_schema(v, ctx)?),
    };
    if schema.is_none() && unique.is_empty() && nonempty.is_empty() {
        bail!("{NAME} requires a schema, or rules (`unique`, `required_nonempty`) to check");
    }
    let validator = match &schema {
        None => None,
        Some(s) => Some(compile(s)?),
    };
    let limits = InputLimits::from_ctx(ctx)?;
    let ws = ctx.workspace.clone();
    let p = ws.locate(given).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let cancel = ctx.cancel.clone();
    let call = ctx.clone();
    let job = Job {
        schema,
        validator,
        unique,
        nonempty,
        on_error,
        max_errors,
        limits,
    };
    let out = toolbox_host::blocking(format!("{NAME}: the validation"), move || {
        let cancelled = || cancel.is_cancelled();
        let src = source::open(&ws, &p, &opts, &job.limits)?;
        let mut progress = Progress::for_source(&call, &src);
        job.run(src, opts.sheet.as_deref(), &cancelled, &mut progress)
    })
    .await?
    .map_err(|e| anyhow!("{NAME}: {e:#}"))?;
    reply(&out)
}

/// Reads the `schema` argument: an object, JSON text, or a path.
fn load_schema(v: Value, ctx: &ToolContext) -> Result<Value> {
    let text = match v {
        Value::Object(_) | Value::Bool(_) => return Ok(v),
        Value::String(s) => s,
        other => bail!(
            "{NAME}: argument `schema` must be a JSON Schema (JSON text or an object) or a \
             path, not {}",
            toolbox_core::json_kind(&other)
        ),
    };
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(&text)
            .map_err(|e| anyhow!("{NAME}: argument `schema` is not valid JSON: {e}"));
    }
    let (bytes, shown) = if text.starts_with(toolbox_host::SKILL_REF_PREFIX) {
        let f = toolbox_host::resolve_skill_file(&text, ctx, NAME)?;
        let file = std::fs::File::open(&f.path)
            .map_err(|e| anyhow!("{NAME}: cannot read {}: {e}", f.shown))?;
        (read_capped(file, &f.shown)?, f.shown)
    } else {
        let ws: &Workspace = &ctx.workspace;
        let p = ws.locate(&text).map_err(|e| anyhow!("{NAME}: {e}"))?;
        let shown = ws.show(&p);
        let file = ws
            .open_read(&p)
            .map_err(|e| anyhow!("{NAME}: the schema file: {e}"))?;
        (read_capped(file, &shown)?, shown)
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| anyhow!("{NAME}: the schema file {shown} is not valid JSON: {e}"))
}

fn read_capped(file: std::fs::File, shown: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("{NAME}: cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_SCHEMA_BYTES {
        bail!("{NAME}: the schema file {shown} is larger than {MAX_SCHEMA_BYTES} bytes");
    }
    Ok(bytes)
}

/// Compiles the schema as draft 2020-12; a bad schema is an error with its JSON pointer.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator> {
    jsonschema::draft202012::new(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        anyhow!(
            "{NAME}: the schema is invalid at {}: {e}",
            if at.is_empty() {
                "its root (\"\")".to_string()
            } else {
                format!("{at:?}")
            }
        )
    })
}

struct Job {
    schema: Option<Value>,
    validator: Option<jsonschema::Validator>,
    unique: Vec<String>,
    nonempty: Vec<String>,
    on_error: OnError,
    max_errors: usize,
    limits: InputLimits,
}

/// A 128-bit digest of a value, from two differently keyed hashers: seen-before checks keep
/// 16 bytes per value, and a false match is out of reach.
struct Digest(RandomState, RandomState);

impl Digest {
    fn new() -> Self {
        Digest(RandomState::new(), RandomState::new())
    }

    fn of(&self, v: &impl Hash) -> u128 {
        (u128::from(self.0.hash_one(v)) << 64) | u128::from(self.1.hash_one(v))
    }
}

/// The canonical text of a value, for hashing.
pub fn key_text(v: &Value) -> String {
    v.to_string()
}

impl Job {
    fn run(
        self,
        src: source::Source,
        sheet: Option<&str>,
        cancelled: &dyn Fn() -> bool,
        progress: &mut Progress,
    ) -> Result<Value> {
        let shown = src.shown.clone();
        let meter = src.meter.clone();
        let mut rows = 0u64;
        let format = src.format;
        let note = src.note.clone();
        let word = place_word(format);
        let typing = records::text_cells(format);
        let digest = Digest::new();
        let mut seen: Vec<HashMap<u128, u64>> = vec![HashMap::new(); self.unique.len()];
        let mut remembered: u64 = 0;
        let (mut total, mut valid, mut invalid, mut skipped) = (0u64, 0u64, 0u64, 0u64);
        let mut errors: Vec<Value> = Vec::new();
        let mut more_errors = false;
        let limits = self.limits;
        let mut plan: Option<Vec<Coerce>> = None;
        records::read(src, &limits, sheet, cancelled, &mut |item| {
            rows += 1;
            progress.tick(rows, meter.file_bytes());
            let mut rec = match item {
                Item::Record(r) => r,
                Item::Bad { at, message, .. } => {
                    if self.on_error == OnError::Fail {
                        bail!("{message} (on_error: \"skip\" counts such rows and goes on)");
                    }
                    skipped += 1;
                    if errors.len() < self.max_errors {
                        errors.push(json!({word: at, "pointer": "", "message": message}));
                    }
                    return Ok(Flow::Go);
                }
            };
            total += 1;
            if typing {
                let plan = plan.get_or_insert_with(|| {
                    rec.fields
                        .iter()
                        .map(|(k, _)| Coerce::for_field(self.schema.as_ref(), k))
                        .collect()
                });
                for ((_, v), c) in rec.fields.iter_mut().zip(plan.iter()) {
                    c.apply(v);
                }
            }
            let mut problems: Vec<(String, String)> = Vec::new();
            let instance = Value::Object(rec.to_object());
            if let Some(validator) = &self.validator {
                if !validator.is_valid(&instance) {
                    for e in validator.iter_errors(&instance).take(self.max_errors) {
                        problems.push((e.instance_path().to_string(), e.to_string()));
                    }
                }
            }
            self.check_rules(
                &rec,
                word,
                &digest,
                &mut seen,
                &mut remembered,
                &mut problems,
            )?;
            if problems.is_empty() {
                valid += 1;
            } else {
                invalid += 1;
                for (pointer, message) in problems {
                    if errors.len() < self.max_errors {
                        errors.push(json!({word: rec.at, "pointer": pointer, "message": message}));
                    } else {
                        more_errors = true;
                    }
                }
            }
            Ok(Flow::Go)
        })?;
        progress.finish(rows, meter.file_bytes());
        let mut out = json!({
            "path": shown,
            "format": format.name(),
            "records": total,
            "valid": valid,
            "invalid": invalid,
        });
        if skipped > 0 {
            out["unreadable_rows_skipped"] = json!(skipped);
        }
        if let Some(note) = note {
            out["note"] = json!(note);
        }
        out["errors"] = json!(errors);
        if more_errors {
            out["errors_note"] = json!(format!(
                "only the first {} errors are listed (max_errors)",
                self.max_errors
            ));
        }
        Ok(out)
    }

    fn check_rules(
        &self,
        rec: &Record,
        word: &str,
        digest: &Digest,
        seen: &mut [HashMap<u128, u64>],
        remembered: &mut u64,
        problems: &mut Vec<(String, String)>,
    ) -> Result<()> {
        for f in &self.nonempty {
            let empty = match rec.get(f) {
                None => Some("is missing"),
                Some(Value::Null) => Some("is null"),
                Some(Value::String(s)) if s.trim().is_empty() => Some("is empty"),
                Some(Value::Array(a)) if a.is_empty() => Some("is an empty array"),
                Some(Value::Object(o)) if o.is_empty() => Some("is an empty object"),
                _ => None,
            };
            if let Some(why) = empty {
                problems.push((pointer(f), format!("{f:?} {why} (required_nonempty)")));
            }
        }
        for (i, f) in self.unique.iter().enumerate() {
            let Some(v) = rec.get(f) else { continue };
            if v.is_null() {
                continue;
            }
            let h = digest.of(&key_text(v));
            match seen[i].get(&h) {
                Some(first) => problems.push((
                    pointer(f),
                    format!(
                        "{f:?} repeats the value {}, first seen at {word} {first} (unique)",
                        short(v)
                    ),
                )),
                None => {
                    *remembered += 1;
                    if *remembered > self.limits.max_unique_keys {
                        bail!(
                            "more than {} distinct values to remember for `unique`, the limit \
                             ([data] max_unique_keys)",
                            self.limits.max_unique_keys
                        );
                    }
                    seen[i].insert(h, rec.at);
                }
            }
        }
        Ok(())
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// The JSON pointer of a top-level field.
pub fn pointer(field: &str) -> String {
    format!("/{}", field.replace('~', "~0").replace('/', "~1"))
}

/// How a CSV cell is typed before checking: by the types the schema allows the column.
#[derive(Debug, Clone, Default)]
struct Coerce {
    integer: bool,
    number: bool,
    boolean: bool,
    null: bool,
    string: bool,
}

impl Coerce {
    fn for_field(schema: Option<&Value>, field: &Arc<str>) -> Coerce {
        let ty = schema
            .and_then(|s| s.get("properties"))
            .and_then(|p| p.get(&**field))
            .and_then(|p| p.get("type"));
        let mut c = Coerce::default();
        let names: Vec<&str> = match ty {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        for n in names {
            match n {
                "integer" => c.integer = true,
                "number" => c.number = true,
                "boolean" => c.boolean = true,
                "null" => c.null = true,
                "string" => c.string = true,
                _ => {}
            }
        }
        c
    }

    fn apply(&self, v: &mut Value) {
        let Value::String(s) = v else { return };
        let owned = s.trim().to_string();
        let t = owned.as_str();
        if self.null && t.is_empty() && !self.string {
            *v = Value::Null;
            return;
        }
        if self.integer {
            if let Ok(i) = t.parse::<i64>() {
                *v = Value::from(i);
                return;
            }
        }
        if self.number || self.integer {
            if let Ok(x) = t.parse::<f64>() {
                if let Some(n) = serde_json::Number::from_f64(x) {
                    // A whole number is an integer for `type: integer`.
                    *v = if x.fract() == 0.0 && x.abs() < 9.0e15 {
                        Value::from(x as i64)
                    } else {
                        Value::Number(n)
                    };
                    return;
                }
            }
        }
        if self.boolean {
            match t.to_ascii_lowercase().as_str() {
                "true" => *v = Value::Bool(true),
                "false" => *v = Value::Bool(false),
                _ => {}
            }
            if matches!(v, Value::Bool(_)) {
                return;
            }
        }
        if self.null && t.is_empty() {
            *v = Value::Null;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_are_typed_by_the_schema() {
        let schema = json!({"properties": {
            "n": {"type": "integer"}, "x": {"type": ["number", "null"]},
            "b": {"type": "boolean"}, "s": {"type": "string"}
        }});
        let cases = [
            ("n", "42", json!(42)),
            ("n", "4.0", json!(4)),
            ("n", "abc", json!("abc")),
            ("x", "", Value::Null),
            ("x", "2.5", json!(2.5)),
            ("b", "TRUE", json!(true)),
            ("s", "007", json!("007")),
            ("other", "1", json!("1")),
        ];
        for (field, cell, want) in cases {
            let c = Coerce::for_field(Some(&schema), &Arc::from(field));
            let mut v = Value::String(cell.into());
            c.apply(&mut v);
            assert_eq!(v, want, "{field} {cell:?}");
        }
    }

    #[test]
    fn a_bad_schema_names_its_pointer() {
        let e = compile(&json!({"properties": {"age": {"type": "integr"}}}))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("/properties/age/type"), "{e}");
        assert!(compile(&json!({"type": "object"})).is_ok());
    }

    #[test]
    fn pointers_escape_field_names() {
        assert_eq!(pointer("a/b~c"), "/a~1b~0c");
    }
}
