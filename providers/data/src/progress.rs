//! Progress of long reads: a data tool that runs longer than about a second says how far it
//! is, through [`ToolContext::emit_progress_of`]: rows and bytes done, and a fraction when
//! the size is known ("1,234,567 rows, 180 MB of 512 MB (35%)"). MCP clients that sent a
//! `progressToken` get it as `notifications/progress`, the console as a bar, `toolbox call`
//! on a terminal as a line redrawn in place.
//!
//! [`Progress`] is the one reporter. [`Progress::tick`] is meant to be called once per record
//! and is nearly free: it looks at the clock only every [`CHECK_ROWS`] rows or
//! [`CHECK_BYTES`] bytes, says nothing during the first second ([`FIRST_AFTER`]), then at
//! most every half second ([`EVERY`]), and nothing at all when nobody listens or the call
//! was cancelled. `TOOLBOX_DATA_PROGRESS_MS=N` (read once per process; for tests and demos)
//! makes it report after N ms and then every N ms.
//!
//! The unit of `done` / `total` is the file's bytes for the text formats (the bytes read from
//! the file: compressed bytes for `.gz` / `.zst`, whose total is the file's size), counted
//! by the source's [`Meter`](crate::source::Meter); Parquet and xlsx are read with seeks, so
//! they count rows ([`Progress::rows`], with the total when known). `done` grows with every
//! report and reaches the total only with [`Progress::finish`]: the bytes read run ahead of
//! the records by the read buffer.
//!
//! # Use
//!
//! Make the reporter from the call's context (it is `Send`: it moves into the
//! `toolbox_host::blocking` closure with the rest), tick it per record with the rows so far
//! and the meter's bytes, and finish it at the end:
//!
//! ```ignore
//! let ctx = ctx.clone();
//! toolbox_host::blocking(format!("{NAME}: the conversion"), move || {
//!     let src = source::open(&ws, &p, &opts, &limits)?;
//!     let meter = src.meter.clone();
//!     let mut progress = Progress::for_source(&ctx, &src);
//!     let mut rows = 0u64;
//!     records::read(src, &limits, sheet, &cancelled, &mut |item| {
//!         rows += 1;
//!         progress.tick(rows, meter.file_bytes());
//!         // ... the record ...
//!         Ok(Flow::Go)
//!     })?;
//!     progress.finish(rows, meter.file_bytes());
//!     // ...
//! })
//! ```
//!
//! Work split over threads ticks from the one thread that reads (the meter is counted on
//! it). A reader that knows its row count ahead (Parquet's metadata) uses
//! `Progress::rows(&ctx, Some(total_rows))` and passes 0 as bytes.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use toolbox_host::ToolContext;

use crate::source::{Body, Source};

/// No report before the work has run this long.
pub const FIRST_AFTER: Duration = Duration::from_secs(1);
/// Reports come at most this often.
pub const EVERY: Duration = Duration::from_millis(500);
/// The clock is looked at every this many rows...
pub const CHECK_ROWS: u32 = 256;
/// ...or this many bytes, whichever comes first (long records).
pub const CHECK_BYTES: u64 = 4 * 1024 * 1024;
/// `TOOLBOX_DATA_PROGRESS_MS=N`: the first report after N ms, then at most every N ms.
const ENV_VAR: &str = "TOOLBOX_DATA_PROGRESS_MS";

/// What `done` and `total` count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Bytes read from the file, of its size when known.
    Bytes(Option<u64>),
    /// Rows, of a known count when given.
    Rows(Option<u64>),
}

/// A rate-limited progress reporter for one call's read; see the module's documentation.
pub struct Progress {
    /// `None` when nobody listens: every tick returns at once.
    ctx: Option<ToolContext>,
    unit: Unit,
    /// Reports are due from this moment on.
    next_at: Instant,
    every: Duration,
    /// Rows left before the clock is looked at.
    countdown: u32,
    /// The clock is looked at once the bytes reach this.
    check_at_bytes: u64,
    /// Reports sent.
    sent: u64,
    /// The `done` of the last report.
    last_done: u64,
}

