//! The data provider's fast conversion paths (CSV to JSON/JSONL, JSONL to Parquet) give what
//! the general path gives, byte for byte, on awkward input: quotes, newlines, unicode, empty
//! fields, ragged and malformed rows, numbers like 007, 1e5, -0 and huge integers, and (for
//! Parquet) keys out of order, repeated, missing or unknown and values that do not fit their
//! column. A `rename` of a column to itself takes the general path.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, ToolExecutor};

use toolbox as _;
use toolbox_tests::{executor, executor_with, fails, ok};

fn input(root: &Path) -> PathBuf {
    let dir = root.join(".toolbox/sessions/s1/input");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn output(root: &Path) -> PathBuf {
    root.join(".toolbox/sessions/s1/output")
}

async fn run(exec: &ToolExecutor, args: Value) -> Value {
    let text = ok(exec, "data__convert", args).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The counts of a result, without its paths.
fn counts(r: &Value) -> Value {
    json!([
        r["rows_in"],
        r["rows_out"],
        r["rows_dropped"],
        r["dropped"],
        r["output_bytes"]
    ])
}

/// Cells that test typing and escaping.
const CELLS: &[&str] = &[
    "",
    "0",
    "-0",
    "007",
    "-007",
    "42",
    "-3",
    "+5",
    "1.5",
    "1.50",
    "1e5",
    "1E5",
    "100000.0",
    "1e21",
    "-0.0",
    ".5",
    "NaN",
    "inf",
    "true",
    "false",
    "True",
    "null",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "99999999999999999999",
    "12.345",
    "2024-05-06",
    " 1",
    "Zürich 日本語 😀",
    "\u{2028}",
    "tab\there",
    "ctl\u{1}\u{1f}\u{7f}",
    "back\\slash",
];

/// A CSV cell, quoted when it needs to be.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn awkward_csv(rows: usize) -> Vec<u8> {
    let extra = [
        "a \"quoted\" word",
        "comma, inside",
        "two\nlines",
        "cr\r\nlf",
    ];
    let mut out = "id,a,b,\"c, d\",e\n".to_string();
    for i in 0..rows {
        let cell = |k: usize| {
            let all = CELLS.len() + extra.len();
            let j = (i * 7 + k * 13) % all;
            if j < CELLS.len() {
                CELLS[j]
            } else {
                extra[j - CELLS.len()]
            }
        };
        out.push_str(&format!(
            "{i},{},{},{},{}\n",
            csv_cell(cell(1)),
            csv_cell(cell(2)),
            csv_cell(cell(3)),
            csv_cell(cell(4))
        ));
        if i % 50 == 7 {
            out.push_str("ragged,row\n");
        }
        if i % 61 == 3 {
            out.push('\n');
        }
    }
    let mut bytes = out.into_bytes();
    // A cell that is not UTF-8.
    bytes.extend_from_slice(b"bad,\xff\xfe,1,2,3\nlast,1,2,3,4\n");
    bytes
}

#[tokio::test]
async fn csv_to_json_lines_fast_path_equals_the_general_path() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(input(dir.path()).join("a.csv"), awkward_csv(3000)).unwrap();
    std::fs::write(
        input(dir.path()).join("a.tsv"),
        "x\ty\n1\t007\n\t\"q\"\"\"\n1e5\t-0\n",
    )
    .unwrap();
    let all = json!(["id=id"]);
    for (from, out, select) in [
        ("a.csv", "jsonl", all.clone()),
        ("a.csv", "json", all.clone()),
        ("a.tsv", "jsonl", json!(["x=x"])),
        ("a.tsv", "json", json!(["x=x"])),
    ] {
        let fast = run(
            &exec,
            json!({"path": format!("input/{from}"), "output": format!("output/fast.{out}"),
                   "on_error": "skip"}),
        )
        .await;
        let general = run(
            &exec,
            json!({"path": format!("input/{from}"), "output": format!("output/general.{out}"),
                   "on_error": "skip", "rename": select}),
        )
        .await;
        assert_eq!(counts(&fast), counts(&general), "{from} to {out}");
        let a = std::fs::read(output(dir.path()).join(format!("fast.{out}"))).unwrap();
        let b = std::fs::read(output(dir.path()).join(format!("general.{out}"))).unwrap();
        assert!(a == b, "{from} to {out}: the outputs differ");
        assert!(!a.is_empty());
    }
    let fast = run(
        &exec,
        json!({"path": "input/a.csv", "output": "output/fast.jsonl", "on_error": "skip"}),
    )
    .await;
    assert_eq!(fast["dropped"]["malformed"], 1, "{fast}");
    assert!(fast["dropped"]["ragged"].as_u64().unwrap() > 10, "{fast}");
    // Every line is JSON, and the cells are typed as the docs say.
    let text = std::fs::read_to_string(output(dir.path()).join("fast.jsonl")).unwrap();
    for line in text.lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
    let tsv = std::fs::read_to_string(output(dir.path()).join("fast.jsonl")).unwrap();
    assert!(tsv.lines().count() > 3000);

    // A limit, and a failure on the first bad row, as the general path does them.
    let fast = run(
        &exec,
        json!({"path": "input/a.csv", "output": "output/l.jsonl", "limit": 100,
               "on_error": "skip"}),
    )
    .await;
    assert_eq!(fast["rows_out"], 100);
    assert!(fast["stopped_at_limit"].is_string());
    let a = fails(
        &exec,
        "data__convert",
        json!({"path": "input/a.csv", "output": "output/f.jsonl"}),
        "line 13 has 2 fields, the header has 5",
    )
    .await;
    let b = fails(
        &exec,
        "data__convert",
        json!({"path": "input/a.csv", "output": "output/f.jsonl", "rename": all}),
        "line 13 has 2 fields, the header has 5",
    )
    .await;
    assert_eq!(a, b);
}

