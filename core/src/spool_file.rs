use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

use crate::TOOLBOX_DIR;

/// A call id as a file-name part: ASCII letters, digits, `-` and `_`, at most 96 characters.
pub fn safe_file_part(call_id: &str) -> String {
    let mut out: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(96)
        .collect();
    if out.is_empty() {
        out.push_str("call");
    }
    out
}

/// Creates a new, empty spool file `.toolbox/tool_outputs/<unix_ms>__<call_id>.txt` and
/// returns it with its workspace-relative path. Never overwrites: a second file for the same
/// id in the same millisecond gets a `-N` suffix.
///
/// The executor spools large results through this; a provider whose output is too large to
/// hold in memory (a shell command printing gigabytes) streams into one itself and hands it
/// over with [`ToolContext::create_spool_file`](crate::ToolContext::create_spool_file).
pub fn create_spool_file(workspace_root: &Path, call_id: &str) -> io::Result<(File, String)> {
    let dir = workspace_root.join(TOOLBOX_DIR).join("tool_outputs");
    std::fs::create_dir_all(&dir)?;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let stem = format!("{ms}__{}", safe_file_part(call_id));
    for n in 0..1000u32 {
        let name = if n == 0 {
            format!("{stem}.txt")
        } else {
            format!("{stem}-{n}.txt")
        };
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dir.join(&name))
        {
            Ok(file) => return Ok((file, format!("{TOOLBOX_DIR}/tool_outputs/{name}"))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many spool files with the same name"))
}
