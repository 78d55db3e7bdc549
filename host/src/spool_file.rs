use std::ffi::OsStr;
use std::fs::File;
use std::io;

use crate::{Workspace, TOOLBOX_DIR};

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

/// The folder under `.toolbox/` that spool files go to.
pub const SPOOL_DIR: &str = "tool_outputs";

/// Creates a new, empty spool file `.toolbox/tool_outputs/<unix_ms>__<call_id>.txt` and
/// returns it with its workspace-relative path. Never overwrites: a second file for the same
/// id in the same millisecond gets a `-N` suffix. The folder is opened without following
/// links and the file is created exclusively, so a planted link is an error, never a way out.
///
/// The executor spools large results through this; a provider whose output is too large to
/// hold in memory (a shell command printing gigabytes) streams into one itself and hands it
/// over with [`ToolContext::create_spool_file`](crate::ToolContext::create_spool_file).
pub fn create_spool_file(workspace: &Workspace, call_id: &str) -> io::Result<(File, String)> {
    let dir = workspace.toolbox_subdir(&[OsStr::new(SPOOL_DIR)])?;
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
        match crate::dirfd::create_new_child(dir.as_fd(), OsStr::new(&name)) {
            Ok(file) => return Ok((file, format!("{TOOLBOX_DIR}/{SPOOL_DIR}/{name}"))),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("too many spool files with the same name"))
}

/// Removes a spool file made by [`create_spool_file`] (after a failed write).
pub fn remove_spool_file(workspace: &Workspace, rel: &str) {
    if let (Ok(dir), Some(name)) = (
        workspace.toolbox_subdir(&[OsStr::new(SPOOL_DIR)]),
        rel.rsplit('/').next(),
    ) {
        let _ = rustix::fs::unlinkat(dir.as_fd(), name, rustix::fs::AtFlags::empty());
    }
}

/// The size of a spool file made by [`create_spool_file`], read without following links.
pub fn spool_file_len(workspace: &Workspace, rel: &str) -> Option<u64> {
    let dir = workspace.toolbox_subdir(&[OsStr::new(SPOOL_DIR)]).ok()?;
    let name = rel.rsplit('/').next()?;
    dir.size_and_mtime(OsStr::new(name))
        .ok()
        .map(|(size, _)| size)
}
