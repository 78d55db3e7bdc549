//! The data agent's dataset tools, under its own names: each one is `data__inspect`,
//! `data__validate` or `data__convert` with the arguments its name promises, so a model need
//! not build a template for the common case. Listed under the `data-agent` vocabulary only,
//! accepted by name in every vocabulary.
//!
//! | data agent | here |
//! |---|---|
//! | `data_agent_load_input_sources` | `data__inspect` on the session's `input/` folder (or a file in it) |
//! | `data_agent_validate_dataset_records` | `data__validate` with `required_fields` and `unique_fields` |
//! | `data_agent_export_dataset_records` | `data__convert` to JSONL, JSON, CSV, TSV or Parquet, with `fields` and `rename` |
//! | `data_agent_normalize_dataset_draft` | `data__convert` to JSONL (renamed, selected, deduplicated), then `data__validate` of what was written |
//! | `data_agent_export_training_jsonl` | `data__convert` with a chat-messages template built from the column names given |
//! | `data_agent_export_planning_eval_csv` | `data__convert` to CSV with the columns given, formulas guarded |

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Map, Value};
use toolbox_core::schema::{integer_in, object_schema, prop, string_enum};
use toolbox_core::{Args, ToolInfo, ToolOutput, ToolRisk, Vocabulary};
use toolbox_host::ToolContext;

use crate::{convert, inspect, validate};

/// The toolset of the whole `data_agent_*` family (the plan provider's tools are in it too).
const TOOLSET: &str = "data_agent";

pub(crate) const LOAD_INPUTS: &str = "data_agent_load_input_sources";
pub(crate) const VALIDATE: &str = "data_agent_validate_dataset_records";
pub(crate) const EXPORT: &str = "data_agent_export_dataset_records";
pub(crate) const NORMALIZE: &str = "data_agent_normalize_dataset_draft";
pub(crate) const TRAINING: &str = "data_agent_export_training_jsonl";
pub(crate) const PLANNING_EVAL: &str = "data_agent_export_planning_eval_csv";

/// The formats an export may write.
const EXPORT_FORMATS: &[&str] = &["jsonl", "json", "csv", "tsv", "parquet"];

