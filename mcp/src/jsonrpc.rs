//! The JSON-RPC 2.0 checks both MCP transports make before a message reaches a method: one
//! message in, either something to dispatch or the one error to answer with. `toolbox mcp`
//! (stdio, one message per line) and `/mcp` (streamable HTTP, one message per POST body)
//! both use [`parse_message`] and [`check_params`], so a broken message gets the same
//! `error.code` and the same sentence on either.
//!
//! | what arrived | answer | id |
//! |---|---|---|
//! | not UTF-8, not JSON, nested deeper than [`MAX_NESTING`] | -32700 Parse error | null |
//! | JSON that is no request object: `{}`, `[]`, any array (a batch), a number, a string, no `method`, `jsonrpc` not `"2.0"`, an id that is not a string or an integer | -32600 Invalid Request | the request's id when it is a string or an integer, else null |
//! | a request whose `params` is not an object, or whose params are wrong for its method (`tools/call` `arguments` not an object, …) | -32602 Invalid params | the request's |
//! | a request for a method toolbox does not serve | -32601 Method not found ([`crate::method_not_found`]) | the request's |
//! | a well-formed notification, whatever its method or params; a response | nothing | |
//!
//! A message without an id that is not a well-formed notification (no `method`, `jsonrpc`
//! not `"2.0"`, `params` not an object) is no notification at all: it is an invalid request
//! and gets -32600 with id null, as JSON-RPC 2.0 answers `{"jsonrpc": "2.0", "method": 1}`.
//!
//! Batches: MCP 2025-03-26 allowed JSON-RPC batches (arrays); 2025-06-18 removed them, and
//! toolbox answers any array, `[]` included, with one -32600 error (an object, not an array).

use serde_json::Value;

use crate::output::{log_level_rank, LOG_LEVELS};

/// JSON-RPC "Parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC "Invalid Request".
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC "Method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "Invalid params".
pub const INVALID_PARAMS: i64 = -32602;

/// The deepest nesting of arrays and objects a message may have (the message object itself
/// is level 1). Deeper JSON is a parse error that names this limit. It is serde_json's own
/// recursion limit (128 opening brackets fail), so checking costs nothing for a message
/// within it; a unit test pins that the two agree.
pub const MAX_NESTING: usize = 127;

/// A well-formed JSON-RPC message for a dispatcher.
#[derive(Debug)]
pub enum Inbound {
    /// A request: it gets exactly one answer.
    Request {
        /// A string or an integer.
        id: Value,
        /// The method asked for (not checked to be one toolbox serves).
        method: String,
        /// An object, or `Null` when absent.
        params: Value,
    },
    /// A notification: it gets no answer.
    Notification {
        /// The method (not checked to be one toolbox knows).
        method: String,
        /// An object, or `Null` when absent.
        params: Value,
    },
}

/// What one message turned out to be.
#[derive(Debug)]
pub enum Parsed {
    /// A request or notification to dispatch.
    Message(Inbound),
    /// Answer with this error and do nothing else.
    Reject {
        /// The request's id, or `Null` when it has no usable one.
        id: Value,
        /// One of the codes of this module.
        code: i64,
        /// What was wrong, in a sentence that starts with the code's name.
        message: String,
    },
    /// The peer's response to a request of the server (an approval question).
    Response {
        /// The id of the server's request: a string or an integer.
        id: Value,
        /// The result, when it succeeded.
        result: Option<Value>,
        /// The error, when it failed.
        error: Option<Value>,
    },
    /// Needs no answer: a blank message, a response without a usable id, a notification
    /// whose params hold a lone surrogate.
    Ignore,
}

impl Parsed {
    fn reject(id: Value, code: i64, message: String) -> Parsed {
        Parsed::Reject { id, code, message }
    }
}

/// The JSON-RPC error response object for `id`.
pub fn error_response(id: &Value, code: i64, message: &str) -> Value {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": { "code": code, "message": message },
    })
}

