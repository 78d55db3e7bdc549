//! The registry as linked through the umbrella crate, and every rendered schema.

use serde_json::Value;
use toolbox_core::ToolRisk;
use toolbox_executor::{PermissionMode, SchemaFormat};

// Links every provider of the full bundle; without this line the registry would be empty.
use toolbox as _;
use toolbox_tests::executor;

#[test]
fn every_compiled_provider_registers() {
    let mut registered: Vec<&str> = toolbox_host::registered_providers()
        .iter()
        .map(|r| r.name)
        .collect();
    registered.sort();
    let mut expected = toolbox::PROVIDERS.to_vec();
    expected.sort();
    assert_eq!(registered, expected);
}

/// How many registered tools the executor serves: all but the ones an agent runtime
/// intercepts (`call_agent`), which schemas and listings leave out.
/// The tools a canonical listing shows: those the executor serves (not `call_agent`), less
/// the data agent's own family, listed only in its vocabulary.
fn served_by_executor(exec: &toolbox_executor::ToolExecutor) -> usize {
    exec.registry()
        .tools()
        .iter()
        .filter(|t| !t.info.intercepted && t.info.listed_in(toolbox_core::Vocabulary::Canonical))
        .count()
}

#[test]
fn call_agent_is_registered_but_left_out_of_schemas_and_list_agents_is_in() {
    let (_d, exec) = executor(PermissionMode::Full);
    let call_agent = exec
        .registry()
        .get("call_agent")
        .expect("the team provider is linked");
    assert!(call_agent.info.intercepted);
    for format in SchemaFormat::ALL {
        let rendered = Value::Array(
            exec.resolve_agent_tool_schemas(None, PermissionMode::Full, format)
                .unwrap(),
        )
        .to_string();
        assert!(rendered.contains("\"list_agents\""), "{format}");
        assert!(!rendered.contains("\"call_agent\""), "{format}");
    }
    let team: Vec<&str> = exec
        .resolve_runtime_tools(Some(&["team"]), PermissionMode::Full)
        .unwrap()
        .iter()
        .map(|t| t.info.name.as_str())
        .collect();
    assert_eq!(team, ["list_agents", "call_agent"]);
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
    let count = served_by_executor(&exec);
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
        served_by_executor(&exec)
    );

    let files = names(PermissionMode::Full, Some(&["files"]));
    assert_eq!(files.len(), 7);
    let by_provider = names(PermissionMode::Full, Some(&["file_manager"]));
    assert_eq!(by_provider.len(), 6);
    // `files` is the provider's tools plus notebook__edit, as the data agent groups them.
    assert!(by_provider.iter().all(|t| files.contains(t)));
    assert!(files.contains(&"notebook__edit".to_string()));
    let single = names(PermissionMode::Full, Some(&["read_file"]));
    assert_eq!(single, ["file_manager__read"]);
    // The sidecar's pattern form names a provider's tools.
    let pattern = names(PermissionMode::Full, Some(&["file_manager__*"]));
    assert_eq!(pattern, by_provider);
    let err = exec
        .resolve_agent_tool_schemas(
            Some(&["nobody__*"]),
            PermissionMode::Full,
            SchemaFormat::OpenAi,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("unknown toolset: nobody__* (known: "),
        "{err}"
    );
    let err = exec
        .resolve_agent_tool_schemas(Some(&["nope"]), PermissionMode::Full, SchemaFormat::OpenAi)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("unknown toolset: nope (known: "), "{err}");
}

/// In a strict schema every object lists all its properties as required and allows no
/// others; `loose` is the same schema as the tool declares it. The MCP form (`require_all`
/// false) is the same but for `required`, which lists only what the tool requires: MCP
/// clients check it themselves, and a model not in strict mode leaves optional ones out.
fn assert_strict(name: &str, strict: &Value, loose: &Value, require_all: bool) {
    if let Some(items) = strict.get("items") {
        assert_strict(name, items, &loose["items"], require_all);
    }
    let Some(properties) = strict.get("properties").and_then(Value::as_object) else {
        return;
    };
    let mut required: Vec<&str> = match strict.get("required") {
        Some(list) => list
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect(),
        None if !require_all => Vec::new(),
        None => panic!("{name}: no required list"),
    };
    required.sort();
    let mut all: Vec<&str> = if require_all {
        properties.keys().map(String::as_str).collect()
    } else {
        loose["required"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap())
            .collect()
    };
    all.sort();
    assert_eq!(
        required, all,
        "{name}: every property is required (or, for MCP, the tool's own)"
    );
    assert_eq!(strict["additionalProperties"], false, "{name}");
    let loose_required = loose["required"].as_array().cloned().unwrap_or_default();
    for (key, property) in properties {
        let optional = !loose_required.contains(&Value::from(key.as_str()));
        let nullable = property["type"]
            .as_array()
            .is_some_and(|t| t.contains(&Value::from("null")));
        assert_eq!(
            nullable, optional,
            "{name}.{key}: nullable exactly when optional"
        );
        if let Some(values) = property["enum"].as_array() {
            assert_eq!(values.contains(&Value::Null), optional, "{name}.{key}");
        }
        let valid = jsonschema::validator_for(property).unwrap();
        assert_eq!(valid.is_valid(&Value::Null), optional, "{name}.{key}");
        assert_strict(
            &format!("{name}.{key}"),
            property,
            &loose["properties"][key],
            require_all,
        );
    }
}