#[tokio::test]
async fn csv_fast_path_refuses_an_oversize_cell_as_the_general_path_does() {
    let (dir, exec) = executor_with(
        PermissionMode::Full,
        &[("data", json!({"max_cell_bytes": 8}))],
    );
    std::fs::write(
        input(dir.path()).join("c.csv"),
        "a,b\n1,short\n2,much too long\n3,ok\n",
    )
    .unwrap();
    let want = "line 3: column \"b\" holds 13 bytes, more than the 8-byte limit";
    let a = fails(
        &exec,
        "data__convert",
        json!({"path": "input/c.csv", "output": "output/c.jsonl"}),
        want,
    )
    .await;
    let b = fails(
        &exec,
        "data__convert",
        json!({"path": "input/c.csv", "output": "output/c.jsonl", "rename": ["a=a"]}),
        want,
    )
    .await;
    assert_eq!(a, b);
    let r = run(
        &exec,
        json!({"path": "input/c.csv", "output": "output/c.jsonl", "on_error": "skip"}),
    )
    .await;
    assert_eq!(r["dropped"]["too_large"], 1);
    assert_eq!(
        std::fs::read_to_string(output(dir.path()).join("c.jsonl")).unwrap(),
        "{\"a\":1,\"b\":\"short\"}\n{\"a\":3,\"b\":\"ok\"}\n"
    );
}

/// JSONL past the first 8192 records (which choose the columns' types), with every kind of
/// awkward record after them.
fn awkward_jsonl() -> String {
    let mut out = String::new();
    for i in 0..9000i64 {
        out.push_str(
            &json!({"id": i, "x": i as f64 / 8.0, "ok": i % 3 == 0, "s": format!("n{i}"),
                    "t": ["a", i]})
            .to_string(),
        );
        out.push('\n');
    }
    let odd = [
        // Keys out of order, missing, repeated (the last wins), escaped.
        r#"{"s":"é \"q\" \n 😀","id":0,"x":1e5}"#,
        r#"{"id":-0}"#,
        r#"{"id":1,"id":2,"x":-0.0,"\u006fk":false}"#,
        r#"{}"#,
        r#"  {"id":9223372036854775807,"x":18446744073709551615,"s":null,"t":null}  "#,
        // Values for a text column: numbers, booleans, objects.
        r#"{"s":1.50,"t":{"k":[1,2,{"z":null}]}}"#,
        r#"{"s":true,"t":-7}"#,
        r#"{"s":12345678901234567890,"t":1e300}"#,
        // Values that do not fit: an int column gets a float, text, a too big integer.
        r#"{"id":1.5}"#,
        r#"{"id":"7"}"#,
        r#"{"id":9223372036854775808}"#,
        r#"{"ok":1}"#,
        r#"{"x":"1"}"#,
        // A key that is no column, not an object, invalid JSON, trailing text.
        r#"{"id":1,"new":2}"#,
        r#"[1,2]"#,
        r#"{"id":"#,
        r#"{"id":1} {"id":2}"#,
        "",
        "   ",
        r#"{"id":3,"s":"tail"}"#,
    ];
    for (i, line) in odd.iter().cycle().take(odd.len() * 40).enumerate() {
        out.push_str(line);
        out.push('\n');
        if i % 5 == 0 {
            out.push_str(
                &json!({"id": i, "x": 0.5, "ok": true, "s": "plain", "t": "x"}).to_string(),
            );
            out.push('\n');
        }
    }
    out
}