/// Reads one message (a line on stdio, a POST body over HTTP) and checks its JSON-RPC
/// envelope. Blank input is [`Parsed::Ignore`]: a transport that must answer it (HTTP) checks
/// for that first.
pub fn parse_message(bytes: &[u8]) -> Parsed {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Parsed::reject(
            Value::Null,
            PARSE_ERROR,
            "Parse error: the message is not valid UTF-8".into(),
        );
    };
    if text.trim().is_empty() {
        return Parsed::Ignore;
    }
    let error = match serde_json::from_str::<Value>(text) {
        Ok(value) => return classify(value),
        Err(error) => error,
    };
    if is_too_deep(&error) {
        return Parsed::reject(Value::Null, PARSE_ERROR, too_deep());
    }
    // serde_json refuses a lone surrogate escape such as "\ud800". The message is otherwise a
    // fine request, so parse it once more with the escapes neutralised, only to learn the id
    // and method the refusal must carry.
    if let Some(repaired) = replace_lone_surrogates(text) {
        if let Ok(value) = serde_json::from_str::<Value>(&repaired) {
            return match classify(value) {
                Parsed::Message(Inbound::Request { id, method, .. }) => {
                    let holder = if method == "tools/call" {
                        "the arguments hold"
                    } else {
                        "the params hold"
                    };
                    Parsed::reject(
                        id,
                        INVALID_PARAMS,
                        format!(
                            "Invalid params: {holder} an invalid \\u escape (a lone surrogate, \
                             which is no character)"
                        ),
                    )
                }
                Parsed::Message(Inbound::Notification { .. }) => Parsed::Ignore,
                other => other,
            };
        }
    }
    Parsed::reject(Value::Null, PARSE_ERROR, format!("Parse error: {error}"))
}

/// serde_json's error for JSON nested deeper than its recursion limit ([`MAX_NESTING`]).
fn is_too_deep(error: &serde_json::Error) -> bool {
    error.is_syntax() && error.to_string().starts_with("recursion limit exceeded")
}

fn too_deep() -> String {
    format!(
        "Parse error: arrays and objects are nested more than {MAX_NESTING} levels deep \
         (the limit)"
    )
}

/// `text` with every `\u` escape of an unpaired UTF-16 surrogate replaced by `\ufffd`, or
/// `None` when there is none. Backslashes only occur inside strings in valid JSON, so
/// walking escape by escape over the whole text is enough.
fn replace_lone_surrogates(text: &str) -> Option<String> {
    fn surrogate_at(bytes: &[u8], i: usize) -> Option<u16> {
        let digits = bytes.get(i..i + 6)?;
        if digits[0] != b'\\' || digits[1] != b'u' {
            return None;
        }
        let hex = std::str::from_utf8(&digits[2..]).ok()?;
        u16::from_str_radix(hex, 16)
            .ok()
            .filter(|n| (0xD800..=0xDFFF).contains(n))
    }

    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut replaced = false;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            i += 1;
            continue;
        }
        match surrogate_at(bytes, i) {
            Some(0xD800..=0xDBFF)
                if surrogate_at(bytes, i + 6).is_some_and(|low| low >= 0xDC00) =>
            {
                i += 12
            }
            Some(_) => {
                out.push_str(&text[copied..i]);
                out.push_str("\\ufffd");
                i += 6;
                copied = i;
                replaced = true;
            }
            // Any other escape is two characters as far as finding the next one goes.
            None => i += 2,
        }
    }
    if !replaced {
        return None;
    }
    out.push_str(&text[copied..]);
    Some(out)
}

