//! `shell` (alias `bash`): run a bash command line, streaming its output, under a hard
//! timeout; or start it as a background job.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Preview, ToolInfo, ToolOutput, ToolRisk, Vocabulary};
use toolbox_host::limits::{Counters, Limits};
use toolbox_host::{OutputStream, ToolContext};

use crate::capture::{HeadTail, Utf8Stream};
use crate::config::{SandboxMode, DEFAULT_MAX_TIMEOUT_MS};
use crate::prepared::{build, spawn_error, Prepared};
use crate::process::{self, describe_status, human_duration, OutputSink, Running, Stop};
use crate::{forker, jobs, Shell, TOOLSET};
use toolbox_host::sandbox::{PreparedSandbox, ProtectSpec};

pub(crate) use crate::prepared::NAME;
const COMMAND: Arg = Arg::string("command").aliases(&["cmd"]).required();
const CWD: Arg = Arg::string("cwd").aliases(&["workdir"]);
/// At most `[shell] max_timeout_ms`: a larger value is capped to it, with a note, not refused
/// (the schema states the default limit).
const TIMEOUT_MS: Arg = Arg::integer("timeout_ms", 1, Some(DEFAULT_MAX_TIMEOUT_MS));
const RUN_IN_BACKGROUND: Arg = Arg::boolean("run_in_background");
/// Free text for people; accepted so a model that sends it is not refused.
const DESCRIPTION: Arg = Arg::string("description");

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Run a bash command line (`bash -c`) and get its exit code, stdout, stderr and \
         duration. Runs in the session scratchpad unless `cwd` names another folder of the \
         workspace; stdin is empty (/dev/null) and there is no terminal, so interactive \
         prompts fail instead of waiting. Output streams live to the user. The command is \
         stopped after `timeout_ms` (default 2 minutes) and everything it started is stopped \
         with it — including processes it put in the background with `&`, which do not \
         outlive the call. For servers, watchers and other long-running processes use \
         run_in_background=true, then read with shell_output and stop with shell_kill. Very \
         long output is cut to its beginning and end; the full text is saved to a file named \
         in the result. `shell` is the fallback: for read-only git checks, system commands and \
         process control. It is not for Python analysis, JSON/CSV conversion or installing \
         packages (use run_python_code, the data__ tools and kernel_install); never run \
         `python …` here: run a script with run_python_code's script_path.",
        object(&[
            COMMAND.doc("The bash command line to run, e.g. `ls -la && make test`."),
            CWD.doc(
                "Working directory, relative to the workspace (`output/`, `scratchpad/` and \
                 `input/` name this session's folders). Default: the session scratchpad.",
            ),
            TIMEOUT_MS.doc(format!(
                "Stop the command after this many milliseconds (default 120000, at most \
                 {DEFAULT_MAX_TIMEOUT_MS}). With run_in_background, a lifetime limit for the job \
                 (default: none)."
            )),
            RUN_IN_BACKGROUND.doc(
                "Start the command as a background job and return its job id at once (default \
                 false). Use for dev servers and watchers.",
            ),
            DESCRIPTION.doc("A few words on what the command does, for the user (not executed)."),
        ]),
    )
    .risk(ToolRisk::Command)
    .aliases(&["bash"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "bash")
    .output_schema(output_schema())
}

/// The structured result beside the text, for programs: the exit status and both streams (as
/// kept: a long output's middle may be omitted, see `omitted_bytes`). A command started in
/// the background has only `job_id`'s message.
fn output_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "exit_code": {"type": ["integer", "null"], "description": "null when a signal ended it, or for a background start."},
            "signal": {"type": ["integer", "null"], "description": "The signal that ended it, if one did."},
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "stdout_bytes": {"type": "integer", "description": "Everything the command wrote to stdout, kept or not."},
            "stderr_bytes": {"type": "integer"},
            "omitted_bytes": {"type": "integer", "description": "Output left out of stdout/stderr here (the middle of a long output)."},
            "elapsed_ms": {"type": "integer"},
            "cwd": {"type": "string"},
            "background": {"type": "boolean", "description": "Started in the background: see message for the job id."},
            "message": {"type": "string"}
        }
    })
}