impl Progress {
    /// A reporter for a read of `total_bytes` (the file's size, when known), counted in the
    /// bytes read from the file.
    pub fn new(ctx: &ToolContext, total_bytes: Option<u64>) -> Progress {
        Progress::with_unit(ctx, Unit::Bytes(total_bytes))
    }

    /// A reporter counted in rows, of `total_rows` when known (Parquet's metadata).
    pub fn rows(ctx: &ToolContext, total_rows: Option<u64>) -> Progress {
        Progress::with_unit(ctx, Unit::Rows(total_rows))
    }

    /// The reporter for reading `src`: bytes of the file's size for the text formats, rows
    /// for Parquet and xlsx (read with seeks, so their bytes are not counted).
    pub fn for_source(ctx: &ToolContext, src: &Source) -> Progress {
        match src.body {
            Body::Text(_) => Progress::new(ctx, Some(src.size)),
            Body::File(_) => Progress::rows(ctx, None),
        }
    }

    fn with_unit(ctx: &ToolContext, unit: Unit) -> Progress {
        let (first, every) = pace();
        let listened = ctx.events.is_active();
        Progress {
            ctx: listened.then(|| ctx.clone()),
            unit,
            next_at: Instant::now() + first,
            every,
            countdown: if listened { CHECK_ROWS } else { u32::MAX },
            check_at_bytes: if listened { CHECK_BYTES } else { u64::MAX },
            sent: 0,
            last_done: 0,
        }
    }

    /// One more record: `rows` so far, `bytes` read from the file so far (ignored when
    /// counting rows). Nearly free; reports when one is due.
    #[inline]
    pub fn tick(&mut self, rows: u64, bytes: u64) {
        self.countdown = self.countdown.saturating_sub(1);
        if self.countdown > 0 && bytes < self.check_at_bytes {
            return;
        }
        self.check(rows, bytes);
    }

    /// The read is over: a last report with the final counts, when any report was sent
    /// (a bar left at 97% would look stuck).
    pub fn finish(&mut self, rows: u64, bytes: u64) {
        if self.sent > 0 {
            self.report(rows, bytes, true);
        }
    }

    #[cold]
    fn check(&mut self, rows: u64, bytes: u64) {
        if self.ctx.is_none() {
            self.countdown = u32::MAX;
            self.check_at_bytes = u64::MAX;
            return;
        }
        self.countdown = CHECK_ROWS;
        self.check_at_bytes = bytes.saturating_add(CHECK_BYTES);
        let now = Instant::now();
        if now < self.next_at {
            return;
        }
        self.next_at = now + self.every;
        self.report(rows, bytes, false);
    }

    /// Sends a report. `done` grows with every report, and reaches the total only at the
    /// `end`: the bytes read run ahead of the records (the read buffer), so the whole file
    /// can be read well before its last records are; a report whose `done` would not grow
    /// is skipped (a later one says it).
    fn report(&mut self, rows: u64, bytes: u64, end: bool) {
        let Some(ctx) = &self.ctx else {
            return;
        };
        // The call is over for whoever waits for it: say nothing more.
        if ctx.cancel.is_cancelled() {
            return;
        }
        let (message, done, total) = describe(self.unit, rows, bytes, end);
        if !end && self.sent > 0 && done <= self.last_done {
            return;
        }
        ctx.emit_progress_of(message, done, total);
        self.last_done = done;
        self.sent += 1;
    }
}

/// The first report's delay and the pace after it: [`FIRST_AFTER`] and [`EVERY`], or
/// `TOOLBOX_DATA_PROGRESS_MS` for both.
fn pace() -> (Duration, Duration) {
    static PACE: OnceLock<(Duration, Duration)> = OnceLock::new();
    *PACE.get_or_init(|| {
        match std::env::var(ENV_VAR)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            Some(ms) => (Duration::from_millis(ms), Duration::from_millis(ms)),
            None => (FIRST_AFTER, EVERY),
        }
    })
}

