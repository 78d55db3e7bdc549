//! The `[web]` table of `toolbox.toml`.

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};

use crate::guard::{parse_hosts, parse_ranges, GuardPolicy};

pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The ceiling: a chain longer than this is a loop or a trap.
pub const MAX_REDIRECTS: u64 = 5;
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 5 * 1024 * 1024;
pub const DEFAULT_USER_AGENT: &str = concat!("toolbox/", env!("CARGO_PKG_VERSION"), " (web_fetch)");
pub const DEFAULT_BRAVE_BASE_URL: &str = "https://api.search.brave.com";
pub const DEFAULT_TAVILY_BASE_URL: &str = "https://api.tavily.com";

// What an untrusted workspace's toolbox.toml may set in [web]: shorter timeouts and smaller
// limits. Hosts, ranges, search endpoints and key variables are the operator's alone.
const CONNECT_TIMEOUT_MS: Key = Key::integer("connect_timeout_ms", 1, u32::MAX as u64)
    .workspace(Tighten::AtMost(DEFAULT_CONNECT_TIMEOUT_MS));
const TIMEOUT_MS: Key =
    Key::integer("timeout_ms", 1, u32::MAX as u64).workspace(Tighten::AtMost(DEFAULT_TIMEOUT_MS));
const MAX_REDIRECTS_KEY: Key =
    Key::integer("max_redirects", 0, MAX_REDIRECTS).workspace(Tighten::AtMost(MAX_REDIRECTS));
const MAX_RESPONSE_BYTES: Key = Key::integer("max_response_bytes", 1, 1 << 30)
    .workspace(Tighten::AtMost(DEFAULT_MAX_RESPONSE_BYTES));
const USER_AGENT: Key = Key::string("user_agent");
const ALLOW_HOSTS: Key = Key::strings("allow_hosts");
const ALLOW_RANGES: Key = Key::strings("allow_ranges");
/// Read leniently (any case; `none` and `""` get a hint), so a string rather than a choice.
const SEARCH_BACKEND: Key = Key::string("search_backend");
const SEARXNG_URL: Key = Key::string("searxng_url");
const BRAVE_API_KEY_ENV: Key = Key::string("brave_api_key_env");
const BRAVE_BASE_URL: Key = Key::string("brave_base_url");
const TAVILY_API_KEY_ENV: Key = Key::string("tavily_api_key_env");
const TAVILY_BASE_URL: Key = Key::string("tavily_base_url");

/// The `[web]` table. Unknown keys are refused: a misspelt `allow_host` must not silently
/// leave the guard stricter or looser than the operator meant.
pub(crate) const TABLE: Table = Table::new(
    "web",
    &[
        CONNECT_TIMEOUT_MS,
        TIMEOUT_MS,
        MAX_REDIRECTS_KEY,
        MAX_RESPONSE_BYTES,
        USER_AGENT,
        ALLOW_HOSTS,
        ALLOW_RANGES,
        SEARCH_BACKEND,
        SEARXNG_URL,
        BRAVE_API_KEY_ENV,
        BRAVE_BASE_URL,
        TAVILY_API_KEY_ENV,
        TAVILY_BASE_URL,
    ],
);
toolbox_core::register_table!(TABLE);

/// The search service `web_search` asks (`[web] search_backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Searxng,
    Brave,
    Tavily,
}

/// The `web_search` part of `[web]`: which backend, and where and with which key to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchConfig {
    pub backend: Option<Backend>,
    pub searxng_url: Option<String>,
    pub brave_api_key_env: String,
    pub brave_base_url: String,
    pub tavily_api_key_env: String,
    pub tavily_base_url: String,
}

/// The parsed `[web]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebConfig {
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub max_redirects: usize,
    pub max_response_bytes: u64,
    pub user_agent: String,
    pub policy: GuardPolicy,
    pub search: SearchConfig,
}

