//! OpenAI Chat Completions, streamed.
//!
//! `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`, so the last chunk carries the token counts. The key goes
//! in `Authorization: Bearer …`, and only when its variable is set: local servers (vLLM,
//! Ollama, llama.cpp) usually take none.
//!
//! The answer's length cap is sent as `max_completion_tokens` to `api.openai.com` (its newer
//! models refuse `max_tokens`) and as `max_tokens` everywhere else, since that is what
//! compatible servers understand.
//!
//! A server that ignores `stream: true` and answers with one JSON completion is understood
//! too; its text then reaches the caller in one piece.
//!
//! A stream is finished by `data: [DONE]` or a chunk with a `finish_reason`; one that ends
//! without either was cut, and is an error (its tool calls are never returned).

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

/// A Chat Completions client for any compatible base URL.
pub struct OpenAiClient {
    transport: Transport,
    url: String,
    max_tokens_field: &'static str,
}

impl OpenAiClient {
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
        let url = transport.endpoint(format!("{base}/chat/completions"))?;
        let official = reqwest::Url::parse(&url)
            .ok()
            .and_then(|u| {
                u.host_str()
                    .map(|h| h.eq_ignore_ascii_case("api.openai.com"))
            })
            .unwrap_or(false);
        Ok(OpenAiClient {
            transport,
            url,
            max_tokens_field: if official {
                "max_completion_tokens"
            } else {
                "max_tokens"
            },
        })
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
        body.insert("messages".into(), Value::Array(messages(request)));
        if !request.tools.is_empty() {
            body.insert("tools".into(), Value::Array(request.tools.to_vec()));
        }
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        body.insert(
            self.max_tokens_field.into(),
            json!(self.transport.config.max_tokens),
        );
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
            let rb = rb.header(reqwest::header::ACCEPT, "text/event-stream");
            match key {
                Some(key) => rb.bearer_auth(key),
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
        let mut done = false;
        while let Some(event) = events.next().await? {
            let data = event.data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk = parse_event_data(data, &self.url)?;
            state.apply(&chunk, on_text)?;
        }
        // A stream that just stops is cut, not finished: its half-sent tool call must not run.
        if !done && state.stop_reason.is_empty() {
            return Err(stream_cut(
                &self.url,
                "`data: [DONE]` or a finish_reason",
                state.calls.len(),
            ));
        }
        Ok(state.finish())
    }
}

#[async_trait]
impl LlmClient for OpenAiClient {
    fn schema_format(&self) -> SchemaFormat {
        SchemaFormat::OpenAi
    }

    fn provider_name(&self) -> &'static str {
        "openai"
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

/// The `messages` array: the system prompt, then the conversation.
fn messages(request: &ChatRequest<'_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        out.push(json!({"role": "system", "content": request.system}));
    }
    for message in request.messages {
        out.push(match message {
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                let mut m = Map::new();
                m.insert("role".into(), json!("assistant"));
                m.insert(
                    "content".into(),
                    if content.is_empty() && !tool_calls.is_empty() {
                        Value::Null
                    } else {
                        json!(content)
                    },
                );
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            })
                        })
                        .collect();
                    m.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(m)
            }
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => json!({"role": "tool", "tool_call_id": tool_call_id, "content": content}),
        });
    }
    out
}

/// An `{"error": …}` object a server sent in place of a completion or chunk.
fn error_in(value: &Value) -> Option<LlmError> {
    let error = value.get("error").filter(|e| !e.is_null())?;
    let message = match error {
        Value::String(s) => s.clone(),
        e => e
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| e.to_string()),
    };
    Some(LlmError::new(
        LlmErrorKind::Server,
        format!(
            "the server reported an error in its response: {}",
            snippet(&message, 1000)
        ),
    ))
}

/// Arguments as text: a string as is, anything else (a server that sent an object) as JSON.
fn arguments_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Text `content`: a string, or the text parts of an array.
fn content_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn usage_of(value: &Value) -> Option<Usage> {
    let usage = value.get("usage").filter(|u| u.is_object())?;
    let n = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: n("prompt_tokens"),
        output_tokens: n("completion_tokens"),
    })
}

/// A call being assembled from deltas.
#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct StreamState {
    text: String,
    calls: BTreeMap<u64, PartialCall>,
    /// The index the last delta without one went to.
    last_index: Option<u64>,
    stop_reason: String,
    usage: Usage,
}

