//! The model's Markdown, rendered for a terminal as it streams (`toolbox chat`).
//!
//! Headings, **bold**, *italic*, `inline code`, fenced code blocks, lists, block quotes,
//! rules, links and pipe tables (laid out as aligned columns). A line is rendered as soon as
//! its kind is known: a paragraph, heading or list item streams as it arrives, except an
//! inline span (bold, code, a link) whose end has not come yet, which waits for it or for the
//! end of the line. Table rows wait for the end of the table, as columns can only be aligned
//! once every row is known; code lines wait for their own end.
//!
//! With `ansi` off (`NO_COLOR`) the layout is the same without any escape sequence. The
//! caller passes text through `terminal_safe` first, so the model's text carries no control
//! character: the only escape sequences in the output are this module's own SGR codes, and
//! every style is closed before its line ends.

const BOLD: &str = "\x1b[1m";
const ITALIC: &str = "\x1b[3m";
const BOLD_ITALIC: &str = "\x1b[1;3m";
const UNDERLINE: &str = "\x1b[4m";
const DIM: &str = "\x1b[2m";
const CODE: &str = "\x1b[36m";
const H1: &str = "\x1b[1;4m";
const RESET: &str = "\x1b[0m";

/// How wide a rule is drawn.
const RULE_WIDTH: usize = 40;

/// A renderer for one stream of Markdown: feed it with [`push`](Markdown::push), end it with
/// [`finish`](Markdown::finish).
pub(crate) struct Markdown {
    ansi: bool,
    /// The current line, from its start (its rendered part is `line[done..]`'s complement).
    line: String,
    /// How much of `line` was rendered already (a streaming line's prefix and spans).
    done: usize,
    /// What the current line is, once enough of it has come to tell.
    kind: Option<Block>,
    /// How many columns of the current line were shown (for a plain heading's underline).
    shown_width: usize,
    /// Inside a fenced code block: its fence character and length.
    fence: Option<(char, usize)>,
    /// The rows of a table, until it ends.
    table: Vec<String>,
}

/// What one line is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Block {
    /// `|`-separated cells: kept until the table ends.
    TableRow,
    /// ```` ``` ```` or `~~~`: a code block starts (or ends).
    Fence,
    /// `---`, `***`, `___`.
    Rule,
    /// `#` to `######`; the text starts at the offset.
    Heading(usize, usize),
    /// `- `, `* `, `+ `; the text starts at the offset.
    Bullet(usize),
    /// `1. `, `2) `; the marker ends before the offset's space.
    Ordered(usize),
    /// `> `; the text starts at the offset.
    Quote(usize),
    /// Anything else.
    Paragraph,
}

impl Block {
    /// Whether the line waits for its end before anything of it is shown.
    fn whole(self) -> bool {
        matches!(self, Block::TableRow | Block::Fence | Block::Rule)
    }
}

impl Markdown {
    /// A renderer; `ansi` says whether styles are drawn with escape sequences.
    pub(crate) fn new(ansi: bool) -> Self {
        Markdown {
            ansi,
            line: String::new(),
            done: 0,
            kind: None,
            shown_width: 0,
            fence: None,
            table: Vec::new(),
        }
    }

    /// Takes the next piece of text; returns what can be shown of it now.
    pub(crate) fn push(&mut self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(end) = rest.find('\n') {
            self.line.push_str(&rest[..end]);
            out.push_str(&self.end_line());
            rest = &rest[end + 1..];
        }
        self.line.push_str(rest);
        out.push_str(&self.stream());
        out
    }

    /// Ends the text (the model's reply is over): shows what is left, a table included, and
    /// closes an open code block. Whatever is returned ends with a newline, or is empty.
    pub(crate) fn finish(&mut self) -> String {
        let mut out = String::new();
        if !self.line.is_empty() {
            out.push_str(&self.end_line());
        }
        out.push_str(&self.flush_table());
        self.fence = None;
        out
    }

