//! The placement contract, seen from the router: `:ensure`, `:park` and the session list of
//! an engine's adapter (docs/scale-out.md, "Router and placement"). Every answer is bounded
//! in size and time and parsed into a type before it is used; the session server's URL must
//! be an http(s) base URL and its token a valid header value.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use toolbox_core::SessionId;

use crate::error::RouterError;

/// The largest answer the router reads from the adapter.
pub const MAX_ADAPTER_ANSWER: usize = 1024 * 1024;

/// The most sessions the router keeps in its cache; past it the cache starts over (it is
/// only a cache: a miss asks the adapter).
const MAX_CACHED: usize = 100_000;

/// Where a session lives now: its session server's base URL, bearer token and epoch.
#[derive(Clone)]
pub struct Placement {
    /// The session server's base URL (`http://IP:PORT`, no path, query or user info).
    pub url: reqwest::Url,
    /// `Bearer <its token>`, marked sensitive; `None` for a session server without a token.
    pub auth: Option<HeaderValue>,
    /// The session server's epoch.
    pub epoch: u64,
    /// The node the engine placed it on.
    pub node: String,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Placement")
            .field("url", &self.url.as_str())
            .field("epoch", &self.epoch)
            .field("node", &self.node)
            .finish()
    }
}

#[derive(Deserialize)]
struct EnsureAnswer {
    sid: String,
    url: String,
    #[serde(default)]
    token: Option<String>,
    epoch: u64,
    #[serde(default)]
    node: Option<String>,
}

