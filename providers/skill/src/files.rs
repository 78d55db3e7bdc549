//! A skill's own files: a path inside the skill folder parsed once, opened beneath the
//! folder's descriptor, listed, and shown as text a window at a time.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use toolbox_host::{Dir, EntryKind};

use crate::registry::{explain_open, leads_out, show_name, Skill};

/// The longest path accepted inside a skill.
const MAX_PATH_CHARS: usize = 1024;
/// At most this many files are listed for a skill.
pub const MAX_LISTED_FILES: usize = 300;
/// Folders deeper than this are not listed.
const MAX_LIST_DEPTH: usize = 8;
/// `skill_resource` refuses files larger than this (it is for instructions, references and
/// scripts; data belongs in Python).
pub const MAX_RESOURCE_BYTES: u64 = 4 * 1024 * 1024;
/// Longer lines are cut to this many characters.
const MAX_LINE_CHARS: usize = 2000;

/// A path inside a skill's folder: relative, without `..`, never empty. Parsed from what a
/// model gives before anything is opened; the kernel then resolves it beneath the folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillPath {
    rel: PathBuf,
    shown: String,
}

impl SkillPath {
    /// Parses a path inside a skill, refusing anything that could name a file outside it.
    pub fn parse(raw: &str) -> Result<Self> {
        if raw.contains('\0') {
            bail!("the path has a NUL byte");
        }
        if raw.chars().count() > MAX_PATH_CHARS {
            bail!("the path is longer than {MAX_PATH_CHARS} characters");
        }
        if raw.starts_with('/') || raw.starts_with('~') {
            bail!("{raw:?} is not a path inside the skill: give it relative to the skill's folder, e.g. references/guide.md");
        }
        let mut parts = Vec::new();
        for seg in raw.split('/') {
            match seg {
                "" | "." => {}
                ".." => bail!("{raw:?} has `..`: a skill's files are named inside its folder only"),
                s => parts.push(s),
            }
        }
        if parts.is_empty() {
            bail!("the path is empty: name a file inside the skill, e.g. references/guide.md");
        }
        let shown = parts.join("/");
        Ok(SkillPath {
            rel: PathBuf::from(&shown),
            shown,
        })
    }

    /// The path relative to the skill folder, normalised (`./a//b` is `a/b`).
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    /// Whether it names the skill's own SKILL.md.
    pub fn is_skill_md(&self) -> bool {
        self.shown == "SKILL.md"
    }

    /// Opens the file beneath the skill's folder: links are followed only while they stay
    /// inside it, and only a regular file is opened (a FIFO never blocks).
    pub fn open(&self, skill: &Skill) -> Result<File> {
        skill
            .dir()
            .open_file_beneath(&self.rel)
            .map_err(|e| self.open_error(skill, &e))
    }

    fn open_error(&self, skill: &Skill, e: &std::io::Error) -> anyhow::Error {
        let name = skill.name();
        if e.kind() == std::io::ErrorKind::IsADirectory {
            return anyhow!(
                "{} is a folder of skill {name}; its files are listed by skill {{\"name\": \"{name}\"}}",
                self.shown
            );
        }
        if leads_out(e) {
            return anyhow!(
                "{} of skill {name} leads outside the skill's folder (a link out of it is not followed)",
                self.shown
            );
        }
        if e.kind() == std::io::ErrorKind::NotFound {
            return anyhow!(
                "skill {name} has no file {}; its files are listed by skill {{\"name\": \"{name}\"}}",
                self.shown
            );
        }
        anyhow!(
            "cannot open {} of skill {name}: {}",
            self.shown,
            explain_open(e, "the skill's folder")
        )
    }
}

/// One entry of a skill's file list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedFile {
    /// Relative to the skill folder, `/`-separated.
    pub path: String,
    /// Size in bytes; `None` for a link.
    pub size: Option<u64>,
}

/// The skill's files (not SKILL.md), depth-first in name order, without hidden files and
/// `__pycache__`; links are listed, never followed. The flag says whether the list was cut.
pub fn list(dir: &Dir) -> (Vec<ListedFile>, bool) {
    let mut out = Vec::new();
    let cut = walk(dir, "", 0, &mut out);
    (out, cut)
}