    /// Renders what can be rendered of the line so far.
    fn stream(&mut self) -> String {
        if self.fence.is_some() || self.line.is_empty() {
            return String::new();
        }
        let mut out = String::new();
        if self.kind.is_none() {
            let Some(kind) = classify(&self.line, false) else {
                return out;
            };
            self.kind = Some(kind);
            if kind.whole() {
                return out;
            }
            out.push_str(&self.flush_table());
            let (prefix, at) = self.prefix(&self.line, kind);
            self.shown_width += visible_width(&prefix);
            out.push_str(&prefix);
            self.done = at;
        }
        let Some(kind) = self.kind.filter(|k| !k.whole()) else {
            return out;
        };
        let (text, done) = inline_from(&self.line, self.done, false, self.base(kind), self.ansi);
        self.shown_width += visible_width(&text);
        out.push_str(&text);
        self.done = done;
        out
    }

    /// The line is complete: renders the rest of it.
    fn end_line(&mut self) -> String {
        let line = std::mem::take(&mut self.line);
        let kind = self.kind.take();
        let done = std::mem::take(&mut self.done);
        let width = std::mem::take(&mut self.shown_width);
        if let Some((c, n)) = self.fence {
            if closes_fence(&line, c, n) {
                self.fence = None;
                return String::new();
            }
            return self.code_line(&line);
        }
        let kind = match kind {
            Some(kind) => kind,
            None => classify(&line, true).unwrap_or(Block::Paragraph),
        };
        if kind == Block::TableRow {
            self.table.push(line);
            return String::new();
        }
        let mut out = String::new();
        if kind.whole() || done == 0 {
            // Nothing of it shown yet.
            out.push_str(&self.flush_table());
        }
        match kind {
            Block::Fence => {
                let trimmed = line.trim_start();
                let c = trimmed.chars().next().unwrap_or('`');
                let n = trimmed.chars().take_while(|&x| x == c).count();
                self.fence = Some((c, n));
                let language = trimmed[n..].trim();
                if self.ansi && !language.is_empty() {
                    out.push_str(&format!("  {DIM}{language}{RESET}\n"));
                }
                return out;
            }
            Block::Rule => {
                let rule = "─".repeat(RULE_WIDTH);
                out.push_str(&self.styled(DIM, &rule));
                out.push('\n');
                return out;
            }
            _ => {}
        }
        let mut width = width;
        let mut at = done;
        if done == 0 {
            let (prefix, start) = self.prefix(&line, kind);
            width += visible_width(&prefix);
            out.push_str(&prefix);
            at = start;
        }
        let (text, _) = inline_from(&line, at, true, self.base(kind), self.ansi);
        width += visible_width(&text);
        out.push_str(&text);
        if let Block::Heading(level, _) = kind {
            if self.ansi {
                out.push_str(RESET);
            } else if level <= 2 {
                let mark = if level == 1 { "═" } else { "─" };
                out.push('\n');
                out.push_str(&mark.repeat(width.max(1)));
            }
        }
        out.push('\n');
        out
    }

    /// What `line`, of `kind`, starts with, and where its text begins.
    fn prefix(&self, line: &str, kind: Block) -> (String, usize) {
        let indent = |at: usize| {
            let head = &line[..at.min(line.len())];
            " ".repeat(head.len() - head.trim_start().len())
        };
        match kind {
            Block::Heading(level, at) => {
                let style = if level == 1 { H1 } else { BOLD };
                (
                    if self.ansi {
                        style.into()
                    } else {
                        String::new()
                    },
                    at,
                )
            }
            Block::Bullet(at) => (format!("{}• ", indent(at)), at),
            Block::Ordered(at) => {
                let marker = line[..at].trim();
                (format!("{}{marker} ", indent(at)), at + 1)
            }
            Block::Quote(at) => (format!("{} ", self.styled(DIM, "│")), at),
            _ => (String::new(), 0),
        }
    }

