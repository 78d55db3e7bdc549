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

    let tools = schema(ws.path(), &["-f", "mcp", "--strict", "--toolsets", "shell"]);
    assert_eq!(shell_cwd(&tools, |t| &t["inputSchema"]), nullable);
    let tools = schema(ws.path(), &["-f", "anthropic", "--strict"]);
    assert!(tools.iter().all(|t| t["strict"] == true));
}