/// Parses a session server's base URL from the adapter: http or https, a host, no user
/// info, no path beyond `/`, no query or fragment. The error never repeats the URL (it may
/// carry secrets).
pub fn parse_server_url(raw: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(raw).map_err(|e| format!("url is not a URL ({e})"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!(
            "url's scheme is {:?}, not http or https",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("url has no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url carries user info: the session server's token goes in `token`".into());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("url must be a base URL (scheme://host:port), with no path or query".into());
    }
    Ok(url)
}

/// Parses the adapter's base URL (the `--placement` flag): as a session server's, but a
/// path prefix is allowed (an adapter mounted under `/placement`, say).
pub fn parse_adapter_url(raw: &str) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(raw.trim())
        .map_err(|e| anyhow::anyhow!("--placement is not a URL: {e}"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        anyhow::bail!("--placement must be an http or https URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        anyhow::bail!("--placement has no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        anyhow::bail!("--placement carries user info: put the token in --placement-token-file");
    }
    if url.query().is_some() || url.fragment().is_some() {
        anyhow::bail!("--placement must have no query or fragment");
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

/// The adapter's client and the router's cache of placements.
pub struct Placer {
    base: reqwest::Url,
    auth: Option<HeaderValue>,
    http: reqwest::Client,
    timeout: Duration,
    cache: Mutex<HashMap<SessionId, Arc<Placement>>>,
    /// One `:ensure` at a time per session: requests that miss together wait for the first
    /// one's answer instead of each asking the adapter.
    placing: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Placer {
    /// A client of the adapter at `base`, with its token when given, each call bounded by
    /// `timeout`.
    pub fn new(
        base: reqwest::Url,
        token: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<Placer> {
        let auth = match token {
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {t}")).map_err(|_| {
                    anyhow::anyhow!("the placement token has characters a header cannot carry")
                })?;
                v.set_sensitive(true);
                Some(v)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()?;
        Ok(Placer {
            base,
            auth,
            http,
            timeout,
            cache: Mutex::new(HashMap::new()),
            placing: Mutex::new(HashMap::new()),
        })
    }

    /// The adapter's base URL, for `GET /api/health` (it has no user info).
    pub fn base(&self) -> &str {
        self.base.as_str()
    }

    /// How many sessions are cached.
    pub fn cached(&self) -> usize {
        lock(&self.cache).len()
    }

    /// The cached placement of `sid`, if any.
    pub fn cached_of(&self, sid: &SessionId) -> Option<Arc<Placement>> {
        lock(&self.cache).get(sid).cloned()
    }

    /// Forgets `sid`'s placement if it is still the one of `epoch` (a newer one another
    /// request found is kept).
    pub fn forget(&self, sid: &SessionId, epoch: u64) {
        let mut cache = lock(&self.cache);
        if cache.get(sid).is_some_and(|p| p.epoch == epoch) {
            cache.remove(sid);
        }
    }

    /// Where `sid` lives: the cache, or (on a miss, or when `stale` names the epoch that
    /// did not answer) the adapter's `:ensure`.
    pub async fn lookup(
        &self,
        sid: &SessionId,
        stale: Option<u64>,
    ) -> Result<Arc<Placement>, RouterError> {
        let fresh = |cached: &Arc<Placement>| stale.is_none_or(|s| cached.epoch > s);
        if let Some(cached) = self.cached_of(sid).filter(fresh) {
            return Ok(cached);
        }
        let turn = {
            let mut placing = lock(&self.placing);
            if placing.len() >= MAX_CACHED {
                placing.retain(|_, m| Arc::strong_count(m) > 1);
            }
            placing.entry(sid.clone()).or_default().clone()
        };
        let _turn = turn.lock().await;
        // Another request may have placed it while this one waited.
        if let Some(cached) = self.cached_of(sid).filter(fresh) {
            return Ok(cached);
        }
        let placement = Arc::new(self.ensure(sid, stale).await?);
        let mut cache = lock(&self.cache);
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        // Keep whichever is newer: another request may have placed it meanwhile.
        let keep = match cache.get(sid) {
            Some(other) if other.epoch > placement.epoch => other.clone(),
            _ => placement,
        };
        cache.insert(sid.clone(), keep.clone());
        Ok(keep)
    }

    fn url(&self, tail: &str) -> Result<reqwest::Url, RouterError> {
        self.base.join(tail).map_err(|e| {
            RouterError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot build the adapter's URL: {e}"),
            )
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        tail: &str,
        body: Option<Value>,
    ) -> Result<(StatusCode, Option<u64>, Value), RouterError> {
        let mut request = self.http.request(method, self.url(tail)?);
        if let Some(auth) = &self.auth {
            request = request.header(reqwest::header::AUTHORIZATION, auth.clone());
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let unreachable = |e: reqwest::Error| {
            let status = if e.is_timeout() {
                StatusCode::GATEWAY_TIMEOUT
            } else {
                StatusCode::BAD_GATEWAY
            };
            RouterError::new(
                status,
                format!(
                    "the placement adapter did not answer{}: {}",
                    if e.is_timeout() {
                        format!(" within {} s", self.timeout.as_secs())
                    } else {
                        String::new()
                    },
                    error_chain(&e.without_url())
                ),
            )
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = read_bounded(response, MAX_ADAPTER_ANSWER)
            .await
            .map_err(|why| {
                RouterError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("the placement adapter's answer {why}"),
                )
            })?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|e| {
                RouterError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("the placement adapter's answer is not JSON ({e}), status {status}"),
                )
            })?
        };
        Ok((status, retry_after, value))
    }

    /// `POST /v1/sessions/{sid}:ensure`.
    pub async fn ensure(
        &self,
        sid: &SessionId,
        stale: Option<u64>,
    ) -> Result<Placement, RouterError> {
        let body = match stale {
            Some(epoch) => json!({"stale_epoch": epoch}),
            None => json!({}),
        };
        let (status, retry_after, value) = self
            .call(
                reqwest::Method::POST,
                &format!("v1/sessions/{sid}:ensure"),
                Some(body),
            )
            .await?;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            let why = adapter_message(&value);
            return Err(RouterError::unavailable(
                format!("no capacity to place session {sid} now: {why}"),
                retry_after.unwrap_or(1).clamp(1, 3600),
            ));
        }
        if !status.is_success() {
            return Err(RouterError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the placement adapter refused to place session {sid} ({status}): {}",
                    adapter_message(&value)
                ),
            ));
        }
        let answer: EnsureAnswer = serde_json::from_value(value).map_err(|e| {
            RouterError::new(
                StatusCode::BAD_GATEWAY,
                format!("the placement adapter's :ensure answer for session {sid} is not {{sid, url, token, epoch, node}}: {e}"),
            )
        })?;
        let bad = |why: String| {
            RouterError::new(
                StatusCode::BAD_GATEWAY,
                format!("the placement adapter's :ensure answer for session {sid}: {why}"),
            )
        };
        if answer.sid != sid.as_str() {
            return Err(bad("it names another session".into()));
        }
        if answer.epoch == 0 {
            return Err(bad("epoch 0 (epochs start at 1)".into()));
        }
        let url = parse_server_url(&answer.url).map_err(bad)?;
        let auth = match answer.token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| bad("token has characters a header cannot carry".into()))?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let node: String = answer.node.unwrap_or_default().chars().take(256).collect();
        Ok(Placement {
            url,
            auth,
            epoch: answer.epoch,
            node,
        })
    }

    /// `POST /v1/sessions/{sid}:park`: the adapter's status and answer, passed on.
    pub async fn park(&self, sid: &SessionId) -> Result<(StatusCode, Value), RouterError> {
        let (status, _, value) = self
            .call(
                reqwest::Method::POST,
                &format!("v1/sessions/{sid}:park"),
                Some(json!({})),
            )
            .await?;
        if let Some(cached) = self.cached_of(sid) {
            self.forget(sid, cached.epoch);
        }
        Ok((status, value))
    }

    /// `GET /v1/sessions`: every session the adapter knows, `{sid, state, epoch, node}`.
    pub async fn list(&self) -> Result<Vec<Value>, RouterError> {
        let (status, _, value) = self.call(reqwest::Method::GET, "v1/sessions", None).await?;
        if !status.is_success() {
            return Err(RouterError::new(
                StatusCode::BAD_GATEWAY,
                format!(
                    "the placement adapter did not list its sessions ({status}): {}",
                    adapter_message(&value)
                ),
            ));
        }
        match value.get("sessions").and_then(Value::as_array) {
            Some(list) => Ok(list.clone()),
            None => Err(RouterError::new(
                StatusCode::BAD_GATEWAY,
                "the placement adapter's GET /v1/sessions answer has no `sessions` list",
            )),
        }
    }
}

/// The adapter's `error` (or its whole answer), cut short.
fn adapter_message(value: &Value) -> String {
    let text = match value.get("error").and_then(Value::as_str) {
        Some(e) => e.to_string(),
        None => value.to_string(),
    };
    text.chars().take(500).collect()
}

/// An error with its causes, one after the other.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Reads a response's body, at most `limit` bytes; an error says why it stopped.
pub async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if out.len() + chunk.len() > limit {
                    return Err(format!("is larger than {limit} bytes"));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(out),
            Err(e) => {
                return Err(format!(
                    "could not be read: {}",
                    error_chain(&e.without_url())
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_urls_are_base_urls() {
        assert!(parse_server_url("http://127.0.0.1:7878").is_ok());
        assert!(parse_server_url("https://node-3.internal:443/").is_ok());
        for bad in [
            "ftp://x",
            "http://u:secret@127.0.0.1:1",
            "http://127.0.0.1:1/mcp",
            "http://127.0.0.1:1/?a=b",
            "127.0.0.1:7878",
            "",
        ] {
            let e = parse_server_url(bad).unwrap_err();
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn adapter_urls_get_a_slash() {
        let url = parse_adapter_url("http://127.0.0.1:9/placement").unwrap();
        assert_eq!(
            url.join("v1/sessions").unwrap().as_str(),
            "http://127.0.0.1:9/placement/v1/sessions"
        );
        assert!(parse_adapter_url("http://a:b@h/").is_err());
        assert!(parse_adapter_url("unix:/x").is_err());
    }
}
