//! Splitting the input into lines: one JSON-RPC message per line, at most
//! [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES) long. A longer line is skipped up to its newline
//! without being held.

/// One line of input, newline excluded.
#[derive(Debug, PartialEq)]
pub(super) enum Frame<'a> {
    Line(&'a [u8]),
    /// A line over the limit, skipped without keeping it.
    TooLong,
}

/// Splits input into lines of at most `limit` bytes. A line that arrives whole in one chunk
/// is handed out in place; only a line split across reads is copied. A longer line is
/// consumed up to its newline but never held.
pub(super) struct Framer {
    limit: usize,
    /// The start of a line whose newline has not come yet.
    partial: Vec<u8>,
    /// `partial` was handed out as a frame and is to be cleared.
    emitted: bool,
    /// The current line is over the limit; skip to its newline.
    too_long: bool,
}

impl Framer {
    pub(super) fn new(limit: usize) -> Framer {
        Framer {
            limit,
            partial: Vec::new(),
            emitted: false,
            too_long: false,
        }
    }

    fn reset(&mut self) {
        if self.emitted {
            self.emitted = false;
            // Do not keep a huge buffer alive because of one big message long ago.
            if self.partial.capacity() > 1024 * 1024 {
                self.partial = Vec::new();
            }
            self.partial.clear();
        }
    }

    /// The next line ending in `chunk[*pos..]`, moving `pos` past it; `None` once the rest of
    /// the chunk is the start of a line still to come.
    pub(super) fn next<'a>(&'a mut self, chunk: &'a [u8], pos: &mut usize) -> Option<Frame<'a>> {
        self.reset();
        let rest = &chunk[*pos..];
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            *pos = chunk.len();
            self.hold(rest);
            return None;
        };
        *pos += newline + 1;
        let piece = &rest[..newline];
        if self.too_long || self.partial.len() + piece.len() > self.limit {
            self.too_long = false;
            self.partial = Vec::new();
            return Some(Frame::TooLong);
        }
        if self.partial.is_empty() {
            return Some(Frame::Line(piece));
        }
        self.partial.extend_from_slice(piece);
        self.emitted = true;
        Some(Frame::Line(&self.partial))
    }

    /// At end of input: a last line without a newline still counts.
    pub(super) fn finish(&mut self) -> Option<Frame<'_>> {
        self.reset();
        if self.too_long {
            self.too_long = false;
            return Some(Frame::TooLong);
        }
        if self.partial.is_empty() {
            return None;
        }
        self.emitted = true;
        Some(Frame::Line(&self.partial))
    }

    fn hold(&mut self, bytes: &[u8]) {
        if self.too_long {
            return;
        }
        if self.partial.len() + bytes.len() > self.limit {
            self.too_long = true;
            self.partial = Vec::new();
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of `input` fed in chunks of `chunk` bytes.
    fn frames(input: &[u8], chunk: usize, limit: usize) -> Vec<Option<Vec<u8>>> {
        let mut framer = Framer::new(limit);
        let mut out = Vec::new();
        let mut push = |frame: Frame<'_>| {
            out.push(match frame {
                Frame::Line(line) => Some(line.to_vec()),
                Frame::TooLong => None,
            })
        };
        for piece in input.chunks(chunk) {
            let mut pos = 0;
            while let Some(frame) = framer.next(piece, &mut pos) {
                push(frame);
            }
        }
        if let Some(frame) = framer.finish() {
            push(frame);
        }
        out
    }

    #[test]
    fn frames_skip_long_lines_and_keep_a_last_line_without_newline() {
        for chunk in [1, 2, 3, 4, 7, 64] {
            let got = frames(b"abc\n0123456789\n\nxy", chunk, 5);
            assert_eq!(
                got,
                [
                    Some(b"abc".to_vec()),
                    None,
                    Some(vec![]),
                    Some(b"xy".to_vec()),
                ],
                "chunk {chunk}"
            );
            assert_eq!(frames(b"0123456789", chunk, 5), [None], "chunk {chunk}");
            assert_eq!(
                frames(b"12345\n", chunk, 5),
                [Some(b"12345".to_vec())],
                "chunk {chunk}"
            );
            assert_eq!(
                frames(b"123456\nok\n", chunk, 5),
                [None, Some(b"ok".to_vec())],
                "chunk {chunk}"
            );
        }
    }
}
