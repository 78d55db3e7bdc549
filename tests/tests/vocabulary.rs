//! Both source systems word for word (issue 26): the sidecar's toolset names and groups, the
//! data agent's tool names in schemas and in a turn, and structured results beside the text.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};
use toolbox as _;
use toolbox_core::{AgentDef, SessionId, Vocabulary};
use toolbox_executor::{
    trajectory, ExecutorConfig, PermissionMode, SchemaFormat, ToolExecutor, ToolRequest,
};
use toolbox_runtime::llm::{client_with_env, LlmConfig};
use toolbox_runtime::{Runtime, RuntimeOptions, StopReason, TurnRequest};
use toolbox_tests::executor;
use toolbox_tests::scripted_llm::{RecordedRequest, Scripted, ScriptedLlm};

/// The data agent's names, as its prompts and skills say them, and toolbox's tool for each.
const DATA_AGENT: &[(&str, &str)] = &[
    ("list_dir", "file_manager__list"),
    ("read_file", "file_manager__read"),
    ("write_file", "file_manager__write"),
    ("edit_file", "file_manager__edit"),
    ("glob_search", "file_manager__glob"),
    ("grep_search", "file_manager__grep"),
    ("notebook_edit", "notebook__edit"),
    ("python_exec", "run_python_code"),
    ("python_package", "kernel_install"),
    ("bash", "shell"),
    ("sleep", "sleep"),
    ("Skill", "skill"),
];

/// The data agent's own family (issue 41): listed only in its vocabulary.
const DATA_AGENT_ONLY: &[&str] = &[
    "data_agent_load_input_sources",
    "data_agent_validate_dataset_records",
    "data_agent_export_dataset_records",
    "data_agent_normalize_dataset_draft",
    "data_agent_export_training_jsonl",
    "data_agent_export_planning_eval_csv",
    "data_agent_prepare_generation_goal",
    "data_agent_prepare_generation_plan",
    "data_agent_confirm_generation_goal",
    "data_agent_confirm_generation_plan",
];

/// The family's words for tools every vocabulary has.
const DATA_AGENT_WORDS: &[(&str, &str)] = &[
    ("data_agent_show_generation_plan", "plan__show"),
    ("data_agent_update_generation_plan", "plan__update"),
];

fn names(exec: &ToolExecutor, sets: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = exec
        .resolve_agent_tools(Some(sets), PermissionMode::Full)
        .unwrap()
        .into_iter()
        .map(|t| t.info.name.clone())
        .collect();
    names.sort();
    names
}

#[test]
fn the_sidecar_example_frontmatter_loads_and_expands_as_it_describes() {
    let (_d, exec) = executor(PermissionMode::Full);
    // The sidecar document's own example, unchanged.
    let agent = AgentDef::parse(
        b"---\nname: analyst\ndescription: Analyses data.\n\
          toolsets: [\"integrated_notebook\", \"web\", \"memory\"]\n---\nAnalyse.\n",
        "analyst.md",
    )
    .unwrap();
    let sets: Vec<&str> = agent
        .toolsets
        .as_ref()
        .unwrap()
        .iter()
        .map(String::as_str)
        .collect();
    // python + notebook + omicverse_lookup, web_search + web_fetch, memory__*.
    assert_eq!(
        names(&exec, &sets),
        [
            "memory__delete",
            "memory__get",
            "memory__list",
            "memory__save",
            "memory__search",
            "notebook__edit",
            "notebook__inspect",
            "notebook__run_cell",
            "registry_lookup",
            "run_python_code",
            "web_fetch",
            "web_search",
        ]
    );
    // The sidecar's provider names are toolsets here too.
    assert_eq!(names(&exec, &["python_interpreter"]), ["run_python_code"]);
    assert_eq!(names(&exec, &["omicverse_lookup"]), ["registry_lookup"]);
    // The data agent groups notebook_edit with its file tools.
    let files = names(&exec, &["files"]);
    assert!(files.contains(&"notebook__edit".to_string()), "{files:?}");
    assert_eq!(files.len(), 7, "{files:?}");
}

