//! The data provider through the executor, on files the tests write: every format, the
//! three tools, and each refusal of point 5 (a malformed row's line, a bad schema's pointer,
//! the sniffed format, a decompression bomb, an oversize cell, an endless line, nothing
//! half-written).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, ToolExecutor};

use toolbox as _;
use toolbox_tests::{executor, executor_with, fails, ok};

/// The session input folder of [`toolbox_tests::SESSION`].
fn input(root: &Path) -> PathBuf {
    let dir = root.join(".toolbox/sessions/s1/input");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn output(root: &Path) -> PathBuf {
    root.join(".toolbox/sessions/s1/output")
}

fn parsed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

async fn run(exec: &ToolExecutor, tool: &str, args: Value) -> Value {
    parsed(&ok(exec, tool, args).await)
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(bytes, 3).unwrap()
}

/// A minimal xlsx workbook of two sheets, written with Python's standard zipfile module.
fn xlsx(path: &Path) {
    const MAKE: &str = r#"
import sys, zipfile
def sheet(rows):
    out = []
    for r, row in enumerate(rows, 1):
        cells = []
        for c, v in enumerate(row):
            ref = "ABCDEFGH"[c] + str(r)
            if isinstance(v, str):
                cells.append(f'<c r="{ref}" t="inlineStr"><is><t>{v}</t></is></c>')
            else:
                cells.append(f'<c r="{ref}"><v>{v}</v></c>')
        out.append(f'<row r="{r}">' + "".join(cells) + "</row>")
    return ('<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
            + "".join(out) + "</sheetData></worksheet>")
ns = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/><Override PartName="/xl/worksheets/sheet2.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>')
    z.writestr("_rels/.rels", f'<?xml version="1.0" encoding="UTF-8"?><Relationships {ns}><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>')
    z.writestr("xl/workbook.xml", '<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="People" sheetId="1" r:id="rId1"/><sheet name="Scores" sheetId="2" r:id="rId2"/></sheets></workbook>')
    z.writestr("xl/_rels/workbook.xml.rels", f'<?xml version="1.0" encoding="UTF-8"?><Relationships {ns}><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet2.xml"/></Relationships>')
    z.writestr("xl/worksheets/sheet1.xml", sheet([["name", "age"], ["ann", 31], ["bob", 42]]))
    z.writestr("xl/worksheets/sheet2.xml", sheet([["team", "score"], ["red", 1.5], ["blue", 2], ["green", 7]]))
"#;
    let python = std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(MAKE)
        .arg(path)
        .output()
        .expect("cannot run python (set TOOLBOX_TEST_PYTHON)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CSV with a BOM, `;` delimiters, a quoted field holding the delimiter, a quote and a
/// newline, a date column, and a ragged row on line 5.
const PEOPLE: &str = "\u{feff}id;name;joined;score\n1;ann;2024-01-05;3.5\n2;\"b;o \"\"b\"\"\nnewline\";2023-12-31;\n3;cy\n4;dee;2024-03-01;10\n";

#[tokio::test]
async fn inspect_sniffs_csv_and_reports_columns_and_ragged_rows() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    std::fs::write(input(dir.path()).join("people.csv"), PEOPLE).unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "input/people.csv"})).await;
    assert_eq!(r["format"], "csv");
    assert_eq!(r["delimiter"], ";");
    assert_eq!(r["rows"], 3, "{r}");
    assert_eq!(r["rows_exact"], true);
    assert_eq!(r["bad_rows"]["ragged"], 1);
    assert_eq!(
        r["bad_rows"]["first"][0],
        "line 5 has 2 fields, the header has 4"
    );
    let cols = r["columns"].as_array().unwrap();
    assert_eq!(cols[0]["name"], "id", "the BOM is not part of the name");
    assert_eq!(cols[0]["type"], "integer");
    assert_eq!(cols[0]["min"], 1);
    assert_eq!(cols[0]["max"], 4);
    assert_eq!(cols[2]["type"], "date");
    assert_eq!(cols[2]["min_date"], "2023-12-31");
    assert_eq!(cols[2]["max_date"], "2024-03-01");
    assert_eq!(cols[3]["nulls"], 1);
    assert_eq!(r["sample_rows"][1]["name"], "b;o \"b\"\nnewline");

    // max_rows caps the work, and the result says the figures are not exact.
    let r = run(
        &exec,
        "data__inspect",
        json!({"path": "input/people.csv", "max_rows": 1, "sample_rows": 0}),
    )
    .await;
    assert_eq!(r["rows"], 1);
    assert_eq!(r["rows_exact"], false);
    assert_eq!(r["sample_rows"], json!([]));

    // Wide tables: the first max_columns are described, the rest named.
    let r = run(
        &exec,
        "data__inspect",
        json!({"path": "input/people.csv", "max_columns": 2}),
    )
    .await;
    assert_eq!(r["columns"].as_array().unwrap().len(), 2);
    assert_eq!(r["columns_left_out"]["count"], 2);
    assert_eq!(r["columns_left_out"]["names"], json!(["joined", "score"]));
}

