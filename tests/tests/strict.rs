//! Strict-mode clients (OpenAI's Responses API, openai-agents' strict schemas) must send every
//! property, `null` for the ones they leave out. Every registered tool is called twice, in
//! two workspaces prepared the same way: once with its optional properties left out, once
//! with each of them set to `null` (checked against the strict schema first), and the two
//! results must be the same. Every call that succeeds is made once more with an argument
//! the tool does not take, which must be refused by name before the tool acts: a tool
//! accepts exactly the arguments it reads (`Args::finish`), so its schema's properties, read
//! here as `null`, are all known, and nothing else is. Then the empty strings that clients
//! without `null` send for paths, ids and choices must mean the default too.
//!
//! Only 127.0.0.1 is contacted: web_fetch, web_search and image_gen talk to a server this
//! test starts, and kernel_install runs pip with `--no-index` for a package that does not
//! exist, so nothing is downloaded or installed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use toolbox_executor::{
    CallStatus, ExecutorConfig, PermissionMode, SchemaFormat, ToolCallInfo, ToolExecutor,
    ToolRequest,
};

use toolbox as _;

// A tiny HTTP/1.1 server: at most 32 connections or 60 s, then it stops by itself.

fn serve() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut served = 0;
        while served < 32 && started.elapsed() < Duration::from_secs(60) {
            match listener.accept() {
                Ok((stream, _)) => {
                    served += 1;
                    std::thread::spawn(move || handle(stream));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    addr
}

const PAGE: &str = r#"<!doctype html><html><head><title>Strict page</title></head><body>
<article><h1>Strict page</h1><p>A page with enough words in it for the readability algorithm
to take it for an article: read_csv, __init__ and *args are written here as they are.</p>
<p>A second paragraph, so that the article is long enough to be kept as the main content of
this page rather than the whole page being converted.</p></article></body></html>"#;

fn handle(mut stream: TcpStream) {
    let Some(req) = toolbox_tests::http::read_request(&mut stream) else {
        return;
    };
    let (status, content_type, body) = match (req.method.as_str(), req.path().as_str()) {
        ("GET", "/page") => (200, "text/html; charset=utf-8", PAGE.to_string()),
        ("GET", "/searx/search") => {
            let results: Vec<Value> = (1..=8)
                .map(|i| json!({"title": format!("Result {i}"), "url": format!("https://example.com/{i}"), "content": "snippet"}))
                .collect();
            (
                200,
                "application/json",
                json!({"results": results}).to_string(),
            )
        }
        // The images endpoint answers with an error that repeats the request, so the two
        // calls' results show the request each one made.
        ("POST", "/v1/images/generations") => (
            400,
            "application/json",
            json!({"error": {"message": format!("echo {}", String::from_utf8_lossy(&req.body))}})
                .to_string(),
        ),
        _ => (404, "text/plain", "no such page".to_string()),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// A one-page PDF saying `text`, with a correct cross-reference table.
fn tiny_pdf(text: &str) -> Vec<u8> {
    let content = format!("BT /F1 12 Tf 72 712 Td ({text}) Tj ET");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R \
         /Resources << /Font << /F1 5 0 R >> >> >>"
            .to_string(),
        format!(
            "<< /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
    ];
    let mut pdf = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

const NOTEBOOK: &str = r##"{"cells": [
 {"cell_type": "markdown", "id": "intro", "metadata": {}, "source": ["# Notes"]},
 {"cell_type": "code", "id": "calc", "metadata": {}, "source": ["x = 21 * 2\n", "x"],
  "outputs": [], "execution_count": null}],
 "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
              "language_info": {"name": "python"}},
 "nbformat": 4, "nbformat_minor": 5}"##;

/// One of the two workspaces.
struct Side {
    _dir: tempfile::TempDir,
    /// Holds the side's `[python] venv`, outside its workspace: kernel_install never
    /// reaches the per-user venv in the home folder of whoever runs the tests.
    _venv: tempfile::TempDir,
    exec: ToolExecutor,
}

impl Side {
    fn new(server: SocketAddr) -> Side {
        let dir = tempfile::tempdir().unwrap();
        let venv = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "alpha\nbeta\n").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/b.txt"), "alpha again\n").unwrap();
        std::fs::write(root.join("s.py"), "import sys\nprint(sys.argv[1:])\n").unwrap();
        std::fs::write(root.join("nb.ipynb"), NOTEBOOK).unwrap();
        std::fs::write(root.join("doc.pdf"), tiny_pdf("Hello strict world")).unwrap();
        std::fs::write(root.join("d.csv"), "id,q\n1,a\n2,b\n").unwrap();
        std::fs::create_dir(root.join("code")).unwrap();
        std::fs::write(
            root.join("code/util.py"),
            "def helper(x):\n    return x + 1\n",
        )
        .unwrap();
        std::fs::write(
            root.join("code/main.py"),
            "from util import helper\n\nprint(helper(2))\n",
        )
        .unwrap();
        let demo =
            toolbox_tests::write_skill(root, "skills/demo", "demo", "A demo skill.", "Do it.");
        toolbox_tests::write_file(&demo, "references/r.md", "reference text\n");
        toolbox_tests::write_file(
            &demo,
            "scripts/hi.py",
            "import sys\nprint('hi', sys.argv[1:])\n",
        );

        let mut config = ExecutorConfig::new(root);
        config.permissions.mode = PermissionMode::Full;
        let providers = [
            (
                "web",
                json!({"allow_hosts": ["127.0.0.1"], "search_backend": "searxng",
                       "searxng_url": format!("http://{server}/searx/")}),
            ),
            (
                "image_gen",
                json!({"base_url": format!("http://{server}/v1"), "model": "test-model",
                       "api_key_env": "TOOLBOX_TEST_STRICT_UNSET_KEY"}),
            ),
            // Offline: pip looks at no index, so it can neither download nor install.
            (
                "python",
                json!({"pip_args": ["--no-index"],
                       "venv": venv.path().join("venv").to_string_lossy()}),
            ),
            // A real language server (tests/requirements.txt installs python-lsp-server).
            (
                "lsp",
                json!({"builtin_servers": false,
                       "servers": {"pylsp": {"command": [pylsp()], "extensions": ["py"]}}}),
            ),
        ];
        for (name, table) in providers {
            config.providers.insert(name.into(), table);
        }
        Side {
            _dir: dir,
            _venv: venv,
            exec: ToolExecutor::new(config).unwrap(),
        }
    }

    async fn call(&self, tool: &str, args: Value) -> ToolCallInfo {
        self.exec
            .run(ToolRequest::new("strict-call", tool, args).session("s1"))
            .await
    }
}

/// pylsp: `TOOLBOX_TEST_PYLSP`, else the one beside the test venv's python.
fn pylsp() -> String {
    std::env::var("TOOLBOX_TEST_PYLSP").unwrap_or_else(|_| {
        let python = toolbox_tests::test_python();
        python.parent().unwrap().join("pylsp").display().to_string()
    })
}

/// Numbers (pids, durations, job ids) in shell results differ from run to run.
fn without_numbers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|n| n.is_ascii_digit() || *n == '.')
            {
                chars.next();
            }
            out.push('#');
        } else {
            out.push(c);
        }
    }
    for unit in [" ms", " s", " min"] {
        out = out.replace(&format!("#{unit}"), "#");
    }
    out
}

