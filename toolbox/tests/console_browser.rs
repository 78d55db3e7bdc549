//! The web console in a real headless Chromium (Selenium, driven by
//! toolbox/tests/browser/console_test.py) against the real `toolbox serve` and the scripted
//! LLM: a turn whose write asks for approval, answered by clicking Approve on the page; two
//! sessions, one waiting, and what the page says of that (the sidebar, the title, one
//! question at a time, Markdown, an error once, the time a call waited, a 420 px window);
//! a plan reviewed, measured at 1280x900 and at 420x800 (issue 38, point 6: room for the
//! log, the open question's buttons in sight, a call waiting its turn to be asked, the
//! answered card read-only, the plan's review state in words, a Markdown table);
//! and a server with a token, which the page asks for.
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
    serve_with_env(ws, llm, args, &[])
}

/// [`serve`] with variables set for the server.
fn serve_with_env(
    ws: &Path,
    llm: Option<&ScriptedLlm>,
    args: &[&str],
    env: &[(&str, &str)],
) -> Server {
    let mut cmd = common::toolbox(ws);
    cmd.envs(env.iter().copied());
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

const NOTES_PATH: &str =
    "output/notes/a-folder-with-a-long-name-that-goes-on-and-on/meeting-notes.md";
const NOTES: &str = "# Notes\nfirst line\nsecond line\n";
const NOTES_DONE: &str = "The notes are written.";
const FAILURE: &str = "scripted failure XYZ-123";
const MARKDOWN: &str = "## Plan for the notes\n\nThis is **bold**, *emphasis* and `inline code`.\n\n\
    - first item\n- second item with a [safe link](https://example.com/docs)\n\n\
    1. one\n2. two\n\n\
    ```rust\nfn main() { println!(\"a very long line that must scroll inside its own box, not the page, 0123456789 0123456789\"); }\n```\n\n\
    A [bad link](javascript:alert(1)) stays text.\n\
    <script>window.__pwned = 1</script>\n\
    <img src=x onerror=\"window.__pwned = 2\">\n\
    See https://example.com/a/very/long/address/that/goes/on/and/on/and/on/without/any/space/at/all/0123456789.";

/// The model of the two-session test, by the marker in the turn's user message: `[wait]`
/// writes a file (which waits for approval), `[md]` answers in Markdown, `[fail]` is a 400.
fn attention_model(request: &toolbox_tests::scripted_llm::RecordedRequest) -> Scripted {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last_role = messages
        .last()
        .and_then(|m| m["role"].as_str())
        .unwrap_or_default();
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default();
    if last_role == "tool" {
        Scripted::text(NOTES_DONE)
    } else if user.contains("[wait]") {
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": NOTES_PATH, "content": NOTES}),
        )
    } else if user.contains("[md]") {
        Scripted::text(MARKDOWN)
    } else if user.contains("[fail]") {
        Scripted::error(400, FAILURE)
    } else {
        Scripted::text("ok")
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_console_says_when_a_session_waits_for_you() {
    let ws = tempfile::tempdir().unwrap();
    let earlier = ws.path().join(".toolbox/sessions/earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    std::fs::write(
        earlier.join("messages.jsonl"),
        format!(
            "{}\n",
            json!({"role": "user", "content": format!("Summarise   the\nreport {}", "and more ".repeat(40))})
        ),
    )
    .unwrap();
    let llm = ScriptedLlm::start_with(attention_model);
    let server = serve(ws.path(), Some(&llm), &["--mode", "auto"]);
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("attention", &server.url, shots.path(), &[]);
    let log = server.stderr.lock().unwrap().clone();
    assert_eq!(
        code,
        0,
        "the browser script failed (screenshots are in {}):\n{report:#}\nserver:\n{log}",
        shots.keep().display()
    );
    let fail = |what: &str| format!("{what}\n{report:#}");

    // The list: no Refresh button; a session's first message and last activity.
    assert_eq!(
        report["refresh_buttons"],
        json!(0),
        "{}",
        fail("a Refresh button")
    );
    let earlier_row = text(&report, "earlier_row");
    assert!(
        earlier_row.contains("Summarise the report and more"),
        "{}",
        fail("the first message, on one line")
    );
    assert_eq!(
        report["earlier_time"],
        json!(true),
        "{}",
        fail("no last activity")
    );
    assert_eq!(text(&report, "title_idle"), "toolbox console");

    // Alpha waits while beta is open: the sidebar and the title say so.
    assert!(
        text(&report, "alpha_row").contains("waiting 1"),
        "{}",
        fail("alpha's row")
    );
    assert!(
        text(&report, "alpha_row").contains("[wait] please write the notes"),
        "{}",
        fail("alpha's first message")
    );
    assert_eq!(
        text(&report, "title_waiting"),
        "(1) waiting · toolbox console"
    );
    // What the call will do: the preview when the event carries one, else key: value lines.
    let alpha_card = text(&report, "alpha_card");
    assert_eq!(
        report["alpha_card_json"],
        json!(false),
        "{}",
        fail("JSON on the card")
    );
    if report["alpha_has_preview"] == json!(true) {
        assert!(
            alpha_card.contains("meeting-notes.md"),
            "{}",
            fail("the preview")
        );
    } else {
        let path_line = format!("path: {NOTES_PATH}");
        for line in [
            path_line.as_str(),
            "content:",
            "  # Notes",
            "  first line",
            "  second line",
        ] {
            assert!(
                alpha_card.lines().any(|l| l == line),
                "{}",
                fail(&format!("{line:?} not a line of the card"))
            );
        }
    }

    // Markdown, with nothing of the model's HTML run or built.
    let md = &report["markdown"];
    assert_eq!(strings(&md["h2"]), ["Plan for the notes"], "{}", fail("h2"));
    assert_eq!(strings(&md["strong"]), ["bold"], "{}", fail("strong"));
    assert_eq!(strings(&md["em"]), ["emphasis"], "{}", fail("em"));
    assert_eq!(strings(&md["code"]), ["inline code"], "{}", fail("code"));
    assert!(
        strings(&md["pre"])[0].starts_with("fn main() {"),
        "{}",
        fail("the code block")
    );
    assert_eq!(
        strings(&md["ul"]),
        ["first item", "second item with a safe link"],
        "{}",
        fail("ul")
    );
    assert_eq!(strings(&md["ol"]), ["one", "two"], "{}", fail("ol"));
    let links = md["links"].as_array().unwrap();
    assert_eq!(links.len(), 2, "{}", fail("links"));
    assert_eq!(
        links[0],
        json!([
            "https://example.com/docs",
            "noopener noreferrer",
            "safe link"
        ])
    );
    assert!(links[1][0]
        .as_str()
        .unwrap()
        .starts_with("https://example.com/a/very/long/"));
    assert_eq!(
        md["scripts"],
        json!(0),
        "{}",
        fail("a script or img element")
    );
    assert_eq!(
        md["pwned"],
        Value::Null,
        "{}",
        fail("the model's script ran")
    );
    let shown = md["text"].as_str().unwrap();
    assert!(
        shown.contains("<script>window.__pwned = 1</script>")
            && shown.contains("bad link (javascript:alert(1))"),
        "{}",
        fail("the HTML and the bad link as text")
    );

    // A failed model request: its text once, though the error and the turn's end carry it.
    assert_eq!(
        report["failure_count"],
        json!(1),
        "{}",
        fail("the error, once")
    );
    assert!(
        text(&report, "failure_end").contains("error"),
        "{}",
        fail("the end")
    );

    // One question at a time.
    assert_eq!(
        text(&report, "title_three"),
        "(3) waiting · toolbox console"
    );
    assert_eq!(
        strings(&report["q1_live"]),
        ["approve", "deny", "approve_for_session"],
        "{}",
        fail("the first question's buttons")
    );
    assert_eq!(
        strings(&report["q2_live"]),
        Vec::<String>::new(),
        "{}",
        fail("q2 live")
    );
    assert_eq!(
        text(&report, "q2_note"),
        "queued: answer the one above first"
    );
    assert_eq!(report["active_before"], json!(1));
    assert_eq!(report["active_after"], json!(1));
    assert_eq!(report["q2_note_after"], json!(false));
    assert!(
        text(&report, "beta_row").contains("waiting 2"),
        "{}",
        fail("beta's row")
    );
    assert_eq!(
        report["queue_results"],
        json!({"q1": "done", "q2": "error"}),
        "{}",
        fail("the answers")
    );
    assert!(!ws.path().join("queue/second.txt").exists());

    // A session started by another client shows up by itself.
    assert!(
        text(&report, "gamma_row").contains("[md] from elsewhere"),
        "{}",
        fail("gamma")
    );

    // No sideways scrolling at 420 px, with long paths, lines and addresses on the page.
    for key in ["narrow_beta", "narrow_alpha"] {
        let w = &report[key];
        let (scroll, client) = (w[0].as_u64().unwrap(), w[1].as_u64().unwrap());
        assert!(
            scroll <= client,
            "{}",
            fail(&format!("{key}: {scroll} > {client}"))
        );
    }

    // Alpha approved: the call's time, and apart from it the wait (when the event says).
    let elapsed = text(&report, "alpha_elapsed");
    let (took, waited) = match elapsed.split_once(" · waited ") {
        Some((took, waited)) => (took, Some(waited)),
        None => (elapsed.as_str(), None),
    };
    assert!(
        took.ends_with(" ms") || took.ends_with(" s"),
        "{}",
        fail("the call's time")
    );
    if let Some(waited) = waited {
        assert!(waited.ends_with(" for approval"), "{}", fail("the wait"));
    }
    assert_eq!(report["alpha_args_hidden"], json!(true));
    assert_eq!(text(&report, "title_after"), "toolbox console");
    assert!(!text(&report, "alpha_row_after").contains("waiting"));
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".toolbox/sessions/alpha").join(NOTES_PATH))
            .unwrap(),
        NOTES
    );

    // The renderers, on what no server sends yet: a preview with a diff, a wait.
    let r = &report["renderers"];
    assert_eq!(
        r["summary"],
        json!("Edit notes.md (output/notes.md): 1 line changed")
    );
    assert_eq!(
        strings(&r["kinds"]),
        [
            "block kind-fields",
            "block kind-diff",
            "block kind-code",
            "block kind-text"
        ]
    );
    // added, removed, hunk headers, file headers, context
    assert_eq!(r["diff"], json!([1, 1, 1, 2, 1]), "{}", fail("diff lines"));
    assert_eq!(r["removed"], json!("-old <b>line</b>\n"));
    assert_eq!(r["markup"], json!(0), "{}", fail("markup from a preview"));
    assert_eq!(r["folded_small"], json!(false));
    assert_eq!(r["folded"], json!(true));
    assert_eq!(r["toggle"], json!("show all (60 lines)"));
    assert_eq!(r["unfolded"], json!(true));
    assert_eq!(r["toggle_after"], json!("show less"));
    assert_eq!(
        r["fallback"],
        json!("path: a.txt\ncontent:\n  one\n  two\nn: 3\nempty: \"\"\nnested:\n  k: v\n  list:\n    - 1\n    - x")
    );
    assert_eq!(r["fallback_preview"], json!(0));
    assert_eq!(r["as_text"], json!("command:\n  ls -l\n  echo \"hi\""));
    assert_eq!(
        r["timing"],
        json!(["12 ms · waited 3.4 s for approval", "12 ms", "1.5 s"])
    );
    assert_eq!(r["md_links"], json!(["https://ok.example/"]));
    assert_eq!(r["md_img"], json!(0));
    assert!(
        r["md_text"]
            .as_str()
            .unwrap()
            .contains("<img src=x onerror=alert(1)>"),
        "{}",
        fail("the img as text")
    );
    assert_eq!(report["console"], json!([]), "browser console errors");
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
    // Files dropped on the log and chosen with the button land in the session's input/,
    // and the page says where (issue 41, point 4).
    let input = earlier.join("input");
    assert_eq!(
        std::fs::read_to_string(input.join("dropped.csv")).unwrap(),
        "question,answer\n\"2+2?\",4\n"
    );
    assert_eq!(
        std::fs::read_to_string(input.join("chosen notes.txt")).unwrap(),
        "chosen in the browser\n"
    );
    let dropped = text(&report, "dropped_text");
    assert!(
        dropped.contains(".toolbox/sessions/earlier/input/dropped.csv"),
        "{dropped}"
    );
    assert!(
        text(&report, "chosen_text").contains("input/ holds input/chosen notes.txt"),
        "{report:#}"
    );
    assert_eq!(text(&report, "upload_error"), "", "{report:#}");
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

