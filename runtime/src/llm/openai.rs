//! OpenAI Chat Completions, streamed. (Stub.)

use async_trait::async_trait;
use toolbox_executor::SchemaFormat;

use super::{ChatRequest, Completion, LlmClient, LlmConfig, LlmError, LlmErrorKind, TextSink};

/// A Chat Completions client for any compatible base URL.
pub struct OpenAiClient {
    config: LlmConfig,
}

impl OpenAiClient {
    /// A client for `config`.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        Ok(OpenAiClient { config })
    }
}

#[async_trait]
impl LlmClient for OpenAiClient {
    fn schema_format(&self) -> SchemaFormat {
        SchemaFormat::OpenAi
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
