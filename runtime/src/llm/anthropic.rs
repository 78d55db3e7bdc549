//! Anthropic Messages, streamed.
//!
//! `POST {base_url}/v1/messages` (a `base_url` that already ends in `/v1` is not doubled)
//! with `anthropic-version: 2023-06-01`, the key in `x-api-key` when its variable is set, and
//! `stream: true`.
//!
//! The conversation is converted to the Messages shape:
//!
//! - a user message is `{"role":"user","content":text}`;
//! - an assistant message is a list of blocks: its text (when not empty), then one
//!   `tool_use` block per call whose `input` is the call's arguments parsed. Arguments that
//!   are not a JSON object (the model sent broken JSON, which the executor already told it)
//!   are sent as `{}`, since the API accepts nothing else there;
//! - tool results are `tool_result` blocks of a user message, consecutive ones in one
//!   message, before any user text that follows them;
//! - the API wants user and assistant turns to alternate, so consecutive messages of one
//!   role are merged, and a message with nothing to send (empty text, no calls) is left out.
//!
//! A stream is finished by `message_stop`, or a `message_delta` with a `stop_reason`; one that
//! ends without either was cut, and is an error (its tool calls are never returned).
//!
//! Input tokens are reported as the sum of `input_tokens` and the cache's
//! `cache_creation_input_tokens` and `cache_read_input_tokens`: the whole prompt.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use toolbox_executor::SchemaFormat;

use super::transport::{parse_event_data, parse_json_body, snippet, stream_cut, Transport};
use super::{
    ChatRequest, Completion, LlmClient, LlmConfig, LlmError, LlmErrorKind, Message, TextSink,
    ToolCall, Usage,
};

/// The API version sent in `anthropic-version`.
pub const API_VERSION: &str = "2023-06-01";
/// A Messages API client.
pub struct AnthropicClient {
    transport: Transport,
    url: String,
}

impl AnthropicClient {
    /// A client for `config`, reading the key from the process environment (the variable
    /// named by `api_key_env`) now. Fails when no model is set.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        let key = config.api_key(&toolbox_host::secrets::var);
        Self::with_api_key(config, key)
    }

    /// A client for `config` that sends `key` (none when `None` or empty).
    pub fn with_api_key(config: LlmConfig, key: Option<String>) -> Result<Self, LlmError> {
        let transport = Transport::new(config, key)?;
        let base = transport.config.base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        let url = transport.endpoint(url)?;
        Ok(AnthropicClient { transport, url })
    }

    /// The URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The JSON body sent for `request`.
    pub fn request_body(&self, request: &ChatRequest<'_>) -> Value {
        let model = request.model.unwrap_or(&self.transport.config.model);
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert("max_tokens".into(), json!(self.transport.config.max_tokens));
        if !request.system.is_empty() {
            body.insert("system".into(), json!(request.system));
        }
        body.insert("messages".into(), Value::Array(messages(request.messages)));
        if !request.tools.is_empty() {
            body.insert("tools".into(), Value::Array(request.tools.to_vec()));
        }
        body.insert("stream".into(), json!(true));
        Value::Object(body)
    }

    async fn call(
        &self,
        request: &ChatRequest<'_>,
        on_text: TextSink<'_>,
    ) -> Result<Completion, LlmError> {
        let model = request.model.unwrap_or(&self.transport.config.model);
        let body = self.request_body(request);
        let key = self.transport.key();
        let headers = move |rb: reqwest::RequestBuilder| {
            let rb = rb
                .header("anthropic-version", API_VERSION)
                .header(reqwest::header::ACCEPT, "text/event-stream");
            match key {
                Some(key) => rb.header("x-api-key", key),
                None => rb,
            }
        };
        let reply = self
            .transport
            .send(&self.url, model, &headers, &body)
            .await?;
        let mut events =
            match reply.stream_or_finish(|body| parse_whole(body, &self.url), on_text)? {
                ControlFlow::Continue(events) => events,
                ControlFlow::Break(completion) => return Ok(completion),
            };
        let mut state = StreamState::default();
        let mut stopped = false;
        while let Some(event) = events.next().await? {
            let data = event.data.trim();
            if data.is_empty() {
                continue;
            }
            let value = parse_event_data(data, &self.url)?;
            if state.apply(event.event.as_deref(), &value, on_text)? {
                stopped = true;
                break;
            }
        }
        // A stream that just stops is cut, not finished: its half-sent tool call must not run.
        if !stopped && state.stop_reason.is_empty() {
            let calls = state
                .blocks
                .values()
                .filter(|b| matches!(b, Block::ToolUse { .. }))
                .count();
            return Err(stream_cut(
                &self.url,
                "message_stop or a message_delta with a stop_reason",
                calls,
            ));
        }
        Ok(state.finish())
    }
}

#[async_trait]
impl LlmClient for AnthropicClient {
    fn schema_format(&self) -> SchemaFormat {
        SchemaFormat::Anthropic
    }

