//! The broken messages both MCP transports must answer alike (`toolbox mcp` on stdio,
//! `toolbox serve`'s `/mcp`), one table per error shape, shared by `mcp_framing.rs` (stdio)
//! and `serve_mcp_errors.rs` (HTTP, and both side by side). No case holds a newline: on
//! stdio each is one line.

// Each test file uses some of these helpers, never all.
#![allow(dead_code)]

use serde_json::{json, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// The error shapes, one test each per transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Not UTF-8, not JSON: -32700, id null.
    ParseError,
    /// JSON that is no request object: -32600, the id when usable.
    InvalidRequest,
    /// Nested deeper than the limit (127): -32700, id null.
    DeepNesting,
    /// A served method refusing its params: -32602 with the id.
    InvalidParams,
    /// A method toolbox does not serve: -32601 with the id.
    MethodNotFound,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::ParseError,
        Shape::InvalidRequest,
        Shape::DeepNesting,
        Shape::InvalidParams,
        Shape::MethodNotFound,
    ];

    /// The JSON-RPC code every case of the shape gets.
    pub fn code(self) -> i64 {
        match self {
            Shape::ParseError | Shape::DeepNesting => PARSE_ERROR,
            Shape::InvalidRequest => INVALID_REQUEST,
            Shape::InvalidParams => INVALID_PARAMS,
            Shape::MethodNotFound => METHOD_NOT_FOUND,
        }
    }

    /// The HTTP status `/mcp` answers the shape with: a message that is no request is a bad
    /// request; a request its method refused is answered like any answer.
    pub fn http_status(self) -> u16 {
        match self {
            Shape::ParseError | Shape::DeepNesting | Shape::InvalidRequest => 400,
            Shape::InvalidParams | Shape::MethodNotFound => 200,
        }
    }
}

/// One broken message and what its error must be.
pub struct Case {
    /// What is broken, for failure messages.
    pub what: &'static str,
    /// The message (a line without its newline on stdio, the POST body over HTTP).
    pub body: Vec<u8>,
    /// The id the error must carry.
    pub id: Value,
    /// Pieces the error message must contain (it names what was wrong).
    pub says: &'static [&'static str],
}

fn case(
    what: &'static str,
    body: impl Into<Vec<u8>>,
    id: Value,
    says: &'static [&'static str],
) -> Case {
    let body = body.into();
    assert!(!body.contains(&b'\n'), "{what}: a case is one line");
    Case {
        what,
        body,
        id,
        says,
    }
}

fn call(id: i64, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string()
}

