//! Who may talk to the server.
//!
//! - It listens on loopback unless told otherwise, and refuses to listen anywhere else
//!   without a token ([`check_options`](crate::check_options)).
//! - With a token, every `/api` and `/mcp` request needs `Authorization: Bearer <token>`
//!   (compared in constant time). The console's page itself is public; it asks for the token.
//! - On loopback the `Host` header must name loopback (`localhost`, `127.0.0.1`, `[::1]`), so
//!   a web page whose DNS name was rebound to 127.0.0.1 gets 403 (DNS rebinding).
//! - A request carrying an `Origin` must come from the server's own origin or one configured
//!   with `--cors-origin`: a page elsewhere cannot even send a POST (no CSRF), and browsers
//!   get CORS headers only for the configured origins.

use std::sync::Arc;

use anyhow::{bail, Result};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use toolbox_front_door::auth::{check_bearer, host_name, is_loopback_name, BearerRefusal};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::{ApiError, AppState};

/// Adds the checks below, and CORS when origins are configured, around `app`.
pub fn layers(app: Router, state: Arc<AppState>) -> Router {
    let origins: Vec<HeaderValue> = state
        .options
        .cors_origins
        .iter()
        .filter_map(|o| parse_origin(o).ok())
        .filter_map(|o| HeaderValue::from_str(&o).ok())
        .collect();
    let app = app.layer(axum::middleware::from_fn_with_state(state, guard));
    if origins.is_empty() {
        app
    } else {
        // Outermost, so a preflight (which carries no token) is answered before the guard.
        app.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("last-event-id"),
                    header::HeaderName::from_static("mcp-session-id"),
                    header::HeaderName::from_static("mcp-protocol-version"),
                    header::HeaderName::from_static("toolbox-session"),
                ])
                .expose_headers([header::HeaderName::from_static("mcp-session-id")]),
        )
    }
}

/// An origin as `scheme://host[:port]`, lowercased, from a flag; an error says what is wrong.
pub fn parse_origin(origin: &str) -> Result<String> {
    let lower = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = lower.split_once("://") else {
        bail!("an origin is scheme://host[:port], like http://localhost:3000");
    };
    if scheme != "http" && scheme != "https" {
        bail!("an origin's scheme is http or https");
    }
    if rest.is_empty() || rest.contains('/') || rest.contains('?') || rest.contains('#') {
        bail!("an origin is scheme://host[:port] with no path, like http://localhost:3000");
    }
    Ok(lower)
}

fn deny(status: StatusCode, message: String) -> Response {
    let mut response = ApiError::new(status, message).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"toolbox\""),
        );
    }
    response
}

