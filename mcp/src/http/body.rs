//! The POST body checks of `/mcp`: a body that is no message rmcp should see is answered
//! here with the JSON-RPC error `toolbox mcp` gives the same message on stdio.

use axum::response::IntoResponse;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, InitializeRequestParams,
    PaginatedRequestParams,
};
// MCP logging is deprecated by SEP-2577 (rmcp marks it so); both transports offer it until
// clients stop asking for it.
#[allow(deprecated)]
use rmcp::model::SetLevelRequestParams;
use serde_json::Value;

use crate::jsonrpc;

/// The largest POST body read, as rmcp's own limit: 4 MiB.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Answers a POST whose body is not a message rmcp should see with the JSON-RPC error
/// `toolbox mcp` gives the same message on stdio ([`jsonrpc::parse_message`],
/// [`jsonrpc::check_params`]), as `application/json`:
///
/// - `400` with -32700 (Parse error, id null) for an empty body, one that is not UTF-8 or
///   not JSON, or JSON nested deeper than [`jsonrpc::MAX_NESTING`];
/// - `400` with -32600 (Invalid Request) for JSON that is no request object (`{}`, `[]`, a
///   batch, a number, no `method`, `jsonrpc` not `"2.0"`), with the request's id when it
///   has a usable one, else null;
/// - `200` with -32601 (Method not found) for a request of a method toolbox does not serve,
///   and with -32602 (Invalid params) for a served method whose params are wrong (`tools/call`
///   `arguments` not an object, …): the request was fine, the method refused it;
/// - `202` with no body for what needs no answer and rmcp would not read (a notification
///   holding a lone surrogate, a response without a usable id);
/// - `413` for a body over [`MAX_BODY_BYTES`].
///
/// rmcp alone answers most of these `415 Unsupported Media Type` in plain text, and a served
/// method with params it cannot read as "method not found". Everything else goes to rmcp
/// untouched.
pub(super) async fn check_post_body(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Value::Null,
            jsonrpc::INVALID_REQUEST,
            &format!(
                "Invalid Request: the body is over the limit of {MAX_BODY_BYTES} bytes (4 MiB) \
                 or could not be read"
            ),
        )
    };
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return too_large();
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            &Value::Null,
            jsonrpc::PARSE_ERROR,
            "Parse error: the body is empty; send one JSON-RPC message",
        );
    }
    match jsonrpc::parse_message(&bytes) {
        jsonrpc::Parsed::Reject { id, code, message } => {
            tracing::debug!("mcp: rejected a message: {message}");
            // A request that was well-formed but refused by its method is answered like any
            // other answer; a message that is no request at all is a bad request.
            let status = if code == jsonrpc::PARSE_ERROR || code == jsonrpc::INVALID_REQUEST {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            return jsonrpc_error(status, &id, code, &message);
        }
        jsonrpc::Parsed::Ignore => return StatusCode::ACCEPTED.into_response(),
        jsonrpc::Parsed::Message(jsonrpc::Inbound::Request { id, method, params }) => {
            // A request for a method this server does not offer is answered here, in a
            // sentence that names it (rmcp would answer with the bare method name and log a
            // warning for each).
            if !crate::SERVED_METHODS.contains(&method.as_str()) {
                tracing::debug!("mcp: method not offered: {method}");
                return jsonrpc_error(
                    StatusCode::OK,
                    &id,
                    jsonrpc::METHOD_NOT_FOUND,
                    &crate::method_not_found(&method),
                );
            }
            if let Err(message) = jsonrpc::check_params(&method, &params) {
                return jsonrpc_error(StatusCode::OK, &id, jsonrpc::INVALID_PARAMS, &message);
            }
            if let Some((code, message)) = unreadable_for_rmcp(&bytes, &method, &params) {
                let status = if code == jsonrpc::INVALID_REQUEST {
                    StatusCode::BAD_REQUEST
                } else {
                    StatusCode::OK
                };
                return jsonrpc_error(status, &id, code, &message);
            }
        }
        jsonrpc::Parsed::Message(jsonrpc::Inbound::Notification { .. })
        | jsonrpc::Parsed::Response { .. } => {
            if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
                return jsonrpc_error(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    jsonrpc::INVALID_REQUEST,
                    &format!("Invalid Request: the message does not fit the MCP schema ({e})"),
                );
            }
        }
    }
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    next.run(request).await
}

/// Why rmcp cannot read a request for a served method that passed
/// [`jsonrpc::check_params`], as the code and message of the error to answer; `None` when it
/// can. rmcp would take a request whose params it cannot read for one of a method it does
/// not know and answer "method not found". Only the checks of [`jsonrpc::check_params`] are
/// shared with stdio; this is rmcp's own, stricter schema (`initialize` needs
/// `capabilities` and `clientInfo`, a numeric id must fit in 64 signed bits).
fn unreadable_for_rmcp(bytes: &[u8], method: &str, params: &Value) -> Option<(i64, String)> {
    match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(rmcp::model::JsonRpcMessage::Request(request))
            if !matches!(request.request, ClientRequest::CustomRequest(_)) =>
        {
            return None
        }
        Ok(_) => {}
        Err(e) => {
            return Some((
                jsonrpc::INVALID_REQUEST,
                format!("Invalid Request: the message does not fit the MCP schema ({e})"),
            ))
        }
    }
    fn why<T: serde::de::DeserializeOwned>(params: &Value) -> Option<String> {
        T::deserialize(params).err().map(|e| e.to_string())
    }
    #[allow(deprecated)]
    let why = match method {
        "initialize" => why::<InitializeRequestParams>(params),
        "tools/call" => why::<CallToolRequestParams>(params),
        "tools/list" => why::<PaginatedRequestParams>(params),
        "logging/setLevel" => why::<SetLevelRequestParams>(params),
        _ => None,
    };
    let message = match why {
        Some(why) => format!("Invalid params: {method} params do not fit the MCP schema ({why})"),
        None => format!("Invalid params: {method} params do not fit the MCP schema"),
    };
    Some((jsonrpc::INVALID_PARAMS, message))
}

/// A JSON-RPC error response, as `application/json`.
fn jsonrpc_error(
    status: axum::http::StatusCode,
    id: &Value,
    code: i64,
    message: &str,
) -> axum::response::Response {
    let body = jsonrpc::error_response(id, code, message);
    (status, axum::Json(body)).into_response()
}
