//! The HTTP transport both clients share: [`Transport`], one reqwest client and the request
//! loop, which tries a request again as the retry policy ([`super::retry`]) says.
//!
//! A 2xx is read only as what was asked for: `text/event-stream`, or `application/json` from a
//! server that ignored `stream: true` (parameters such as `; charset=utf-8` and any case are
//! fine). Anything else (an HTML login page from a proxy, say) is an error that names the
//! content type and quotes the start of the body. No response body, streamed or whole, is read
//! past `[llm] max_response_bytes`: the completion fails as soon as the cap is passed.
//!
//! Every error a completion ends with, and the one log line of a retry, pass through
//! [`Transport::scrub`]: the API key (and the start of it, where a quote was cut inside it) is
//! replaced, and control characters are escaped. Text from a response (an error event, a
//! stream event that is not JSON, a page) reaches people only that way.
//!
//! Every other refusal fails at once with the server's own message: 401/403 as
//! [`LlmErrorKind::Auth`], 404 or a message about an unknown model as
//! [`LlmErrorKind::UnknownModel`], the rest as [`LlmErrorKind::Server`].

use std::future::Future;
use std::ops::ControlFlow;
use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use serde_json::Value;
use toolbox_core::preview::terminal_safe;

use super::retry::{backoff, is_retryable, retry_after, MAX_RETRY_AFTER};
use super::sse::{error_chain, EventStream};
use super::{Completion, LlmConfig, LlmError, LlmErrorKind, TextSink};

/// How much of an error response's body is read.
const ERROR_BODY_CAP: usize = 64 * 1024;
/// How much of a server's message an error quotes.
const MESSAGE_CHARS: usize = 1000;
/// How much of a body of the wrong content type is read, to quote the start of it.
const EXCERPT_BODY_CAP: usize = 4096;
/// How many characters of a body of the wrong content type an error quotes.
const EXCERPT_CHARS: usize = 200;
/// What the API key is replaced with.
const REDACTED: &str = "<redacted>";
/// The shortest start of the key that is replaced where a quote was cut (`…`) right after it.
const MIN_KEY_PIECE: usize = 4;

/// The first `max` characters of `text`, trimmed, with `…` when cut.
pub(crate) fn snippet(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// `text` with every occurrence of `key` replaced, and also the start of the key where a
/// [`snippet`] was cut inside it (a piece of the key right before a `…`). A key shorter than
/// [`MIN_KEY_PIECE`] is not looked for: it would match ordinary text.
pub(crate) fn redact(text: &str, key: Option<&str>) -> String {
    let Some(key) = key.filter(|k| k.len() >= MIN_KEY_PIECE) else {
        return text.to_string();
    };
    let mut out = text.replace(key, REDACTED);
    let mut from = 0;
    while let Some(found) = out[from..].find('…') {
        let at = from + found;
        let before = &out[..at];
        let piece = (MIN_KEY_PIECE..=key.len().min(before.len()))
            .rev()
            .map(|n| before.len() - n)
            .find(|&start| before.is_char_boundary(start) && key.starts_with(&before[start..]));
        from = match piece {
            Some(start) => {
                out.replace_range(start..at, REDACTED);
                start + REDACTED.len() + '…'.len_utf8()
            }
            None => at + '…'.len_utf8(),
        };
    }
    out
}

/// The start of a body for an error message: whitespace runs as one space, at most
/// [`EXCERPT_CHARS`] characters (escaping and redaction come later, in
/// [`Transport::scrub`]).
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let one_line: Vec<&str> = text.split_whitespace().collect();
    if one_line.is_empty() {
        return "(the response had no body)".to_string();
    }
    snippet(&one_line.join(" "), EXCERPT_CHARS)
}

/// The error for a response body longer than `[llm] max_response_bytes`.
pub(crate) fn too_large(cap: usize) -> LlmError {
    LlmError::new(
        LlmErrorKind::BadResponse,
        format!(
            "the model's response is larger than {cap} bytes ([llm] max_response_bytes, \
             TOOLBOX_LLM_MAX_RESPONSE_BYTES), so toolbox stopped reading it: the answer is \
             dropped and none of its tool calls run. Raise [llm] max_response_bytes if answers \
             this long are expected"
        ),
    )
}

