//! Loading a PDF and pulling text out of it without letting a bad file take the process down.
//!
//! pdf-extract (and lopdf under it) has `unwrap`s and `expect`s on document structure, so a
//! corrupt or unusual file can panic. Every call into them here runs under
//! [`std::panic::catch_unwind`] and turns a panic into an error that names the file; callers
//! run this on the blocking pool.

use std::panic::{catch_unwind, AssertUnwindSafe};

use anyhow::{anyhow, bail, Result};
use lopdf::{Document, Object};
use toolbox_host::CancellationToken;

/// A loaded document and what we learned about its encryption.
pub struct Pdf {
    pub doc: Document,
    /// The file has an encryption dictionary.
    pub encrypted: bool,
    /// Encrypted with a user password we do not have, so nothing inside can be read.
    pub locked: bool,
    pub page_count: u32,
}

/// Runs `f`, turning a panic into an error.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown error".into());
            Err(anyhow!("{what} failed: the PDF library gave up on this file ({msg}); the file is probably corrupt or uses a feature it does not support"))
        }
    }
}

/// Parses a PDF from memory. lopdf opens a file encrypted with an empty user password (the
/// common "owner password only" case) by itself; a file that needs a user password loads
/// with its objects still encrypted, which we report as `locked`.
pub fn load(bytes: &[u8], name: &str) -> Result<Pdf> {
    if !bytes.windows(5).take(1024).any(|w| w == b"%PDF-") {
        bail!("{name} is not a PDF file (it does not start with %PDF-)");
    }
    guarded(&format!("reading {name}"), || {
        let doc = Document::load_mem(bytes)
            .map_err(|e| anyhow!("{name} cannot be read as a PDF: {e}"))?;
        let locked = doc.is_encrypted();
        let encrypted = locked || doc.was_encrypted();
        let page_count = if locked {
            0
        } else {
            doc.get_pages().len() as u32
        };
        if !locked && page_count == 0 {
            bail!("{name} cannot be read as a PDF: it has no pages (the page tree is missing or damaged)");
        }
        Ok(Pdf {
            doc,
            encrypted,
            locked,
            page_count,
        })
    })
}

impl Pdf {
    /// The error every text tool gives for a file it cannot decrypt.
    pub fn ensure_readable(&self, name: &str) -> Result<()> {
        if self.locked {
            bail!("{name} is encrypted and needs a password to open; toolbox cannot read password-protected PDFs (remove the password first, e.g. `qpdf --decrypt --password=... in.pdf out.pdf`)");
        }
        Ok(())
    }

    /// The text of one page (1-based), as pdf-extract lays it out.
    pub fn page_text(&self, page: u32) -> Result<String> {
        guarded(&format!("extracting page {page}"), || {
            let mut text = String::new();
            let mut output = pdf_extract::PlainTextOutput::new(&mut text);
            pdf_extract::output_doc_page(&self.doc, &mut output, page)
                .map_err(|e| anyhow!("page {page}: {e}"))?;
            Ok(text)
        })
    }

    /// The text of each page in `pages`, in order; a page that fails is an `Err` in its slot
    /// so one bad page does not hide the others. Stops early (returning what it has) once
    /// `stop_after_chars` characters were collected or the call is cancelled.
    pub fn pages_text(
        &self,
        pages: &[u32],
        stop_after_chars: usize,
        cancel: &CancellationToken,
    ) -> Vec<(u32, Result<String>)> {
        let mut out = Vec::with_capacity(pages.len());
        let mut chars = 0usize;
        for &page in pages {
            if cancel.is_cancelled() || chars > stop_after_chars {
                break;
            }
            let text = self.page_text(page).map(|t| tidy(&t));
            if let Ok(t) = &text {
                chars += t.chars().count();
            }
            out.push((page, text));
        }
        out
    }

