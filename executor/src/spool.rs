//! Large results go to disk; the model gets a head, a tail and the file's name.

use std::io::Write;

use toolbox_host::Workspace;

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
    Spooled {
        /// Head, tail and a line naming the file: what the model sees.
        preview: String,
        /// The spool file, relative to the workspace.
        path: String,
    },
}

/// Writes `content` byte-exact to `.toolbox/tool_outputs/<unix_ms>__<call_id>.txt` when it
/// is at least `threshold` bytes, and returns the preview the model should see instead;
/// `reader` is the tool the preview tells the model to read the file with, if any.
///
/// If the file cannot be written the full content is returned inline: losing output is worse
/// than a long message.
pub fn offload_if_large(
    workspace: &Workspace,
    call_id: &str,
    content: String,
    threshold: usize,
    reader: Option<&str>,
) -> SpoolOutcome {
    if content.len() < threshold {
        return SpoolOutcome::Inline(content);
    }
    match write_spool_file(workspace, call_id, content.as_bytes()) {
        Ok(rel) => SpoolOutcome::Spooled {
            preview: preview(&content, &rel, content.len() as u64, reader),
            path: rel,
        },
        Err(e) => {
            tracing::warn!(target: "toolbox", call_id, error = %e, "could not spool a large result; returning it inline");
            SpoolOutcome::Inline(content)
        }
    }
}

pub use toolbox_host::safe_file_part;

fn write_spool_file(workspace: &Workspace, call_id: &str, bytes: &[u8]) -> std::io::Result<String> {
    let (mut file, rel) = toolbox_host::create_spool_file(workspace, call_id)?;
    if let Err(e) = file.write_all(bytes).and_then(|_| file.flush()) {
        toolbox_host::remove_spool_file(workspace, &rel);
        return Err(e);
    }
    Ok(rel)
}

/// The first [`HEAD_CHARS`] and last [`TAIL_CHARS`] characters, and a line naming the file
/// and, when the registry has one, the tool to read it with.
///
/// The executor names no tool of its own: `reader` comes from the running registry (the
/// first tool whose `ToolInfo::file_reader` is set), so a bundle without file_manager does
/// not send the model to a tool that does not exist.
pub fn preview(content: &str, rel_path: &str, total_bytes: u64, reader: Option<&str>) -> String {
    let total_chars = content.chars().count();
    let footer = match reader {
        Some(tool) => format!(
            "[Full output ({total_bytes} bytes) spooled to {rel_path}. Use {tool} if you need more.]"
        ),
        None => format!("[Full output ({total_bytes} bytes) spooled to {rel_path}.]"),
    };
    if total_chars <= HEAD_CHARS + TAIL_CHARS {
        return format!("{content}\n\n{footer}");
    }
    let head_end = content
        .char_indices()
        .nth(HEAD_CHARS)
        .map(|(i, _)| i)
        .unwrap_or(content.len());
    let tail_start = content
        .char_indices()
        .rev()
        .nth(TAIL_CHARS - 1)
        .map(|(i, _)| i)
        .unwrap_or(head_end);
    let omitted = total_chars - HEAD_CHARS - TAIL_CHARS;
    format!(
        "{}\n\n[... {omitted} characters omitted ...]\n\n{}\n\n{footer}",
        &content[..head_end],
        &content[tail_start..],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_stay_inline() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let out = offload_if_large(&ws, "c1", "hello".into(), 16, None);
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
        let ws = Workspace::new(dir.path()).unwrap();
        let out = offload_if_large(&ws, "call/../x:1", content.clone(), 16_384, Some("reader"));
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
        assert!(
            preview.ends_with("Use reader if you need more.]"),
            "{preview}"
        );
    }

    #[test]
    fn without_a_reader_no_tool_is_named() {
        let p = preview("short", ".toolbox/tool_outputs/1__c.txt", 5, None);
        assert_eq!(
            p,
            "short\n\n[Full output (5 bytes) spooled to .toolbox/tool_outputs/1__c.txt.]"
        );
    }

    #[test]
    fn same_id_same_millisecond_does_not_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path()).unwrap();
        let a = write_spool_file(&ws, "x", b"a").unwrap();
        let b = write_spool_file(&ws, "x", b"b").unwrap();
        assert_ne!(a, b);
    }
}
