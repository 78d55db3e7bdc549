//! The plan in `toolbox chat` on a real terminal: the checklist on stderr whenever it
//! changes, a review asked even in mode full with y/n and a comment, the comment reaching
//! the model word for word, and a second review approved.

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
    // The checklist was printed when plan__set changed it, before the question.
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
