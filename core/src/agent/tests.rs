use super::*;
use std::os::unix::fs::symlink;

fn ok(text: &str) -> AgentDef {
    AgentDef::parse(text.as_bytes(), "t.md").unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn bad(text: &str) -> String {
    match AgentDef::parse(text.as_bytes(), "t.md") {
        Ok(agent) => panic!("{}: parsed as {agent:?}", &text[..text.len().min(200)]),
        Err(reason) => reason,
    }
}

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
fn agent_names_follow_the_rule() {
    for good in [
        "a",
        "0",
        "code-reviewer",
        "data_analyst",
        "x1",
        &"a".repeat(64),
    ] {
        assert_eq!(AgentName::parse(good).unwrap().as_str(), good);
    }
    let cases = [
        ("", "it is empty"),
        (&*"a".repeat(65), "longer than 64"),
        ("Reviewer", "upper-case"),
        ("-a", "starts with - or _"),
        ("_a", "starts with - or _"),
        ("a b", "other than a-z"),
        ("a/b", "other than a-z"),
        ("..", "other than a-z"),
        ("a\0b", "other than a-z"),
        ("审阅", "other than a-z"),
    ];
    for (raw, want) in cases {
        let e = AgentName::parse(raw).unwrap_err().to_string();
        assert!(e.contains(want), "{raw:?}: {e}");
        assert!(e.starts_with("invalid agent name \""), "{e}");
        assert!(e.contains("1-64 characters of a-z, 0-9, - and _"), "{e}");
    }
    // Shown escaped and shortened, so a hostile name cannot flood or forge a message.
    let e = AgentName::parse(&format!("a\nb{}", "c".repeat(500)))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with(r#"invalid agent name "a\nbccc"#), "{e}");
    assert!(e.contains("c…\": it is longer"), "{e}");
    assert!(e.len() < 300, "{e}");
    assert_eq!("x-1".parse::<AgentName>().unwrap().to_string(), "x-1");
}

#[test]
fn a_full_agent_file() {
    let agent = ok(
        "\u{feff}---\r\nname: reviewer\r\ndescription: >\r\n  Reviews changes\r\n  \
         for bugs.\r\ntoolsets: [files, shell, files]\r\nmodel: gpt-4.1-mini\r\nmax_steps: 30\r\n\
         ---\r\n\r\n# Role\r\n\r\nReview carefully.\r\n",
    );
    assert_eq!(
        agent,
        AgentDef {
            name: AgentName::parse("reviewer").unwrap(),
            description: "Reviews changes for bugs.".into(),
            toolsets: Some(vec!["files".into(), "shell".into()]),
            model: Some("gpt-4.1-mini".into()),
            max_steps: Some(30),
            prompt: "# Role\r\n\r\nReview carefully.".into(),
            source: "t.md".into(),
        }
    );
    assert_eq!(
        agent.summary(),
        json!({"name": "reviewer", "description": "Reviews changes for bugs.",
               "toolsets": ["files", "shell"], "model": "gpt-4.1-mini", "max_steps": 30,
               "source": "t.md"})
    );
    // The least an agent file needs; `[]` is no tools at all.
    let agent = ok("---\nname: writer\ndescription: Writes.\ntoolsets: []\n---\nWrite.\n");
    assert_eq!(agent.toolsets, Some(vec![]));
    assert_eq!((agent.model, agent.max_steps), (None, None));
    assert_eq!(
        AgentDef::builtin_default().summary()["toolsets"],
        json!("all")
    );
}

#[test]
fn every_rule_is_named() {
    let cases: &[(&str, &str)] = &[
        ("# Just Markdown\n", "must begin with YAML frontmatter"),
        ("", "must begin with YAML frontmatter"),
        ("---\nname: a\n", "no closing `---`"),
        ("---\n---\nbody", "the frontmatter is empty"),
        ("---\ndescription: d\ntoolsets: []\n---\nb", "`name` is missing"),
        ("---\nname: Bad\ndescription: d\ntoolsets: []\n---\nb", "`name`: invalid agent name \"Bad\": it has upper-case letters"),
        ("---\nname: a\ntoolsets: []\n---\nb", "`description` is missing"),
        ("---\nname: a\ndescription: ''\ntoolsets: []\n---\nb", "`description` is empty"),
        ("---\nname: a\ndescription: d\n---\nb", "`toolsets` is missing"),
        ("---\nname: a\ndescription: d\ntoolsets: files\n---\nb", "toolsets: invalid type: string \"files\", expected a list of toolset names"),
        ("---\nname: a\ndescription: d\ntoolsets:\n---\nb", "toolsets: invalid type: unit value"),
        ("---\nname: a\ndescription: d\ntoolsets: [\"a b\"]\n---\nb", "`toolsets` has \"a b\", which is not a toolset name"),
        ("---\nname: a\ndescription: d\ntoolsets: [[x]]\n---\nb", "toolsets[0]: invalid type: sequence, expected text"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: 0\n---\nb", "`max_steps` must be between 1 and 1000, got 0"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: 1001\n---\nb", "`max_steps` must be between 1 and 1000, got 1001"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: -3\n---\nb", "got -3"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: 99999999999999999999\n---\nb", "got 99999999999999999999"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: lots\n---\nb", "max_steps: invalid type: string \"lots\", expected a whole number from 1 to 1000 at line 5 column 12"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax_steps: 2.5\n---\nb", "max_steps: invalid type: floating point `2.5`"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmodel: ''\n---\nb", "`model` is empty"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmodel: \"a\\nb\"\n---\nb", "`model` must be one line"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax-steps: 3\ntools: [x]\n---\nb", "unknown keys `max-steps`, `tools` (an agent file has only name, description, toolsets, model, max_steps)"),
        ("---\nname: a\ndescription: d\ntoolsets: []\nprompt: x\n---\nb", "unknown key `prompt` (an agent"),
        ("---\nname: a\ndescription: d\ntoolsets: []\n---\n  \n", "the body is empty"),
        ("---\nname: a\nname: b\ndescription: d\ntoolsets: []\n---\nb", "`name` is given twice"),
        ("---\nname: a\ndescription: d\ntoolsets: []\ntoolsets: []\n---\nb", "`toolsets` is given twice"),
        ("---\n- a\n---\nb", "expected a YAML mapping"),
        ("---\nname: a\ndescription: \"open\n---\nb\n", "the frontmatter is not valid: found unexpected end of stream at line 4 column 1, while scanning a quoted scalar at line 3 column 14"),
    ];
    for (text, want) in cases {
        let e = bad(text);
        assert!(e.contains(want), "{text:?}: {e}");
    }
    // Every problem is reported at once.
    let e = bad("---\nmodel: m\nmax_steps: 0\n---\n");
    for want in [
        "`name` is missing",
        "`description` is missing",
        "`toolsets` is missing",
        "`max_steps` must be",
        "the body is empty",
    ] {
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn sizes_and_encodings_are_checked() {
    let big = format!(
        "{}{}",
        agent_md("a", "d", "[]"),
        "x".repeat(MAX_AGENT_FILE_BYTES as usize)
    );
    assert!(
        bad(&big).contains("more than 262144 bytes"),
        "{}",
        bad(&big)
    );
    let fm = format!(
        "---\nname: a\ndescription: d\ntoolsets: []\nmodel: {}\n---\nb",
        "m".repeat(MAX_FRONTMATTER_BYTES)
    );
    assert!(
        bad(&fm).contains("more than the 16384-byte limit"),
        "{}",
        bad(&fm)
    );
    let e = AgentDef::parse(b"---\nname: a\xff\n---\nb", "t.md").unwrap_err();
    assert_eq!(e, "the file is not UTF-8 text (invalid byte at offset 11)");
    let long = "说".repeat(1025);
    assert!(bad(&agent_md("a", &long, "[]")).contains("1025 characters, more than 1024"));
    assert_eq!(
        ok(&agent_md("a", &"说".repeat(1024), "[]"))
            .description
            .chars()
            .count(),
        1024
    );
    let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    let e = bad(&agent_md("a", "d", &format!("[{}]", many.join(", "))));
    assert!(e.contains("more than 64 toolsets"), "{e}");
}

#[test]
fn alias_bombs_are_bounded() {
    let mut yaml = String::from(
        "---\nname: a\ndescription: d\ntoolsets: []\nx0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let p = i - 1;
        yaml.push_str(&format!(
            "x{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    // Under unknown keys it is walked (within yaml_serde's limits) or refused, never built;
    // either way the file is refused.
    let e = bad(&format!("{yaml}---\nbody"));
    assert!(
        e.contains("unknown keys `x0`") || e.contains("repetition limit"),
        "{e}"
    );
    let nest = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let e = bad(&agent_md("a", "d", &nest));
    assert!(
        e.contains("toolsets") || e.contains("recursion limit"),
        "{e}"
    );
}

#[test]
fn the_agents_table_is_checked() {
    let c = AgentsConfig::from_config(&json!({"agents": {"dirs": ["/x", "y"]}})).unwrap();
    assert_eq!(c.dirs, ["/x", "y"]);
    assert_eq!(
        AgentsConfig::from_config(&Value::Null).unwrap(),
        AgentsConfig::default()
    );
    let e = AgentsConfig::from_config(&json!({"agents": {"dir": ["x"]}})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[agents] has an unknown key `dir` (known keys: dirs)"
    );
    let e = AgentsConfig::from_config(&json!({"agents": {"dirs": "x"}})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[agents] dirs must be a list of strings, got \"x\""
    );
    let e = AgentsConfig::from_config(&json!({"agents": {"dirs": [" "]}})).unwrap_err();
    assert!(e.to_string().contains("must be folder paths"), "{e}");
    // An untrusted workspace may set nothing in [agents].
    let rules = crate::trust::table_rules("agents").expect("[agents] declares its rules");
    assert!(rules.rules.is_empty());
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
    let set = AgentSet::discover(&ws, &config);

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
    let set = AgentSet::discover(&ws, &Value::Null);
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
    let set = AgentSet::discover(&ws, &Value::Null);
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
    let set = AgentSet::discover(&ws, &Value::Null);
    assert_eq!(names(&set), ["default", "good"]);
    for file in [".toolbox/agents/evil.md", ".toolbox/agents/inside.md"] {
        assert!(reason(&set, file).contains("is a symbolic link, which toolbox does not follow"));
    }

    // A linked agents folder is skipped as a whole, with a reason.
    std::fs::remove_dir_all(root.join(".toolbox/agents")).unwrap();
    symlink(outside.path(), root.join(".toolbox/agents")).unwrap();
    let set = AgentSet::discover(&ws, &Value::Null);
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
    let set = AgentSet::discover(&ws, &Value::Null);
    assert_eq!(names(&set), ["default"]);
    assert!(
        reason(&set, ".toolbox").contains("symbolic link"),
        "{:?}",
        set.problems()
    );

    // And an agents "folder" that is a file.
    std::fs::remove_file(root.join(".toolbox")).unwrap();
    write(&root.join(".toolbox/agents"), "a file");
    let set = AgentSet::discover(&ws, &Value::Null);
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
    let set = AgentSet::discover(&ws, &config);
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
    let set = AgentSet::discover(&ws, &json!({"agents": {"dir": "x"}}));
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
    let set = AgentSet::discover(&ws, &Value::Null);
    assert_eq!(set.agents().len(), MAX_FILES_PER_FOLDER + 1); // and the default
    assert!(set.get("a1000").is_none());
    assert!(reason(&set, ".toolbox/agents").contains("only the first 1000 .md files"));
}
