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
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Prop, ToolInfo, ToolOutput, ToolRisk, Vocabulary};
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

// The family's own arguments. Each tool reads these and passes them on under the names of
// the underlying tool's arguments (convert::SELECT, validate::UNIQUE, …).
/// `data_agent_load_input_sources`: a file or folder instead of `input/`.
const LOOK_AT: Arg = Arg::string("path").aliases(&["folder"]);
/// The dataset every other tool reads.
const PATH: Arg = Arg::string("path").aliases(&["file_path"]).required();
/// Where a normalised draft goes (a default name when not given).
const NORMALIZED_OUTPUT: Arg = Arg::string("output").aliases(&["output_path"]);
/// Where an export goes.
const OUTPUT: Arg = NORMALIZED_OUTPUT.required();
const REQUIRED_FIELDS: Arg = Arg::strings("required_fields");
const UNIQUE_FIELDS: Arg = Arg::strings("unique_fields");
const SCHEMA: Arg = Arg::string("schema");
/// An export's format: `data__convert`'s `to`.
const FORMAT: Arg = Arg::choice("format", EXPORT_FORMATS).aliases(&["to"]);
/// `data__convert`'s `select`.
const FIELDS: Arg = Arg::strings("fields");
const RENAME: Arg = Arg::strings("rename");
const DEDUPE_BY: Arg = Arg::strings("dedupe_by");
const LIMIT: Arg = Arg::integer("limit", 1, None);
const USER_FIELD: Arg = Arg::string("user_field")
    .aliases(&["question_field", "prompt_field"])
    .required();
const ASSISTANT_FIELD: Arg = Arg::string("assistant_field")
    .aliases(&["answer_field", "response_field"])
    .required();
const SYSTEM_FIELD: Arg = Arg::string("system_field");
const SYSTEM_PROMPT: Arg = Arg::string("system_prompt").aliases(&["system"]);
const DEDUPE: Arg = Arg::boolean("dedupe");

fn tool(name: &str, description: String, schema: Value) -> ToolInfo {
    ToolInfo::new(name, description, schema)
        .toolsets(&[crate::TOOLSET, TOOLSET])
        .output_schema(crate::output_schema())
        .only_in(Vocabulary::DataAgent)
}

fn path_prop() -> Prop {
    PATH.doc(
        "The dataset file in the workspace (CSV, TSV, JSON array, JSONL, Parquet, xlsx; \
         .gz/.zst), e.g. `input/cases.csv` or `output/draft.json`.",
    )
}

fn output_prop(example: &str) -> Prop {
    OUTPUT.doc(format!(
        "Where to write, e.g. `{example}`; `output/…` is the session's output folder. \
         Replaced if it exists, written atomically."
    ))
}

fn rename_prop() -> Prop {
    RENAME.doc("Renames as \"old=new\" strings (an object {\"old\": \"new\"} is accepted too).")
}

