//! The plan in `toolbox chat` on a real terminal: the checklist on stderr whenever it
//! changes (once: not again right before a review question that shows it), a review asked
//! even in mode full with y/n and a comment, the comment reaching the model word for word, a
//! second review approved, and a review the person declines reported as not reviewed, never
//! as rejected.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Terminal;
use serde_json::{json, Value};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

const LIMIT: Duration = Duration::from_secs(60);
const REVIEW: &str = "toolbox asks you to review";
const COMMENT: &str = "Comment for the model";
const FEEDBACK: &str = "Add a step that checks the file.";

fn chat_on_terminal(ws: &Path, llm: &ScriptedLlm, args: &str) -> Terminal {
    let base = llm.openai_base_url();
    Terminal::start(
        ws,
        &format!("chat {args}"),
        &[
            ("TOOLBOX_LLM_BASE_URL", base.as_str()),
            ("TOOLBOX_LLM_MODEL", "scripted-model"),
            ("TOOLBOX_LLM_API_KEY_ENV", "SCRIPTED_KEY"),
            ("SCRIPTED_KEY", "sk-scripted-plan"),
        ],
    )
}

#[test]
fn chat_shows_the_checklist_and_asks_for_a_review_with_a_comment() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write it"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::call("u1", "plan__update", json!({"add": ["Check it"]})),
        Scripted::call("r2", "plan__request_review", json!({"part": "plan"})),
        Scripted::text("planned"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode full plan-it");
    let screen = term.wait_for(REVIEW, 1, LIMIT);
    // The question shows the checklist.
    assert!(screen.contains("[ ] 1. Write it"), "{screen}");
    term.type_keys("n\n");
    term.wait_for(COMMENT, 1, LIMIT);
    term.type_keys(&format!("{FEEDBACK}\n"));
    term.wait_for(REVIEW, 2, LIMIT);
    term.type_keys("y\n");
    term.wait_for(COMMENT, 2, LIMIT);
    term.type_keys("\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("[ ] 2. Check it"), "{screen}");

    // The person's comment reached the model word for word, as r1's result.
    let requests = llm.requests();
    let r1 = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "r1")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .expect("r1's result");
    let envelope: Value = serde_json::from_str(&r1).unwrap();
    let result = envelope["result"].as_str().unwrap();
    assert!(
        result.contains("rejected") && result.contains(FEEDBACK),
        "{result}"
    );
    let plan: Value = serde_json::from_slice(
        &std::fs::read(
            ws.path()
                .join(".toolbox/sessions")
                .read_dir()
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .path()
                .join("plan.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(plan["plan_review"]["state"], "confirmed", "{plan}");
    assert_eq!(plan["plan_review"]["by"], "terminal", "{plan}");
}

/// The plan read from the session's `plan.json` (the only session of `ws`).
fn stored_plan(ws: &Path) -> Value {
    let session = ws
        .join(".toolbox/sessions")
        .read_dir()
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    serde_json::from_slice(&std::fs::read(session.join("plan.json")).unwrap()).unwrap()
}

/// The result the model got for call `id`, from the requests it was sent.
fn tool_result(llm: &ScriptedLlm, id: &str) -> String {
    llm.requests()
        .iter()
        .flat_map(|r| r.body["messages"].as_array().cloned().unwrap_or_default())
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// Issue 38, point 7: the checklist was printed three times before a review question (when
/// plan__set changed it, in plan__set's result line, and when the review made it pending),
/// then a fourth time in the question. The question shows it; nothing else repeats it, and
/// answering the review (a change of its state only) does not print it again.
#[test]
fn the_checklist_is_shown_once_before_a_review() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write it", "Test it"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::text("planned"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode full plan-it");
    let screen = term.wait_for(REVIEW, 1, LIMIT);
    for step in ["1. Write it", "2. Test it"] {
        assert_eq!(screen.matches(step).count(), 1, "{step}:\n{screen}");
    }
    let question = screen.find(REVIEW).unwrap();
    assert!(screen[question..].contains("[ ] 1. Write it"), "{screen}");
    // plan__set's own lines: its arguments, and its result without the checklist.
    assert!(
        screen.contains("→ plan__set steps: [Write it, Test it]"),
        "{screen}"
    );
    assert!(screen.contains("← plan__set done ("), "{screen}");
    term.type_keys("y\n");
    term.wait_for(COMMENT, 1, LIMIT);
    term.type_keys("\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert_eq!(screen.matches("1. Write it").count(), 1, "{screen}");
    assert!(
        screen.contains("The person approved the plan: it is confirmed."),
        "{screen}"
    );
    assert_eq!(stored_plan(ws.path())["plan_review"]["state"], "confirmed");
}

/// Issue 38, point 7: a person who does not answer a review (Enter at the question, or
/// Ctrl-D) was counted as rejecting it: the plan became a draft "rejected by terminal" and
/// the model was told the person rejected it. Declining is no answer: the plan stays pending,
/// nobody is recorded, the model is told nobody answered, and the screen says "declined".
/// Only `n` rejects.
#[test]
fn a_declined_review_is_not_reported_as_rejected() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write it"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::call("r2", "plan__request_review", json!({"part": "plan"})),
        Scripted::call("r3", "plan__request_review", json!({"part": "plan"})),
        Scripted::text("done"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode full plan-it");
    let screen = term.wait_for(REVIEW, 1, LIMIT);
    assert!(screen.contains("[D]ecline"), "{screen}");
    // Enter: declined.
    term.type_keys("\n");
    term.wait_for(REVIEW, 2, LIMIT);
    // Ctrl-D: declined too.
    term.type_keys("\x04");
    term.wait_for(REVIEW, 3, LIMIT);
    // n: rejected.
    term.type_keys("n\n");
    term.wait_for(COMMENT, 1, LIMIT);
    term.type_keys("\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    assert_eq!(screen.matches("→ declined").count(), 2, "{screen}");
    assert_eq!(screen.matches("→ rejected").count(), 1, "{screen}");
    assert!(!screen.contains("no terminal"), "{screen}");
    for declined in ["r1", "r2"] {
        let envelope: Value = serde_json::from_str(&tool_result(&llm, declined)).unwrap();
        let result = envelope["result"].as_str().unwrap();
        assert!(
            result.contains("Not reviewed: ") && result.contains("declined"),
            "{declined}: {result}"
        );
        assert!(
            !result.contains("rejected the plan"),
            "{declined}: {result}"
        );
        assert!(result.contains("stays pending"), "{declined}: {result}");
    }
    let envelope: Value = serde_json::from_str(&tool_result(&llm, "r3")).unwrap();
    assert!(
        envelope["result"]
            .as_str()
            .unwrap()
            .contains("The person rejected the plan"),
        "{envelope}"
    );
}

/// A declined review records no answer: the plan stays pending (a rejection makes it a
/// draft), and nobody is named as having answered.
#[test]
fn a_declined_review_leaves_the_plan_pending() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![
        Scripted::call("p1", "plan__set", json!({"steps": ["Write it"]})),
        Scripted::call("r1", "plan__request_review", json!({"part": "plan"})),
        Scripted::text("done"),
    ]);
    let mut term = chat_on_terminal(ws.path(), &llm, "--mode full plan-it");
    term.wait_for(REVIEW, 1, LIMIT);
    term.type_keys("\n");
    term.wait_for("→ declined", 1, Duration::from_secs(10));
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    let plan = stored_plan(ws.path());
    assert_eq!(plan["plan_review"]["state"], "pending", "{plan}");
    assert!(plan["plan_review"].get("by").is_none(), "{plan}");
}

/// `toolbox call` on a terminal (the same sink as chat had): a review shows the checklist
/// once, in its question; plan updates are not printed again on stderr, since the question
/// and the call's result both show the plan.
#[test]
fn toolbox_call_shows_the_checklist_once_before_a_review() {
    let ws = tempfile::tempdir().unwrap();
    let set = common::toolbox(ws.path())
        .args([
            "call",
            "plan__set",
            r#"{"goal": "Ship it", "steps": ["Step alpha", "Step beta"]}"#,
            "--session",
            "s1",
        ])
        .output()
        .unwrap();
    assert!(
        set.status.success(),
        "{}",
        String::from_utf8_lossy(&set.stderr)
    );
    let mut term = Terminal::start(
        ws.path(),
        r#"call plan__request_review '{"part": "plan"}' --session s1"#,
        &[],
    );
    let screen = term.wait_for(REVIEW, 1, LIMIT);
    assert_eq!(screen.matches("Step alpha").count(), 1, "{screen}");
    assert!(
        screen.contains("Plan (waiting for a person's review):"),
        "{screen}"
    );
    term.type_keys("y\n");
    term.wait_for(COMMENT, 1, LIMIT);
    term.type_keys("\n");
    let (code, screen) = term.finish(LIMIT);
    assert_eq!(code, Some(0), "{screen}");
    // Once more in the call's result, and nowhere else.
    assert_eq!(screen.matches("Step alpha").count(), 2, "{screen}");
    assert!(
        screen.contains("Plan (confirmed by terminal at "),
        "{screen}"
    );
}