pub(crate) async fn run(shell: &Shell, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
    let a = Args::new(NAME, &args)?;
    let command = COMMAND.str(&a)?;
    if command.trim().is_empty() {
        bail!("{NAME}: argument `command` is empty");
    }
    if command.contains('\0') {
        bail!("{NAME}: argument `command` contains a NUL byte");
    }
    let cwd_arg = CWD.opt_nonempty_str(&a)?;
    let timeout_arg = TIMEOUT_MS.opt_u64_at_least(&a)?;
    let background = RUN_IN_BACKGROUND.bool(&a)?;
    let _ = DESCRIPTION.opt_str(&a)?;
    a.finish()?;

    let config = shell.config(ctx)?;
    let limits = Limits::from_config(&ctx.config)
        .map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    // Before anything is started: what starts afterwards is inside toolbox's containment.
    toolbox_host::containment::ensure();
    let (timeout, capped_from) = match timeout_arg {
        Some(ms) if ms > config.max_timeout.as_millis() as u64 => (config.max_timeout, Some(ms)),
        Some(ms) => (Duration::from_millis(ms), None),
        None => (config.default_timeout, None),
    };
    let cwd = resolve_cwd(ctx, cwd_arg)?;
    let sandbox = match config.sandbox {
        SandboxMode::Off => None,
        mode => {
            let writable = [ctx.workspace.root().to_path_buf(), temp_dir()];
            // The session's scratchpad and output folders must exist before the command
            // starts: the rest of .toolbox/ is read-only inside the sandbox, so they could
            // not be created there.
            ctx.workspace
                .scratchpad()
                .and_then(|_| ctx.workspace.output_dir())
                .map_err(|e| anyhow!("{NAME}: cannot create the session folders: {e}"))?;
            let protect = ProtectSpec {
                root: ctx.workspace.root().to_path_buf(),
                keep_writable: ["scratchpad", "output", "input"]
                    .iter()
                    .map(|kind| ctx.workspace.session_dir(kind))
                    .collect(),
                cwd: cwd.clone(),
            };
            let prepared =
                PreparedSandbox::prepare(mode, config.sandbox_network, &writable, Some(&protect))
                    .map_err(|e| {
                    anyhow!(
                        "{NAME}: the OS sandbox ([shell] sandbox = \"{}\") cannot be enforced \
                         here, so the command was not run: {e:#}",
                        mode.as_str()
                    )
                })?;
            Some(Arc::new(prepared))
        }
    };
    let prepared = Prepared {
        command: command.to_string(),
        cwd_shown: ctx.workspace.display_real(&cwd),
        cwd,
        timeout,
        capped_from,
        timeout_given: timeout_arg.is_some(),
        sandbox,
        limits: (!limits.is_none()).then(|| Arc::new(limits.prepare())),
        config,
        trace_env: ctx.trace_env(),
    };
    if background {
        return jobs::start(shell, prepared, ctx).await.map(|text| {
            let structured = json!({"background": true, "exit_code": null, "message": text});
            ToolOutput::new(text, structured)
        });
    }
    foreground(prepared, ctx).await
}

