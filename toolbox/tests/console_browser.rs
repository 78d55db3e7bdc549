//! The web console in a real headless Chromium (Selenium, driven by
//! toolbox/tests/browser/console_test.py) against the real `toolbox serve` and the scripted
//! LLM: a turn whose write asks for approval, answered by clicking Approve on the page; and
//! a server with a token, which the page asks for.
//!
//! Needs `chromium`, `chromium-driver` (Debian) and the Python `selenium` package in
//! TOOLBOX_TEST_PYTHON; scripts/test.sh installs all three. Without them these tests fail,
//! saying so: they never skip.
//!
//! `TOOLBOX_CONSOLE_SCREENSHOT=docs/images/console.png` (relative to the repository) keeps
//! the screenshot of the page after the turn.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console_test.py");
/// The longest the browser script may take, start to end.
const BROWSER_LIMIT: Duration = Duration::from_secs(240);
const WRITTEN: &str = "written from the console test\n";
const FINAL_TEXT: &str = "Done: hello.txt is written.";
const AFTER_DENIAL: &str = "Understood, I left bye.txt alone.";

/// `toolbox serve` on a free loopback port; killed when dropped.
struct Server {
    child: Child,
    url: String,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `toolbox serve --listen 127.0.0.1:0` in `ws` and waits (bounded) for the line
/// that says where it listens.
fn serve(ws: &Path, llm: Option<&ScriptedLlm>, args: &[&str]) -> Server {
    let mut cmd = common::toolbox(ws);
    if let Some(llm) = llm {
        cmd.env("TOOLBOX_LLM_PROVIDER", "openai")
            .env("TOOLBOX_LLM_BASE_URL", llm.openai_base_url())
            .env("TOOLBOX_LLM_MODEL", "scripted-model");
    }
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start toolbox serve");
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, lines) = mpsc::channel();
    {
        let pipe = child.stderr.take().unwrap();
        let stderr = stderr.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { return };
                stderr.lock().unwrap().push_str(&format!("{line}\n"));
                let _ = tx.send(line);
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or_default();
                    break url.trim_end_matches(['/', ',', ';']).to_string();
                }
            }
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "toolbox serve did not say where it listens within 30 s:\n{}",
                    stderr.lock().unwrap()
                );
            }
        }
    };
    Server { child, url, stderr }
}

/// Fails (never skips) when the browser or its driver is missing.
fn require_browser() {
    let chromium = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join("chromium").is_file()))
        .unwrap_or(false);
    let mut missing = Vec::new();
    if !chromium {
        missing.push("chromium");
    }
    if !Path::new(CHROMEDRIVER).is_file() {
        missing.push("chromium-driver (/usr/bin/chromedriver)");
    }
    assert!(
        missing.is_empty(),
        "the console's browser test needs {}: run scripts/test.sh, which installs chromium, \
         chromium-driver and the Python selenium package",
        missing.join(" and ")
    );
}

/// Runs the browser script in `mode`; its exit code and its JSON report.
fn browser(mode: &str, url: &str, shots: &Path, extra: &[&str]) -> (i32, Value) {
    require_browser();
    let python = std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut child = Command::new(&python)
        .arg(SCRIPT)
        .arg(mode)
        .arg(url)
        .arg(shots)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}; run scripts/test.sh"));
    let deadline = Instant::now() + BROWSER_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser script ran longer than {BROWSER_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| {
            panic!("the browser script printed no report\nstdout:\n{stdout}\nstderr:\n{stderr}")
        });
    let code = status.code().unwrap_or(-1);
    match code {
        3 => panic!(
            "the Python selenium package is missing from {python}: run scripts/test.sh\n{report:#}"
        ),
        2 => panic!(
            "chromium did not start through {CHROMEDRIVER}: run scripts/test.sh (it installs \
             chromium and chromium-driver)\n{report:#}\nstderr:\n{stderr}"
        ),
        _ => {}
    }
    (code, report)
}

