//! `sleep`: wait a while (for a server to start, a rate limit to pass) without running a
//! command. Capped, and stops at once when the call is cancelled.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, Vocabulary};
use toolbox_host::ToolContext;

use crate::process::human_duration;
use crate::{Shell, TOOLSET};

pub(crate) const NAME: &str = "sleep";
/// At least 0. A wait above `[shell] max_sleep_seconds` is capped to it, with a note, not
/// refused; that limit is the operator's, so the schema states no maximum.
const SECONDS: Arg = Arg::number("seconds", Some(0.0), None)
    .aliases(&["duration"])
    .required();

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Wait for a number of seconds (fractions allowed, at most 300 by default) without \
         running anything, e.g. to give a background job time to start before reading its \
         output. Prefer shell_output with wait_ms when waiting for a job's output.",
        object(&[SECONDS.doc("How long to wait, in seconds, e.g. 2 or 0.5.")]),
    )
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "sleep")
}

pub(crate) async fn run(shell: &Shell, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let Some(seconds) = SECONDS.opt_f64(&a)? else {
        return Err(a.missing(SECONDS.name));
    };
    a.finish()?;
    let max = shell.config(ctx)?.max_sleep_seconds;
    let (wait, note) = if seconds > max as f64 {
        (
            Duration::from_secs(max),
            format!(
                " ({seconds} s is above the limit; capped to {max} s by [shell] max_sleep_seconds)"
            ),
        )
    } else {
        (Duration::from_secs_f64(seconds), String::new())
    };
    // Nothing to wait for: a timer of zero would still wait for the timer wheel's next
    // millisecond tick.
    if wait.is_zero() {
        return Ok(Value::String(format!("Slept 0 ms{note}.")));
    }
    let started = Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(wait) => Ok(Value::String(format!("Slept {}{note}.", human_duration(wait)))),
        _ = ctx.cancel.cancelled() => bail!("{NAME} was cancelled after {}", human_duration(started.elapsed())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;
    use std::sync::Arc;

    #[tokio::test]
    async fn sleeps_fractions_and_caps() {
        let (_d, mut ctx) = setup(NAME);
        let out = call(&ctx, NAME, json!({"seconds": 0.05})).await.unwrap();
        assert_eq!(out, "Slept 50 ms.");
        ctx.config = Arc::new(json!({"shell": {"max_sleep_seconds": 0}}));
        let out = call(&ctx, NAME, json!({"seconds": "2"})).await.unwrap();
        assert_eq!(
            out,
            "Slept 0 ms (2 s is above the limit; capped to 0 s by [shell] max_sleep_seconds)."
        );
    }

    /// `sleep 0` answers at once: on a runtime without timers, arming one would panic (a
    /// zero timer still waits for the timer wheel's next millisecond tick).
    #[test]
    fn sleeping_zero_seconds_arms_no_timer() {
        let (_d, ctx) = setup(NAME);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let out = runtime
            .block_on(call(&ctx, NAME, json!({"seconds": 0})))
            .unwrap();
        assert_eq!(out, "Slept 0 ms.");
    }

    #[tokio::test]
    async fn bad_arguments_are_named() {
        let (_d, ctx) = setup(NAME);
        assert_eq!(
            call(&ctx, NAME, json!({})).await.unwrap_err(),
            "sleep requires seconds"
        );
        let e = call(&ctx, NAME, json!({"seconds": -1})).await.unwrap_err();
        assert_eq!(e, "sleep: argument `seconds` must be at least 0, got -1");
        let e = call(&ctx, NAME, json!({"seconds": 1, "ms": 2}))
            .await
            .unwrap_err();
        assert!(e.contains("unknown argument `ms`"), "{e}");
    }

    #[tokio::test]
    async fn cancellation_ends_the_wait() {
        let (_d, ctx) = setup(NAME);
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let e = call(&ctx, NAME, json!({"seconds": 60})).await.unwrap_err();
        assert!(e.starts_with("sleep was cancelled after"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }
}