/// `[` × depth, then `]` × depth.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// The cases of one shape.
pub fn cases(shape: Shape) -> Vec<Case> {
    let null = Value::Null;
    match shape {
        Shape::ParseError => vec![
            case(
                "not JSON",
                "this is not json {",
                null.clone(),
                &["Parse error"],
            ),
            case(
                "a truncated request",
                r#"{"jsonrpc":"2.0","id":3,"method":"#,
                null.clone(),
                &["Parse error", "EOF"],
            ),
            case(
                "bytes that are not UTF-8",
                b"\xff\xfe".to_vec(),
                null.clone(),
                &["Parse error", "not valid UTF-8"],
            ),
            case(
                "a request with a string that is not UTF-8",
                b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\",\"x\":\"\xc3\x28\"}".to_vec(),
                null,
                &["Parse error", "not valid UTF-8"],
            ),
        ],
        Shape::InvalidRequest => vec![
            case(
                "{}",
                "{}",
                null.clone(),
                &["Invalid Request", r#""jsonrpc" must be "2.0""#],
            ),
            case(
                "an empty batch []",
                "[]",
                null.clone(),
                &["Invalid Request", "empty array"],
            ),
            case(
                "a batch",
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                null.clone(),
                &["Invalid Request", "batches", "2025-06-18"],
            ),
            case(
                "a number",
                "42",
                null.clone(),
                &["Invalid Request", "got a number"],
            ),
            case(
                "a string",
                r#""ping""#,
                null.clone(),
                &["Invalid Request", "got a string"],
            ),
            case(
                "null",
                "null",
                null.clone(),
                &["Invalid Request", "got null"],
            ),
            case(
                "no method, with an id",
                r#"{"jsonrpc":"2.0","id":5}"#,
                json!(5),
                &["Invalid Request", "method is missing"],
            ),
            case(
                "no method, no id",
                r#"{"jsonrpc":"2.0"}"#,
                null.clone(),
                &["Invalid Request", "method is missing"],
            ),
            case(
                "jsonrpc 1.0",
                r#"{"jsonrpc":"1.0","id":"v","method":"ping"}"#,
                json!("v"),
                &["Invalid Request", r#"not "1.0""#],
            ),
            case(
                "no jsonrpc",
                r#"{"id":2,"method":"ping"}"#,
                json!(2),
                &["Invalid Request", "missing"],
            ),
            case(
                "no jsonrpc, no id",
                r#"{"method":"notifications/initialized"}"#,
                null.clone(),
                &["Invalid Request", "missing"],
            ),
            case(
                "a method that is no string, no id",
                r#"{"jsonrpc":"2.0","method":7}"#,
                null.clone(),
                &["Invalid Request", "method must be a string, not a number"],
            ),
            case(
                "an object id",
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                null.clone(),
                &[
                    "Invalid Request",
                    "id must be a string or an integer, not an object",
                ],
            ),
            case(
                "a null id",
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                null.clone(),
                &["Invalid Request", "not null"],
            ),
            case(
                "a notification whose params are a string",
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#,
                null,
                &["Invalid Request", "params must be an object, not a string"],
            ),
        ],
        Shape::DeepNesting => vec![
            case(
                "10,000 [ unclosed",
                "[".repeat(10_000),
                null.clone(),
                &["Parse error", "nested more than 127 levels"],
            ),
            case(
                "10,000 [ closed",
                nested(10_000),
                null.clone(),
                &["Parse error", "nested more than 127 levels"],
            ),
            case(
                "100,000 objects unclosed",
                r#"{"a":"#.repeat(100_000),
                null.clone(),
                &["Parse error", "nested more than 127 levels"],
            ),
            case(
                "a call whose arguments nest 200 deep",
                format!(
                    r#"{{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{{"name":"file_manager__read","arguments":{{"path":{}}}}}}}"#,
                    nested(200)
                ),
                null,
                &["Parse error", "nested more than 127 levels"],
            ),
        ],
        Shape::InvalidParams => vec![
            case(
                "tools/call arguments a string",
                call(10, json!({"name": "file_manager__read", "arguments": "x"})),
                json!(10),
                &[
                    "Invalid params",
                    "tools/call arguments must be an object",
                    "not a string",
                ],
            ),
            case(
                "tools/call arguments an array",
                call(11, json!({"name": "file_manager__read", "arguments": [1]})),
                json!(11),
                &[
                    "Invalid params",
                    "arguments must be an object",
                    "not an array",
                ],
            ),
            case(
                "tools/call arguments a number",
                call(12, json!({"name": "file_manager__read", "arguments": 3})),
                json!(12),
                &[
                    "Invalid params",
                    "arguments must be an object",
                    "not a number",
                ],
            ),
            case(
                "tools/call without a name",
                call(13, json!({"arguments": {}})),
                json!(13),
                &["Invalid params", "tools/call needs name"],
            ),
            case(
                "tools/call with a number for a name",
                call(14, json!({"name": 3, "arguments": {}})),
                json!(14),
                &[
                    "Invalid params",
                    "tools/call name must be a string, not a number",
                ],
            ),
            case(
                "tools/call without params",
                r#"{"jsonrpc":"2.0","id":15,"method":"tools/call"}"#,
                json!(15),
                &["Invalid params", "tools/call needs params"],
            ),
            case(
                "tools/call with params a string",
                r#"{"jsonrpc":"2.0","id":"p","method":"tools/call","params":"x"}"#,
                json!("p"),
                &["Invalid params", "params must be an object, not a string"],
            ),
            case(
                "tools/call of no tool",
                call(16, json!({"name": "no_such_tool", "arguments": {}})),
                json!(16),
                &["unknown tool: no_such_tool"],
            ),
            case(
                "tools/call arguments with a lone surrogate",
                r#"{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"file_manager__read","arguments":{"path":"\ud800"}}}"#,
                json!(17),
                &["Invalid params", "arguments hold", "lone surrogate"],
            ),
            case(
                "logging/setLevel with an unknown level",
                r#"{"jsonrpc":"2.0","id":18,"method":"logging/setLevel","params":{"level":"LOUD"}}"#,
                json!(18),
                &[
                    "Invalid params",
                    "logging/setLevel needs level, one of debug, info",
                ],
            ),
            case(
                "tools/list with a number for a cursor",
                r#"{"jsonrpc":"2.0","id":19,"method":"tools/list","params":{"cursor":3}}"#,
                json!(19),
                &[
                    "Invalid params",
                    "tools/list cursor must be a string, not a number",
                ],
            ),
            case(
                "tools/list with _meta a string",
                r#"{"jsonrpc":"2.0","id":20,"method":"tools/list","params":{"_meta":"x"}}"#,
                json!(20),
                &[
                    "Invalid params",
                    "tools/list _meta must be an object, not a string",
                ],
            ),
            case(
                "initialize without protocolVersion",
                r#"{"jsonrpc":"2.0","id":21,"method":"initialize","params":{}}"#,
                json!(21),
                &["Invalid params", "initialize needs protocolVersion"],
            ),
        ],
        Shape::MethodNotFound => vec![
            case(
                "an unknown method",
                r#"{"jsonrpc":"2.0","id":30,"method":"no/such/method"}"#,
                json!(30),
                &[
                    "Method not found: toolbox does not offer \"no/such/method\"; it serves \
                   tools (tools/list, tools/call), ping and logging/setLevel",
                ],
            ),
            case(
                "resources/list",
                r#"{"jsonrpc":"2.0","id":"r","method":"resources/list","params":{}}"#,
                json!("r"),
                &["Method not found", "\"resources/list\""],
            ),
            case(
                "prompts/get with bad params",
                r#"{"jsonrpc":"2.0","id":31,"method":"prompts/get","params":{"name":3}}"#,
                json!(31),
                &["Method not found", "\"prompts/get\""],
            ),
        ],
    }
}

/// Messages that get no answer at all (stdio: no line; HTTP: `202` without a body), and
/// leave the connection usable: well-formed notifications whatever their method or params,
/// and responses.
pub fn unanswered() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "an unknown notification",
            r#"{"jsonrpc":"2.0","method":"no/such/notification"}"#,
        ),
        (
            "a cancellation without a request id",
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
        ),
        (
            "a notification holding a lone surrogate",
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\ud800"}}"#,
        ),
        (
            "a response to nothing",
            r#"{"jsonrpc":"2.0","id":99,"result":{}}"#,
        ),
        (
            "an error response without an id",
            r#"{"jsonrpc":"2.0","error":{"code":1,"message":"x"}}"#,
        ),
    ]
}

/// Checks one error reply against its case; returns the error object.
pub fn check_error(shape: Shape, case: &Case, reply: &Value) -> Value {
    let what = case.what;
    assert_eq!(reply["jsonrpc"], "2.0", "{what}: {reply}");
    assert_eq!(reply["id"], case.id, "{what}: {reply}");
    assert!(reply.get("result").is_none(), "{what}: {reply}");
    assert_eq!(reply["error"]["code"], shape.code(), "{what}: {reply}");
    let message = reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no message: {reply}"));
    for piece in case.says {
        assert!(
            message.contains(piece),
            "{what}: {piece:?} not in {message:?}"
        );
    }
    reply["error"].clone()
}