impl WebConfig {
    /// Reads `[web]`; `None` (no table) gives the defaults.
    pub fn from_table(table: Option<&Value>) -> Result<Self> {
        let t = TABLE.read_value(table)?;
        let backend = match SEARCH_BACKEND.str(&t)? {
            None => None,
            Some(name) => Some(match name.trim().to_ascii_lowercase().as_str() {
                "searxng" => Backend::Searxng,
                "brave" => Backend::Brave,
                "tavily" => Backend::Tavily,
                "" | "none" => bail!("[web] search_backend must be one of \"searxng\", \"brave\", \"tavily\" (got {name:?}); leave it out to disable web_search"),
                _ => bail!("[web] search_backend must be one of \"searxng\", \"brave\", \"tavily\" (got {name:?})"),
            }),
        };
        let number =
            |key: Key, default: u64| -> Result<u64> { Ok(key.u64(&t)?.unwrap_or(default)) };
        let text = |key: Key, default: &str| -> Result<String> {
            Ok(key.str(&t)?.unwrap_or(default).to_string())
        };
        Ok(WebConfig {
            connect_timeout: Duration::from_millis(number(
                CONNECT_TIMEOUT_MS,
                DEFAULT_CONNECT_TIMEOUT_MS,
            )?),
            timeout: Duration::from_millis(number(TIMEOUT_MS, DEFAULT_TIMEOUT_MS)?),
            max_redirects: number(MAX_REDIRECTS_KEY, MAX_REDIRECTS)? as usize,
            max_response_bytes: number(MAX_RESPONSE_BYTES, DEFAULT_MAX_RESPONSE_BYTES)?,
            user_agent: text(USER_AGENT, DEFAULT_USER_AGENT)?,
            policy: GuardPolicy {
                allow_hosts: parse_hosts(&ALLOW_HOSTS.string_list(&t)?.unwrap_or_default())?,
                allow_ranges: parse_ranges(&ALLOW_RANGES.string_list(&t)?.unwrap_or_default())?,
            },
            search: SearchConfig {
                backend,
                searxng_url: SEARXNG_URL.str(&t)?.map(str::to_string),
                brave_api_key_env: text(BRAVE_API_KEY_ENV, "BRAVE_API_KEY")?,
                brave_base_url: text(BRAVE_BASE_URL, DEFAULT_BRAVE_BASE_URL)?,
                tavily_api_key_env: text(TAVILY_API_KEY_ENV, "TAVILY_API_KEY")?,
                tavily_base_url: text(TAVILY_BASE_URL, DEFAULT_TAVILY_BASE_URL)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_without_a_table() {
        let c = WebConfig::from_table(None).unwrap();
        assert_eq!(c.max_redirects, 5);
        assert_eq!(c.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
        assert_eq!(c.search.backend, None);
        assert_eq!(c.search.brave_api_key_env, "BRAVE_API_KEY");
        assert!(c.policy.allow_hosts.is_empty());
    }

    #[test]
    fn values_are_read_and_checked() {
        let c = WebConfig::from_table(Some(&json!({
            "timeout_ms": 1500, "max_redirects": 2, "allow_hosts": ["LocalHost"],
            "allow_ranges": ["127.0.0.0/8"], "search_backend": "Brave"
        })))
        .unwrap();
        assert_eq!(c.timeout, Duration::from_millis(1500));
        assert_eq!(c.max_redirects, 2);
        assert_eq!(c.policy.allow_hosts, vec!["localhost".to_string()]);
        assert_eq!(c.search.backend, Some(Backend::Brave));

        for (table, want) in [
            (
                json!({"max_redirects": 6}),
                "max_redirects must be between 0 and 5",
            ),
            (
                json!({"allow_host": ["x"]}),
                "[web] has an unknown key `allow_host` (known keys: connect_timeout_ms,",
            ),
            (
                json!({"search_backend": "bing"}),
                "search_backend must be one of",
            ),
            (json!({"allow_ranges": ["10/8"]}), "allow_ranges"),
            (
                json!({"timeout_ms": "soon"}),
                "[web] timeout_ms must be a whole number, got \"soon\"",
            ),
            (
                json!({"allow_hosts": [1]}),
                "[web] allow_hosts must be a list of strings, got [1]",
            ),
        ] {
            let e = WebConfig::from_table(Some(&table)).unwrap_err().to_string();
            assert!(e.contains(want), "{table}: {e}");
        }
    }
}