/// What a command would do, for the person asked to approve it: the command as written,
/// the folder it runs in (its real path), the OS sandbox it runs under, and its timeout.
/// Changes nothing (the scratchpad is not even created).
pub(crate) fn preview(shell: &Shell, args: &Value, ctx: &ToolContext) -> Option<Preview> {
    let a = Args::new(NAME, args).ok()?;
    let command = COMMAND.str(&a).ok()?;
    let cwd = match CWD.opt_nonempty_str(&a).ok()? {
        None => ctx
            .workspace
            .display_real(&ctx.workspace.session_dir("scratchpad")),
        Some(given) => match ctx.workspace.resolve(given) {
            Ok(abs) => ctx.workspace.display_real(&abs),
            Err(e) => {
                return Some(Preview::new(format!(
                    "Run a shell command: this will fail: {e}"
                )))
            }
        },
    };
    let background = RUN_IN_BACKGROUND.bool(&a).unwrap_or(false);
    let sandbox = match shell.config(ctx).map(|c| c.sandbox) {
        Ok(SandboxMode::Off) | Err(_) => {
            "off (the command can do whatever your user can)".to_string()
        }
        Ok(mode) => format!("{} (the OS sandbox of [shell] sandbox)", mode.as_str()),
    };
    let mut fields = vec![("working folder", cwd.clone()), ("sandbox", sandbox)];
    if let Ok(Some(ms)) = TIMEOUT_MS.opt_u64_at_least(&a) {
        fields.push(("timeout", format!("{ms} ms")));
    }
    if background {
        fields.push((
            "runs",
            "in the background (a job id comes back at once)".into(),
        ));
    }
    Some(
        Preview::new(format!("Run a shell command in {cwd}"))
            .text(command)
            .fields(&fields),
    )
}

/// The session scratchpad by default; otherwise a folder inside the workspace.
fn resolve_cwd(ctx: &ToolContext, arg: Option<&str>) -> Result<PathBuf> {
    let Some(given) = arg else {
        return ctx
            .workspace
            .scratchpad()
            .map_err(|e| anyhow!("{NAME}: cannot create the session scratchpad: {e}"));
    };
    let abs = ctx
        .workspace
        .resolve(given)
        .map_err(|e| anyhow!("{NAME}: argument `cwd`: {e}"))?;
    match std::fs::metadata(&abs) {
        Ok(m) if m.is_dir() => Ok(abs),
        Ok(_) => bail!("{NAME}: argument `cwd`: {given:?} is a file, not a directory"),
        Err(_) => bail!("{NAME}: argument `cwd`: {given:?} does not exist"),
    }
}

/// Where temporary files go (`$TMPDIR`, else /tmp), as a real path for the sandbox rules.
fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir();
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// Starts a foreground command. Without a sandbox or limits: `posix_spawn` right here (no
/// fork, no thread hop; the janitor covers a crash of toolbox). With either: a fork on the
/// provider thread, because they must be switched on in the child before exec.
async fn start_foreground(p: &Prepared) -> std::io::Result<process::Spawned> {
    #[cfg(target_env = "gnu")]
    if p.sandbox.is_none() && p.limits.is_none() {
        let spawned = process::spawn_posix(&p.command, &p.cwd, &p.env())?;
        forker::janitor_send('+', spawned.pid as u32);
        return Ok(spawned);
    }
    forker::spawn(build(p)).await
}

