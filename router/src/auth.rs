//! Who may talk to the router: with a token (required beyond loopback), every request
//! carries `Authorization: Bearer <router token>`, compared in constant time. Without one
//! (loopback only), the `Host` header must name loopback (against DNS rebinding) and a
//! request with an `Origin` must come from that same host (no cross-site requests).

use axum::http::{header, HeaderMap, StatusCode};

use toolbox_front_door::auth::{
    check_bearer, host_name, is_loopback_name, same_secret, BearerRefusal,
};

use crate::error::RouterError;

/// Checks a request's headers; `token` is the router's own.
pub fn check(headers: &HeaderMap, token: Option<&str>) -> Result<(), RouterError> {
    match token {
        Some(token) => match check_bearer(headers, |given| {
            same_secret(given.as_bytes(), token.as_bytes())
        }) {
            Ok(()) => Ok(()),
            Err(BearerRefusal::Wrong) => Err(RouterError::new(
                StatusCode::UNAUTHORIZED,
                "the bearer token is wrong",
            )),
            Err(BearerRefusal::Missing) => Err(RouterError::new(
                StatusCode::UNAUTHORIZED,
                "this router needs Authorization: Bearer <token> (the router's token)",
            )),
        },
        None => {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if !host_name(host).is_some_and(is_loopback_name) {
                return Err(RouterError::new(
                    StatusCode::FORBIDDEN,
                    "this router listens on loopback without a token: the Host header must \
                     name localhost, 127.0.0.1 or [::1]",
                ));
            }
            if let Some(origin) = headers.get(header::ORIGIN) {
                let origin = origin.to_str().unwrap_or("").to_ascii_lowercase();
                let own = format!("http://{}", host.to_ascii_lowercase());
                if origin != own {
                    return Err(RouterError::new(
                        StatusCode::FORBIDDEN,
                        "cross-origin requests are not allowed",
                    ));
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
        assert!(!same_secret(b"abcd", b"abc"));
    }

    #[test]
    fn loopback_hosts_only_without_a_token() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:7900".parse().unwrap());
        assert!(check(&headers, None).is_ok());
        headers.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(check(&headers, None).is_err());
        headers.remove(header::ORIGIN);
        headers.insert(header::HOST, "evil.example:7900".parse().unwrap());
        assert!(check(&headers, None).is_err());
        headers.insert(header::HOST, "localhost:80@evil.example".parse().unwrap());
        assert!(check(&headers, None).is_err());
    }
}