#[tokio::test]
async fn inspect_infers_the_json_schema_of_records() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let lines = "{\"id\": 1, \"q\": \"a\", \"tags\": [\"x\"]}\n{\"id\": 2, \"q\": \"b\", \"meta\": {\"k\": true}}\nnot json\n[1]\n{\"id\": 3.5, \"q\": null}\n";
    std::fs::write(input(dir.path()).join("r.jsonl"), lines).unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "input/r.jsonl"})).await;
    assert_eq!(r["format"], "jsonl");
    assert_eq!(r["rows"], 3);
    assert_eq!(r["bad_rows"]["malformed"], 2);
    assert!(
        r["bad_rows"]["first"][0]
            .as_str()
            .unwrap()
            .starts_with("line 3: invalid JSON"),
        "{r}"
    );
    assert_eq!(
        r["bad_rows"]["first"][1],
        "line 4: an array, not a JSON object"
    );
    let s = &r["json_schema"];
    assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
    assert_eq!(s["required"], json!(["id", "q"]));
    assert_eq!(s["properties"]["id"]["type"], "number");
    assert_eq!(s["properties"]["q"]["type"], json!(["null", "string"]));
    assert_eq!(s["properties"]["tags"]["x-count"], 1);
    assert_eq!(
        s["properties"]["meta"]["properties"]["k"]["type"],
        "boolean"
    );

    // A JSON array streams the same way.
    std::fs::write(
        input(dir.path()).join("a.json"),
        r#"[{"id": 1, "q": "a"}, {"id": 2, "q": "b"}]"#,
    )
    .unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "input/a.json"})).await;
    assert_eq!(r["format"], "json");
    assert_eq!(r["rows"], 2);
    assert_eq!(r["json_schema"]["properties"]["id"]["type"], "integer");
}

#[tokio::test]
async fn formats_come_from_the_extension_the_content_and_the_argument() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let inp = input(dir.path());
    // Claimed CSV, really JSONL: the sniffed format is read and reported.
    std::fs::write(inp.join("claims.csv"), "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "input/claims.csv"})).await;
    assert_eq!(r["format"], "jsonl");
    assert_eq!(
        r["note"],
        "the name says csv, but the content is jsonl; read as jsonl"
    );
    assert_eq!(r["rows"], 2);
    // No telling extension: `format` says TSV.
    std::fs::write(inp.join("t.txt"), "a\tb\n1\t2\n").unwrap();
    let r = run(
        &exec,
        "data__inspect",
        json!({"path": "input/t.txt", "format": "tsv"}),
    )
    .await;
    assert_eq!(r["format"], "tsv");
    assert_eq!(r["columns"][1]["name"], "b");
    // Gzip and zstd are read transparently.
    let csv = "x,y\n1,a\n2,b\n3,c\n";
    std::fs::write(inp.join("g.csv.gz"), gzip(csv.as_bytes())).unwrap();
    std::fs::write(inp.join("z.csv.zst"), zstd(csv.as_bytes())).unwrap();
    for (name, comp) in [("g.csv.gz", "gzip"), ("z.csv.zst", "zstd")] {
        let r = run(
            &exec,
            "data__inspect",
            json!({"path": format!("input/{name}")}),
        )
        .await;
        assert_eq!(r["compression"], comp);
        assert_eq!(r["rows"], 3, "{name}: {r}");
    }
    fails(
        &exec,
        "data__inspect",
        json!({"path": "input/t.txt", "format": "yaml"}),
        "argument `format` must be one of csv, tsv, json, jsonl, parquet, xlsx",
    )
    .await;
}

#[tokio::test]
async fn xlsx_sheets_by_name_and_index() {
    let (dir, exec) = executor(PermissionMode::Full);
    xlsx(&input(dir.path()).join("book.xlsx"));
    let r = run(&exec, "data__inspect", json!({"path": "input/book.xlsx"})).await;
    assert_eq!(r["format"], "xlsx");
    assert_eq!(r["rows"], 2);
    assert_eq!(r["columns"][1]["max"], 42);
    let r = run(
        &exec,
        "data__inspect",
        json!({"path": "input/book.xlsx", "sheet": "Scores"}),
    )
    .await;
    assert_eq!(r["rows"], 3);
    assert_eq!(r["columns"][1]["type"], "number");
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/book.xlsx", "sheet": 1, "output": "output/scores.csv"}),
    )
    .await;
    assert_eq!(r["rows_out"], 3);
    assert_eq!(
        std::fs::read_to_string(output(dir.path()).join("scores.csv")).unwrap(),
        "team,score\nred,1.5\nblue,2\ngreen,7\n"
    );
    fails(
        &exec,
        "data__inspect",
        json!({"path": "input/book.xlsx", "sheet": "Nope"}),
        "no sheet \"Nope\"; the sheets are \"People\", \"Scores\"",
    )
    .await;
}

#[tokio::test]
async fn convert_selects_renames_dedupes_limits_and_routes_to_output() {
    let (dir, exec) = executor(PermissionMode::Full);
    let csv =
        "id,question,answer,extra\n1,q1,a1,x\n2,q2,a2,y\n1,q1 again,a1,z\n3,q3,007,w\n4,q4,a4,v\n";
    std::fs::write(input(dir.path()).join("qa.csv"), csv).unwrap();
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/qa.csv", "output": "output/qa.jsonl",
               "select": ["id", "answer"], "rename": ["answer=a"], "dedupe_by": ["id"], "limit": 3}),
    )
    .await;
    assert_eq!(r["rows_in"], 4, "{r}");
    assert_eq!(r["rows_out"], 3);
    assert_eq!(r["dropped"]["duplicate"], 1);
    assert_eq!(
        r["output"],
        ".toolbox/sessions/s1/output/qa.jsonl (output/qa.jsonl)"
    );
    let text = std::fs::read_to_string(output(dir.path()).join("qa.jsonl")).unwrap();
    // Cells are typed without loss: 1 is a number, 007 stays text.
    assert_eq!(
        text,
        "{\"id\":1,\"a\":\"a1\"}\n{\"id\":2,\"a\":\"a2\"}\n{\"id\":3,\"a\":\"007\"}\n"
    );
    // A name that is not a column is refused before anything is written.
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/qa.csv", "output": "output/bad.csv", "select": ["idd"]}),
        "`select` names \"idd\", which is not a column; the columns are \"id\", \"question\"",
    )
    .await;
    assert!(!output(dir.path()).join("bad.csv").exists());
}

