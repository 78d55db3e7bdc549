//! Both LLM clients against the scripted LLM server, in both wire formats: streaming,
//! parallel tool calls, the request bodies they send, retries, and how they fail. A raw
//! loopback server stands in for a misbehaving endpoint: a response past
//! `[llm] max_response_bytes`, the key echoed inside a 200, a 200 that is not a stream, a
//! stream cut before its finish marker (also through a whole turn: its tool never runs).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox as _;
use toolbox_core::SessionId;
use toolbox_executor::{ExecutorConfig, PermissionMode, ToolExecutor};
use toolbox_runtime::llm::{
    client_with_env, ChatRequest, Completion, LlmClient, LlmConfig, LlmError, LlmErrorKind,
    Message, ToolCall, Usage,
};
use toolbox_runtime::{Runtime, RuntimeEvent, RuntimeOptions, StopReason, TurnRequest};
use toolbox_tests::scripted_llm::{
    RecordedRequest, Scripted, ScriptedLlm, EXHAUSTED, USAGE_INPUT_TOKENS, USAGE_OUTPUT_TOKENS,
};
use toolbox_tests::{assert_err_contains, assert_err_kind};

const MODEL: &str = "scripted-model";
const SECRET: &str = "sk-test-0123456789-secret";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    OpenAi,
    Anthropic,
}

impl Wire {
    fn provider(self) -> &'static str {
        match self {
            Wire::OpenAi => "openai",
            Wire::Anthropic => "anthropic",
        }
    }

    fn base_url(self, server: &ScriptedLlm) -> String {
        match self {
            Wire::OpenAi => server.openai_base_url(),
            Wire::Anthropic => server.anthropic_base_url(),
        }
    }

    fn path(self) -> &'static str {
        match self {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
        }
    }

    /// A variable name no other test (or the environment) uses.
    fn key_var(self, test: &str) -> String {
        format!(
            "TOOLBOX_TEST_LLM_KEY_{}_{test}",
            self.provider().to_uppercase()
        )
    }
}

/// The settings for `wire` at `base_url`, with `extra` keys over them; the key variable is
/// `key_var` and nothing is read from the process environment.
fn config_at(wire: Wire, base_url: &str, key_var: &str, extra: Value) -> LlmConfig {
    let mut table = json!({
        "provider": wire.provider(),
        "base_url": base_url,
        "model": MODEL,
        "api_key_env": key_var,
        "max_retries": 3,
    });
    if let (Some(table), Some(extra)) = (table.as_object_mut(), extra.as_object()) {
        table.extend(extra.clone());
    }
    LlmConfig::from_table(Some(&table), &|_| None).expect("a valid [llm] table")
}

/// A client for `wire` talking to `server`, with no key.
fn client(wire: Wire, server: &ScriptedLlm, extra: Value) -> Arc<dyn LlmClient> {
    let config = config_at(wire, &wire.base_url(server), &wire.key_var("NONE"), extra);
    client_with_env(&config, &|_| None).expect("a client")
}

/// Sends one user message and collects the streamed text pieces.
async fn ask(
    client: &dyn LlmClient,
    messages: &[Message],
) -> (Result<Completion, LlmError>, Vec<String>) {
    let pieces = Mutex::new(Vec::new());
    let sink = |text: &str| pieces.lock().unwrap().push(text.to_string());
    let result = client
        .complete(
            ChatRequest {
                system: "",
                messages,
                tools: &[],
                model: None,
            },
            &sink,
        )
        .await;
    (result, pieces.into_inner().unwrap())
}

fn hello() -> Vec<Message> {
    vec![Message::User {
        content: "hello".into(),
    }]
}

/// Asks `client` once: it must fail with an error of `kind` saying each of `needles`.
/// Returns the error.
async fn fails(client: &dyn LlmClient, kind: LlmErrorKind, needles: &[&str]) -> LlmError {
    llm_error(ask(client, &hello()).await.0, kind, needles)
}

/// `result` must be an error of `kind` saying each of `needles`; returns the error.
#[track_caller]
fn llm_error<T>(result: Result<T, LlmError>, kind: LlmErrorKind, needles: &[&str]) -> LlmError {
    assert_err_kind(result, |e| e.kind, kind, needles)
}

fn only_request(server: &ScriptedLlm) -> RecordedRequest {
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    requests.into_iter().next().unwrap()
}

/// Generates one `#[tokio::test]` per wire format for each async fn taking a [`Wire`].
macro_rules! both_wires {
    ($($name:ident),* $(,)?) => {
        mod openai {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Wire::OpenAi).await
            })*
        }
        mod anthropic {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(super::Wire::Anthropic).await
            })*
        }
    };
}

