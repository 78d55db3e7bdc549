//! The data agent's front chain through `toolbox serve` (issue 41): a front end uploads the
//! input (`PUT /api/sessions/{sid}/input/{path}`), and a scripted model prompted in the
//! data agent's vocabulary runs the whole chain by the `data_agent_*` names in one turn,
//! while a person answers both reviews over HTTP. Everything the model reads names only
//! tools it was shown, and the events carry the name each call was made by.

mod common;
mod serve_common;

use serde_json::{json, Value};
use serve_common::{finished, serve_command, Server};
use toolbox_tests::scripted_llm::{Scripted, ScriptedLlm};

const CSV: &str = "question,answer,topic\n\
\"What is 2+2?\",4,maths\n\
\"Say \"\"hi\"\"\",\"hi,\nthere\",chat\n\
\"What is 2+2?\",four,maths\n";

fn script() -> Vec<Scripted> {
    vec![
        Scripted::call("load", "data_agent_load_input_sources", json!({})),
        Scripted::call(
            "goal",
            "data_agent_prepare_generation_goal",
            json!({"goal": "Chat training data from the uploaded questions."}),
        ),
        Scripted::call(
            "confirm_goal",
            "data_agent_confirm_generation_goal",
            json!({}),
        ),
        Scripted::call(
            "plan",
            "data_agent_prepare_generation_plan",
            json!({"steps": ["Validate the records", "Export training JSONL"]}),
        ),
        Scripted::call(
            "confirm_plan",
            "data_agent_confirm_generation_plan",
            json!({}),
        ),
        Scripted::call(
            "validate",
            "data_agent_validate_dataset_records",
            json!({"path": "input/qa.csv", "required_fields": ["question", "answer"], "unique_fields": ["question"]}),
        ),
        Scripted::call(
            "export",
            "data_agent_export_training_jsonl",
            json!({"path": "input/qa.csv", "output": "output/train.jsonl", "user_field": "question",
                   "assistant_field": "answer", "system_prompt": "Answer briefly.", "dedupe": true}),
        ),
        Scripted::call(
            "update",
            "data_agent_update_generation_plan",
            json!({"steps": [{"id": "1", "status": "completed"}, {"id": "2", "status": "completed"}]}),
        ),
        Scripted::call("show", "data_agent_show_generation_plan", json!({})),
        Scripted::call(
            "write",
            "write_file",
            json!({"path": "output/notes.md", "content": "done\n"}),
        ),
        Scripted::text("The training data is in output/train.jsonl."),
    ]
}