struct Twins {
    server: SocketAddr,
    loose: Side,
    strict: Side,
    /// Each tool's strict parameters schema (the Responses format is strict by default).
    schemas: BTreeMap<String, Value>,
    /// Each tool's properties that are optional in its loose schema.
    optional: BTreeMap<String, Vec<String>>,
    called: BTreeSet<String>,
}

impl Twins {
    fn new() -> Twins {
        let server = serve();
        let loose = Side::new(server);
        let strict = Side::new(server);
        let mut schemas = BTreeMap::new();
        let mut optional = BTreeMap::new();
        // Both vocabularies: the data agent's family is listed only in its own. Each tool is
        // keyed by its canonical name.
        let mut rendered = vec![];
        for vocabulary in toolbox_core::Vocabulary::ALL {
            rendered.extend(
                loose
                    .exec
                    .resolve_agent_tool_schemas(
                        None,
                        PermissionMode::Full,
                        SchemaFormat::OpenAiResponses.vocabulary(vocabulary),
                    )
                    .unwrap(),
            );
        }
        for tool in rendered {
            let shown = tool["name"].as_str().unwrap();
            let name = loose.exec.registry().get(shown).unwrap().info.name.clone();
            assert_eq!(tool["strict"], true, "{name}");
            schemas.insert(name, tool["parameters"].clone());
        }
        // call_agent is served by the agent runtime, never here: no schema, no call.
        for tool in loose
            .exec
            .registry()
            .tools()
            .iter()
            .filter(|t| !t.info.intercepted)
        {
            let schema = &tool.info.input_schema;
            let required = schema["required"].as_array().cloned().unwrap_or_default();
            let names = schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| !required.contains(&Value::from(k.as_str())))
                .cloned()
                .collect();
            optional.insert(tool.info.name.clone(), names);
        }
        assert_eq!(
            schemas.keys().collect::<Vec<_>>(),
            optional.keys().collect::<Vec<_>>()
        );
        Twins {
            server,
            loose,
            strict,
            schemas,
            optional,
            called: BTreeSet::new(),
        }
    }

    /// `args` with every optional property it does not give set to null, as a strict client
    /// sends it; it must validate against the tool's strict schema.
    fn strict_args(&self, tool: &str, args: &Value) -> Value {
        let mut map: Map<String, Value> = args.as_object().unwrap().clone();
        for name in &self.optional[tool] {
            map.entry(name.clone()).or_insert(Value::Null);
        }
        let strict = Value::Object(map);
        let validator = jsonschema::validator_for(&self.schemas[tool]).unwrap();
        if let Err(e) = validator.validate(&strict) {
            panic!("{tool}: {strict} does not fit the strict schema: {e}");
        }
        strict
    }

    /// Calls `tool` with `loose` in one workspace and `strict` in the other; the results
    /// must be the same (up to numbers, for shell tools). Returns the two results.
    async fn compare(
        &mut self,
        tool: &str,
        loose: Value,
        strict: Value,
        fuzzy_numbers: bool,
    ) -> (String, String) {
        self.called.insert(tool.to_string());
        let a = self.loose.call(tool, loose.clone()).await;
        let b = self.strict.call(tool, strict.clone()).await;
        let shown = |info: &ToolCallInfo| {
            let text = if fuzzy_numbers {
                without_numbers(&info.result)
            } else {
                info.result.clone()
            };
            (info.status, info.error_kind, text)
        };
        assert_eq!(
            shown(&a),
            shown(&b),
            "{tool}: {loose} and {strict} give different results"
        );
        if a.status == CallStatus::Done {
            // The same call with one argument the tool does not take is refused by name,
            // before it acts (so the two workspaces stay alike).
            let mut extra = strict.as_object().unwrap().clone();
            extra.insert("zz_not_an_argument".into(), json!(1));
            let refused = self.strict.call(tool, Value::Object(extra)).await;
            assert_eq!(
                refused.status,
                CallStatus::Error,
                "{tool}: {}",
                refused.result
            );
            assert!(
                // "(expected one of: …)", or "(it takes no arguments)" for a tool without any.
                refused
                    .result
                    .contains(&format!("{tool}: unknown argument `zz_not_an_argument` (")),
                "{tool}: {}",
                refused.result
            );
        }
        (a.result, b.result)
    }

    /// The tool with `args` as given, and with every other optional property null.
    async fn same(&mut self, tool: &str, args: Value) -> String {
        let strict = self.strict_args(tool, &args);
        self.compare(tool, args, strict, false).await.0
    }

    async fn same_fuzzy(&mut self, tool: &str, args: Value) -> (String, String) {
        let strict = self.strict_args(tool, &args);
        self.compare(tool, args, strict, true).await
    }
}