#[tokio::test]
async fn a_template_makes_chat_training_jsonl_with_values_not_pasted_text() {
    let (dir, exec) = executor(PermissionMode::Full);
    let rows = [
        json!({"question": "Say \"hi\"\nplease", "answer": "hi } {"}),
        json!({"question": "2+2?", "answer": "4"}),
    ];
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(input(dir.path()).join("qa.jsonl"), text).unwrap();
    let template = r#"{"messages":[{"role":"user","content":"{question}"},{"role":"assistant","content":"{answer}"}]}"#;
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/qa.jsonl", "output": "output/train.jsonl", "template": template}),
    )
    .await;
    assert_eq!(r["rows_out"], 2);
    let out = std::fs::read_to_string(output(dir.path()).join("train.jsonl")).unwrap();
    let lines: Vec<Value> = out.lines().map(parsed).collect();
    assert_eq!(lines[0]["messages"][0]["content"], "Say \"hi\"\nplease");
    assert_eq!(lines[0]["messages"][1]["content"], "hi } {");
    assert_eq!(lines[1]["messages"][1]["role"], "assistant");
    assert!(
        out.starts_with("{\"messages\":[{\"role\":\"user\",\"content\":"),
        "{out}"
    );
    // A record without a placeholder's field fails with its line, or is skipped and counted.
    std::fs::write(
        input(dir.path()).join("partial.jsonl"),
        "{\"question\": \"q\", \"answer\": \"a\"}\n{\"question\": \"only\"}\n",
    )
    .unwrap();
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/partial.jsonl", "output": "output/p.jsonl", "template": template}),
        "line 2: no field \"answer\" for the template",
    )
    .await;
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/partial.jsonl", "output": "output/p.jsonl", "template": template,
               "on_error": "skip"}),
    )
    .await;
    assert_eq!(r["rows_out"], 1);
    assert_eq!(r["dropped"]["missing_field"], 1);
}

#[tokio::test]
async fn parquet_round_trips_and_is_inspected() {
    let (dir, exec) = executor(PermissionMode::Full);
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(
            &json!({"id": i, "x": i as f64 / 4.0, "ok": i % 2 == 0, "name": format!("n{i}"),
                    "tags": ["a", i]})
            .to_string(),
        );
        text.push('\n');
    }
    std::fs::write(input(dir.path()).join("big.jsonl"), &text).unwrap();
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/big.jsonl", "output": "output/big.parquet"}),
    )
    .await;
    assert_eq!(r["rows_out"], 20_000);
    let r = run(
        &exec,
        "data__inspect",
        json!({"path": "output/big.parquet"}),
    )
    .await;
    assert_eq!(r["format"], "parquet");
    assert_eq!(r["rows"], 20_000);
    let col = |name: &str| {
        r["columns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no column {name}: {r}"))
    };
    assert_eq!(col("id")["type"], "integer");
    assert_eq!(col("x")["max"], 4999.75);
    assert_eq!(col("ok")["type"], "boolean");
    assert_eq!(col("tags")["type"], "string", "nested values are JSON text");
    run(
        &exec,
        "data__convert",
        json!({"path": "output/big.parquet", "output": "output/back.jsonl"}),
    )
    .await;
    let back = std::fs::read_to_string(output(dir.path()).join("back.jsonl")).unwrap();
    let first = parsed(back.lines().nth(7).unwrap());
    assert_eq!(
        first,
        json!({"id": 7, "x": 1.75, "ok": false, "name": "n7", "tags": "[\"a\",7]"})
    );
    assert_eq!(back.lines().count(), 20_000);

    // The folder view lists every data file with its format and rows.
    std::fs::write(input(dir.path()).join("notes.md"), "# not data\n").unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "output"})).await;
    let files = r["data_files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{r}");
    assert_eq!(files[0]["path"], "output/back.jsonl");
    assert_eq!(files[1]["format"], "parquet");
    assert_eq!(files[1]["rows"], 20_000);
    let r = run(&exec, "data__inspect", json!({"path": "input/"})).await;
    assert_eq!(r["data_files"][0]["rows"], 20_000);
    assert_eq!(r["other_files"], 1);
}