async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if headers.get_all(header::HOST).iter().count() > 1 {
        return deny(
            StatusCode::BAD_REQUEST,
            "the request has more than one Host header".into(),
        );
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    if host_name(host).is_none() && !host.is_empty() {
        return deny(
            StatusCode::BAD_REQUEST,
            format!("Host {host:?} is not a host name with an optional port"),
        );
    }
    if state.options.listen.ip().is_loopback() && !host_name(host).is_some_and(is_loopback_name) {
        return deny(
            StatusCode::FORBIDDEN,
            format!(
                "Host {host:?} is not allowed: this server listens on loopback and answers only \
                 requests for localhost, 127.0.0.1 or [::1] (a guard against DNS rebinding)"
            ),
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
        let own = [format!("http://{host}"), format!("https://{host}")];
        let configured = state
            .options
            .cors_origins
            .iter()
            .any(|o| parse_origin(o).is_ok_and(|o| o == origin));
        if !own.iter().any(|o| o.eq_ignore_ascii_case(&origin)) && !configured {
            return deny(
                StatusCode::FORBIDDEN,
                format!(
                    "Origin {origin:?} is not allowed: only the server's own pages and origins \
                     given with --cors-origin may call it"
                ),
            );
        }
    }
    let path = request.uri().path();
    let protected =
        path == "/api" || path.starts_with("/api/") || path == "/mcp" || path.starts_with("/mcp/");
    if let (true, Some(token)) = (protected, state.options.token.as_ref()) {
        match check_bearer(headers, |given| token.accepts(given)) {
            Ok(()) => {}
            Err(BearerRefusal::Wrong) => {
                return deny(StatusCode::UNAUTHORIZED, "the bearer token is wrong".into());
            }
            Err(BearerRefusal::Missing) => {
                return deny(
                    StatusCode::UNAUTHORIZED,
                    "this server needs Authorization: Bearer <token> (the token toolbox serve \
                     was started with)"
                        .into(),
                );
            }
        }
    }
    // Past every check: the connection's client has shown it may talk to this server (with
    // a token configured, only a request that carried it counts).
    if let Some(auth) = request
        .extensions()
        .get::<crate::front_door::ConnectionAuth>()
    {
        if protected || state.options.token.is_none() {
            auth.passed();
        }
    }
    let request = match read_body(request).await {
        Ok(request) => request,
        Err(refused) => return refused,
    };
    next.run(request).await
}

/// A request's body, read whole before the handler runs: refused at once when its
/// `Content-Length` is over the limit (nothing is read), and when it does not arrive within
/// [`BODY_READ_TIMEOUT`](crate::front_door::BODY_READ_TIMEOUT). A request without a body
/// (GET, an SSE subscription) passes untouched.
async fn read_body(request: Request) -> Result<Request, Response> {
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return Ok(request);
    }
    // An upload streams to disk under its own limit, and waits at most BODY_READ_TIMEOUT
    // for each piece (crate::upload).
    if request.method() == Method::PUT && crate::upload::is_upload_path(request.uri().path()) {
        return Ok(request);
    }
    let limit = crate::MAX_BODY_BYTES;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(deny(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {limit} bytes"),
        ));
    }
    let (parts, body) = request.into_parts();
    let wait = crate::front_door::BODY_READ_TIMEOUT;
    match tokio::time::timeout(wait, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, axum::body::Body::from(bytes))),
        Ok(Err(_)) => Err(deny(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {limit} bytes, or could not be read"),
        )),
        Err(_) => Err(deny(
            StatusCode::REQUEST_TIMEOUT,
            format!("the body did not arrive within {} s", wait.as_secs()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_and_loopback() {
        assert_eq!(host_name("localhost:7878"), Some("localhost"));
        assert_eq!(host_name("[::1]:7878"), Some("[::1]"));
        assert_eq!(host_name("[::1]"), Some("[::1]"));
        assert_eq!(host_name("127.0.0.1"), Some("127.0.0.1"));
        for bad in [
            "localhost:80@evil.example",
            "localhost:80:81",
            "local host",
            "localhost:",
            "localhost:http",
            "[::1]x",
            "[evil]",
            "",
        ] {
            assert_eq!(host_name(bad), None, "{bad:?}");
        }
        assert!(is_loopback_name("LOCALHOST"));
        assert!(is_loopback_name("app.localhost"));
        assert!(!is_loopback_name("evil.example"));
        assert!(!is_loopback_name("127.0.0.1.evil.example"));
    }

    #[test]
    fn origins_are_checked() {
        assert_eq!(
            parse_origin("http://LocalHost:3000/").unwrap(),
            "http://localhost:3000"
        );
        assert!(parse_origin("localhost:3000").is_err());
        assert!(parse_origin("ftp://x").is_err());
        assert!(parse_origin("http://x/path").is_err());
    }
}

#[cfg(test)]
mod secret_tests {
    use crate::ServeToken;
    use toolbox_front_door::auth::same_secret;

    #[test]
    fn only_the_same_bytes_match() {
        let secret = b"0123456789abcdef";
        assert!(same_secret(secret, secret));
        assert!(!same_secret(b"0123456789abcdeX", secret));
        assert!(!same_secret(b"0123456789abcde", secret));
        assert!(!same_secret(b"0123456789abcdef0", secret));
        assert!(!same_secret(b"", secret));
    }

    #[test]
    fn a_digest_accepts_the_token_it_was_made_from_and_nothing_else() {
        // printf %s 0123456789abcdef | sha256sum
        let digest = "9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f";
        let token = ServeToken::parse_sha256(digest).unwrap();
        assert!(token.accepts("0123456789abcdef"));
        assert!(!token.accepts("0123456789abcdeX"));
        assert!(!token.accepts(digest), "the digest itself is no token");
        assert!(!token.accepts(""));
        let upper = ServeToken::parse_sha256(&digest.to_uppercase()).unwrap();
        assert!(upper.accepts("0123456789abcdef"));
        for bad in [
            "",
            "abc",
            &digest[1..],
            &format!("{digest}0"),
            &digest.replace('f', "g"),
        ] {
            let e = ServeToken::parse_sha256(bad).unwrap_err().to_string();
            assert!(e.contains("64 hexadecimal digits"), "{bad:?}: {e}");
        }
        assert_eq!(format!("{token:?}"), "ServeToken::Sha256(..)");
        assert_eq!(
            format!("{:?}", ServeToken::secret("hunter2hunter2hunter2")),
            "ServeToken::Secret(..)"
        );
    }
}
