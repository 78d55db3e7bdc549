//! One JSON line per call under `.toolbox/trajectories/<session>/tool_calls.jsonl`.
//!
//! The folders are created and opened without following links and the file is opened with
//! `O_NOFOLLOW`, refusing a file with other hard links: a link planted in `.toolbox/` is an
//! error, never a way to append to a file elsewhere. A last line torn by a crash is ended
//! before the next record, so records never glue together. Arguments larger than
//! [`MAX_RECORDED_ARGUMENT_BYTES`] are recorded as a capped preview, as results are.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;
use toolbox_core::SessionId;
use toolbox_host::{Workspace, TOOLBOX_DIR};

use crate::ToolCallInfo;

/// The file each session's calls are appended to.
pub const FILE_NAME: &str = "tool_calls.jsonl";
/// The folder under `.toolbox/` holding one folder per session.
pub const DIR_NAME: &str = "trajectories";
/// Arguments whose JSON is this long or longer are recorded as a preview.
pub const MAX_RECORDED_ARGUMENT_BYTES: usize = 16_384;
/// Characters of oversized arguments kept in the record.
const ARGUMENT_PREVIEW_CHARS: usize = 2000;

/// The trajectory file of a session, as a path (for reading it back).
pub fn trajectory_path(workspace_root: &Path, session: &str) -> PathBuf {
    workspace_root
        .join(TOOLBOX_DIR)
        .join(DIR_NAME)
        .join(session)
        .join(FILE_NAME)
}

/// Appends calls to per-session files, keeping each file open.
///
/// Each record is written with one `write_all` of a whole line under a lock, so concurrent
/// calls never interleave inside a line.
/// The most trajectory files kept open at once. Past this the least recently written one is
/// closed (and opened again when its session writes next): a process serving thousands of
/// sessions must not hold a descriptor for each forever.
pub const MAX_OPEN_TRAJECTORIES: usize = 256;
/// A trajectory file not written for this long is closed (at the next write of any session,
/// looked for at most once a minute).
pub const TRAJECTORY_IDLE: Duration = Duration::from_secs(10 * 60);
const SWEEP_EVERY: Duration = Duration::from_secs(60);

pub(crate) struct TrajectoryWriter {
    workspace: Workspace,
    files: Mutex<OpenFiles>,
    idle: Duration,
    sweep_every: Duration,
}

/// The open files, each with the tick and time of its last write.
#[derive(Default)]
struct OpenFiles {
    files: HashMap<SessionId, (File, u64, Instant)>,
    tick: u64,
    swept: Option<Instant>,
}

impl TrajectoryWriter {
    pub fn new(workspace: Workspace) -> Self {
        Self::with_idle(workspace, TRAJECTORY_IDLE, SWEEP_EVERY)
    }

    fn with_idle(workspace: Workspace, idle: Duration, sweep_every: Duration) -> Self {
        TrajectoryWriter {
            workspace,
            files: Mutex::new(OpenFiles::default()),
            idle,
            sweep_every,
        }
    }

    pub fn append(&self, session: &SessionId, info: &ToolCallInfo) -> Result<()> {
        let mut line = record_line(info)?;
        let mut open = self.files.lock().unwrap_or_else(|e| e.into_inner());
        open.tick += 1;
        let tick = open.tick;
        let now = Instant::now();
        if open
            .swept
            .is_none_or(|t| now.duration_since(t) >= self.sweep_every)
        {
            open.swept = Some(now);
            let idle = self.idle;
            open.files
                .retain(|_, (_, _, written)| now.duration_since(*written) < idle);
        }
        if !open.files.contains_key(session) {
            if open.files.len() >= MAX_OPEN_TRAJECTORIES {
                let oldest = open
                    .files
                    .iter()
                    .min_by_key(|(_, (_, used, _))| *used)
                    .map(|(sid, _)| sid.clone());
                if let Some(oldest) = oldest {
                    open.files.remove(&oldest);
                }
            }
            let (file, torn) = self.open(session)?;
            // A record torn by a crash has no newline; end it so ours starts on a fresh line.
            if torn {
                line.insert(0, b'\n');
            }
            open.files.insert(session.clone(), (file, tick, now));
        }
        let (file, used, written) = open.files.get_mut(session).expect("inserted just above");
        *used = tick;
        *written = now;
        file.write_all(&line)?;
        Ok(())
    }

    fn open(&self, session: &SessionId) -> Result<(File, bool)> {
        let shown = format!("{TOOLBOX_DIR}/{DIR_NAME}/{session}/{FILE_NAME}");
        let dir = self
            .workspace
            .toolbox_subdir(&[OsStr::new(DIR_NAME), OsStr::new(session.as_str())])
            .with_context(|| format!("cannot open the trajectory folder for {shown}"))?;
        dir.open_append_lines(OsStr::new(FILE_NAME))
            .with_context(|| format!("cannot open {shown}"))
    }
}

