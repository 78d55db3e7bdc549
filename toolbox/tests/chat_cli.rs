//! `toolbox chat` through the real binary against the scripted LLM server (both wire
//! formats, real streaming): tools, parallel calls, bad arguments, the gate in every mode,
//! call_agent, max_steps, retries, a refused key, a model that cannot be reached, a session
//! resumed by a new process, and what a person sees on a real terminal (tmux or script):
//! calls in readable form, the model's Markdown rendered.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::Terminal;

use serde_json::{json, Value};
use toolbox_tests::assert_err_contains;
use toolbox_tests::scripted_llm::{RecordedRequest, Scripted, ScriptedLlm};

const KEY: &str = "sk-scripted-secret-4242";

#[derive(Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
}

/// `toolbox chat` in `ws` talking to `llm` over `wire`, with extra args.
fn chat_command(ws: &Path, llm: &ScriptedLlm, wire: Wire, args: &[&str]) -> Command {
    let mut cmd = common::toolbox(ws);
    let (provider, base) = match wire {
        Wire::OpenAi => ("openai", llm.openai_base_url()),
        Wire::Anthropic => ("anthropic", llm.anthropic_base_url()),
    };
    cmd.env("TOOLBOX_LLM_PROVIDER", provider)
        .env("TOOLBOX_LLM_BASE_URL", base)
        .env("TOOLBOX_LLM_MODEL", "scripted-model")
        .env("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY")
        .env("SCRIPTED_KEY", KEY)
        .arg("chat")
        .args(args);
    cmd
}

fn chat(ws: &Path, llm: &ScriptedLlm, wire: Wire, args: &[&str]) -> Output {
    chat_command(ws, llm, wire, args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every tool-result text the request sent back to the model, in order, for either wire.
fn tool_results(request: &RecordedRequest) -> Vec<String> {
    let mut out = Vec::new();
    for message in request.body["messages"].as_array().into_iter().flatten() {
        if message["role"] == "tool" {
            out.push(message["content"].as_str().unwrap_or_default().to_string());
        }
        if let Some(blocks) = message["content"].as_array() {
            for block in blocks {
                if block["type"] == "tool_result" {
                    let content = match &block["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    out.push(content);
                }
            }
        }
    }
    out
}

/// A tool result the model got: the call's envelope `{"status", "result"}`.
fn envelope(result: &str) -> Value {
    serde_json::from_str(result).unwrap_or_else(|e| panic!("not an envelope ({e}): {result}"))
}

/// The tool names a request offered the model, for either wire.
fn offered_tools(request: &RecordedRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t["function"]["name"]
                .as_str()
                .or_else(|| t["name"].as_str())
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn a_model_reads_a_file_and_then_answers_in_both_wire_formats() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.txt"), "the secret word is heron\n").unwrap();
        let llm = ScriptedLlm::start(vec![
            Scripted::call("c1", "file_manager__read", json!({"path": "notes.txt"})),
            Scripted::text("The word is heron."),
        ]);
        let out = chat(ws.path(), &llm, wire, &["What is the word?"]);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{stdout}\n{stderr}");
        assert!(stdout.contains("The word is heron."), "{stdout}");
        assert!(stderr.contains("→ file_manager__read"), "{stderr}");
        assert!(stderr.contains("← file_manager__read done"), "{stderr}");
        let requests = llm.requests();
        assert_eq!(requests.len(), 2);
        let results = tool_results(&requests[1]);
        assert_eq!(results.len(), 1, "{:?}", requests[1].body);
        let envelope: Value = serde_json::from_str(&results[0]).unwrap();
        assert_eq!(envelope["status"], "done");
        assert!(envelope["result"].as_str().unwrap().contains("heron"));
        let key_header = match wire {
            Wire::OpenAi => requests[0].header("authorization").map(str::to_string),
            Wire::Anthropic => requests[0].header("x-api-key").map(str::to_string),
        };
        assert!(key_header.unwrap_or_default().contains(KEY));
        assert!(!stderr.contains(KEY) && !stdout.contains(KEY));
        // A new session, named on stderr; its conversation is kept for the next turn.
        let session = stderr
            .split("toolbox: new session ")
            .nth(1)
            .and_then(|rest| rest.split(';').next())
            .unwrap_or_else(|| panic!("no new session named: {stderr}"));
        assert!(session.starts_with("chat-"), "{stderr}");
        assert!(
            stderr.contains(&format!("toolbox chat --session {session}")),
            "{stderr}"
        );
        let kept = std::fs::read_to_string(
            ws.path()
                .join(format!(".toolbox/sessions/{session}/messages.jsonl")),
        )
        .unwrap();
        assert_eq!(kept.lines().count(), 4, "{kept}");
    }
}

#[test]
fn parallel_tool_calls_run_at_the_same_time_and_answer_in_order() {
    let ws = tempfile::tempdir().unwrap();
    // Each command waits (up to 10 s) for the other's file: run one after the other, the
    // first would time out and say so.
    let wait_for = |mine: &str, other: &str| {
        format!(
            "touch {mine}; for i in $(seq 100); do [ -e {other} ] && echo met-{mine} && exit 0; \
             sleep 0.1; done; echo alone-{mine}"
        )
    };
    let llm = ScriptedLlm::start(vec![
        Scripted::calls(vec![
            ("p1", "shell", json!({"command": wait_for("a", "b")})),
            ("p2", "shell", json!({"command": wait_for("b", "a")})),
        ]),
        Scripted::text("both ran"),
    ]);
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["--mode", "full", "go"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let results = tool_results(&llm.requests()[1]);
    assert_eq!(results.len(), 2);
    assert!(results[0].contains("met-a"), "{results:?}");
    assert!(results[1].contains("met-b"), "{results:?}");
    let ids: Vec<String> = llm.requests()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["p1", "p2"]);
}

#[test]
fn arguments_that_are_not_json_reach_the_model_as_an_error_and_the_turn_goes_on() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = tempfile::tempdir().unwrap();
        let llm = ScriptedLlm::start(vec![
            Scripted::ToolCalls {
                text: String::new(),
                calls: vec![(
                    "bad".into(),
                    "file_manager__read".into(),
                    "{\"path\": \"x.txt".into(),
                )],
            },
            Scripted::text("sorry, fixed"),
        ]);
        let out = chat(ws.path(), &llm, wire, &["read it"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("sorry, fixed"));
        let results = tool_results(&llm.requests()[1]);
        assert_eq!(results.len(), 1);
        assert_err_contains(&envelope(&results[0]), &["not valid JSON"]);
    }
}

#[test]
fn read_only_hides_writes_and_refuses_one_called_anyway() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": "out.txt", "content": "x"}),
        ),
        Scripted::text("could not write"),
    ]);
    let out = chat(
        ws.path(),
        &llm,
        Wire::OpenAi,
        &["--mode", "read_only", "write"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!ws.path().join("out.txt").exists());
    let requests = llm.requests();
    let offered = offered_tools(&requests[0]);
    assert!(
        offered.iter().any(|t| t == "file_manager__read"),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|t| t == "file_manager__write"),
        "{offered:?}"
    );
    assert!(!offered.iter().any(|t| t == "shell"), "{offered:?}");
    let results = tool_results(&requests[1]);
    assert_err_contains(&envelope(&results[0]), &["read_only"]);
}