#[test]
fn the_console_shows_the_plan_and_approves_its_review() {
    let ws = tempfile::tempdir().unwrap();
    // The operator's gate, in the user config file the test's toolbox reads
    // (XDG_CONFIG_HOME is <ws>/.no-user-config).
    let user = ws.path().join(".no-user-config/toolbox");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("config.toml"),
        "[plan]\nrequire_confirmed = [\"file_write\"]\n",
    )
    .unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write hello.txt"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::call(
            "w1",
            "file_manager__write",
            json!({"path": "hello.txt", "content": "hello"}),
        ),
        Scripted::text("written"),
    ]);
    let server = serve(ws.path(), Some(&llm), &["--mode", "full"]);
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("review", &server.url, shots.path(), &[]);
    let log = server.stderr.lock().unwrap().clone();
    assert_eq!(
        code,
        0,
        "the browser script failed (a screenshot is in {}):\n{report:#}\nserver:\n{log}",
        shots.keep().display()
    );
    assert_eq!(text(&report, "review_call_id"), "r1");
    assert!(
        text(&report, "review_card").contains("Write hello.txt"),
        "{report:#}"
    );
    assert!(
        text(&report, "plan_panel").contains("[ ] 1. Write hello.txt"),
        "{report:#}"
    );
    assert!(
        text(&report, "review_answer").starts_with("Approved"),
        "{report:#}"
    );
    assert!(
        text(&report, "write_status").starts_with("done"),
        "{report:#}"
    );
    assert!(
        text(&report, "plan_panel_after").contains("Checklist\napproved")
            && text(&report, "plan_panel_after").contains("via http")
            && text(&report, "plan_panel_after").contains("[ ] 1. Write hello.txt"),
        "{report:#}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        "hello"
    );
    // The person's feedback reached the model with the approval.
    let requests = llm.requests();
    let body = requests[2].body.to_string();
    assert!(body.contains("Looks right."), "{body}");
}

