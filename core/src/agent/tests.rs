use super::*;

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
            vocabulary: None,
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
        ("---\nname: a\ndescription: d\ntoolsets: []\nmax-steps: 3\ntools: [x]\n---\nb", "unknown keys `max-steps`, `tools` (an agent file has only name, description, toolsets, model, max_steps, vocabulary)"),
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
    assert!(rules.keys.iter().all(|k| k.workspace.is_none()));
}

#[test]
fn call_agent_arguments_are_parsed_once_with_errors_naming_them() {
    assert_eq!(
        CallAgentArgs::parse(r#"{"agent": " reviewer ", "task": "look"}"#),
        Ok(CallAgentArgs {
            agent: "reviewer".into(),
            task: "look".into()
        })
    );
    let e = |raw: &str| CallAgentArgs::parse(raw).unwrap_err();
    assert_eq!(
        e(""),
        "call_agent requires agent: the name of an agent (see list_agents)"
    );
    assert_eq!(
        e(r#"{"agent": "a", "task": "  "}"#),
        "call_agent requires task: what the agent should do, in full"
    );
    assert_eq!(
        e("[1]"),
        "call_agent: arguments must be a JSON object with agent and task"
    );
    assert!(e("{").starts_with("call_agent: arguments are not valid JSON: "));
    let info = call_agent_info("team");
    assert_eq!(info.name, CALL_AGENT);
    assert!(info.intercepted);
}

#[test]
fn an_agent_file_may_name_its_vocabulary() {
    // The sidecar's example frontmatter, with the data agent's vocabulary.
    let agent = ok("---\nname: analyst\ndescription: Analyses data.\n\
         toolsets: [\"integrated_notebook\", \"web\", \"memory\"]\nvocabulary: data-agent\n---\nGo.\n");
    assert_eq!(agent.vocabulary, Some(crate::Vocabulary::DataAgent));
    assert_eq!(agent.summary()["vocabulary"], "data-agent");
    assert_eq!(
        agent.toolsets,
        Some(vec![
            "integrated_notebook".into(),
            "web".into(),
            "memory".into()
        ])
    );
    let err = AgentDef::parse(
        b"---\nname: a\ndescription: d\ntoolsets: []\nvocabulary: klingon\n---\nGo.\n",
        "t.md",
    )
    .unwrap_err();
    assert!(
        err.contains("`vocabulary`: vocabulary must be canonical or data-agent"),
        "{err}"
    );
}