fn text(report: &Value, key: &str) -> String {
    match &report[key] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A path the developer gave, relative to the repository root.
fn in_repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

#[test]
fn the_console_runs_turns_and_clicks_approve_and_deny() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "c1",
            "file_manager__write",
            json!({"path": "hello.txt", "content": WRITTEN}),
        ),
        Scripted::text(FINAL_TEXT),
        Scripted::call(
            "c2",
            "file_manager__write",
            json!({"path": "bye.txt", "content": "never written"}),
        ),
        Scripted::text(AFTER_DENIAL),
    ]);
    let server = serve(ws.path(), Some(&llm), &["--mode", "auto"]);
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("approval", &server.url, shots.path(), &[]);
    let log = server.stderr.lock().unwrap().clone();
    assert_eq!(
        code,
        0,
        "the browser script failed (a screenshot is in {}):\n{report:#}\nserver:\n{log}",
        shots.keep().display()
    );

    // What the clicks did: the approved file is there, the denied one is not, and the model
    // got both results.
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        WRITTEN
    );
    assert!(!ws.path().join("bye.txt").exists());
    let requests = llm.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    let tool_results: Vec<String> = requests[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(tool_results.len(), 2, "{tool_results:?}");
    assert!(
        tool_results[0].contains("\"status\":\"done\""),
        "{tool_results:?}"
    );
    assert!(
        tool_results[1].contains("\"status\":\"error\""),
        "{tool_results:?}"
    );

    // What the page showed: the approval card, the answer, the result, the text, the end.
    let card = text(&report, "approval_card");
    for shown in [
        "file_manager__write",
        "file_write",
        "hello.txt",
        "Approve",
        "Deny",
        "Approve for session",
    ] {
        assert!(card.contains(shown), "{shown:?} not on the card: {card}");
    }
    assert_eq!(text(&report, "approval_call_id"), "c1");
    assert!(
        text(&report, "approval_answer").contains("approved"),
        "{report:#}"
    );
    assert_eq!(text(&report, "tool_status"), "done", "{report:#}");
    assert!(
        text(&report, "tool_result").contains("hello.txt"),
        "{report:#}"
    );
    let end = text(&report, "turn_end");
    assert!(
        end.contains("end_turn") && end.contains("output tokens"),
        "{end}"
    );
    // The second turn: denied, and the model's answer to that.
    assert_eq!(text(&report, "denied_call_id"), "c2");
    assert_eq!(
        text(&report, "denied_status"),
        "error (denied)",
        "{report:#}"
    );
    let texts = text(&report, "texts");
    assert!(
        texts.contains(FINAL_TEXT) && texts.contains(AFTER_DENIAL),
        "{report:#}"
    );
    assert_eq!(text(&report, "turn_state"), "idle");
    // The trajectory, call by call.
    let replay = &report["replay"];
    assert!(
        replay[0][0] == "call 1 of 2" && replay[1][0] == "call 2 of 2",
        "{replay}"
    );
    assert!(
        replay[0][1].as_str().unwrap().contains("hello.txt"),
        "{replay}"
    );
    assert!(
        replay[1][1].as_str().unwrap().contains("bye.txt"),
        "{replay}"
    );
    assert_eq!(report["replay_next_disabled"], json!(true));
    assert_eq!(
        report["messages"],
        json!([
            "user",
            "assistant",
            "tool · file_manager__write",
            "assistant",
            "user",
            "assistant",
            "tool · file_manager__write",
            "assistant"
        ]),
        "{report:#}"
    );
    // A reload rebuilds the page from the session's replayed events.
    let replayed = text(&report, "replayed_answers");
    assert!(
        replayed.contains("approved") && replayed.contains("denied"),
        "{replayed}"
    );
    assert_eq!(report["console"], json!([]), "browser console errors");

    if let Ok(keep) = std::env::var("TOOLBOX_CONSOLE_SCREENSHOT") {
        let to = in_repo(&keep);
        std::fs::copy(shots.path().join("console.png"), &to)
            .unwrap_or_else(|e| panic!("cannot keep the screenshot as {}: {e}", to.display()));
    }
}

#[test]
fn the_console_asks_for_the_token_and_sends_it() {
    let ws = tempfile::tempdir().unwrap();
    let earlier = ws.path().join(".toolbox/sessions/earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(
        earlier.join("messages.jsonl"),
        "{\"role\":\"user\",\"content\":\"hello\"}\n",
    )
    .unwrap();
    let token = "console-test-token-0123456789";
    let server = serve(ws.path(), None, &["--token", token]);
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("token", &server.url, shots.path(), &[token]);
    let log = server.stderr.lock().unwrap().clone();
    assert_eq!(code, 0, "{report:#}\nserver:\n{log}");
    assert!(
        text(&report, "auth_message").contains("token"),
        "{report:#}"
    );
    assert_eq!(report["stored_token"], json!(true));
    assert!(text(&report, "health").contains("mode"), "{report:#}");
    // A page without the token saw only 401s, never a console error of its own.
    let errors: Vec<&str> = report["console"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|e| !e.contains("401"))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
}
