//! Retries with backoff. (Stub.)