impl StreamState {
    fn apply(&mut self, chunk: &Value, on_text: TextSink<'_>) -> Result<(), LlmError> {
        if let Some(e) = error_in(chunk) {
            return Err(e);
        }
        if let Some(usage) = usage_of(chunk) {
            self.usage = usage;
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop_reason = reason.to_string();
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(content) = delta.get("content") {
            let text = content_text(content);
            if !text.is_empty() {
                on_text(&text);
                self.text.push_str(&text);
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty());
            let index = match call.get("index").and_then(Value::as_u64) {
                Some(i) => i,
                // No index (some servers): a new id starts a new call; pieces go to the last.
                None => match (self.last_index, id) {
                    (Some(last), Some(id)) if self.calls.get(&last).is_some_and(|c| c.id != id) => {
                        self.calls.keys().next_back().map_or(0, |k| k + 1)
                    }
                    (Some(last), _) => last,
                    (None, _) => 0,
                },
            };
            self.last_index = Some(index);
            let partial = self.calls.entry(index).or_default();
            if let Some(id) = id {
                partial.id = id.to_string();
            }
            if let Some(function) = call.get("function") {
                if let Some(name) = function.get("name").and_then(Value::as_str) {
                    // Names arrive whole; a server repeating it must not double it.
                    if !partial.name.ends_with(name) || partial.name.is_empty() {
                        partial.name.push_str(name);
                    }
                }
                if let Some(arguments) = function.get("arguments") {
                    partial.arguments.push_str(&arguments_text(arguments));
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Completion {
        Completion {
            text: self.text,
            tool_calls: self
                .calls
                .into_iter()
                .map(|(index, c)| ToolCall {
                    id: if c.id.is_empty() {
                        format!("call_{index}")
                    } else {
                        c.id
                    },
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            stop_reason: self.stop_reason,
            usage: self.usage,
        }
    }
}

/// A whole (non-streamed) completion.
fn parse_whole(body: &[u8], url: &str) -> Result<Completion, LlmError> {
    let value = parse_json_body(body, url)?;
    if let Some(e) = error_in(&value) {
        return Err(e);
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| {
            LlmError::new(
                LlmErrorKind::BadResponse,
                format!(
                    "{url} answered with JSON that has no choices: {}",
                    snippet(&value.to_string(), 200)
                ),
            )
        })?;
    let message = choice.get("message").cloned().unwrap_or(Value::Null);
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| ToolCall {
            id: c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("call_{i}"), str::to_string),
            name: c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            arguments: c
                .pointer("/function/arguments")
                .map(arguments_text)
                .unwrap_or_default(),
        })
        .collect();
    Ok(Completion {
        text: message.get("content").map(content_text).unwrap_or_default(),
        tool_calls,
        stop_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        usage: usage_of(&value).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn client(base_url: &str) -> OpenAiClient {
        let config = LlmConfig {
            base_url: base_url.to_string(),
            model: "m".to_string(),
            ..LlmConfig::default()
        };
        OpenAiClient::with_api_key(config, None).unwrap()
    }

    #[test]
    fn a_model_is_required() {
        let e = OpenAiClient::with_api_key(LlmConfig::default(), None)
            .err()
            .unwrap();
        assert_eq!(e.kind, LlmErrorKind::Config);
        assert!(e.message.contains("set [llm] model or TOOLBOX_LLM_MODEL"));
    }

    #[test]
    fn the_body_has_every_message_kind() {
        let c = client("http://127.0.0.1:1/v1/");
        assert_eq!(c.url(), "http://127.0.0.1:1/v1/chat/completions");
        let messages = [
            Message::User {
                content: "hi".into(),
            },
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "t".into(),
                    arguments: "{\"a\":1}".into(),
                }],
            },
            Message::Tool {
                tool_call_id: "c1".into(),
                name: "t".into(),
                content: "ok".into(),
            },
            Message::Assistant {
                content: "done".into(),
                tool_calls: vec![],
            },
        ];
        let request = ChatRequest {
            system: "be brief",
            messages: &messages,
            tools: &[],
            model: Some("other"),
        };
        assert_eq!(
            c.request_body(&request),
            json!({
                "model": "other",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                    {"role": "assistant", "content": "done"},
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 4096,
            })
        );
        let official = client("https://api.openai.com/v1");
        let body = official.request_body(&ChatRequest {
            system: "",
            messages: &[],
            tools: &[json!({"type": "function"})],
            model: None,
        });
        assert_eq!(body["max_completion_tokens"], json!(4096));
        assert_eq!(body["tools"], json!([{"type": "function"}]));
        assert_eq!(body["messages"], json!([]));
    }

    #[test]
    fn deltas_are_assembled() {
        let seen = Mutex::new(Vec::<String>::new());
        let sink = |t: &str| seen.lock().unwrap().push(t.to_string());
        let mut s = StreamState::default();
        for chunk in [
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}),
            json!({"choices":[{"delta":{"content":"Hel"}}]}),
            json!({"choices":[{"delta":{"content":"lo"}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"two","arguments":""}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"one","arguments":"{\"x\""}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]}}]}),
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}]}),
            json!({"choices":[{"delta":{},"finish_reason":"tool_calls"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}),
        ] {
            s.apply(&chunk, &sink).unwrap();
        }
        let c = s.finish();
        assert_eq!(*seen.lock().unwrap(), ["Hel", "lo"]);
        assert_eq!(c.text, "Hello");
        assert_eq!(c.stop_reason, "tool_calls");
        assert_eq!(
            c.usage,
            Usage {
                input_tokens: 5,
                output_tokens: 7
            }
        );
        let calls: Vec<_> = c
            .tool_calls
            .iter()
            .map(|t| (t.id.as_str(), t.name.as_str(), t.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("a", "one", "{\"x\":1}"), ("b", "two", "{}")]);
    }

    #[test]
    fn an_error_chunk_is_an_error() {
        let mut s = StreamState::default();
        let e = s
            .apply(&json!({"error": {"message": "boom"}}), &|_| {})
            .unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::Server);
        assert!(e.message.contains("boom"));
    }

    #[test]
    fn a_whole_completion_is_understood() {
        let body = json!({
            "choices": [{"message": {"role": "assistant", "content": "hi", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}
            ]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2}
        });
        let c = parse_whole(body.to_string().as_bytes(), "u").unwrap();
        assert_eq!(c.text, "hi");
        assert_eq!(c.tool_calls[0].name, "n");
        assert_eq!(c.stop_reason, "tool_calls");
        assert_eq!(c.usage.output_tokens, 2);
        let e = parse_whole(b"{", "u").unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::BadResponse);
    }
}