both_wires!(
    streamed_text_arrives_in_pieces,
    parallel_tool_calls_come_back_in_order,
    arguments_are_kept_as_sent,
    the_request_carries_system_tools_and_tool_results,
    retry_after_is_honoured,
    a_retry_after_beyond_the_cap_fails_at_once,
    always_503_gives_up_after_max_retries,
    a_refused_key_is_auth_and_never_shown,
    no_key_sends_no_key_header,
    an_unknown_model_is_named,
    a_stream_event_that_is_not_json_is_bad_response,
    an_exhausted_script_is_a_server_error,
    a_connection_refused_is_retried_then_transport,
    a_silent_server_times_out,
    a_server_that_does_not_stream_is_understood,
    a_redirect_to_another_origin_never_gets_the_key,
    a_stream_past_max_response_bytes_fails_naming_the_key,
    a_whole_body_past_max_response_bytes_fails_naming_the_key,
    the_key_echoed_inside_a_200_is_redacted,
    a_200_that_is_neither_a_stream_nor_json_is_an_error,
    content_types_with_parameters_are_understood,
    a_stream_cut_before_its_finish_marker_is_an_error,
    a_cut_or_oversized_response_runs_no_tool_in_a_turn,
);

async fn streamed_text_arrives_in_pieces(wire: Wire) {
    let text = "Hello from the scripted model, in several pieces.";
    let server = ScriptedLlm::start(vec![Scripted::text(text)]);
    let client = client(wire, &server, json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    let completion = result.expect("a completion");
    assert!(pieces.len() > 1, "one piece only: {pieces:?}");
    assert_eq!(pieces.concat(), text);
    assert_eq!(completion.text, text);
    assert!(completion.tool_calls.is_empty());
    let stop = match wire {
        Wire::OpenAi => "stop",
        Wire::Anthropic => "end_turn",
    };
    assert_eq!(completion.stop_reason, stop);
    assert_eq!(
        completion.usage,
        Usage {
            input_tokens: USAGE_INPUT_TOKENS,
            output_tokens: USAGE_OUTPUT_TOKENS
        }
    );
    let request = only_request(&server);
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", wire.path())
    );
    assert_eq!(server.remaining(), 0);
}

async fn parallel_tool_calls_come_back_in_order(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::calls(vec![
        (
            "call_a",
            "file_manager__read",
            json!({"path": "src/main.rs"}),
        ),
        (
            "call_b",
            "shell__run",
            json!({"command": "ls -la", "timeout_ms": 5000}),
        ),
    ])]);
    let client = client(wire, &server, json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    let completion = result.expect("a completion");
    assert!(pieces.is_empty(), "{pieces:?}");
    assert_eq!(completion.text, "");
    let got: Vec<(&str, &str, Value)> = completion
        .tool_calls
        .iter()
        .map(|c| {
            let args = serde_json::from_str(&c.arguments)
                .unwrap_or_else(|e| panic!("{:?} is not JSON: {e}", c.arguments));
            (c.id.as_str(), c.name.as_str(), args)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "call_a",
                "file_manager__read",
                json!({"path": "src/main.rs"})
            ),
            (
                "call_b",
                "shell__run",
                json!({"command": "ls -la", "timeout_ms": 5000})
            ),
        ]
    );
    let stop = match wire {
        Wire::OpenAi => "tool_calls",
        Wire::Anthropic => "tool_use",
    };
    assert_eq!(completion.stop_reason, stop);
}

async fn arguments_are_kept_as_sent(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::ToolCalls {
        text: "Let me look.".into(),
        calls: vec![("c1".into(), "t".into(), "{\"path\": \"a.txt\"".into())],
    }]);
    let client = client(wire, &server, json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    let completion = result.expect("a completion");
    assert_eq!(pieces.concat(), "Let me look.");
    assert_eq!(completion.text, "Let me look.");
    assert_eq!(
        completion.tool_calls,
        vec![ToolCall {
            id: "c1".into(),
            name: "t".into(),
            arguments: "{\"path\": \"a.txt\"".into(),
        }]
    );
}

