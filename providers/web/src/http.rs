//! The HTTP clients and the helpers both tools share: reading a body under a size cap and
//! explaining a failed request.

use std::sync::Arc;

use anyhow::{anyhow, Result};
use toolbox_host::CancellationToken;

use crate::config::WebConfig;
use crate::guard::{redirect_policy, GuardedResolver, Refused, TooManyRedirects};

/// The two clients built from one `[web]` configuration.
#[derive(Clone)]
pub struct Clients {
    pub config: Arc<WebConfig>,
    /// For model-chosen URLs: the SSRF guard in the resolver and on every redirect.
    pub fetch: reqwest::Client,
    /// For the configured search endpoint: trusted, so no address guard (a SearxNG instance
    /// on localhost must work), and no redirects (an API endpoint has no reason to move).
    pub search: reqwest::Client,
}

impl Clients {
    pub fn build(config: WebConfig) -> Result<Self> {
        install_crypto_provider();
        let config = Arc::new(config);
        let policy = Arc::new(config.policy.clone());
        let base = || {
            reqwest::Client::builder()
                .connect_timeout(config.connect_timeout)
                .timeout(config.timeout)
                .user_agent(config.user_agent.clone())
                // A proxy would resolve and connect on our behalf, out of the guard's sight,
                // and environment proxies would make results depend on the caller's shell.
                .no_proxy()
        };
        let fetch = base()
            .dns_resolver(GuardedResolver {
                policy: policy.clone(),
            })
            .redirect(redirect_policy(policy, config.max_redirects))
            .build()
            .map_err(|e| anyhow!("cannot build the HTTP client: {}", chain(&e)))?;
        let search = base()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| anyhow!("cannot build the HTTP client: {}", chain(&e)))?;
        Ok(Clients {
            config,
            fetch,
            search,
        })
    }
}

/// reqwest is built with `rustls-no-provider`, so rustls needs a process-wide crypto
/// provider. We install ring (fast to build, no C toolchain beyond cc) unless the embedding
/// program installed one already, in which case theirs is used.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another thread installing one is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A body read up to a byte cap.
pub struct Body {
    pub bytes: Vec<u8>,
    /// True when the server sent more than the cap and we stopped reading.
    pub truncated: bool,
}

/// Reads the body chunk by chunk and stops at `cap` bytes, so a huge or endless response
/// costs at most `cap` bytes of memory. Stops early when the call is cancelled.
pub async fn read_capped(
    response: &mut reqwest::Response,
    cap: u64,
    cancel: &CancellationToken,
) -> Result<Body, reqwest::Error> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let hint = response.content_length().unwrap_or(0) as usize;
    let mut bytes = Vec::with_capacity(hint.min(cap).min(16 << 20));
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk?,
            _ = cancel.cancelled() => None,
        };
        let Some(chunk) = chunk else {
            return Ok(Body {
                bytes,
                truncated: false,
            });
        };
        let room = cap - bytes.len();
        if chunk.len() > room {
            bytes.extend_from_slice(&chunk[..room]);
            return Ok(Body {
                bytes,
                truncated: true,
            });
        }
        bytes.extend_from_slice(&chunk);
    }
}

/// Explains a failed request in one sentence: the guard's refusal as is, else what kind of
/// failure it was and the underlying causes.
pub fn describe_error(err: &reqwest::Error, config: &WebConfig) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<Refused>() {
            return refused.to_string();
        }
        if let Some(too_many) = e.downcast_ref::<TooManyRedirects>() {
            return too_many.to_string();
        }
        source = e.source();
    }
    if err.is_timeout() {
        return format!(
            "the request timed out (connect timeout {} ms, total timeout {} ms; [web] \
             connect_timeout_ms / timeout_ms): {}",
            config.connect_timeout.as_millis(),
            config.timeout.as_millis(),
            chain(err)
        );
    }
    if err.is_connect() {
        return format!("could not connect: {}", chain(err));
    }
    chain(err)
}

/// An error and its causes, `a: b: c` (core's one printer).
pub fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    toolbox_core::error::chain(err)
}