#[tokio::test]
async fn validate_reports_counts_then_errors_with_lines_and_pointers() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let inp = input(dir.path());
    let lines = [
        r#"{"id": 1, "name": "ann", "age": 31}"#,
        r#"{"id": 2, "name": "", "age": "old"}"#,
        r#"{"id": 1, "name": "cy", "age": 40}"#,
        r#"{"id": 4, "name": "dee"}"#,
    ];
    std::fs::write(inp.join("p.jsonl"), lines.join("\n")).unwrap();
    let schema = json!({"type": "object", "required": ["id", "name", "age"],
        "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                       "age": {"type": "integer", "minimum": 0}}});
    std::fs::write(dir.path().join("schema.json"), schema.to_string()).unwrap();
    for schema_arg in [
        json!(schema.to_string()),
        schema.clone(),
        json!("schema.json"),
    ] {
        let r = run(
            &exec,
            "data__validate",
            json!({"path": "input/p.jsonl", "schema": schema_arg,
                   "unique": ["id"], "required_nonempty": ["name"]}),
        )
        .await;
        assert_eq!(r["records"], 4);
        assert_eq!(r["valid"], 1, "{r}");
        assert_eq!(r["invalid"], 3);
        let errors = r["errors"].as_array().unwrap();
        assert_eq!(errors[0]["line"], 2);
        assert_eq!(errors[0]["pointer"], "/age");
        assert_eq!(errors[0]["message"], "\"old\" is not of type \"integer\"");
        assert!(errors.iter().any(|e| e["line"] == 2
            && e["pointer"] == "/name"
            && e["message"] == "\"name\" is empty (required_nonempty)"));
        assert!(errors.iter().any(|e| e["line"] == 3
            && e["message"] == "\"id\" repeats the value 1, first seen at line 1 (unique)"));
        assert!(errors
            .iter()
            .any(|e| e["line"] == 4 && e["message"] == "\"age\" is a required property"));
    }
    // CSV cells are typed by the schema: "42" passes `type: integer`.
    std::fs::write(inp.join("p.csv"), "id,name,age\n1,ann,42\n2,bob,x\n").unwrap();
    let r = run(
        &exec,
        "data__validate",
        json!({"path": "input/p.csv", "schema": schema}),
    )
    .await;
    assert_eq!(r["valid"], 1, "{r}");
    assert_eq!(r["errors"][0]["line"], 3);
    assert_eq!(r["errors"][0]["pointer"], "/age");
    // A bad schema names where it is wrong.
    fails(
        &exec,
        "data__validate",
        json!({"path": "input/p.csv",
               "schema": {"properties": {"age": {"type": "integr"}}}}),
        "the schema is invalid at \"/properties/age/type\"",
    )
    .await;
    fails(
        &exec,
        "data__validate",
        json!({"path": "input/p.csv", "schema": "{not json"}),
        "argument `schema` is not valid JSON",
    )
    .await;
}

#[tokio::test]
async fn a_malformed_row_fails_with_its_line_or_is_skipped_and_counted() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(
        input(dir.path()).join("m.jsonl"),
        "{\"a\": 1}\n{\"a\": 2\n{\"a\": 3}\n",
    )
    .unwrap();
    let e = fails(
        &exec,
        "data__convert",
        json!({"path": "input/m.jsonl", "output": "output/m.csv"}),
        "line 2: invalid JSON",
    )
    .await;
    assert!(e.contains("nothing was written to output/m.csv"), "{e}");
    fails(
        &exec,
        "data__validate",
        json!({"path": "input/m.jsonl", "required_nonempty": ["a"]}),
        "line 2: invalid JSON",
    )
    .await;
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/m.jsonl", "output": "output/m.csv", "on_error": "skip"}),
    )
    .await;
    assert_eq!(r["rows_in"], 3);
    assert_eq!(r["rows_out"], 2);
    assert_eq!(r["dropped"]["malformed"], 1);
    assert_eq!(
        std::fs::read_to_string(output(dir.path()).join("m.csv")).unwrap(),
        "a\n1\n3\n"
    );
    let r = run(
        &exec,
        "data__validate",
        json!({"path": "input/m.jsonl", "required_nonempty": ["a"], "on_error": "skip"}),
    )
    .await;
    assert_eq!(r["records"], 2);
    assert_eq!(r["unreadable_rows_skipped"], 1);
    // Ragged CSV rows too.
    std::fs::write(input(dir.path()).join("r.csv"), "a,b\n1,2\n3\n").unwrap();
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/r.csv", "output": "output/r.jsonl"}),
        "line 3 has 1 fields, the header has 2",
    )
    .await;
}

#[tokio::test]
async fn a_failed_conversion_leaves_the_old_output_untouched() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(input(dir.path()).join("ok.jsonl"), "{\"a\": 1}\n").unwrap();
    run(
        &exec,
        "data__convert",
        json!({"path": "input/ok.jsonl", "output": "output/keep.jsonl"}),
    )
    .await;
    let before = std::fs::read(output(dir.path()).join("keep.jsonl")).unwrap();
    // Good rows first, then a bad one: the partial output must not replace the file.
    let mut text = "{\"a\": 2}\n".repeat(50_000);
    text.push_str("{broken\n");
    std::fs::write(input(dir.path()).join("late.jsonl"), text).unwrap();
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/late.jsonl", "output": "output/keep.jsonl"}),
        "line 50001: invalid JSON",
    )
    .await;
    assert_eq!(
        std::fs::read(output(dir.path()).join("keep.jsonl")).unwrap(),
        before
    );
    let names: Vec<String> = std::fs::read_dir(output(dir.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["keep.jsonl"], "no temporary file is left behind");
}

/// Issue 38, point 8: `format` is the input's format. A model that meant the output's
/// (`"format": "jsonl"` to turn a CSV file into JSON Lines) got only "line 1: invalid JSON";
/// the error now says that the output's format is `to`. A `format` that matches the input
/// gets no such note.
#[tokio::test]
async fn format_meant_as_the_output_says_the_output_is_to() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(input(dir.path()).join("t.csv"), "a,b\n1,2\n").unwrap();
    let text = fails(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/t.jsonl", "format": "jsonl"}),
        "line 1: invalid JSON",
    )
    .await;
    assert!(
        text.contains(
            "Note: `format` is the format of the input (input/t.csv was read as jsonl); the \
             output's format is `to` (or the output's extension)"
        ),
        "{text}"
    );
    assert!(!output(dir.path()).join("t.jsonl").exists());
    // Meant as the input's: no note on an error that has nothing to do with it.
    std::fs::write(input(dir.path()).join("bad.jsonl"), "{broken\n").unwrap();
    let text = fails(
        &exec,
        "data__convert",
        json!({"path": "input/bad.jsonl", "output": "output/t.csv", "format": "jsonl"}),
        "line 1: invalid JSON",
    )
    .await;
    assert!(!text.contains("Note: `format`"), "{text}");
    // And `to` does what was meant.
    let out = run(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/t.jsonl", "to": "jsonl"}),
    )
    .await;
    assert_eq!(out["rows_out"], 1, "{out}");
    assert_eq!(out["output_format"], "jsonl", "{out}");
}