async fn the_request_carries_system_tools_and_tool_results(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::text("There is one file.")]);
    let client = client(wire, &server, json!({"max_tokens": 1000}));
    let tools = match wire {
        Wire::OpenAi => vec![json!({
            "type": "function",
            "function": {
                "name": "shell__run",
                "description": "Runs a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        })],
        Wire::Anthropic => vec![json!({
            "name": "shell__run",
            "description": "Runs a command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        })],
    };
    let result = r#"{"status":"ok","result":"a.txt"}"#;
    let history = vec![
        Message::User {
            content: "What files are here?".into(),
        },
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "shell__run".into(),
                arguments: r#"{"command":"ls"}"#.into(),
            }],
        },
        Message::Tool {
            tool_call_id: "call_1".into(),
            name: "shell__run".into(),
            content: result.into(),
        },
    ];
    let completion = client
        .complete(
            ChatRequest {
                system: "You are terse.",
                messages: &history,
                tools: &tools,
                model: None,
            },
            &|_| {},
        )
        .await
        .expect("a completion");
    assert_eq!(completion.text, "There is one file.");

    let request = only_request(&server);
    let body = &request.body;
    assert_eq!(body["model"], json!(MODEL));
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["tools"], json!(tools));
    assert_eq!(
        request.header("content-type"),
        Some("application/json"),
        "{request:#?}"
    );
    match wire {
        Wire::OpenAi => {
            assert_eq!(body["stream_options"], json!({"include_usage": true}));
            assert_eq!(body["max_tokens"], json!(1000));
            assert_eq!(
                body["messages"],
                json!([
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What files are here?"},
                    {"role": "assistant", "content": null, "tool_calls": [{
                        "id": "call_1", "type": "function",
                        "function": {"name": "shell__run", "arguments": "{\"command\":\"ls\"}"},
                    }]},
                    {"role": "tool", "tool_call_id": "call_1", "content": result},
                ])
            );
        }
        Wire::Anthropic => {
            assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(body["max_tokens"], json!(1000));
            assert_eq!(body["system"], json!("You are terse."));
            assert_eq!(
                body["messages"],
                json!([
                    {"role": "user", "content": "What files are here?"},
                    {"role": "assistant", "content": [{
                        "type": "tool_use", "id": "call_1", "name": "shell__run",
                        "input": {"command": "ls"},
                    }]},
                    {"role": "user", "content": [{
                        "type": "tool_result", "tool_use_id": "call_1", "content": result,
                    }]},
                ])
            );
        }
    }
}

async fn retry_after_is_honoured(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::rate_limited(1), Scripted::text("ok then")]);
    let client = client(wire, &server, json!({}));
    let started = Instant::now();
    let (result, _) = ask(&*client, &hello()).await;
    let elapsed = started.elapsed();
    assert_eq!(
        result.expect("a completion after the retry").text,
        "ok then"
    );
    assert!(
        elapsed >= Duration::from_secs(1),
        "retried after {elapsed:?}, before the Retry-After second"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
    assert_eq!(server.remaining(), 0);
}

async fn a_retry_after_beyond_the_cap_fails_at_once(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::rate_limited(3600), Scripted::text("no")]);
    let client = client(wire, &server, json!({}));
    fails(&*client, LlmErrorKind::RateLimited, &["3600 s"]).await;
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.remaining(), 1);
}

async fn always_503_gives_up_after_max_retries(wire: Wire) {
    let server = ScriptedLlm::start(
        (0..4)
            .map(|_| Scripted::error(503, "the model is overloaded"))
            .collect(),
    );
    let client = client(wire, &server, json!({"max_retries": 2}));
    fails(
        &*client,
        LlmErrorKind::Server,
        &["3 attempts", "HTTP 503", "the model is overloaded"],
    )
    .await;
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
}

async fn a_refused_key_is_auth_and_never_shown(wire: Wire) {
    // The server quotes the key back, as some do: it must not reach the message.
    let server = ScriptedLlm::start(vec![Scripted::Status {
        code: 401,
        retry_after: None,
        body: json!({"type": "error", "error": {
            "type": "authentication_error",
            "message": format!("Incorrect API key provided: {SECRET}"),
        }})
        .to_string(),
    }]);
    let var = wire.key_var("REFUSED");
    let config = config_at(wire, &wire.base_url(&server), &var, json!({}));
    let env = |name: &str| (name == var).then(|| SECRET.to_string());
    let client = client_with_env(&config, &env).expect("a client");
    let e = fails(
        &*client,
        LlmErrorKind::Auth,
        &[&var, "which is set", "HTTP 401"],
    )
    .await;
    assert!(!e.message.contains(SECRET), "the key leaked: {e}");
    assert!(!format!("{e:?}").contains(SECRET), "the key leaked: {e:?}");
    let request = only_request(&server);
    match wire {
        Wire::OpenAi => {
            assert_eq!(
                request.header("authorization"),
                Some(format!("Bearer {SECRET}").as_str())
            );
            assert_eq!(request.header("x-api-key"), None);
        }
        Wire::Anthropic => {
            assert_eq!(request.header("x-api-key"), Some(SECRET));
            assert_eq!(request.header("authorization"), None);
        }
    }
}

async fn no_key_sends_no_key_header(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::error(403, "forbidden")]);
    let client = client(wire, &server, json!({}));
    fails(&*client, LlmErrorKind::Auth, &["not set"]).await;
    let request = only_request(&server);
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("x-api-key"), None);
}