#[test]
fn a_front_end_uploads_and_a_data_agent_runs_its_front_chain_with_a_person_reviewing() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(script());
    let cmd = serve_command(
        ws.path(),
        Some(&llm),
        &["--mode", "auto", "--vocabulary", "data-agent"],
    );
    let server = Server::spawn(cmd, ws.path());

    // The front end hands the input over, and lists it.
    let put = server
        .req("PUT", "/api/sessions/s1/input/qa.csv")
        .body(CSV.as_bytes().to_vec())
        .send();
    assert_eq!(put.status, 201, "{}", put.text());
    let landed = put.json();
    assert_eq!(landed["path"], "input/qa.csv");
    assert_eq!(landed["real_path"], ".toolbox/sessions/s1/input/qa.csv");
    assert_eq!(landed["bytes"], CSV.len());
    let listed = server.get("/api/sessions/s1/input").json();
    assert_eq!(
        listed["files"],
        json!([{"path": "input/qa.csv", "bytes": CSV.len()}])
    );

    let events = server.events("s1", None);
    server.start_turn(
        "s1",
        json!({"message": "make training data from my upload"}),
    );

    // Both reviews reach the person, who approves each; the model confirms nothing itself.
    let mut seen = vec![];
    for (call, part) in [("confirm_goal", "goal"), ("confirm_plan", "plan")] {
        seen.extend(events.until("review_request"));
        let asked = &seen.last().unwrap().data;
        assert_eq!(asked["call_id"], call, "{asked}");
        assert_eq!(
            asked["tool"],
            format!("data_agent_confirm_generation_{part}")
        );
        let preview = asked["preview"].to_string();
        assert!(preview.contains(&format!("Review the {part}")), "{preview}");
        let yes = server.post(
            &format!("/api/tool-approval/s1/{call}"),
            &json!({"decision": "approve"}),
        );
        assert_eq!(yes.status, 200, "{}", yes.text());
    }
    // The writes ask for approval: the export by its own name, the write under the name the
    // model used, beside the canonical one.
    for (call, tool, called_as) in [
        ("export", "data_agent_export_training_jsonl", Value::Null),
        ("write", "file_manager__write", json!("write_file")),
    ] {
        seen.extend(events.until("tool_approval_request"));
        let asked = &seen.last().unwrap().data;
        assert_eq!(asked["call_id"], call, "{asked}");
        assert_eq!(asked["tool"], tool, "{asked}");
        assert_eq!(asked["called_as"], called_as, "{asked}");
        let yes = server.post(
            &format!("/api/tool-approval/s1/{call}"),
            &json!({"decision": "approve"}),
        );
        assert_eq!(yes.status, 200, "{}", yes.text());
    }
    let rest = events.until("turn_finished");
    let all: Vec<_> = seen.iter().chain(rest.iter()).cloned().collect();

    let result = |id: &str| -> String {
        let done = finished(&all, id);
        assert_eq!(done["status"], "done", "{id}: {done}");
        done["result_preview"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        result("load").contains("input/qa.csv"),
        "{}",
        result("load")
    );
    assert!(result("confirm_goal").contains("approved the goal"));
    assert!(result("confirm_plan").contains("approved the plan"));
    let validated = result("validate");
    assert!(
        validated.contains("\"invalid\": 1"),
        "the repeated question: {validated}"
    );
    assert!(
        result("export").contains("\"rows_out\": 2"),
        "{}",
        result("export")
    );
    let shown = result("show");
    assert!(shown.contains("[x] 1. Validate the records"), "{shown}");
    assert!(shown.contains("confirmed by http"), "{shown}");

    // The export is chat-messages JSONL, quotes and newlines intact, the repeat dropped.
    let out = ws.path().join(".toolbox/sessions/s1/output/train.jsonl");
    let lines: Vec<Value> = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[1]["messages"],
        json!([
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Say \"hi\""},
            {"role": "assistant", "content": "hi,\nthere"},
        ])
    );
    // The plan file records the person's confirmations, sealed by toolbox.
    let plan: Value = serde_json::from_slice(
        &std::fs::read(ws.path().join(".toolbox/sessions/s1/plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["goal_review"]["state"], "confirmed");
    assert_eq!(plan["plan_review"]["state"], "confirmed");

    // The model was shown the data agent's family, and none of the tools it replaces.
    let requests = llm.requests();
    let shown: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in [
        "data_agent_load_input_sources",
        "data_agent_prepare_generation_goal",
        "data_agent_confirm_generation_plan",
        "data_agent_show_generation_plan",
        "data_agent_export_planning_eval_csv",
        "write_file",
        "python_exec",
    ] {
        assert!(shown.contains(&name.to_string()), "{name}: {shown:?}");
    }
    for name in [
        "plan__set",
        "plan__request_review",
        "plan__show",
        "file_manager__write",
    ] {
        assert!(!shown.contains(&name.to_string()), "{name}: {shown:?}");
    }
    // Its system prompt names the tools in its words.
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for word in [
        "`bash`",
        "`python_exec`",
        "`write_file`",
        "`python_package`",
    ] {
        assert!(system.contains(word), "{word}: {system}");
    }
    for canonical in [
        "`shell`",
        "run_python_code",
        "file_manager__write",
        "kernel_install",
    ] {
        assert!(!system.contains(canonical), "{canonical}: {system}");
    }
}