async fn foreground(p: Prepared, ctx: &ToolContext) -> Result<ToolOutput> {
    let started = Instant::now();
    let spawned = start_foreground(&p)
        .await
        .map_err(|e| spawn_error(NAME, &p, e))?;
    let running = Running::new(spawned, started)
        .map_err(|e| anyhow!("{NAME}: cannot read the output: {e}"))?;
    let mut sink = ForegroundSink::new(ctx, p.config.max_capture_bytes);
    let cancel = ctx.cancel.clone();
    let stop = async move {
        cancel.cancelled().await;
        Stop::Cancelled
    };
    tokio::pin!(stop);
    let outcome = process::supervise(
        running,
        &mut sink,
        Some(started + p.timeout),
        stop,
        p.config.kill_grace,
    )
    .await;
    let captured = sink.finish();
    let exceeded = p.limits.as_ref().and_then(|limits| {
        let signal = outcome.status.and_then(|s| s.signal());
        let failed = !outcome.status.is_some_and(|s| s.success());
        limits.diagnose(Counters::default(), signal, failed, &captured.stderr)
    });

    let headline = match outcome.stopped {
        None => format!(
            "{} · {}",
            describe_status(outcome.status),
            human_duration(outcome.elapsed)
        ),
        Some(Stop::Timeout) => format!(
            "command timed out after {} ms and was stopped ({}, {} in total)",
            p.timeout.as_millis(),
            describe_status(outcome.status),
            human_duration(outcome.elapsed)
        ),
        Some(Stop::Cancelled) | Some(Stop::Killed) => format!(
            "command was cancelled after {} and was stopped ({})",
            human_duration(outcome.elapsed),
            describe_status(outcome.status)
        ),
    };
    let mut notes = vec![format!("cwd: {}", p.cwd_shown)];
    if let Some(sb) = &p.sandbox {
        notes.push(format!("sandbox: {}", sb.summary()));
    }
    if let Some(asked) = p.capped_from {
        notes.push(format!(
            "note: timeout_ms {asked} is above the limit; used {} ms ([shell] max_timeout_ms)",
            p.timeout.as_millis()
        ));
    }
    if outcome.stopped.is_some() {
        notes.push(format!(
            "note: the command's process group got SIGTERM, then SIGKILL {} ms later if \
             anything was still running; output up to that point is below",
            p.config.kill_grace.as_millis()
        ));
    }
    if outcome.pipes_left_open {
        notes.push(
            "note: a process that left the command's session (setsid) still held its output \
             open; it was not stopped and its later output was not collected"
                .to_string(),
        );
    }
    notes.extend(captured.notes(ctx.word("file_manager__read")));
    let mut text = render(
        &headline,
        &notes,
        &captured,
        &describe_status(outcome.status),
    );
    let structured = json!({
        "exit_code": outcome.status.and_then(|s| s.code()),
        "signal": outcome.status.and_then(|s| s.signal()),
        "stdout": captured.stdout,
        "stderr": captured.stderr,
        "stdout_bytes": captured.stdout_total,
        "stderr_bytes": captured.stderr_total,
        "omitted_bytes": captured.omitted,
        "elapsed_ms": outcome.elapsed.as_millis() as u64,
        "cwd": p.cwd_shown,
        "background": false,
    });
    if let (Some(exceeded), Some(limits)) = (exceeded, &p.limits) {
        // First, so it is what the model reads before the output that shows the symptom.
        text.insert_str(
            0,
            &format!("{}\n", limits.limits().message(exceeded, "the command")),
        );
        return Err(anyhow!(text));
    }
    match outcome.stopped {
        None => Ok(ToolOutput::new(text, structured)),
        Some(_) => Err(anyhow!(text)),
    }
}

/// Header lines, the stdout and stderr sections, and a footer when the text is long (so the
/// status is also visible at the end of a preview that cuts out the middle).
fn render(headline: &str, notes: &[String], c: &Captured, status: &str) -> String {
    let mut out = String::with_capacity(256 + c.stdout.len() + c.stderr.len());
    out.push_str(headline);
    out.push('\n');
    for note in notes {
        out.push_str(note);
        out.push('\n');
    }
    for (name, text, total) in [
        ("stdout", &c.stdout, c.stdout_total),
        ("stderr", &c.stderr, c.stderr_total),
    ] {
        if total == 0 {
            out.push_str(&format!("--- {name} (empty) ---\n"));
            continue;
        }
        out.push_str(&format!("--- {name} ({}) ---\n", bytes(total)));
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    if out.len() > 2000 {
        out.push_str(&format!(
            "--- end: {status} · stdout {} · stderr {} ---\n",
            bytes(c.stdout_total),
            bytes(c.stderr_total)
        ));
    }
    out
}

fn bytes(n: u64) -> String {
    if n == 1 {
        "1 byte".into()
    } else {
        format!("{n} bytes")
    }
}

/// What a foreground command printed, as kept in memory.
pub(crate) struct Captured {
    stdout: String,
    stderr: String,
    stdout_total: u64,
    stderr_total: u64,
    omitted: u64,
    spool: Option<String>,
    spool_error: Option<String>,
}

impl Captured {
    /// The notes about what was kept; `reader` is the file-reading tool's name as the model
    /// knows it.
    fn notes(&self, reader: &str) -> Vec<String> {
        let mut notes = Vec::new();
        if self.omitted > 0 {
            notes.push(format!(
                "note: the output is too long to keep in memory; {} in the middle are \
                 omitted below",
                bytes(self.omitted)
            ));
        }
        if let Some(path) = &self.spool {
            notes.push(format!(
                "full output of both streams, interleaved in arrival order: {path} (read it \
                 with {reader} or grep it)"
            ));
        }
        if let Some(e) = &self.spool_error {
            notes.push(format!("note: could not save the full output: {e}"));
        }
        notes
    }
}

/// Alternations between stdout and stderr tracked before the output is copied into
/// per-stream buffers after all.
const MAX_RUNS: usize = 4096;

/// Streams output to the event sink, keeps head and tail of each stream, and once the total
/// passes the capture limit writes the full output of both streams, in arrival order, to
/// the call's spool file.
///
/// Under the limit the arrival-order buffer is the only copy in memory: `runs` says which
/// stream each stretch of it came from, and the head/tail buffers are filled from it only
/// when it overflows (or the runs get too many). Many commands run at once; each holds its
/// output once, not twice.
struct ForegroundSink<'a> {
    ctx: &'a ToolContext,
    live: bool,
    decoders: [Utf8Stream; 2],
    streams: [HeadTail; 2],
    cap: usize,
    /// Everything so far, in arrival order, until it passes `cap` and moves to the spool file.
    pending: Option<Vec<u8>>,
    /// While `Some`, `streams` are empty and `pending` holds the output: (stream, length) of
    /// each stretch from one stream, in order.
    runs: Option<Vec<(usize, usize)>>,
    spool: Option<(BufWriter<File>, String)>,
    spool_path: Option<String>,
    spool_error: Option<String>,
}