#[tokio::test]
async fn limits_refuse_a_bomb_an_oversize_cell_and_an_endless_line() {
    let (dir, exec) = executor_with(
        PermissionMode::Full,
        &[(
            "data",
            json!({"max_decompressed_bytes": 1_000_000, "max_cell_bytes": 1000,
                   "max_line_bytes": 4096}),
        )],
    );
    let inp = input(dir.path());
    // 20 MB of one repeated row, gzipped to a few KB.
    let mut csv = b"a,b\n".to_vec();
    csv.extend(b"1,2\n".repeat(5_000_000));
    std::fs::write(inp.join("bomb.csv.gz"), gzip(&csv)).unwrap();
    fails(
        &exec,
        "data__inspect",
        json!({"path": "input/bomb.csv.gz"}),
        "expands past 1000000 bytes, the limit ([data] max_decompressed_bytes)",
    )
    .await;
    // An oversize cell: a row error, with its line.
    let big = "x".repeat(5000);
    std::fs::write(inp.join("cell.csv"), format!("a,b\n1,2\n3,{big}\n4,5\n")).unwrap();
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/cell.csv", "output": "output/cell.jsonl"}),
        "line 3: column \"b\" holds 5000 bytes, more than the 1000-byte limit ([data] max_cell_bytes)",
    )
    .await;
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/cell.csv", "output": "output/cell.jsonl", "on_error": "skip"}),
    )
    .await;
    assert_eq!(r["dropped"]["too_large"], 1);
    assert_eq!(r["rows_out"], 2);
    // A JSONL line past max_line_bytes is read past, never held: a row error.
    let long = format!("{{\"a\": \"{}\"}}", "y".repeat(3_000_000));
    std::fs::write(
        inp.join("long.jsonl"),
        format!("{{\"a\": 1}}\n{long}\n{{\"a\": 2}}\n"),
    )
    .unwrap();
    fails(
        &exec,
        "data__validate",
        json!({"path": "input/long.jsonl", "required_nonempty": ["a"]}),
        "line 2 is longer than 4096 bytes, the limit ([data] max_line_bytes)",
    )
    .await;
    let r = run(&exec, "data__inspect", json!({"path": "input/long.jsonl"})).await;
    assert_eq!(r["rows"], 2);
    assert_eq!(r["bad_rows"]["too_large"], 1);
    // A CSV with one endless line: the reader stops at the limit.
    let mut endless = b"a,b\n1,".to_vec();
    endless.extend(std::iter::repeat_n(b'z', 3_000_000));
    std::fs::write(inp.join("endless.csv"), endless).unwrap();
    fails(
        &exec,
        "data__inspect",
        json!({"path": "input/endless.csv"}),
        "longer than 4096 bytes, the limit ([data] max_line_bytes)",
    )
    .await;
}

#[tokio::test]
async fn the_tools_and_the_default_agent_teach_the_data_agents_rules() {
    let (_dir, exec) = executor(PermissionMode::Full);
    let description = |tool: &str| {
        exec.registry()
            .tools()
            .iter()
            .find(|t| t.info.name == tool)
            .map(|t| t.info.description.clone())
            .unwrap_or_else(|| panic!("no tool {tool}"))
    };
    let has = |text: &str, rule: &str, whose: &str| {
        assert!(
            text.contains(rule),
            "{whose}: {rule:?} missing from: {text}"
        );
    };
    for tool in ["data__inspect", "data__validate", "data__convert"] {
        let d = description(tool);
        for rule in [
            "never `shell`",
            "`file_manager__write` is for small files only",
            "Temporary files go to `scratchpad/`",
            "deliverables go to `output/`",
        ] {
            has(&d, rule, tool);
        }
    }
    let shell = description("shell");
    has(
        &shell,
        "`shell` is the fallback: for read-only git checks, system commands and process control",
        "shell",
    );
    has(
        &shell,
        "not for Python analysis, JSON/CSV conversion or installing packages",
        "shell",
    );
    has(&shell, "never run `python …` here", "shell");
    let python = description("run_python_code");
    has(
        &python,
        "Never use subprocess to run another Python script: use script_path",
        "run_python_code",
    );
    has(
        &python,
        "Temporary files go to the scratchpad; deliverables go to output/",
        "run_python_code",
    );
    has(
        &python,
        "also in the environment variable PYTHON_EXEC_SCRATCHPAD",
        "run_python_code",
    );
    has(
        &description("kernel_install"),
        "into toolbox's per-user venv (or the venv the operator configured), never into the \
         system Python or a project .venv",
        "kernel_install",
    );
    has(
        &description("file_manager__write"),
        "large JSON, JSONL or CSV goes through data__convert, or Python with pathlib/json/csv",
        "file_manager__write",
    );
    let prompt = toolbox_core::AgentDef::builtin_default().prompt;
    for rule in [
        "`shell` is the fallback: for read-only git checks, system commands and process control",
        "not for Python analysis, JSON/CSV conversion or installing packages",
        "Never run `python …` through `shell`",
        "never use `subprocess` inside `run_python_code` to run another Python script: use its `script_path`",
        "`file_manager__write` is for small files. Large JSON, JSONL or CSV goes through `data__convert`",
        "Temporary files go to the scratchpad; deliverables go to `output/`",
        "Python code finds the scratchpad's path in the environment variable `PYTHON_EXEC_SCRATCHPAD`",
        "they go into toolbox's per-user venv, never into the system Python or a project `.venv`",
    ] {
        has(&prompt, rule, "the default agent's prompt");
    }
}

