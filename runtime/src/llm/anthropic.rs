//! Anthropic Messages, streamed. (Stub.)

use async_trait::async_trait;
use toolbox_executor::SchemaFormat;

use super::{ChatRequest, Completion, LlmClient, LlmConfig, LlmError, LlmErrorKind, TextSink};

/// A Messages API client.
pub struct AnthropicClient {
    config: LlmConfig,
}

impl AnthropicClient {
    /// A client for `config`.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        Ok(AnthropicClient { config })
    }
}

#[async_trait]
impl LlmClient for AnthropicClient {
    fn schema_format(&self) -> SchemaFormat {
        SchemaFormat::Anthropic
    }
    fn model(&self) -> &str {
        &self.config.model
    }
    async fn complete(
        &self,
        _request: ChatRequest<'_>,
        _on_text: TextSink<'_>,
    ) -> Result<Completion, LlmError> {
        Err(LlmError::new(LlmErrorKind::Config, "not implemented yet"))
    }
}