#[test]
fn the_data_agent_vocabulary_lists_each_tool_once_by_its_own_word() {
    let (_d, exec) = executor(PermissionMode::Full);
    for format in SchemaFormat::ALL {
        let name_of = |tool: &Value| -> String {
            match format {
                SchemaFormat::OpenAi => tool["function"]["name"].as_str().unwrap().into(),
                _ => tool["name"].as_str().unwrap().into(),
            }
        };
        let canonical: Vec<String> = exec
            .resolve_agent_tool_schemas(None, PermissionMode::Full, format)
            .unwrap()
            .iter()
            .map(name_of)
            .collect();
        let worded: Vec<String> = exec
            .resolve_agent_tool_schemas(
                None,
                PermissionMode::Full,
                format.vocabulary(Vocabulary::DataAgent),
            )
            .unwrap()
            .iter()
            .map(name_of)
            .collect();
        // Canonical stays the default; the other vocabulary renames, and adds only its own
        // family (the data_agent_* tools), which replaces plan__set and plan__request_review.
        assert!(canonical.contains(&"file_manager__read".to_string()));
        assert_eq!(
            worded.len(),
            canonical.len() + DATA_AGENT_ONLY.len() - 2,
            "{format}"
        );
        let unique: BTreeSet<&String> = worded.iter().collect();
        assert_eq!(unique.len(), worded.len(), "{format}: {worded:?}");
        for (word, tool) in DATA_AGENT {
            assert!(worded.contains(&word.to_string()), "{format}: {word}");
            if word != tool {
                assert!(!worded.contains(&tool.to_string()), "{format}: {tool}");
            }
            // Every name of either vocabulary resolves to the same tool.
            assert_eq!(exec.registry().get(word).unwrap().info.name, *tool);
        }
        // A tool the data agent has no word for keeps its canonical name.
        assert!(worded.contains(&"memory__save".to_string()));
    }
}

#[tokio::test]
async fn the_executor_speaks_the_callers_vocabulary_and_records_both_names() {
    let (dir, exec) = executor(PermissionMode::ReadOnly);
    let info = exec
        .run(
            ToolRequest::new("c1", "bash", json!({"command": "true"}))
                .session("v1")
                .vocabulary(Vocabulary::DataAgent),
        )
        .await;
    assert_eq!(info.tool, "shell");
    assert_eq!(info.called_as.as_deref(), Some("bash"));
    // The refusal names the tool as the model knows it.
    assert!(info.result.contains("bash"), "{}", info.result);
    assert!(!info.result.contains("shell "), "{}", info.result);
    let by_canonical = exec
        .run(ToolRequest::new("c2", "file_manager__list", json!({})).session("v1"))
        .await;
    assert_eq!(by_canonical.called_as, None);
    let kept = trajectory::read_session_trajectory(exec.workspace(), &sid("v1")).unwrap();
    assert_eq!(kept[0].tool, "shell");
    assert_eq!(kept[0].called_as.as_deref(), Some("bash"));
    assert_eq!(kept[1].called_as, None);
    let line = std::fs::read_to_string(trajectory::trajectory_path(dir.path(), "v1")).unwrap();
    assert!(line.contains("\"called_as\":\"bash\""), "{line}");
}

#[tokio::test]
async fn structured_results_sit_beside_an_unchanged_text() {
    let (_d, exec) = executor(PermissionMode::Full);
    let info = exec
        .run(ToolRequest::new(
            "c1",
            "shell",
            json!({"command": "echo out; echo err >&2; exit 3"}),
        ))
        .await;
    assert!(info.is_done(), "{}", info.result);
    assert!(info.result.starts_with("exit code 3 · "), "{}", info.result);
    assert!(info.result.contains("--- stdout (4 bytes) ---\nout\n"));
    assert!(!info.result.contains("$toolbox"), "{}", info.result);
    let s = info.structured.expect("shell has a structured result");
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["stdout"], "out\n");
    assert_eq!(s["stderr"], "err\n");
    assert_eq!(s["stdout_bytes"], 4);
    // It matches the schema the tool declares.
    let schema = exec
        .registry()
        .get("shell")
        .unwrap()
        .info
        .output_schema
        .clone()
        .unwrap();
    assert!(jsonschema::is_valid(&schema, &s), "{s}");
    // A tool without a structured result has none; an error has none.
    let plain = exec
        .run(ToolRequest::new("c2", "file_manager__list", json!({})))
        .await;
    assert_eq!(plain.structured, None);
    let failed = exec.run(ToolRequest::new("c3", "shell", json!({}))).await;
    assert!(!failed.is_done());
    assert_eq!(failed.structured, None);
    // The envelope the model reads carries only status and result.
    let envelope: Value = serde_json::from_str(&info_envelope(&exec).await).unwrap();
    assert_eq!(
        envelope.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["result", "status"]
    );
}