#[test]
fn auto_mode_approval_answered_yes_and_no() {
    for (approve, written) in [("yes", true), ("no", false)] {
        let ws = tempfile::tempdir().unwrap();
        let llm = ScriptedLlm::start(vec![
            Scripted::call(
                "w1",
                "file_manager__write",
                json!({"path": "out.txt", "content": "x"}),
            ),
            Scripted::text("done"),
        ]);
        let out = chat(
            ws.path(),
            &llm,
            Wire::OpenAi,
            &["--mode", "auto", "--approve", approve, "write"],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(ws.path().join("out.txt").exists(), written, "{approve}");
        let results = tool_results(&llm.requests()[1]);
        let envelope = envelope(&results[0]);
        if written {
            assert_eq!(envelope["status"], "done", "{envelope}");
        } else {
            // The refusal names what would allow the call.
            assert_err_contains(&envelope, &["--approve no", "--approve yes or --mode full"]);
        }
    }
}

/// `toolbox chat ARGS` on a real terminal (see `common::Terminal`), talking to `llm`.
fn chat_on_terminal(ws: &Path, llm: &ScriptedLlm, args: &str, env: &[(&str, &str)]) -> Terminal {
    let base = llm.openai_base_url();
    let mut all: Vec<(&str, &str)> = vec![
        ("TOOLBOX_LLM_BASE_URL", base.as_str()),
        ("TOOLBOX_LLM_MODEL", "scripted-model"),
        ("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY"),
        ("SCRIPTED_KEY", KEY),
    ];
    all.extend_from_slice(env);
    Terminal::start(ws, &format!("chat {args}"), &all)
}

const PROMPT: &str = "toolbox asks: allow ";
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn auto_mode_asks_on_the_terminal_and_a_yes_runs_the_call() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": "yes.txt", "content": "x"}),
        ),
        Scripted::text("written"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode auto write", &[]);
    let screen = term.wait_for(PROMPT, 1, LIMIT);
    term.type_keys("y\n");
    let (code, screen_after) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen_after}");
    assert!(
        screen.contains("allow file_manager__write (risk file_write)"),
        "{screen}"
    );
    // The call's own line (stderr) is on the screen before the question (/dev/tty).
    let call_line = screen
        .find("→ file_manager__write: Write 1 byte to yes.txt")
        .expect("the call's line");
    let prompt = screen.find(PROMPT).expect("the prompt");
    assert!(call_line < prompt, "{screen}");
    // The question shows what the call will do, not its JSON.
    assert!(
        screen.contains("Write 1 byte to yes.txt, a new file"),
        "{screen}"
    );
    assert!(ws.path().join("yes.txt").exists(), "{screen_after}");
}

