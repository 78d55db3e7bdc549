//! `file_manager__read`: a window of a text file with line numbers, like `cat -n`.
//!
//! The file is streamed: only the lines shown are kept, and of a very long line only its
//! first characters. The rest of the file is scanned to count its lines, so the model knows
//! how much there is left to read.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

use anyhow::{anyhow, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo, ToolRisk, Vocabulary};
use toolbox_host::{PathError, ToolContext};

use crate::{blocking, cancelled, text, PATH, TOOLSET};

pub(crate) const NAME: &str = "file_manager__read";
const DEFAULT_LIMIT: u64 = 2000;
/// Models sometimes say offset 0 for "the start": it is read as line 1.
const OFFSET: Arg = Arg::integer("offset", 0, None).default(1);
const LIMIT: Arg = Arg::integer("limit", 1, Some(20_000)).default(DEFAULT_LIMIT);
/// Longer lines are cut to this many characters.
const MAX_LINE_CHARS: usize = 2000;
/// Bytes kept of one line: enough for MAX_LINE_CHARS characters of up to 4 bytes each,
/// plus one more so a cut line always has a whole character beyond the cut.
const KEEP_LINE_BYTES: usize = MAX_LINE_CHARS * 4 + 4;
/// How often (in lines) the scan looks at the cancellation token.
const CANCEL_CHECK_LINES: u64 = 4096;

pub(crate) fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Read a UTF-8 text file from the workspace. Lines are numbered like `cat -n` (number, \
         tab, text). By default the first 2000 lines are shown; use offset (1-based first line) \
         and limit (number of lines, max 20000) to page through longer files — a note at the \
         end says which lines were shown out of how many and what offset to use next. Lines \
         longer than 2000 characters are cut and marked. Binary files (images, archives, \
         spreadsheets, …) are refused: inspect those from Python instead. Directories are \
         refused: use file_manager__list.",
        object(&[
            PATH.doc(
                "File to read, relative to the workspace. `output/`, `scratchpad/` and \
                 `input/` name this session's folders.",
            ),
            OFFSET.doc("1-based number of the first line to show (default 1)."),
            LIMIT.doc("How many lines to show (default 2000, max 20000)."),
        ]),
    )
    .risk(ToolRisk::Read)
    .aliases(&["read_file"])
    .toolsets(&[TOOLSET])
    .named(Vocabulary::DataAgent, "read_file")
    // The executor names this tool in a spooled result's preview.
    .file_reader()
}

pub(crate) async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    let path = PATH.str(&a)?.to_string();
    // Models sometimes say offset 0 for "the start"; read it as line 1.
    let offset = OFFSET.u64(&a)?.max(1);
    let limit = LIMIT.u64(&a)?;
    a.finish()?;
    let ws = &ctx.workspace;
    let p = ws.locate(&path).map_err(|e| anyhow!("{NAME}: {e}"))?;
    let shown = ws.show(&p);
    // Opened beneath the root by descriptor: what is read is what was checked. Opening is
    // a couple of system calls; a small file is then read right here, because a trip to the
    // blocking pool (two thread hand-offs) would cost more than the read itself.
    let (file, size) = open(ctx, &p, &shown)?;
    if size <= INLINE_READ_BYTES {
        return read(ctx, file, size, &shown, offset, limit).map(Value::String);
    }
    let ctx = ctx.clone();
    blocking(NAME, move || {
        read(&ctx, file, size, &shown, offset, limit).map(Value::String)
    })
    .await
}

/// Files up to this size are read on the calling task instead of the blocking pool.
const INLINE_READ_BYTES: u64 = 64 * 1024;

/// The file, and its size when it was opened.
fn open(ctx: &ToolContext, p: &toolbox_host::WsPath, shown: &str) -> Result<(File, u64)> {
    ctx.workspace.open_read_sized(p).map_err(|e| match e {
        _ if e.is_not_found() => anyhow!("{NAME}: {shown} does not exist"),
        PathError::Io { ref source, .. } if source.kind() == io::ErrorKind::IsADirectory => {
            anyhow!(
                "{NAME}: {shown} is a directory; use {} to see what it contains",
                ctx.word(crate::list::NAME)
            )
        }
        other => anyhow!("{NAME}: cannot read {shown}: {other}"),
    })
}