const LAYOUT_GOAL: &str = "Ship the release notes for 0.2, with every change since 0.1 \
    grouped by area, so users know what to try first";
/// A plan of a realistic length: the panel the user saw was this tall.
const LAYOUT_STEPS: [&str; 6] = [
    "Collect the merged pull requests since the last release",
    "Group them by area (server, console, providers)",
    "Write the notes",
    "Draft the highlights paragraph",
    "Check every link in the notes",
    "Read them back",
];
const LAYOUT_TABLE: &str = "Here is where things stand:\n\n\
    | Step | Status | Notes |\n\
    |:-----|:------:|------:|\n\
    | Write `first.txt` | **done** | <script>window.__pwned = 3</script> |\n\
    | Read it back | pending | a \\| pipe |\n\n\
    That is all.";

/// The model of the layout test: a plan with a goal, a review of its checklist, then two
/// writes in one reply (both ask in `auto`, one question at a time), then a table.
fn layout_model(request: &toolbox_tests::scripted_llm::RecordedRequest) -> Scripted {
    let messages = request.body["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    if last["role"] != "tool" {
        return Scripted::call(
            "p1",
            "plan__set",
            json!({"goal": LAYOUT_GOAL, "steps": LAYOUT_STEPS}),
        );
    }
    match last["tool_call_id"].as_str().unwrap_or_default() {
        "p1" => Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        "r1" => Scripted::calls(vec![
            (
                "w1",
                "file_manager__write",
                json!({"path": "output/first.txt", "content": "first\n"}),
            ),
            (
                "w2",
                "file_manager__write",
                json!({"path": "output/second.txt", "content": "second\n"}),
            ),
        ]),
        _ => Scripted::text(LAYOUT_TABLE),
    }
}

