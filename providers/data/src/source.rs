//! Opening a data file: beneath the workspace root, decompressed through a guard that counts
//! what it expands to, its format chosen from the argument, the extension and the content.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::rc::Rc;

use anyhow::{anyhow, bail, Result};
use toolbox_host::{PathError, Workspace, WsPath};

use crate::format::{Compression, Format};
use crate::{InputLimits, MAX_EXPANSION_RATIO, RATIO_FLOOR_BYTES};

/// How much of the content is read ahead to sniff its format and CSV dialect.
const SNIFF_BYTES: usize = 64 * 1024;
/// The read buffer of text formats.
const BUF_BYTES: usize = 256 * 1024;

/// What the caller says about reading: `format` and `sheet`.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// The format the caller insists on.
    pub format: Option<Format>,
    /// The xlsx sheet, by name or index.
    pub sheet: Option<String>,
}

/// The sniffed CSV dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// The field delimiter.
    pub delimiter: u8,
    /// The quote character.
    pub quote: u8,
}

/// An opened data file, ready to be read as records.
pub struct Source {
    /// The path as shown to the model.
    pub shown: String,
    /// The file's size on disk.
    pub size: u64,
    /// The format it is read as.
    pub format: Format,
    /// Its compression.
    pub compression: Compression,
    /// Set when the format read differs from what the extension claimed.
    pub note: Option<String>,
    /// For CSV and TSV, the delimiter and quote.
    pub dialect: Option<Dialect>,
    /// The content.
    pub body: Body,
    /// What the text reader has delivered and where the current record began (see
    /// [`Guard`]); the readers move the mark after each record.
    pub meter: Meter,
}

impl Source {
    /// The CSV dialect sniffed, or the format's plain one (`,` or a tab, `"` quotes).
    pub fn csv_dialect(&self) -> Dialect {
        self.dialect.unwrap_or(Dialect {
            delimiter: if self.format == Format::Tsv {
                b'\t'
            } else {
                b','
            },
            quote: b'"',
        })
    }
}

/// The bytes of a source.
pub enum Body {
    /// A text format, decompressed, BOM removed.
    Text(Box<dyn BufRead>),
    /// A seekable file (Parquet, xlsx).
    File(File),
}

/// Counters shared by a [`Guard`] and the reader that moves its mark.
#[derive(Clone, Default)]
pub struct Meter {
    delivered: Rc<Cell<u64>>,
    mark: Rc<Cell<u64>>,
    /// Off for readers that bound their lines themselves (JSONL).
    unchecked: Rc<Cell<bool>>,
    /// Bytes read from the file itself (compressed, for .gz and .zst).
    file: Rc<Cell<u64>>,
}

impl Meter {
    /// A record ends here: the next one is measured from this point.
    pub fn mark(&self) {
        self.mark.set(self.delivered.get());
    }

    /// The reader bounds its records itself: the guard stops measuring them.
    pub fn stop_measuring(&self) {
        self.unchecked.set(true);
    }

    /// Bytes read from the file so far: of its size on disk, compressed bytes for .gz and
    /// .zst; a little ahead of the records delivered (the read buffer). 0 for Parquet and
    /// xlsx, which are read with seeks. For progress reports (the `progress` module).
    pub fn file_bytes(&self) -> u64 {
        self.file.get()
    }
}

/// Reads a decompressed stream and refuses to go past the limits: the whole expansion
/// (`max_decompressed_bytes`, and the ratio rule), and one record's length
/// (`max_line_bytes`, measured from the reader's last [`Meter::mark`]).
struct Guard<R> {
    inner: R,
    meter: Meter,
    compressed: Option<Rc<Cell<u64>>>,
    limits: InputLimits,
}

impl<R: Read> Read for Guard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let total = self.meter.delivered.get() + n as u64;
        self.meter.delivered.set(total);
        if let Some(compressed) = &self.compressed {
            if total > self.limits.max_decompressed_bytes {
                return Err(io::Error::other(format!(
                    "the compressed file expands past {} bytes, the limit ([data] \
                     max_decompressed_bytes); refused as a possible decompression bomb",
                    self.limits.max_decompressed_bytes
                )));
            }
            let c = compressed.get().max(1);
            if total > RATIO_FLOOR_BYTES && total / c > MAX_EXPANSION_RATIO {
                return Err(io::Error::other(format!(
                    "the compressed file expands more than {MAX_EXPANSION_RATIO} times its \
                     size ({c} bytes to over {total}); refused as a decompression bomb"
                )));
            }
        }
        // Slack for what the parsers read ahead of the record they are in.
        let slack = 2 * BUF_BYTES as u64;
        if !self.meter.unchecked.get()
            && total - self.meter.mark.get() > self.limits.max_line_bytes + slack
        {
            return Err(io::Error::other(format!(
                "a record (line) longer than {} bytes, the limit ([data] max_line_bytes)",
                self.limits.max_line_bytes
            )));
        }
        Ok(n)
    }
}