async fn an_unknown_model_is_named(wire: Wire) {
    let body = match wire {
        Wire::OpenAi => json!({"error": {
            "message": format!("The model `{MODEL}` does not exist or you do not have access to it."),
            "type": "invalid_request_error", "code": "model_not_found",
        }}),
        Wire::Anthropic => json!({"type": "error", "error": {
            "type": "not_found_error", "message": format!("model: {MODEL}"),
        }}),
    };
    let server = ScriptedLlm::start(vec![Scripted::Status {
        code: 404,
        retry_after: None,
        body: body.to_string(),
    }]);
    let client = client(wire, &server, json!({}));
    fails(
        &*client,
        LlmErrorKind::UnknownModel,
        &[MODEL, &wire.base_url(&server)],
    )
    .await;
    assert_eq!(server.requests().len(), 1);
}

async fn a_stream_event_that_is_not_json_is_bad_response(wire: Wire) {
    let server = ScriptedLlm::start(vec![Scripted::Garbage, Scripted::text("unused")]);
    let client = client(wire, &server, json!({}));
    fails(
        &*client,
        LlmErrorKind::BadResponse,
        &["not JSON", "this is {not JSON"],
    )
    .await;
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.remaining(), 1);
}

async fn an_exhausted_script_is_a_server_error(wire: Wire) {
    let server = ScriptedLlm::start(vec![]);
    let client = client(wire, &server, json!({"max_retries": 0}));
    fails(&*client, LlmErrorKind::Server, &[EXHAUSTED, "1 attempt "]).await;
    assert_eq!(server.requests().len(), 1);
}

async fn a_connection_refused_is_retried_then_transport(wire: Wire) {
    // A port nothing listens on: bind one, then let it go.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let base = match wire {
        Wire::OpenAi => format!("http://127.0.0.1:{port}/v1"),
        Wire::Anthropic => format!("http://127.0.0.1:{port}"),
    };
    let config = config_at(
        wire,
        &base,
        &wire.key_var("NONE"),
        json!({"max_retries": 1}),
    );
    let client = client_with_env(&config, &|_| None).expect("a client");
    let started = Instant::now();
    fails(
        &*client,
        LlmErrorKind::Transport,
        &["could not connect", "2 attempts"],
    )
    .await;
    // One backoff (at least 500 ms) separated the two attempts.
    assert!(started.elapsed() >= Duration::from_millis(500));
}

async fn a_silent_server_times_out(wire: Wire) {
    // Accepts, reads the request, and says nothing until the client goes away (or 10 s).
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let silent = std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let mut buf = [0u8; 4096];
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        }
    });
    let base = match wire {
        Wire::OpenAi => format!("http://127.0.0.1:{port}/v1"),
        Wire::Anthropic => format!("http://127.0.0.1:{port}"),
    };
    let config = config_at(
        wire,
        &base,
        &wire.key_var("NONE"),
        json!({"idle_timeout_ms": 300}),
    );
    let client = client_with_env(&config, &|_| None).expect("a client");
    let started = Instant::now();
    fails(&*client, LlmErrorKind::Timeout, &["idle_timeout_ms"]).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(client);
    let _ = silent.join();
}