/// A box of the layout probe: (left, top, right, bottom, width, height).
fn rect(value: &Value) -> (f64, f64, f64, f64, f64, f64) {
    let n = |k: &str| {
        value[k]
            .as_f64()
            .unwrap_or_else(|| panic!("no {k} in {value}"))
    };
    (
        n("left"),
        n("top"),
        n("right"),
        n("bottom"),
        n("width"),
        n("height"),
    )
}

/// The open question at this moment: its whole card and its live buttons lie inside the
/// live log's box and inside the window, with nothing scrolled by hand (the page itself not
/// at all, and not sideways).
fn question_in_sight(probe: &Value, decisions: &[&str], what: &str) {
    let (vw, vh) = (
        probe["viewport"][0].as_f64().unwrap(),
        probe["viewport"][1].as_f64().unwrap(),
    );
    let scroll = &probe["scroll"];
    assert!(
        scroll[0].as_f64() <= scroll[1].as_f64(),
        "{what}: the page scrolls sideways: {probe:#}"
    );
    assert_eq!(
        scroll[2].as_f64(),
        Some(0.0),
        "{what}: the page was scrolled: {probe:#}"
    );
    let (_, log_top, _, log_bottom, _, _) = rect(&probe["log"]);
    let (card_left, card_top, card_right, card_bottom, _, _) = rect(&probe["card"]);
    assert!(
        card_top >= log_top - 1.0 && card_bottom <= log_bottom + 1.0,
        "{what}: the question's card is not all in the log's box: {probe:#}"
    );
    assert!(
        card_left >= 0.0 && card_right <= vw && card_top >= 0.0 && card_bottom <= vh,
        "{what}: the question's card is not all in the window: {probe:#}"
    );
    let buttons = probe["buttons"].as_array().unwrap();
    let shown: Vec<&str> = buttons
        .iter()
        .map(|b| b["decision"].as_str().unwrap())
        .collect();
    assert_eq!(shown, decisions, "{what}: {probe:#}");
    for button in buttons {
        assert_eq!(button["enabled"], json!(true), "{what}: {probe:#}");
        let (left, top, right, bottom, _, _) = rect(&button["rect"]);
        assert!(
            top >= log_top
                && bottom <= log_bottom
                && left >= 0.0
                && right <= vw
                && top >= 0.0
                && bottom <= vh,
            "{what}: button {} is out of sight: {probe:#}",
            button["decision"]
        );
    }
}