impl<'a> ForegroundSink<'a> {
    fn new(ctx: &'a ToolContext, cap: usize) -> Self {
        let half = cap / 2;
        ForegroundSink {
            ctx,
            live: ctx.events.is_active(),
            decoders: Default::default(),
            streams: [
                HeadTail::new(half, cap - half),
                HeadTail::new(half, cap - half),
            ],
            cap,
            pending: Some(Vec::new()),
            runs: Some(Vec::new()),
            spool: None,
            spool_path: None,
            spool_error: None,
        }
    }

    fn index(stream: OutputStream) -> usize {
        match stream {
            OutputStream::Stdout => 0,
            OutputStream::Stderr => 1,
        }
    }

    /// Keeps `bytes` of stream `i` for the result: as a run of `pending` while that is the
    /// only copy, else in the stream's head/tail buffer.
    fn keep(&mut self, i: usize, bytes: &[u8]) {
        if let (Some(runs), Some(pending)) = (&mut self.runs, &self.pending) {
            if pending.len() + bytes.len() <= self.cap {
                let room = runs.len() < MAX_RUNS;
                match runs.last_mut() {
                    Some((stream, len)) if *stream == i => {
                        *len += bytes.len();
                        return;
                    }
                    _ if room => {
                        runs.push((i, bytes.len()));
                        return;
                    }
                    _ => {}
                }
            }
        }
        self.fill_streams();
        self.streams[i].push(bytes);
    }

    /// Streams the characters the decoders still hold (a last line cut inside a character).
    fn emit_rest(&mut self) {
        if !self.live {
            return;
        }
        for (i, stream) in [OutputStream::Stdout, OutputStream::Stderr]
            .into_iter()
            .enumerate()
        {
            let rest = self.decoders[i].finish();
            if !rest.is_empty() {
                self.ctx.emit_output(stream, rest);
            }
        }
    }

    /// Moves the output held as runs of `pending` into the head/tail buffers.
    fn fill_streams(&mut self) {
        let (Some(runs), Some(pending)) = (self.runs.take(), &self.pending) else {
            return;
        };
        let mut at = 0;
        for (stream, len) in runs {
            self.streams[stream].push(&pending[at..at + len]);
            at += len;
        }
    }

