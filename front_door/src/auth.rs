//! The HTTP authentication `toolbox serve` and `toolbox router` share: the bearer token of
//! a request, checked in constant time ([`check_bearer`]), and a strict parse of the `Host`
//! header (against DNS rebinding). Each listener words its refusals; the checks are here
//! once.

use hyper::http::{header, HeaderMap};

/// Why a request's bearer token was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BearerRefusal {
    /// The request carries no `Authorization: Bearer` header.
    Missing,
    /// It carries one, and the token is not the listener's.
    Wrong,
}

/// The bearer token of a request's `Authorization` header, if it has one.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    bearer_token(headers.get(header::AUTHORIZATION)?.to_str().ok()?)
}

/// Checks a request's bearer token with `accepts` (which compares in constant time, e.g.
/// with [`same_secret`]).
pub fn check_bearer(
    headers: &HeaderMap,
    accepts: impl FnOnce(&str) -> bool,
) -> Result<(), BearerRefusal> {
    match bearer(headers) {
        Some(given) if accepts(given) => Ok(()),
        Some(_) => Err(BearerRefusal::Wrong),
        None => Err(BearerRefusal::Missing),
    }
}

/// The token of an `Authorization: Bearer <token>` header value (the scheme in any case).
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether `given` equals `secret`, in time that depends only on the secret's length (not on
/// where the first difference is, nor on whether the lengths differ).
pub fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != secret.len());
    for (i, s) in secret.iter().enumerate() {
        diff |= given.get(i).copied().unwrap_or(0) ^ s;
    }
    diff == 0
}

/// The name of a `Host` header (`name`, `name:port`, `[v6]` or `[v6]:port`), parsed strictly:
/// a name of letters, digits, `.` and `-` (or a bracketed IPv6 address), a port of digits.
/// Anything else (`localhost:80@evil.example`, a space, a second colon) is no host at all.
pub fn host_name(host: &str) -> Option<&str> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let end = rest.find(']')?;
        let name = &host[..end + 2];
        let v6 = &rest[..end];
        if v6.is_empty()
            || !v6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return None;
        }
        (name, &rest[end + 1..])
    } else {
        let (name, port) = match host.find(':') {
            // The port part keeps its colon: `name:` is no host.
            Some(at) => (&host[..at], &host[at..]),
            None => (host, ""),
        };
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        if !name_ok {
            return None;
        }
        (name, port)
    };
    match port.strip_prefix(':') {
        None if port.is_empty() => Some(name),
        Some(digits)
            if !digits.is_empty()
                && digits.len() <= 5
                && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            Some(name)
        }
        _ => None,
    }
}

/// Whether a [`host_name`] names this machine's loopback (`localhost`, `*.localhost`,
/// `127.0.0.1`, `[::1]`).
pub fn is_loopback_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "localhost" || name == "127.0.0.1" || name == "[::1]" || name.ends_with(".localhost")
}