/// The message, `done` and `total` of a report; before the `end`, `done` stays short of
/// the total (and the percentage at most 99).
fn describe(unit: Unit, rows: u64, bytes: u64, end: bool) -> (String, u64, Option<u64>) {
    let row_word = if rows == 1 { "row" } else { "rows" };
    let short_of = |done: u64, total: u64| {
        if end || total == 0 {
            done
        } else {
            done.min(total - 1)
        }
    };
    match unit {
        Unit::Bytes(Some(total)) => {
            let done = short_of(bytes, total);
            (
                format!(
                    "{} {row_word}, {} of {} ({}%)",
                    grouped(rows),
                    size(bytes),
                    size(total),
                    percent(done, total)
                ),
                done,
                Some(total),
            )
        }
        Unit::Bytes(None) => (
            format!("{} {row_word}, {} read", grouped(rows), size(bytes)),
            bytes,
            None,
        ),
        Unit::Rows(Some(total)) => {
            let done = short_of(rows, total);
            (
                format!(
                    "{} of {} rows ({}%)",
                    grouped(rows),
                    grouped(total),
                    percent(done, total)
                ),
                done,
                Some(total),
            )
        }
        Unit::Rows(None) => (format!("{} {row_word}", grouped(rows)), rows, None),
    }
}

