//! The registry as linked through the umbrella crate, and every rendered schema.

use serde_json::Value;
use toolbox_core::ToolRisk;
use toolbox_executor::{PermissionMode, SchemaFormat};

// Links every provider of the full bundle; without this line the registry would be empty.
use toolbox as _;
use toolbox_tests::executor;

#[test]
fn every_compiled_provider_registers() {
    let mut registered: Vec<&str> = toolbox_core::registered_providers()
        .iter()
        .map(|r| r.name)
        .collect();
    registered.sort();
    let mut expected = toolbox::PROVIDERS.to_vec();
    expected.sort();
    assert_eq!(registered, expected);
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[test]
fn every_format_renders_valid_json_schema_and_names() {
    let (_d, exec) = executor(PermissionMode::Full);
    let count = exec.registry().tools().len();
    assert!(count >= 6);
    for format in SchemaFormat::ALL {
        let rendered = exec
            .resolve_agent_tool_schemas(None, PermissionMode::Full, format)
            .unwrap();
        assert_eq!(rendered.len(), count, "{format}");
        for tool in &rendered {
            let (name, schema): (&str, &Value) = match format {
                SchemaFormat::OpenAi => {
                    assert_eq!(tool["type"], "function");
                    (
                        tool["function"]["name"].as_str().unwrap(),
                        &tool["function"]["parameters"],
                    )
                }
                SchemaFormat::OpenAiResponses => {
                    assert_eq!(tool["type"], "function");
                    (tool["name"].as_str().unwrap(), &tool["parameters"])
                }
                SchemaFormat::Anthropic => (tool["name"].as_str().unwrap(), &tool["input_schema"]),
                SchemaFormat::Mcp => {
                    let a = &tool["annotations"];
                    assert!(a["readOnlyHint"].is_boolean() && a["destructiveHint"].is_boolean());
                    (tool["name"].as_str().unwrap(), &tool["inputSchema"])
                }
            };
            assert!(valid_name(name), "bad tool name {name:?}");
            assert_eq!(schema["type"], "object", "{name}");
            if let Err(e) = jsonschema::meta::validate(schema) {
                panic!("{format} schema of {name} is not valid JSON Schema: {e}");
            }
            jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{name}: {e}"));
            let description = match format {
                SchemaFormat::OpenAi => tool["function"]["description"].as_str(),
                _ => tool["description"].as_str(),
            };
            assert!(
                description.is_some_and(|d| d.len() > 20),
                "{name} needs a real description"
            );
        }
    }
}

#[test]
fn aliases_resolve_but_are_never_listed() {
    let (_d, exec) = executor(PermissionMode::Full);
    for (alias, canonical) in [
        ("list_dir", "file_manager__list"),
        ("read_file", "file_manager__read"),
        ("write_file", "file_manager__write"),
        ("edit_file", "file_manager__edit"),
        ("glob_search", "file_manager__glob"),
        ("grep_search", "file_manager__grep"),
    ] {
        assert_eq!(exec.registry().get(alias).unwrap().info.name, canonical);
    }
    let names: Vec<Value> = exec
        .resolve_agent_tool_schemas(None, PermissionMode::Full, SchemaFormat::Anthropic)
        .unwrap()
        .into_iter()
        .map(|t| t["name"].clone())
        .collect();
    assert!(!names.contains(&Value::from("read_file")));
}

#[test]
fn risks_modes_and_toolsets() {
    let (_d, exec) = executor(PermissionMode::Full);
    let risk = |n: &str| exec.registry().get(n).unwrap().info.risk;
    assert_eq!(risk("file_manager__write"), ToolRisk::FileWrite);
    assert_eq!(risk("file_manager__edit"), ToolRisk::FileWrite);
    assert_eq!(risk("file_manager__read"), ToolRisk::Read);

    let names = |mode: PermissionMode, sets: Option<&[&str]>| -> Vec<String> {
        exec.resolve_agent_tool_schemas(sets, mode, SchemaFormat::Mcp)
            .unwrap()
            .into_iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let ro = names(PermissionMode::ReadOnly, None);
    assert!(ro.contains(&"file_manager__grep".into()));
    assert!(!ro
        .iter()
        .any(|n| n == "file_manager__write" || n == "file_manager__edit"));
    assert_eq!(
        names(PermissionMode::Auto, None).len(),
        exec.registry().tools().len()
    );

    let files = names(PermissionMode::Full, Some(&["files"]));
    assert_eq!(files.len(), 6);
    let by_provider = names(PermissionMode::Full, Some(&["file_manager"]));
    assert_eq!(files, by_provider);
    let single = names(PermissionMode::Full, Some(&["read_file"]));
    assert_eq!(single, ["file_manager__read"]);
    let err = exec
        .resolve_agent_tool_schemas(Some(&["nope"]), PermissionMode::Full, SchemaFormat::OpenAi)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("unknown toolset: nope (known: "), "{err}");
}