    /// The style a line's text goes back to after a span.
    fn base(&self, kind: Block) -> &'static str {
        match kind {
            Block::Heading(1, _) if self.ansi => H1,
            Block::Heading(..) if self.ansi => BOLD,
            _ => "",
        }
    }

    fn styled(&self, style: &str, text: &str) -> String {
        if self.ansi {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    fn code_line(&self, line: &str) -> String {
        if self.ansi {
            format!("  {DIM}│{RESET} {CODE}{line}{RESET}\n")
        } else {
            format!("    {line}\n")
        }
    }

    /// Lays out the table collected so far (or shows its lines as text when they are not a
    /// table after all).
    fn flush_table(&mut self) -> String {
        let rows = std::mem::take(&mut self.table);
        if rows.is_empty() {
            return String::new();
        }
        let cells: Vec<Vec<String>> = rows.iter().map(|r| split_row(r)).collect();
        let aligns = match cells.get(1).and_then(|r| delimiter_row(r)) {
            Some(aligns) => aligns,
            None => {
                // Not a table: each line as a paragraph.
                let mut out = String::new();
                for row in &rows {
                    out.push_str(&inline(row, true, "", self.ansi).0);
                    out.push('\n');
                }
                return out;
            }
        };
        let body: Vec<&Vec<String>> = std::iter::once(&cells[0])
            .chain(cells.iter().skip(2))
            .collect();
        let columns = body.iter().map(|r| r.len()).max().unwrap_or(0).max(1);
        let rendered: Vec<Vec<(String, usize)>> = body
            .iter()
            .enumerate()
            .map(|(i, row)| {
                (0..columns)
                    .map(|c| {
                        let cell = row.get(c).map(String::as_str).unwrap_or("");
                        let base = if i == 0 && self.ansi { BOLD } else { "" };
                        let (mut text, _) = inline(cell, true, base, self.ansi);
                        if !base.is_empty() {
                            text = format!("{base}{text}{RESET}");
                        }
                        let width = visible_width(&text);
                        (text, width)
                    })
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = (0..columns)
            .map(|c| rendered.iter().map(|r| r[c].1).max().unwrap_or(0))
            .collect();
        let bar = self.styled(DIM, "│");
        let mut out = String::new();
        for (i, row) in rendered.iter().enumerate() {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, (text, width))| {
                    let room = widths[c] - width;
                    let (left, right) = match aligns.get(c).copied().unwrap_or(Align::Left) {
                        Align::Left => (0, room),
                        Align::Right => (room, 0),
                        Align::Center => (room / 2, room - room / 2),
                    };
                    format!("{}{text}{}", " ".repeat(left), " ".repeat(right))
                })
                .collect();
            out.push_str(line.join(&format!(" {bar} ")).trim_end());
            out.push('\n');
            if i == 0 {
                let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
                out.push_str(&self.styled(DIM, &rule.join("─┼─")));
                out.push('\n');
            }
        }
        out
    }
}

/// How a table column is aligned.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Align {
    Left,
    Right,
    Center,
}

/// The cells of a table row: split at `|` (not `\|`), the outer pipes dropped, trimmed;
/// tabs as spaces.
fn split_row(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = match row.strip_suffix('|') {
        Some(r) if !r.ends_with('\\') => r,
        _ => row,
    };
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            '\t' => cell.push(' '),
            c => cell.push(c),
        }
    }
    cells.push(cell);
    cells.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The alignments a delimiter row (`|---|:--:|--:|`) gives, or `None` when it is not one.
fn delimiter_row(cells: &[String]) -> Option<Vec<Align>> {
    cells
        .iter()
        .map(|cell| {
            let left = cell.starts_with(':');
            let right = cell.ends_with(':') && cell.len() > 1;
            let dashes = cell.trim_start_matches(':').trim_end_matches(':');
            if dashes.is_empty() || !dashes.chars().all(|c| c == '-') {
                return None;
            }
            Some(match (left, right) {
                (true, true) => Align::Center,
                (false, true) => Align::Right,
                _ => Align::Left,
            })
        })
        .collect()
}

/// Whether `line` closes a code block opened by `n` times `c`.
fn closes_fence(line: &str, c: char, n: usize) -> bool {
    let trimmed = line.trim();
    let run = trimmed.chars().take_while(|&x| x == c).count();
    run >= n && run == trimmed.chars().count()
}