fn job_id(text: &str) -> String {
    let start = text.find("job-").expect("a job id");
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect()
}

fn done(result: &str, want: &str) {
    assert!(result.contains(want), "expected {want:?} in: {result}");
}

#[tokio::test]
async fn every_tool_reads_null_as_absent() {
    let mut t = Twins::new();

    // Files. The two workspaces get the same calls in the same order, so they stay alike.
    done(&t.same("file_manager__list", json!({})).await, "a.txt");
    done(
        &t.same("file_manager__read", json!({"path": "a.txt"})).await,
        "alpha",
    );
    done(
        &t.same("file_manager__glob", json!({"pattern": "**/*.txt"}))
            .await,
        "sub/b.txt",
    );
    done(
        &t.same("file_manager__grep", json!({"pattern": "alpha"}))
            .await,
        "sub/b.txt",
    );
    t.same(
        "file_manager__write",
        json!({"path": "w.txt", "content": "one\n"}),
    )
    .await;
    t.same(
        "file_manager__write",
        json!({"path": "w.txt", "content": "two\n"}),
    )
    .await;
    t.same(
        "file_manager__edit",
        json!({"path": "a.txt", "old_string": "beta", "new_string": "gamma"}),
    )
    .await;
    // append and replace_all left at their defaults in both: the files are the same.
    done(
        &t.same("file_manager__read", json!({"path": "w.txt"})).await,
        "two",
    );

    // Shell: a command, a background job, its output, stopping it, a short sleep.
    let (out, _) = t
        .same_fuzzy("shell", json!({"command": "echo strict-ok"}))
        .await;
    done(&out, "cwd: .toolbox/sessions/s1/scratchpad (scratchpad)");
    done(&out, "strict-ok");
    let (a, b) = t
        .same_fuzzy(
            "shell",
            json!({"command": "sleep 30", "run_in_background": true}),
        )
        .await;
    let (job_a, job_b) = (job_id(&a), job_id(&b));
    let strict = t.strict_args("shell_output", &json!({"job_id": job_b}));
    let (out, _) = t
        .compare("shell_output", json!({"job_id": job_a}), strict, true)
        .await;
    done(&out, "running");
    let strict = t.strict_args("shell_kill", &json!({"job_id": job_b}));
    let (out, _) = t
        .compare("shell_kill", json!({"job_id": job_a}), strict, true)
        .await;
    done(&out, "Stopped job");
    t.same_fuzzy("sleep", json!({"seconds": 0.01})).await;

    // Python: a cell, a script (args null means none), a lookup, an install pip refuses.
    // (The shell made the session's scratchpad already: no note on where Python runs.)
    assert_eq!(
        t.same("run_python_code", json!({"code": "x = 1"})).await,
        "(no output)\n"
    );
    done(
        &t.same("run_python_code", json!({"script_path": "s.py"}))
            .await,
        "[]",
    );
    done(
        &t.same(
            "registry_lookup",
            json!({"query": "dumps", "package": "json"}),
        )
        .await,
        "json.dumps",
    );
    done(
        &t.same(
            "kernel_install",
            json!({"packages": ["toolbox-strict-test-no-such-package"]}),
        )
        .await,
        "pip install failed",
    );

    // Agents: the built-in default one at least.
    done(
        &t.same("list_agents", json!({})).await,
        "\"name\": \"default\"",
    );

    // Skills: lookup with no query, loading, a file, a script through run_python_code.
    done(
        &t.same("skill_lookup", json!({})).await,
        "- demo: A demo skill.",
    );
    done(&t.same("skill", json!({"name": "demo"})).await, "Do it.");
    done(
        &t.same(
            "skill_resource",
            json!({"name": "demo", "path": "references/r.md"}),
        )
        .await,
        "reference text",
    );
    done(
        &t.same(
            "run_python_code",
            json!({"script_path": "skill:demo/scripts/hi.py"}),
        )
        .await,
        "hi []",
    );

    // Notebooks.
    done(
        &t.same("notebook__inspect", json!({"path": "nb.ipynb"}))
            .await,
        "calc",
    );
    done(
        &t.same(
            "notebook__run_cell",
            json!({"path": "nb.ipynb", "cell_id": "calc"}),
        )
        .await,
        "42",
    );
    done(
        &t.same(
            "notebook__edit",
            json!({"path": "nb.ipynb", "index": 0, "source": "# Changed"}),
        )
        .await,
        "replaced markdown cell at index 0",
    );

    // PDFs.
    done(
        &t.same("pdf__info", json!({"path": "doc.pdf"})).await,
        "pages: 1",
    );
    done(
        &t.same("pdf__read", json!({"path": "doc.pdf"})).await,
        "Hello strict world",
    );
    done(
        &t.same("pdf__search", json!({"path": "doc.pdf", "query": "strict"}))
            .await,
        "strict",
    );

    // Data: a CSV inspected, validated and converted into the session's output folder.
    done(
        &t.same("data__inspect", json!({"path": "d.csv"})).await,
        "\"rows\": 2",
    );
    done(
        &t.same(
            "data__validate",
            json!({"path": "d.csv", "required_nonempty": ["q"]}),
        )
        .await,
        "\"valid\": 2",
    );
    done(
        &t.same(
            "data__convert",
            json!({"path": "d.csv", "output": "output/d.jsonl"}),
        )
        .await,
        "\"rows_out\": 2",
    );
    // Code intelligence (rename last: it changes the files).
    done(
        &t.same("lsp__symbols", json!({"path": "code/util.py"}))
            .await,
        "function helper",
    );
    done(
        &t.same(
            "lsp__definition",
            json!({"path": "code/main.py", "symbol": "helper", "line": 3}),
        )
        .await,
        "code/util.py",
    );
    done(
        &t.same(
            "lsp__references",
            json!({"path": "code/util.py", "symbol": "helper"}),
        )
        .await,
        "code/main.py",
    );
    done(
        &t.same(
            "lsp__hover",
            json!({"path": "code/util.py", "symbol": "helper"}),
        )
        .await,
        "helper(x)",
    );
    done(
        &t.same("lsp__diagnostics", json!({"path": "code/main.py"}))
            .await,
        "code/main.py",
    );
    done(
        &t.same(
            "lsp__rename",
            json!({"path": "code/util.py", "symbol": "helper", "new_name": "add_one"}),
        )
        .await,
        "2 files",
    );

    // Memory: both workspaces get the same saves, so the ids match; dates differ.
    let (out, _) = t
        .same_fuzzy("memory__save", json!({"text": "strict memory note"}))
        .await;
    done(&out, "Saved memory #1.");
    let (out, _) = t
        .same_fuzzy("memory__search", json!({"query": "strict"}))
        .await;
    done(&out, "**strict** memory note");
    let (out, _) = t.same_fuzzy("memory__list", json!({})).await;
    done(&out, "strict memory note");
    let (out, _) = t.same_fuzzy("memory__get", json!({"id": 1})).await;
    done(&out, "strict memory note");
    let (out, _) = t.same_fuzzy("memory__delete", json!({"id": 1})).await;
    done(&out, "Deleted [#1]");

    // The web and images, against the local server.
    let addr = t.server;
    done(
        &t.same("web_fetch", json!({"url": format!("http://{addr}/page")}))
            .await,
        "read_csv, __init__ and *args",
    );
    done(
        &t.same("web_search", json!({"query": "strict"})).await,
        "5. Result 5",
    );
    // Defaults applied alike: the server saw n 1 and the default size in both.
    done(
        &t.same("image_gen__generate", json!({"prompt": "a crab"}))
            .await,
        "\"n\":1",
    );

    // The plan: steps with every optional field null, the same checklist in both.
    done(
        &t.same(
            "plan__set",
            // Nested optional fields are sent as null too, as a strict client must.
            json!({"goal": "Strict goal", "steps": [
                {"title": "One", "status": null, "note": null},
                {"title": "Two", "status": "in_progress", "note": null}
            ]}),
        )
        .await,
        "[>] 2. Two",
    );
    done(
        &t.same(
            "plan__update",
            json!({
                "steps": [{"id": "2", "title": null, "status": "completed", "note": null}],
                "add": [{"title": "Three", "status": null, "note": null}]
            }),
        )
        .await,
        "[x] 2. Two",
    );
    done(&t.same("plan__show", json!({})).await, "[ ] 3. Three");
    // No one to ask here: the part stays pending, alike in both.
    done(
        &t.same("plan__request_review", json!({"part": "plan"}))
            .await,
        "stays pending",
    );
    // The data agent's family, every optional argument null.
    done(
        &t.same(
            "data_agent_prepare_generation_goal",
            json!({"goal": "Strict data goal"}),
        )
        .await,
        "Strict data goal",
    );
    done(
        &t.same(
            "data_agent_prepare_generation_plan",
            json!({"steps": [{"title": "Export", "status": null, "note": null}]}),
        )
        .await,
        "[ ] 1. Export",
    );
    for confirm in [
        "data_agent_confirm_generation_goal",
        "data_agent_confirm_generation_plan",
    ] {
        done(&t.same(confirm, json!({})).await, "stays pending");
    }
    done(
        &t.same("data_agent_load_input_sources", json!({})).await,
        "input",
    );
    done(
        &t.same(
            "data_agent_validate_dataset_records",
            json!({"path": "d.csv", "required_fields": ["q"]}),
        )
        .await,
        "\"valid\": 2",
    );
    done(
        &t.same(
            "data_agent_export_dataset_records",
            json!({"path": "d.csv", "output": "output/e.json"}),
        )
        .await,
        "\"rows_out\": 2",
    );
    done(
        &t.same(
            "data_agent_normalize_dataset_draft",
            json!({"path": "d.csv"}),
        )
        .await,
        "d.normalized.jsonl",
    );
    done(
        &t.same(
            "data_agent_export_planning_eval_csv",
            json!({"path": "d.csv", "output": "output/e.csv"}),
        )
        .await,
        "\"rows_out\": 2",
    );
    done(
        &t.same(
            "data_agent_export_training_jsonl",
            json!({"path": "d.csv", "output": "output/t.jsonl", "user_field": "q",
                   "assistant_field": "id", "system_field": null, "system_prompt": null}),
        )
        .await,
        "\"rows_out\": 2",
    );
    // session__info names each workspace's own real paths: compared without them.
    t.called.insert("session__info".into());
    let info = |side: &ToolCallInfo| {
        let mut v: Value = serde_json::from_str(&side.result).unwrap();
        v.as_object_mut().unwrap().remove("paths");
        v
    };
    let a = t.loose.call("session__info", json!({})).await;
    let b = t.strict.call("session__info", json!({})).await;
    assert_eq!(info(&a), info(&b));
    assert_eq!(info(&a)["plan"]["plan"], "pending", "{}", a.result);
    let refused = t
        .strict
        .call("session__info", json!({"zz_not_an_argument": 1}))
        .await;
    done(
        &refused.result,
        "session__info: unknown argument `zz_not_an_argument`",
    );

    let all: BTreeSet<String> = t.schemas.keys().cloned().collect();
    let missed: Vec<&String> = all.difference(&t.called).collect();
    assert!(missed.is_empty(), "no strict-style call for {missed:?}");
}

