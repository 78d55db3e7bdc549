//! Small text helpers shared by the tools: binary sniffing, character-safe truncation and
//! human-friendly sizes.

/// How much of a file's start is checked for a NUL byte.
pub(crate) const SNIFF_BYTES: usize = 8 * 1024;

/// Whether the start of a file looks binary: a NUL byte, or bytes that are not UTF-8.
///
/// `head` may end in the middle of a multi-byte character when the file is longer than the
/// sniffed window; that is not counted against it.
pub(crate) fn head_looks_binary(head: &[u8], whole_file: bool) -> bool {
    if head.contains(&0) {
        return true;
    }
    match std::str::from_utf8(head) {
        Ok(_) => false,
        // error_len() is None when the input merely stops inside a character.
        Err(e) => whole_file || e.error_len().is_some(),
    }
}

/// The first `max` characters of `s`, and whether anything was cut.
pub(crate) fn cut_chars(s: &str, max: usize) -> (&str, bool) {
    match s.char_indices().nth(max) {
        Some((at, _)) => (&s[..at], true),
        None => (s, false),
    }
}

/// The number of characters in UTF-8 bytes (bytes that do not continue a character).
pub(crate) fn count_chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| (b as i8) >= -0x40).count()
}

/// A file name or path as one safe line of output: control characters (a newline, a
/// carriage return, a terminal escape) are shown as escapes like `\n` and `\x1b`, so a
/// file's name can neither forge extra result lines nor drive the reader's terminal.
pub(crate) fn escape_name(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() && (c as u32) < 0x100 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `1` → `"1 byte"`, `1234` → `"1234 bytes"`.
pub(crate) fn bytes(n: u64) -> String {
    format!("{n} {}", if n == 1 { "byte" } else { "bytes" })
}

/// `1234` → `"1234 bytes (1.2 KiB)"`; sizes under 1 KiB are just `"12 bytes"`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return self::bytes(bytes);
    }
    let mut value = bytes as f64 / 1024.0;
    let mut i = 0;
    while value >= 1024.0 && i + 1 < UNITS.len() {
        value /= 1024.0;
        i += 1;
    }
    format!("{bytes} bytes ({value:.1} {})", UNITS[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_control_characters_are_escaped() {
        assert_eq!(escape_name("plain name.txt"), "plain name.txt");
        assert_eq!(escape_name("a\nb:1:forged"), "a\\nb:1:forged");
        assert_eq!(escape_name("\x1b[31mred"), "\\x1b[31mred");
        assert_eq!(escape_name("tab\there\r"), "tab\\there\\r");
        assert_eq!(escape_name("nel\u{85}"), "nel\\x85");
    }

    #[test]
    fn binary_sniffing() {
        assert!(!head_looks_binary(b"plain text\n", true));
        assert!(head_looks_binary(b"a\0b", false));
        assert!(head_looks_binary(b"\xff\xfe", false));
        // A window that ends inside "é" is fine unless it is the whole file.
        let e = "é".as_bytes();
        assert!(!head_looks_binary(&e[..1], false));
        assert!(head_looks_binary(&e[..1], true));
    }

    #[test]
    fn cutting_respects_char_boundaries() {
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(cut_chars("hé", 2), ("hé", false));
        assert_eq!(count_chars("hé€😀".as_bytes()), 4);
    }

    #[test]
    fn sizes() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1), "1 byte");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(1260), "1260 bytes (1.2 KiB)");
        assert_eq!(size(5 * 1024 * 1024), "5242880 bytes (5.0 MiB)");
    }
}
