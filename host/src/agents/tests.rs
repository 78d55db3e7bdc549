use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{json, Value};
use toolbox_core::agent::{AgentDef, AgentSet, MAX_FILES_PER_FOLDER};

use super::discover_agents;
use crate::Workspace;

fn agent_md(name: &str, description: &str, toolsets: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: {description}\ntoolsets: {toolsets}\n---\nYou are {name}.\n"
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn names(set: &AgentSet) -> Vec<&str> {
    set.agents().iter().map(|a| a.name.as_str()).collect()
}

fn reason<'a>(set: &'a AgentSet, file: &str) -> &'a str {
    &set.problems()
        .iter()
        .find(|p| p.file == file)
        .unwrap_or_else(|| panic!("{file} not skipped: {:?}", set.problems()))
        .reason
}

#[test]
fn discovery_reads_toolbox_agents_then_the_configured_folders_then_the_default() {
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path();
    let agents = root.join(".toolbox/agents");
    write(
        &agents.join("reviewer.md"),
        &agent_md("reviewer", "Reviews.", "[files]"),
    );
    write(
        &agents.join("b-analyst.md"),
        &agent_md("analyst", "Analyses.", "[python, files]"),
    );
    write(&agents.join("broken.md"), "---\nname: broken\n---\nb");
    write(&agents.join("notes.txt"), "not an agent");
    write(&agents.join(".draft.md"), "not read");
    std::fs::create_dir_all(agents.join("folder.md")).unwrap();
    // An operator folder outside the workspace (absolute), one inside it (relative), and
    // one that does not exist.
    let user = tempfile::tempdir().unwrap();
    write(
        &user.path().join("helper.md"),
        &agent_md("helper", "Helps.", "[]"),
    );
    write(
        &user.path().join("reviewer.md"),
        &agent_md("reviewer", "Again.", "[]"),
    );
    write(
        &root.join("team/planner.md"),
        &agent_md("planner", "Plans.", "[web]"),
    );
    let user_dir = user.path().to_str().unwrap();
    let config = json!({"agents": {"dirs": [user_dir, "team/", "missing"]}});
    let ws = Workspace::new(root).unwrap();
    let set = discover_agents(&ws, &config);

    assert_eq!(
        names(&set),
        ["analyst", "default", "helper", "planner", "reviewer"]
    );
    let analyst = set.get("analyst").unwrap();
    assert_eq!(analyst.source, ".toolbox/agents/b-analyst.md");
    assert_eq!(
        analyst.toolsets.as_deref(),
        Some(&["python".to_string(), "files".to_string()][..])
    );
    assert_eq!(
        set.get("helper").unwrap().source,
        format!("{user_dir}/helper.md")
    );
    assert_eq!(set.get("planner").unwrap().source, "team/planner.md");
    assert_eq!(set.get("reviewer").unwrap().description, "Reviews.");
    let default = set.get("default").unwrap();
    assert_eq!(*default, AgentDef::builtin_default());
    assert_eq!(
        (default.toolsets.as_ref(), default.source.as_str()),
        (None, "built-in")
    );
    assert!(set.get("nobody").is_none());

    assert!(reason(&set, ".toolbox/agents/broken.md").contains("`description` is missing"));
    assert!(reason(&set, ".toolbox/agents/folder.md").contains("is a folder"));
    assert_eq!(
        reason(&set, &format!("{user_dir}/reviewer.md")),
        "an agent named reviewer is already defined in .toolbox/agents/reviewer.md; this file \
         is ignored"
    );
    assert_eq!(
        reason(&set, "missing"),
        "[agents] dirs names \"missing\": the folder does not exist in the workspace"
    );
    assert_eq!(set.problems().len(), 4, "{:?}", set.problems());

    let summary = set.summary();
    assert_eq!(summary["agents"].as_array().unwrap().len(), 5);
    assert_eq!(summary["agents"][1]["toolsets"], "all");
    assert_eq!(summary["skipped"].as_array().unwrap().len(), 4);
    assert_eq!(summary["skipped"][0]["file"], ".toolbox/agents/broken.md");
}

#[test]
fn the_default_agent_is_built_in_unless_a_file_defines_it() {
    let ws_dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(ws_dir.path()).unwrap();
    // No .toolbox at all: only the built-in agent, and nothing was created.
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(names(&set), ["default"]);
    assert!(set.problems().is_empty());
    assert!(!ws_dir.path().join(".toolbox").exists());
    assert_eq!(
        set.summary(),
        json!({"agents": [AgentDef::builtin_default().summary()]})
    );
    assert!(!AgentDef::builtin_default().prompt.is_empty());

    write(
        &ws_dir.path().join(".toolbox/agents/mine.md"),
        &agent_md("default", "My own default.", "[files]"),
    );
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(names(&set), ["default"]);
    let default = set.get("default").unwrap();
    assert_eq!(default.source, ".toolbox/agents/mine.md");
    assert_eq!(
        default.toolsets.as_deref(),
        Some(&["files".to_string()][..])
    );
    assert!(set.problems().is_empty(), "{:?}", set.problems());
}