/// One model reply asks for three risky calls: the person is asked about each in turn, in the
/// model's order, and each answer applies to the call it was shown for.
#[test]
fn three_risky_calls_are_asked_one_at_a_time_and_each_answer_is_its_own() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::calls(vec![
            (
                "w1",
                "file_manager__write",
                json!({"path": "first.txt", "content": "1"}),
            ),
            (
                "w2",
                "shell",
                json!({"command": "touch second.txt", "cwd": "."}),
            ),
            (
                "w3",
                "file_manager__write",
                json!({"path": "third.txt", "content": "3"}),
            ),
        ]),
        Scripted::text("done"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode auto go", &[]);
    let answers = [
        ("y", "Write 1 byte to first.txt"),
        ("n", "touch second.txt"),
        ("y", "Write 1 byte to third.txt"),
    ];
    for (i, (answer, shown)) in answers.iter().enumerate() {
        let screen = term.wait_for(PROMPT, i + 1, LIMIT);
        // Only this question is open, and it is about the call it shows.
        let open = &screen[screen.rfind(PROMPT).unwrap()..];
        assert!(open.contains(shown), "question {}: {open}", i + 1);
        std::thread::sleep(Duration::from_millis(300));
        let later = term.screen();
        assert_eq!(
            later.matches(PROMPT).count(),
            i + 1,
            "a second question opened:\n{later}"
        );
        term.type_keys(&format!("{answer}\n"));
    }
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert!(ws.path().join("first.txt").exists(), "{screen}");
    assert!(!ws.path().join("second.txt").exists(), "{screen}");
    assert!(ws.path().join("third.txt").exists(), "{screen}");
    let results = tool_results(&llm.requests()[1]);
    assert_err_contains(&envelope(&results[1]), &["denied"]);
}

/// Keys typed before a question appears are thrown away, not taken as its answer.
#[test]
fn keys_typed_before_the_question_are_not_its_answer() {
    let ws = tempfile::tempdir().unwrap();
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let llm = {
        let answered = answered.clone();
        ScriptedLlm::start_with(move |request| {
            if request.body["messages"]
                .to_string()
                .contains("tool_call_id")
            {
                return Scripted::text("ok");
            }
            // Hold the model's answer until the test has typed ahead.
            let deadline = std::time::Instant::now() + LIMIT;
            while !answered.load(std::sync::atomic::Ordering::SeqCst)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            Scripted::call(
                "w1",
                "file_manager__write",
                json!({"path": "typed-ahead.txt", "content": "x"}),
            )
        })
    };
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode auto write", &[]);
    term.wait_for("toolbox", 0, LIMIT);
    std::thread::sleep(Duration::from_millis(500));
    term.type_keys("y\n");
    std::thread::sleep(Duration::from_millis(500));
    answered.store(true, std::sync::atomic::Ordering::SeqCst);
    term.wait_for(PROMPT, 1, LIMIT);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !ws.path().join("typed-ahead.txt").exists(),
        "{}",
        term.screen()
    );
    term.type_keys("n\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert!(!ws.path().join("typed-ahead.txt").exists(), "{screen}");
}

#[test]
fn an_approval_nobody_answers_is_denied_after_the_timeout() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": "never.txt", "content": "x"}),
        ),
        Scripted::text("no answer came"),
    ]);
    let term = chat_on_terminal(
        ws.path(),
        &llm,
        "--mode auto write",
        &[("TOOLBOX_APPROVAL_TIMEOUT_MS", "700")],
    );
    // Say nothing: the question gives up when the call stops waiting.
    let (_, screen) = term.finish(LIMIT);
    assert!(!ws.path().join("never.txt").exists(), "{screen}");
    assert!(screen.contains("the call stopped waiting"), "{screen}");
    let results = tool_results(&llm.requests()[1]);
    assert_err_contains(&envelope(&results[0]), &["none came within 700 ms"]);
}

