//! One JSON line per call under `.toolbox/trajectories/<session>/tool_calls.jsonl`.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use toolbox_core::TOOLBOX_DIR;

use crate::ToolCallInfo;

pub const FILE_NAME: &str = "tool_calls.jsonl";

/// The trajectory file of a session.
pub fn trajectory_path(workspace_root: &Path, session: &str) -> PathBuf {
    workspace_root
        .join(TOOLBOX_DIR)
        .join("trajectories")
        .join(session)
        .join(FILE_NAME)
}

/// Appends calls to per-session files, keeping each file open.
///
/// Each record is written with one `write_all` of a whole line under a lock, so concurrent
/// calls never interleave inside a line.
pub(crate) struct TrajectoryWriter {
    root: PathBuf,
    files: Mutex<HashMap<String, File>>,
}

impl TrajectoryWriter {
    pub fn new(root: PathBuf) -> Self {
        TrajectoryWriter {
            root,
            files: Mutex::new(HashMap::new()),
        }
    }

    pub fn append(&self, info: &ToolCallInfo) -> Result<()> {
        let mut line = serde_json::to_vec(info)?;
        line.push(b'\n');
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        if !files.contains_key(&info.session_id) {
            let path = trajectory_path(&self.root, &info.session_id);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            files.insert(info.session_id.clone(), file);
        }
        let file = files
            .get_mut(&info.session_id)
            .expect("inserted just above");
        file.write_all(&line)?;
        Ok(())
    }
}

/// Reads a trajectory file back.
///
/// A last line that does not parse (a write torn by a crash) is skipped; a bad line anywhere
/// else is an error naming its line number, since that is corruption rather than a crash.
pub fn read_trajectory(path: &Path) -> Result<Vec<ToolCallInfo>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut lines: Vec<String> = Vec::new();
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        lines.push(String::from_utf8_lossy(&line).into_owned());
    }
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    let mut calls = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<ToolCallInfo>(line) {
            Ok(info) => calls.push(info),
            Err(_) if Some(i) == last => break,
            Err(e) => {
                return Err(e).with_context(|| format!("{} line {}", path.display(), i + 1));
            }
        }
    }
    Ok(calls)
}