    /// The document information dictionary as (label, value) pairs, in a fixed order.
    pub fn metadata(&self) -> Vec<(&'static str, String)> {
        const KEYS: &[(&[u8], &str)] = &[
            (b"Title", "title"),
            (b"Author", "author"),
            (b"Subject", "subject"),
            (b"Keywords", "keywords"),
            (b"Creator", "creator"),
            (b"Producer", "producer"),
            (b"CreationDate", "creation date"),
            (b"ModDate", "modification date"),
        ];
        let info = match self.doc.trailer.get(b"Info") {
            Ok(Object::Reference(id)) => self.doc.get_dictionary(*id).ok(),
            Ok(Object::Dictionary(d)) => Some(d),
            _ => None,
        };
        let Some(info) = info else {
            return Vec::new();
        };
        KEYS.iter()
            .filter_map(|(key, label)| {
                let obj = info.get(key).ok()?;
                let obj = match obj {
                    Object::Reference(id) => self.doc.get_object(*id).ok()?,
                    o => o,
                };
                let text = lopdf::decode_text_string(obj).ok()?;
                let text = text.trim().trim_matches('\0').to_string();
                if text.is_empty() {
                    return None;
                }
                let text = if key.ends_with(b"Date") {
                    pdf_date(&text)
                } else {
                    text
                };
                Some((*label, text))
            })
            .collect()
    }
}

/// Reads a whole PDF as text with `--- page N ---` markers: the extractor other providers
/// (web_fetch) reach through [`toolbox_host::find_extractor`].
pub fn extract_all(bytes: &[u8]) -> Result<String> {
    let pdf = load(bytes, "the PDF")?;
    pdf.ensure_readable("the PDF")?;
    let pages: Vec<u32> = (1..=pdf.page_count).collect();
    let mut out = format!("({} pages)\n", pdf.page_count);
    for (page, text) in pdf.pages_text(&pages, usize::MAX, &CancellationToken::new()) {
        push_page(&mut out, page, &text);
    }
    Ok(out)
}

/// Appends one page with its marker.
pub fn push_page(out: &mut String, page: u32, text: &Result<String>) {
    out.push_str(&format!("\n--- page {page} ---\n"));
    match text {
        Ok(t) if t.trim().is_empty() => {
            out.push_str("(no text on this page; it may be a scanned image)\n")
        }
        Ok(t) => {
            out.push_str(t);
            out.push('\n');
        }
        Err(e) => out.push_str(&format!(
            "(the text of this page could not be extracted: {e:#})\n"
        )),
    }
}

/// Trims trailing spaces and collapses blank-line runs that text layout leaves behind.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim_matches('\n').to_string()
}

/// `D:20240131235959+01'00'` → `2024-01-31 23:59:59 +01:00`; anything unexpected is shown as is.
pub fn pdf_date(raw: &str) -> String {
    let s = raw.strip_prefix("D:").unwrap_or(raw);
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.len() < 4 {
        return raw.to_string();
    }
    let part = |from: usize, len: usize, default: &'static str| -> String {
        digits
            .get(from..from + len)
            .map(str::to_string)
            .unwrap_or_else(|| default.to_string())
    };
    let mut out = format!(
        "{}-{}-{} {}:{}:{}",
        part(0, 4, ""),
        part(4, 2, "01"),
        part(6, 2, "01"),
        part(8, 2, "00"),
        part(10, 2, "00"),
        part(12, 2, "00")
    );
    let zone = &s[digits.len()..];
    if let Some(sign) = zone.chars().next() {
        if sign == 'Z' {
            out.push_str(" UTC");
        } else if sign == '+' || sign == '-' {
            let z: String = zone[1..].chars().filter(|c| c.is_ascii_digit()).collect();
            if z.len() >= 2 {
                out.push_str(&format!(
                    " {sign}{}:{}",
                    &z[..2],
                    z.get(2..4).unwrap_or("00")
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(
            pdf_date("D:20240131235959+01'00'"),
            "2024-01-31 23:59:59 +01:00"
        );
        assert_eq!(pdf_date("D:20240131235959Z"), "2024-01-31 23:59:59 UTC");
        assert_eq!(pdf_date("D:2024"), "2024-01-01 00:00:00");
        assert_eq!(pdf_date("yesterday"), "yesterday");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let e = load(b"hello world", "x.pdf").err().unwrap().to_string();
        assert!(e.contains("not a PDF file"), "{e}");
        let e = load(
            b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF",
            "y.pdf",
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("y.pdf"), "{e}");
        let r = guarded("thing", || -> Result<()> { panic!("boom") });
        assert!(r.unwrap_err().to_string().contains("thing failed"));
    }

    #[test]
    fn tidy_collapses_blank_runs() {
        assert_eq!(tidy("\n\na  \n\n\n\nb\n\n"), "a\n\nb");
    }
}