/// Every data tool's result is also structured (issue 26): the object its text shows,
/// declared with an output schema, for programs (MCP `structuredContent`, HTTP
/// `"structured"`, `ToolCallInfo::structured`); the model's text is unchanged.
#[tokio::test]
async fn each_data_tool_returns_the_object_its_text_shows_as_its_structured_result() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(input(dir.path()).join("t.csv"), "id,q\n1,a\n2,b\n").unwrap();
    for (tool, args) in [
        ("data__inspect", json!({"path": "input/t.csv"})),
        (
            "data__validate",
            json!({"path": "input/t.csv", "required_nonempty": ["q"]}),
        ),
        (
            "data__convert",
            json!({"path": "input/t.csv", "output": "output/t.jsonl"}),
        ),
    ] {
        let registered = exec.registry().get(tool).unwrap();
        assert!(registered.info.output_schema.is_some(), "{tool}");
        let info = toolbox_tests::call_in(&exec, toolbox_tests::SESSION, tool, args).await;
        assert_eq!(
            info.status,
            toolbox_executor::CallStatus::Done,
            "{}",
            info.result
        );
        let structured = info.structured.clone().expect("a structured result");
        assert!(structured.is_object(), "{tool}: {structured}");
        assert_eq!(parsed(&info.result), structured, "{tool}");
    }
}

/// Issue 37, point 6: xlsx bombs in a read tool. A small xlsx whose shared-strings table
/// expands to hundreds of MiB (20 million one-letter strings), and one whose single cell is
/// 400 MB, are refused by `data__inspect` with an error naming the `[data]` limit, before
/// the workbook is parsed (what it was: a 4 GB peak for a 409 KB file, a 400 MB cell
/// accepted).
#[tokio::test]
async fn xlsx_bombs_are_refused_naming_the_limit() {
    const BOMB: &str = r#"
import sys, zipfile
path, kind = sys.argv[1], sys.argv[2]
ns = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
main = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/><Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/></Types>')
    z.writestr("_rels/.rels", f'<?xml version="1.0" encoding="UTF-8"?><Relationships {ns}><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>')
    z.writestr("xl/workbook.xml", f'<?xml version="1.0" encoding="UTF-8"?><workbook {main} xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="S" sheetId="1" r:id="rId1"/></sheets></workbook>')
    z.writestr("xl/_rels/workbook.xml.rels", f'<?xml version="1.0" encoding="UTF-8"?><Relationships {ns}><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/><Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/sharedStrings" Target="sharedStrings.xml"/></Relationships>')
    with z.open("xl/sharedStrings.xml", "w", force_zip64=True) as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?><sst {main}>'.encode())
        if kind == "strings":
            chunk = b"<si><t>a</t></si>" * 100000
            for _ in range(200):
                f.write(chunk)
        else:
            f.write(b"<si><t>a</t></si>")
        f.write(b"</sst>")
    with z.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?><worksheet {main}><sheetData><row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="2"><c r="A2" t="inlineStr"><is><t>'.encode())
        if kind == "cell":
            block = b"A" * (1 << 20)
            for _ in range(400):
                f.write(block)
        else:
            f.write(b"x")
        f.write(b"</t></is></c></row></sheetData></worksheet>")
"#;
    let python = std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let (dir, exec) = executor(PermissionMode::Full);
    for (kind, key) in [
        ("strings", "[data] max_xlsx_strings"),
        ("cell", "[data] max_cell_bytes"),
    ] {
        let path = input(dir.path()).join(format!("{kind}.xlsx"));
        let out = std::process::Command::new(&python)
            .args(["-c", BOMB])
            .arg(&path)
            .arg(kind)
            .output()
            .expect("cannot run python (set TOOLBOX_TEST_PYTHON)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(
            size < 2 * 1024 * 1024,
            "{kind}: a small file ({size} bytes)"
        );
        let e = fails(
            &exec,
            "data__inspect",
            json!({"path": format!("input/{kind}.xlsx")}),
            key,
        )
        .await;
        assert!(e.contains(&format!("{kind}.xlsx")), "{e}");
        let e = fails(
            &exec,
            "data__convert",
            json!({"path": format!("input/{kind}.xlsx"), "output": "output/x.csv"}),
            key,
        )
        .await;
        assert!(!output(dir.path()).join("x.csv").exists(), "{e}");
    }
}