/// The record as one JSON line, with oversized arguments replaced by a preview, and an
/// oversized structured result by its size (its text is in `result` or the spool file).
fn record_line(info: &ToolCallInfo) -> Result<Vec<u8>> {
    let arguments = serde_json::to_string(&info.arguments)?;
    let structured = match &info.structured {
        Some(value) => serde_json::to_string(value)?.len(),
        None => 0,
    };
    let mut line = if arguments.len() >= MAX_RECORDED_ARGUMENT_BYTES
        || structured >= MAX_RECORDED_ARGUMENT_BYTES
    {
        let mut capped = info.clone();
        if arguments.len() >= MAX_RECORDED_ARGUMENT_BYTES {
            capped.arguments = serde_json::json!({
                "_toolbox_truncated": true,
                "bytes": arguments.len(),
                "preview": arguments.chars().take(ARGUMENT_PREVIEW_CHARS).collect::<String>(),
            });
        }
        if structured >= MAX_RECORDED_ARGUMENT_BYTES {
            capped.structured = Some(serde_json::json!({
                "_toolbox_truncated": true,
                "bytes": structured,
            }));
        }
        serde_json::to_vec(&capped)?
    } else {
        serde_json::to_vec(info)?
    };
    line.push(b'\n');
    Ok(line)
}

/// Whether a recorded `arguments` value is a preview of oversized arguments.
pub fn arguments_truncated(arguments: &Value) -> bool {
    arguments.get("_toolbox_truncated") == Some(&Value::Bool(true))
}

/// Reads the trajectory of `session` back, opening it beneath the workspace without
/// following links; a session with no calls has an empty one. Torn lines are skipped as
/// [`read_trajectory`] does.
pub fn read_session_trajectory(
    workspace: &Workspace,
    session: &SessionId,
) -> Result<Vec<ToolCallInfo>> {
    let shown = format!("{TOOLBOX_DIR}/{DIR_NAME}/{session}/{FILE_NAME}");
    let dir = match workspace
        .existing_toolbox_subdir(&[OsStr::new(DIR_NAME), OsStr::new(session.as_str())])
    {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {shown}")),
    };
    let file = match dir.open_file(OsStr::new(FILE_NAME)) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot open {shown}")),
    };
    parse_records(file, &shown)
}

/// Reads a trajectory file back.
///
/// A line that stops in the middle of a record (a write torn by a crash) is skipped wherever
/// it is; a line that is not a record at all is an error naming its line number, since that
/// is corruption rather than a crash.
pub fn read_trajectory(path: &Path) -> Result<Vec<ToolCallInfo>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    parse_records(file, &path.display().to_string())
}

fn parse_records(file: File, shown: &str) -> Result<Vec<ToolCallInfo>> {
    let mut lines: Vec<String> = Vec::new();
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        lines.push(String::from_utf8_lossy(&line).into_owned());
    }
    let mut calls = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<ToolCallInfo>(line) {
            Ok(info) => calls.push(info),
            // A record cut short by a crash: the JSON simply stops. The writer starts the
            // next record on a fresh line, so such a line may sit anywhere; skip it.
            Err(e) if e.is_eof() => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("{shown} line {}", i + 1));
            }
        }
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CallStatus;

    fn info(session: &str) -> ToolCallInfo {
        ToolCallInfo {
            id: "c".into(),
            tool: "shell".into(),
            called_as: None,
            session_id: session.into(),
            arguments: serde_json::json!({}),
            status: CallStatus::Done,
            result: "ok".into(),
            structured: None,
            spool_path: None,
            error_kind: None,
            started_at: "2026-01-01T00:00:00.000Z".into(),
            elapsed_ms: 1,
            waited_ms: 0,
            approved_by: None,
        }
    }

    #[test]
    fn a_large_structured_result_is_kept_as_its_size() {
        let mut big = info("s");
        big.structured =
            Some(serde_json::json!({"stdout": "x".repeat(MAX_RECORDED_ARGUMENT_BYTES)}));
        let line: Value = serde_json::from_slice(&record_line(&big).unwrap()).unwrap();
        assert_eq!(line["structured"]["_toolbox_truncated"], true);
        assert_eq!(line["arguments"], serde_json::json!({}));
        let mut small = info("s");
        small.structured = Some(serde_json::json!({"exit_code": 0}));
        let line: Value = serde_json::from_slice(&record_line(&small).unwrap()).unwrap();
        assert_eq!(line["structured"], serde_json::json!({"exit_code": 0}));
    }

    #[test]
    fn idle_trajectory_files_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let writer =
            TrajectoryWriter::with_idle(ws.clone(), Duration::from_millis(50), Duration::ZERO);
        let (a, b) = (
            SessionId::parse("a").unwrap(),
            SessionId::parse("b").unwrap(),
        );
        writer.append(&a, &info("a")).unwrap();
        writer.append(&b, &info("b")).unwrap();
        assert_eq!(writer.files.lock().unwrap().files.len(), 2);
        std::thread::sleep(Duration::from_millis(100));
        writer.append(&b, &info("b")).unwrap();
        let open: Vec<SessionId> = writer.files.lock().unwrap().files.keys().cloned().collect();
        assert_eq!(open, std::slice::from_ref(&b));
        // A closed file is opened again and appended to.
        writer.append(&a, &info("a")).unwrap();
        assert_eq!(read_session_trajectory(&ws, &a).unwrap().len(), 2);
        assert_eq!(read_session_trajectory(&ws, &b).unwrap().len(), 2);
    }
}