async fn info_envelope(exec: &ToolExecutor) -> String {
    exec.run(ToolRequest::new("c4", "shell", json!({"command": "true"})))
        .await
        .envelope()
}

/// Tool calls a model makes when it knows only the names it was shown: one per tool, with
/// arguments that do nothing outside the workspace.
fn call_every_tool(request: &RecordedRequest) -> Scripted {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        return Scripted::text("done");
    }
    let tools = request.body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let calls: Vec<(String, String, Value)> = tools
        .iter()
        // call_agent runs a sub-turn: it is the runtime's, not a tool of the executor.
        .filter(|t| t["function"]["name"] != "call_agent")
        .enumerate()
        .map(|(i, t)| {
            let name = t["function"]["name"].as_str().unwrap().to_string();
            let args = match name.as_str() {
                "bash" => json!({"command": "echo vocab-ok"}),
                "write_file" => json!({"path": "w.txt", "content": "written\n"}),
                "list_dir" => json!({}),
                "python_exec" => json!({"code": "print(6 * 7)"}),
                _ => json!({}),
            };
            (format!("call{i}"), name, args)
        })
        .collect();
    Scripted::calls(
        calls
            .iter()
            .map(|(id, name, args)| (id.as_str(), name.as_str(), args.clone()))
            .collect(),
    )
}

fn runtime(server: &ScriptedLlm, dir: &std::path::Path, toml: &str) -> Runtime {
    let mut config = ExecutorConfig::new(dir);
    config.permissions.mode = PermissionMode::Full;
    config.apply_toml(toml).unwrap();
    let options = RuntimeOptions::from_config(&config).unwrap();
    let table = json!({
        "provider": "openai",
        "base_url": server.openai_base_url(),
        "model": "scripted",
        "api_key_env": "TOOLBOX_TEST_NO_KEY_VOCABULARY",
    });
    let llm = client_with_env(
        &LlmConfig::from_table(Some(&table), &|_| None).unwrap(),
        &|_| None,
    )
    .unwrap();
    Runtime::new(ToolExecutor::new(config).unwrap(), Ok(llm), options)
}

#[tokio::test]
async fn a_model_prompted_in_the_data_agent_vocabulary_calls_every_tool_by_the_name_it_sees() {
    let server = ScriptedLlm::start_with(call_every_tool);
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime(
        &server,
        dir.path(),
        "[runtime]\nvocabulary = \"data-agent\"\n",
    );
    let outcome = rt
        .run_turn("v1", TurnRequest::new("use every tool"))
        .await
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn, "{outcome:?}");
    let shown: Vec<String> = server.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for (word, _) in DATA_AGENT {
        assert!(shown.contains(&word.to_string()), "{word} not in {shown:?}");
    }
    let shown: Vec<String> = shown.into_iter().filter(|n| n != "call_agent").collect();
    let kept = trajectory::read_session_trajectory(rt.executor().workspace(), &sid("v1")).unwrap();
    assert_eq!(kept.len(), shown.len());
    let by_called: BTreeMap<String, _> = kept
        .iter()
        .map(|c| (c.called_as.clone().unwrap_or(c.tool.clone()), c))
        .collect();
    for name in &shown {
        let call = by_called
            .get(name)
            .unwrap_or_else(|| panic!("{name} not called"));
        let tool = rt.executor().registry().get(name).unwrap();
        assert_eq!(call.tool, tool.info.name, "the canonical name is kept");
        assert_ne!(
            call.error_kind,
            Some(toolbox_executor::ErrorKind::UnknownTool),
            "{name}"
        );
        assert!(!call.result.contains("is not among the tools"), "{name}");
    }
    assert_eq!(by_called["bash"].tool, "shell");
    assert!(by_called["bash"].result.contains("vocab-ok"));
    assert!(
        by_called["python_exec"].result.contains("42"),
        "{}",
        by_called["python_exec"].result
    );
    assert!(
        by_called["write_file"].is_done(),
        "{}",
        by_called["write_file"].result
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("w.txt")).unwrap(),
        "written\n"
    );
}

