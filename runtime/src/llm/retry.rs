//! The retry policy of a model request ([`Transport::post`](super::transport::Transport::post)
//! runs it).
//!
//! A response with status 429, 500, 502, 503, 504 or 529, or a failure to connect (nothing
//! was sent, so nothing can have been charged), is tried again, at most `max_retries` times.
//! The wait before retry *n* (from 0) is 500 ms · 2ⁿ plus up to 20 % jitter, never more than
//! 30 s, unless the server said how long to wait in `Retry-After` (seconds or an HTTP date):
//! that is honoured up to 60 s. A server that asks for longer is not waited for: the call
//! fails at once with [`LlmErrorKind::RateLimited`](super::LlmErrorKind::RateLimited), saying
//! how long the server asked for. Once a response has started streaming nothing is retried,
//! since its text has already been handed to the caller: that holds for a stream that
//! breaks, and for one that ends before its finish marker (`data: [DONE]` or a
//! `finish_reason`; Anthropic's `message_stop` or a `stop_reason`), which is an error, never a
//! shorter answer, so none of its tool calls run. Asking again would show the same text twice
//! and pay for it twice; the person sends the message again instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, RETRY_AFTER};

/// The wait before the first retry; it doubles for each next one.
pub(crate) const BASE_DELAY: Duration = Duration::from_millis(500);
/// The longest backoff between two attempts.
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(30);
/// The longest `Retry-After` honoured; a server asking for more is not waited for.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Whether a response with `status` is tried again.
pub(crate) fn is_retryable(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
}

/// The wait before retry number `retry` (0 for the first), with jitter.
pub(crate) fn backoff(retry: u32) -> Duration {
    let exp = BASE_DELAY.saturating_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX));
    let base = exp.min(MAX_DELAY);
    (base + base.mul_f64(0.2 * jitter())).min(MAX_DELAY)
}

/// A number in `0.0..1.0` that differs between calls; good enough to spread retries apart.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    hasher.write_u32(nanos);
    (hasher.finish() % 10_000) as f64 / 10_000.0
}

/// The wait a `Retry-After` value asks for: delta-seconds, or an HTTP date (a date in the
/// past is no wait). `None` when it is neither.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        // Not in the RFC, but some servers send fractions.
        if seconds.is_finite() && seconds >= 0.0 {
            return Some(Duration::from_secs_f64(seconds.min(1e9)));
        }
        return None;
    }
    let at = parse_http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An HTTP date in any of the three forms RFC 9110 says to accept:
/// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT`,
/// `Sun Nov  6 08:49:37 1994` (httpdate reads all three).
pub(crate) fn parse_http_date(text: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(text).ok()
}

/// The wait a response's `Retry-After` header asks for, if it has a readable one.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?;
    parse_retry_after(value, SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried() {
        for code in [429, 500, 502, 503, 504, 529] {
            assert!(is_retryable(code), "{code}");
        }
        for code in [200, 400, 401, 403, 404, 422, 501, 505] {
            assert!(!is_retryable(code), "{code}");
        }
    }

    #[test]
    fn backoff_doubles_with_a_little_jitter_and_a_cap() {
        for (retry, base) in [(0, 500), (1, 1000), (2, 2000), (3, 4000)] {
            let d = backoff(retry);
            let base = Duration::from_millis(base);
            assert!(d >= base && d <= base.mul_f64(1.2), "{retry}: {d:?}");
        }
        assert_eq!(backoff(6), MAX_DELAY);
        assert_eq!(backoff(100), MAX_DELAY);
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        for date in [
            "Sun, 06 Nov 1994 08:49:47 GMT",
            "Sunday, 06-Nov-94 08:49:47 GMT",
            "Sun Nov  6 08:49:47 1994",
        ] {
            assert_eq!(
                parse_retry_after(date, now),
                Some(Duration::from_secs(10)),
                "{date}"
            );
        }
        // A date in the past means no wait.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        for bad in ["", "soon", "-1", "Sun, 32 Nov 1994 08:49:37 GMT", "NaN"] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn http_dates_are_exact() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(784_111_777))
        );
        assert_eq!(
            parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(UNIX_EPOCH)
        );
        assert_eq!(
            parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_438_400))
        );
    }
}
