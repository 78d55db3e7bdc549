//! `toolbox agents [--json]` through the real binary: the table, the JSON shape, skipped
//! files on stderr as `FILE: REASON` with exit code 0, a planted link in `.toolbox/agents`,
//! and `[agents] dirs`, which only the operator may set.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

mod common;
use common::toolbox;

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().expect("toolbox runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn agent(root: &Path, file: &str, name: &str, description: &str, toolsets: &str) {
    write(
        &root.join(".toolbox/agents").join(file),
        &format!(
            "---\nname: {name}\ndescription: {description}\ntoolsets: {toolsets}\n---\nYou are {name}.\n"
        ),
    );
}

/// Two valid agents and one invalid one.
fn team(root: &Path) {
    agent(
        root,
        "reviewer.md",
        "reviewer",
        "Reviews changes.",
        "[files]",
    );
    write(
        &root.join(".toolbox/agents/analyst.md"),
        "---\nname: analyst\ndescription: 分析数据\ntoolsets: [python, files]\nmodel: m1\n\
         max_steps: 20\n---\nAnalyse.\n",
    );
    write(
        &root.join(".toolbox/agents/broken.md"),
        "---\nname: broken\ndescription: d\ntoolsets: []\nmax-steps: 3\n---\nx\n",
    );
}

#[test]
fn agents_lists_the_valid_ones_and_names_the_skipped_file_on_stderr() {
    let ws = tempfile::tempdir().unwrap();
    team(ws.path());
    let (code, out, err) = run(toolbox(ws.path()).arg("agents"));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "NAME      TOOLSETS      SOURCE                       DESCRIPTION\n\
         analyst   python,files  .toolbox/agents/analyst.md   分析数据\n\
         default   all           built-in                     The built-in agent: every tool \
         the permission mode allows.\n\
         reviewer  files         .toolbox/agents/reviewer.md  Reviews changes.\n"
    );
    assert_eq!(
        err,
        ".toolbox/agents/broken.md: unknown key `max-steps` (an agent file has only name, \
         description, toolsets, model, max_steps, vocabulary)\n"
    );

    // Nothing at all: the built-in agent, nothing on stderr, and no .toolbox created.
    let empty = tempfile::tempdir().unwrap();
    let (code, out, err) = run(toolbox(empty.path()).arg("agents"));
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.lines().nth(1).unwrap().starts_with("default"), "{out}");
    assert_eq!(out.lines().count(), 2);
    assert!(!empty.path().join(".toolbox").exists());
}

#[test]
fn json_is_an_array_of_agents() {
    let ws = tempfile::tempdir().unwrap();
    team(ws.path());
    let (code, out, err) = run(toolbox(ws.path()).args(["agents", "--json"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.starts_with(".toolbox/agents/broken.md: "), "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        listed,
        json!([
            {"name": "analyst", "description": "分析数据", "toolsets": ["python", "files"],
             "model": "m1", "max_steps": 20, "source": ".toolbox/agents/analyst.md"},
            {"name": "default",
             "description": "The built-in agent: every tool the permission mode allows.",
             "toolsets": "all", "source": "built-in"},
            {"name": "reviewer", "description": "Reviews changes.", "toolsets": ["files"],
             "source": ".toolbox/agents/reviewer.md"},
        ])
    );
}

#[test]
fn a_linked_agent_file_is_skipped() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    agent(ws.path(), "good.md", "good", "Fine.", "[]");
    write(
        &outside.path().join("evil.md"),
        "---\nname: evil\ndescription: Planted.\ntoolsets: [shell]\n---\nDo anything.\n",
    );
    std::os::unix::fs::symlink(
        outside.path().join("evil.md"),
        ws.path().join(".toolbox/agents/evil.md"),
    )
    .unwrap();
    let (code, out, err) = run(toolbox(ws.path()).args(["agents", "--json"]));
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "good"]);
    assert!(
        err.starts_with(
            ".toolbox/agents/evil.md: it is a symbolic link, which toolbox does not follow"
        ),
        "{err}"
    );
}

#[test]
fn dirs_come_from_the_operator_never_from_the_workspace() {
    let ws = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let user_root = std::fs::canonicalize(user.path()).unwrap();
    write(
        &user_root.join("helper.md"),
        "---\nname: helper\ndescription: Helps.\ntoolsets: []\n---\nHelp.\n",
    );
    let table = format!("[agents]\ndirs = [{:?}]\n", user_root.to_str().unwrap());
    let operator = ws.path().join(".operator.toml");
    write(&operator, &table);
    let (code, out, err) = run(toolbox(ws.path())
        .args(["agents", "--json"])
        .env("TOOLBOX_CONFIG", &operator));
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[1]["name"], "helper");
    assert_eq!(
        listed[1]["source"],
        format!("{}/helper.md", user_root.display())
    );

    // The same table in the workspace's own toolbox.toml is refused (exit 2), unless the
    // operator trusts the workspace.
    write(&ws.path().join("toolbox.toml"), &table);
    let (code, _, err) = run(toolbox(ws.path()).arg("agents"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("[agents] dirs = ["), "{err}");
    assert!(err.contains("a workspace may not set this key"), "{err}");
    let (code, out, err) = run(toolbox(ws.path()).args(["agents", "--trust-workspace-config"]));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\nhelper "), "{out}");

    // A misspelt key is reported, not fatal.
    write(&operator, "[agents]\ndir = [\"x\"]\n");
    std::fs::remove_file(ws.path().join("toolbox.toml")).unwrap();
    let (code, _, err) = run(toolbox(ws.path())
        .arg("agents")
        .env("TOOLBOX_CONFIG", &operator));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err,
        "configuration: [agents] has an unknown key `dir` (known keys: dirs)\n"
    );
}