fn tool(name: &str, description: String, schema: Value) -> ToolInfo {
    ToolInfo::new(name, description, schema)
        .toolsets(&[crate::TOOLSET, TOOLSET])
        .output_schema(crate::output_schema())
        .only_in(Vocabulary::DataAgent)
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn path_prop() -> Value {
    prop(
        "string",
        "The dataset file in the workspace (CSV, TSV, JSON array, JSONL, Parquet, xlsx; \
         .gz/.zst), e.g. `input/cases.csv` or `output/draft.json`.",
    )
}

fn output_prop(example: &str) -> Value {
    prop(
        "string",
        &format!(
            "Where to write, e.g. `{example}`; `output/…` is the session's output folder. \
             Replaced if it exists, written atomically."
        ),
    )
}

fn rename_prop() -> Value {
    strings("Renames as \"old=new\" strings (an object {\"old\": \"new\"} is accepted too).")
}

fn limit_prop() -> Value {
    integer_in("Write at most this many records.", 1, None)
}

pub(crate) fn infos() -> Vec<ToolInfo> {
    let rules = crate::WAY_OF_WORKING;
    vec![
        tool(
            LOAD_INPUTS,
            format!(
                "List what the session's input folder (`input/`) holds: each data file with \
                 its format, size and rows. Give `path` (a file in input/, or another folder) \
                 to see one file's columns with their types, nulls, examples and sample rows \
                 instead. {rules}"
            ),
            object_schema(
                &[(
                    "path",
                    prop(
                        "string",
                        "A file or folder to look at instead of the whole `input/` folder \
                         (default `input/`).",
                    ),
                )],
                &[],
            ),
        ),
        tool(
            VALIDATE,
            format!(
                "Check every record of a dataset: `required_fields` must be present and not \
                 empty, `unique_fields` must not repeat, and, when given, each record must \
                 match a JSON Schema. Returns the counts of valid and invalid records and the \
                 first errors with their line. {rules}"
            ),
            object_schema(
                &[
                    ("path", path_prop()),
                    (
                        "required_fields",
                        strings("Fields every record must have, not null, empty or blank."),
                    ),
                    (
                        "unique_fields",
                        strings("Fields whose values must not repeat (each on its own)."),
                    ),
                    (
                        "schema",
                        prop(
                            "string",
                            "A JSON Schema (JSON text, or the path of a .json file) every \
                             record must match.",
                        ),
                    ),
                    (
                        "max_errors",
                        integer_in("Errors listed (default 20, at most 1000).", 1, Some(1000)),
                    ),
                ],
                &["path"],
            ),
        ),
        tool(
            EXPORT,
            format!(
                "Export a dataset's records to JSONL, JSON, CSV, TSV or Parquet, streaming: \
                 keep `fields` (in that order), `rename` them, stop after `limit`. The format \
                 comes from the output's extension unless `format` is given. Returns rows in \
                 and out and the real output path. {rules}"
            ),
            object_schema(
                &[
                    ("path", path_prop()),
                    ("output", output_prop("output/records.jsonl")),
                    (
                        "format",
                        string_enum(EXPORT_FORMATS, "Output format (default: from the extension)."),
                    ),
                    ("fields", strings("Fields to keep, in this order (default: all).")),
                    ("rename", rename_prop()),
                    ("limit", limit_prop()),
                ],
                &["path", "output"],
            ),
        )
        .risk(ToolRisk::FileWrite),
        tool(
            NORMALIZE,
            format!(
                "Normalise a dataset draft (a JSON array, CSV, JSONL, …) into JSONL records: \
                 keep `fields`, `rename` them, drop repeats by `dedupe_by`, then check the \
                 written records for `required_fields`. Returns what was written, what was \
                 dropped and why, and the check's counts and first errors. {rules}"
            ),
            object_schema(
                &[
                    ("path", path_prop()),
                    (
                        "output",
                        prop(
                            "string",
                            "Where to write the JSONL (default: \
                             `output/<name>.normalized.jsonl`).",
                        ),
                    ),
                    ("fields", strings("Fields to keep, in this order (default: all).")),
                    ("rename", rename_prop()),
                    (
                        "dedupe_by",
                        strings("Keep only the first record for each combination of these fields (names after rename)."),
                    ),
                    (
                        "required_fields",
                        strings("Fields every written record must have, not empty (names after rename)."),
                    ),
                ],
                &["path"],
            ),
        )
        .risk(ToolRisk::FileWrite),
        tool(
            TRAINING,
            format!(
                "Export chat training data as JSONL, one {{\"messages\": [...]}} per record: \
                 an optional system message (`system_prompt`, or the `system_field` column), \
                 the user message from `user_field`, the assistant message from \
                 `assistant_field`. Quotes and newlines in values stay valid JSON. {rules}"
            ),
            object_schema(
                &[
                    ("path", path_prop()),
                    ("output", output_prop("output/train.jsonl")),
                    ("user_field", prop("string", "The column holding the user's message.")),
                    (
                        "assistant_field",
                        prop("string", "The column holding the assistant's answer."),
                    ),
                    (
                        "system_field",
                        prop("string", "A column holding each record's system message."),
                    ),
                    (
                        "system_prompt",
                        prop("string", "One system message for every record (instead of system_field)."),
                    ),
                    (
                        "dedupe",
                        prop(
                            "boolean",
                            "Drop records whose user message repeats an earlier one (default \
                             false).",
                        ),
                    ),
                    ("limit", limit_prop()),
                ],
                &["path", "output", "user_field", "assistant_field"],
            ),
        )
        .risk(ToolRisk::FileWrite),
        tool(
            PLANNING_EVAL,
            format!(
                "Export evaluation cases as a CSV a person can open in a spreadsheet: the \
                 `fields` given, in that order (default: all), renamed by `rename`; nested \
                 values are written as JSON text, and cells that would run as formulas are \
                 guarded. {rules}"
            ),
            object_schema(
                &[
                    ("path", path_prop()),
                    ("output", output_prop("output/planning_eval.csv")),
                    ("fields", strings("Columns, in this order (default: all).")),
                    ("rename", rename_prop()),
                    ("limit", limit_prop()),
                ],
                &["path", "output"],
            ),
        )
        .risk(ToolRisk::FileWrite),
    ]
}

/// What one call comes to: a call of an underlying tool, or (normalising) two.
enum Job {
    Inspect(Value),
    Validate(Value),
    Convert(Value),
    Normalize {
        convert: Value,
        output: String,
        required: Vec<String>,
    },
}

/// Runs one of this module's tools.
pub(crate) async fn run(tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let out = match job(tool, &args) {
        Err(e) => Err(e),
        Ok(Job::Inspect(call)) => inspect::run(call, ctx).await,
        Ok(Job::Validate(call)) => validate::run(call, ctx).await,
        Ok(Job::Convert(call)) => convert::run(call, ctx).await,
        Ok(Job::Normalize {
            convert,
            output,
            required,
        }) => normalize(convert, output, required, ctx).await,
    };
    // The underlying tool's messages name it: they are this tool's.
    out.map_err(|e| {
        let text = format!("{e:#}");
        let renamed = [inspect::NAME, validate::NAME, convert::NAME]
            .iter()
            .find_map(|inner| text.strip_prefix(inner).map(|rest| format!("{tool}{rest}")));
        anyhow!(renamed.unwrap_or(text))
    })
}

/// Reads the arguments of `tool` into the call it comes to.
fn job(tool: &str, args: &Value) -> Result<Job> {
    let a = Args::new(tool, args)?;
    let job = match tool {
        LOAD_INPUTS => {
            let path = a.opt_nonempty_str("path", &["folder"])?.unwrap_or("input/");
            Job::Inspect(json!({ "path": path }))
        }
        VALIDATE => {
            let mut call = Map::new();
            call.insert("path".into(), json!(a.str("path", &["file_path"])?));
            copy_list(&a, &mut call, "required_fields", "required_nonempty")?;
            copy_list(&a, &mut call, "unique_fields", "unique")?;
            if let Some(schema) = a.opt_value("schema", &[]) {
                call.insert("schema".into(), schema.clone());
            }
            if call.len() == 1 {
                a.finish()?;
                bail!(
                    "{tool} requires required_fields, unique_fields or schema: something to check"
                );
            }
            if let Some(n) = a.opt_u64("max_errors", &[])? {
                call.insert("max_errors".into(), json!(n));
            }
            Job::Validate(Value::Object(call))
        }
        EXPORT | PLANNING_EVAL => {
            let mut call = Map::new();
            call.insert("path".into(), json!(a.str("path", &["file_path"])?));
            call.insert("output".into(), json!(a.str("output", &["output_path"])?));
            if tool == PLANNING_EVAL {
                call.insert("to".into(), json!("csv"));
            } else if let Some(format) = a.opt_nonempty_str("format", &["to"])? {
                if !EXPORT_FORMATS.contains(&format) {
                    bail!(
                        "{tool}: argument `format` must be one of {}, not {format:?}",
                        EXPORT_FORMATS.join(", ")
                    );
                }
                call.insert("to".into(), json!(format));
            }
            shape(&a, &mut call)?;
            Job::Convert(Value::Object(call))
        }
        NORMALIZE => {
            let path = a.str("path", &["file_path"])?;
            let output = match a.opt_nonempty_str("output", &["output_path"])? {
                Some(output) => output.to_string(),
                None => format!("output/{}.normalized.jsonl", stem(path)),
            };
            let mut call = Map::new();
            call.insert("path".into(), json!(path));
            call.insert("output".into(), json!(output));
            call.insert("to".into(), json!("jsonl"));
            shape(&a, &mut call)?;
            copy_list(&a, &mut call, "dedupe_by", "dedupe_by")?;
            let required = a
                .opt_str_list("required_fields", &[])?
                .unwrap_or_default()
                .into_iter()
                .map(str::to_string)
                .collect();
            Job::Normalize {
                convert: Value::Object(call),
                output,
                required,
            }
        }
        TRAINING => Job::Convert(training(&a)?),
        other => bail!("data has no tool named {other}"),
    };
    a.finish()?;
    Ok(job)
}

/// A list argument `from` passed on as `to`, when given.
fn copy_list(a: &Args, call: &mut Map<String, Value>, from: &'static str, to: &str) -> Result<()> {
    if let Some(list) = a.opt_str_list(from, &[])? {
        if !list.is_empty() {
            call.insert(to.into(), json!(list));
        }
    }
    Ok(())
}

/// `fields`, `rename` and `limit`, as `data__convert`'s `select`, `rename` and `limit`.
fn shape(a: &Args, call: &mut Map<String, Value>) -> Result<()> {
    copy_list(a, call, "fields", "select")?;
    if let Some(rename) = a.opt_value("rename", &[]) {
        call.insert("rename".into(), rename.clone());
    }
    if let Some(limit) = a.opt_u64("limit", &[])? {
        call.insert("limit".into(), json!(limit));
    }
    Ok(())
}

async fn normalize(
    call: Value,
    output: String,
    required: Vec<String>,
    ctx: &ToolContext,
) -> Result<ToolOutput> {
    let written = convert::run(call, ctx).await?;
    if required.is_empty() {
        return Ok(written);
    }
    let real = written
        .structured
        .as_ref()
        .and_then(|s| s["output"].as_str())
        .unwrap_or(&output)
        .to_string();
    let checked = validate::run(json!({"path": output, "required_nonempty": required}), ctx)
        .await
        .map_err(|e| anyhow!("{output} was written, but checking it failed: {e:#}"))?;
    let text = format!(
        "{}\n\nChecked {real} for required fields:\n{}",
        written.text, checked.text
    );
    Ok(ToolOutput::new(
        text,
        json!({"written": written.structured, "checked": checked.structured}),
    ))
}

/// A file name's stem for a default output name: its last component, without extensions
/// (`.csv.gz` too), in characters a file name may hold.
fn stem(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    let clean: String = stem
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if clean.is_empty() {
        "dataset".into()
    } else {
        clean
    }
}

/// The `data__convert` call of a chat-messages export.
fn training(a: &Args) -> Result<Value> {
    let tool = TRAINING;
    let path = a.str("path", &["file_path"])?;
    let output = a.str("output", &["output_path"])?;
    let user = a.str("user_field", &["question_field", "prompt_field"])?;
    let assistant = a.str("assistant_field", &["answer_field", "response_field"])?;
    let system_field = a.opt_nonempty_str("system_field", &[])?;
    let system_prompt = a.opt_nonempty_str("system_prompt", &["system"])?;
    let dedupe = a.bool_or("dedupe", &[], false)?;
    let limit = a.opt_u64("limit", &[])?;
    if system_field.is_some() && system_prompt.is_some() {
        bail!("{tool}: give system_field or system_prompt, not both");
    }
    let placeholder = |arg: &str, column: &str| -> Result<String> {
        if column.contains(['{', '}']) {
            bail!("{tool}: argument `{arg}`: column {column:?} has a brace, which a template cannot name; rename it first with data_agent_export_dataset_records");
        }
        Ok(format!("{{{column}}}"))
    };
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut messages = vec![];
    if let Some(column) = system_field {
        messages.push(format!(
            "{{\"role\": \"system\", \"content\": {}}}",
            text(&placeholder("system_field", column)?)
        ));
    } else if let Some(prompt) = system_prompt {
        // Literal text: its braces are not placeholders.
        let literal = prompt.replace('{', "{{").replace('}', "}}");
        messages.push(format!(
            "{{\"role\": \"system\", \"content\": {}}}",
            text(&literal)
        ));
    }
    messages.push(format!(
        "{{\"role\": \"user\", \"content\": {}}}",
        text(&placeholder("user_field", user)?)
    ));
    messages.push(format!(
        "{{\"role\": \"assistant\", \"content\": {}}}",
        text(&placeholder("assistant_field", assistant)?)
    ));
    let template = format!("{{\"messages\": [{}]}}", messages.join(", "));
    let mut call = json!({
        "path": path,
        "output": output,
        "to": "jsonl",
        "template": template,
    });
    if dedupe {
        call["dedupe_by"] = json!([user]);
    }
    if let Some(limit) = limit {
        call["limit"] = json!(limit);
    }
    Ok(call)
}
