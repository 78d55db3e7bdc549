//! `toolbox schema --strict / --no-strict` through the real binary.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

fn schema(ws: &Path, args: &[&str]) -> Vec<Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws).arg("schema").args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("TOOLBOX_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.env("XDG_CONFIG_HOME", ws.join(".no-user-config"));
    let out = cmd.stdin(Stdio::null()).output().expect("toolbox runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn shell_cwd(tools: &[Value], parameters: impl Fn(&Value) -> &Value) -> (Value, bool) {
    let shell = tools
        .iter()
        .find(|t| t["name"] == "shell" || t["function"]["name"] == "shell")
        .expect("shell is listed");
    let p = parameters(shell);
    let required = p["required"].as_array().unwrap();
    (
        p["properties"]["cwd"]["type"].clone(),
        required.contains(&Value::from("cwd")),
    )
}

#[test]
fn strict_is_a_flag_and_the_responses_default() {
    let ws = tempfile::tempdir().unwrap();
    let nullable = (serde_json::json!(["string", "null"]), true);
    let plain = (Value::from("string"), false);

    let tools = schema(ws.path(), &["--format", "openai", "--strict"]);
    assert!(tools.iter().all(|t| t["function"]["strict"] == true));
    assert_eq!(
        shell_cwd(&tools, |t| &t["function"]["parameters"]),
        nullable
    );

    let tools = schema(ws.path(), &["--format", "openai"]);
    assert!(tools.iter().all(|t| t["function"].get("strict").is_none()));
    assert_eq!(shell_cwd(&tools, |t| &t["function"]["parameters"]), plain);

    let tools = schema(ws.path(), &["--format", "openai-responses"]);
    assert!(tools.iter().all(|t| t["strict"] == true));
    assert_eq!(shell_cwd(&tools, |t| &t["parameters"]), nullable);

    let tools = schema(ws.path(), &["--format", "openai-responses", "--no-strict"]);
    assert!(tools.iter().all(|t| t["strict"] == false));
    assert_eq!(shell_cwd(&tools, |t| &t["parameters"]), plain);

    // MCP's strict form is closed and nullable, but lists as required only what a tool
    // needs: a client's own strict conversion adds the rest, and a model may leave them out.
    let tools = schema(ws.path(), &["-f", "mcp", "--strict", "--toolsets", "shell"]);
    assert_eq!(
        shell_cwd(&tools, |t| &t["inputSchema"]),
        (nullable.0.clone(), false)
    );
    let tools = schema(ws.path(), &["-f", "anthropic", "--strict"]);
    assert!(tools.iter().all(|t| t["strict"] == true));
}

/// `toolbox run ARGS` in `ws` with no TOOLBOX_* of the caller; stdout as text.
fn toolbox_out(ws: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws).args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("TOOLBOX_") || key == "RUST_LOG" {
            cmd.env_remove(key);
        }
    }
    cmd.env("XDG_CONFIG_HOME", ws.join(".no-user-config"));
    let out = cmd.stdin(Stdio::null()).output().expect("toolbox runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn vocabulary_renames_schema_and_tools_listings_and_config_sets_its_default() {
    let ws = tempfile::tempdir().unwrap();
    let names = |tools: &[Value]| -> Vec<String> {
        tools
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let canonical = names(&schema(ws.path(), &["-f", "mcp", "--mode", "full"]));
    let worded = names(&schema(
        ws.path(),
        &["-f", "mcp", "--mode", "full", "--vocabulary", "data-agent"],
    ));
    assert!(canonical.contains(&"shell".to_string()));
    assert!(worded.contains(&"bash".to_string()) && !worded.contains(&"shell".to_string()));
    // The data agent's vocabulary adds its family (ten tools) and leaves out the two plan
    // tools the family covers.
    assert_eq!(canonical.len() + 8, worded.len());

    let rows: Vec<Value> = serde_json::from_str(&toolbox_out(
        ws.path(),
        &[
            "tools",
            "--json",
            "--mode",
            "full",
            "--vocabulary",
            "data-agent",
        ],
    ))
    .unwrap();
    let bash = rows.iter().find(|r| r["name"] == "bash").expect("bash row");
    assert_eq!(bash["canonical"], "shell");
    let memory = rows.iter().find(|r| r["name"] == "memory__save").unwrap();
    assert!(memory.get("canonical").is_none(), "{memory}");
    let table = toolbox_out(ws.path(), &["tools", "--vocabulary", "data-agent"]);
    assert!(
        table.lines().any(|l| l.starts_with("read_file ")),
        "{table}"
    );

    // [runtime] vocabulary is the default; the flag wins over it.
    let config = ws.path().join("operator.toml");
    std::fs::write(&config, "[runtime]\nvocabulary = \"data-agent\"\n").unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws.path())
        .args(["schema", "-f", "anthropic", "--toolsets", "files"])
        .env("TOOLBOX_CONFIG", &config)
        .env("XDG_CONFIG_HOME", ws.path().join(".no-user-config"));
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_config: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(names(&from_config).contains(&"notebook_edit".to_string()));
    let out = cmd.arg("--vocabulary").arg("canonical").output().unwrap();
    let flagged: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(names(&flagged).contains(&"notebook__edit".to_string()));
}
