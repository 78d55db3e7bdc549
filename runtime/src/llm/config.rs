//! `[llm]` and `TOOLBOX_LLM_*`: which server, which model, which key variable, and how long
//! to wait.
//!
//! The table is read first (unknown keys and wrong types are refused, naming the key), then
//! each `TOOLBOX_LLM_*` variable that is set and non-empty replaces its key. Defaults that
//! depend on the provider (`base_url`, `api_key_env`) are filled in last, so
//! `TOOLBOX_LLM_PROVIDER=anthropic` alone is enough to talk to Anthropic.

use std::time::Duration;

use serde_json::Value;
use toolbox_core::config_table::KeyKind;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};

use super::{LlmError, LlmErrorKind};

/// The default `base_url` for [`LlmProvider::OpenAi`].
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// The default `base_url` for [`LlmProvider::Anthropic`] (without `/v1`, as the vendor's SDK
/// takes it; one ending in `/v1` is accepted too).
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The default `connect_timeout_ms`.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// The default `idle_timeout_ms`.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// The default `request_timeout_ms`.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 600_000;
/// The default `max_retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// The default `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// The default `max_response_bytes`: 8 MiB, far more than any answer of `max_tokens` needs.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 * 1024 * 1024;
/// The largest `max_retries` accepted.
const MAX_MAX_RETRIES: u64 = 20;
/// The smallest `max_response_bytes` accepted: below it even a short answer would not fit.
const MIN_MAX_RESPONSE_BYTES: u64 = 1024;
/// The largest `max_response_bytes` accepted: 1 GiB.
const MAX_MAX_RESPONSE_BYTES: u64 = 1024 * 1024 * 1024;

const U32_MAX: u64 = u32::MAX as u64;
const PROVIDER: Key = Key::string("provider");
const BASE_URL: Key = Key::string("base_url");
const MODEL: Key = Key::string("model");
const API_KEY_ENV: Key = Key::string("api_key_env");
const CONNECT_TIMEOUT_MS: Key = Key::integer("connect_timeout_ms", 1, U32_MAX)
    .workspace(Tighten::AtMost(DEFAULT_CONNECT_TIMEOUT_MS));
const IDLE_TIMEOUT_MS: Key =
    Key::integer("idle_timeout_ms", 1, U32_MAX).workspace(Tighten::AtMost(DEFAULT_IDLE_TIMEOUT_MS));
const REQUEST_TIMEOUT_MS: Key = Key::integer("request_timeout_ms", 1, U32_MAX)
    .workspace(Tighten::AtMost(DEFAULT_REQUEST_TIMEOUT_MS));
const MAX_RETRIES: Key = Key::integer("max_retries", 0, MAX_MAX_RETRIES)
    .workspace(Tighten::AtMost(DEFAULT_MAX_RETRIES as u64));
const MAX_TOKENS: Key =
    Key::integer("max_tokens", 1, U32_MAX).workspace(Tighten::AtMost(DEFAULT_MAX_TOKENS as u64));
const MAX_RESPONSE_BYTES: Key = Key::integer(
    "max_response_bytes",
    MIN_MAX_RESPONSE_BYTES,
    MAX_MAX_RESPONSE_BYTES,
)
.workspace(Tighten::AtMost(DEFAULT_MAX_RESPONSE_BYTES));

/// The `[llm]` table. What an untrusted workspace's toolbox.toml may set: shorter timeouts,
/// fewer retries, shorter answers, smaller responses. The provider, URL, model and key
/// variable are the operator's alone: a repository must not redirect prompts or keys to a
/// server of its choosing.
pub const TABLE: Table = Table::new(
    "llm",
    &[
        PROVIDER,
        BASE_URL,
        MODEL,
        API_KEY_ENV,
        CONNECT_TIMEOUT_MS,
        IDLE_TIMEOUT_MS,
        REQUEST_TIMEOUT_MS,
        MAX_RETRIES,
        MAX_TOKENS,
        MAX_RESPONSE_BYTES,
    ],
);
toolbox_core::register_table!(TABLE);