/// Checks the JSON-RPC envelope of a parsed message.
fn classify(value: Value) -> Parsed {
    let mut message = match value {
        Value::Object(message) => message,
        Value::Array(items) if items.is_empty() => {
            return Parsed::reject(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: an empty array is no request; send one JSON-RPC request \
                 object per message"
                    .into(),
            )
        }
        Value::Array(_) => {
            return Parsed::reject(
                Value::Null,
                INVALID_REQUEST,
                "Invalid Request: batches (JSON arrays) are not supported (MCP removed them \
                 in 2025-06-18); send one JSON-RPC request object per message"
                    .into(),
            )
        }
        other => {
            return Parsed::reject(
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "Invalid Request: expected a JSON-RPC request object, got {}",
                    json_kind(&other)
                ),
            )
        }
    };
    if !message.contains_key("method")
        && (message.contains_key("result") || message.contains_key("error"))
    {
        // A response is never answered, not even a broken one: the peer is not waiting.
        return match message.remove("id") {
            Some(id @ Value::String(_)) => Parsed::Response {
                id,
                result: message.remove("result"),
                error: message.remove("error"),
            },
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Parsed::Response {
                id: Value::Number(n),
                result: message.remove("result"),
                error: message.remove("error"),
            },
            _ => Parsed::Ignore,
        };
    }
    let id = match message.remove("id") {
        None => Value::Null,
        Some(id @ Value::String(_)) => id,
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Value::Number(n),
        Some(other) => {
            return Parsed::reject(
                Value::Null,
                INVALID_REQUEST,
                format!(
                    "Invalid Request: id must be a string or an integer, not {}",
                    json_kind(&other)
                ),
            )
        }
    };
    // Without an id, what follows makes the message no notification at all (JSON-RPC answers
    // those with id null); with one, the error carries it.
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        let got = match message.get("jsonrpc") {
            None => "it is missing".to_string(),
            Some(Value::String(s)) => format!("not {:?}", shorten(s, 20)),
            Some(other) => format!("not {}", json_kind(other)),
        };
        return Parsed::reject(
            id,
            INVALID_REQUEST,
            format!(r#"Invalid Request: "jsonrpc" must be "2.0", {got}"#),
        );
    }
    let method = match message.remove("method") {
        Some(Value::String(method)) => method,
        Some(other) => {
            return Parsed::reject(
                id,
                INVALID_REQUEST,
                format!(
                    "Invalid Request: method must be a string, not {}",
                    json_kind(&other)
                ),
            )
        }
        None => {
            return Parsed::reject(
                id,
                INVALID_REQUEST,
                "Invalid Request: method is missing".into(),
            )
        }
    };
    let params = match message.remove("params") {
        None => Value::Null,
        Some(params @ (Value::Object(_) | Value::Null)) => params,
        Some(other) => {
            let why = format!("params must be an object, not {}", json_kind(&other));
            return if id.is_null() {
                Parsed::reject(id, INVALID_REQUEST, format!("Invalid Request: {why}"))
            } else {
                Parsed::reject(id, INVALID_PARAMS, format!("Invalid params: {why}"))
            };
        }
    };
    Parsed::Message(if id.is_null() {
        Inbound::Notification { method, params }
    } else {
        Inbound::Request { id, method, params }
    })
}

/// Checks the params of a request for one of the methods toolbox serves (`params` is `Null`
/// when absent); `Err` is the message of a -32602 Invalid params error, naming the member
/// and what was wrong. Other methods' params are not looked at.
pub fn check_params(method: &str, params: &Value) -> Result<(), String> {
    if let Some(meta) = params.get("_meta") {
        if !meta.is_object() && !meta.is_null() {
            return Err(format!(
                "Invalid params: {method} _meta must be an object, not {}",
                json_kind(meta)
            ));
        }
    }
    match method {
        "initialize" => match params.get("protocolVersion") {
            Some(Value::String(_)) => Ok(()),
            Some(other) => Err(format!(
                "Invalid params: initialize protocolVersion must be a string, not {}",
                json_kind(other)
            )),
            None => Err("Invalid params: initialize needs protocolVersion (a string)".into()),
        },
        "tools/call" => check_call_params(params),
        "tools/list" => match params.get("cursor") {
            None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
            Some(other) => Err(format!(
                "Invalid params: tools/list cursor must be a string, not {}",
                json_kind(other)
            )),
        },
        "logging/setLevel" => log_level(params).map(drop),
        _ => Ok(()),
    }
}

