//! A call's streamed output (a shell command's lines, pip's progress) on its way to the MCP
//! client, the same on both transports:
//!
//! - to a call that carried a `progressToken` in `_meta`: `notifications/progress`, its
//!   `progress` growing by one with every notification, the text as its `message`; a tool's
//!   counted progress ([`toolbox_host::ToolContext::emit_progress_of`]) goes there too, with
//!   `progress` its `done` and `total` its total, kept strictly growing
//!   ([`next_progress`]) when output and counted progress interleave;
//! - else, once the client asked for `info` or lower with `logging/setLevel`:
//!   `notifications/message`, level `info`, the tool's name as `logger`;
//! - else nowhere (never to stderr).
//!
//! Output waits to be sent in a queue capped at [`MAX_QUEUED_OUTPUT_BYTES`]; what would go
//! over is dropped, and a last progress note says how much. Streaming is
//! a courtesy: the tool result has all of the output, so a flood can neither stall a call
//! nor grow memory.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// The most bytes of streamed output waiting to be sent: per call over HTTP, and on stdio
/// for all notifications queued for stdout at once. Output that would go over is dropped.
pub const MAX_QUEUED_OUTPUT_BYTES: usize = 1024 * 1024;

/// MCP's logging levels, lowest first (RFC 5424 names), for `logging/setLevel`.
pub const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The rank of a level name in [`LOG_LEVELS`] (`debug` is 0), or `None` for no MCP level.
pub fn log_level_rank(name: &str) -> Option<u8> {
    LOG_LEVELS.iter().position(|l| *l == name).map(|i| i as u8)
}

/// Tool output is logged at `info`.
const LEVEL_INFO: u8 = 1;
/// No `logging/setLevel` yet: no log notifications.
const LOGGING_OFF: u8 = u8::MAX;

/// The level a client asked for with `logging/setLevel` (per connection on stdio, per MCP
/// session over HTTP); off until it asks.
pub(crate) struct LogLevel(AtomicU8);

impl Default for LogLevel {
    fn default() -> Self {
        LogLevel(AtomicU8::new(LOGGING_OFF))
    }
}

impl LogLevel {
    /// Sets the level to a rank of [`LOG_LEVELS`].
    pub(crate) fn set(&self, rank: u8) {
        self.0.store(rank, Ordering::Relaxed);
    }

    /// Whether tool output (logged at `info`) goes out as log messages.
    pub(crate) fn wants_output(&self) -> bool {
        self.0.load(Ordering::Relaxed) <= LEVEL_INFO
    }
}

/// Where a call's output goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route<T> {
    /// `notifications/progress` with the call's progress token.
    Progress(T),
    /// `notifications/message` at level `info`.
    Log,
}

/// Where output goes for a call with `progress_token` when the client's log level is
/// `level`; `None`: nowhere.
pub(crate) fn route<T>(progress_token: Option<T>, level: &LogLevel) -> Option<Route<T>> {
    match progress_token {
        Some(token) => Some(Route::Progress(token)),
        None if level.wants_output() => Some(Route::Log),
        None => None,
    }
}

/// The `progress` and `total` of the next `notifications/progress` of a call whose last one
/// said `last`: one more for a chunk of output (`done` is `None`); a tool's own count
/// (`done`) otherwise, raised to `last + 1` when it would not grow (MCP wants `progress` to
/// grow with every notification). `total` is left out when `progress` went past it.
pub(crate) fn next_progress(
    last: u64,
    done: Option<u64>,
    total: Option<u64>,
) -> (u64, Option<u64>) {
    let Some(done) = done else {
        return (last + 1, None);
    };
    let progress = done.max(last + 1);
    (progress, total.filter(|total| progress <= *total))
}

/// Bytes of output queued and not yet sent, counted against a cap.
#[derive(Debug, Default)]
pub(crate) struct QueuedBytes(AtomicUsize);

impl QueuedBytes {
    /// Counts `len` more bytes unless that would go over `cap`; false (nothing counted) then.
    #[inline]
    pub(crate) fn try_add(&self, len: usize, cap: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued + len <= cap).then_some(queued + len)
            })
            .is_ok()
    }

    /// Counts `len` more bytes whatever the cap (the rest of a line half written).
    #[inline]
    pub(crate) fn add(&self, len: usize) {
        self.0.fetch_add(len, Ordering::AcqRel);
    }

    /// `len` bytes were sent (or discarded).
    #[inline]
    pub(crate) fn sub(&self, len: usize) {
        self.0.fetch_sub(len, Ordering::AcqRel);
    }
}

/// The last progress message of a call whose output was partly dropped.
pub(crate) fn dropped_note(dropped_bytes: u64) -> String {
    format!(
        "[toolbox: {dropped_bytes} bytes of output were not streamed because the client did \
         not read them fast enough; the tool result has the output]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_goes_to_the_progress_token_else_to_info_logs_else_nowhere() {
        let level = LogLevel::default();
        assert_eq!(route(Some(7), &level), Some(Route::Progress(7)));
        assert_eq!(route(None::<u8>, &level), None);
        level.set(log_level_rank("warning").unwrap());
        assert_eq!(route(None::<u8>, &level), None);
        level.set(log_level_rank("info").unwrap());
        assert_eq!(route(None::<u8>, &level), Some(Route::Log));
        level.set(log_level_rank("debug").unwrap());
        assert_eq!(route(None::<u8>, &level), Some(Route::Log));
        assert_eq!(route(Some(7), &level), Some(Route::Progress(7)));
    }

    #[test]
    fn progress_grows_with_every_notification() {
        // Output counts by one; a tool's count jumps ahead.
        assert_eq!(next_progress(0, None, None), (1, None));
        assert_eq!(next_progress(1, Some(500), Some(1000)), (500, Some(1000)));
        assert_eq!(next_progress(500, None, None), (501, None));
        // A count that would not grow is raised past the last one.
        assert_eq!(next_progress(501, Some(501), Some(1000)), (502, Some(1000)));
        assert_eq!(
            next_progress(502, Some(1000), Some(1000)),
            (1000, Some(1000))
        );
        // Past the total, the total is left out rather than contradicted.
        assert_eq!(next_progress(1000, Some(1000), Some(1000)), (1001, None));
        assert_eq!(next_progress(0, Some(0), None), (1, None));
    }

    #[test]
    fn the_queue_cap_counts_what_waits() {
        let queued = QueuedBytes::default();
        assert!(queued.try_add(600, 1000));
        assert!(!queued.try_add(600, 1000));
        assert!(queued.try_add(400, 1000));
        queued.sub(600);
        assert!(queued.try_add(600, 1000));
        queued.add(5000);
        assert!(!queued.try_add(1, 1000));
    }

    #[test]
    fn log_levels_are_ranked_lowest_first() {
        assert_eq!(log_level_rank("debug"), Some(0));
        assert_eq!(log_level_rank("info"), Some(LEVEL_INFO));
        assert_eq!(log_level_rank("emergency"), Some(7));
        assert_eq!(log_level_rank("INFO"), None);
    }
}