fn write_agent(ws: &Path, name: &str, toolsets: &str, extra: &str) {
    let dir = ws.join(".toolbox/agents");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(format!("{name}.md")),
        format!(
            "---\nname: {name}\ndescription: test agent {name}\ntoolsets: {toolsets}\n{extra}---\nYou are agent {name}.\n"
        ),
    )
    .unwrap();
}

#[test]
fn call_agent_runs_a_sub_turn_whose_answer_is_the_result() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("data.txt"), "forty-two").unwrap();
    write_agent(ws.path(), "reader", "[files]", "");
    let llm = ScriptedLlm::start(vec![
        // The default agent delegates.
        Scripted::call(
            "ca",
            "call_agent",
            json!({"agent": "reader", "task": "read data.txt"}),
        ),
        // The reader reads, then answers.
        Scripted::call("r1", "file_manager__read", json!({"path": "data.txt"})),
        Scripted::text("data.txt says forty-two"),
        // The default agent answers with what it got.
        Scripted::text("The reader found forty-two."),
    ]);
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["delegate"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(text(&out.stdout).contains("The reader found forty-two."));
    assert!(stderr.contains("agent reader"), "{stderr}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    // The sub-turn had the reader's prompt and only its tools.
    let sub = &requests[1].body;
    assert!(sub.to_string().contains("You are agent reader."), "{sub}");
    let offered = offered_tools(&requests[1]);
    // (`files` is file_manager's tools and notebook__edit, as the data agent groups them.)
    assert!(
        offered
            .iter()
            .all(|t| t.starts_with("file_manager__") || t == "notebook__edit"),
        "{offered:?}"
    );
    // Its answer came back as call_agent's result.
    let results = tool_results(&requests[3]);
    let envelope: Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(envelope["status"], "done");
    assert_eq!(envelope["result"], "data.txt says forty-two");
}

#[test]
fn call_agent_refuses_past_the_depth_limit_and_self_recursion() {
    let ws = tempfile::tempdir().unwrap();
    for name in ["a", "b", "c", "d"] {
        write_agent(ws.path(), name, "[team]", "");
    }
    let delegate = |id: &str, to: &str| {
        Scripted::call(id, "call_agent", json!({"agent": to, "task": "go on"}))
    };
    let llm = ScriptedLlm::start(vec![
        delegate("1", "a"), // default (0) → a (1)
        delegate("2", "b"), // a → b (2)
        delegate("3", "c"), // b → c (3)
        delegate("4", "d"), // c → d would be depth 4: refused without a model request
        delegate("5", "a"), // c → a: a is already in the chain
        Scripted::text("c gives up"),
        Scripted::text("b done"),
        Scripted::text("a done"),
        Scripted::text("all done"),
    ]);
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["start"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requests = llm.requests();
    assert_eq!(requests.len(), 9);
    let depth = tool_results(&requests[4]);
    assert!(
        depth.last().unwrap().contains("depth limit (3)"),
        "{depth:?}"
    );
    let cycle = tool_results(&requests[5]);
    assert!(
        cycle
            .last()
            .unwrap()
            .contains("already running in this chain"),
        "{cycle:?}"
    );
}

#[test]
fn max_steps_ends_the_turn_with_a_notice() {
    let ws = tempfile::tempdir().unwrap();
    write_agent(ws.path(), "brief", "[files]", "max_steps: 2\n");
    let read = |id: &str| Scripted::call(id, "file_manager__list", json!({"path": "."}));
    let llm = ScriptedLlm::start(vec![read("1"), read("2"), Scripted::text("never sent")]);
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["--agent", "brief", "loop"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("max_steps"), "{stderr}");
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(llm.remaining(), 1);
}

#[test]
fn a_429_is_retried_after_retry_after_and_then_succeeds() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::Status {
            code: 429,
            retry_after: Some(1),
            body: json!({"error": {"message": "slow down"}}).to_string(),
        },
        Scripted::text("after the wait"),
    ]);
    let started = std::time::Instant::now();
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1));
    // The retry is no log line at the default level.
    assert!(!text(&out.stderr).contains("WARN"), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("after the wait"));
    assert_eq!(llm.requests().len(), 2);
}

#[test]
fn a_refused_key_is_a_clear_error_that_never_shows_the_key() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let ws = tempfile::tempdir().unwrap();
        let llm = ScriptedLlm::start(vec![Scripted::Status {
            code: 401,
            retry_after: None,
            body: json!({"error": {"message": "invalid api key"}}).to_string(),
        }]);
        let out = chat(ws.path(), &llm, wire, &["hello"]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(stderr.contains("401"), "{stderr}");
        assert!(stderr.contains("SCRIPTED_KEY"), "{stderr}");
        assert!(!stderr.contains(KEY), "{stderr}");
        assert_eq!(llm.requests().len(), 1, "a 401 is not retried");
    }
}

