//! Background jobs: `shell` with `run_in_background`, `shell_output` and `shell_kill`.
//!
//! A job is supervised by a task on the provider's own thread (see host.rs), so it neither
//! depends on the runtime of the call that started it nor dies when a thread pool shrinks.
//! Its output goes into two bounded "unread" buffers; `shell_output` takes what is new.
//!
//! Jobs belong to one provider instance, i.e. one executor: dropping the provider kills
//! every job's process group (and session), and a dying toolbox takes them along through
//! `PR_SET_PDEATHSIG` and the janitor.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use tokio::sync::Notify;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk};
use toolbox_host::limits::Counters;
use toolbox_host::{CancellationToken, OutputStream, ToolContext};

use crate::capture::Unread;
use crate::prepared::{self, Prepared};
use crate::process::{
    self, describe_status, human_duration, Group, OutputSink, Running, Stop, POST_KILL_DRAIN,
};
use crate::{forker, Shell, TOOLSET};

pub(crate) const OUTPUT: &str = "shell_output";
pub(crate) const KILL: &str = "shell_kill";
/// Finished jobs remembered (for their exit code and last output) beyond the running ones.
const KEEP_FINISHED: usize = 32;
/// The longest `shell_output` may wait for news.
const MAX_WAIT_MS: u64 = 60_000;
/// The `job_id` argument of `shell_output` and `shell_kill`.
const JOB_ID: Arg = Arg::string("job_id").aliases(&["id"]).required();
const WAIT_MS: Arg = Arg::integer("wait_ms", 0, Some(MAX_WAIT_MS)).default(0);

pub(crate) fn output_info() -> ToolInfo {
    ToolInfo::new(
        OUTPUT,
        "Read a background job's new output (everything since the previous read, stdout and \
         stderr separately) and whether it is still running or its exit code. With wait_ms, \
         waits up to that long for new output or the job's end first — e.g. for a dev server \
         to print that it is ready. Unread output beyond 1 MiB per stream is dropped oldest \
         first, and the result says how much.",
        object(&[
            JOB_ID.doc("The job id that shell returned, e.g. `job-1`."),
            WAIT_MS.doc(format!(
                "Wait up to this many milliseconds for new output or the job's end (default 0, \
                 at most {MAX_WAIT_MS})."
            )),
        ]),
    )
    .aliases(&["bash_output"])
    .toolsets(&[TOOLSET])
}

pub(crate) fn kill_info() -> ToolInfo {
    ToolInfo::new(
        KILL,
        "Stop a background job: SIGTERM to its whole process group, SIGKILL shortly after if \
         anything is still running. Returns how it ended and any output not read yet.",
        object(&[JOB_ID.doc("The job id that shell returned, e.g. `job-1`.")]),
    )
    .risk(ToolRisk::Command)
    .aliases(&["bash_kill"])
    .toolsets(&[TOOLSET])
}

/// The jobs of one provider instance.
#[derive(Default)]
pub struct Jobs {
    inner: Mutex<JobList>,
}

#[derive(Default)]
struct JobList {
    next: u64,
    jobs: Vec<Arc<Job>>,
}

impl Jobs {
    fn find(&self, tool: &str, id: &str) -> Result<Arc<Job>> {
        let list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = list.jobs.iter().find(|j| j.id == id) {
            return Ok(job.clone());
        }
        let known: Vec<&str> = list.jobs.iter().map(|j| j.id.as_str()).collect();
        if known.is_empty() {
            bail!("{tool}: no background job {id:?} (there are no background jobs)")
        }
        bail!(
            "{tool}: no background job {id:?} (known: {})",
            known.join(", ")
        )
    }

    /// Every job, for tests and diagnostics.
    pub fn ids(&self) -> Vec<String> {
        let list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        list.jobs.iter().map(|j| j.id.clone()).collect()
    }

    /// The process group id of a job.
    pub fn pid(&self, id: &str) -> Option<i32> {
        self.find("", id).ok().map(|j| j.group.pid())
    }
}

impl Drop for Jobs {
    /// The provider (its executor) is going away: so do its jobs, at once.
    fn drop(&mut self) {
        let list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for job in &list.jobs {
            job.group.kill_now();
            job.stop.cancel();
        }
    }
}

struct Job {
    id: String,
    command: String,
    started: Instant,
    group: Arc<Group>,
    state: Mutex<JobState>,
    /// Woken on new output and on the end.
    changed: Notify,
    /// Cancelled by shell_kill (or the provider going away): stop gracefully.
    stop: CancellationToken,
}