/// What `line` is; `None` while it is too short to tell (only when not `complete`).
fn classify(line: &str, complete: bool) -> Option<Block> {
    let trimmed = line.trim_start();
    let indent = line.len() - trimmed.len();
    let mut chars = trimmed.chars();
    let Some(first) = chars.next() else {
        return complete.then_some(Block::Paragraph);
    };
    let wait = |block: Block| if complete { Some(block) } else { None };
    match first {
        '|' => Some(Block::TableRow),
        '`' | '~' => {
            let run = trimmed.chars().take_while(|&c| c == first).count();
            if run >= 3 {
                Some(Block::Fence)
            } else if run == trimmed.len() {
                wait(Block::Paragraph)
            } else {
                Some(Block::Paragraph)
            }
        }
        '#' => {
            let level = trimmed.chars().take_while(|&c| c == '#').count();
            match trimmed[level..].chars().next() {
                None => wait(if level <= 6 {
                    Block::Heading(level, line.len())
                } else {
                    Block::Paragraph
                }),
                // Its text starts after the spaces: wait for it.
                Some(' ') if level <= 6 && !complete && trimmed[level..].trim().is_empty() => None,
                Some(' ') if level <= 6 => {
                    let text = indent + level + 1;
                    let text = text + (line[text..].len() - line[text..].trim_start().len());
                    Some(Block::Heading(level, text))
                }
                Some(_) => Some(Block::Paragraph),
            }
        }
        '-' | '*' | '+' | '_' => {
            // Only markers and spaces so far: a rule, or not yet known.
            if trimmed.chars().all(|c| c == first || c == ' ') {
                let marks = trimmed.chars().filter(|&c| c == first).count();
                if !complete {
                    // "- " or "* " followed by more is a list item; wait for it.
                    return None;
                }
                if marks >= 3 && first != '+' {
                    return Some(Block::Rule);
                }
                if marks == 1 && first != '_' && trimmed.len() > 1 {
                    return Some(Block::Bullet(indent + 2));
                }
                return Some(Block::Paragraph);
            }
            if first != '_' && chars.next() == Some(' ') {
                Some(Block::Bullet(indent + 2))
            } else {
                Some(Block::Paragraph)
            }
        }
        '0'..='9' => {
            let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
            let mut after = trimmed[digits..].chars();
            match after.next() {
                None => wait(Block::Paragraph),
                Some('.' | ')') if digits <= 9 => match after.next() {
                    None => wait(Block::Paragraph),
                    Some(' ') => Some(Block::Ordered(indent + digits + 1)),
                    Some(_) => Some(Block::Paragraph),
                },
                Some(_) => Some(Block::Paragraph),
            }
        }
        '>' => {
            let at = indent + 1;
            if line.len() == at && !complete {
                return None;
            }
            let at = if line[at..].starts_with(' ') {
                at + 1
            } else {
                at
            };
            Some(Block::Quote(at))
        }
        _ => Some(Block::Paragraph),
    }
}

/// Renders the inline Markdown of `text` (emphasis, code spans, links, escapes); `base` is the
/// style the text goes back to after a span. Returns the rendering and how many bytes of
/// `text` it covers: all of them when `complete`; otherwise it stops before a span whose end
/// has not come yet, to be rendered when more text is there.
fn inline(text: &str, complete: bool, base: &str, ansi: bool) -> (String, usize) {
    inline_from(text, 0, complete, base, ansi)
}