/// Issue 38, point 6: the console as a user at 1280x900 and at 420x800 saw it.
#[test]
fn the_console_gives_the_log_and_the_question_room_at_both_widths() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start_with(layout_model);
    let server = serve(ws.path(), Some(&llm), &["--mode", "auto"]);
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("layout", &server.url, shots.path(), &[]);
    let log = server.stderr.lock().unwrap().clone();
    // TOOLBOX_CONSOLE_LAYOUT_SHOTS=DIR keeps the screenshots of both widths, to look at,
    // and the measurements (report.json).
    if let Ok(dir) = std::env::var("TOOLBOX_CONSOLE_LAYOUT_SHOTS") {
        for entry in std::fs::read_dir(shots.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), Path::new(&dir).join(entry.file_name())).unwrap();
        }
        std::fs::write(Path::new(&dir).join("report.json"), format!("{report:#}")).unwrap();
    }
    assert_eq!(
        code,
        0,
        "the browser script failed (screenshots are in {}):\n{report:#}\nserver:\n{log}",
        shots.keep().display()
    );

    for (width, height) in [("wide", (1280.0, 900.0)), ("narrow", (420.0, 800.0))] {
        let r = &report[width];
        let fail = |what: &str| format!("{width}: {what}\n{r:#}");
        let open = &r["review_open"];
        assert_eq!(
            open["viewport"],
            json!([height.0 as u64, height.1 as u64]),
            "{}",
            fail("size")
        );

        // 1 and 2: the log has room, the plan panel has room, the question is in sight.
        let (_, _, log_right, _, log_width, log_height) = rect(&open["log"]);
        let (plan_left, plan_top, _, plan_bottom, plan_width, plan_height) = rect(&open["plan"]);
        let (_, _, _, _, main_width, _) = rect(&open["main"]);
        let (_, log_top, _, _, _, _) = rect(&open["log"]);
        if width == "wide" {
            assert!(
                log_height >= 0.65 * height.1,
                "{}",
                fail("the log is a strip")
            );
            assert!(log_width >= 550.0, "{}", fail("the log is narrow"));
            // The plan beside the log, as a column of its own.
            assert!(
                plan_left >= log_right && plan_top < log_top + log_height,
                "{}",
                fail("the plan panel is not beside the log")
            );
            assert!(
                (220.0..=420.0).contains(&plan_width) && plan_height >= 300.0,
                "{}",
                fail("the plan panel's size")
            );
        } else {
            // The plan across the page's width, above the log, folded to its summary.
            assert!(
                plan_width >= main_width - 30.0,
                "{}",
                fail("the plan panel is not full width")
            );
            assert!(
                plan_height <= 110.0 && plan_bottom <= log_top,
                "{}",
                fail("the plan panel pushes the log down")
            );
            assert!(
                log_height >= 0.45 * height.1,
                "{}",
                fail("the log is a strip")
            );
        }
        question_in_sight(open, &["approve", "reject"], &format!("{width} review"));
        question_in_sight(
            &r["first_open"],
            &["approve", "deny", "approve_for_session"],
            &format!("{width} first write"),
        );
        question_in_sight(
            &r["second_open"],
            &["approve", "deny", "approve_for_session"],
            &format!("{width} second write"),
        );

        // 3: the second call of the reply waits to be asked; it is not running.
        assert_eq!(
            r["w1_status"][0],
            json!("waiting for approval"),
            "{}",
            fail("w1")
        );
        assert_eq!(
            r["w2_status"][0],
            json!("waiting to be asked"),
            "{}",
            fail("w2 queued")
        );
        let class = r["w2_status"][1].as_str().unwrap_or_default();
        assert!(
            class.contains("queued") && !class.contains("running"),
            "{}",
            fail("w2's badge")
        );
        assert_eq!(
            r["w2_status_asked"][0],
            json!("waiting for approval"),
            "{}",
            fail("w2 asked")
        );
        assert_eq!(
            r["statuses_after"][0][0],
            json!("done"),
            "{}",
            fail("w1 done")
        );
        assert_eq!(
            r["statuses_after"][1][0],
            json!("done"),
            "{}",
            fail("w2 done")
        );

        // 4: the answered review: the decision and the feedback, read-only, no empty box.
        assert_eq!(
            r["review_textareas"],
            json!(0),
            "{}",
            fail("a feedback box")
        );
        assert!(
            text(r, "review_answer").starts_with("Approved"),
            "{}",
            fail("the decision")
        );
        assert!(
            text(r, "review_card").contains("Looks right, ship it."),
            "{}",
            fail("the feedback")
        );

        // 5: the plan's review state in words, part by part.
        assert_eq!(
            open["plan_labels"],
            json!(["not yet reviewed", "waiting for your review"]),
            "{}",
            fail("the labels while asked")
        );
        let summary = text(open, "plan_summary");
        assert!(
            summary.contains("Goal: not yet reviewed")
                && summary.contains("Checklist: waiting for your review"),
            "{}",
            fail("the summary while asked")
        );
        let after = &r["first_open"];
        assert_eq!(
            after["plan_labels"],
            json!(["not yet reviewed", "approved"]),
            "{}",
            fail("the labels once approved")
        );
        let summary = text(after, "plan_summary");
        assert!(
            summary.contains("Goal: not yet reviewed") && summary.contains("Checklist: approved"),
            "{}",
            fail("the summary once approved")
        );
        assert!(
            !text(after, "plan_text").contains("[draft]"),
            "{}",
            fail("the plan's raw review state")
        );
        assert!(
            text(after, "plan_text").contains(LAYOUT_GOAL),
            "{}",
            fail("the goal")
        );

        // 6: a Markdown table is a table, its text as text.
        let t = &r["table"];
        assert_eq!(t["tables"], json!(1), "{}", fail("no table"));
        assert_eq!(t["head"], json!([["Step", "Status", "Notes"]]));
        assert_eq!(
            t["body"],
            json!([
                [
                    "Write first.txt",
                    "done",
                    "<script>window.__pwned = 3</script>"
                ],
                ["Read it back", "pending", "a | pipe"]
            ]),
            "{}",
            fail("the cells")
        );
        assert_eq!(
            t["align"],
            json!(["align-left", "align-center", "align-right"])
        );
        assert_eq!(t["code"], json!(["first.txt"]));
        assert_eq!(t["strong"], json!(["done"]));
        assert_eq!(t["scripts"], json!(0), "{}", fail("a script element"));
        assert_eq!(t["pwned"], Value::Null, "{}", fail("the cell's script ran"));
        assert_eq!(t["pipes"], json!(false), "{}", fail("raw pipes"));
        assert!(
            t["scroll"][0].as_f64() <= t["scroll"][1].as_f64(),
            "{}",
            fail("the table scrolls the page sideways")
        );
    }
    // What the clicks did: each session wrote its two files.
    for sid in ["layout-wide", "layout-narrow"] {
        for (name, content) in [("first.txt", "first\n"), ("second.txt", "second\n")] {
            let path = ws
                .path()
                .join(".toolbox/sessions")
                .join(sid)
                .join("output")
                .join(name);
            assert_eq!(
                std::fs::read_to_string(&path).ok().as_deref(),
                Some(content),
                "{}",
                path.display()
            );
        }
    }
    assert_eq!(report["console"], json!([]), "browser console errors");
}