fn walk(dir: &Dir, prefix: &str, depth: usize, out: &mut Vec<ListedFile>) -> bool {
    let Ok(entries) = dir.entries() else {
        return false;
    };
    for entry in entries {
        let bytes = entry.name.as_encoded_bytes();
        if bytes.starts_with(b".") || bytes == b"__pycache__" {
            continue;
        }
        if depth == 0 && bytes == b"SKILL.md" {
            continue;
        }
        let path = format!("{prefix}{}", show_name(&entry.name));
        match entry.kind {
            EntryKind::Dir => {
                if depth + 1 >= MAX_LIST_DEPTH {
                    continue;
                }
                if let Ok(child) = dir.open_dir(&entry.name) {
                    if walk(&child, &format!("{path}/"), depth + 1, out) {
                        return true;
                    }
                }
            }
            EntryKind::File | EntryKind::Symlink => {
                if out.len() == MAX_LISTED_FILES {
                    return true;
                }
                let size = match entry.kind {
                    EntryKind::File => dir.size_and_mtime(&entry.name).ok().map(|(s, _)| s),
                    _ => None,
                };
                out.push(ListedFile { path, size });
            }
            EntryKind::Other => {}
        }
    }
    false
}

/// `1234` → `1.2 KiB`; under 1 KiB, bytes.
pub fn human_size(bytes: u64) -> String {
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    for unit in ["KiB", "MiB", "GiB"] {
        if value < 1024.0 {
            return format!("{value:.1} {unit}");
        }
        value /= 1024.0;
    }
    format!("{value:.1} TiB")
}

/// What a binary file is, from its first bytes, for a refusal that names it.
pub fn binary_kind(head: &[u8], name: &str) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"\x89PNG\r\n\x1a\n", "a PNG image"),
        (b"\xff\xd8\xff", "a JPEG image"),
        (b"GIF87a", "a GIF image"),
        (b"GIF89a", "a GIF image"),
        (b"%PDF-", "a PDF document"),
        (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
        (b"\x1f\x8b", "a gzip archive"),
        (b"BZh", "a bzip2 archive"),
        (b"\xfd7zXZ\x00", "an xz archive"),
        (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
        (b"\x7fELF", "an ELF executable"),
        (b"\x00asm", "a WebAssembly module"),
        (b"SQLite format 3\x00", "an SQLite database"),
        (b"wOFF", "a WOFF font"),
        (b"wOF2", "a WOFF2 font"),
        (b"OTTO", "an OpenType font"),
        (b"\x00\x01\x00\x00", "a TrueType font"),
        (b"ID3", "an MP3 audio file"),
        (b"OggS", "an Ogg media file"),
        (b"fLaC", "a FLAC audio file"),
        (b"\x00\x00\x01\x00", "an icon (ICO)"),
        (b"PAR1", "a Parquet file"),
        (b"\x93NUMPY", "a NumPy array"),
    ];
    if let Some((_, kind)) = MAGIC.iter().find(|(m, _)| head.starts_with(m)) {
        return Some(kind);
    }
    if head.len() >= 12 && &head[..4] == b"RIFF" {
        return Some(match &head[8..12] {
            b"WEBP" => "a WebP image",
            b"WAVE" => "a WAV audio file",
            b"AVI " => "an AVI video",
            _ => "a RIFF media file",
        });
    }
    if head.len() >= 12 && &head[4..8] == b"ftyp" {
        return Some("an MP4/QuickTime media file");
    }
    let looks_binary = head.contains(&0)
        || match std::str::from_utf8(head) {
            Ok(_) => false,
            Err(e) => e.error_len().is_some(),
        };
    if looks_binary {
        let ext = Path::new(name)
            .extension()
            .and_then(OsStr::to_str)
            .map(str::to_ascii_lowercase);
        return Some(match ext.as_deref() {
            Some("pyc") => "compiled Python bytecode",
            Some("pkl" | "pickle") => "a Python pickle",
            Some("xlsx" | "xls") => "a spreadsheet",
            _ => "binary data (not UTF-8 text)",
        });
    }
    None
}