/// Issue 37, point 8: one 5.4 MB JSONL record with 300,000 keys took over 120 s (a repeated
/// key was looked for in every key before it) and kept working after its call timed out.
/// Now it is a bad row naming `[data] max_record_keys`; and with the limit raised by the
/// operator, the work on it is linear (converting it finishes at once).
#[tokio::test]
async fn a_record_with_300k_keys_is_a_bad_row_or_linear_work() {
    let mut wide = String::from("{");
    for i in 0..300_000 {
        if i > 0 {
            wide.push(',');
        }
        wide.push_str(&format!("\"k{i}\":{i}"));
    }
    wide.push('}');
    assert!(wide.len() > 4_000_000, "{}", wide.len());
    let (dir, exec) = executor(PermissionMode::Full);
    let path = input(dir.path()).join("wide.jsonl");
    std::fs::write(&path, format!("{{\"a\": 1}}\n{wide}\n{{\"a\": 2}}\n")).unwrap();
    let r = run(&exec, "data__inspect", json!({"path": "input/wide.jsonl"})).await;
    assert_eq!(r["bad_rows"]["too_large"], 1, "{r}");
    assert_eq!(
        r["bad_rows"]["first"][0],
        "line 2: the record has more than 16384 keys, the limit ([data] max_record_keys)"
    );
    assert_eq!(r["rows"], 2);
    let (dir, exec) = executor_with(
        PermissionMode::Full,
        &[("data", json!({"max_record_keys": 400_000}))],
    );
    let path = input(dir.path()).join("wide.jsonl");
    std::fs::write(&path, format!("{wide}\n{wide}\n")).unwrap();
    let out = ok(
        &exec,
        "data__convert",
        json!({"path": "input/wide.jsonl", "output": "output/wide.csv"}),
    )
    .await;
    assert!(out.contains("\"rows_out\": 2"), "{out}");
    let csv = std::fs::read_to_string(output(dir.path()).join("wide.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3);
}

/// Issue 37, point 8: CSV/TSV output guards cells a spreadsheet would run (`=`, `+`, `-`,
/// `@`, tab, CR) with a leading `'`, header names too; numbers stay numbers; the result
/// says how many; `guard_formulas: false` writes them as they are.
#[tokio::test]
async fn csv_output_guards_formula_cells_unless_told_not_to() {
    let (dir, exec) = executor(PermissionMode::Full);
    let rows = [
        json!({"name": "=HYPERLINK(\"http://evil.example\",\"x\")", "n": -5, "note": "+1 555"}),
        json!({"name": "@SUM(A1)", "n": 3, "note": "-minus"}),
        json!({"name": "\tTAB", "n": 0, "note": "plain"}),
        json!({"name": "\rCR", "n": 1, "note": "a=b"}),
    ];
    let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(input(dir.path()).join("cells.jsonl"), jsonl).unwrap();
    std::fs::write(input(dir.path()).join("head.csv"), "=cmd,b\n1,2\n").unwrap();
    let out = run(
        &exec,
        "data__convert",
        json!({"path": "input/cells.jsonl", "output": "output/cells.csv"}),
    )
    .await;
    assert!(
        out["formula_cells_guarded"]
            .as_str()
            .unwrap()
            .starts_with("6 text cells"),
        "{out}"
    );
    let csv = std::fs::read_to_string(output(dir.path()).join("cells.csv")).unwrap();
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    let got: Vec<Vec<String>> = reader
        .records()
        .map(|r| r.unwrap().iter().map(str::to_string).collect())
        .collect();
    // Columns in the records' key order: n, name, note.
    assert_eq!(got[0][1], "'=HYPERLINK(\"http://evil.example\",\"x\")");
    assert_eq!(got[0][0], "-5", "a number is not text");
    assert_eq!(got[0][2], "'+1 555");
    assert_eq!(got[1][1], "'@SUM(A1)");
    assert_eq!(got[1][2], "'-minus");
    assert_eq!(got[2][1], "'\tTAB");
    assert_eq!(got[3][1], "'\rCR");
    assert_eq!(got[3][2], "a=b", "only the first character counts");
    // Header names too, and TSV the same.
    run(
        &exec,
        "data__convert",
        json!({"path": "input/head.csv", "output": "output/head.tsv"}),
    )
    .await;
    let tsv = std::fs::read_to_string(output(dir.path()).join("head.tsv")).unwrap();
    assert!(tsv.starts_with("'=cmd\tb\n"), "{tsv:?}");
    // Off on request: the text as it was.
    let out = run(
        &exec,
        "data__convert",
        json!({"path": "input/cells.jsonl", "output": "output/raw.csv", "guard_formulas": false}),
    )
    .await;
    assert!(out.get("formula_cells_guarded").is_none(), "{out}");
    let raw = std::fs::read_to_string(output(dir.path()).join("raw.csv")).unwrap();
    assert!(raw.contains("@SUM(A1)") && !raw.contains("'@SUM"), "{raw}");
}

/// The Parquet schema of `path`: each column's name and Arrow type.
fn parquet_types(path: &Path) -> Vec<(String, String)> {
    let file = std::fs::File::open(path).unwrap();
    let builder =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    builder
        .schema()
        .fields()
        .iter()
        .map(|f| (f.name().clone(), f.data_type().to_string()))
        .collect()
}

#[tokio::test]
async fn csv_columns_are_typed_as_a_data_tool_reads_them() {
    let (dir, exec) = executor(PermissionMode::Full);
    let csv = "code,price,small,flag,day,at,zoned,note\n\
               007,1.50,9.7e-05,yes,2024-01-02,2013-01-01 10:00:00,2013-01-01T10:00:00Z,a\n\
               012,13.80,-1E3,No,2024/01/03,2013-01-01T11:30:00.5,2013-01-01T12:00:00+02:00,NA\n\
               ,NA,nan,,,,,\n";
    std::fs::write(input(dir.path()).join("t.csv"), csv).unwrap();

    // inspect reports the types the conversion writes.
    let r = run(&exec, "data__inspect", json!({"path": "input/t.csv"})).await;
    let types: Vec<(String, String)> = r["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().into(),
                c["type"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want = [
        ("code", "string"),
        ("price", "number"),
        ("small", "number"),
        ("flag", "boolean"),
        ("day", "date"),
        ("at", "timestamp"),
        ("zoned", "timestamp with time zone"),
        ("note", "string"),
    ];
    assert_eq!(
        types,
        want.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect::<Vec<_>>(),
        "{r}"
    );

    // Parquet gets the matching logical types; the zoned instants are UTC.
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/t.parquet"}),
    )
    .await;
    assert_eq!(r["rows_out"], json!(3), "{r}");
    let pq = output(dir.path()).join("t.parquet");
    let got: Vec<String> = parquet_types(&pq).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        got,
        [
            "Utf8",
            "Float64",
            "Float64",
            "Boolean",
            "Date32",
            "Timestamp(µs)",
            "Timestamp(µs, \"UTC\")",
            "Utf8"
        ]
    );
    run(
        &exec,
        "data__convert",
        json!({"path": "output/t.parquet", "output": "output/back.jsonl"}),
    )
    .await;
    let back = std::fs::read_to_string(output(dir.path()).join("back.jsonl")).unwrap();
    let rows: Vec<Value> = back.lines().map(parsed).collect();
    assert_eq!(rows[0]["price"], json!(1.5));
    assert_eq!(rows[0]["zoned"], json!("2013-01-01T10:00:00Z"));
    assert_eq!(
        rows[1]["zoned"],
        json!("2013-01-01T10:00:00Z"),
        "+02:00 is UTC 10:00"
    );
    assert_eq!(rows[1]["at"], json!("2013-01-01T11:30:00.500"));
    assert_eq!(
        rows[1]["note"],
        json!("NA"),
        "NA stays text in a text column"
    );
    assert_eq!(
        rows[2]["price"],
        Value::Null,
        "NA is null in a number column"
    );
    assert!(rows[2]["small"].is_string() || rows[2]["small"].is_null());

    // JSONL gets numbers and booleans; codes with leading zeros stay text.
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/t.jsonl"}),
    )
    .await;
    assert_eq!(r["rows_out"], json!(3), "{r}");
    let text = std::fs::read_to_string(output(dir.path()).join("t.jsonl")).unwrap();
    let first = parsed(text.lines().next().unwrap());
    assert_eq!(
        first,
        json!({"code": "007", "price": 1.5, "small": 9.7e-05, "flag": true,
               "day": "2024-01-02", "at": "2013-01-01 10:00:00",
               "zoned": "2013-01-01T10:00:00Z", "note": "a"})
    );

    // `types` overrides a column; `infer_types: false` keeps every cell text.
    run(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/o.jsonl", "types": ["code=integer"]}),
    )
    .await;
    let text = std::fs::read_to_string(output(dir.path()).join("o.jsonl")).unwrap();
    assert_eq!(parsed(text.lines().next().unwrap())["code"], json!(7));
    run(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/s.jsonl", "infer_types": false}),
    )
    .await;
    let text = std::fs::read_to_string(output(dir.path()).join("s.jsonl")).unwrap();
    assert_eq!(parsed(text.lines().next().unwrap())["price"], json!("1.50"));
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/x.jsonl", "types": {"cost": "number"}}),
        "`types` names \"cost\", which is not a column",
    )
    .await;
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/t.csv", "output": "output/x.jsonl", "types": {"code": "money"}}),
        "argument `types`: the type of \"code\" must be one of string, integer, number",
    )
    .await;
}

