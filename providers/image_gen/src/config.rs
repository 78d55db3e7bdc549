//! The `[image_gen]` table and the environment: which endpoint, model and key a call uses.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};

use crate::generate::NAME;

pub(crate) const DEFAULT_MODEL: &str = "gpt-image-1";
pub(crate) const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";
/// Image models take a while; a minute is common for large images.
const DEFAULT_TIMEOUT_MS: u64 = 180_000;
/// Four base64 PNGs at 1024² are ~10–20 MB; the cap only stops a runaway response.
const DEFAULT_MAX_RESPONSE_BYTES: u64 = 100 * 1024 * 1024;

// An untrusted workspace's toolbox.toml may only shorten [image_gen] limits; the endpoint,
// model and key variable are the operator's alone (a repository must not be able to send a
// key to a server of its choosing).
const BASE_URL: Key = Key::string("base_url");
const MODEL: Key = Key::string("model");
const API_KEY_ENV: Key = Key::string("api_key_env");
const TIMEOUT_MS: Key =
    Key::integer("timeout_ms", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULT_TIMEOUT_MS));
const MAX_RESPONSE_BYTES: Key = Key::integer("max_response_bytes", 1, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULT_MAX_RESPONSE_BYTES));
/// The `[image_gen]` table.
const TABLE: Table = Table::new(
    "image_gen",
    &[BASE_URL, MODEL, API_KEY_ENV, TIMEOUT_MS, MAX_RESPONSE_BYTES],
);
toolbox_core::register_table!(TABLE);

/// What to tell a model (and through it, a person) when no endpoint is configured.
const NOT_CONFIGURED: &str = "image_gen__generate has no image endpoint configured. Set one in \
toolbox.toml:\n  [image_gen]\n  base_url = \"https://api.openai.com/v1\"   # any OpenAI-compatible server\n  model = \"gpt-image-1\"\n  api_key_env = \"OPENAI_API_KEY\"   # the environment variable holding the key\n\
or set the environment variables TOOLBOX_IMAGE_BASE_URL (or OPENAI_BASE_URL) and OPENAI_API_KEY \
(setting only OPENAI_API_KEY uses https://api.openai.com/v1).";

/// The resolved configuration of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) base_url: String,
    pub(crate) model: String,
    pub(crate) key: Option<String>,
    pub(crate) key_env: String,
    pub(crate) timeout: Duration,
    pub(crate) max_response_bytes: u64,
}

/// Reads `[image_gen]` and the environment (through `env`, so tests need not touch the
/// process environment).
pub(crate) fn endpoint(
    table: Option<&Value>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Endpoint> {
    let t = TABLE
        .read_value(table)
        .map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    let read = || -> Result<_> {
        // An empty string is a value not given.
        let string = |key: Key| -> Result<Option<String>> {
            Ok(key
                .str(&t)?
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string))
        };
        let number =
            |key: Key, default: u64| -> Result<u64> { Ok(key.u64(&t)?.unwrap_or(default)) };
        Ok((
            string(BASE_URL)?,
            string(MODEL)?,
            string(API_KEY_ENV)?,
            number(TIMEOUT_MS, DEFAULT_TIMEOUT_MS)?,
            number(MAX_RESPONSE_BYTES, DEFAULT_MAX_RESPONSE_BYTES)?,
        ))
    };
    let (base_url, model, key_env, timeout_ms, max_response_bytes) =
        read().map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    let nonempty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let key_env = key_env.unwrap_or_else(|| DEFAULT_KEY_ENV.to_string());
    let key = nonempty(env(&key_env)).map(|k| k.trim().to_string());
    let base_url = match base_url
        .or_else(|| nonempty(env("TOOLBOX_IMAGE_BASE_URL")))
        .or_else(|| nonempty(env("OPENAI_BASE_URL")))
    {
        Some(url) => url,
        None if key.is_some() => OPENAI_BASE_URL.to_string(),
        None => bail!("{NOT_CONFIGURED}"),
    };
    match reqwest::Url::parse(&base_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => bail!("{NAME}: the image endpoint base URL {base_url:?} is not an http:// or https:// URL ([image_gen] base_url, TOOLBOX_IMAGE_BASE_URL or OPENAI_BASE_URL)"),
    }
    let model = model
        .or_else(|| nonempty(env("TOOLBOX_IMAGE_MODEL")))
        .unwrap_or_else(|| DEFAULT_MODEL.to_string());
    Ok(Endpoint {
        base_url,
        model,
        key,
        key_env,
        timeout: Duration::from_millis(timeout_ms),
        max_response_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn endpoint_resolution_order() {
        let e = endpoint(None, env(&[])).unwrap_err().to_string();
        assert!(
            e.contains("no image endpoint configured")
                && e.contains("[image_gen]")
                && e.contains("OPENAI_API_KEY"),
            "{e}"
        );

        let e = endpoint(None, env(&[("OPENAI_API_KEY", "k")])).unwrap();
        assert_eq!(e.base_url, OPENAI_BASE_URL);
        assert_eq!(e.model, DEFAULT_MODEL);
        assert_eq!(e.key.as_deref(), Some("k"));

        let e = endpoint(
            Some(&json!({"api_key_env": "MY_KEY"})),
            env(&[
                ("OPENAI_BASE_URL", "http://b/v1"),
                ("TOOLBOX_IMAGE_BASE_URL", "http://a/v1"),
                ("MY_KEY", "mk"),
                ("TOOLBOX_IMAGE_MODEL", "m2"),
            ]),
        )
        .unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str(), e.key.as_deref()),
            ("http://a/v1", "m2", Some("mk"))
        );

        let e = endpoint(
            Some(&json!({"base_url": "http://c/v1", "model": "m1"})),
            env(&[("TOOLBOX_IMAGE_BASE_URL", "http://a/v1")]),
        )
        .unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str(), e.key),
            ("http://c/v1", "m1", None)
        );

        for (table, want) in [
            (
                json!({"base_url": "ftp://x"}),
                "not an http:// or https:// URL",
            ),
            (
                json!({"baseurl": "http://x"}),
                "invalid configuration: [image_gen] has an unknown key `baseurl`",
            ),
            (
                json!({"base_url": 3}),
                "[image_gen] base_url must be a string, got 3",
            ),
            (
                json!({"base_url": "http://x", "timeout_ms": 0}),
                "[image_gen] timeout_ms must be at least 1, got 0",
            ),
        ] {
            let e = endpoint(Some(&table), env(&[])).unwrap_err().to_string();
            assert!(e.contains(want), "{table}: {e}");
        }
    }
}
