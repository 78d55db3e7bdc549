//! The `[web]` table of `toolbox.toml`.

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::ConfigTable;

use crate::guard::{parse_hosts, parse_ranges, GuardPolicy};

/// Every key `[web]` understands. Unknown keys are refused: a misspelt `allow_host` must not
/// silently leave the guard stricter or looser than the operator meant.
pub const KEYS: &[&str] = &[
    "connect_timeout_ms",
    "timeout_ms",
    "max_redirects",
    "max_response_bytes",
    "user_agent",
    "allow_hosts",
    "allow_ranges",
    "search_backend",
    "searxng_url",
    "brave_api_key_env",
    "brave_base_url",
    "tavily_api_key_env",
    "tavily_base_url",
];

// What an untrusted workspace's toolbox.toml may set in [web]: shorter timeouts and smaller
// limits. Hosts, ranges, search endpoints and key variables are the operator's alone.
toolbox_core::workspace_config_rules!(
    "web",
    [
        (
            "connect_timeout_ms",
            Tighten::AtMost(DEFAULT_CONNECT_TIMEOUT_MS)
        ),
        ("timeout_ms", Tighten::AtMost(DEFAULT_TIMEOUT_MS)),
        ("max_redirects", Tighten::AtMost(MAX_REDIRECTS)),
        (
            "max_response_bytes",
            Tighten::AtMost(DEFAULT_MAX_RESPONSE_BYTES)
        ),
    ]
);

pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// The ceiling: a chain longer than this is a loop or a trap.
pub const MAX_REDIRECTS: u64 = 5;
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 5 * 1024 * 1024;
pub const DEFAULT_USER_AGENT: &str = concat!("toolbox/", env!("CARGO_PKG_VERSION"), " (web_fetch)");
pub const DEFAULT_BRAVE_BASE_URL: &str = "https://api.search.brave.com";
pub const DEFAULT_TAVILY_BASE_URL: &str = "https://api.tavily.com";

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
        let t = ConfigTable::new("web", table, KEYS)?;
        let backend = match t.string("search_backend")? {
            None => None,
            Some(name) => Some(match name.trim().to_ascii_lowercase().as_str() {
                "searxng" => Backend::Searxng,
                "brave" => Backend::Brave,
                "tavily" => Backend::Tavily,
                "" | "none" => bail!("[web] search_backend must be one of \"searxng\", \"brave\", \"tavily\" (got {name:?}); leave it out to disable web_search"),
                _ => bail!("[web] search_backend must be one of \"searxng\", \"brave\", \"tavily\" (got {name:?})"),
            }),
        };
        let u64_in = |key: &str, default: u64, min: u64, max: u64| -> Result<u64> {
            Ok(t.u64_in(key, min, max)?.unwrap_or(default))
        };
        let text = |key: &str, default: &str| -> Result<String> {
            Ok(t.string(key)?.unwrap_or(default).to_string())
        };
        Ok(WebConfig {
            connect_timeout: Duration::from_millis(u64_in(
                "connect_timeout_ms",
                DEFAULT_CONNECT_TIMEOUT_MS,
                1,
                u32::MAX.into(),
            )?),
            timeout: Duration::from_millis(u64_in(
                "timeout_ms",
                DEFAULT_TIMEOUT_MS,
                1,
                u32::MAX.into(),
            )?),
            max_redirects: u64_in("max_redirects", MAX_REDIRECTS, 0, MAX_REDIRECTS)? as usize,
            max_response_bytes: u64_in(
                "max_response_bytes",
                DEFAULT_MAX_RESPONSE_BYTES,
                1,
                1 << 30,
            )?,
            user_agent: text("user_agent", DEFAULT_USER_AGENT)?,
            policy: GuardPolicy {
                allow_hosts: parse_hosts(&t.string_list("allow_hosts")?.unwrap_or_default())?,
                allow_ranges: parse_ranges(&t.string_list("allow_ranges")?.unwrap_or_default())?,
            },
            search: SearchConfig {
                backend,
                searxng_url: t.string("searxng_url")?.map(str::to_string),
                brave_api_key_env: text("brave_api_key_env", "BRAVE_API_KEY")?,
                brave_base_url: text("brave_base_url", DEFAULT_BRAVE_BASE_URL)?,
                tavily_api_key_env: text("tavily_api_key_env", "TAVILY_API_KEY")?,
                tavily_base_url: text("tavily_base_url", DEFAULT_TAVILY_BASE_URL)?,
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
