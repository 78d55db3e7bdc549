//! Large results go to disk; the model gets a head, a tail and the file's name.

use std::io::Write;
use std::path::{Path, PathBuf};

use toolbox_core::TOOLBOX_DIR;

/// Results of this many bytes or more are spooled by default.
pub const SPOOL_THRESHOLD_BYTES: usize = 16_384;
/// Characters of the start of a spooled result the model still sees.
pub const HEAD_CHARS: usize = 2000;
/// Characters of the end of a spooled result the model still sees.
pub const TAIL_CHARS: usize = 500;

/// What [`offload_if_large`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolOutcome {
    /// Small enough: the model sees the whole result.
    Inline(String),
    /// Written to `path` (relative to the workspace); the model sees `preview`.
    Spooled { preview: String, path: String },
}

/// Writes `content` byte-exact to `.toolbox/tool_outputs/<unix_ms>__<call_id>.txt` when it
/// is at least `threshold` bytes, and returns the preview the model should see instead.
///
/// If the file cannot be written the full content is returned inline: losing output is worse
/// than a long message.
pub fn offload_if_large(
    workspace_root: &Path,
    call_id: &str,
    content: String,
    threshold: usize,
) -> SpoolOutcome {
    if content.len() < threshold {
        return SpoolOutcome::Inline(content);
    }
    match write_spool_file(workspace_root, call_id, content.as_bytes()) {
        Ok(rel) => SpoolOutcome::Spooled {
            preview: preview(&content, &rel),
            path: rel,
        },
        Err(e) => {
            tracing::warn!(target: "toolbox", call_id, error = %e, "could not spool a large result; returning it inline");
            SpoolOutcome::Inline(content)
        }
    }
}

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

fn write_spool_file(root: &Path, call_id: &str, bytes: &[u8]) -> std::io::Result<String> {
    let dir = root.join(TOOLBOX_DIR).join("tool_outputs");
    std::fs::create_dir_all(&dir)?;
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let stem = format!("{ms}__{}", safe_file_part(call_id));
    // Two calls with one id in the same millisecond must not overwrite each other.
    for n in 0..1000u32 {
        let name = if n == 0 {
            format!("{stem}.txt")
        } else {
            format!("{stem}-{n}.txt")
        };
        let path: PathBuf = dir.join(&name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                if let Err(e) = file.write_all(bytes).and_then(|_| file.flush()) {
                    let _ = std::fs::remove_file(&path);
                    return Err(e);
                }
                return Ok(format!("{TOOLBOX_DIR}/tool_outputs/{name}"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "too many spool files with the same name",
    ))
}

/// The first [`HEAD_CHARS`] and last [`TAIL_CHARS`] characters, and a line naming the file.
fn preview(content: &str, rel_path: &str) -> String {
    let total_chars = content.chars().count();
    let head_end = content
        .char_indices()
        .nth(HEAD_CHARS)
        .map(|(i, _)| i)
        .unwrap_or(content.len());
    let tail_start = if total_chars > HEAD_CHARS + TAIL_CHARS {
        content
            .char_indices()
            .rev()
            .nth(TAIL_CHARS - 1)
            .map(|(i, _)| i)
            .unwrap_or(head_end)
    } else {
        head_end
    };
    let omitted = total_chars.saturating_sub(HEAD_CHARS + TAIL_CHARS);
    format!(
        "{}\n\n[... {omitted} characters omitted ...]\n\n{}\n\n[Full output ({} bytes) spooled to {rel_path}. Use file_manager__read if you need more.]",
        &content[..head_end],
        &content[tail_start..],
        content.len(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_stay_inline() {
        let dir = tempfile::tempdir().unwrap();
        let out = offload_if_large(dir.path(), "c1", "hello".into(), 16);
        assert_eq!(out, SpoolOutcome::Inline("hello".into()));
        assert!(!dir.path().join(".toolbox").exists());
    }

    #[test]
    fn large_results_are_spooled_byte_exact_with_char_safe_preview() {
        let dir = tempfile::tempdir().unwrap();
        // Multi-byte characters everywhere, so a byte cut would panic or corrupt.
        let content: String = (0..10_000)
            .map(|i| if i % 2 == 0 { 'é' } else { '语' })
            .collect();
        let out = offload_if_large(dir.path(), "call/../x:1", content.clone(), 16_384);
        let SpoolOutcome::Spooled { preview, path } = out else {
            panic!("not spooled")
        };
        assert!(path.starts_with(".toolbox/tool_outputs/"));
        assert!(path.ends_with("__call____x_1.txt"), "{path}");
        let on_disk = std::fs::read(dir.path().join(&path)).unwrap();
        assert_eq!(on_disk, content.as_bytes());
        let head: String = content.chars().take(HEAD_CHARS).collect();
        let tail: String = content.chars().skip(10_000 - TAIL_CHARS).collect();
        assert!(preview.starts_with(&head));
        assert!(preview.contains(&format!("{tail}\n\n[Full output")));
        assert!(preview.contains("[... 7500 characters omitted ...]"));
        assert!(preview.contains("Use file_manager__read"));
    }

    #[test]
    fn same_id_same_millisecond_does_not_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_spool_file(dir.path(), "x", b"a").unwrap();
        let b = write_spool_file(dir.path(), "x", b"b").unwrap();
        assert_ne!(a, b);
    }
}