#[tokio::test]
async fn a_cell_that_does_not_fit_its_column_is_a_bad_row_that_says_what_to_do() {
    let (dir, exec) = executor(PermissionMode::Full);
    // The first 20,480 rows choose number; a later row holds text.
    let mut csv = String::from("id,price\n");
    for i in 0..20_480 {
        csv.push_str(&format!("{i},{}.25\n", i % 50));
    }
    csv.push_str("20480,about five\n20481,3.5\n");
    std::fs::write(input(dir.path()).join("p.csv"), &csv).unwrap();
    for out in ["output/p.parquet", "output/p.jsonl"] {
        fails(
            &exec,
            "data__convert",
            json!({"path": "input/p.csv", "output": out}),
            "line 20482: column \"price\": \"about five\" is not a number (the column's type, \
             chosen from the first 20480 rows); set `types: [\"price=string\"]`",
        )
        .await;
        let r = run(
            &exec,
            "data__convert",
            json!({"path": "input/p.csv", "output": out, "on_error": "skip"}),
        )
        .await;
        assert_eq!(r["dropped"], json!({"type_mismatch": 1}), "{r}");
        assert_eq!(r["rows_out"], json!(20_481), "{r}");
    }
    let r = run(&exec, "data__inspect", json!({"path": "input/p.csv"})).await;
    assert_eq!(r["bad_rows"]["type_mismatch"], json!(1), "{r}");
    let r = run(
        &exec,
        "data__convert",
        json!({"path": "input/p.csv", "output": "output/q.parquet",
               "types": ["price=string"]}),
    )
    .await;
    assert_eq!(r["rows_out"], json!(20_482), "{r}");
}

#[tokio::test]
async fn a_file_that_is_not_text_data_is_refused() {
    let (dir, exec) = executor(PermissionMode::Full);
    // 4 KB of bytes from a fixed generator: binary, NULs among them.
    let mut x: u32 = 0x9e37_79b9;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect();
    assert!(noise.contains(&0));
    std::fs::write(input(dir.path()).join("noise.csv"), &noise).unwrap();
    std::fs::write(input(dir.path()).join("noise.bin"), &noise).unwrap();
    for path in ["input/noise.csv", "input/noise.bin"] {
        fails(
            &exec,
            "data__inspect",
            json!({"path": path}),
            "not a recognised data file: it holds a NUL byte",
        )
        .await;
    }
    std::fs::write(input(dir.path()).join("latin.csv"), b"caf\xe9,b\n1,2\n").unwrap();
    fails(
        &exec,
        "data__inspect",
        json!({"path": "input/latin.csv"}),
        "its first line (the header) is not UTF-8 text",
    )
    .await;
}
