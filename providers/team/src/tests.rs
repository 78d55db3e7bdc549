use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use toolbox_core::ToolRisk;
use toolbox_host::Workspace;

use super::*;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn ctx(root: &Path, config: Value) -> ToolContext {
    let mut ctx = ToolContext::new(Workspace::new(root).unwrap(), "s1", "c1", LIST_AGENTS);
    ctx.config = Arc::new(config);
    ctx
}

#[test]
fn the_two_tools_are_declared_and_call_agent_is_intercepted() {
    let tools = TeamProvider::default().list_tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, [LIST_AGENTS, CALL_AGENT]);
    for t in &tools {
        assert_eq!(t.risk, ToolRisk::Read);
        assert_eq!(t.toolsets, [TOOLSET]);
        assert!(t.aliases.is_empty());
    }
    assert!(!tools[0].intercepted);
    assert!(tools[1].intercepted);
    assert_eq!(tools[0].input_schema["properties"], json!({}));
    assert_eq!(tools[1].input_schema["required"], json!(["agent", "task"]));
    assert_eq!(tools[1].input_schema["additionalProperties"], json!(false));
}

#[tokio::test]
async fn list_agents_shows_the_agents_and_the_skipped_files() {
    let ws = tempfile::tempdir().unwrap();
    write(
        &ws.path().join(".toolbox/agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews changes.\ntoolsets: [files]\nmodel: m1\n\
         max_steps: 12\n---\nReview.\n",
    );
    write(
        &ws.path().join(".toolbox/agents/bad.md"),
        "---\nname: bad\ndescription: d\ntoolsets: []\ncolour: red\n---\nx\n",
    );
    let team = tempfile::tempdir().unwrap();
    write(
        &team.path().join("writer.md"),
        "---\nname: writer\ndescription: Writes.\ntoolsets: []\n---\nWrite.\n",
    );
    let config = json!({"agents": {"dirs": [team.path().to_str().unwrap()]}});
    let out = TeamProvider::default()
        .call_tool(LIST_AGENTS, json!({}), &ctx(ws.path(), config))
        .await
        .unwrap();
    // The model reads the list as JSON text.
    let out: Value = serde_json::from_str(&out.text).unwrap();
    let writer_source = format!("{}/writer.md", team.path().display());
    assert_eq!(
        out,
        json!({
            "agents": [
                {"name": "default",
                 "description": "The built-in agent: every tool the permission mode allows.",
                 "toolsets": "all", "source": "built-in"},
                {"name": "reviewer", "description": "Reviews changes.", "toolsets": ["files"],
                 "model": "m1", "max_steps": 12, "source": ".toolbox/agents/reviewer.md"},
                {"name": "writer", "description": "Writes.", "toolsets": [],
                 "source": writer_source},
            ],
            "skipped": [
                {"file": ".toolbox/agents/bad.md",
                 "reason": "unknown key `colour` (an agent file has only name, description, \
                            toolsets, model, max_steps, vocabulary)"},
            ],
        })
    );
}

#[tokio::test]
async fn list_agents_takes_no_arguments_and_call_agent_needs_the_runtime() {
    let ws = tempfile::tempdir().unwrap();
    let provider = TeamProvider::default();
    let c = ctx(ws.path(), Value::Null);
    let out = provider
        .call_tool(LIST_AGENTS, Value::Null, &c)
        .await
        .unwrap();
    let out: Value = serde_json::from_str(&out.text).unwrap();
    assert_eq!(out["agents"][0]["name"], "default");
    assert!(out.get("skipped").is_none());
    let e = provider
        .call_tool(LIST_AGENTS, json!({"verbose": true}), &c)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("verbose"), "{e}");
    let e = provider
        .call_tool(CALL_AGENT, json!({"agent": "default", "task": "x"}), &c)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("call_agent must be intercepted by the agent runtime"),
        "{e}"
    );
    let e = provider.call_tool("nope", json!({}), &c).await.unwrap_err();
    assert_eq!(e.to_string(), "team has no tool named nope");
}