/// Counts the compressed bytes read from the file.
struct Counted<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Turns a workspace error into a message for the model.
pub fn path_error(e: PathError, shown: &str) -> anyhow::Error {
    match e {
        PathError::Io { ref source, .. } if source.kind() == io::ErrorKind::IsADirectory => {
            anyhow!("{shown} is a folder, not a data file")
        }
        other => anyhow!("{other}"),
    }
}

/// Opens `p` and decides how to read it.
pub fn open(
    ws: &Workspace,
    p: &WsPath,
    opts: &ReadOptions,
    limits: &InputLimits,
) -> Result<Source> {
    let shown = ws.show(p);
    let (file, size) = ws.open_read_sized(p).map_err(|e| path_error(e, &shown))?;
    open_file(file, size, shown, opts, limits)
}

/// [`open`] for a file already opened.
pub fn open_file(
    mut file: File,
    size: u64,
    shown: String,
    opts: &ReadOptions,
    limits: &InputLimits,
) -> Result<Source> {
    let (claimed, named_compression) = Format::from_name(&shown);
    let mut magic = [0u8; 4];
    let got = read_up_to(&mut file, &mut magic)?;
    let compression = Compression::sniff(&magic[..got]);
    let _ = named_compression;
    // Parquet and xlsx are read with seeks, from the file itself.
    let seekable = match opts.format {
        Some(f @ (Format::Parquet | Format::Xlsx)) => Some(f),
        Some(_) => None,
        None => {
            Format::sniff(&magic[..got]).filter(|f| matches!(f, Format::Parquet | Format::Xlsx))
        }
    };
    if let Some(format) = seekable {
        if compression != Compression::None {
            bail!(
                "{shown}: a {} file cannot be read compressed; decompress it first",
                format.name()
            );
        }
        use std::io::Seek;
        file.seek(io::SeekFrom::Start(0))?;
        let note = claimed
            .filter(|c| *c != format && opts.format.is_none())
            .map(|c| {
                format!(
                    "the name says {}, but the content is {}; read as {}",
                    c.name(),
                    format.name(),
                    format.name()
                )
            });
        return Ok(Source {
            shown,
            size,
            format,
            compression,
            note,
            dialect: None,
            body: Body::File(file),
            meter: Meter::default(),
        });
    }
    let start: Box<dyn Read> = Box::new(io::Cursor::new(magic[..got].to_vec()).chain(file));
    let meter = Meter::default();
    let compressed = meter.file.clone();
    let counted = Counted {
        inner: start,
        count: compressed.clone(),
    };
    let decoded: Box<dyn Read> = match compression {
        Compression::None => Box::new(counted),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(counted))),
        Compression::Zstd => Box::new(
            zstd::stream::read::Decoder::new(counted)
                .map_err(|e| anyhow!("{shown}: not a zstd stream: {e}"))?,
        ),
    };
    let mut guard = Guard {
        inner: decoded,
        meter: meter.clone(),
        compressed: (compression != Compression::None).then_some(compressed),
        limits: *limits,
    };
    // The head, for sniffing; then the stream goes on from where it stopped.
    let mut head = vec![0u8; SNIFF_BYTES];
    let n = read_up_to(&mut guard, &mut head).map_err(|e| anyhow!("{shown}: {e}"))?;
    head.truncate(n);
    let sniffed = Format::sniff(&head);
    let bom = head.starts_with(b"\xef\xbb\xbf");
    let text_start = if bom { 3 } else { 0 };
    let (format, dialect, note) = choose(opts.format, claimed, sniffed, &head[text_start..]);
    if let Some(why) = not_text(&head[text_start..]) {
        bail!(
            "{shown}: not a recognised data file: {why}; toolbox reads CSV, TSV, JSON, JSONL \
             (text, optionally .gz or .zst), Parquet and xlsx"
        );
    }
    if matches!(format, Format::Parquet | Format::Xlsx) {
        bail!(
            "{shown}: the content is {}, which cannot be read compressed",
            format.name()
        );
    }
    let body = io::Cursor::new(head[text_start..].to_vec()).chain(guard);
    Ok(Source {
        shown,
        size,
        format,
        compression,
        note,
        dialect,
        body: Body::Text(Box::new(BufReader::with_capacity(BUF_BYTES, body))),
        meter,
    })
}