/// Clients that make every property required without allowing null send "" for a path,
/// an id or a choice they do not mean to give: that is the default too.
#[tokio::test]
async fn empty_paths_ids_and_choices_are_the_default() {
    let mut t = Twins::new();
    let page = format!("http://{}/page", t.server);
    for (tool, loose, empty) in [
        ("file_manager__list", json!({}), json!({"path": ""})),
        (
            "file_manager__glob",
            json!({"pattern": "*.txt"}),
            json!({"pattern": "*.txt", "path": ""}),
        ),
        (
            "file_manager__grep",
            json!({"pattern": "alpha"}),
            json!({"pattern": "alpha", "path": "", "glob": ""}),
        ),
        (
            "shell",
            json!({"command": "echo hi"}),
            json!({"command": "echo hi", "cwd": ""}),
        ),
        (
            "run_python_code",
            json!({"code": "y = 2"}),
            json!({"code": "y = 2", "script_path": "", "args": []}),
        ),
        (
            "run_python_code",
            json!({"script_path": "s.py"}),
            json!({"code": "", "script_path": "s.py", "args": []}),
        ),
        (
            "notebook__inspect",
            json!({"path": "nb.ipynb", "index": 1}),
            json!({"path": "nb.ipynb", "index": 1, "cell_id": ""}),
        ),
        (
            "registry_lookup",
            json!({"query": "loads"}),
            json!({"query": "loads", "package": ""}),
        ),
        ("skill_lookup", json!({}), json!({"query": ""})),
        (
            "lsp__diagnostics",
            json!({"path": "code/util.py"}),
            json!({"path": "code/util.py", "severity": ""}),
        ),
        (
            "lsp__symbols",
            json!({"path": "code/util.py"}),
            json!({"path": "code/util.py", "query": ""}),
        ),
        (
            "web_fetch",
            json!({"url": page.clone()}),
            json!({"url": page.clone(), "format": ""}),
        ),
    ] {
        let fuzzy = tool == "shell";
        let (a, _) = t.compare(tool, loose, empty, fuzzy).await;
        assert!(!a.is_empty());
    }
}