#[tokio::test]
async fn an_agent_file_chooses_its_vocabulary() {
    let server = ScriptedLlm::start(vec![Scripted::text("ok"), Scripted::text("ok")]);
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".toolbox/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("analyst.md"),
        "---\nname: analyst\ndescription: Analyses data.\n\
         toolsets: [\"integrated_notebook\", \"web\", \"memory\", files]\nvocabulary: data-agent\n\
         ---\nAnalyse.\n",
    )
    .unwrap();
    let rt = runtime(&server, dir.path(), "");
    let mut request = TurnRequest::new("hi");
    request.agent = Some("analyst".into());
    rt.run_turn("v1", request).await.unwrap();
    // The default agent of the same runtime stays canonical.
    rt.run_turn("v2", TurnRequest::new("hi")).await.unwrap();
    let requests = server.requests();
    let listed = |r: &RecordedRequest| -> Vec<String> {
        r.body["tools"]
            .as_array()
            .map(|tools| {
                tools
                    .iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    let analyst = listed(&requests[0]);
    for word in [
        "python_exec",
        "notebook_edit",
        "read_file",
        "web_search",
        "memory__save",
    ] {
        assert!(analyst.contains(&word.to_string()), "{word}: {analyst:?}");
    }
    assert!(!analyst.contains(&"run_python_code".to_string()));
    let default = listed(&requests[1]);
    assert!(
        default.contains(&"run_python_code".to_string()),
        "{default:?}"
    );
    assert!(!default.contains(&"python_exec".to_string()));
}

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

#[test]
fn descriptions_name_the_other_tools_in_the_same_vocabulary() {
    let (_d, exec) = executor(PermissionMode::Full);
    let write = exec
        .resolve_agent_tool_schemas(
            Some(&["write_file"]),
            PermissionMode::Full,
            SchemaFormat::Anthropic.vocabulary(Vocabulary::DataAgent),
        )
        .unwrap();
    let description = write[0]["description"].as_str().unwrap();
    assert!(description.contains("use edit_file"), "{description}");
    assert!(description.contains("python_exec"), "{description}");
    assert!(!description.contains("file_manager__edit"), "{description}");
    // Canonical schemas are as they were.
    let canonical = exec
        .resolve_agent_tool_schemas(
            Some(&["write_file"]),
            PermissionMode::Full,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    assert!(canonical[0]["description"]
        .as_str()
        .unwrap()
        .contains("use file_manager__edit"));
}

/// Every name in a listing of `vocabulary` (MCP format).
fn listed(exec: &ToolExecutor, vocabulary: Vocabulary) -> Vec<String> {
    exec.resolve_agent_tool_schemas(
        None,
        PermissionMode::Full,
        SchemaFormat::Mcp.vocabulary(vocabulary),
    )
    .unwrap()
    .iter()
    .map(|t| t["name"].as_str().unwrap().to_string())
    .collect()
}

/// Issue 41, point 1: the data_agent_* family is listed once each under the data agent's
/// vocabulary, never under toolbox's own, and every name is accepted in both.
#[tokio::test]
async fn the_data_agent_family_is_listed_in_its_vocabulary_and_accepted_in_every_one() {
    let (_d, exec) = executor(PermissionMode::Full);
    let canonical = listed(&exec, Vocabulary::Canonical);
    let worded = listed(&exec, Vocabulary::DataAgent);
    for name in DATA_AGENT_ONLY
        .iter()
        .chain(DATA_AGENT_WORDS.iter().map(|(w, _)| w))
    {
        assert_eq!(
            worded.iter().filter(|n| n == name).count(),
            1,
            "{name} once in {worded:?}"
        );
        assert!(!canonical.contains(&name.to_string()), "{name}");
        assert!(exec.registry().get(name).is_some(), "{name} dispatches");
    }
    for (word, tool) in DATA_AGENT_WORDS {
        assert_eq!(exec.registry().get(word).unwrap().info.name, *tool);
        assert!(canonical.contains(&tool.to_string()));
    }
    // Covered by the family there: not listed, still accepted.
    for covered in ["plan__set", "plan__request_review"] {
        assert!(!worded.contains(&covered.to_string()), "{covered}");
        assert!(canonical.contains(&covered.to_string()), "{covered}");
    }
    // A canonical caller may use a family tool by name.
    let info = exec
        .run(
            ToolRequest::new(
                "g",
                "data_agent_prepare_generation_goal",
                json!({"goal": "A set"}),
            )
            .session("fam"),
        )
        .await;
    assert!(info.is_done(), "{}", info.result);
    assert!(
        info.result.contains("Goal (not yet reviewed): A set"),
        "{}",
        info.result
    );
}

/// Whole identifiers of `text` that are canonical names with another word in the data
/// agent's vocabulary (`shell` only in backticks or as a message's first word).
fn canonical_words_in(text: &str) -> Vec<String> {
    const RENAMED: &[&str] = &[
        "file_manager__list",
        "file_manager__read",
        "file_manager__write",
        "file_manager__edit",
        "file_manager__glob",
        "file_manager__grep",
        "notebook__edit",
        "run_python_code",
        "kernel_install",
        "plan__set",
        "plan__show",
        "plan__update",
        "plan__request_review",
    ];
    let mut found: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| RENAMED.contains(w))
        .map(str::to_string)
        .collect();
    if text.contains("`shell`") || text.starts_with("shell") || text.contains("tool shell ") {
        found.push("shell".into());
    }
    found
}

/// Issue 41, point 2: what a model prompted in the data agent's vocabulary reads (the
/// executor's refusals, the tools' own messages and hints) names the tools by its words,
/// and the call's events carry that name beside the canonical one.
#[tokio::test]
async fn everything_a_data_agent_model_reads_names_its_own_words() {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = {
        let seen = seen.clone();
        toolbox_host::EventSink::new(move |event| seen.lock().unwrap().push(event))
    };
    let (dir, exec) = toolbox_tests::executor_with_events(PermissionMode::Full, &[], sink);
    std::fs::create_dir_all(dir.path().join("folder")).unwrap();
    std::fs::write(dir.path().join("file.txt"), "text\n").unwrap();
    let big = "x".repeat(1024 * 1024 + 1);
    let calls: Vec<(&str, Value, &str)> = vec![
        (
            "edit_file",
            json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}),
            "write_file",
        ),
        (
            "edit_file",
            json!({"path": "file.txt", "old_string": "", "new_string": "b"}),
            "write_file",
        ),
        ("list_dir", json!({"path": "file.txt"}), "read_file"),
        ("read_file", json!({"path": "folder"}), "list_dir"),
        (
            "write_file",
            json!({"path": "big.txt", "content": big}),
            "python_exec",
        ),
        ("python_exec", json!({}), "python_exec requires"),
        ("python_package", json!({"packages": []}), "python_package:"),
        (
            "data_agent_show_generation_plan",
            json!({}),
            "data_agent_prepare_generation_goal",
        ),
        (
            "data_agent_confirm_generation_goal",
            json!({}),
            "data_agent_prepare_generation_goal",
        ),
        (
            "data_agent_update_generation_plan",
            json!({"steps": [{"id": "1", "status": "completed"}]}),
            "data_agent_prepare_generation_plan",
        ),
        (
            "bash",
            json!({"command": "printf 'x%.0s' $(seq 1 20000)"}),
            "Use read_file",
        ),
        ("bash", json!({"command": "echo streamed"}), "streamed"),
    ];
    for (i, (name, args, says)) in calls.into_iter().enumerate() {
        let info = exec
            .run(
                ToolRequest::new(format!("c{i}"), name, args)
                    .session("words")
                    .vocabulary(Vocabulary::DataAgent),
            )
            .await;
        assert!(
            info.result.contains(says),
            "{name}: {says:?} not in {}",
            info.result
        );
        assert!(
            canonical_words_in(&info.result).is_empty(),
            "{name} said {:?}: {}",
            canonical_words_in(&info.result),
            info.result
        );
    }
    // The streamed output of bash names the call's name beside the canonical one.
    let output = seen
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            toolbox_host::ToolEvent::Output {
                tool,
                called_as,
                text,
                ..
            } if text.contains("streamed") => Some((tool.clone(), called_as.clone())),
            _ => None,
        })
        .expect("bash's output was streamed");
    assert_eq!(output, ("shell".to_string(), Some("bash".to_string())));

    // A refusal in auto mode, and the question before it, say `bash`.
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = {
        let asked = asked.clone();
        toolbox_host::EventSink::new(move |event| {
            if let toolbox_host::ToolEvent::ApprovalRequested(request) = event {
                asked.lock().unwrap().push(request);
            }
        })
    };
    let (_d, exec) = toolbox_tests::executor_with_events(PermissionMode::Auto, &[], sink);
    let run = exec.run(
        ToolRequest::new("ask", "bash", json!({"command": "true"}))
            .session("words")
            .vocabulary(Vocabulary::DataAgent),
    );
    let answer = async {
        for _ in 0..500 {
            if !exec.pending_approvals("words").is_empty() {
                exec.deny_approval("words", "ask", "no");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("bash never asked");
    };
    let (info, ()) = tokio::join!(run, answer);
    assert!(!info.is_done());
    assert!(
        canonical_words_in(&info.result).is_empty(),
        "{}",
        info.result
    );
    let request = asked.lock().unwrap()[0].clone();
    assert_eq!(request.tool, "shell");
    assert_eq!(request.called_as.as_deref(), Some("bash"));
    assert_eq!(request.shown_tool(), "bash");
}

/// Issue 41, point 2: the built-in prompt, rendered for a data agent model, names its words.
#[test]
fn the_built_in_prompt_speaks_the_data_agent_vocabulary() {
    let (_d, exec) = executor(PermissionMode::Full);
    let prompt = AgentDef::builtin_default().prompt;
    let worded = exec.registry().rename_text(&prompt, Vocabulary::DataAgent);
    for word in [
        "`bash`",
        "`python_exec`",
        "`write_file`",
        "`python_package`",
    ] {
        assert!(worded.contains(word), "{word}: {worded}");
    }
    assert!(canonical_words_in(&worded).is_empty(), "{worded}");
    // Canonical, it is as written.
    assert_eq!(
        exec.registry().rename_text(&prompt, Vocabulary::Canonical),
        prompt
    );
    assert!(prompt.contains("`shell`") && prompt.contains("`kernel_install`"));
}

/// The backticked identifiers (and `provider__*` patterns) of one table cell.
fn names_in(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*')
        })
        .map(str::to_string)
        .collect()
}

