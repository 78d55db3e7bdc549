//! Bounded byte buffers for command output, and UTF-8 decoding that survives chunk borders.
//!
//! A command can print gigabytes; everything here keeps a fixed amount of memory no matter
//! how much passes through.

use std::collections::VecDeque;

/// Keeps the first `head_cap` and the last `tail_cap` bytes of a stream and counts the rest.
#[derive(Debug)]
pub struct HeadTail {
    head: Vec<u8>,
    head_cap: usize,
    tail: Ring,
    total: u64,
}

impl HeadTail {
    pub fn new(head_cap: usize, tail_cap: usize) -> Self {
        HeadTail {
            head: Vec::new(),
            head_cap,
            tail: Ring::new(tail_cap),
            total: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap - self.head.len();
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        if !rest.is_empty() {
            self.tail.push(rest);
        }
    }

    /// Every byte that went through.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes that went through but are kept in neither the head nor the tail.
    pub fn omitted(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.len() as u64
    }

    /// The kept text: the whole stream, or head and tail with a line about the gap between.
    /// Cuts are moved to character boundaries so no character is split in two.
    pub fn render(&self) -> String {
        let omitted = self.omitted();
        if omitted == 0 {
            // One copy of the output, not three: many calls may render at once.
            let mut all = Vec::with_capacity(self.head.len() + self.tail.len());
            all.extend_from_slice(&self.head);
            self.tail.append_to(&mut all);
            return String::from_utf8(all)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        }
        let tail = self.tail.contents();
        let head = &self.head[..self.head.len() - incomplete_suffix_len(&self.head)];
        let skip = tail
            .iter()
            .take(3)
            .take_while(|b| is_continuation(**b))
            .count();
        format!(
            "{}\n[... {omitted} bytes omitted ...]\n{}",
            String::from_utf8_lossy(head),
            String::from_utf8_lossy(&tail[skip..])
        )
    }
}

/// The last `cap` bytes written. Grows up to `cap` as needed, then overwrites in place.
#[derive(Debug)]
pub struct Ring {
    buf: Vec<u8>,
    cap: usize,
    /// Where the oldest byte is once the buffer is full.
    start: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Ring {
            buf: Vec::new(),
            cap,
            start: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn push(&mut self, mut data: &[u8]) {
        if self.cap == 0 {
            return;
        }
        if data.len() >= self.cap {
            self.buf.clear();
            self.buf.extend_from_slice(&data[data.len() - self.cap..]);
            self.start = 0;
            return;
        }
        if self.buf.len() < self.cap {
            let n = (self.cap - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        while !data.is_empty() {
            let n = (self.cap - self.start).min(data.len());
            self.buf[self.start..self.start + n].copy_from_slice(&data[..n]);
            self.start = (self.start + n) % self.cap;
            data = &data[n..];
        }
    }

    /// Oldest first.
    pub fn contents(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len());
        self.append_to(&mut out);
        out
    }

    /// Appends the kept bytes, oldest first, to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf[self.start..]);
        out.extend_from_slice(&self.buf[..self.start]);
    }
}

/// Output not yet read by `shell_output`: the newest `cap` bytes, counting what was dropped.
#[derive(Debug, Default)]
pub struct Unread {
    bytes: VecDeque<u8>,
    cap: usize,
    /// Dropped since the last read because nobody read them in time.
    dropped: u64,
}

impl Unread {
    pub fn new(cap: usize) -> Self {
        Unread {
            cap,
            ..Default::default()
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.bytes.extend(data);
        if self.bytes.len() > self.cap {
            let excess = self.bytes.len() - self.cap;
            self.bytes.drain(..excess);
            self.dropped += excess as u64;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Takes the unread text and how many bytes were dropped before it. While the stream is
    /// still open, a character cut at the end stays for the next read.
    pub fn take(&mut self, stream_open: bool) -> (String, u64) {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        self.bytes.clear();
        // The oldest kept byte may sit in the middle of a character whose start was dropped.
        let skip = if self.dropped > 0 {
            all.iter()
                .take(3)
                .take_while(|b| is_continuation(**b))
                .count()
        } else {
            0
        };
        let keep = if stream_open {
            incomplete_suffix_len(&all)
        } else {
            0
        };
        let text = String::from_utf8_lossy(&all[skip..all.len() - keep]).into_owned();
        self.bytes.extend(&all[all.len() - keep..]);
        let dropped = std::mem::take(&mut self.dropped) + skip as u64;
        (text, dropped)
    }
}

/// Turns a byte stream into text chunk by chunk, holding back a character cut at a chunk's
/// end until the rest of it arrives. Invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    carry: [u8; 4],
    carried: usize,
}

impl Utf8Stream {
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        let joined;
        let data: &[u8] = if self.carried == 0 {
            bytes
        } else {
            let mut v = Vec::with_capacity(self.carried + bytes.len());
            v.extend_from_slice(&self.carry[..self.carried]);
            v.extend_from_slice(bytes);
            joined = v;
            &joined
        };
        let keep = incomplete_suffix_len(data);
        let (now, later) = data.split_at(data.len() - keep);
        self.carry[..keep].copy_from_slice(later);
        self.carried = keep;
        String::from_utf8_lossy(now).into_owned()
    }

    /// Whatever is still held back (an incomplete character at the very end of the stream).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.carry[..self.carried]).into_owned();
        self.carried = 0;
        rest
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// How many bytes at the end of `b` are the start of a UTF-8 character whose remaining
/// bytes have not arrived yet (0 to 3).
pub fn incomplete_suffix_len(b: &[u8]) -> usize {
    for i in 1..=b.len().min(3) {
        let byte = b[b.len() - i];
        if is_continuation(byte) {
            continue;
        }
        let needed = match byte {
            0xF0..=0xF7 => 4,
            0xE0..=0xEF => 3,
            0xC0..=0xDF => 2,
            _ => 1,
        };
        return if needed > i { i } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_tail_keeps_everything_when_small_and_the_ends_when_large() {
        let mut h = HeadTail::new(4, 4);
        h.push(b"abc");
        h.push(b"def");
        assert_eq!(h.render(), "abcdef");
        assert_eq!(h.omitted(), 0);
        h.push(b"ghijkl");
        assert_eq!(h.total(), 12);
        assert_eq!(h.omitted(), 4);
        assert_eq!(h.render(), "abcd\n[... 4 bytes omitted ...]\nijkl");
    }

    #[test]
    fn head_tail_never_splits_a_character() {
        // 'é' is two bytes: a byte cut at 5 would split one.
        let text = "éééééééééé";
        let mut h = HeadTail::new(5, 5);
        for b in text.as_bytes() {
            h.push(std::slice::from_ref(b));
        }
        let r = h.render();
        assert!(!r.contains('\u{FFFD}'), "{r}");
        assert!(r.starts_with("éé\n[..."), "{r}");
        assert!(r.ends_with("]\néé"), "{r}");
    }

    #[test]
    fn ring_wraps_and_keeps_the_newest_bytes() {
        let mut r = Ring::new(5);
        r.push(b"ab");
        assert_eq!(r.contents(), b"ab");
        r.push(b"cdefg");
        assert_eq!(r.contents(), b"cdefg");
        r.push(b"hi");
        assert_eq!(r.contents(), b"efghi");
        r.push(b"0123456789");
        assert_eq!(r.contents(), b"56789");
        for c in b"abcdefghijklm" {
            r.push(std::slice::from_ref(c));
        }
        assert_eq!(r.contents(), b"ijklm");
        let mut zero = Ring::new(0);
        zero.push(b"x");
        assert_eq!(zero.len(), 0);
    }

    #[test]
    fn utf8_stream_survives_any_split() {
        let text = "héllo 语言 🎉 done";
        let bytes = text.as_bytes();
        for size in 1..6 {
            let mut s = Utf8Stream::default();
            let mut out = String::new();
            for chunk in bytes.chunks(size) {
                out.push_str(&s.feed(chunk));
            }
            out.push_str(&s.finish());
            assert_eq!(out, text, "chunk size {size}");
        }
        let mut s = Utf8Stream::default();
        assert_eq!(s.feed(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(s.feed(b"\xe8\xaf"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }

    #[test]
    fn unread_drops_the_oldest_and_says_how_much() {
        let mut u = Unread::new(4);
        u.push(b"abcdef");
        let (text, dropped) = u.take(true);
        assert_eq!((text.as_str(), dropped), ("cdef", 2));
        assert!(u.is_empty());
        u.push("x语".as_bytes());
        let (text, _) = u.take(true);
        assert_eq!(text, "x语");
        // A character cut at the end waits for its last byte while the stream is open.
        u.push(&"语".as_bytes()[..2]);
        assert_eq!(u.take(true), (String::new(), 0));
        u.push(&"语".as_bytes()[2..]);
        assert_eq!(u.take(true).0, "语");
    }
}