/// [`inline`] of `text[start..]`, with what comes before `start` as context (a `_` after a
/// letter opens nothing); returns where it stopped, from the start of `text`.
fn inline_from(
    text: &str,
    start: usize,
    complete: bool,
    base: &str,
    ansi: bool,
) -> (String, usize) {
    let mut out = String::new();
    let bytes = text.as_bytes();
    let mut i = start;
    let close = |out: &mut String| {
        if ansi {
            out.push_str(RESET);
            out.push_str(base);
        }
    };
    while i < text.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        match c {
            '\\' => match text[i + 1..].chars().next() {
                None if !complete => return (out, i),
                Some(next) if next.is_ascii_punctuation() => {
                    out.push(next);
                    i += 1 + next.len_utf8();
                }
                _ => {
                    out.push('\\');
                    i += 1;
                }
            },
            '`' => {
                let run = run_of(bytes, i, b'`');
                if i + run == text.len() && !complete {
                    return (out, i);
                }
                match find_backticks(text, i + run, run, complete) {
                    Some(end) => {
                        let code = &text[i + run..end];
                        let code = match code.strip_prefix(' ').and_then(|c| c.strip_suffix(' ')) {
                            Some(inner) if !inner.trim().is_empty() => inner,
                            _ => code,
                        };
                        if ansi {
                            out.push_str(CODE);
                            out.push_str(code);
                            close(&mut out);
                        } else {
                            out.push_str(code);
                        }
                        i = end + run;
                    }
                    None if !complete => return (out, i),
                    None => {
                        out.push_str(&text[i..i + run]);
                        i += run;
                    }
                }
            }
            '*' | '_' => {
                let mark = c as u8;
                let run = run_of(bytes, i, mark);
                let next = text[i + run..].chars().next();
                if next.is_none() && !complete {
                    return (out, i);
                }
                let before = text[..i].chars().next_back();
                let opens = next.is_some_and(|n| !n.is_whitespace())
                    && (mark == b'*' || !before.is_some_and(char::is_alphanumeric));
                if !opens {
                    out.push_str(&text[i..i + run]);
                    i += run;
                    continue;
                }
                let n = run.min(3);
                match find_closer(text, i + run, mark, n, complete) {
                    Some(end) => {
                        let inner = &text[i + n..end];
                        let style = match n {
                            1 => ITALIC,
                            2 => BOLD,
                            _ => BOLD_ITALIC,
                        };
                        let inner_base = if ansi {
                            format!("{base}{style}")
                        } else {
                            String::new()
                        };
                        let (rendered, _) = inline(inner, true, &inner_base, ansi);
                        if ansi {
                            out.push_str(style);
                        }
                        out.push_str(&rendered);
                        close(&mut out);
                        i = end + n;
                    }
                    None if !complete => return (out, i),
                    None => {
                        out.push_str(&text[i..i + run]);
                        i += run;
                    }
                }
            }
            '[' => match link(text, i) {
                Link::Found { label, url, end } => {
                    let (label, _) = inline(label, true, base, ansi);
                    if label == url {
                        out.push_str(&styled_if(ansi, UNDERLINE, url));
                    } else {
                        out.push_str(&styled_if(ansi, UNDERLINE, &label));
                        out.push_str(&styled_if(ansi, DIM, &format!(" ({url})")));
                    }
                    if ansi {
                        out.push_str(base);
                    }
                    i = end;
                }
                Link::NotYet if !complete => return (out, i),
                _ => {
                    out.push('[');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += c.len_utf8();
            }
        }
    }
    (out, i)
}

fn styled_if(ansi: bool, style: &str, text: &str) -> String {
    if ansi {
        format!("{style}{text}{RESET}")
    } else {
        text.to_string()
    }
}

/// How many times `mark` repeats from `at`.
fn run_of(bytes: &[u8], at: usize, mark: u8) -> usize {
    bytes[at..].iter().take_while(|&&b| b == mark).count()
}

/// Where a run of exactly `n` backticks starts at or after `from`. Unless `complete`, a run
/// at the very end could still grow, so it is no answer yet.
fn find_backticks(text: &str, from: usize, n: usize, complete: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = run_of(bytes, i, b'`');
            if i + run == bytes.len() && !complete {
                return None;
            }
            if run == n {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// Where the `n` marks that close an emphasis opened before `from` start: after text that
/// does not end in a space; for `_`, not followed by a letter or digit. Unless `complete`,
/// `None` also when what follows could still change the answer (a code span not closed yet,
/// marks at the very end).
fn find_closer(text: &str, from: usize, mark: u8, n: usize, complete: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1 + text[i + 1..].chars().next().map_or(0, char::len_utf8),
            b'`' => {
                // A code span inside is skipped whole.
                let run = run_of(bytes, i, b'`');
                i = match find_backticks(text, i + run, run, complete) {
                    Some(end) => end + run,
                    None if !complete => return None,
                    None => i + run,
                };
            }
            b if b == mark => {
                let run = run_of(bytes, i, mark);
                if i + run == bytes.len() && !complete {
                    return None;
                }
                let before = text[..i].chars().next_back();
                let after = text[i + run..].chars().next();
                let flanked = i > from && before.is_some_and(|c| !c.is_whitespace());
                let free = mark == b'*' || !after.is_some_and(char::is_alphanumeric);
                if run >= n && flanked && free {
                    return Some(i + run - n);
                }
                i += run;
            }
            _ => i += 1,
        }
    }
    None
}