/// Reads a text file of a skill and shows lines `offset..offset+limit` numbered like
/// `cat -n`, with a note on how to read on. Binary files and files over
/// [`MAX_RESOURCE_BYTES`] are refused, naming what they are.
pub fn read_window(file: File, shown: &str, offset: u64, limit: u64) -> Result<String> {
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > MAX_RESOURCE_BYTES {
        bail!(
            "{shown} is {}, more than the {} skill_resource shows; open it from Python instead",
            human_size(size),
            human_size(MAX_RESOURCE_BYTES)
        );
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(MAX_RESOURCE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
    if bytes.is_empty() {
        return Ok(format!("{shown} is empty (0 bytes)"));
    }
    let head = &bytes[..bytes.len().min(8192)];
    if let Some(kind) = binary_kind(head, shown) {
        bail!(
            "{shown} is {kind} ({}), not text: skill_resource shows text files only; use it \
             from Python by its skill: path instead",
            human_size(bytes.len() as u64)
        );
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| {
        anyhow!(
            "{shown} is binary data (not UTF-8 text, {}): skill_resource shows text files only",
            human_size(bytes.len() as u64)
        )
    })?;
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len() as u64;
    if offset > total {
        bail!(
            "offset {offset} is past the end of {shown}, which has {total} line{}",
            if total == 1 { "" } else { "s" }
        );
    }
    let last = offset.saturating_add(limit - 1).min(total);
    let width = 6.max(last.to_string().len());
    let mut out = String::new();
    for (i, line) in lines
        .iter()
        .enumerate()
        .skip((offset - 1) as usize)
        .take((last + 1 - offset) as usize)
    {
        let n = i + 1;
        match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => out.push_str(&format!(
                "{n:>width$}\t{}… [line truncated, {} chars]\n",
                &line[..cut],
                line.chars().count()
            )),
            None => out.push_str(&format!("{n:>width$}\t{line}\n")),
        }
    }
    if offset > 1 || last < total {
        out.push_str(&format!("[lines {offset}-{last} of {total}"));
        if last < total {
            out.push_str(&format!("; use offset={} to read more", last + 1));
        }
        out.push(']');
    } else if out.ends_with('\n') {
        out.pop();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_a_skill_are_parsed_before_any_opening() {
        assert_eq!(SkillPath::parse("./a//b.md").unwrap().as_str(), "a/b.md");
        assert!(SkillPath::parse("SKILL.md").unwrap().is_skill_md());
        assert!(SkillPath::parse("./SKILL.md").unwrap().is_skill_md());
        for (raw, want) in [
            ("../x", "has `..`"),
            ("a/../../x", "has `..`"),
            ("a/..", "has `..`"),
            ("/etc/passwd", "not a path inside the skill"),
            ("~/x", "not a path inside the skill"),
            ("", "empty"),
            ("./", "empty"),
            ("a\0b", "NUL"),
        ] {
            let e = SkillPath::parse(raw).unwrap_err().to_string();
            assert!(e.contains(want), "{raw:?}: {e}");
        }
    }

    #[test]
    fn binary_files_are_named() {
        assert_eq!(
            binary_kind(b"\x89PNG\r\n\x1a\n....", "a.png"),
            Some("a PNG image")
        );
        assert_eq!(binary_kind(b"%PDF-1.7", "x"), Some("a PDF document"));
        assert_eq!(
            binary_kind(b"RIFF\0\0\0\0WEBPVP8 ", "x"),
            Some("a WebP image")
        );
        assert_eq!(
            binary_kind(b"abc\0def", "x.bin"),
            Some("binary data (not UTF-8 text)")
        );
        assert_eq!(binary_kind("报告 text".as_bytes(), "x.md"), None);
    }

    #[test]
    fn windows_like_cat_n() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.md");
        std::fs::write(&path, "one\ntwo\nthree\n").unwrap();
        let open = || File::open(&path).unwrap();
        assert_eq!(
            read_window(open(), "t.md", 1, 2000).unwrap(),
            "     1\tone\n     2\ttwo\n     3\tthree"
        );
        assert_eq!(
            read_window(open(), "t.md", 2, 1).unwrap(),
            "     2\ttwo\n[lines 2-2 of 3; use offset=3 to read more]"
        );
        let e = read_window(open(), "t.md", 9, 1).unwrap_err().to_string();
        assert!(e.contains("past the end of t.md, which has 3 lines"), "{e}");
    }
}