#[tokio::test]
async fn jsonl_to_parquet_fast_path_equals_the_general_path() {
    let (dir, exec) = executor(PermissionMode::Full);
    std::fs::write(input(dir.path()).join("r.jsonl"), awkward_jsonl()).unwrap();
    let fast = run(
        &exec,
        json!({"path": "input/r.jsonl", "output": "output/fast.parquet", "on_error": "skip"}),
    )
    .await;
    let general = run(
        &exec,
        json!({"path": "input/r.jsonl", "output": "output/general.parquet", "on_error": "skip",
               "rename": ["id=id"]}),
    )
    .await;
    assert_eq!(counts(&fast), counts(&general));
    assert_eq!(fast["dropped"]["not_in_columns"], json!(40), "{fast}");
    assert!(
        fast["dropped"]["type_mismatch"].as_u64().unwrap() > 40,
        "{fast}"
    );
    assert!(
        fast["dropped"]["malformed"].as_u64().unwrap() > 40,
        "{fast}"
    );
    let a = std::fs::read(output(dir.path()).join("fast.parquet")).unwrap();
    let b = std::fs::read(output(dir.path()).join("general.parquet")).unwrap();
    assert!(a == b, "the Parquet files differ");
    run(
        &exec,
        json!({"path": "output/fast.parquet", "output": "output/back.jsonl"}),
    )
    .await;
    let back = std::fs::read_to_string(output(dir.path()).join("back.jsonl")).unwrap();
    assert_eq!(
        back.lines().count() as u64,
        fast["rows_out"].as_u64().unwrap()
    );
    assert!(back.contains(r#""s":"é \"q\" \n 😀""#), "escapes kept");
    assert!(back.contains(r#""t":"{\"k\":[1,2,{\"z\":null}]}""#));
    assert!(back.contains(r#""s":"1.5""#), "a number as text is JSON's");

    // A failure on the first bad row after the sample, as the general path fails.
    let want = "line 9003: column \"id\" is a number here (-0.0), but int64";
    let a = fails(
        &exec,
        "data__convert",
        json!({"path": "input/r.jsonl", "output": "output/f.parquet"}),
        want,
    )
    .await;
    let b = fails(
        &exec,
        "data__convert",
        json!({"path": "input/r.jsonl", "output": "output/f.parquet", "rename": ["id=id"]}),
        want,
    )
    .await;
    assert_eq!(a, b);
}

/// Clean records over several chunks of the parallel JSONL to Parquet path, with a line too
/// long, a value that does not fit its column and invalid JSON in three of them.
fn chunky_jsonl() -> (String, [u64; 3]) {
    let mut out = String::new();
    let mut at = 0u64;
    let mut odd = [0u64; 3];
    let mut line = |out: &mut String, text: &str| {
        out.push_str(text);
        out.push('\n');
        at += 1;
        at
    };
    for i in 0..(8192 * 7 + 333) {
        if i == 8192 * 2 + 10 {
            odd[0] = line(
                &mut out,
                &format!(r#"{{"id":1,"s":"{}"}}"#, "x".repeat(5000)),
            );
        }
        if i == 8192 * 3 + 1 {
            odd[1] = line(&mut out, r#"{"id":"seven"}"#);
        }
        if i == 8192 * 5 + 8000 {
            odd[2] = line(&mut out, r#"{"id":"#);
        }
        let rec = json!({"id": i, "x": i as f64 / 4.0, "ok": i % 2 == 0, "s": format!("r{i}")});
        line(&mut out, &rec.to_string());
    }
    (out, odd)
}

#[tokio::test]
async fn jsonl_to_parquet_in_parallel_chunks_writes_what_one_thread_writes() {
    let data = json!({"max_line_bytes": 4096, "parse_threads": 3});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("data", data)]);
    let (text, odd) = chunky_jsonl();
    std::fs::write(input(dir.path()).join("r.jsonl"), &text).unwrap();
    let file = |name: &str| std::fs::read(output(dir.path()).join(name)).unwrap();
    let convert = |out: &str, extra: Value| {
        let mut args = json!({"path": "input/r.jsonl", "output": format!("output/{out}"),
                              "on_error": "skip"});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    };

    // Whole: the parallel path against the general one (a rename to itself). The rows and
    // values are the same; the bytes may differ in where pages end, since the chunk that went
    // line by line left the batches cut elsewhere. So both are read back as JSONL.
    let tally = |r: &Value| json!([r["rows_in"], r["rows_out"], r["rows_dropped"], r["dropped"]]);
    let fast = run(&exec, convert("fast.parquet", json!({}))).await;
    let general = run(
        &exec,
        convert("general.parquet", json!({"rename": ["id=id"]})),
    )
    .await;
    assert_eq!(tally(&fast), tally(&general));
    assert_eq!(fast["rows_out"], json!(8192 * 7 + 333), "{fast}");
    assert_eq!(
        fast["dropped"],
        json!({"too_large": 1, "type_mismatch": 1, "malformed": 1}),
        "{fast}"
    );
    let back = |name: &str| {
        let exec = &exec;
        let name = name.to_string();
        let dir = dir.path().to_path_buf();
        async move {
            let out = format!("output/{name}.jsonl");
            run(
                exec,
                json!({"path": format!("output/{name}"), "output": out}),
            )
            .await;
            std::fs::read(output(&dir).join(format!("{name}.jsonl"))).unwrap()
        }
    };
    let fast_rows = back("fast.parquet").await;
    assert!(
        fast_rows == back("general.parquet").await,
        "the rows differ"
    );
    assert_eq!(
        fast_rows.iter().filter(|b| **b == b'\n').count(),
        8192 * 7 + 333
    );

    // One parsing thread writes the same bytes as three.
    let (dir1, exec1) = executor_with(
        PermissionMode::Full,
        &[("data", json!({"max_line_bytes": 4096, "parse_threads": 1}))],
    );
    std::fs::write(input(dir1.path()).join("r.jsonl"), &text).unwrap();
    let one = run(&exec1, convert("one.parquet", json!({}))).await;
    assert_eq!(counts(&one), counts(&fast));
    let one_bytes = std::fs::read(output(dir1.path()).join("one.parquet")).unwrap();
    assert!(
        one_bytes == file("fast.parquet"),
        "one thread and three differ"
    );

    // A limit inside a chunk, after a chunk that went line by line.
    let limit = 8192 * 4 + 17;
    let fast = run(&exec, convert("fast_l.parquet", json!({"limit": limit}))).await;
    let general = run(
        &exec,
        convert(
            "general_l.parquet",
            json!({"limit": limit, "rename": ["id=id"]}),
        ),
    )
    .await;
    assert_eq!(fast["rows_out"], json!(limit), "{fast}");
    assert_eq!(tally(&fast), tally(&general));
    assert!(fast["stopped_at_limit"].is_string(), "{fast}");
    assert!(
        back("fast_l.parquet").await == back("general_l.parquet").await,
        "the limited rows differ"
    );

    // on_error "fail" names the first bad line, as the general path does.
    let want = format!("line {} is longer than 4096 bytes", odd[0]);
    let strict = json!({"path": "input/r.jsonl", "output": "output/f.parquet"});
    let a = fails(&exec, "data__convert", strict.clone(), &want).await;
    let mut general = strict;
    general["rename"] = json!(["id=id"]);
    let b = fails(&exec, "data__convert", general, &want).await;
    assert_eq!(a, b);
    assert!(
        !output(dir.path()).join("f.parquet").exists(),
        "nothing half-written"
    );
}

/// CSV rows over several chunks of the parallel CSV to Parquet path (typed integer, number,
/// boolean, text with quoted commas and newlines, date and timestamp), with a cell too
/// long, a value that does not fit its column, a ragged row and a cell that is not UTF-8.
fn chunky_csv() -> Vec<u8> {
    let mut out = b"id,x,ok,s,d,t\n".to_vec();
    for i in 0..(8192 * 7 + 333) {
        if i == 8192 * 2 + 10 {
            out.extend_from_slice(format!("1,1.5,true,{},,\n", "x".repeat(5000)).as_bytes());
        }
        if i == 8192 * 3 + 1 {
            out.extend_from_slice(b"seven,1.5,true,s,,\n");
        }
        if i == 8192 * 4 + 5 {
            out.extend_from_slice(b"1,2,3\n");
        }
        if i == 8192 * 5 + 8000 {
            out.extend_from_slice(b"1,1.5,true,\xff\xfe,,\n");
        }
        let s = if i % 97 == 0 {
            format!("\"r{i}, with \"\"quotes\"\"\nand a newline\"")
        } else {
            format!("r{i}")
        };
        let line = format!(
            "{i},{}.{:02},{},{s},2024-{:02}-{:02},2013-01-01T{:02}:00:00Z\n",
            i / 4,
            i % 100,
            if i % 2 == 0 { "true" } else { "False" },
            1 + i % 12,
            1 + i % 28,
            i % 24
        );
        out.extend_from_slice(line.as_bytes());
    }
    out
}

#[tokio::test]
async fn csv_to_parquet_in_parallel_chunks_writes_what_one_thread_writes() {
    let data = json!({"max_cell_bytes": 4096, "parse_threads": 3});
    let (dir, exec) = executor_with(PermissionMode::Full, &[("data", data)]);
    let text = chunky_csv();
    std::fs::write(input(dir.path()).join("r.csv"), &text).unwrap();
    let convert = |out: &str, extra: Value| {
        let mut args = json!({"path": "input/r.csv", "output": format!("output/{out}"),
                              "on_error": "skip"});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    };
    let tally = |r: &Value| json!([r["rows_in"], r["rows_out"], r["rows_dropped"], r["dropped"]]);
    let fast = run(&exec, convert("fast.parquet", json!({}))).await;
    let general = run(
        &exec,
        convert("general.parquet", json!({"rename": ["id=id"]})),
    )
    .await;
    assert_eq!(tally(&fast), tally(&general));
    assert_eq!(fast["rows_out"], json!(8192 * 7 + 333), "{fast}");
    assert_eq!(
        fast["dropped"],
        json!({"too_large": 1, "type_mismatch": 1, "ragged": 1, "malformed": 1}),
        "{fast}"
    );
    let back = |name: &str| {
        let exec = &exec;
        let name = name.to_string();
        let dir = dir.path().to_path_buf();
        async move {
            let out = format!("output/{name}.jsonl");
            run(
                exec,
                json!({"path": format!("output/{name}"), "output": out}),
            )
            .await;
            std::fs::read(output(&dir).join(format!("{name}.jsonl"))).unwrap()
        }
    };
    let fast_rows = back("fast.parquet").await;
    assert!(
        fast_rows == back("general.parquet").await,
        "the rows differ"
    );
    let first =
        String::from_utf8_lossy(&fast_rows[..fast_rows.iter().position(|b| *b == b'\n').unwrap()])
            .to_string();
    assert_eq!(
        first,
        r#"{"id":0,"x":0.0,"ok":true,"s":"r0, with \"quotes\"\nand a newline","d":"2024-01-01","t":"2013-01-01T00:00:00Z"}"#
    );

    // One parsing thread writes the same bytes as three.
    let (dir1, exec1) = executor_with(
        PermissionMode::Full,
        &[("data", json!({"max_cell_bytes": 4096, "parse_threads": 1}))],
    );
    std::fs::write(input(dir1.path()).join("r.csv"), &text).unwrap();
    let one = run(&exec1, convert("one.parquet", json!({}))).await;
    assert_eq!(counts(&one), counts(&fast));
    let one_bytes = std::fs::read(output(dir1.path()).join("one.parquet")).unwrap();
    let three = std::fs::read(output(dir.path()).join("fast.parquet")).unwrap();
    assert!(one_bytes == three, "one thread and three differ");

    // A limit inside a chunk; and on_error fail names the first bad row, as the general
    // path does.
    let limit = 8192 * 4 + 17;
    let fast = run(&exec, convert("fast_l.parquet", json!({"limit": limit}))).await;
    assert_eq!(fast["rows_out"], json!(limit), "{fast}");
    assert!(fast["stopped_at_limit"].is_string(), "{fast}");
    fails(
        &exec,
        "data__convert",
        json!({"path": "input/r.csv", "output": "output/f.parquet"}),
        "line 16566: column \"s\" holds 5000 bytes",
    )
    .await;
}