/// `done` of `total` in whole percent, at most 100.
fn percent(done: u64, total: u64) -> u64 {
    if total == 0 {
        return 100;
    }
    (u128::from(done) * 100 / u128::from(total)).min(100) as u64
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A size in decimal units: `512 B`, `18 KB`, `180 MB`, `2.4 GB` (one decimal under 10).
fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use toolbox_host::{EventSink, ToolEvent, Workspace};

    fn context(events: EventSink) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let mut ctx = ToolContext::new(ws, "progress-test", "call-1", "data__validate");
        ctx.events = events;
        (dir, ctx)
    }

    fn recorder() -> (EventSink, Arc<Mutex<Vec<ToolEvent>>>) {
        let seen: Arc<Mutex<Vec<ToolEvent>>> = Arc::default();
        let sink = {
            let seen = seen.clone();
            EventSink::new(move |e| seen.lock().unwrap().push(e))
        };
        (sink, seen)
    }

    #[test]
    fn messages_say_rows_bytes_and_the_fraction() {
        assert_eq!(
            describe(
                Unit::Bytes(Some(512_000_000)),
                1_234_567,
                180_000_000,
                false
            ),
            (
                "1,234,567 rows, 180 MB of 512 MB (35%)".to_string(),
                180_000_000,
                Some(512_000_000)
            )
        );
        assert_eq!(
            describe(Unit::Bytes(None), 1, 2_400, false),
            ("1 row, 2.4 KB read".to_string(), 2_400, None)
        );
        assert_eq!(
            describe(Unit::Rows(Some(4_000)), 1_000, 0, false),
            ("1,000 of 4,000 rows (25%)".to_string(), 1_000, Some(4_000))
        );
        assert_eq!(
            describe(Unit::Rows(None), 12, 0, false),
            ("12 rows".to_string(), 12, None)
        );
        // The whole file read, its last records not yet: short of the end.
        assert_eq!(
            describe(Unit::Bytes(Some(1_000)), 7, 1_000, false),
            (
                "7 rows, 1.0 KB of 1.0 KB (99%)".to_string(),
                999,
                Some(1_000)
            )
        );
        assert_eq!(
            describe(Unit::Rows(Some(10)), 10, 0, true),
            ("10 of 10 rows (100%)".to_string(), 10, Some(10))
        );
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(size(999), "999 B");
        assert_eq!(size(2_400_000_000), "2.4 GB");
        assert_eq!(percent(5, 0), 100);
        assert_eq!(percent(7, 5), 100);
    }

    #[test]
    fn quick_work_says_nothing_and_a_finish_without_reports_stays_quiet() {
        let (sink, seen) = recorder();
        let (_dir, ctx) = context(sink);
        let mut progress = Progress::new(&ctx, Some(1_000));
        // Well within the first second (the default pace; the variable is not set here).
        if std::env::var_os(ENV_VAR).is_none() {
            for rows in 1..=10_000 {
                progress.tick(rows, rows / 10);
            }
            progress.finish(10_000, 1_000);
            assert!(seen.lock().unwrap().is_empty());
            assert_eq!(progress.sent, 0);
        }
    }

    #[test]
    fn a_due_report_carries_done_and_total_and_finish_reports_the_end() {
        let (sink, seen) = recorder();
        let (_dir, ctx) = context(sink);
        let mut progress = Progress::new(&ctx, Some(10_000_000));
        progress.next_at = Instant::now();
        progress.every = Duration::ZERO;
        // The clock is only looked at every CHECK_ROWS rows.
        for rows in 1..u64::from(CHECK_ROWS) {
            progress.tick(rows, rows * 10);
        }
        assert!(seen.lock().unwrap().is_empty());
        progress.tick(u64::from(CHECK_ROWS), 2_560);
        // Or once CHECK_BYTES more were read, whatever the rows.
        progress.tick(257, 2_560 + CHECK_BYTES);
        progress.finish(300, 10_000_000);
        let seen = seen.lock().unwrap();
        let reports: Vec<(String, Option<u64>, Option<u64>)> = seen
            .iter()
            .map(|e| match e {
                ToolEvent::Progress {
                    message,
                    done,
                    total,
                    ..
                } => (message.clone(), *done, *total),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            reports,
            vec![
                (
                    "256 rows, 2.6 KB of 10 MB (0%)".to_string(),
                    Some(2_560),
                    Some(10_000_000)
                ),
                (
                    "257 rows, 4.2 MB of 10 MB (41%)".to_string(),
                    Some(2_560 + CHECK_BYTES),
                    Some(10_000_000)
                ),
                (
                    "300 rows, 10 MB of 10 MB (100%)".to_string(),
                    Some(10_000_000),
                    Some(10_000_000)
                ),
            ]
        );
    }

    #[test]
    fn done_grows_and_reaches_the_total_only_at_the_end() {
        let (sink, seen) = recorder();
        let (_dir, ctx) = context(sink);
        let mut progress = Progress::new(&ctx, Some(1_000));
        progress.next_at = Instant::now();
        progress.every = Duration::ZERO;
        // A small file is all in the read buffer before its first record.
        for rows in 1..=1_024 {
            progress.tick(rows, 1_000);
        }
        progress.finish(1_024, 1_000);
        let seen = seen.lock().unwrap();
        let dones: Vec<(Option<u64>, String)> = seen
            .iter()
            .map(|e| match e {
                ToolEvent::Progress { done, message, .. } => (*done, message.clone()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            dones,
            vec![
                (Some(999), "256 rows, 1.0 KB of 1.0 KB (99%)".to_string()),
                (
                    Some(1_000),
                    "1,024 rows, 1.0 KB of 1.0 KB (100%)".to_string()
                ),
            ]
        );
    }

    #[test]
    fn nobody_listening_or_a_cancelled_call_gets_nothing() {
        let (_dir, ctx) = context(EventSink::none());
        let mut progress = Progress::new(&ctx, None);
        progress.next_at = Instant::now();
        for rows in 1..=1_000 {
            progress.tick(rows, rows);
        }
        assert_eq!(progress.sent, 0);

        let (sink, seen) = recorder();
        let (_dir, ctx) = context(sink);
        let mut progress = Progress::rows(&ctx, None);
        progress.next_at = Instant::now();
        ctx.cancel.cancel();
        for rows in 1..=1_000 {
            progress.tick(rows, 0);
        }
        assert!(seen.lock().unwrap().is_empty());
    }
}