    fn save(&mut self, bytes: &[u8]) {
        if let Some((file, _)) = &mut self.spool {
            // A plain blocking write on purpose: it lands in the page cache in microseconds,
            // and a hop to the blocking pool per chunk would cost more than it saves.
            if let Err(e) = file.write_all(bytes) {
                self.spool_error = Some(e.to_string());
                self.spool = None;
            }
            return;
        }
        let Some(pending) = &mut self.pending else {
            return;
        };
        if pending.len() + bytes.len() <= self.cap {
            pending.extend_from_slice(bytes);
            return;
        }
        let earlier = self.pending.take().unwrap_or_default();
        match self.ctx.create_spool_file() {
            Ok((file, path)) => {
                let mut file = BufWriter::with_capacity(256 * 1024, file);
                let written = file.write_all(&earlier).and_then(|_| file.write_all(bytes));
                self.spool_path = Some(path.clone());
                match written {
                    Ok(()) => self.spool = Some((file, path)),
                    Err(e) => self.spool_error = Some(e.to_string()),
                }
            }
            Err(e) => self.spool_error = Some(format!("cannot create the spool file: {e}")),
        }
    }

    fn finish(mut self) -> Captured {
        // All of one stream, held once: it becomes the result's text without a copy.
        if let (Some(runs), Some(_)) = (&self.runs, &self.pending) {
            if let [(stream, _)] = runs[..] {
                let bytes = self.pending.take().unwrap_or_default();
                let total = bytes.len() as u64;
                let text = String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
                self.runs = None;
                self.emit_rest();
                let (stdout, stderr) = if stream == 0 {
                    (text, String::new())
                } else {
                    (String::new(), text)
                };
                let (stdout_total, stderr_total) =
                    if stream == 0 { (total, 0) } else { (0, total) };
                return Captured {
                    stdout,
                    stderr,
                    stdout_total,
                    stderr_total,
                    omitted: 0,
                    spool: None,
                    spool_error: self.spool_error,
                };
            }
        }
        self.fill_streams();
        // Output that never reached the spool file is in the streams now: free this copy
        // before rendering makes another.
        self.pending = None;
        self.emit_rest();
        if let Some((mut file, _)) = self.spool.take() {
            if let Err(e) = file.flush() {
                self.spool_error = Some(e.to_string());
            }
        }
        let [out, err] = &self.streams;
        Captured {
            stdout: out.render(),
            stderr: err.render(),
            stdout_total: out.total(),
            stderr_total: err.total(),
            omitted: out.omitted() + err.omitted(),
            spool: self.spool_path,
            spool_error: self.spool_error,
        }
    }
}