/// Issue 41, point 6: every source-system name docs/source-systems.md lists works here as
/// the page says: a tool name dispatches, a toolset (or `provider__*` pattern) expands, a
/// tool the page says is not provided is not, and every tool of the family table is listed
/// under the data agent's vocabulary with the risk the page gives.
#[test]
fn every_name_in_the_source_systems_page_works_as_it_says() {
    let page = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/source-systems.md"
    ))
    .unwrap();
    let (_d, exec) = executor(PermissionMode::Full);
    let registry = exec.registry();
    let mut checked = 0;
    for line in page.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | kind | sidecar | data agent | toolbox |
        if cells.len() != 6 {
            continue;
        }
        let (kind, sidecar, agent, ours) = (cells[1], cells[2], cells[3], cells[4]);
        let source: Vec<String> = names_in(sidecar)
            .into_iter()
            .chain(names_in(agent))
            .collect();
        match kind {
            "tool" => {
                // The toolbox column names arguments too: its provider__tool names are checked.
                let ours = names_in(ours).into_iter().filter(|n| n.contains("__"));
                for name in source.iter().cloned().chain(ours) {
                    let name = &name;
                    if name.ends_with('*') {
                        let tools = registry.expand_toolsets(&[name.as_str()]);
                        assert!(tools.is_ok_and(|t| !t.is_empty()), "{name} ({line})");
                    } else {
                        assert!(registry.get(name).is_some(), "tool {name} ({line})");
                    }
                    checked += 1;
                }
            }
            "tool (not provided)" => {
                for name in &source {
                    assert!(registry.get(name).is_none(), "{name} is said not to exist");
                    checked += 1;
                }
                for name in names_in(ours) {
                    assert!(registry.get(&name).is_some(), "the page points at {name}");
                }
            }
            "toolset" => {
                for name in &source {
                    let expanded = registry.expand_toolsets(&[name.as_str()]);
                    assert!(
                        expanded.as_ref().is_ok_and(|t| !t.is_empty()),
                        "toolset {name}: {:?}",
                        expanded.err()
                    );
                    checked += 1;
                }
            }
            _ => {}
        }
    }
    // The family table: | tool | risk | arguments | what it does |.
    let listed = listed(&exec, Vocabulary::DataAgent);
    let mut family = 0;
    for line in page.lines().filter(|l| l.starts_with("| `data_agent_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let risk = cells[2].replace(' ', "_");
        let tool = registry.get(name).unwrap_or_else(|| panic!("{name}"));
        assert_eq!(tool.info.risk.as_str(), risk, "{name}");
        assert!(listed.contains(&name.to_string()), "{name} is listed");
        // Each argument the page names is in the tool's schema.
        for arg in names_in(cells[3]) {
            assert!(
                tool.info.input_schema["properties"].get(&arg).is_some(),
                "{name} has no argument {arg}"
            );
        }
        family += 1;
    }
    assert_eq!(family, 12, "the family table has every tool");
    assert!(checked > 60, "only {checked} names were checked");
    for name in DATA_AGENT_ONLY {
        assert!(page.contains(&format!("`{name}`")), "{name} is on the page");
    }
}