/// The error for a stream that ended before its finish marker, `wanted`, holding `calls`
/// tool calls so far.
pub(crate) fn stream_cut(url: &str, wanted: &str, calls: usize) -> LlmError {
    let calls = match calls {
        0 => String::new(),
        1 => "; the tool call it had begun is not run".to_string(),
        n => format!("; none of the {n} tool calls it had begun is run"),
    };
    LlmError::new(
        LlmErrorKind::Transport,
        format!(
            "the model's stream ended before it finished: {url} closed the response without \
             {wanted}, so the answer is incomplete and is dropped{calls}. It is not retried, \
             since its text may already have been shown; send the message again"
        ),
    )
}

/// What an error body says: its message and its error type or code, if it is JSON of the
/// usual shapes (`{"error":{"message","type"}}`, `{"error":"…"}`, `{"message"}`,
/// `{"detail"}`); otherwise the start of the body.
pub(crate) fn server_message(body: &str) -> (String, Option<String>) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let error = json.get("error");
        let message = match error {
            Some(Value::String(s)) => Some(s.clone()),
            Some(e) => text(e.get("message")),
            None => None,
        }
        .or_else(|| text(json.get("message")))
        .or_else(|| text(json.get("detail")));
        let kind = error
            .and_then(|e| text(e.get("type")).or_else(|| text(e.get("code"))))
            .or_else(|| text(json.get("type")).filter(|t| t != "error"));
        if let Some(message) = message {
            return (snippet(&message, MESSAGE_CHARS), kind);
        }
    }
    if body.trim().is_empty() {
        return ("(the response had no body)".to_string(), None);
    }
    (snippet(body, MESSAGE_CHARS), None)
}

/// Whether a server's message says it does not know the model.
pub(crate) fn mentions_unknown_model(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("model")
        && [
            "not found",
            "does not exist",
            "not exist",
            "unknown",
            "no such",
            "invalid model",
            "not available",
            "not supported",
        ]
        .iter()
        .any(|p| m.contains(p))
}

/// What one attempt came to, when it did not produce a response to read.
enum Failure {
    /// Worth another attempt.
    Retry {
        kind: LlmErrorKind,
        what: String,
        retry_after: Option<Duration>,
    },
    /// Final.
    Fatal(LlmError),
}

/// The most redirects a model request follows.
const MAX_REDIRECTS: usize = 5;

/// Redirects are followed only to the same origin (scheme, host and port). reqwest strips
/// the credential headers it knows (`Authorization`) on a cross-origin redirect, but not
/// `x-api-key` or any other header a provider names: a 307 from the model endpoint would
/// hand the key to whoever it points at. So a redirect to another origin is an error that
/// names it, and the request is never sent there.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let first = attempt.previous().first().map(|u| u.origin());
        if first.is_some_and(|origin| origin != attempt.url().origin()) {
            let to = attempt.url().origin().ascii_serialization();
            return attempt.error(format!(
                "the model endpoint redirected to another origin ({to}); toolbox does not \
                 send the API key there. Set [llm] base_url to the address that answers"
            ));
        }
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        attempt.follow()
    })
}

/// The HTTP side both clients share: the reqwest client, the settings, the key.
///
/// It has no `Debug`: it holds the key.
pub(crate) struct Transport {
    http: reqwest::Client,
    pub(crate) config: LlmConfig,
    key: Option<String>,
}

impl Transport {
    /// A transport for `config`, sending `key` (when given) as the client adds it. Fails when
    /// no model is set or the HTTP client cannot be built.
    pub(crate) fn new(config: LlmConfig, key: Option<String>) -> Result<Self, LlmError> {
        config.require_model()?;
        // reqwest is built with `rustls-no-provider`: install ring unless the embedding
        // program already installed a provider (then theirs is used).
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .redirect(same_origin_redirects())
            .user_agent(concat!("toolbox/", env!("CARGO_PKG_VERSION"), " (llm)"))
            .build()
            .map_err(|e| {
                LlmError::new(
                    LlmErrorKind::Config,
                    format!("could not set up the HTTP client: {}", error_chain(&e)),
                )
            })?;
        Ok(Transport {
            http,
            config,
            key: key.filter(|k| !k.trim().is_empty()),
        })
    }