/// Why the head of a text format is not text: a NUL byte, which no CSV, TSV or JSON text
/// holds (UTF-16 text does; so does any binary file).
fn not_text(head: &[u8]) -> Option<String> {
    let at = head.iter().position(|&b| b == 0)?;
    Some(format!(
        "it holds a NUL byte (at byte {at}), so it is binary (or UTF-16) rather than UTF-8 text"
    ))
}

/// The format to read as, and a note when it is not the one the name claimed.
fn choose(
    forced: Option<Format>,
    claimed: Option<Format>,
    sniffed: Option<Format>,
    text: &[u8],
) -> (Format, Option<Dialect>, Option<String>) {
    let dialect_for = |f: Format| match f {
        Format::Csv | Format::Tsv => Some(sniff_dialect(text, f)),
        _ => None,
    };
    if let Some(f) = forced {
        return (f, dialect_for(f), None);
    }
    let format = match sniffed {
        Some(s) => s,
        None => {
            let d = sniff_dialect(text, claimed.unwrap_or(Format::Csv));
            if d.delimiter == b'\t' {
                Format::Tsv
            } else {
                Format::Csv
            }
        }
    };
    // A `.json` file of one object per line is JSONL; say nothing about a `.json` holding
    // what JSON holds.
    let note = match claimed {
        Some(c) if c != format && !(c == Format::Json && format == Format::Jsonl) => Some(format!(
            "the name says {}, but the content is {}; read as {}",
            c.name(),
            format.name(),
            format.name()
        )),
        _ => None,
    };
    (format, dialect_for(format), note)
}

/// The delimiter and quote that split the first lines into the most consistent number of
/// fields (more than one), tried with the csv crate itself; the claimed format's own
/// delimiter when nothing does better.
pub fn sniff_dialect(text: &[u8], claimed: Format) -> Dialect {
    // Only whole lines: the head may end in the middle of one.
    let cut = match text.iter().rposition(|&b| b == b'\n') {
        Some(i) if text.len() >= SNIFF_BYTES - 3 => &text[..=i],
        _ => text,
    };
    let default = Dialect {
        delimiter: if claimed == Format::Tsv { b'\t' } else { b',' },
        quote: b'"',
    };
    let mut best: Option<(u64, Dialect)> = None;
    for delimiter in [b',', b'\t', b';', b'|'] {
        for quote in [b'"', b'\''] {
            let mut rdr = csv::ReaderBuilder::new()
                .delimiter(delimiter)
                .quote(quote)
                .has_headers(false)
                .flexible(true)
                .from_reader(cut);
            let mut counts: Vec<usize> = Vec::new();
            for rec in rdr.byte_records().take(50) {
                match rec {
                    Ok(r) => counts.push(r.len()),
                    Err(_) => break,
                }
            }
            let Some(&first) = counts.first() else {
                continue;
            };
            if first < 2 {
                continue;
            }
            let agreeing = counts.iter().filter(|&&c| c == first).count() as u64;
            // Rows that agree, weighted by width; the double quote wins ties.
            let score = agreeing * 1000 + first as u64 * 10 + u64::from(quote == b'"');
            if best.is_none_or(|(s, _)| score > s) {
                best = Some((score, Dialect { delimiter, quote }));
            }
        }
    }
    best.map(|(_, d)| d).unwrap_or(default)
}

/// Reads until `buf` is full or the stream ends.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dialects() {
        let d = sniff_dialect(b"a;b;c\n1;2;3\n4;5;6\n", Format::Csv);
        assert_eq!(d.delimiter, b';');
        let d = sniff_dialect(b"a\tb\n\"x,y\"\t2\n", Format::Csv);
        assert_eq!(d.delimiter, b'\t');
        let d = sniff_dialect(b"name,note\nann,\"a, b; c\"\nbob,x\n", Format::Csv);
        assert_eq!(
            d,
            Dialect {
                delimiter: b',',
                quote: b'"'
            }
        );
        // One column: nothing better than the claimed format's delimiter.
        assert_eq!(sniff_dialect(b"a\n1\n", Format::Tsv).delimiter, b'\t');
    }
}
