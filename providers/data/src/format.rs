//! Formats: names, extensions, and sniffing the first bytes of a file.

/// A data format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated (or another sniffed delimiter).
    Csv,
    /// Tab-separated.
    Tsv,
    /// One JSON array of objects.
    Json,
    /// One JSON object per line.
    Jsonl,
    /// Apache Parquet.
    Parquet,
    /// Excel 2007+ workbook (read only).
    Xlsx,
}

/// The names `format` accepts for input.
pub const INPUT_NAMES: &[&str] = &["csv", "tsv", "json", "jsonl", "parquet", "xlsx"];
/// The names an output may have.
pub const OUTPUT_NAMES: &[&str] = &["csv", "tsv", "json", "jsonl", "parquet"];

/// A compression wrapped around a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// None.
    None,
    /// gzip (`.gz`).
    Gzip,
    /// Zstandard (`.zst`).
    Zstd,
}

impl Compression {
    /// By magic number.
    pub fn sniff(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Its name, for results.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some("gzip"),
            Compression::Zstd => Some("zstd"),
        }
    }
}

impl Format {
    /// Its name, as `format` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Json => "json",
            Format::Jsonl => "jsonl",
            Format::Parquet => "parquet",
            Format::Xlsx => "xlsx",
        }
    }

    /// An input format by name (`ndjson` is read as `jsonl`).
    pub fn parse_input(name: &str) -> Option<Format> {
        Some(match name.to_ascii_lowercase().as_str() {
            "csv" => Format::Csv,
            "tsv" | "tab" => Format::Tsv,
            "json" => Format::Json,
            "jsonl" | "ndjson" => Format::Jsonl,
            "parquet" | "pq" => Format::Parquet,
            "xlsx" => Format::Xlsx,
            _ => return None,
        })
    }

    /// An output format by name.
    pub fn parse_output(name: &str) -> Option<Format> {
        Format::parse_input(name).filter(|f| *f != Format::Xlsx)
    }

    /// What a file name says: its format (if the extension is one) and compression.
    pub fn from_name(name: &str) -> (Option<Format>, Compression) {
        let lower = name.to_ascii_lowercase();
        let (stem, compression) = if let Some(s) = lower.strip_suffix(".gz") {
            (s.to_string(), Compression::Gzip)
        } else if let Some(s) = lower.strip_suffix(".zst") {
            (s.to_string(), Compression::Zstd)
        } else if let Some(s) = lower.strip_suffix(".zstd") {
            (s.to_string(), Compression::Zstd)
        } else {
            (lower, Compression::None)
        };
        let ext = stem.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        let format = match ext {
            "txt" => None,
            e => Format::parse_input(e),
        };
        (format, compression)
    }

    /// What the first bytes of the (decompressed) content look like. `None`: plain text,
    /// which is CSV or TSV by its delimiter (sniffed by the CSV reader).
    pub fn sniff(head: &[u8]) -> Option<Format> {
        if head.starts_with(b"PAR1") {
            return Some(Format::Parquet);
        }
        if head.starts_with(b"PK\x03\x04") {
            return Some(Format::Xlsx);
        }
        let text = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
        let first = text.iter().position(|b| !b.is_ascii_whitespace())?;
        match text[first] {
            b'[' => Some(Format::Json),
            b'{' => Some(Format::Jsonl),
            _ => None,
        }
    }

    /// Whether a sniffed format may stand for the claimed one without a note: a `.json` file
    /// may hold one object per line, and text is CSV or TSV.
    pub fn agrees(claimed: Format, sniffed: Option<Format>) -> bool {
        match sniffed {
            None => matches!(claimed, Format::Csv | Format::Tsv),
            Some(s) => s == claimed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_extensions() {
        assert_eq!(
            Format::from_name("a/b.CSV.gz"),
            (Some(Format::Csv), Compression::Gzip)
        );
        assert_eq!(
            Format::from_name("x.jsonl.zst"),
            (Some(Format::Jsonl), Compression::Zstd)
        );
        assert_eq!(
            Format::from_name("x.ndjson"),
            (Some(Format::Jsonl), Compression::None)
        );
        assert_eq!(Format::from_name("README"), (None, Compression::None));
        assert_eq!(Format::parse_output("xlsx"), None);
    }

    #[test]
    fn sniffing() {
        assert_eq!(Format::sniff(b"PAR1\0\0"), Some(Format::Parquet));
        assert_eq!(
            Format::sniff(b"\xef\xbb\xbf  [{\"a\":1}]"),
            Some(Format::Json)
        );
        assert_eq!(Format::sniff(b"\n{\"a\":1}\n"), Some(Format::Jsonl));
        assert_eq!(Format::sniff(b"a,b\n1,2\n"), None);
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert!(Format::agrees(Format::Tsv, None));
        assert!(!Format::agrees(Format::Csv, Some(Format::Jsonl)));
    }
}