#[test]
fn a_second_process_continues_the_session() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::text("Noted: 31337."),
        Scripted::text("It was 31337."),
    ]);
    let first = chat(
        ws.path(),
        &llm,
        Wire::Anthropic,
        &["-s", "mem", "remember 31337"],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let second = chat(
        ws.path(),
        &llm,
        Wire::Anthropic,
        &["-s", "mem", "what was it?"],
    );
    assert!(second.status.success(), "{}", text(&second.stderr));
    let body = llm.requests()[1].body.to_string();
    assert!(body.contains("remember 31337"), "{body}");
    assert!(body.contains("Noted: 31337."), "{body}");
    assert!(body.contains("what was it?"), "{body}");
}

/// Without `--session` every chat is a new session (never one ever-growing conversation);
/// `--continue` resumes the most recent, and `toolbox sessions` lists them.
#[test]
fn chats_start_new_sessions_continue_the_latest_and_are_listed() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::text("one"),
        Scripted::text("two"),
        Scripted::text("three"),
    ]);
    let first = chat(ws.path(), &llm, Wire::OpenAi, &["first topic"]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    // A second later, so the two sessions' times differ.
    std::thread::sleep(Duration::from_millis(1100));
    let second = chat(ws.path(), &llm, Wire::OpenAi, &["second topic"]);
    assert!(second.status.success(), "{}", text(&second.stderr));
    let requests = llm.requests();
    // The second chat did not see the first one's conversation.
    assert!(
        !requests[1].body.to_string().contains("first topic"),
        "{}",
        requests[1].body
    );
    let third = chat(ws.path(), &llm, Wire::OpenAi, &["--continue", "and more"]);
    let stderr = text(&third.stderr);
    assert!(third.status.success(), "{stderr}");
    assert!(
        stderr.contains("toolbox: continuing session chat-"),
        "{stderr}"
    );
    let body = llm.requests()[2].body.to_string();
    assert!(
        body.contains("second topic") && !body.contains("first topic"),
        "{body}"
    );

    let listed = common::toolbox(ws.path())
        .args(["sessions", "--json"])
        .output()
        .unwrap();
    let rows: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let firsts: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["first_message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(firsts, ["second topic", "first topic"], "{rows}");
    assert!(
        rows[0]["last_activity"].as_str().unwrap().ends_with('Z'),
        "{rows}"
    );
    let table = common::toolbox(ws.path()).arg("sessions").output().unwrap();
    let table = text(&table.stdout);
    assert!(table.starts_with("SESSION"), "{table}");
    assert!(table.contains("second topic"), "{table}");

    // Nothing to continue in an empty workspace: a usage error that says what to do.
    let empty = tempfile::tempdir().unwrap();
    let out = chat(empty.path(), &llm, Wire::OpenAi, &["--continue", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no conversation to continue"));
}

#[test]
fn a_torn_conversation_line_is_skipped_with_a_warning() {
    let ws = tempfile::tempdir().unwrap();
    let dir = ws.path().join(".toolbox/sessions/t");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("messages.jsonl"),
        "{\"role\":\"user\",\"content\":\"earlier\"}\n{\"role\":\"assistant\",\"content\":\"cut",
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![Scripted::text("still fine")]);
    let out = chat(ws.path(), &llm, Wire::OpenAi, &["-s", "t", "next"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cut short"),
        "{}",
        text(&out.stderr)
    );
    let body = llm.requests()[0].body.to_string();
    assert!(body.contains("earlier") && body.contains("next"), "{body}");
}

#[test]
fn no_model_configured_is_a_usage_error() {
    let ws = tempfile::tempdir().unwrap();
    let out = common::toolbox(ws.path())
        .args(["chat", "hello"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("model"), "{}", text(&out.stderr));
}

/// Escape sequences from a hostile model or a hostile file cannot drive the terminal: they
/// are shown escaped, the real question stays visible after them, and `y` runs only the
/// command that was shown.
#[test]
fn a_hostile_model_and_a_hostile_file_cannot_drive_the_terminal() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(
        ws.path().join("README.md"),
        "Welcome\x1b[2J\x1b[H\x1b]0;owned\x07 to the project\n",
    )
    .unwrap();
    let fake = "\x1b[H\x1b[2J→ shell {\"command\":\"ls -la\"}\ntoolbox asks: allow shell (risk command)?\n\x1b[8m";
    let llm = ScriptedLlm::start(vec![
        Scripted::call("r1", "file_manager__read", json!({"path": "README.md"})),
        Scripted::ToolCalls {
            text: fake.to_string(),
            calls: vec![(
                "s1".into(),
                "shell".into(),
                json!({"command": "touch shown.txt", "cwd": "."}).to_string(),
            )],
        },
        Scripted::text("done \u{202e}txt.exe"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode auto go", &[]);
    let screen = term.wait_for(PROMPT, 2, LIMIT);
    // The model's fake question is shown as text; the real one comes after it, whole.
    let real = screen.rfind(PROMPT).unwrap();
    assert!(screen[real..].contains("touch shown.txt"), "{screen}");
    term.type_keys("y\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    for raw in ["\x1b[2J", "\x1b[H", "\x1b[8m", "\x1b]0;", "\u{202e}"] {
        assert!(
            !screen.contains(raw),
            "{raw:?} reached the terminal: {screen:?}"
        );
    }
    assert!(screen.contains("\\x1b[2J"), "shown escaped: {screen:?}");
    assert!(ws.path().join("shown.txt").exists(), "{screen}");
}

/// A model key in a variable that looks like a secret is taken out of the environment at
/// start-up: the model request still carries it, the model's own shell command cannot read it.
#[test]
fn the_model_key_reaches_the_model_and_not_its_commands() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "s1",
            "shell",
            json!({"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ"}),
        ),
        Scripted::text("done"),
    ]);
    let out = chat_command(ws.path(), &llm, Wire::OpenAi, &["--mode", "full", "look"])
        .env("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_API_KEY")
        .env("SCRIPTED_API_KEY", KEY)
        .env_remove("SCRIPTED_KEY")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let requests = llm.requests();
    assert_eq!(
        requests[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let results = tool_results(&requests[1]);
    assert!(results[0].contains("PATH"), "{results:?}");
    assert!(
        !results[0].contains(KEY),
        "the command read the key: {results:?}"
    );
}

/// Issue 38, point 4: chats started in the same second got the same session id, and their
/// conversations merged (8 of 9 parallel chats collided; the model read other chats'
/// messages). Each new session is now claimed by creating its folder: 20 chats started at
/// once get 20 sessions, each holding its own message only.
#[test]
fn twenty_parallel_chats_get_twenty_sessions() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start_with(|_| Scripted::text("ok"));
    let children: Vec<_> = (0..20)
        .map(|i| {
            chat_command(
                ws.path(),
                &llm,
                Wire::OpenAi,
                &[&format!("message number {i}")],
            )
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut sessions = std::collections::BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let session = stderr
            .split("toolbox: new session ")
            .nth(1)
            .and_then(|rest| rest.split([';', ' ', '\n']).next())
            .unwrap_or_else(|| panic!("no new session named: {stderr}"))
            .to_string();
        sessions.insert(session);
    }
    assert_eq!(sessions.len(), 20, "{sessions:?}");
    for session in &sessions {
        let messages = std::fs::read_to_string(
            ws.path()
                .join(format!(".toolbox/sessions/{session}/messages.jsonl")),
        )
        .unwrap();
        assert_eq!(
            messages.matches("message number").count(),
            1,
            "{session} holds another chat's message: {messages}"
        );
    }
    // Every request the model got carried one user message.
    for request in llm.requests() {
        let users = request.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .count();
        assert_eq!(users, 1, "{}", request.body);
    }
}

/// A real terminal run by tmux: what a person sees is what `capture-pane` shows, escape
/// sequences interpreted (or kept, with `-e`). Each has a server of its own (`-L`), killed
/// when it is dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// `toolbox ARGS` in `ws` on a 100×60 tmux window, with `env` and a clean environment
    /// (as `common::toolbox`); when it exits, `__EXIT=<code>` is shown.
    fn start(ws: &Path, args: &str, env: &[(&str, &str)]) -> Tmux {
        assert!(
            Path::new("/usr/bin/tmux").exists(),
            "this test needs tmux (apt-get install tmux); run scripts/test.sh"
        );
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let socket = format!(
            "toolbox-chat-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        );
        let command = format!(
            "{} {args}; echo __EXIT=$?; sleep 60",
            env!("CARGO_BIN_EXE_toolbox")
        );
        let mut tmux = Command::new("/usr/bin/tmux");
        for (key, _) in std::env::vars() {
            if key.starts_with("TOOLBOX_") || key == "RUST_LOG" || key == "NO_COLOR" {
                tmux.env_remove(key);
            }
        }
        tmux.args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "100", "-y", "60", "-c"])
            .arg(ws)
            .env("XDG_CONFIG_HOME", ws.join(".no-user-config"))
            .env("TERM", "xterm-256color")
            .envs(env.iter().copied());
        let out = tmux.arg(command).output().expect("start tmux");
        assert!(out.status.success(), "tmux: {}", text(&out.stderr));
        Tmux { socket }
    }

    /// The screen as a person sees it (`escapes`: with its styles as escape sequences).
    fn screen(&self, escapes: bool) -> String {
        let mut args = vec!["-L", &self.socket, "capture-pane", "-p", "-J"];
        if escapes {
            args.push("-e");
        }
        let out = Command::new("/usr/bin/tmux").args(&args).output().unwrap();
        text(&out.stdout)
    }

    /// Waits (at most `limit`) for toolbox to exit; its exit code and the screen.
    fn finish(&self, limit: Duration) -> (i32, String) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let screen = self.screen(false);
            if let Some(code) = screen.split("__EXIT=").nth(1) {
                let code = code
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .parse()
                    .unwrap();
                return (code, screen);
            }
            if std::time::Instant::now() >= deadline {
                panic!("toolbox did not exit within {limit:?}; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("/usr/bin/tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

/// The scripted model's environment for a terminal.
fn model_env(llm: &ScriptedLlm) -> Vec<(&'static str, String)> {
    vec![
        ("TOOLBOX_LLM_BASE_URL", llm.openai_base_url()),
        ("TOOLBOX_LLM_MODEL", "scripted-model".into()),
        ("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY".into()),
        ("SCRIPTED_KEY", KEY.into()),
    ]
}

const MARKDOWN: &str = "# Report\n\nI wrote **notes.md** with `two` lines and *some* care:\n\n\
- first item\n- second item\n\n\
| name | size |\n|---|---:|\n| notes.md | 19 |\n| a-much-longer-name.txt | 3 |\n\n\
```rust\nfn main() {}\n```\nThat is all.\n";

/// Issue 38, point 7: the model's Markdown was printed raw. On a terminal it is rendered:
/// the heading and emphasis without their marks (styled), lists with bullets, code without
/// fences, and a pipe table as aligned columns; as tmux shows it to a person.
#[test]
fn the_model_s_markdown_is_rendered_on_a_terminal() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![Scripted::text(MARKDOWN)]);
    let env = model_env(&llm);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let tmux = Tmux::start(ws.path(), "chat report", &env);
    let (code, screen) = tmux.finish(LIMIT);
    assert_eq!(code, 0, "{screen}");
    let lines: Vec<&str> = screen.lines().collect();
    for raw in [
        "**", "# Report", "```", "| name", "|---", "`two`", "*some*", "- first",
    ] {
        assert!(!screen.contains(raw), "{raw:?} shown raw:\n{screen}");
    }
    for shown in [
        "Report",
        "I wrote notes.md with two lines and some care:",
        "• first item",
        "• second item",
        "fn main() {}",
        "That is all.",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(shown)),
            "{shown:?}:\n{screen}"
        );
    }
    // The table's columns line up: every row has its bar at the same column, and the sizes
    // are right-aligned.
    let rows: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains('│') || l.contains('┼'))
        .filter(|l| !l.contains("fn main"))
        .collect();
    assert_eq!(rows.len(), 4, "{screen}");
    let bar = |l: &str| l.chars().position(|c| c == '│' || c == '┼');
    assert!(rows.iter().all(|r| bar(r) == bar(rows[0])), "{screen}");
    assert_eq!(
        rows[0].trim_end(),
        "name                   │ size",
        "{screen}"
    );
    assert_eq!(
        rows[2].trim_end(),
        "notes.md               │   19",
        "{screen}"
    );
    assert_eq!(
        rows[3].trim_end(),
        "a-much-longer-name.txt │    3",
        "{screen}"
    );
    // Styled: bold for **notes.md**, the heading bold too.
    let styled = tmux.screen(true);
    assert!(styled.contains("\x1b[1mnotes.md"), "{styled:?}");
}

/// With NO_COLOR the same layout comes without a single escape sequence; with stdout not a
/// terminal (a pipe, a file) the model's text is passed on as it is, Markdown and all.
#[test]
fn markdown_is_plain_with_no_color_and_verbatim_when_piped() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![Scripted::text(MARKDOWN), Scripted::text(MARKDOWN)]);
    let term = chat_on_terminal(ws.path(), &llm, "report", &[("NO_COLOR", "1")]);
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert!(!screen.contains('\x1b'), "{screen:?}");
    assert!(screen.contains("notes.md               │   19"), "{screen}");
    assert!(screen.contains("• first item"), "{screen}");
    assert!(!screen.contains("**"), "{screen}");

    let out = chat(ws.path(), &llm, Wire::OpenAi, &["report"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), MARKDOWN);
}