    fn provider_name(&self) -> &'static str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.transport.config.model
    }

    async fn complete(
        &self,
        request: ChatRequest<'_>,
        on_text: TextSink<'_>,
    ) -> Result<Completion, LlmError> {
        self.transport.run(self.call(&request, on_text)).await
    }
}

/// The `messages` array; see the [module docs](self).
fn messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::User { content } => (
                "user",
                if content.is_empty() {
                    vec![]
                } else {
                    vec![json!({"type": "text", "text": content})]
                },
            ),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !content.is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for call in tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    }));
                }
                ("assistant", blocks)
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": tool_call_id,
                    "content": content,
                })],
            ),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results must come first in a user turn.
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            let content = match blocks.as_slice() {
                [only] if only["type"] == "text" => only["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({"role": role, "content": content})
        })
        .collect()
}

/// A call's arguments as a `tool_use` input: the parsed object, or `{}`.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => json!({}),
    }
}

/// The usage object's tokens: (whole prompt, output), each `None` when absent.
fn usage_parts(usage: &Value) -> (Option<u64>, Option<u64>) {
    let n = |key: &str| usage.get(key).and_then(Value::as_u64);
    let input = [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| n(k))
    .reduce(|a, b| a + b);
    (input, n("output_tokens"))
}

/// A content block being streamed.
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
        /// The `input` of `content_block_start`, used when no `input_json_delta` follows.
        start_input: Value,
    },
    Other,
}

#[derive(Default)]
struct StreamState {
    text: String,
    blocks: BTreeMap<u64, Block>,
    stop_reason: String,
    usage: Usage,
}

impl StreamState {
    /// Applies one event; `true` at `message_stop`.
    fn apply(
        &mut self,
        name: Option<&str>,
        event: &Value,
        on_text: TextSink<'_>,
    ) -> Result<bool, LlmError> {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .or(name)
            .unwrap_or_default();
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage") {
                    self.set_usage(usage);
                }
            }
            "content_block_start" => {
                let block = event.get("content_block").unwrap_or(&Value::Null);
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                let new = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.push_text(&text("text"), on_text);
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                        start_input: block.get("input").cloned().unwrap_or(Value::Null),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, new);
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        if let Some(text) = delta.get("text").and_then(Value::as_str) {
                            self.push_text(text, on_text);
                            self.blocks.entry(index).or_insert(Block::Text);
                        }
                    }
                    Some("input_json_delta") => {
                        let piece = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        if let Some(Block::ToolUse { json, .. }) = self.blocks.get_mut(&index) {
                            json.push_str(piece);
                        }
                    }
                    _ => {} // thinking, signatures, citations: not kept
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = reason.to_string();
                }
                if let Some(usage) = event.get("usage") {
                    self.set_usage(usage);
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error = event.get("error").unwrap_or(&Value::Null);
                let what = error.get("type").and_then(Value::as_str).unwrap_or("error");
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map_or_else(|| error.to_string(), str::to_string);
                return Err(LlmError::new(
                    LlmErrorKind::Server,
                    format!(
                        "the server reported an error while the answer streamed ({what}): {}",
                        snippet(&message, 1000)
                    ),
                ));
            }
            _ => {} // ping, content_block_stop, and event types added later
        }
        Ok(false)
    }

    fn push_text(&mut self, text: &str, on_text: TextSink<'_>) {
        if !text.is_empty() {
            on_text(text);
            self.text.push_str(text);
        }
    }

    fn set_usage(&mut self, usage: &Value) {
        let (input, output) = usage_parts(usage);
        if let Some(input) = input {
            self.usage.input_tokens = input;
        }
        if let Some(output) = output {
            self.usage.output_tokens = output;
        }
    }

    fn finish(self) -> Completion {
        let tool_calls = self
            .blocks
            .into_values()
            .filter_map(|block| match block {
                Block::ToolUse {
                    id,
                    name,
                    json,
                    start_input,
                } => Some(ToolCall {
                    id,
                    name,
                    arguments: if !json.trim().is_empty() {
                        json
                    } else {
                        match start_input {
                            Value::Object(map) if !map.is_empty() => Value::Object(map).to_string(),
                            _ => "{}".to_string(),
                        }
                    },
                }),
                _ => None,
            })
            .collect();
        Completion {
            text: self.text,
            tool_calls,
            stop_reason: self.stop_reason,
            usage: self.usage,
        }
    }
}

