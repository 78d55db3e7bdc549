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

/// A PUT with a chunked body (no Content-Length), as a client streaming a file of unknown
/// size sends it; the status line's code.
fn put_chunked(server: &Server, path: &str, body: &[u8]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.host()).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let writer = {
        let mut out = stream.try_clone().unwrap();
        let body = body.to_vec();
        std::thread::spawn(move || {
            for piece in body.chunks(64 * 1024) {
                if out
                    .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .is_err()
                    || out.write_all(piece).is_err()
                    || out.write_all(b"\r\n").is_err()
                {
                    return;
                }
            }
            let _ = out.write_all(b"0\r\n\r\n");
        })
    };
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let _ = writer.join();
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, answer)
}

/// Every name in `dir`, recursively, as paths relative to it (links included, not followed).
fn everything_in(dir: &std::path::Path) -> Vec<String> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            for inner in everything_in(&entry.path()) {
                out.push(format!("{name}/{inner}"));
            }
        } else {
            out.push(name);
        }
    }
    out.sort();
    out
}

/// The upload's rules (docs/server.md, "Inputs a front end hands over"): bounded whether the
/// size is declared or not, plain names only, never through a link, all or nothing.
#[test]
fn uploads_are_bounded_plain_and_never_go_through_a_link() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let cmd = serve_command(ws.path(), None, &["--max-upload-mb", "1"]);
    let server = Server::spawn(cmd, ws.path());
    let input = ws.path().join(".toolbox/sessions/s1/input");
    let put = |path: &str, body: Vec<u8>| server.req("PUT", path).body(body).send();

    // Larger than the usual 4 MiB body limit is fine up to --max-upload-mb.
    let mib = vec![b'a'; 1024 * 1024];
    let ok = put("/api/sessions/s1/input/deep/er/one.bin", mib.clone());
    assert_eq!(ok.status, 201, "{}", ok.text());
    assert_eq!(std::fs::read(input.join("deep/er/one.bin")).unwrap(), mib);
    let again = put(
        "/api/sessions/s1/input/deep/er/one.bin",
        b"smaller".to_vec(),
    );
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["replaced"], true);

    // Over the limit: refused from the declared size, or stopped while streaming.
    let big = vec![b'b'; 1024 * 1024 + 1];
    put("/api/sessions/s1/input/big.bin", big.clone()).assert_error(413, "at most 1048576 bytes");
    let (code, answer) = put_chunked(&server, "/api/sessions/s1/input/big2.bin", &big);
    assert_eq!(code, 413, "{answer}");
    // A chunked upload within the limit is whole.
    let (code, answer) = put_chunked(&server, "/api/sessions/s1/input/chunked.csv", b"a,b\n1,2\n");
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        std::fs::read_to_string(input.join("chunked.csv")).unwrap(),
        "a,b\n1,2\n"
    );

    // Paths: plain names only.
    for bad in [
        "/api/sessions/s1/input/a/../x",
        "/api/sessions/s1/input/a//x",
        "/api/sessions/s1/input/./x",
        "/api/sessions/s1/input/a/%2e%2e/x",
        "/api/sessions/s1/input/x%00y",
    ] {
        let r = put(bad, b"x".to_vec());
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    put("/api/sessions/..%2Fx/input/a", b"x".to_vec()).assert_error(400, "");

    // Links planted in input/ are refused, at the name and as a folder on the way.
    let target = outside.path().join("target.txt");
    std::fs::write(&target, "outside\n").unwrap();
    std::os::unix::fs::symlink(&target, input.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path(), input.join("linkdir")).unwrap();
    put("/api/sessions/s1/input/link.txt", b"x".to_vec()).assert_error(409, "symbolic link");
    put("/api/sessions/s1/input/linkdir/x.txt", b"x".to_vec()).assert_error(409, "symbolic link");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "outside\n");
    assert_eq!(everything_in(outside.path()), ["target.txt"]);

    // Nothing half-written is left behind, and the listing shows links as links.
    assert_eq!(
        everything_in(&input),
        ["chunked.csv", "deep/er/one.bin", "link.txt", "linkdir"]
    );
    let listed = server.get("/api/sessions/s1/input").json();
    assert_eq!(
        listed["files"],
        json!([
            {"path": "input/chunked.csv", "bytes": 8},
            {"path": "input/deep/er/one.bin", "bytes": 7},
            {"path": "input/link.txt", "link": true},
            {"path": "input/linkdir", "link": true},
        ])
    );
    assert_eq!(listed["real_path"], ".toolbox/sessions/s1/input");
    // A session with nothing uploaded lists nothing.
    let empty = server.get("/api/sessions/s2/input").json();
    assert_eq!(empty["files"], json!([]));
}
