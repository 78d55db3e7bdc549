//! The team provider through the executor: `list_agents` on real agent files (a workspace's
//! `.toolbox/agents/` and the operator's `[agents] dirs`), and `call_agent`, which only an
//! agent runtime serves, refused by the executor.

use serde_json::{json, Value};
use toolbox_executor::{ErrorKind, PermissionMode};
use toolbox_tests::{assert_error, call, executor, executor_with, ok, write_file};

// Links every provider of the full bundle (team among them).
use toolbox as _;

#[tokio::test]
async fn list_agents_reads_the_workspace_and_the_operators_folders() {
    let shared = tempfile::tempdir().unwrap();
    write_file(
        shared.path(),
        "writer.md",
        "---\nname: writer\ndescription: Writes reports.\ntoolsets: [files]\n---\nWrite.\n",
    );
    let (dir, exec) = executor_with(
        PermissionMode::ReadOnly,
        &[("agents", json!({"dirs": [shared.path().to_str().unwrap()]}))],
    );
    write_file(
        dir.path(),
        ".toolbox/agents/analyst.md",
        "---\nname: analyst\ndescription: 分析数据\ntoolsets: [python, files]\nmax_steps: 40\n---\n\
         Analyse.\n",
    );
    write_file(dir.path(), ".toolbox/agents/oops.md", "no frontmatter\n");
    let out: Value = serde_json::from_str(&ok(&exec, "list_agents", json!({})).await).unwrap();
    let names: Vec<&str> = out["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["analyst", "default", "writer"]);
    assert_eq!(out["agents"][0]["description"], "分析数据");
    assert_eq!(out["agents"][0]["max_steps"], 40);
    assert_eq!(out["agents"][1]["toolsets"], "all");
    assert_eq!(out["skipped"][0]["file"], ".toolbox/agents/oops.md");
    assert!(out["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("must begin with YAML frontmatter"));
}

#[tokio::test]
async fn call_agent_is_refused_outside_a_runtime() {
    let (_d, exec) = executor(PermissionMode::Full);
    let info = call(
        &exec,
        "call_agent",
        json!({"agent": "default", "task": "say hi"}),
    )
    .await;
    assert_error(
        &info,
        ErrorKind::InvalidRequest,
        &["served by the agent runtime, which must intercept it"],
    );
}