#[test]
fn the_console_shows_a_calls_progress() {
    let ws = tempfile::tempdir().unwrap();
    let mut rows = String::new();
    for i in 0..20_000 {
        rows.push_str(&format!("{{\"id\": {i}, \"name\": \"row {i}\"}}\n"));
    }
    std::fs::write(ws.path().join("rows.jsonl"), &rows).unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call(
            "v1",
            "data__validate",
            json!({"path": "rows.jsonl", "unique": ["id"]}),
        ),
        Scripted::text("All 20,000 rows are valid."),
    ]);
    // A report every time the reporter looks at the clock: the page has some to show
    // however fast the machine is.
    let server = serve_with_env(
        ws.path(),
        Some(&llm),
        &["--mode", "auto"],
        &[("TOOLBOX_DATA_PROGRESS_MS", "0")],
    );
    let shots = tempfile::tempdir().unwrap();
    let (code, report) = browser("progress", &server.url, shots.path(), &[]);
    let log = server.stderr.lock().unwrap().clone();
    assert_eq!(
        code,
        0,
        "the browser script failed (a screenshot is in {}):\n{report:#}\nserver:\n{log}",
        shots.keep().display()
    );
    assert_eq!(text(&report, "tool_status"), "done", "{report:#}");
    // The card keeps the last report: the whole file, in words and as a full bar.
    let said = text(&report, "progress_text");
    assert!(said.starts_with("20,000 rows, "), "{report:#}");
    assert!(said.ends_with("(100%)"), "{report:#}");
    assert_eq!(report["progress_visible"], json!(true), "{report:#}");
    assert_eq!(report["bar_visible"], json!(true), "{report:#}");
    let size = rows.len() as f64;
    assert_eq!(report["bar_value"].as_f64(), Some(size), "{report:#}");
    assert_eq!(report["bar_max"].as_f64(), Some(size), "{report:#}");
    assert!(
        report["console"].as_array().unwrap().is_empty(),
        "{report:#}"
    );
}