fn check_call_params(params: &Value) -> Result<(), String> {
    if !params.is_object() {
        return Err(
            "Invalid params: tools/call needs params, an object with the tool's name".into(),
        );
    }
    match params.get("name") {
        Some(Value::String(_)) => {}
        Some(other) => {
            return Err(format!(
                "Invalid params: tools/call name must be a string, not {}",
                json_kind(other)
            ))
        }
        None => return Err("Invalid params: tools/call needs name (the tool's name)".into()),
    }
    match params.get("arguments") {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(other) => Err(format!(
            "Invalid params: tools/call arguments must be an object (the tool's arguments \
             by name), not {}",
            json_kind(other)
        )),
    }
}

/// The tool name and arguments (an object, `{}` when absent) of `tools/call`, or the
/// message of an Invalid params error (see [`check_params`]).
pub fn call_params(params: Value) -> Result<(String, Value), String> {
    check_call_params(&params)?;
    let Value::Object(mut params) = params else {
        unreachable!("checked to be an object");
    };
    let Some(Value::String(name)) = params.remove("name") else {
        unreachable!("checked to be a string");
    };
    let arguments = match params.remove("arguments") {
        Some(arguments @ Value::Object(_)) => arguments,
        _ => Value::Object(Default::default()),
    };
    Ok((name, arguments))
}

/// The rank in [`LOG_LEVELS`] of `logging/setLevel`'s level, or the message of an Invalid
/// params error.
pub fn log_level(params: &Value) -> Result<u8, String> {
    let level = params.get("level").and_then(Value::as_str);
    level.and_then(log_level_rank).ok_or_else(|| {
        format!(
            "Invalid params: logging/setLevel needs level, one of {}",
            LOG_LEVELS.join(", ")
        )
    })
}

/// The -32602 message for a `tools/call` of a name that is no tool (shown up to 200
/// characters).
pub fn unknown_tool(name: &str) -> String {
    format!("unknown tool: {}", shorten(name, 200))
}