async fn a_server_that_does_not_stream_is_understood(wire: Wire) {
    // One JSON completion (application/json) instead of a stream.
    let body = match wire {
        Wire::OpenAi => json!({
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Reading.",
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "t", "arguments": "{\"a\":1}"}}],
            }}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        }),
        Wire::Anthropic => json!({
            "type": "message", "role": "assistant", "stop_reason": "tool_use",
            "content": [{"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "c1", "name": "t", "input": {"a": 1}}],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        }),
    };
    let server = ScriptedLlm::start(vec![Scripted::Status {
        code: 200,
        retry_after: None,
        body: body.to_string(),
    }]);
    let client = client(wire, &server, json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    let completion = result.expect("a completion");
    assert_eq!(pieces, ["Reading."]);
    assert_eq!(completion.text, "Reading.");
    assert_eq!(
        completion.tool_calls,
        vec![ToolCall {
            id: "c1".into(),
            name: "t".into(),
            arguments: "{\"a\":1}".into(),
        }]
    );
    assert_eq!(
        completion.usage,
        Usage {
            input_tokens: 3,
            output_tokens: 4
        }
    );
}

#[tokio::test]
async fn the_request_timeout_bounds_the_whole_call() {
    let server = ScriptedLlm::start(vec![Scripted::rate_limited(5), Scripted::text("late")]);
    let client = client(Wire::OpenAi, &server, json!({"request_timeout_ms": 300}));
    fails(
        &*client,
        LlmErrorKind::Timeout,
        &["request_timeout_ms", "TOOLBOX_LLM_TIMEOUT_MS"],
    )
    .await;
}

#[tokio::test]
async fn a_model_override_is_sent() {
    let server = ScriptedLlm::start(vec![Scripted::text("hi")]);
    let client = client(Wire::OpenAi, &server, json!({}));
    assert_eq!(client.model(), MODEL);
    client
        .complete(
            ChatRequest {
                system: "",
                messages: &hello(),
                tools: &[],
                model: Some("another-model"),
            },
            &|_| {},
        )
        .await
        .expect("a completion");
    assert_eq!(only_request(&server).body["model"], json!("another-model"));
}

#[test]
fn config_errors_name_the_key() {
    for (table, want) in [
        (json!({"modle": "x"}), "unknown key `modle`"),
        (json!({"base_url": "not a url"}), "base_url"),
        (json!({"base_url": "file:///tmp/x"}), "base_url"),
        (json!({"provider": "gemini"}), "provider"),
        (json!({"max_retries": "many"}), "max_retries"),
    ] {
        llm_error(
            LlmConfig::from_table(Some(&table), &|_| None),
            LlmErrorKind::Config,
            &[want],
        );
    }
    // A bad provider.
    let env = |name: &str| (name == "TOOLBOX_LLM_PROVIDER").then(|| "gemini".to_string());
    llm_error(
        LlmConfig::from_table(None, &env),
        LlmErrorKind::Config,
        &["TOOLBOX_LLM_PROVIDER"],
    );
}

#[test]
fn a_client_needs_a_model() {
    for provider in ["openai", "anthropic"] {
        let config =
            LlmConfig::from_table(Some(&json!({"provider": provider})), &|_| None).expect("config");
        // No client without a model.
        llm_error(
            client_with_env(&config, &|_| None),
            LlmErrorKind::Config,
            &["set [llm] model or TOOLBOX_LLM_MODEL"],
        );
    }
}

/// A 307 from the model endpoint to another origin (another port of 127.0.0.1 here) is
/// refused, naming the origin: the key is never sent there, in either wire format (reqwest
/// strips `Authorization` itself, but not `x-api-key`).
async fn a_redirect_to_another_origin_never_gets_the_key(wire: Wire) {
    let elsewhere = ScriptedLlm::start(vec![Scripted::text("you should not be here")]);
    let target = format!("http://{}{}", elsewhere.addr(), wire.path());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let redirector = std::thread::spawn(move || {
        // At most a few connections (one request and its retries), each answered with 307.
        listener.set_nonblocking(false).unwrap();
        for _ in 0..4 {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let mut buf = [0u8; 65536];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    let base = match wire {
        Wire::OpenAi => format!("http://{addr}/v1"),
        Wire::Anthropic => format!("http://{addr}"),
    };
    let var = wire.key_var("REDIRECT");
    let config = config_at(wire, &base, &var, json!({"max_retries": 0}));
    let env = |name: &str| (name == var).then(|| SECRET.to_string());
    let client = client_with_env(&config, &env).expect("a client");
    let message = assert_err_contains(
        ask(&*client, &hello()).await.0,
        &[
            "redirected to another origin",
            &elsewhere.addr().port().to_string(),
        ],
    );
    assert!(!message.contains(SECRET), "{message}");
    assert!(
        elsewhere.requests().is_empty(),
        "the other origin was asked"
    );
    drop(redirector);
}

// ---------------------------------------------------------------------------------------
// A raw loopback server for endpoints that misbehave in ways the scripted server does not.

/// What a [`RawServer`] does with a connection once it has read the request.
type Respond = dyn Fn(&mut TcpStream) + Send + Sync;

/// A loopback server that answers every request by handing the connection to `respond`,
/// which writes whatever it likes (status line, headers, body) and returns; the connection
/// is then closed. It counts the requests it read, and stops accepting when dropped.
struct RawServer {
    addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl RawServer {
    fn start(respond: impl Fn(&mut TcpStream) + Send + Sync + 'static) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("address");
        listener.set_nonblocking(true).expect("non-blocking");
        let requests = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let respond = Arc::new(respond);
        let accept = {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let Ok((mut stream, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    let (requests, respond) = (requests.clone(), respond.clone());
                    std::thread::spawn(move || {
                        if toolbox_tests::http::read_request(&mut stream).is_none() {
                            return;
                        }
                        requests.fetch_add(1, Ordering::SeqCst);
                        let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
                        respond(&mut stream);
                        let _ = stream.flush();
                        let _ = stream.shutdown(std::net::Shutdown::Write);
                    });
                }
            })
        };
        RawServer {
            addr,
            requests,
            stop,
            accept: Some(accept),
        }
    }

    fn base_url(&self, wire: Wire) -> String {
        match wire {
            Wire::OpenAi => format!("http://{}/v1", self.addr),
            Wire::Anthropic => format!("http://{}", self.addr),
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// A 200 head with `content_type`, for a body that ends when the connection closes.
fn head_200(content_type: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nConnection: close\r\n\r\n")
}

/// One SSE event.
fn sse(event: Option<&str>, data: &str) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// An Anthropic event, named by its own type.
fn anthropic_event(value: Value) -> String {
    let name = value["type"].as_str().unwrap_or("unknown").to_string();
    sse(Some(&name), &value.to_string())
}

/// An OpenAI chunk with one choice.
fn openai_chunk(delta: Value, finish: Value) -> String {
    sse(
        None,
        &json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string(),
    )
}

/// The events that open a response.
fn opening(wire: Wire) -> String {
    match wire {
        Wire::OpenAi => openai_chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        Wire::Anthropic => anthropic_event(json!({
            "type": "message_start",
            "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                        "usage": {"input_tokens": 1, "output_tokens": 1}},
        })),
    }
}

/// One text delta (Anthropic: in content block 0, which [`opening_text_block`] starts).
fn text_delta(wire: Wire, text: &str) -> String {
    match wire {
        Wire::OpenAi => openai_chunk(json!({"content": text}), Value::Null),
        Wire::Anthropic => anthropic_event(json!({
            "type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text},
        })),
    }
}

/// Starts the text block text deltas go to (nothing for OpenAI).
fn opening_text_block(wire: Wire) -> String {
    match wire {
        Wire::OpenAi => String::new(),
        Wire::Anthropic => anthropic_event(json!({
            "type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""},
        })),
    }
}

/// A whole tool call, complete arguments included (Anthropic: content block 1).
fn tool_call(wire: Wire, id: &str, name: &str, arguments: &Value) -> String {
    match wire {
        Wire::OpenAi => openai_chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ),
        Wire::Anthropic => [
            anthropic_event(json!({
                "type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}},
            })),
            anthropic_event(json!({
                "type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": arguments.to_string()},
            })),
            anthropic_event(json!({"type": "content_block_stop", "index": 1})),
        ]
        .concat(),
    }
}

/// The events that finish a response properly.
fn finishing(wire: Wire, stop: &str) -> String {
    match wire {
        Wire::OpenAi => [openai_chunk(json!({}), json!(stop)), sse(None, "[DONE]")].concat(),
        Wire::Anthropic => [
            anthropic_event(json!({
                "type": "message_delta", "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 2},
            })),
            anthropic_event(json!({"type": "message_stop"})),
        ]
        .concat(),
    }
}

/// A client for `wire` at `server` that sends [`SECRET`] as its key.
fn keyed_client(wire: Wire, server: &RawServer, test: &str, extra: Value) -> Arc<dyn LlmClient> {
    let var = wire.key_var(test);
    let config = config_at(wire, &server.base_url(wire), &var, extra);
    let env = |name: &str| (name == var).then(|| SECRET.to_string());
    client_with_env(&config, &env).expect("a client")
}

/// Neither the Display nor the Debug of `e` holds the key or a piece of it 8 characters
/// long or more (a quote cut in the middle of the key must not show its start).
fn assert_no_key(e: &LlmError) {
    for shown in [e.to_string(), format!("{e:?}")] {
        for start in 0..=SECRET.len() - 8 {
            let piece = &SECRET[start..start + 8];
            assert!(
                !shown.contains(piece),
                "{piece:?} of the key leaked: {shown}"
            );
        }
    }
}

const CAP: usize = 64 * 1024;

/// Text deltas of 1 KiB, 1024 of them (about 1 MB), in a bounded loop: the client must stop
/// at the 64 KiB cap; a write error (the client went away) ends the loop early.
fn stream_past_the_cap(stream: &mut TcpStream, wire: Wire, before: &str) {
    let piece = "x".repeat(1024);
    let start = [
        head_200("text/event-stream"),
        opening(wire),
        before.to_string(),
    ]
    .concat();
    if stream.write_all(start.as_bytes()).is_err() {
        return;
    }
    let event = text_delta(wire, &piece);
    for _ in 0..1024 {
        if stream.write_all(event.as_bytes()).is_err() {
            return;
        }
    }
    let _ = stream.write_all(finishing(wire, "end_turn").as_bytes());
}

async fn a_stream_past_max_response_bytes_fails_naming_the_key(wire: Wire) {
    let server = RawServer::start(move |stream| {
        stream_past_the_cap(stream, wire, &opening_text_block(wire))
    });
    let client = keyed_client(wire, &server, "CAP", json!({"max_response_bytes": CAP}));
    let (result, pieces) = ask(&*client, &hello()).await;
    // A response past the cap is an error.
    llm_error(
        result,
        LlmErrorKind::BadResponse,
        &["[llm] max_response_bytes", &CAP.to_string()],
    );
    // Reading stopped at the cap: the text handed over is less than the cap.
    assert!(
        pieces.concat().len() <= CAP,
        "{} bytes",
        pieces.concat().len()
    );
    assert_eq!(
        server.requests(),
        1,
        "a response past the cap is not retried"
    );
}

async fn a_whole_body_past_max_response_bytes_fails_naming_the_key(wire: Wire) {
    let server = RawServer::start(move |stream| {
        let text = "y".repeat(1024 * 1024);
        let body = match wire {
            Wire::OpenAi => json!({"choices": [{"index": 0, "finish_reason": "stop",
                                   "message": {"role": "assistant", "content": text}}]}),
            Wire::Anthropic => json!({"type": "message", "stop_reason": "end_turn",
                                      "content": [{"type": "text", "text": text}]}),
        }
        .to_string();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body.as_bytes());
    });
    let client = keyed_client(
        wire,
        &server,
        "CAP_WHOLE",
        json!({"max_response_bytes": CAP}),
    );
    let (result, pieces) = ask(&*client, &hello()).await;
    // A body past the cap is an error.
    llm_error(
        result,
        LlmErrorKind::BadResponse,
        &["[llm] max_response_bytes", &CAP.to_string()],
    );
    assert!(pieces.is_empty(), "{} pieces", pieces.len());
}

async fn the_key_echoed_inside_a_200_is_redacted(wire: Wire) {
    // Quotes are cut at 200 characters: this one cuts the key in the middle.
    let padding = "p".repeat(190);
    let error_event = match wire {
        Wire::OpenAi => sse(
            None,
            &json!({"error": {"message": format!("Incorrect API key provided: {SECRET}"),
                              "type": "invalid_request_error"}})
            .to_string(),
        ),
        Wire::Anthropic => anthropic_event(json!({"type": "error", "error": {
            "type": "authentication_error", "message": format!("invalid x-api-key {SECRET}"),
        }})),
    };
    let stream =
        |events: &str| [head_200("text/event-stream"), opening(wire), events.into()].concat();
    let cases: Vec<(&str, String)> = vec![
        ("an error event", stream(&error_event)),
        (
            "a data line that is not JSON",
            stream(&sse(None, &format!("upstream said: key {SECRET} refused"))),
        ),
        (
            "JSON that does not parse",
            stream(&sse(None, &format!("{{\"choices\": [\"{SECRET}\""))),
        ),
        (
            "a quote cut inside the key",
            stream(&sse(None, &format!("{padding}{SECRET}"))),
        ),
        (
            "a whole JSON error",
            format!(
                "{}{}",
                head_200("application/json; charset=utf-8"),
                json!({"error": {"message": format!("key {SECRET} has no quota")}})
            ),
        ),
        (
            "an HTML page",
            format!(
                "{}<html><body>Your key {SECRET} was refused</body></html>",
                head_200("text/html")
            ),
        ),
    ];
    for (what, reply) in cases {
        let server = RawServer::start(move |stream| {
            let _ = stream.write_all(reply.as_bytes());
        });
        let client = keyed_client(wire, &server, "ECHO", json!({}));
        let result = ask(&*client, &hello()).await.0;
        let message = assert_err_contains(result.as_ref(), &["<redacted>"]);
        assert_no_key(result.as_ref().unwrap_err());
        assert_eq!(server.requests(), 1, "{what}: {message}");
    }
}

async fn a_200_that_is_neither_a_stream_nor_json_is_an_error(wire: Wire) {
    let server = RawServer::start(|stream| {
        let body = "<!DOCTYPE html>\n<html>\n  <body>\x1b[2J\x1b]0;owned\x07Please \
                    <b>sign in</b> to continue\u{202e}</body>\n</html>\n";
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes());
    });
    let client = keyed_client(wire, &server, "HTML", json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    // An HTML page is not an answer.
    let e = llm_error(
        result,
        LlmErrorKind::BadResponse,
        &["text/html; charset=utf-8", "sign in", "text/event-stream"],
    );
    for bad in ['\x1b', '\x07', '\u{202e}', '\n'] {
        assert!(
            !e.message.contains(bad),
            "{bad:?} reached the message: {e:?}"
        );
    }
    assert!(pieces.is_empty(), "{pieces:?}");
    assert_eq!(server.requests(), 1);
}

async fn content_types_with_parameters_are_understood(wire: Wire) {
    let stream_reply = [
        head_200("Text/Event-Stream; charset=UTF-8"),
        opening(wire),
        opening_text_block(wire),
        text_delta(wire, "fine"),
        finishing(wire, "end_turn"),
    ]
    .concat();
    let server = RawServer::start(move |stream| {
        let _ = stream.write_all(stream_reply.as_bytes());
    });
    let client = keyed_client(wire, &server, "PARAMS", json!({}));
    let completion = ask(&*client, &hello()).await.0.expect("a completion");
    assert_eq!(completion.text, "fine");

    // A JSON error in a 200, with a charset: the server's message, not a content-type error.
    let server = RawServer::start(|stream| {
        let body = json!({"error": {"message": "the quota is used up"}}).to_string();
        let reply = format!("{}{body}", head_200("application/json; charset=utf-8"));
        let _ = stream.write_all(reply.as_bytes());
    });
    let client = keyed_client(wire, &server, "PARAMS", json!({}));
    fails(&*client, LlmErrorKind::Server, &["the quota is used up"]).await;
}

/// A stream with some text and a whole tool call, cut before its finish marker.
fn cut_stream(wire: Wire) -> String {
    [
        head_200("text/event-stream"),
        opening(wire),
        opening_text_block(wire),
        text_delta(wire, "Writing it."),
        tool_call(
            wire,
            "c1",
            "file_manager__write",
            &json!({"path": "cut.txt", "content": "x"}),
        ),
    ]
    .concat()
}

async fn a_stream_cut_before_its_finish_marker_is_an_error(wire: Wire) {
    let reply = cut_stream(wire);
    let server = RawServer::start(move |stream| {
        let _ = stream.write_all(reply.as_bytes());
    });
    let client = keyed_client(wire, &server, "CUT", json!({}));
    let (result, pieces) = ask(&*client, &hello()).await;
    let marker = match wire {
        Wire::OpenAi => "[DONE]",
        Wire::Anthropic => "message_stop",
    };
    // A cut stream is not a completion.
    llm_error(
        result,
        LlmErrorKind::Transport,
        &["the model's stream ended before it finished", marker],
    );
    assert_eq!(pieces.concat(), "Writing it.");
    // Not retried: its text already reached the caller.
    assert_eq!(server.requests(), 1);
}

/// Every file under `dir` named `name`.
fn find_named(dir: &Path, name: &str, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_named(&path, name, found);
        } else if entry.file_name() == name {
            found.push(path.display().to_string());
        }
    }
}

async fn a_cut_or_oversized_response_runs_no_tool_in_a_turn(wire: Wire) {
    let call = tool_call(
        wire,
        "c1",
        "file_manager__write",
        &json!({"path": "cut.txt", "content": "x"}),
    );
    let cut = cut_stream(wire);
    let cases: Vec<(&str, Arc<Respond>, &str)> = vec![
        (
            "cut",
            Arc::new(move |stream: &mut TcpStream| {
                let _ = stream.write_all(cut.as_bytes());
            }),
            "ended before it finished",
        ),
        (
            "oversized",
            Arc::new(move |stream: &mut TcpStream| {
                let before = [call.clone(), opening_text_block(wire)].concat();
                stream_past_the_cap(stream, wire, &before)
            }),
            "[llm] max_response_bytes",
        ),
    ];
    for (what, respond, want) in cases {
        let server = RawServer::start(move |stream| respond(stream));
        let dir = tempfile::tempdir().expect("a workspace");
        let mut config = ExecutorConfig::new(dir.path());
        config.permissions.mode = PermissionMode::Full;
        let executor = ToolExecutor::new(config).expect("an executor");
        let llm = keyed_client(wire, &server, "TURN", json!({"max_response_bytes": CAP}));
        let rt = Runtime::new(executor, Ok(llm), RuntimeOptions::default());
        let outcome = rt
            .run_turn("cut", TurnRequest::new("write cut.txt"))
            .await
            .expect("the turn starts");
        assert_eq!(outcome.stop_reason, StopReason::Error, "{what}");
        let session = SessionId::parse("cut").expect("a session id");
        let events = rt.events().since(&session, 0);
        for event in &events {
            assert!(
                !matches!(
                    event.event,
                    RuntimeEvent::ToolCallStarted { .. } | RuntimeEvent::ToolCallFinished { .. }
                ),
                "{what}: a tool ran: {:?}",
                event.event
            );
        }
        let notice = events
            .iter()
            .find_map(|e| match &e.event {
                RuntimeEvent::TurnFinished { notice, .. } => notice.clone(),
                _ => None,
            })
            .unwrap_or_default();
        assert!(notice.contains(want), "{what}: {notice}");
        assert!(!notice.contains(SECRET), "{what}: {notice}");
        let mut found = Vec::new();
        find_named(dir.path(), "cut.txt", &mut found);
        assert!(found.is_empty(), "{what}: the tool ran: {found:?}");
        // Only the user's message is kept: no assistant message from the cut response.
        let conversation = dir.path().join(".toolbox/sessions/cut/messages.jsonl");
        let kept = std::fs::read_to_string(&conversation).unwrap_or_default();
        assert_eq!(kept.lines().count(), 1, "{what}: {kept}");
        assert!(!kept.contains("file_manager__write"), "{what}: {kept}");
        assert_eq!(server.requests(), 1, "{what}");
    }
}