/// A whole (non-streamed) message.
fn parse_whole(body: &[u8], url: &str) -> Result<Completion, LlmError> {
    let value = parse_json_body(body, url)?;
    let mut state = StreamState::default();
    // Anthropic's `{"type":"error",…}`, or a proxy's OpenAI-style `{"error":{…}}`.
    let error_type = value.get("type").and_then(Value::as_str) == Some("error");
    if error_type
        || value
            .get("error")
            .is_some_and(|e| e.is_object() || e.is_string())
    {
        state.apply(Some("error"), &value, &|_| {})?;
    }
    let content = value
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            LlmError::new(
                LlmErrorKind::BadResponse,
                format!(
                    "{url} answered with JSON that has no content: {}",
                    snippet(&value.to_string(), 200)
                ),
            )
        })?;
    let mut completion = Completion::default();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                completion.text.push_str(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                );
            }
            Some("tool_use") => {
                let text = |key: &str| {
                    block
                        .get(key)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                completion.tool_calls.push(ToolCall {
                    id: text("id"),
                    name: text("name"),
                    arguments: block
                        .get("input")
                        .filter(|i| i.is_object())
                        .map_or_else(|| "{}".to_string(), Value::to_string),
                });
            }
            _ => {}
        }
    }
    completion.stop_reason = value
        .get("stop_reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some(usage) = value.get("usage") {
        let (input, output) = usage_parts(usage);
        completion.usage = Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
        };
    }
    Ok(completion)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn client(base_url: &str) -> AnthropicClient {
        let config = LlmConfig {
            provider: super::super::LlmProvider::Anthropic,
            base_url: base_url.to_string(),
            model: "claude-x".to_string(),
            ..LlmConfig::default()
        };
        AnthropicClient::with_api_key(config, None).unwrap()
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn the_url_gets_v1_once() {
        assert_eq!(
            client("https://api.anthropic.com").url(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            client("http://127.0.0.1:9/v1/").url(),
            "http://127.0.0.1:9/v1/messages"
        );
    }

    #[test]
    fn the_conversation_alternates() {
        let history = [
            Message::User {
                content: "hi".into(),
            },
            Message::User {
                content: "there".into(),
            },
            Message::Assistant {
                content: "let me look".into(),
                tool_calls: vec![call("a", "one", "{\"x\":1}"), call("b", "two", "not json")],
            },
            Message::Tool {
                tool_call_id: "a".into(),
                name: "one".into(),
                content: "r1".into(),
            },
            Message::Tool {
                tool_call_id: "b".into(),
                name: "two".into(),
                content: "r2".into(),
            },
            Message::User {
                content: "and?".into(),
            },
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![],
            },
            Message::Assistant {
                content: "done".into(),
                tool_calls: vec![],
            },
        ];
        let c = client("http://127.0.0.1:9");
        let body = c.request_body(&ChatRequest {
            system: "sys",
            messages: &history,
            tools: &[json!({"name": "one"})],
            model: None,
        });
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 4096,
                "system": "sys",
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "hi"}, {"type": "text", "text": "there"}
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "let me look"},
                        {"type": "tool_use", "id": "a", "name": "one", "input": {"x": 1}},
                        {"type": "tool_use", "id": "b", "name": "two", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "r1"},
                        {"type": "tool_result", "tool_use_id": "b", "content": "r2"},
                        {"type": "text", "text": "and?"},
                    ]},
                    {"role": "assistant", "content": "done"},
                ],
                "tools": [{"name": "one"}],
                "stream": true,
            })
        );
        let bare = c.request_body(&ChatRequest {
            system: "",
            messages: &history[..1],
            tools: &[],
            model: Some("other"),
        });
        assert_eq!(
            bare,
            json!({"model": "other", "max_tokens": 4096, "stream": true,
                   "messages": [{"role": "user", "content": "hi"}]})
        );
    }

    #[test]
    fn events_are_assembled() {
        let seen = Mutex::new(Vec::<String>::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_string());
        let mut s = StreamState::default();
        let events = [
            json!({"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":1}}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"one","input":{}}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":":1}"}}),
            json!({"type":"content_block_stop","index":1}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t2","name":"two","input":{}}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":9}}),
        ];
        for e in &events {
            assert!(!s.apply(None, e, &sink).unwrap());
        }
        assert!(s
            .apply(None, &json!({"type": "message_stop"}), &sink)
            .unwrap());
        let c = s.finish();
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
        assert_eq!(c.text, "Hello");
        assert_eq!(c.stop_reason, "tool_use");
        assert_eq!(
            c.usage,
            Usage {
                input_tokens: 15,
                output_tokens: 9
            }
        );
        assert_eq!(
            c.tool_calls,
            vec![call("t1", "one", "{\"a\":1}"), call("t2", "two", "{}")]
        );
    }

    #[test]
    fn an_error_event_is_an_error() {
        let mut s = StreamState::default();
        let e = s
            .apply(
                Some("error"),
                &json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
                &|_| {},
            )
            .unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::Server);
        assert!(e.message.contains("overloaded_error"), "{e}");
        assert!(e.message.contains("Overloaded"), "{e}");
    }

    #[test]
    fn a_whole_message_is_understood() {
        let body = json!({
            "type": "message",
            "content": [{"type": "text", "text": "hi"},
                        {"type": "tool_use", "id": "t", "name": "n", "input": {"q": 1}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 4}
        });
        let c = parse_whole(body.to_string().as_bytes(), "u").unwrap();
        assert_eq!(c.text, "hi");
        assert_eq!(c.tool_calls, vec![call("t", "n", "{\"q\":1}")]);
        assert_eq!(c.usage.input_tokens, 3);
    }
}
