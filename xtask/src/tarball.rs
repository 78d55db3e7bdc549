//! A `.tar.gz` writer: POSIX ustar entries (folders and regular files) through gzip.
//!
//! `cargo xtask dist` needs only this much of tar, and no tar crate is in the lock file:
//! plain files and folders, owned by root, one modification time for every entry (so two
//! runs with the same `SOURCE_DATE_EPOCH` give the same bytes). GNU tar, bsdtar and Docker's
//! build context reader all read it.

use std::io::{self, Read, Write};

use anyhow::{bail, Context, Result};
use flate2::write::GzEncoder;
use flate2::Compression;

const BLOCK: usize = 512;

/// A gzip-compressed tar archive being written to `W`.
pub struct TarGz<W: Write> {
    out: GzEncoder<W>,
    mtime: u64,
}

impl<W: Write> TarGz<W> {
    /// An empty archive compressed at `level`; every entry gets `mtime` (seconds since the
    /// epoch).
    pub fn new(out: W, mtime: u64, level: Compression) -> Self {
        TarGz {
            out: GzEncoder::new(out, level),
            mtime,
        }
    }

    /// A folder entry (mode 0755). `path` is relative, with `/` between its parts.
    pub fn dir(&mut self, path: &str) -> Result<()> {
        let path = format!("{}/", path.trim_end_matches('/'));
        let header = header(&path, 0o755, 0, self.mtime, b'5')?;
        self.out.write_all(&header)?;
        Ok(())
    }

    /// A regular file of `size` bytes read from `data`, with permission bits `mode`.
    pub fn file(&mut self, path: &str, mode: u32, size: u64, data: impl Read) -> Result<()> {
        let header = header(path, mode & 0o7777, size, self.mtime, b'0')?;
        self.out.write_all(&header)?;
        let copied = io::copy(&mut data.take(size), &mut self.out)
            .with_context(|| format!("writing {path} into the archive"))?;
        if copied != size {
            bail!("{path}: expected {size} bytes, read {copied} (did the file change?)");
        }
        let pad = (BLOCK - (size as usize % BLOCK)) % BLOCK;
        self.out.write_all(&[0u8; BLOCK][..pad])?;
        Ok(())
    }

    /// A regular file holding `data`.
    pub fn bytes(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<()> {
        self.file(path, mode, data.len() as u64, data)
    }

    /// Ends the archive (two zero blocks) and the gzip stream; gives the writer back.
    pub fn finish(mut self) -> Result<W> {
        self.out.write_all(&[0u8; 2 * BLOCK])?;
        Ok(self.out.finish()?)
    }
}

/// One ustar header block. Paths longer than 100 bytes are split into ustar's `prefix`
/// (up to 155 bytes) and `name` at a `/`.
fn header(path: &str, mode: u32, size: u64, mtime: u64, kind: u8) -> Result<[u8; BLOCK]> {
    if path.is_empty() || path.starts_with('/') || path.split('/').any(|p| p == "..") {
        bail!("archive path {path:?} must be relative and stay inside the archive");
    }
    let (prefix, name) = split_path(path)?;
    let mut h = [0u8; BLOCK];
    put(&mut h[0..100], name.as_bytes());
    octal(&mut h[100..108], u64::from(mode))?;
    octal(&mut h[108..116], 0)?; // uid
    octal(&mut h[116..124], 0)?; // gid
    octal(&mut h[124..136], size).with_context(|| format!("{path} is too large for ustar"))?;
    octal(&mut h[136..148], mtime)?;
    h[148..156].fill(b' '); // the checksum counts its own field as spaces
    h[156] = kind;
    put(&mut h[257..263], b"ustar\0");
    put(&mut h[263..265], b"00");
    put(&mut h[265..297], b"root");
    put(&mut h[297..329], b"root");
    put(&mut h[345..500], prefix.as_bytes());
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let field = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(field.as_bytes());
    Ok(h)
}

fn split_path(path: &str) -> Result<(&str, &str)> {
    if path.len() <= 100 {
        return Ok(("", path));
    }
    // The longest prefix that fits, so the name left is as short as can be.
    for (i, _) in path.match_indices('/').rev() {
        let (prefix, name) = (&path[..i], &path[i + 1..]);
        if prefix.len() <= 155 && !name.is_empty() && name.len() <= 100 {
            return Ok((prefix, name));
        }
    }
    bail!("archive path {path:?} is too long for ustar (a name of at most 100 bytes under a folder of at most 155)")
}

fn put(field: &mut [u8], value: &[u8]) {
    field[..value.len()].copy_from_slice(value);
}

/// `value` as zero-padded octal digits and a NUL, filling `field`.
fn octal(field: &mut [u8], value: u64) -> Result<()> {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    if text.len() > digits {
        bail!("{value} does not fit in {digits} octal digits");
    }
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// What the system's tar reads back: every entry, the files' contents and modes.
    #[test]
    fn gnu_tar_reads_what_we_write() {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        let long = format!("top/{}/{}", "d".repeat(120), "f".repeat(90));
        let mut tar = TarGz::new(
            std::fs::File::create(&archive).unwrap(),
            1_700_000_000,
            Compression::default(),
        );
        tar.dir("top").unwrap();
        tar.dir("top/bin").unwrap();
        tar.bytes("top/bin/tool", 0o755, b"#!/bin/sh\necho hi\n")
            .unwrap();
        tar.bytes("top/empty", 0o644, b"").unwrap();
        tar.bytes("top/block", 0o644, &[7u8; 1024]).unwrap();
        tar.bytes(&long, 0o600, b"deep").unwrap();
        tar.finish().unwrap();

        let listed = Command::new("tar")
            .arg("-tvzf")
            .arg(&archive)
            .output()
            .unwrap();
        assert!(listed.status.success(), "{listed:?}");
        let listed = String::from_utf8(listed.stdout).unwrap();
        assert!(listed.contains("rwxr-xr-x root/root"), "{listed}");
        assert!(listed.contains(&long), "{listed}");

        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let status = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success());
        let read = |p: &str| std::fs::read(out.join(p)).unwrap();
        assert_eq!(read("top/bin/tool"), b"#!/bin/sh\necho hi\n");
        assert_eq!(read("top/empty"), b"");
        assert_eq!(read("top/block"), vec![7u8; 1024]);
        assert_eq!(read(&long), b"deep");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("top/bin/tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    }

    #[test]
    fn paths_that_leave_the_archive_or_do_not_fit_are_refused() {
        let mut tar = TarGz::new(Vec::new(), 0, Compression::fast());
        for bad in ["/etc/passwd", "a/../../b", ""] {
            let err = tar.bytes(bad, 0o644, b"x").unwrap_err().to_string();
            assert!(err.contains("must be relative"), "{bad}: {err}");
        }
        let err = tar
            .bytes(&"x".repeat(101), 0o644, b"x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("too long for ustar"), "{err}");
    }

    #[test]
    fn a_reader_shorter_than_its_size_is_an_error() {
        let mut tar = TarGz::new(Vec::new(), 0, Compression::fast());
        let err = tar.file("f", 0o644, 10, &b"abc"[..]).unwrap_err();
        assert!(
            err.to_string().contains("expected 10 bytes, read 3"),
            "{err}"
        );
    }
}