/// Markdown does not open a way around the escaping: escape sequences in a heading, in bold,
/// in a code block and in a table cell are shown escaped, and the only escape sequences on
/// the terminal are styles (SGR).
#[test]
fn markdown_from_a_hostile_model_cannot_drive_the_terminal() {
    let ws = tempfile::tempdir().unwrap();
    let hostile =
        "# T\x1b[2J\n**b\x1b]0;owned\x07**\n```\nx\x1b[8m\n```\n|a|b|\n|-|-|\n|\x1b[H|\u{202e}|\n";
    let llm = ScriptedLlm::start(vec![Scripted::text(hostile)]);
    let term = chat_on_terminal(ws.path(), &llm, "hi", &[]);
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    for raw in [
        "\x1b[2J", "\x1b]0;", "\x07", "\x1b[8m", "\x1b[H", "\u{202e}",
    ] {
        assert!(
            !screen.contains(raw),
            "{raw:?} reached the terminal: {screen:?}"
        );
    }
    assert!(screen.contains("\\x1b[2J"), "shown escaped: {screen:?}");
    assert!(screen.contains("\\x1b[H"), "shown escaped: {screen:?}");
    for (at, _) in screen.match_indices('\x1b') {
        let sequence: String = screen[at + 1..].chars().take_while(|c| *c != 'm').collect();
        assert!(
            sequence.starts_with('[')
                && sequence.len() < 12
                && sequence[1..]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == ';'),
            "not a style: {:?} in {screen:?}",
            &screen[at..]
        );
    }
}