/// `size` is the file's length when it was opened (for the binary-file message).
fn read(
    ctx: &ToolContext,
    file: File,
    size: u64,
    shown: &str,
    offset: u64,
    limit: u64,
) -> Result<String> {
    let binary = || {
        anyhow!(
            "{NAME}: {shown} looks like a binary file ({}); it cannot be shown as text",
            text::bytes(size)
        )
    };
    let io_err = |e: io::Error| anyhow!("{NAME}: cannot read {shown}: {e}");

    let mut file = file;
    // A file smaller than the sniffing window is read in one go, up to the size it had when
    // it was opened: no second read to find the end (what was appended since is not shown,
    // as it would not be had the read come a moment earlier). A size of 0 may be a lie (a
    // /proc file), so it reads the whole window.
    let window = match size {
        1.. if size < text::SNIFF_BYTES as u64 => size,
        _ => text::SNIFF_BYTES as u64,
    };
    let mut head = Vec::with_capacity(window as usize);
    (&mut file)
        .take(window)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    if head.is_empty() {
        return Ok(format!("{shown} is empty (0 bytes)"));
    }
    // A head shorter than the window is the whole file.
    let whole = head.len() < text::SNIFF_BYTES;
    if text::head_looks_binary(&head, whole) {
        return Err(binary());
    }
    // Nothing is read past a whole head: a `take(0)` returns at once, without a system call.
    let rest = file.take(if whole { 0 } else { u64::MAX });
    let mut reader = BufReader::with_capacity(
        if whole { head.len() } else { 64 * 1024 },
        io::Cursor::new(head).chain(rest),
    );

    let last_wanted = offset.saturating_add(limit - 1);
    let width = 6.max(last_wanted.to_string().len());
    let mut out = String::new();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    let mut last_shown = 0u64;
    loop {
        line_no += 1;
        let wanted = line_no >= offset && line_no <= last_wanted;
        let keep = if wanted { KEEP_LINE_BYTES } else { 0 };
        let Some(len) = next_line(&mut reader, &mut buf, keep).map_err(io_err)? else {
            line_no -= 1;
            break;
        };
        if wanted {
            let whole = len.bytes == buf.len() + usize::from(len.had_cr);
            let line = match std::str::from_utf8(&buf) {
                Ok(s) => s,
                // A kept prefix may stop inside a character; anything else is not text.
                Err(e) if !whole && e.error_len().is_none() => {
                    std::str::from_utf8(&buf[..e.valid_up_to()]).map_err(|_| binary())?
                }
                Err(_) => return Err(binary()),
            };
            let (cut, was_cut) = text::cut_chars(line, MAX_LINE_CHARS);
            out.push_str(&format!("{line_no:>width$}\t{cut}"));
            if was_cut || !whole {
                out.push_str(&format!("… [line truncated, {} chars]", len.chars));
            }
            out.push('\n');
            last_shown = line_no;
        }
        if line_no.is_multiple_of(CANCEL_CHECK_LINES) && ctx.cancel.is_cancelled() {
            return Err(cancelled(NAME));
        }
    }
    let total = line_no;
    if offset > total {
        return Err(anyhow!(
            "{NAME}: offset {offset} is past the end of {shown}, which has {total} line{}",
            if total == 1 { "" } else { "s" }
        ));
    }
    if offset > 1 || last_shown < total {
        out.push_str(&format!("[lines {offset}-{last_shown} of {total}"));
        if last_shown < total {
            out.push_str(&format!("; use offset={} to read more", last_shown + 1));
        }
        out.push(']');
    } else if out.ends_with('\n') {
        out.pop();
    }
    Ok(out)
}

/// The length of one line as it is in the file, without its line ending.
struct LineLen {
    bytes: usize,
    chars: usize,
    /// The line ended in `\r\n`; the `\r` is counted in `bytes` but not kept.
    had_cr: bool,
}