struct JobState {
    stdout: Unread,
    stderr: Unread,
    end: Option<End>,
}

struct End {
    status: Option<ExitStatus>,
    stopped: Option<Stop>,
    elapsed: Duration,
    pipes_left_open: bool,
    /// The `[limits]` message, when the job ran into a limit.
    limit: Option<String>,
}

impl Job {
    fn running(&self) -> bool {
        self.lock().end.is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The status line and the new output of both streams; marks it read.
    fn report(&self) -> String {
        let mut state = self.lock();
        let open = state.end.is_none();
        let status = match &state.end {
            None => format!(
                "job {} · running · pid {} · started {} ago",
                self.id,
                self.group.pid(),
                human_duration(self.started.elapsed())
            ),
            Some(end) => {
                let how = match end.stopped {
                    Some(Stop::Killed) => " (stopped by shell_kill)",
                    Some(Stop::Timeout) => " (its timeout_ms ran out)",
                    _ => "",
                };
                format!(
                    "job {} · {} after {}{how}",
                    self.id,
                    describe_status(end.status),
                    human_duration(end.elapsed)
                )
            }
        };
        // The command itself is in the start message; repeating it on every poll is noise.
        let mut out = format!("{status}\n");
        if let Some(limit) = state.end.as_ref().and_then(|e| e.limit.as_ref()) {
            out.push_str(limit);
            out.push('\n');
        }
        if let Some(end) = &state.end {
            if end.pipes_left_open {
                out.push_str(
                    "note: a process that left the job's session (setsid) still held its \
                     output open; it was not stopped and its later output was not collected\n",
                );
            }
        }
        let JobState { stdout, stderr, .. } = &mut *state;
        for (name, unread) in [("stdout", stdout), ("stderr", stderr)] {
            let (text, dropped) = unread.take(open);
            if text.is_empty() && dropped == 0 {
                out.push_str(&format!("--- new {name}: nothing ---\n"));
                continue;
            }
            out.push_str(&format!("--- new {name} ---\n"));
            if dropped > 0 {
                out.push_str(&format!(
                    "[... {dropped} earlier bytes were dropped unread: only the newest unread \
                     bytes are kept ([shell] job_buffer_bytes) ...]\n"
                ));
            }
            out.push_str(&text);
            if !text.is_empty() && !text.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }

    /// Waits until there is unread output, the job has ended, or `wait` has passed.
    async fn wait_for_news(&self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before looking, so news arriving in between is not missed.
            notified.as_mut().enable();
            {
                let state = self.lock();
                if state.end.is_some() || !state.stdout.is_empty() || !state.stderr.is_empty() {
                    return;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }
}

/// The job's output goes to its unread buffers; the last bytes of stderr are also kept
/// here, to tell afterwards whether the job ran into a `[limits]` limit.
struct JobSink(Arc<Job>, Vec<u8>);

/// Bytes of stderr kept for that.
const STDERR_TAIL: usize = 4096;

impl OutputSink for JobSink {
    fn push(&mut self, stream: OutputStream, bytes: &[u8]) {
        if stream == OutputStream::Stderr {
            self.1.extend_from_slice(bytes);
            let excess = self.1.len().saturating_sub(STDERR_TAIL);
            self.1.drain(..excess);
        }
        {
            let mut state = self.0.lock();
            match stream {
                OutputStream::Stdout => state.stdout.push(bytes),
                OutputStream::Stderr => state.stderr.push(bytes),
            }
        }
        self.0.changed.notify_waiters();
    }
}

/// Starts a prepared command as a background job and says how to follow it.
pub(crate) async fn start(shell: &Shell, p: Prepared, _ctx: &ToolContext) -> Result<String> {
    let tool = prepared::NAME;
    {
        let list = shell.jobs.inner.lock().unwrap_or_else(|e| e.into_inner());
        let running = list.jobs.iter().filter(|j| j.running()).count();
        if running >= p.config.max_jobs {
            bail!(
                "{tool}: {running} background jobs are already running (the limit is {}, \
                 [shell] max_jobs); stop one with shell_kill first",
                p.config.max_jobs
            );
        }
    }
    let started = Instant::now();
    let spawned = forker::spawn(prepared::build(&p))
        .await
        .map_err(|e| prepared::spawn_error(tool, &p, e))?;
    let group = Group::new(spawned.pid);
    let id = {
        let mut list = shell.jobs.inner.lock().unwrap_or_else(|e| e.into_inner());
        list.next += 1;
        format!("job-{}", list.next)
    };
    let job = Arc::new(Job {
        id: id.clone(),
        command: one_line(&p.command),
        started,
        group: group.clone(),
        state: Mutex::new(JobState {
            stdout: Unread::new(p.config.job_buffer_bytes),
            stderr: Unread::new(p.config.job_buffer_bytes),
            end: None,
        }),
        changed: Notify::new(),
        stop: CancellationToken::new(),
    });
    {
        let mut list = shell.jobs.inner.lock().unwrap_or_else(|e| e.into_inner());
        list.jobs.push(job.clone());
        forget_old_finished(&mut list);
    }
    let deadline = p.timeout_given.then(|| started + p.timeout);
    let grace = p.config.kill_grace;
    // Held until the job ends: dropping it removes the job's limit cgroup.
    let limits = p.limits.clone();
    let forker = forker::handle()?;
    let supervised = job.clone();
    forker.spawn(async move {
        let job = supervised;
        let end = match Running::with_group(spawned, group, started) {
            Ok(running) => {
                let token = job.stop.clone();
                let stop = async move {
                    token.cancelled().await;
                    Stop::Killed
                };
                tokio::pin!(stop);
                let mut sink = JobSink(job.clone(), Vec::new());
                let o = process::supervise(running, &mut sink, deadline, stop, grace).await;
                let limit = limits.as_ref().and_then(|l| {
                    let signal = o.status.and_then(|s| s.signal());
                    let failed = !o.status.is_some_and(|s| s.success());
                    let stderr = String::from_utf8_lossy(&sink.1);
                    l.diagnose(Counters::default(), signal, failed, &stderr)
                        .map(|e| l.limits().message(e, "the job"))
                });
                End {
                    status: o.status,
                    stopped: o.stopped,
                    elapsed: o.elapsed,
                    pipes_left_open: o.pipes_left_open,
                    limit,
                }
            }
            // The Running was dropped inside with_group, which killed and reaped the command.
            Err(e) => {
                let mut state = job.lock();
                state
                    .stderr
                    .push(format!("toolbox: cannot read the job's output: {e}\n").as_bytes());
                End {
                    status: None,
                    stopped: Some(Stop::Killed),
                    elapsed: started.elapsed(),
                    pipes_left_open: false,
                    limit: None,
                }
            }
        };
        job.lock().end = Some(end);
        job.changed.notify_waiters();
    });

    let mut text = format!(
        "Started background job {id} (pid {}) in {}.\n",
        job.group.pid(),
        p.cwd_shown
    );
    if let Some(sb) = &p.sandbox {
        text.push_str(&format!("sandbox: {}\n", sb.summary()));
    }
    text.push_str(&format!(
        "Read its output with shell_output {{\"job_id\": \"{id}\"}} (add \"wait_ms\" to wait \
         for news); stop it with shell_kill {{\"job_id\": \"{id}\"}}.\n"
    ));
    match deadline {
        Some(_) => {
            if let Some(asked) = p.capped_from {
                text.push_str(&format!(
                    "note: timeout_ms {asked} is above the limit; used {} ms ([shell] max_timeout_ms)\n",
                    p.timeout.as_millis()
                ));
            }
            text.push_str(&format!(
                "It is stopped after {} ms, when killed, or when toolbox exits.\n",
                p.timeout.as_millis()
            ))
        }
        None => text.push_str("It runs until killed or until toolbox exits.\n"),
    }
    Ok(text)
}

/// Keeps every running job and the newest finished ones.
fn forget_old_finished(list: &mut JobList) {
    let finished = list.jobs.iter().filter(|j| !j.running()).count();
    let mut excess = finished.saturating_sub(KEEP_FINISHED);
    list.jobs.retain(|j| {
        if excess > 0 && !j.running() {
            excess -= 1;
            false
        } else {
            true
        }
    });
}

fn one_line(command: &str) -> String {
    let first = command.lines().next().unwrap_or("");
    let mut shown: String = first.chars().take(200).collect();
    if shown.len() < command.len() {
        shown.push_str(" …");
    }
    shown
}

pub(crate) async fn output(shell: &Shell, args: Value, _ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(OUTPUT, &args)?;
    let id = JOB_ID.str(&a)?;
    let wait = WAIT_MS.u64(&a)?;
    a.finish()?;
    let job = shell.jobs.find(OUTPUT, id)?;
    if wait > 0 {
        job.wait_for_news(Duration::from_millis(wait)).await;
    }
    Ok(Value::String(job.report()))
}

pub(crate) async fn kill(shell: &Shell, args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(KILL, &args)?;
    let id = JOB_ID.str(&a)?;
    a.finish()?;
    let job = shell.jobs.find(KILL, id)?;
    if !job.running() {
        return Ok(Value::String(format!(
            "job {id} ({}) had already ended.\n{}",
            job.command,
            job.report()
        )));
    }
    job.stop.cancel();
    // The supervisor escalates to SIGKILL after the grace and then drains briefly.
    let grace = shell.config(ctx)?.kill_grace;
    let limit = grace + POST_KILL_DRAIN + Duration::from_secs(2);
    let deadline = tokio::time::Instant::now() + limit;
    while job.running() && tokio::time::Instant::now() < deadline {
        let notified = job.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !job.running() {
            break;
        }
        let _ = tokio::time::timeout_at(deadline, notified).await;
    }
    if job.running() {
        return Err(anyhow!(
            "{KILL}: job {id} was sent SIGTERM and SIGKILL but had not ended after {}",
            human_duration(limit)
        ));
    }
    Ok(Value::String(format!(
        "Stopped job {id} ({}).\n{}",
        job.command,
        job.report()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::process_alive;
    use crate::test_support::*;
    use serde_json::json;

    fn job_id(started: &str) -> String {
        started
            .split_whitespace()
            .nth(3)
            .expect("job id in the start message")
            .to_string()
    }

    async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn start_read_incrementally_and_see_the_exit_code() {
        let (_d, ctx) = setup("shell");
        let shell = Shell::new();
        let started = call_with(
            &shell,
            &ctx,
            "shell",
            json!({
                "command": "echo one; echo warn >&2; sleep 2; echo two; exit 7",
                "run_in_background": true
            }),
        )
        .await
        .unwrap();
        assert!(
            started.starts_with("Started background job job-1 (pid "),
            "{started}"
        );
        assert!(
            started.contains("shell_output {\"job_id\": \"job-1\"}"),
            "{started}"
        );
        let id = job_id(&started);
        // stdout and stderr are read by separate pipes: "warn" may come back alone first.
        let mut first = String::new();
        for _ in 0..20 {
            let r = call_with(&shell, &ctx, OUTPUT, json!({"job_id": id, "wait_ms": 5000}))
                .await
                .unwrap();
            first.push_str(&r);
            if first.contains("one\n") {
                break;
            }
        }
        assert!(first.contains("one\n"), "{first}");
        assert!(!first.contains("two"), "{first}");
        // Wait for the end; everything not read before arrives exactly once.
        let mut rest = String::new();
        for _ in 0..50 {
            let r = call_with(&shell, &ctx, OUTPUT, json!({"job_id": id, "wait_ms": 2000}))
                .await
                .unwrap();
            rest.push_str(&r);
            if r.contains("exit code 7") {
                break;
            }
        }
        assert!(rest.contains("exit code 7 after"), "{rest}");
        assert!(rest.contains("two\n"), "{rest}");
        assert!(!rest.contains("one\n"), "read twice: {rest}");
        let all = format!("{first}{rest}");
        assert_eq!(all.matches("warn").count(), 1, "{all}");
    }

    #[tokio::test]
    async fn kill_stops_the_whole_group_and_reports() {
        let (_d, ctx) = setup("shell");
        let shell = Shell::new();
        let started = call_with(
            &shell,
            &ctx,
            "shell",
            json!({
                "command": "sleep 300 & echo child $!; wait",
                "run_in_background": true
            }),
        )
        .await
        .unwrap();
        let id = job_id(&started);
        let out = call_with(&shell, &ctx, OUTPUT, json!({"job_id": id, "wait_ms": 5000}))
            .await
            .unwrap();
        assert!(out.contains("· running ·"), "{out}");
        let child: i32 = out
            .split("\nchild ")
            .nth(1)
            .and_then(|s| s.lines().next())
            .and_then(|s| s.trim().parse().ok())
            .expect("child pid printed");
        let leader = shell.jobs.pid(&id).unwrap();
        assert!(process_alive(child) && process_alive(leader));
        let killed = call_with(&shell, &ctx, KILL, json!({"job_id": id}))
            .await
            .unwrap();
        assert!(killed.contains("killed by signal 15 (SIGTERM)"), "{killed}");
        assert!(killed.contains("(stopped by shell_kill)"), "{killed}");
        wait_until("the job's processes to go", || {
            !process_alive(child) && !process_alive(leader)
        })
        .await;
        let again = call_with(&shell, &ctx, KILL, json!({"job_id": id}))
            .await
            .unwrap();
        assert!(
            again.starts_with(&format!(
                "job {id} (sleep 300 & echo child $!; wait) had already ended"
            )),
            "{again}"
        );
    }

    #[tokio::test]
    async fn unknown_ids_and_limits_are_explained() {
        let (_d, mut ctx) = setup("shell");
        let shell = Shell::new();
        let e = call_with(&shell, &ctx, OUTPUT, json!({"job_id": "job-9"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "shell_output: no background job \"job-9\" (there are no background jobs)"
        );
        let e = call_with(
            &shell,
            &ctx,
            OUTPUT,
            json!({"job_id": "job-1", "wait_ms": 70000}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("`wait_ms` must be between 0 and 60000"), "{e}");
        ctx.config = Arc::new(json!({"shell": {"max_jobs": 1}}));
        call_with(
            &shell,
            &ctx,
            "shell",
            json!({"command": "sleep 30", "run_in_background": true}),
        )
        .await
        .unwrap();
        let e = call_with(
            &shell,
            &ctx,
            "shell",
            json!({"command": "sleep 30", "run_in_background": true}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("the limit is 1, [shell] max_jobs"), "{e}");
        let e = call_with(&shell, &ctx, KILL, json!({"job_id": "job-7"}))
            .await
            .unwrap_err();
        assert_eq!(e, "shell_kill: no background job \"job-7\" (known: job-1)");
    }

    #[tokio::test]
    async fn dropping_the_provider_kills_its_jobs() {
        let (_d, ctx) = setup("shell");
        let shell = Shell::new();
        let started = call_with(
            &shell,
            &ctx,
            "shell",
            json!({
                "command": "trap '' TERM; sleep 300",
                "run_in_background": true
            }),
        )
        .await
        .unwrap();
        let pid = shell.jobs.pid(&job_id(&started)).unwrap();
        assert!(process_alive(pid));
        drop(shell);
        wait_until("the job to die with its provider", || !process_alive(pid)).await;
    }

    #[test]
    fn jobs_survive_the_thread_and_runtime_that_started_them() {
        // PR_SET_PDEATHSIG fires when the *forking thread* exits; jobs are forked on the
        // provider's own thread, so a short-lived caller thread must not take them along.
        let dir = tempfile::tempdir().unwrap();
        let shell = Arc::new(Shell::new());
        let s = shell.clone();
        let root = dir.path().to_path_buf();
        let started = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ctx = context(&root, "shell");
            rt.block_on(call_with(
                &s,
                &ctx,
                "shell",
                json!({"command": "sleep 300", "run_in_background": true}),
            ))
            .unwrap()
        })
        .join()
        .unwrap();
        let pid = shell.jobs.pid(&job_id(&started)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            process_alive(pid),
            "the job died with the thread that started it"
        );
        drop(shell);
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_alive(pid) {
            assert!(Instant::now() < deadline, "job survived its provider");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[tokio::test]
    async fn unread_output_is_bounded() {
        let (_d, mut ctx) = setup("shell");
        ctx.config = Arc::new(json!({"shell": {"job_buffer_bytes": 1024}}));
        let shell = Shell::new();
        let started = call_with(
            &shell,
            &ctx,
            "shell",
            json!({
                "command": "head -c 5000 /dev/zero | tr '\\0' a; echo; echo END",
                "run_in_background": true
            }),
        )
        .await
        .unwrap();
        let id = job_id(&started);
        let mut all = String::new();
        for _ in 0..50 {
            let out = call_with(&shell, &ctx, OUTPUT, json!({"job_id": id, "wait_ms": 2000}))
                .await
                .unwrap();
            // Each read returns at most the 1024 newest unread bytes per stream plus headers.
            assert!(out.len() < 1500, "{}", out.len());
            all.push_str(&out);
            if out.contains("exit code") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(all.contains("exit code 0"), "{all}");
        // 5005 bytes written in a burst, 1024 kept between reads: some were dropped.
        assert!(all.contains("earlier bytes were dropped unread"), "{all}");
        assert!(all.contains("END"), "{all}");
    }
}