/// Issue 38, point 7: the line above an approval question was the call's arguments as escaped
/// JSON (`{"content":"line1\nline2\n\"quoted\""}`). It now says what the call will do (the
/// approval's preview), and a call that asks nothing shows its arguments as `key: value`,
/// on one line of bounded length.
#[test]
fn a_call_is_shown_as_what_it_does_not_as_json() {
    let ws = tempfile::tempdir().unwrap();
    let long = "x".repeat(3000);
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "g1",
            "file_manager__grep",
            json!({"path": ".", "pattern": format!("first {long}\nsecond")}),
        ),
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": "notes.md", "content": "line1\nline2\n\"quoted\"\n"}),
        ),
        Scripted::text("written"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode auto write", &[]);
    let screen = term.wait_for(PROMPT, 1, LIMIT);
    let before = &screen[..screen.find(PROMPT).unwrap()];
    for json in ["\\n", "\\\"", "{\"", "\":"] {
        assert!(!before.contains(json), "{json:?} (JSON) shown:\n{screen}");
    }
    assert!(
        before.contains("→ file_manager__write: Write 21 bytes to notes.md, a new file"),
        "{screen}"
    );
    let grep = before
        .lines()
        .find(|l| l.contains("→ file_manager__grep"))
        .expect("grep's line");
    assert!(
        grep.starts_with("→ file_manager__grep path: ., pattern: first xxx"),
        "{grep}"
    );
    assert!(grep.ends_with('…') && grep.chars().count() <= 210, "{grep}");
    term.type_keys("y\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert!(ws.path().join("notes.md").exists(), "{screen}");
}

/// Issue 38, point 7: a model that could not be reached printed a raw tracing `WARN` line
/// for every retry and then the error's whole chain. Now it is one sentence: which address,
/// what failed, what to check; the retries are logged only when asked for (RUST_LOG /
/// TOOLBOX_LOG).
#[test]
fn a_model_that_cannot_be_reached_is_one_clear_sentence() {
    let ws = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let env = [
        ("TOOLBOX_LLM_BASE_URL", base.as_str()),
        ("TOOLBOX_LLM_MODEL", "scripted-model"),
        ("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY"),
        ("SCRIPTED_KEY", KEY),
        ("TOOLBOX_LLM_MAX_RETRIES", "2"),
    ];
    let term = Terminal::start(ws.path(), "chat hello", &env);
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(1), "{screen}");
    for noise in [
        "WARN",
        "retrying",
        "os error",
        "tcp connect error",
        "client error",
    ] {
        assert!(!screen.contains(noise), "{noise:?}:\n{screen}");
    }
    let said: Vec<&str> = screen
        .lines()
        .filter(|l| l.contains(&format!("127.0.0.1:{port}")))
        .collect();
    assert_eq!(said.len(), 1, "{screen}");
    let said = said[0];
    assert!(
        said.contains(&format!(
            "cannot reach the model at {base}/chat/completions"
        )),
        "{said}"
    );
    assert!(
        said.contains("connection refused, after 3 attempts"),
        "{said}"
    );
    assert!(said.contains("TOOLBOX_LLM_BASE_URL"), "{said}");

    // Asked for, the retries are logged.
    let mut cmd = common::toolbox(ws.path());
    let out = cmd
        .envs(env)
        .env("TOOLBOX_LOG", "warn")
        .args(["chat", "hello"])
        .output()
        .unwrap();
    assert!(
        text(&out.stderr).contains("retrying"),
        "{}",
        text(&out.stderr)
    );
}