/// Reads the next line into `buf` (without `\n` and a `\r` before it), keeping at most `keep`
/// bytes of it, and measures the whole line. `None` at the end of the input.
fn next_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>, keep: usize) -> io::Result<Option<LineLen>> {
    buf.clear();
    let mut bytes = 0usize;
    let mut chars = 0usize;
    let mut started = false;
    let mut last_byte = None;
    loop {
        let avail = match r.fill_buf() {
            Ok(avail) => avail,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            break;
        }
        started = true;
        let (chunk, ended) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..i], true),
            None => (avail, false),
        };
        let room = keep.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        bytes += chunk.len();
        chars += text::count_chars(chunk);
        if let Some(&b) = chunk.last() {
            last_byte = Some(b);
        }
        let used = chunk.len() + usize::from(ended);
        r.consume(used);
        if ended {
            break;
        }
    }
    if !started {
        return Ok(None);
    }
    let had_cr = last_byte == Some(b'\r');
    if had_cr {
        chars -= 1;
        if buf.len() == bytes {
            buf.pop();
        }
    }
    Ok(Some(LineLen {
        bytes,
        chars,
        had_cr,
    }))
}

#[cfg(test)]
mod tests {
    use crate::test_support::*;
    use serde_json::json;

    #[tokio::test]
    async fn whole_small_file_is_numbered_like_cat_n() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "a.txt", "alpha\nbeta\r\n\ngamma");
        let out = call(&ctx, "file_manager__read", json!({"path": "a.txt"}))
            .await
            .unwrap();
        assert_eq!(out, "     1\talpha\n     2\tbeta\n     3\t\n     4\tgamma");
    }

    #[tokio::test]
    async fn windows_say_what_was_shown_and_how_to_continue() {
        let (_d, ctx) = setup(super::NAME);
        let body: String = (1..=25).map(|i| format!("line {i}\n")).collect();
        put(&ctx, "n.txt", &body);
        let out = call(
            &ctx,
            "file_manager__read",
            json!({"path": "n.txt", "limit": 10}),
        )
        .await
        .unwrap();
        assert!(out.starts_with("     1\tline 1\n"), "{out}");
        assert!(out.ends_with("    10\tline 10\n[lines 1-10 of 25; use offset=11 to read more]"));
        let out = call(
            &ctx,
            "file_manager__read",
            json!({"file_path": "n.txt", "offset": 21, "limit": 10}),
        )
        .await
        .unwrap();
        assert!(out.starts_with("    21\tline 21\n"), "{out}");
        assert!(
            out.ends_with("    25\tline 25\n[lines 21-25 of 25]"),
            "{out}"
        );
        let out = call(
            &ctx,
            "file_manager__read",
            json!({"path": "n.txt", "offset": 0}),
        )
        .await
        .unwrap();
        assert!(out.starts_with("     1\tline 1\n") && out.ends_with("line 25"));
    }

    #[tokio::test]
    async fn files_around_the_sniffing_window_are_read_whole() {
        // A small file is read in one go up to its size; a larger one goes on past the
        // window. Either way every line is there and counted.
        let (_d, ctx) = setup(super::NAME);
        let window = crate::text::SNIFF_BYTES;
        for size in [1, 7, window - 1, window, window + 1, 3 * window + 5] {
            // Lines of "x…x\n", the last one without its newline, `size` bytes in all.
            let mut body = String::new();
            while body.len() < size {
                let take = (size - body.len()).min(10);
                body.push_str(&"x".repeat(take));
                if body.len() < size {
                    body.push('\n');
                }
            }
            assert_eq!(body.len(), size);
            put(&ctx, "w.txt", &body);
            let out = call(
                &ctx,
                "file_manager__read",
                json!({"path": "w.txt", "limit": 20_000}),
            )
            .await
            .unwrap();
            let lines = body.split('\n').count();
            assert_eq!(out.lines().count(), lines, "size {size}");
            let last = out.lines().last().unwrap();
            assert!(
                last.trim_start().starts_with(&format!("{lines}\t"))
                    && last.ends_with(body.rsplit('\n').next().unwrap()),
                "size {size}: {last}"
            );
        }
    }

    #[tokio::test]
    async fn offset_past_the_end_and_empty_files() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "three.txt", "a\nb\nc\n");
        put(&ctx, "empty.txt", "");
        let e = call(
            &ctx,
            "file_manager__read",
            json!({"path": "three.txt", "offset": 9}),
        )
        .await
        .unwrap_err();
        assert_eq!(
            e,
            "file_manager__read: offset 9 is past the end of three.txt, which has 3 lines"
        );
        let out = call(&ctx, "file_manager__read", json!({"path": "empty.txt"}))
            .await
            .unwrap();
        assert_eq!(out, "empty.txt is empty (0 bytes)");
    }

    #[tokio::test]
    async fn long_lines_are_cut_on_a_character_boundary() {
        let (_d, ctx) = setup(super::NAME);
        // 1999 ASCII characters then multi-byte ones: the cut falls inside the "é" run.
        let line = format!("{}{}", "a".repeat(1999), "é".repeat(5000));
        put(&ctx, "long.txt", format!("{line}\nshort\n"));
        let out = call(&ctx, "file_manager__read", json!({"path": "long.txt"}))
            .await
            .unwrap();
        let first = out.lines().next().unwrap();
        let expected = format!(
            "     1\t{}é… [line truncated, 6999 chars]",
            "a".repeat(1999)
        );
        assert_eq!(first, expected);
        assert!(out.ends_with("     2\tshort"), "{out}");

        // A line of 4-byte characters longer than the kept window.
        put(&ctx, "emoji.txt", "😀".repeat(3000));
        let out = call(&ctx, "file_manager__read", json!({"path": "emoji.txt"}))
            .await
            .unwrap();
        assert_eq!(
            out,
            format!(
                "     1\t{}… [line truncated, 3000 chars]",
                "😀".repeat(2000)
            )
        );
    }

    #[tokio::test]
    async fn binary_files_and_directories_are_refused() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "img.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
        put(&ctx, "latin1.txt", b"caf\xe9\n");
        std::fs::create_dir(ctx.workspace.root().join("dir")).unwrap();
        let e = call(&ctx, "file_manager__read", json!({"path": "img.png"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__read: img.png looks like a binary file (16 bytes); it cannot be shown as text"
        );
        let e = call(&ctx, "file_manager__read", json!({"path": "latin1.txt"}))
            .await
            .unwrap_err();
        assert!(
            e.contains("latin1.txt looks like a binary file (5 bytes)"),
            "{e}"
        );
        let e = call(&ctx, "file_manager__read", json!({"path": "dir"}))
            .await
            .unwrap_err();
        assert_eq!(
            e,
            "file_manager__read: dir is a directory; use file_manager__list to see what it contains"
        );
        let e = call(&ctx, "file_manager__read", json!({"path": "missing.txt"}))
            .await
            .unwrap_err();
        assert_eq!(e, "file_manager__read: missing.txt does not exist");
    }

    #[tokio::test]
    async fn invalid_utf8_after_the_sniffed_window_is_refused_when_shown() {
        let (_d, ctx) = setup(super::NAME);
        let mut body = "ok\n".repeat(5000).into_bytes();
        body.extend_from_slice(b"bad \xff line\n");
        put(&ctx, "late.txt", &body);
        let out = call(
            &ctx,
            "file_manager__read",
            json!({"path": "late.txt", "limit": 10}),
        )
        .await
        .unwrap();
        assert!(out.ends_with("[lines 1-10 of 5001; use offset=11 to read more]"));
        let e = call(
            &ctx,
            "file_manager__read",
            json!({"path": "late.txt", "offset": 5001}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("looks like a binary file"), "{e}");
    }

    #[tokio::test]
    async fn limits_are_checked() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, "a.txt", "a\n");
        let e = call(
            &ctx,
            "file_manager__read",
            json!({"path": "a.txt", "limit": 20001}),
        )
        .await
        .unwrap_err();
        assert!(
            e.contains("`limit` must be between 1 and 20000, got 20001"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn session_paths_are_read_from_the_session_folder() {
        let (_d, ctx) = setup(super::NAME);
        put(&ctx, ".toolbox/sessions/s1/scratchpad/t.py", "print(1)\n");
        let out = call(&ctx, "file_manager__read", json!({"path": "scratch/t.py"}))
            .await
            .unwrap();
        assert_eq!(out, "     1\tprint(1)");
    }
}