impl OutputSink for ForegroundSink<'_> {
    fn push(&mut self, stream: OutputStream, bytes: &[u8]) {
        let i = Self::index(stream);
        if self.live {
            let text = self.decoders[i].feed(bytes);
            if !text.is_empty() {
                self.ctx.emit_output(stream, text);
            }
        }
        self.keep(i, bytes);
        self.save(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;
    use serde_json::json;

    /// What the sink keeps of `chunks`, pushed in order (0 stdout, 1 stderr).
    fn sink_keeps(cap: usize, chunks: &[(usize, &[u8])]) -> (String, String, u64, bool) {
        let (_d, ctx) = setup(NAME);
        let mut sink = ForegroundSink::new(&ctx, cap);
        for (stream, bytes) in chunks {
            let stream = [OutputStream::Stdout, OutputStream::Stderr][*stream];
            sink.push(stream, bytes);
        }
        let c = sink.finish();
        (c.stdout, c.stderr, c.omitted, c.spool.is_some())
    }

    #[test]
    fn the_sink_keeps_each_stream_whole_under_the_limit_however_they_alternate() {
        assert_eq!(
            sink_keeps(100, &[(0, b"a1\n"), (0, b"a2\n")]),
            ("a1\na2\n".into(), String::new(), 0, false)
        );
        assert_eq!(
            sink_keeps(100, &[(1, b"e\n"), (0, b"o\n"), (1, b"f\xff\n")]),
            ("o\n".into(), "e\nf\u{fffd}\n".into(), 0, false)
        );
        // More alternations than runs are tracked for: the per-stream buffers take over.
        let many: Vec<(usize, &[u8])> = (0..2 * MAX_RUNS + 3)
            .map(|i| (i % 2, if i % 2 == 0 { &b"o"[..] } else { &b"e"[..] }))
            .collect();
        let (out, err, omitted, spooled) = sink_keeps(1 << 20, &many);
        assert_eq!(out, "o".repeat(MAX_RUNS + 2));
        assert_eq!(err, "e".repeat(MAX_RUNS + 1));
        assert_eq!((omitted, spooled), (0, false));
        // Over the limit: head and tail of each stream, the rest in the spool file.
        let (out, err, omitted, spooled) =
            sink_keeps(8, &[(0, b"0123"), (1, b"ab"), (0, b"456789")]);
        assert_eq!(err, "ab");
        assert!(out.starts_with("0123") && out.ends_with("6789"), "{out}");
        assert_eq!((omitted, spooled), (2, true));
    }

    #[tokio::test]
    async fn runs_in_the_scratchpad_with_exit_code_streams_and_duration() {
        let (_d, ctx) = setup(NAME);
        let out = call(&ctx, NAME, json!({"command": "pwd; echo oops >&2; exit 4"}))
            .await
            .unwrap();
        let scratch = ctx.workspace.scratchpad().unwrap();
        assert!(out.starts_with("exit code 4 · "), "{out}");
        assert!(
            out.contains(" ms\ncwd: .toolbox/sessions/s1/scratchpad (scratchpad)\n"),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "--- stdout ({} bytes) ---\n{}\n",
                scratch.display().to_string().len() + 1,
                scratch.display()
            )),
            "{out}"
        );
        assert!(out.contains("--- stderr (5 bytes) ---\noops\n"), "{out}");
    }

    #[tokio::test]
    async fn own_session_no_terminal_and_default_sigpipe() {
        let (_d, ctx) = setup(NAME);
        let out = call(
            &ctx,
            NAME,
            json!({"command": "ps -o pid=,pgid=,sid= -p $$; cat /dev/tty 2>/dev/null || echo no-tty; \
                              yes | head -1 >/dev/null; echo \"yes=${PIPESTATUS[0]}\""}),
        )
        .await
        .unwrap();
        let ids: Vec<&str> = out
            .split("---\n")
            .nth(1)
            .and_then(|s| s.lines().next())
            .unwrap()
            .split_whitespace()
            .collect();
        assert!(
            ids.len() == 3 && ids[0] == ids[1] && ids[0] == ids[2],
            "{out}"
        );
        assert!(out.contains("no-tty"), "{out}");
        // Killed by SIGPIPE (128 + 13), as in a terminal; not "Broken pipe" errors.
        assert!(out.contains("yes=141"), "{out}");
    }

    #[tokio::test]
    async fn cwd_is_jailed_and_checked() {
        let (_d, ctx) = setup(NAME);
        std::fs::create_dir_all(ctx.workspace.root().join("sub")).unwrap();
        std::fs::write(ctx.workspace.root().join("file.txt"), "x").unwrap();
        let out = call(
            &ctx,
            NAME,
            json!({"cmd": "basename \"$PWD\"", "cwd": "sub"}),
        )
        .await
        .unwrap();
        assert!(out.contains("---\nsub\n"), "{out}");
        // null and "" mean the default folder, the session scratchpad.
        for cwd in [json!(null), json!(""), json!("  ")] {
            let out = call(&ctx, NAME, json!({"command": "pwd", "cwd": cwd}))
                .await
                .unwrap();
            assert!(
                out.contains("\ncwd: .toolbox/sessions/s1/scratchpad (scratchpad)\n"),
                "{cwd}: {out}"
            );
        }
        for (cwd, want) in [
            ("..", "is outside the workspace"),
            ("/etc", "is outside the workspace"),
            ("nope", "\"nope\" does not exist"),
            ("file.txt", "is a file, not a directory"),
        ] {
            let e = call(&ctx, NAME, json!({"command": "true", "cwd": cwd}))
                .await
                .unwrap_err();
            assert!(e.starts_with("shell: argument `cwd`: "), "{e}");
            assert!(e.contains(want), "{cwd}: {e}");
        }
    }

    #[tokio::test]
    async fn arguments_are_checked_by_name() {
        let (_d, ctx) = setup(NAME);
        let e = call(&ctx, NAME, json!({})).await.unwrap_err();
        assert_eq!(e, "shell requires command");
        let e = call(&ctx, NAME, json!({"command": "true", "timeout": 5}))
            .await
            .unwrap_err();
        assert!(e.contains("unknown argument `timeout`"), "{e}");
        let e = call(&ctx, NAME, json!({"command": "  "}))
            .await
            .unwrap_err();
        assert!(e.contains("`command` is empty"), "{e}");
        let e = call(&ctx, NAME, json!({"command": "true", "timeout_ms": "soon"}))
            .await
            .unwrap_err();
        assert!(
            e.contains("`timeout_ms` must be a non-negative integer"),
            "{e}"
        );
        let e = call(&ctx, NAME, json!({"command": "true", "timeout_ms": 0}))
            .await
            .unwrap_err();
        assert!(
            e.contains("`timeout_ms` must be between 1 and 600000, got 0"),
            "{e}"
        );
        let ok = call(
            &ctx,
            NAME,
            json!({"command": "echo hi", "description": "says hi", "run_in_background": false}),
        )
        .await
        .unwrap();
        assert!(ok.contains("hi"));
    }

    #[tokio::test]
    async fn stdin_is_empty_and_the_environment_is_filtered() {
        let (_d, mut ctx) = setup(NAME);
        ctx.config = Arc::new(json!({"shell": {"deny_env": ["HOM*"]}}));
        let out = call(
            &ctx,
            NAME,
            json!({"command": "cat; echo \"home=${HOME-unset} path=${PATH:+set}\""}),
        )
        .await
        .unwrap();
        assert!(out.contains("home=unset path=set"), "{out}");
        assert!(out.contains("--- stdout (20 bytes) ---"), "{out}");
    }

    #[tokio::test]
    async fn timeouts_are_capped_and_say_so() {
        let (_d, mut ctx) = setup(NAME);
        ctx.config = Arc::new(
            json!({"shell": {"max_timeout_ms": 300, "default_timeout_ms": 100, "kill_grace_ms": 100}}),
        );
        let e = call(
            &ctx,
            NAME,
            json!({"command": "echo before; sleep 5", "timeout_ms": 999999}),
        )
        .await
        .unwrap_err();
        assert!(e.starts_with("command timed out after 300 ms"), "{e}");
        assert!(
            e.contains("note: timeout_ms 999999 is above the limit; used 300 ms"),
            "{e}"
        );
        assert!(e.contains("--- stdout (7 bytes) ---\nbefore\n"), "{e}");
        let e = call(&ctx, NAME, json!({"command": "sleep 5"}))
            .await
            .unwrap_err();
        assert!(e.starts_with("command timed out after 100 ms"), "{e}");
    }

    #[tokio::test]
    async fn cancellation_stops_the_command() {
        let (_d, ctx) = setup(NAME);
        let cancel = ctx.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let e = call(&ctx, NAME, json!({"command": "echo started; sleep 30"}))
            .await
            .unwrap_err();
        assert!(e.starts_with("command was cancelled after"), "{e}");
        assert!(e.contains("killed by signal 15 (SIGTERM)"), "{e}");
        assert!(e.contains("started"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn long_results_repeat_the_status_at_the_end() {
        let c = Captured {
            stdout: "x".repeat(3000),
            stderr: String::new(),
            stdout_total: 3000,
            stderr_total: 0,
            omitted: 0,
            spool: None,
            spool_error: None,
        };
        let text = render("exit code 0 · 1 ms", &[], &c, "exit code 0");
        assert!(text.ends_with("--- end: exit code 0 · stdout 3000 bytes · stderr 0 bytes ---\n"));
        let short = Captured {
            stdout: "hi\n".into(),
            stdout_total: 3,
            ..c
        };
        let text = render(
            "exit code 0 · 1 ms",
            &["cwd: .".into()],
            &short,
            "exit code 0",
        );
        assert_eq!(
            text,
            "exit code 0 · 1 ms\ncwd: .\n--- stdout (3 bytes) ---\nhi\n--- stderr (empty) ---\n"
        );
    }
}