fn limit_prop() -> Prop {
    LIMIT.doc("Write at most this many records.")
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
            object(&[LOOK_AT.doc(
                "A file or folder to look at instead of the whole `input/` folder (default \
                 `input/`).",
            )]),
        ),
        tool(
            VALIDATE,
            format!(
                "Check every record of a dataset: `required_fields` must be present and not \
                 empty, `unique_fields` must not repeat, and, when given, each record must \
                 match a JSON Schema. Returns the counts of valid and invalid records and the \
                 first errors with their line. {rules}"
            ),
            object(&[
                path_prop(),
                REQUIRED_FIELDS.doc("Fields every record must have, not null, empty or blank."),
                UNIQUE_FIELDS.doc("Fields whose values must not repeat (each on its own)."),
                SCHEMA.doc(
                    "A JSON Schema (JSON text, or the path of a .json file) every record must \
                     match.",
                ),
                validate::max_errors_prop(),
            ]),
        ),
        tool(
            EXPORT,
            format!(
                "Export a dataset's records to JSONL, JSON, CSV, TSV or Parquet, streaming: \
                 keep `fields` (in that order), `rename` them, stop after `limit`. The format \
                 comes from the output's extension unless `format` is given. Returns rows in \
                 and out and the real output path. {rules}"
            ),
            object(&[
                path_prop(),
                output_prop("output/records.jsonl"),
                FORMAT.doc("Output format (default: from the extension)."),
                FIELDS.doc("Fields to keep, in this order (default: all)."),
                rename_prop(),
                limit_prop(),
            ]),
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
            object(&[
                path_prop(),
                NORMALIZED_OUTPUT
                    .doc("Where to write the JSONL (default: `output/<name>.normalized.jsonl`)."),
                FIELDS.doc("Fields to keep, in this order (default: all)."),
                rename_prop(),
                DEDUPE_BY.doc(
                    "Keep only the first record for each combination of these fields (names \
                     after rename).",
                ),
                REQUIRED_FIELDS
                    .doc("Fields every written record must have, not empty (names after rename)."),
            ]),
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
            object(&[
                path_prop(),
                output_prop("output/train.jsonl"),
                USER_FIELD.doc("The column holding the user's message."),
                ASSISTANT_FIELD.doc("The column holding the assistant's answer."),
                SYSTEM_FIELD.doc("A column holding each record's system message."),
                SYSTEM_PROMPT.doc("One system message for every record (instead of system_field)."),
                DEDUPE
                    .doc("Drop records whose user message repeats an earlier one (default false)."),
                limit_prop(),
            ]),
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
            object(&[
                path_prop(),
                output_prop("output/planning_eval.csv"),
                FIELDS.doc("Columns, in this order (default: all)."),
                rename_prop(),
                limit_prop(),
            ]),
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
            let path = LOOK_AT.opt_nonempty_str(&a)?.unwrap_or("input/");
            Job::Inspect(Value::Object(args_of(&[(crate::PATH, json!(path))])))
        }
        VALIDATE => {
            let mut call = args_of(&[(crate::PATH, json!(PATH.str(&a)?))]);
            copy_list(&a, &mut call, REQUIRED_FIELDS, validate::REQUIRED_NONEMPTY)?;
            copy_list(&a, &mut call, UNIQUE_FIELDS, validate::UNIQUE)?;
            if let Some(schema) = SCHEMA.opt_value(&a) {
                call.insert(validate::SCHEMA.name.into(), schema.clone());
            }
            if call.len() == 1 {
                a.finish()?;
                bail!(
                    "{tool} requires required_fields, unique_fields or schema: something to check"
                );
            }
            // data__validate caps a larger number, as it says.
            if let Some(n) = validate::MAX_ERRORS.opt_u64_at_least(&a)? {
                call.insert(validate::MAX_ERRORS.name.into(), json!(n));
            }
            Job::Validate(Value::Object(call))
        }
        EXPORT | PLANNING_EVAL => {
            let mut call = args_of(&[
                (convert::PATH, json!(PATH.str(&a)?)),
                (convert::OUTPUT, json!(OUTPUT.str(&a)?)),
            ]);
            if tool == PLANNING_EVAL {
                call.insert(convert::TO.name.into(), json!("csv"));
            } else if let Some(format) = FORMAT.opt_choice(&a)? {
                call.insert(convert::TO.name.into(), json!(format));
            }
            shape(&a, &mut call)?;
            Job::Convert(Value::Object(call))
        }
        NORMALIZE => {
            let path = PATH.str(&a)?;
            let output = match NORMALIZED_OUTPUT.opt_nonempty_str(&a)? {
                Some(output) => output.to_string(),
                None => format!("output/{}.normalized.jsonl", stem(path)),
            };
            let mut call = args_of(&[
                (convert::PATH, json!(path)),
                (convert::OUTPUT, json!(output)),
                (convert::TO, json!("jsonl")),
            ]);
            shape(&a, &mut call)?;
            copy_list(&a, &mut call, DEDUPE_BY, convert::DEDUPE_BY)?;
            let required = REQUIRED_FIELDS
                .opt_str_list(&a)?
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

/// The arguments of a call of an underlying tool, each under that tool's name for it.
fn args_of(given: &[(Arg, Value)]) -> Map<String, Value> {
    given
        .iter()
        .map(|(arg, value)| (arg.name.to_string(), value.clone()))
        .collect()
}

/// A list argument `from` passed on as the underlying tool's `to`, when given.
fn copy_list(a: &Args, call: &mut Map<String, Value>, from: Arg, to: Arg) -> Result<()> {
    if let Some(list) = from.opt_str_list(a)? {
        if !list.is_empty() {
            call.insert(to.name.into(), json!(list));
        }
    }
    Ok(())
}

/// `fields`, `rename` and `limit`, as `data__convert`'s `select`, `rename` and `limit`.
fn shape(a: &Args, call: &mut Map<String, Value>) -> Result<()> {
    copy_list(a, call, FIELDS, convert::SELECT)?;
    if let Some(rename) = RENAME.opt_value(a) {
        call.insert(convert::RENAME.name.into(), rename.clone());
    }
    if let Some(limit) = LIMIT.opt_u64(a)? {
        call.insert(convert::LIMIT.name.into(), json!(limit));
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
    let check = args_of(&[
        (crate::PATH, json!(output)),
        (validate::REQUIRED_NONEMPTY, json!(required)),
    ]);
    let checked = validate::run(Value::Object(check), ctx)
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
    let path = PATH.str(a)?;
    let output = OUTPUT.str(a)?;
    let user = USER_FIELD.str(a)?;
    let assistant = ASSISTANT_FIELD.str(a)?;
    let system_field = SYSTEM_FIELD.opt_nonempty_str(a)?;
    let system_prompt = SYSTEM_PROMPT.opt_nonempty_str(a)?;
    let dedupe = DEDUPE.bool(a)?;
    let limit = LIMIT.opt_u64(a)?;
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
    let mut call = args_of(&[
        (convert::PATH, json!(path)),
        (convert::OUTPUT, json!(output)),
        (convert::TO, json!("jsonl")),
        (convert::TEMPLATE, json!(template)),
    ]);
    if dedupe {
        call.insert(convert::DEDUPE_BY.name.into(), json!([user]));
    }
    if let Some(limit) = limit {
        call.insert(convert::LIMIT.name.into(), json!(limit));
    }
    Ok(Value::Object(call))
}