#[test]
fn strict_schemas_require_every_property_and_accept_null_for_optional_ones() {
    let (_d, exec) = executor(PermissionMode::Full);
    for format in SchemaFormat::ALL {
        let rendered = exec
            .resolve_agent_tool_schemas(None, PermissionMode::Full, format.strict(true))
            .unwrap();
        assert_eq!(rendered.len(), served_by_executor(&exec));
        for tool in &rendered {
            let (name, schema) = match format {
                SchemaFormat::OpenAi => {
                    assert_eq!(tool["function"]["strict"], true);
                    (&tool["function"]["name"], &tool["function"]["parameters"])
                }
                SchemaFormat::OpenAiResponses => {
                    assert_eq!(tool["strict"], true);
                    (&tool["name"], &tool["parameters"])
                }
                SchemaFormat::Anthropic => {
                    assert_eq!(tool["strict"], true);
                    (&tool["name"], &tool["input_schema"])
                }
                SchemaFormat::Mcp => (&tool["name"], &tool["inputSchema"]),
            };
            let name = name.as_str().unwrap();
            if let Err(e) = jsonschema::meta::validate(schema) {
                panic!("strict {format} schema of {name} is not valid JSON Schema: {e}");
            }
            let loose = &exec.registry().get(name).unwrap().info.input_schema;
            assert_strict(name, schema, loose, format != SchemaFormat::Mcp);
            // All null but the required ones: what a strict client sends for "defaults".
            let mut call = serde_json::Map::new();
            for key in schema["properties"].as_object().unwrap().keys() {
                call.insert(key.clone(), Value::Null);
            }
            let validator = jsonschema::validator_for(schema).unwrap();
            let required_null = !loose["required"].as_array().unwrap().is_empty();
            assert_eq!(
                validator.is_valid(&Value::Object(call)),
                !required_null,
                "{name}: null is refused for required properties only"
            );
        }
    }
    // Loose unless asked, except for the Responses API, whose default is strict.
    let responses = exec
        .resolve_agent_tool_schemas(None, PermissionMode::Full, SchemaFormat::OpenAiResponses)
        .unwrap();
    assert!(responses.iter().all(|t| t["strict"] == true));
    let loose = exec
        .resolve_agent_tool_schemas(
            None,
            PermissionMode::Full,
            SchemaFormat::OpenAiResponses.strict(false),
        )
        .unwrap();
    assert!(loose.iter().all(|t| t["strict"] == false));
    let chat = exec
        .resolve_agent_tool_schemas(None, PermissionMode::Full, SchemaFormat::OpenAi)
        .unwrap();
    assert!(chat.iter().all(|t| t["function"].get("strict").is_none()));
}

#[test]
fn open_world_hints() {
    let (_d, exec) = executor(PermissionMode::Full);
    let tools = exec
        .resolve_agent_tool_schemas(None, PermissionMode::Full, SchemaFormat::Mcp)
        .unwrap();
    let hint = |name: &str| {
        tools.iter().find(|t| t["name"] == name).unwrap()["annotations"]["openWorldHint"].clone()
    };
    // The web is the open world; a lookup in the local packages is not.
    assert_eq!(hint("web_fetch"), true);
    assert_eq!(hint("web_search"), true);
    assert_eq!(hint("registry_lookup"), false);
    assert_eq!(hint("file_manager__read"), false);
    assert_eq!(hint("shell"), true);
    assert_eq!(hint("run_python_code"), true);
}

/// Every integer argument of every tool states its bounds in the schema (issue 40): the
/// declaration that builds the schema is the one that checks the call, so a bound a model is
/// told is a bound it is held to, and none lives only in prose.
#[test]
fn every_integer_argument_states_its_minimum_in_the_schema() {
    let (_d, exec) = executor(PermissionMode::Full);
    let mut missing = Vec::new();
    let mut bounded = 0;
    for tool in exec.registry().tools() {
        let Some(props) = tool.info.input_schema["properties"].as_object() else {
            continue;
        };
        for (name, prop) in props {
            if prop["type"] == "integer" {
                if prop.get("minimum").is_none() {
                    missing.push(format!("{}.{name}", tool.info.name));
                }
                if prop.get("maximum").is_some() {
                    bounded += 1;
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "integers without a minimum: {missing:?}"
    );
    assert!(
        bounded > 20,
        "only {bounded} integer arguments state a maximum"
    );
}

/// Each registered config table is declared once: one registration per table, each key once,
/// and a workspace rule's default inside the bounds its key declares.
#[test]
fn every_config_table_is_declared_once_with_rules_inside_its_bounds() {
    use toolbox_core::config_table::KeyKind;
    use toolbox_core::trust::{Registered, Tighten};
    let mut tables: Vec<&str> = Vec::new();
    for Registered(table) in toolbox_core::inventory::iter::<Registered> {
        assert!(
            !tables.contains(&table.name),
            "[{}] is registered twice",
            table.name
        );
        tables.push(table.name);
        let mut keys: Vec<&str> = Vec::new();
        for key in table.keys {
            assert!(
                !keys.contains(&key.name),
                "[{}] {} twice",
                table.name,
                key.name
            );
            keys.push(key.name);
            if let (Some(Tighten::AtMost(d) | Tighten::AtLeast(d)), KeyKind::Integer { min, max }) =
                (key.workspace, key.kind)
            {
                assert!(
                    (min..=max).contains(&d),
                    "[{}] {}: the workspace rule's default {d} is outside {min}..={max}",
                    table.name,
                    key.name
                );
            }
        }
    }
    for expected in [
        "shell", "python", "web", "memory", "limits", "llm", "runtime", "agents",
    ] {
        assert!(
            tables.contains(&expected),
            "[{expected}] is not registered: {tables:?}"
        );
    }
}