/// Which wire format the model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LlmProvider {
    /// OpenAI Chat Completions and every compatible server.
    #[default]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl LlmProvider {
    /// The provider's name in `[llm] provider`: `openai` or `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            LlmProvider::OpenAi => "openai",
            LlmProvider::Anthropic => "anthropic",
        }
    }

    /// The `base_url` used when none is set.
    pub fn default_base_url(self) -> &'static str {
        match self {
            LlmProvider::OpenAi => OPENAI_BASE_URL,
            LlmProvider::Anthropic => ANTHROPIC_BASE_URL,
        }
    }

    /// The `api_key_env` used when none is set.
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            LlmProvider::OpenAi => "OPENAI_API_KEY",
            LlmProvider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "openai" => Some(LlmProvider::OpenAi),
            "anthropic" => Some(LlmProvider::Anthropic),
            _ => None,
        }
    }
}

/// The model settings: the `[llm]` table, then `TOOLBOX_LLM_*` variables over it.
///
/// It holds the *name* of the variable with the key, never the key, so printing it is safe.
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
    /// `max_response_bytes`: the most bytes of one response body (streamed or not) read
    /// before the completion fails; bounds memory and what could reach `messages.jsonl`.
    pub max_response_bytes: u64,
}

impl Default for LlmConfig {
    /// The defaults for OpenAI, with no model.
    fn default() -> Self {
        let provider = LlmProvider::OpenAi;
        LlmConfig {
            provider,
            base_url: provider.default_base_url().to_string(),
            model: String::new(),
            api_key_env: provider.default_api_key_env().to_string(),
            connect_timeout: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            max_retries: DEFAULT_MAX_RETRIES,
            max_tokens: DEFAULT_MAX_TOKENS,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

fn config_error(message: impl Into<String>) -> LlmError {
    LlmError::new(LlmErrorKind::Config, message)
}

impl LlmConfig {
    /// Reads `table` (the `[llm]` table, if any) and then the variables `env` returns.
    ///
    /// `env` is how variables are read (`|name| std::env::var(name).ok()` in a program); a
    /// variable set to the empty string counts as not set.
    pub fn from_table(
        table: Option<&Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LlmError> {
        let t = TABLE
            .read_value(table)
            .map_err(|e| config_error(e.to_string()))?;
        let string = |key: &Key| -> Result<Option<String>, LlmError> {
            key.str(&t)
                .map(|s| s.map(str::to_string))
                .map_err(|e| config_error(e.to_string()))
        };
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());

        // The provider first: the defaults of base_url and api_key_env follow it.
        let mut provider = LlmProvider::default();
        if let Some(name) = string(&PROVIDER)? {
            provider = LlmProvider::parse(&name).ok_or_else(|| {
                config_error(format!(
                    "[llm] provider must be \"openai\" or \"anthropic\", got {name:?}"
                ))
            })?;
        }
        if let Some(name) = var("TOOLBOX_LLM_PROVIDER") {
            provider = LlmProvider::parse(&name).ok_or_else(|| {
                config_error(format!(
                    "TOOLBOX_LLM_PROVIDER must be \"openai\" or \"anthropic\", got {name:?}"
                ))
            })?;
        }

        // Each value with where it came from, for the error messages.
        let pick_string =
            |key: &Key, var_name: &str| -> Result<Option<(String, String)>, LlmError> {
                if let Some(v) = var(var_name) {
                    return Ok(Some((v, var_name.to_string())));
                }
                Ok(string(key)?.map(|v| (v, format!("[llm] {}", key.name))))
            };
        // A variable is held to the bounds its key declares.
        let pick_number = |key: &Key, var_name: &str| -> Result<Option<u64>, LlmError> {
            let KeyKind::Integer { min, max } = key.kind else {
                unreachable!("[llm] {} is a number", key.name)
            };
            if let Some(v) = var(var_name) {
                let n: u64 = v.trim().parse().map_err(|_| {
                    config_error(format!("{var_name} must be a whole number, got {v:?}"))
                })?;
                if n < min || n > max {
                    return Err(config_error(format!(
                        "{var_name} must be between {min} and {max}, got {n}"
                    )));
                }
                return Ok(Some(n));
            }
            key.u64(&t).map_err(|e| config_error(e.to_string()))
        };

        let (base_url, base_url_from) = pick_string(&BASE_URL, "TOOLBOX_LLM_BASE_URL")?
            .unwrap_or_else(|| {
                (
                    provider.default_base_url().to_string(),
                    "the default base_url".to_string(),
                )
            });
        let base_url = check_base_url(&base_url, &base_url_from)?;
        let model = pick_string(&MODEL, "TOOLBOX_LLM_MODEL")?
            .map(|(m, _)| m.trim().to_string())
            .unwrap_or_default();
        let api_key_env = match pick_string(&API_KEY_ENV, "TOOLBOX_LLM_API_KEY_ENV")? {
            None => provider.default_api_key_env().to_string(),
            Some((name, from)) => {
                let name = name.trim().to_string();
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    return Err(config_error(format!(
                        "{from} must name an environment variable (like OPENAI_API_KEY), got {name:?}"
                    )));
                }
                name
            }
        };
        let timeout = |key: &Key, var_name: &str, default: u64| -> Result<Duration, LlmError> {
            Ok(Duration::from_millis(
                pick_number(key, var_name)?.unwrap_or(default),
            ))
        };
        Ok(LlmConfig {
            provider,
            base_url,
            model,
            api_key_env,
            connect_timeout: timeout(
                &CONNECT_TIMEOUT_MS,
                "TOOLBOX_LLM_CONNECT_TIMEOUT_MS",
                DEFAULT_CONNECT_TIMEOUT_MS,
            )?,
            idle_timeout: timeout(
                &IDLE_TIMEOUT_MS,
                "TOOLBOX_LLM_IDLE_TIMEOUT_MS",
                DEFAULT_IDLE_TIMEOUT_MS,
            )?,
            request_timeout: timeout(
                &REQUEST_TIMEOUT_MS,
                "TOOLBOX_LLM_TIMEOUT_MS",
                DEFAULT_REQUEST_TIMEOUT_MS,
            )?,
            max_retries: pick_number(&MAX_RETRIES, "TOOLBOX_LLM_MAX_RETRIES")?
                .map_or(DEFAULT_MAX_RETRIES, |n| n as u32),
            max_tokens: pick_number(&MAX_TOKENS, "TOOLBOX_LLM_MAX_TOKENS")?
                .map_or(DEFAULT_MAX_TOKENS, |n| n as u32),
            max_response_bytes: pick_number(&MAX_RESPONSE_BYTES, "TOOLBOX_LLM_MAX_RESPONSE_BYTES")?
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
        })
    }

    /// The API key: the value of the variable named by [`api_key_env`](Self::api_key_env),
    /// read through `env`; `None` when it is unset or empty. Never log what this returns.
    pub fn api_key(&self, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        env(&self.api_key_env).filter(|k| !k.trim().is_empty())
    }

    /// The error when no model is set, or `Ok` when one is.
    pub fn require_model(&self) -> Result<(), LlmError> {
        if self.model.trim().is_empty() {
            return Err(config_error(format!(
                "no model is set for the {} server at {}: set [llm] model or TOOLBOX_LLM_MODEL",
                self.provider.as_str(),
                self.base_url
            )));
        }
        Ok(())
    }
}

/// `url` if it is an absolute http(s) URL with a host, without a trailing `/`.
fn check_base_url(url: &str, from: &str) -> Result<String, LlmError> {
    let trimmed = url.trim();
    let bad = |why: &str| {
        config_error(format!(
            "{from} must be an http or https URL like {OPENAI_BASE_URL}, got {url:?} ({why})"
        ))
    };
    let parsed = reqwest::Url::parse(trimmed).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(&format!("the scheme is {:?}", parsed.scheme())));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("it must not have a query or a fragment"));
    }
    Ok(trimmed.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn err(table: Value, env: &dyn Fn(&str) -> Option<String>) -> String {
        let e = LlmConfig::from_table(Some(&table), env).unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::Config, "{e}");
        e.message
    }

    #[test]
    fn defaults_follow_the_provider() {
        let c = LlmConfig::from_table(None, &no_env).unwrap();
        assert_eq!(c, LlmConfig::default());
        assert_eq!(c.base_url, OPENAI_BASE_URL);
        assert_eq!(c.api_key_env, "OPENAI_API_KEY");
        assert_eq!(c.idle_timeout, Duration::from_secs(120));
        assert_eq!(c.request_timeout, Duration::from_secs(600));
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!((c.max_retries, c.max_tokens), (3, 4096));
        assert_eq!(c.max_response_bytes, 8 * 1024 * 1024);

        let c = LlmConfig::from_table(Some(&json!({"provider": "anthropic"})), &no_env).unwrap();
        assert_eq!(c.provider, LlmProvider::Anthropic);
        assert_eq!(c.base_url, ANTHROPIC_BASE_URL);
        assert_eq!(c.api_key_env, "ANTHROPIC_API_KEY");

        let env = |name: &str| (name == "TOOLBOX_LLM_PROVIDER").then(|| "Anthropic".to_string());
        let c = LlmConfig::from_table(None, &env).unwrap();
        assert_eq!(c.base_url, ANTHROPIC_BASE_URL);
    }

    #[test]
    fn the_table_is_read_and_variables_override_it() {
        let table = json!({
            "provider": "openai", "base_url": "http://127.0.0.1:8000/v1/", "model": "m1",
            "api_key_env": "MY_KEY", "connect_timeout_ms": 5, "idle_timeout_ms": 6,
            "request_timeout_ms": 7, "max_retries": 0, "max_tokens": 9,
            "max_response_bytes": 65536,
        });
        let c = LlmConfig::from_table(Some(&table), &no_env).unwrap();
        assert_eq!(c.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(c.model, "m1");
        assert_eq!(c.api_key_env, "MY_KEY");
        assert_eq!(c.connect_timeout, Duration::from_millis(5));
        assert_eq!(c.idle_timeout, Duration::from_millis(6));
        assert_eq!(c.request_timeout, Duration::from_millis(7));
        assert_eq!((c.max_retries, c.max_tokens), (0, 9));
        assert_eq!(c.max_response_bytes, 65536);

        let env = |name: &str| {
            Some(
                match name {
                    "TOOLBOX_LLM_BASE_URL" => "https://example.test/v1",
                    "TOOLBOX_LLM_MODEL" => "m2",
                    "TOOLBOX_LLM_API_KEY_ENV" => "OTHER_KEY",
                    "TOOLBOX_LLM_CONNECT_TIMEOUT_MS" => "15",
                    "TOOLBOX_LLM_IDLE_TIMEOUT_MS" => "16",
                    "TOOLBOX_LLM_TIMEOUT_MS" => "17",
                    "TOOLBOX_LLM_MAX_RETRIES" => "5",
                    "TOOLBOX_LLM_MAX_TOKENS" => "19",
                    "TOOLBOX_LLM_MAX_RESPONSE_BYTES" => "2048",
                    "TOOLBOX_LLM_PROVIDER" => "",
                    _ => return None,
                }
                .to_string(),
            )
        };
        let c = LlmConfig::from_table(Some(&table), &env).unwrap();
        assert_eq!(c.provider, LlmProvider::OpenAi);
        assert_eq!(c.base_url, "https://example.test/v1");
        assert_eq!(c.model, "m2");
        assert_eq!(c.api_key_env, "OTHER_KEY");
        assert_eq!(c.connect_timeout, Duration::from_millis(15));
        assert_eq!(c.idle_timeout, Duration::from_millis(16));
        assert_eq!(c.request_timeout, Duration::from_millis(17));
        assert_eq!((c.max_retries, c.max_tokens), (5, 19));
        assert_eq!(c.max_response_bytes, 2048);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (table, want) in [
            (json!({"modle": "x"}), "[llm] has an unknown key `modle`"),
            (json!({"provider": "gemini"}), "[llm] provider must be"),
            (json!({"provider": 1}), "[llm] provider must be a string"),
            (
                json!({"base_url": "ftp://x"}),
                "[llm] base_url must be an http",
            ),
            (
                json!({"base_url": "not a url"}),
                "[llm] base_url must be an http",
            ),
            (
                json!({"request_timeout_ms": "soon"}),
                "[llm] request_timeout_ms must be a whole number",
            ),
            (
                json!({"max_retries": 99}),
                "[llm] max_retries must be between 0 and 20",
            ),
            (json!({"max_tokens": 0}), "[llm] max_tokens must be between"),
            (
                json!({"max_response_bytes": 10}),
                "[llm] max_response_bytes must be between 1024 and 1073741824, got 10",
            ),
            (
                json!({"max_response_bytes": "big"}),
                "[llm] max_response_bytes must be a whole number",
            ),
            (json!({"api_key_env": "A=B"}), "[llm] api_key_env must name"),
            (json!([1]), "[llm] must be a table"),
        ] {
            let e = err(table.clone(), &no_env);
            assert!(e.contains(want), "{table}: {e}");
        }
        let env = |name: &str| (name == "TOOLBOX_LLM_MAX_RETRIES").then(|| "many".to_string());
        assert!(err(json!({}), &env).contains("TOOLBOX_LLM_MAX_RETRIES must be a whole number"));
        let env =
            |name: &str| (name == "TOOLBOX_LLM_MAX_RESPONSE_BYTES").then(|| "8MiB".to_string());
        assert!(err(json!({}), &env)
            .contains("TOOLBOX_LLM_MAX_RESPONSE_BYTES must be a whole number, got \"8MiB\""));
        let env = |name: &str| (name == "TOOLBOX_LLM_MAX_RESPONSE_BYTES").then(|| "0".to_string());
        assert!(err(json!({}), &env)
            .contains("TOOLBOX_LLM_MAX_RESPONSE_BYTES must be between 1024 and 1073741824"));
        let env = |name: &str| (name == "TOOLBOX_LLM_BASE_URL").then(|| "localhost".to_string());
        assert!(err(json!({}), &env).contains("TOOLBOX_LLM_BASE_URL must be an http"));
    }

    #[test]
    fn the_key_is_read_from_the_named_variable() {
        let c = LlmConfig::from_table(Some(&json!({"api_key_env": "K1"})), &no_env).unwrap();
        let env = |name: &str| (name == "K1").then(|| "secret".to_string());
        assert_eq!(c.api_key(&env).as_deref(), Some("secret"));
        assert_eq!(c.api_key(&|_| Some(String::new())), None);
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn a_model_is_required() {
        let c = LlmConfig::default();
        let e = c.require_model().unwrap_err();
        assert!(
            e.message.contains("set [llm] model or TOOLBOX_LLM_MODEL"),
            "{e}"
        );
    }

    #[test]
    fn a_workspace_may_only_tighten() {
        let rules = toolbox_core::trust::table_rules("llm").expect("[llm] rules are registered");
        for key in ["base_url", "model", "api_key_env", "provider"] {
            assert!(rules.rule(key).is_none(), "{key}");
        }
        assert!(rules.rule("request_timeout_ms").is_some());
        assert!(rules.rule("max_response_bytes").is_some());
    }
}