fn shorten(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// "a string", "an array", … for messages (core's one naming of JSON kinds).
pub use toolbox_core::json_kind;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rejected(message: &str) -> Option<(Value, i64, String)> {
        match parse_message(message.as_bytes()) {
            Parsed::Reject { id, code, message } => Some((id, code, message)),
            _ => None,
        }
    }

    fn code(message: &str) -> Option<(Value, i64)> {
        rejected(message).map(|(id, code, _)| (id, code))
    }

    #[test]
    fn only_lone_surrogates_are_replaced() {
        assert_eq!(
            replace_lone_surrogates(r#""\ud83d\ude00 \n \\ud800""#),
            None
        );
        assert_eq!(
            replace_lone_surrogates(r#""\ud800x\udc00\ud800\u0041""#).as_deref(),
            Some(r#""\ufffdx\ufffd\ufffd\u0041""#)
        );
        // A high surrogate followed by another high one: the first is lone, the pair after
        // it is fine.
        assert_eq!(
            replace_lone_surrogates(r#""\uD800\uD83D\uDE00""#).as_deref(),
            Some(r#""\ufffd\uD83D\uDE00""#)
        );
    }

    #[test]
    fn lone_surrogate_in_arguments_is_invalid_params_with_the_id() {
        let line = r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","arguments":{"s":"\ud800"}}}"#;
        let (id, code, message) = rejected(line).unwrap();
        assert_eq!(id, json!("a"));
        assert_eq!(code, INVALID_PARAMS);
        assert!(message.contains("lone surrogate"), "{message}");
    }

    #[test]
    fn envelope_errors() {
        assert_eq!(code("nope"), Some((Value::Null, PARSE_ERROR)));
        assert_eq!(code("[]"), Some((Value::Null, INVALID_REQUEST)));
        assert_eq!(
            code(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        assert_eq!(code("{}"), Some((Value::Null, INVALID_REQUEST)));
        assert_eq!(code("3"), Some((Value::Null, INVALID_REQUEST)));
        assert_eq!(code("null"), Some((Value::Null, INVALID_REQUEST)));
        assert_eq!(
            code(r#"{"id":1,"method":"ping"}"#),
            Some((json!(1), INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":2}"#),
            Some((json!(1), INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
            Some((json!(1), INVALID_PARAMS))
        );
        // Without an id these are no notifications: invalid requests, id null.
        assert_eq!(
            code(r#"{"method":"notifications/x"}"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","method":7}"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","method":"x","params":"s"}"#),
            Some((Value::Null, INVALID_REQUEST))
        );
        // Well-formed notifications and responses get no answer.
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","method":"notifications/x"}"#),
            None
        );
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), None);
        assert_eq!(code(r#"{"jsonrpc":"2.0","result":{}}"#), None);
        assert_eq!(code("   "), None);
    }

    #[test]
    fn messages_name_what_was_wrong() {
        let message = |line: &str| rejected(line).unwrap().2;
        assert_eq!(
            message("{}"),
            r#"Invalid Request: "jsonrpc" must be "2.0", it is missing"#
        );
        assert_eq!(
            message(r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
            r#"Invalid Request: "jsonrpc" must be "2.0", not "1.0""#
        );
        assert_eq!(
            message(r#"{"jsonrpc":"2.0","id":1}"#),
            "Invalid Request: method is missing"
        );
        assert!(message("[]").contains("empty array"));
        assert!(message("[1]").contains("batches"));
        assert!(message(&"[".repeat(10_000)).contains("nested more than 127 levels"));
    }

    #[test]
    fn the_nesting_limit_is_serde_jsons() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // 127 levels parse (and are then no request); 128 do not.
        assert_eq!(
            code(&nested(MAX_NESTING)),
            Some((Value::Null, INVALID_REQUEST))
        );
        let (_, got, message) = rejected(&nested(MAX_NESTING + 1)).unwrap();
        assert_eq!(got, PARSE_ERROR);
        assert_eq!(message, too_deep());
        // Inside a request, too.
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{"a":{}}}}}}}"#,
            nested(200)
        );
        assert_eq!(rejected(&deep).unwrap().1, PARSE_ERROR);
        // Unclosed objects, very deep: one parse error, found at the limit.
        assert_eq!(
            code(&"{\"a\":".repeat(100_000)),
            Some((Value::Null, PARSE_ERROR))
        );
    }

    #[test]
    fn call_params_are_checked() {
        let err = call_params(json!({"name": "x", "arguments": "x"})).unwrap_err();
        assert!(
            err.contains("tools/call arguments must be an object") && err.ends_with("a string"),
            "{err}"
        );
        assert!(call_params(json!({"arguments": {}})).is_err());
        assert!(call_params(json!({"name": 3})).is_err());
        assert!(call_params(Value::Null).is_err());
        assert_eq!(
            call_params(json!({"name": "x"})).unwrap(),
            ("x".to_string(), json!({}))
        );
        assert_eq!(
            call_params(json!({"name": "x", "arguments": null})).unwrap(),
            ("x".to_string(), json!({}))
        );
    }

    #[test]
    fn params_of_the_served_methods_are_checked() {
        assert!(check_params("tools/list", &Value::Null).is_ok());
        assert!(check_params("tools/list", &json!({"cursor": 3})).is_err());
        assert!(check_params("ping", &Value::Null).is_ok());
        assert!(check_params("initialize", &json!({})).is_err());
        assert!(check_params("initialize", &json!({"protocolVersion": "x"})).is_ok());
        assert!(check_params("logging/setLevel", &json!({"level": "INFO"})).is_err());
        assert!(check_params("tools/list", &json!({"_meta": "x"}))
            .unwrap_err()
            .contains("_meta must be an object"));
        assert!(check_params("no/such", &json!({"anything": 1})).is_ok());
    }

    #[test]
    fn log_levels_are_mcp_names() {
        assert_eq!(log_level(&json!({"level": "debug"})), Ok(0));
        assert_eq!(log_level(&json!({"level": "info"})), Ok(1));
        assert_eq!(log_level(&json!({"level": "emergency"})), Ok(7));
        assert!(log_level(&json!({"level": "INFO"})).is_err());
        assert!(log_level(&Value::Null).unwrap_err().contains("debug, info"));
    }

    #[test]
    fn unknown_tool_names_are_shortened() {
        assert_eq!(unknown_tool("x"), "unknown tool: x");
        assert_eq!(unknown_tool(&"é".repeat(500)).chars().count(), 215);
    }
}
