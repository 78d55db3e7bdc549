//! LLM clients: one provider-neutral conversation, two wire formats.
//!
//! - [`openai`]: Chat Completions, streamed (`stream: true`), any compatible base URL
//!   (OpenAI, vLLM, Ollama, DeepSeek, …).
//! - [`anthropic`]: the Messages API, streamed.
//!
//! Both take a [`ChatRequest`] and return a [`Completion`], handing text to the caller as it
//! streams. They retry 429 and 5xx with backoff (honouring `Retry-After`) a bounded number of
//! times and fail with an [`LlmError`] that says what went wrong without ever showing the
//! key. [`LlmConfig`] is the `[llm]` table plus `TOOLBOX_LLM_*`.
//!
//! A completion is whole or it is an error: a response past `[llm] max_response_bytes`, a 2xx
//! that is neither an event stream nor JSON, and a stream that ends before its finish marker
//! all fail, so no tool call from a partial answer ever reaches the turn. The private
//! `transport` module is the HTTP side both clients share: the request loop, bodies read
//! under the cap, and the one place (`Transport::scrub`) every error text passes through to
//! be redacted and made safe to print; `retry` is its retry policy.

pub mod anthropic;
mod config;
pub mod openai;
mod retry;
pub mod sse;
mod transport;

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolbox_executor::SchemaFormat;

pub use config::{LlmConfig, LlmProvider};

/// One message of a conversation, as persisted in `messages.jsonl` and sent to a model.
///
/// The system prompt is not a message: it belongs to the agent and goes in
/// [`ChatRequest::system`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// What the user said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the model only called tools).
        #[serde(default)]
        content: String,
        /// The tools the model asked for, in its order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool's answer to one call: the executor's `{"status","result"}` string.
    Tool {
        /// The id of the call it answers.
        tool_call_id: String,
        /// The tool's name as the model called it.
        name: String,
        /// The envelope the model reads.
        content: String,
    },
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call; the tool message answering it carries the same id.
    pub id: String,
    /// The tool's name as the model wrote it.
    pub name: String,
    /// The arguments as the model sent them: JSON text, possibly invalid (the executor says
    /// so to the model). Anthropic's parsed `input` is kept as its JSON text.
    pub arguments: String,
}

/// One request to a model.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The agent's system prompt.
    pub system: &'a str,
    /// The conversation so far, oldest first.
    pub messages: &'a [Message],
    /// The tools, already rendered in the client's [`LlmClient::schema_format`].
    pub tools: &'a [Value],
    /// A model other than the configured one (an agent's `model`).
    pub model: Option<&'a str>,
}

/// Tokens a response used, as the server reported them (0 when it did not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// A whole response, after its stream ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Completion {
    /// All text deltas joined.
    pub text: String,
    /// The tool calls, in the order the model gave them (several for parallel calls).
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped, as the server said it (`stop`, `tool_calls`, `end_turn`, …).
    pub stop_reason: String,
    /// Tokens used.
    pub usage: Usage,
}

/// What kind of failure an [`LlmError`] is, for programs; people read its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmErrorKind {
    /// No key, or the server refused it (401/403).
    Auth,
    /// The server does not know the model.
    UnknownModel,
    /// Still 429 after every retry.
    RateLimited,
    /// Still 5xx after every retry, or another refusal (4xx) with the server's message.
    Server,
    /// The response (or a stream event) did not parse, was neither an event stream nor JSON,
    /// or was larger than `[llm] max_response_bytes`.
    BadResponse,
    /// Could not connect, or the connection broke, or the stream ended before it finished.
    Transport,
    /// No answer, or no stream data, within the configured time.
    Timeout,
    /// The settings are wrong (an unknown provider, a bad URL); nothing was sent.
    Config,
}

impl LlmErrorKind {
    /// Its name as JSON has it (`rate_limited`, …): the `error.type` of a `chat` span.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmErrorKind::Auth => "auth",
            LlmErrorKind::UnknownModel => "unknown_model",
            LlmErrorKind::RateLimited => "rate_limited",
            LlmErrorKind::Server => "server",
            LlmErrorKind::BadResponse => "bad_response",
            LlmErrorKind::Transport => "transport",
            LlmErrorKind::Timeout => "timeout",
            LlmErrorKind::Config => "config",
        }
    }
}

/// A failed model request. The message never contains the API key (nor a quoted start of
/// it), also where it quotes a response, and has its control characters escaped.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct LlmError {
    /// What kind of failure.
    pub kind: LlmErrorKind,
    /// What went wrong and what to do, for people.
    pub message: String,
}

impl LlmError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: LlmErrorKind, message: impl Into<String>) -> Self {
        LlmError {
            kind,
            message: message.into(),
        }
    }
}

/// Receives the text of a response while it streams.
pub type TextSink<'a> = &'a (dyn Fn(&str) + Send + Sync);

/// A model behind one wire format.
#[async_trait]
pub trait LlmClient: Send + Sync {
    /// The schema dialect its tools must be rendered in.
    fn schema_format(&self) -> SchemaFormat;

    /// The configured model's name.
    fn model(&self) -> &str;

    /// The provider as OpenTelemetry's `gen_ai.provider.name` says it (`openai`,
    /// `anthropic`).
    fn provider_name(&self) -> &'static str;

    /// Sends `request`, streams its text to `on_text`, and returns the whole response.
    /// Dropping the future cancels the request.
    async fn complete(
        &self,
        request: ChatRequest<'_>,
        on_text: TextSink<'_>,
    ) -> Result<Completion, LlmError>;
}

/// The client `config` describes.
pub fn client(config: &LlmConfig) -> Result<Arc<dyn LlmClient>, LlmError> {
    Ok(match config.provider {
        LlmProvider::OpenAi => Arc::new(openai::OpenAiClient::new(config.clone())?),
        LlmProvider::Anthropic => Arc::new(anthropic::AnthropicClient::new(config.clone())?),
    })
}

/// Like [`client`], reading the key through `env` (as [`LlmConfig::from_table`] reads the
/// settings) instead of the process environment: `env(&config.api_key_env)`.
pub fn client_with_env(
    config: &LlmConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn LlmClient>, LlmError> {
    let key = config.api_key(env);
    Ok(match config.provider {
        LlmProvider::OpenAi => Arc::new(openai::OpenAiClient::with_api_key(config.clone(), key)?),
        LlmProvider::Anthropic => Arc::new(anthropic::AnthropicClient::with_api_key(
            config.clone(),
            key,
        )?),
    })
}