#[test]
fn links_in_toolbox_are_not_followed() {
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path();
    let outside = tempfile::tempdir().unwrap();
    write(
        &outside.path().join("evil.md"),
        &agent_md("evil", "Planted.", "[shell]"),
    );
    write(
        &root.join("elsewhere/inside.md"),
        &agent_md("inside", "Linked.", "[]"),
    );
    write(
        &root.join(".toolbox/agents/good.md"),
        &agent_md("good", "Fine.", "[]"),
    );
    symlink(
        outside.path().join("evil.md"),
        root.join(".toolbox/agents/evil.md"),
    )
    .unwrap();
    // Even a link that stays inside the workspace is not followed in .toolbox/.
    symlink(
        root.join("elsewhere/inside.md"),
        root.join(".toolbox/agents/inside.md"),
    )
    .unwrap();
    let ws = Workspace::new(root).unwrap();
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(names(&set), ["default", "good"]);
    for file in [".toolbox/agents/evil.md", ".toolbox/agents/inside.md"] {
        assert!(reason(&set, file).contains("is a symbolic link, which toolbox does not follow"));
    }

    // A linked agents folder is skipped as a whole, with a reason.
    std::fs::remove_dir_all(root.join(".toolbox/agents")).unwrap();
    symlink(outside.path(), root.join(".toolbox/agents")).unwrap();
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(names(&set), ["default"]);
    assert!(
        reason(&set, ".toolbox/agents").contains("symbolic link"),
        "{:?}",
        set.problems()
    );

    // So is a linked .toolbox.
    std::fs::remove_dir_all(root.join(".toolbox")).unwrap();
    std::fs::create_dir_all(outside.path().join("tb/agents")).unwrap();
    symlink(outside.path().join("tb"), root.join(".toolbox")).unwrap();
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(names(&set), ["default"]);
    assert!(
        reason(&set, ".toolbox").contains("symbolic link"),
        "{:?}",
        set.problems()
    );

    // And an agents "folder" that is a file.
    std::fs::remove_file(root.join(".toolbox")).unwrap();
    write(&root.join(".toolbox/agents"), "a file");
    let set = discover_agents(&ws, &Value::Null);
    assert!(reason(&set, ".toolbox/agents").contains("not a folder"));
}

#[test]
fn links_in_configured_folders() {
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path();
    let outside = tempfile::tempdir().unwrap();
    write(
        &outside.path().join("shared.md"),
        &agent_md("shared", "Shared.", "[]"),
    );
    // A workspace-relative folder: a link leading out of it is not followed ...
    write(
        &root.join("team/local.md"),
        &agent_md("local", "Local.", "[]"),
    );
    symlink(outside.path().join("shared.md"), root.join("team/out.md")).unwrap();
    // ... nor is the folder itself when it is a link out of the workspace.
    symlink(outside.path(), root.join("linked-team")).unwrap();
    // An operator's absolute folder: links are followed (dotfiles managers link files in).
    let user = tempfile::tempdir().unwrap();
    symlink(
        outside.path().join("shared.md"),
        user.path().join("shared.md"),
    )
    .unwrap();
    let config =
        json!({"agents": {"dirs": ["team", "linked-team", user.path().to_str().unwrap()]}});
    let ws = Workspace::new(root).unwrap();
    let set = discover_agents(&ws, &config);
    assert_eq!(names(&set), ["default", "local", "shared"]);
    assert!(reason(&set, "team/out.md").contains("leads out of its folder"));
    assert!(
        reason(&set, "linked-team").contains("outside the workspace"),
        "{:?}",
        set.problems()
    );
    assert_eq!(set.problems().len(), 2, "{:?}", set.problems());
}

#[test]
fn a_bad_agents_table_is_a_problem_not_a_failure() {
    let ws_dir = tempfile::tempdir().unwrap();
    write(
        &ws_dir.path().join(".toolbox/agents/a.md"),
        &agent_md("a", "A.", "[]"),
    );
    let ws = Workspace::new(ws_dir.path()).unwrap();
    let set = discover_agents(&ws, &json!({"agents": {"dir": "x"}}));
    assert_eq!(names(&set), ["a", "default"]);
    assert_eq!(
        reason(&set, "configuration"),
        "[agents] has an unknown key `dir` (known keys: dirs)"
    );
}

#[test]
fn at_most_a_thousand_files_per_folder_are_read() {
    let ws_dir = tempfile::tempdir().unwrap();
    let dir = ws_dir.path().join(".toolbox/agents");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..=MAX_FILES_PER_FOLDER {
        std::fs::write(
            dir.join(format!("a{i:04}.md")),
            agent_md(&format!("a{i:04}"), "d", "[]"),
        )
        .unwrap();
    }
    let ws = Workspace::new(ws_dir.path()).unwrap();
    let set = discover_agents(&ws, &Value::Null);
    assert_eq!(set.agents().len(), MAX_FILES_PER_FOLDER + 1); // and the default
    assert!(set.get("a1000").is_none());
    assert!(reason(&set, ".toolbox/agents").contains("only the first 1000 .md files"));
}
