//! The router's errors: JSON `{"error": "..."}` with a fitting status, and `Retry-After` on
//! a 503 that is worth retrying. Messages name the session and the epoch, never a session
//! server's URL or token.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// A failure the router answers itself.
#[derive(Debug, Clone)]
pub struct RouterError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
    /// Seconds for `Retry-After`, when worth retrying.
    pub retry_after: Option<u64>,
}

impl RouterError {
    /// An error with `status` saying `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        RouterError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After: seconds`.
    pub fn unavailable(message: impl Into<String>, seconds: u64) -> Self {
        RouterError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            retry_after: Some(seconds),
        }
    }
}

impl IntoResponse for RouterError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"toolbox router\""),
            );
        }
        response
    }
}
