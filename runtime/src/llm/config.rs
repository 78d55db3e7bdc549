//! `[llm]` and `TOOLBOX_LLM_*`. (Stub: the helper implements loading.)

use std::time::Duration;

use serde_json::Value;

use super::{LlmError, LlmErrorKind};

/// Which wire format the model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LlmProvider {
    /// OpenAI Chat Completions and every compatible server.
    #[default]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

/// The model settings: the `[llm]` table, then `TOOLBOX_LLM_*` variables over it.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// `provider`: `openai` or `anthropic`.
    pub provider: LlmProvider,
    /// `base_url`, as the vendors' SDKs take it, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// `model`.
    pub model: String,
    /// `api_key_env`: the name of the variable holding the key (never the key itself).
    pub api_key_env: String,
    /// `connect_timeout_ms`.
    pub connect_timeout: Duration,
    /// `idle_timeout_ms`: the longest wait for the first byte, or between two stream chunks.
    pub idle_timeout: Duration,
    /// `request_timeout_ms`: the longest a whole response may take.
    pub request_timeout: Duration,
    /// `max_retries` for 429 and 5xx.
    pub max_retries: u32,
    /// `max_tokens` per response (Anthropic requires one).
    pub max_tokens: u32,
}

impl LlmConfig {
    /// Reads `table` (the `[llm]` table, if any) and then the variables `env` returns.
    pub fn from_table(
        table: Option<&Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let _ = (table, env);
        Err(LlmError::new(LlmErrorKind::Config, "not implemented yet"))
    }
}