    /// The API key, when the variable is set. Never log it.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// `text` made fit to show: the key [`redact`]ed, control characters escaped. Every
    /// error a completion ends with passes through here (see [`run`](Self::run)), and so does
    /// the log line of a retry: this is where text from a response is cleaned, once.
    pub(crate) fn scrub(&self, text: &str) -> String {
        terminal_safe(&redact(text, self.key()))
    }

    /// The cap on one response body: `[llm] max_response_bytes`.
    fn max_response_bytes(&self) -> usize {
        usize::try_from(self.config.max_response_bytes).unwrap_or(usize::MAX)
    }

    /// `url` checked to be a URL, for a client to keep.
    pub(crate) fn endpoint(&self, url: String) -> Result<String, LlmError> {
        reqwest::Url::parse(&url).map_err(|e| {
            LlmError::new(
                LlmErrorKind::Config,
                format!(
                    "base_url {:?} does not make a valid request URL {url:?}: {e}",
                    self.config.base_url
                ),
            )
        })?;
        Ok(url)
    }

    /// Runs a client's whole `call` within `request_timeout` (retries included), and hands
    /// back its error [`scrub`](Self::scrub)bed: every completion ends here.
    pub(crate) async fn run<T>(
        &self,
        call: impl Future<Output = Result<T, LlmError>>,
    ) -> Result<T, LlmError> {
        let limit = self.config.request_timeout;
        let result = tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
            Err(LlmError::new(
                LlmErrorKind::Timeout,
                format!(
                    "the model's answer took longer than {} ms (request_timeout_ms, \
                     TOOLBOX_LLM_TIMEOUT_MS)",
                    limit.as_millis()
                ),
            ))
        });
        result.map_err(|e| LlmError::new(e.kind, self.scrub(&e.message)))
    }

    /// POSTs `body` to `url` with [`post`](Self::post) and says what came back: a stream of
    /// events, or a whole JSON body from a server that ignored `stream: true` (read here, at
    /// most `max_response_bytes`). Any other content type is an error quoting the body.
    pub(crate) async fn send(
        &self,
        url: &str,
        model: &str,
        headers: &(dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Sync),
        body: &Value,
    ) -> Result<Reply, LlmError> {
        let response = self.post(url, model, headers, body).await?;
        let cap = self.max_response_bytes();
        match body_kind(&response) {
            BodyKind::Json => {
                let body = self.read_body(response, cap, true).await?;
                Ok(Reply::Whole(body))
            }
            BodyKind::Stream => Ok(Reply::Stream(Box::new(EventStream::new(
                response,
                self.config.idle_timeout,
                cap,
            )))),
            BodyKind::Other(content_type) => {
                let status = response.status().as_u16();
                let cap = EXCERPT_BODY_CAP.min(cap);
                // A body that cannot be read still leaves the content type to report.
                let body = self
                    .read_body(response, cap, false)
                    .await
                    .unwrap_or_default();
                Err(LlmError::new(
                    LlmErrorKind::BadResponse,
                    format!(
                        "{url} answered HTTP {status} with content type {content_type}, not \
                         text/event-stream (a streamed answer) or application/json, so it is \
                         not a model's answer; check [llm] base_url (it is {}). The body \
                         starts: {}",
                        self.config.base_url,
                        excerpt(&body)
                    ),
                ))
            }
        }
    }

    /// POSTs `body` to `url` as JSON, with the headers `headers` adds, retrying as the
    /// [retry policy](super::retry) says. Returns the first 2xx response, its body unread.
    pub(crate) async fn post(
        &self,
        url: &str,
        model: &str,
        headers: &(dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Sync),
        body: &Value,
    ) -> Result<reqwest::Response, LlmError> {
        let max = self.config.max_retries;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let (kind, what, retry_after) = match self.attempt(url, model, headers, body).await {
                Ok(response) => return Ok(response),
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Retry {
                    kind,
                    what,
                    retry_after,
                }) => (kind, what, retry_after),
            };
            if let Some(wait) = retry_after.filter(|w| *w > MAX_RETRY_AFTER) {
                return Err(LlmError::new(
                    LlmErrorKind::RateLimited,
                    format!(
                        "{what}; the server asked to wait {} s before trying again (Retry-After), \
                         longer than the {} s toolbox waits, so it gave up after {attempts} \
                         attempt{}; try again later",
                        wait.as_secs(),
                        MAX_RETRY_AFTER.as_secs(),
                        plural(attempts)
                    ),
                ));
            }
            if attempts > max {
                return Err(LlmError::new(
                    kind,
                    format!(
                        "{what}; gave up after {attempts} attempt{} (max_retries = {max})",
                        plural(attempts)
                    ),
                ));
            }
            let wait = retry_after.unwrap_or_else(|| backoff(attempts - 1));
            // `toolbox chat` leaves this out at its default log level by this module's path
            // (its `logged`): it says the request's end in a sentence of its own.
            tracing::warn!(
                "LLM request failed ({}); retrying in {} ms ({attempts} of {} attempts made)",
                self.scrub(&what),
                wait.as_millis(),
                max + 1
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(
        &self,
        url: &str,
        model: &str,
        headers: &(dyn Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder + Sync),
        body: &Value,
    ) -> Result<reqwest::Response, Failure> {
        let idle = self.config.idle_timeout;
        let request = headers(self.http.post(url)).json(body);
        let response = match tokio::time::timeout(idle, request.send()).await {
            Err(_) => {
                return Err(Failure::Fatal(LlmError::new(
                    LlmErrorKind::Timeout,
                    format!(
                        "{url} did not answer within {} ms (idle_timeout_ms, \
                         TOOLBOX_LLM_IDLE_TIMEOUT_MS)",
                        idle.as_millis()
                    ),
                )))
            }
            Ok(Err(e)) if e.is_connect() => {
                return Err(Failure::Retry {
                    kind: LlmErrorKind::Transport,
                    what: format!(
                        "could not connect to {url}: {}",
                        // reqwest's own text repeats the URL; its sources say what failed.
                        std::error::Error::source(&e).map_or_else(|| e.to_string(), error_chain)
                    ),
                    retry_after: None,
                });
            }
            Ok(Err(e)) => {
                return Err(Failure::Fatal(LlmError::new(
                    if e.is_timeout() {
                        LlmErrorKind::Timeout
                    } else {
                        LlmErrorKind::Transport
                    },
                    format!("the request to {url} failed: {}", error_chain(&e)),
                )))
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        // A body that cannot be read still leaves the status to report.
        let cap = ERROR_BODY_CAP.min(self.max_response_bytes());
        let body = self
            .read_body(response, cap, false)
            .await
            .unwrap_or_default();
        let (message, error_type) = server_message(&String::from_utf8_lossy(&body));
        let code = status.as_u16();
        let status_text = match status.canonical_reason() {
            Some(reason) => format!("HTTP {code} {reason}"),
            None => format!("HTTP {code}"),
        };
        if is_retryable(code) {
            return Err(Failure::Retry {
                kind: if code == 429 {
                    LlmErrorKind::RateLimited
                } else {
                    LlmErrorKind::Server
                },
                what: format!("{url} answered {status_text}: {message}"),
                retry_after,
            });
        }
        Err(Failure::Fatal(self.refusal(
            code,
            &status_text,
            &message,
            error_type.as_deref(),
            url,
            model,
        )))
    }

    /// The error for a response that is not retried.
    fn refusal(
        &self,
        code: u16,
        status_text: &str,
        message: &str,
        error_type: Option<&str>,
        url: &str,
        model: &str,
    ) -> LlmError {
        let error_type = error_type.unwrap_or("");
        let base_url = &self.config.base_url;
        if matches!(code, 401 | 403)
            || matches!(error_type, "authentication_error" | "permission_error")
        {
            let var = &self.config.api_key_env;
            let state = if self.key.is_some() {
                "which is set"
            } else {
                "which is not set, so no key was sent"
            };
            return LlmError::new(
                LlmErrorKind::Auth,
                format!(
                    "the server at {base_url} refused the API key ({status_text}: {message}); \
                     the key is read from the variable {var} (api_key_env), {state}"
                ),
            );
        }
        let about_model = mentions_unknown_model(message)
            || (error_type == "not_found_error" && message.to_ascii_lowercase().contains("model"))
            || error_type == "model_not_found";
        if about_model || code == 404 {
            let hint = if about_model || message.contains(model) {
                String::new()
            } else {
                format!(
                    "; if the model exists, check that base_url is the API's root (it is \
                     {base_url}, the request went to {url})"
                )
            };
            return LlmError::new(
                LlmErrorKind::UnknownModel,
                format!(
                    "the server at {base_url} does not know the model {model:?} \
                     ({status_text}: {message}){hint}; set [llm] model or TOOLBOX_LLM_MODEL \
                     to a model it serves"
                ),
            );
        }
        LlmError::new(
            LlmErrorKind::Server,
            format!("the server at {base_url} refused the request ({status_text}): {message}"),
        )
    }

    /// Reads up to `cap` bytes of `response`'s body, waiting at most `idle_timeout` for each
    /// chunk. With `exact`, a longer body is the [`too_large`] error (`cap` is then
    /// `max_response_bytes`), read no further; otherwise it is cut.
    pub(crate) async fn read_body(
        &self,
        mut response: reqwest::Response,
        cap: usize,
        exact: bool,
    ) -> Result<Vec<u8>, LlmError> {
        let idle = self.config.idle_timeout;
        let mut body = Vec::new();
        loop {
            let chunk = tokio::time::timeout(idle, response.chunk())
                .await
                .map_err(|_| {
                    LlmError::new(
                        LlmErrorKind::Timeout,
                        format!(
                            "the response sent nothing for {} ms (idle_timeout_ms, \
                             TOOLBOX_LLM_IDLE_TIMEOUT_MS)",
                            idle.as_millis()
                        ),
                    )
                })?
                .map_err(|e| {
                    LlmError::new(
                        LlmErrorKind::Transport,
                        format!(
                            "the connection broke while the response was read: {}",
                            error_chain(&e)
                        ),
                    )
                })?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if body.len() + chunk.len() > cap {
                if exact {
                    return Err(too_large(cap));
                }
                body.extend_from_slice(&chunk[..cap - body.len()]);
                return Ok(body);
            }
            body.extend_from_slice(&chunk);
        }
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// What a model server answered a request with.
pub(crate) enum Reply {
    /// A whole JSON body (a server that ignored `stream: true`), unparsed.
    Whole(Vec<u8>),
    /// Server-sent events.
    Stream(Box<EventStream>),
}

impl Reply {
    /// The events to read on; or, for a whole body, the finished completion `parse` makes of
    /// it, its text already handed to `on_text` (`Break`: nothing is left to stream).
    pub(crate) fn stream_or_finish(
        self,
        parse: impl FnOnce(&[u8]) -> Result<Completion, LlmError>,
        on_text: TextSink<'_>,
    ) -> Result<ControlFlow<Completion, Box<EventStream>>, LlmError> {
        match self {
            Reply::Stream(events) => Ok(ControlFlow::Continue(events)),
            Reply::Whole(body) => {
                let completion = parse(&body)?;
                if !completion.text.is_empty() {
                    on_text(&completion.text);
                }
                Ok(ControlFlow::Break(completion))
            }
        }
    }
}

/// A whole JSON response body, or an error quoting the start of it.
pub(crate) fn parse_json_body(body: &[u8], url: &str) -> Result<Value, LlmError> {
    serde_json::from_slice(body).map_err(|e| {
        LlmError::new(
            LlmErrorKind::BadResponse,
            format!(
                "{url} answered with JSON that does not parse ({e}): {}",
                snippet(&String::from_utf8_lossy(body), 200)
            ),
        )
    })
}

/// One stream event's data as JSON, or an error quoting it.
pub(crate) fn parse_event_data(data: &str, url: &str) -> Result<Value, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        LlmError::new(
            LlmErrorKind::BadResponse,
            format!(
                "{url} sent a stream event that is not JSON ({e}): {}",
                snippet(data, 200)
            ),
        )
    })
}

/// What a 2xx body is, by its content type.
#[derive(Debug, PartialEq)]
enum BodyKind {
    /// `text/event-stream`.
    Stream,
    /// `application/json` or `…+json`: a whole answer (or a server's error).
    Json,
    /// Anything else, as the server named it (quoted), or `no Content-Type` when it named none.
    Other(String),
}

fn body_kind(response: &reqwest::Response) -> BodyKind {
    let Some(value) = response.headers().get(CONTENT_TYPE) else {
        return BodyKind::Other("no Content-Type".to_string());
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    content_type_kind(&text)
}

/// [`BodyKind`] of a `Content-Type` value: its media type, any case, parameters ignored.
fn content_type_kind(value: &str) -> BodyKind {
    let media = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if media == "text/event-stream" {
        BodyKind::Stream
    } else if media == "application/json"
        || (media.starts_with("application/") && media.ends_with("+json"))
    {
        BodyKind::Json
    } else {
        BodyKind::Other(format!("{:?}", snippet(value, 100)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_messages_of_the_usual_shapes() {
        assert_eq!(
            server_message(r#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#),
            (
                "bad model".to_string(),
                Some("invalid_request_error".to_string())
            )
        );
        assert_eq!(
            server_message(
                r#"{"type":"error","error":{"type":"not_found_error","message":"model: x"}}"#
            ),
            ("model: x".to_string(), Some("not_found_error".to_string()))
        );
        assert_eq!(
            server_message(r#"{"error":"model 'x' not found"}"#).0,
            "model 'x' not found"
        );
        assert_eq!(server_message(r#"{"detail":"nope"}"#).0, "nope");
        assert_eq!(server_message("<html>oops</html>").0, "<html>oops</html>");
        assert_eq!(server_message("").0, "(the response had no body)");
        assert!(server_message(&"x".repeat(5000)).0.ends_with('…'));
    }

    #[test]
    fn unknown_model_messages() {
        for m in [
            "The model `gpt-9` does not exist or you do not have access to it.",
            "model 'llama9' not found, try pulling it first",
            "Unknown model: foo",
        ] {
            assert!(mentions_unknown_model(m), "{m}");
        }
        assert!(!mentions_unknown_model("context length exceeded"));
    }

    #[test]
    fn content_types_are_read_by_their_media_type() {
        for stream in ["text/event-stream", "Text/Event-Stream; charset=UTF-8"] {
            assert_eq!(content_type_kind(stream), BodyKind::Stream, "{stream}");
        }
        for json in [
            "application/json",
            "application/json; charset=utf-8",
            "application/problem+json",
        ] {
            assert_eq!(content_type_kind(json), BodyKind::Json, "{json}");
        }
        assert_eq!(
            content_type_kind("text/html; charset=utf-8"),
            BodyKind::Other("\"text/html; charset=utf-8\"".to_string())
        );
        assert!(matches!(
            content_type_kind("text/event-streamx"),
            BodyKind::Other(_)
        ));
    }

    #[test]
    fn the_key_and_a_cut_start_of_it_are_redacted() {
        let key = Some("sk-abcdefghij");
        assert_eq!(
            redact("a sk-abcdefghij b sk-abcdefghij", key),
            "a <redacted> b <redacted>"
        );
        // A quote cut inside the key keeps no piece of it.
        let cut = snippet(&format!("{}sk-abcdefghij", "p".repeat(10)), 16);
        assert_eq!(cut, "ppppppppppsk-abc…");
        assert_eq!(redact(&cut, key), "pppppppppp<redacted>…");
        // Other text before a cut stays; so does everything without a key.
        assert_eq!(redact("plain…", key), "plain…");
        assert_eq!(redact("sk-abcdefghij", None), "sk-abcdefghij");
        assert_eq!(redact("ab ab", Some("ab")), "ab ab");
        assert_eq!(redact("é…", key), "é…");
    }

    #[test]
    fn excerpts_are_one_short_line() {
        assert_eq!(
            excerpt(b"<html>\n  <body>hi</body>\n</html>\n"),
            "<html> <body>hi</body> </html>"
        );
        assert_eq!(excerpt(b"  \n"), "(the response had no body)");
        assert!(excerpt("x".repeat(500).as_bytes()).ends_with('…'));
    }

    #[test]
    fn snippets_cut_at_a_character() {
        assert_eq!(snippet("  abc ", 5), "abc");
        assert_eq!(snippet("ééééé", 2), "éé…");
    }
}