enum Link<'a> {
    Found {
        label: &'a str,
        url: &'a str,
        end: usize,
    },
    /// Could still become a link when more text comes.
    NotYet,
    /// Not a link.
    No,
}

/// A `[label](url)` link starting at `at` (the `[`).
fn link(text: &str, at: usize) -> Link<'_> {
    let rest = &text[at + 1..];
    let Some(close) = rest.find(']') else {
        return Link::NotYet;
    };
    let label = &rest[..close];
    if label.contains('[') {
        return Link::No;
    }
    let after = &rest[close + 1..];
    match after.chars().next() {
        None => Link::NotYet,
        Some('(') => match after.find(')') {
            Some(end) => {
                let url = &after[1..end];
                if url.contains(char::is_whitespace) || url.is_empty() {
                    return Link::No;
                }
                Link::Found {
                    label,
                    url,
                    end: at + 1 + close + 1 + end + 1,
                }
            }
            None if after.contains(char::is_whitespace) => Link::No,
            None => Link::NotYet,
        },
        Some(_) => Link::No,
    }
}

/// How many columns `text` takes on a terminal, not counting this module's escape sequences.
pub(crate) fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        width += char_width(c);
    }
    width
}

/// Columns one character takes: 0 for combining marks and zero-width characters, 2 for wide
/// (East Asian, most emoji), 1 otherwise.
fn char_width(c: char) -> usize {
    let u = c as u32;
    match u {
        0x0300..=0x036F
        | 0x0483..=0x0489
        | 0x0591..=0x05BD
        | 0x0610..=0x061A
        | 0x064B..=0x065F
        | 0x0E31
        | 0x0E34..=0x0E3A
        | 0x1AB0..=0x1AFF
        | 0x1DC0..=0x1DFF
        | 0x200B..=0x200F
        | 0x20D0..=0x20FF
        | 0xFE00..=0xFE0F
        | 0xFE20..=0xFE2F
        | 0xFEFF => 0,
        0x1100..=0x115F
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F
        | 0x1F900..=0x1F9FF
        | 0x20000..=0x3FFFD => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `text` fed in pieces of `step` characters.
    fn render(text: &str, ansi: bool, step: usize) -> String {
        let mut md = Markdown::new(ansi);
        let chars: Vec<char> = text.chars().collect();
        let mut out = String::new();
        for piece in chars.chunks(step) {
            out.push_str(&md.push(&piece.iter().collect::<String>()));
        }
        out.push_str(&md.finish());
        out
    }

    /// The same in every piece size, and the result.
    fn plain(text: &str) -> String {
        let whole = render(text, false, text.len().max(1));
        for step in [1, 2, 3, 7] {
            assert_eq!(render(text, false, step), whole, "step {step}: {text:?}");
        }
        whole
    }

    fn ansi(text: &str) -> String {
        let whole = render(text, true, text.len().max(1));
        for step in [1, 2, 5] {
            assert_eq!(render(text, true, step), whole, "step {step}: {text:?}");
        }
        whole
    }

    #[test]
    fn inline_styles() {
        assert_eq!(plain("a **b** *c* `d` e\n"), "a b c d e\n");
        assert_eq!(
            ansi("a **b** *c* `d`\n"),
            "a \x1b[1mb\x1b[0m \x1b[3mc\x1b[0m \x1b[36md\x1b[0m\n"
        );
        // Not emphasis: a lone star, snake_case, an unclosed opener.
        assert_eq!(plain("2 * 3 = 6\n"), "2 * 3 = 6\n");
        assert_eq!(plain("snake_case_name\n"), "snake_case_name\n");
        assert_eq!(plain("a *b c\n"), "a *b c\n");
        assert_eq!(plain("`open\n"), "`open\n");
        assert_eq!(plain("\\*not\\*\n"), "*not*\n");
        assert_eq!(plain("**bold `code**` x**\n"), "bold code** x\n");
        assert_eq!(
            plain("see [docs](https://x.y/z) and [a]\n"),
            "see docs (https://x.y/z) and [a]\n"
        );
    }

    #[test]
    fn blocks() {
        assert_eq!(plain("# Title\n"), "Title\n═════\n");
        assert_eq!(plain("### Small\n"), "Small\n");
        assert_eq!(
            ansi("## Sub **x**\n"),
            "\x1b[1mSub \x1b[1mx\x1b[0m\x1b[1m\x1b[0m\n"
        );
        assert_eq!(
            plain("- one\n  - two\n* three\n"),
            "• one\n  • two\n• three\n"
        );
        assert_eq!(plain("1. one\n2) two\n"), "1. one\n2) two\n");
        assert_eq!(plain("> said\n"), "│ said\n");
        assert_eq!(plain("---\n"), format!("{}\n", "─".repeat(RULE_WIDTH)));
        assert_eq!(
            plain("```rust\nfn main() {}\n  **x**\n```\nafter\n"),
            "    fn main() {}\n      **x**\nafter\n"
        );
        // A line that only looks like the start of something.
        assert_eq!(plain("-x\n#tag\n12 apples\n"), "-x\n#tag\n12 apples\n");
    }

    #[test]
    fn tables_are_aligned() {
        let out = plain(
            "| name | size | note |\n|:---|---:|:-:|\n| a | 1 | x |\n| longer-name | 200 | `c` |\nafter\n",
        );
        assert_eq!(
            out,
            "name        │ size │ note\n\
             ────────────┼──────┼─────\n\
             a           │    1 │  x\n\
             longer-name │  200 │  c\n\
             after\n"
        );
        // Wide characters count twice.
        let out = plain("|a|b|\n|-|-|\n|漢字|x|\n");
        assert_eq!(out, "a    │ b\n─────┼──\n漢字 │ x\n");
        // Pipes that are no table.
        assert_eq!(plain("| just | text\n"), "| just | text\n");
    }

    #[test]
    fn a_paragraph_streams_before_its_line_ends() {
        let mut md = Markdown::new(false);
        assert_eq!(md.push("Hello wor"), "Hello wor");
        assert_eq!(md.push("ld, **bo"), "ld, ");
        assert_eq!(md.push("ld** and"), "bold and");
        assert_eq!(md.finish(), "\n");
        // A table waits for its end.
        let mut md = Markdown::new(false);
        assert_eq!(md.push("|a|b|\n|-|-|\n|1|2|\n"), "");
        assert_eq!(md.push("done"), "a │ b\n──┼──\n1 │ 2\ndone");
    }

    /// Any text, cut anywhere: no panic, the same result however it is cut, and no style
    /// left open at the end of a line.
    #[test]
    fn any_text_in_any_pieces() {
        let alphabet: Vec<char> = "*_`~#|-:>[]()\\ \n\t1.xé漢🙂".chars().collect();
        let mut seed = 0x2545_f491_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..400 {
            let len = (next() % 40) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            for ansi in [false, true] {
                let whole = render(&text, ansi, text.len().max(1));
                for step in [1, 2, 3] {
                    assert_eq!(render(&text, ansi, step), whole, "{text:?} step {step}");
                }
                for line in whole.lines() {
                    if let Some(last) = line.rfind("\x1b[") {
                        assert!(line[last..].starts_with(RESET), "{text:?}: {line:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn styles_never_outlive_their_line() {
        for text in ["# **open", "*a **b*", "`x", "| a |\n|-|\n| **b |"] {
            let out = render(text, true, 1);
            for line in out.lines() {
                if let Some(last) = line.rfind("\x1b[") {
                    assert!(line[last..].starts_with(RESET), "{text:?}: {line:?}");
                }
            }
        }
    }
}
