//! What the full-text index sees, how a user's query becomes an FTS5 expression, and the
//! highlighted snippet of a result. Pure functions; the store calls them.
//!
//! The index is one FTS5 table with the `unicode61` tokenizer. unicode61 splits words on
//! spaces and punctuation, which is right for English but leaves a run of Chinese (or
//! Japanese, or Korean) characters as one long token, so a two-character word inside a
//! sentence is never found. So before text reaches the index, every run of CJK characters
//! is rewritten as its overlapping **bigrams**, separated by spaces: `记忆数据库` is indexed as
//! `记忆 忆数 数据 据库`. A CJK query is rewritten the same way and searched as a phrase of
//! consecutive bigrams, which is exactly "this substring occurs": `数据` finds `记忆数据库`,
//! and so does `数据库` (the phrase `数据 据库`). Why not the `trigram` tokenizer: it cannot
//! match a query shorter than three characters, and most Chinese words are two.
//!
//! A one-character query is the remaining case. Every character of a run is either the first
//! of some bigram or the last character of the run, so the last character of each run is
//! also written to a separate column, `tails`, and a one-character term is searched as
//! "a bigram starting with it, or a tail equal to it".
//!
//! User text is never parsed as FTS5 syntax: a query is split into words and CJK runs here,
//! and each becomes a double-quoted FTS5 string. Quotes, `AND`, `*`, `:` and parentheses
//! are separators or plain words, never operators.

/// Whether `c` belongs to a script written without spaces between words (Chinese, Japanese
/// kana, Korean Hangul), and is a letter rather than punctuation.
pub fn is_cjk(c: char) -> bool {
    let cp = c as u32;
    let in_block = matches!(cp,
        0x1100..=0x11FF        // Hangul Jamo
        | 0x2E80..=0x2FDF      // CJK radicals, Kangxi radicals
        | 0x3005..=0x3007      // 々 〆 〇
        | 0x3021..=0x3029      // Hangzhou numerals
        | 0x3031..=0x3035      // kana repeat marks
        | 0x3038..=0x303C
        | 0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3100..=0x312F      // Bopomofo
        | 0x3130..=0x318F      // Hangul compatibility Jamo
        | 0x31A0..=0x31BF      // Bopomofo extended
        | 0x31F0..=0x31FF      // Katakana phonetic extensions
        | 0x3400..=0x4DBF      // CJK extension A
        | 0x4E00..=0x9FFF      // CJK unified ideographs
        | 0xA960..=0xA97F      // Hangul Jamo extended A
        | 0xAC00..=0xD7FF      // Hangul syllables, Jamo extended B
        | 0xF900..=0xFAFF      // CJK compatibility ideographs
        | 0xFF66..=0xFF9F      // half-width Katakana
        | 0xFFA0..=0xFFDC      // half-width Hangul
        | 0x1B000..=0x1B16F    // kana supplement and extended
        | 0x20000..=0x3FFFF // CJK extensions B and later, compatibility supplement
    );
    in_block && c.is_alphanumeric()
}

/// A piece of text: a run of CJK characters, or anything else.
enum Piece<'a> {
    Cjk(&'a str),
    Other(&'a str),
}

/// Splits `text` into maximal CJK runs and the text between them.
fn pieces(text: &str) -> impl Iterator<Item = Piece<'_>> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let first = rest.chars().next()?;
        let cjk = is_cjk(first);
        let end = rest
            .char_indices()
            .find(|(_, c)| is_cjk(*c) != cjk)
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let (head, tail) = rest.split_at(end);
        rest = tail;
        Some(if cjk {
            Piece::Cjk(head)
        } else {
            Piece::Other(head)
        })
    })
}

/// The overlapping pairs of characters of a CJK run, space-separated; a single character
/// stands for itself.
fn bigrams(run: &str) -> String {
    let chars: Vec<char> = run.chars().collect();
    if chars.len() == 1 {
        return run.to_string();
    }
    let mut out = String::with_capacity(run.len() * 2 + chars.len());
    for pair in chars.windows(2) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push(pair[0]);
        out.push(pair[1]);
    }
    out
}

/// The index form of `text`; `tails` is appended to.
pub fn index_form(text: &str, tails: &mut String) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    for piece in pieces(text) {
        match piece {
            Piece::Other(s) => out.push_str(s),
            Piece::Cjk(run) => {
                out.push(' ');
                out.push_str(&bigrams(run));
                out.push(' ');
                if run.chars().nth(1).is_some() {
                    if let Some(last) = run.chars().last() {
                        if !tails.is_empty() {
                            tails.push(' ');
                        }
                        tails.push(last);
                    }
                }
            }
        }
    }
    out
}

/// The index token standing for the exact tag `tag`: `tg` and the tag's UTF-8 bytes in hex,
/// so case, spaces and punctuation all count and no tokenizer splits it.
pub fn tag_key(tag: &str) -> String {
    let mut out = String::with_capacity(2 + tag.len() * 2);
    out.push_str("tg");
    for b in tag.bytes() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// One searchable unit of a query: a word (letters and digits), or a CJK run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A run of letters and digits, as typed.
    Word(String),
    /// A run of CJK characters, which has no spaces between words; it is searched as its
    /// overlapping pairs.
    Cjk(Vec<char>),
}

/// The words and CJK runs of a query, in order. Everything else (spaces, punctuation, quotes,
/// operators, emoji) only separates them.
pub fn terms(query: &str) -> Vec<Term> {
    let mut out = Vec::new();
    for piece in pieces(query) {
        match piece {
            Piece::Cjk(run) => out.push(Term::Cjk(run.chars().collect())),
            Piece::Other(s) => {
                for word in s.split(|c: char| !c.is_alphanumeric()) {
                    if !word.is_empty() {
                        out.push(Term::Word(word.to_string()));
                    }
                }
            }
        }
    }
    out
}

/// An FTS5 string: `s` in double quotes, inner quotes doubled. Whatever `s` holds, FTS5 reads
/// it as text to tokenize, never as syntax.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The FTS5 expression matching one term on its own.
fn term_expr(term: &Term) -> String {
    match term {
        Term::Word(w) => quoted(w),
        Term::Cjk(chars) if chars.len() == 1 => {
            let c = quoted(&chars[0].to_string());
            format!("({c}* OR tails : {c})")
        }
        Term::Cjk(chars) => quoted(&bigrams(&chars.iter().collect::<String>())),
    }
}

/// The FTS5 queries for a search, strictest first.
#[derive(Debug, PartialEq, Eq)]
pub struct Tiers {
    /// Every term in order as one phrase (only with two or more terms), then every term
    /// anywhere.
    pub strict: Vec<String>,
    /// The loosest tier, one expression per word or CJK bigram, to be joined with `OR`:
    /// any of them. Empty when it would match the same rows as the last strict tier. The
    /// caller leaves out the expressions that match very many memories before joining them:
    /// scoring every memory that has "the" costs much and says little, and the memories
    /// that also have the rarer words were found by the strict tiers.
    pub any: Vec<String>,
}

/// The tiers of a search for `terms`.
pub fn tiers(terms: &[Term]) -> Tiers {
    let mut strict = Vec::new();
    if terms.is_empty() {
        return Tiers {
            strict,
            any: Vec::new(),
        };
    }
    if terms.len() > 1 {
        let parts: Vec<String> = terms
            .iter()
            .map(|t| match t {
                Term::Cjk(chars) if chars.len() == 1 => {
                    format!("{}*", quoted(&chars[0].to_string()))
                }
                other => term_expr(other),
            })
            .collect();
        strict.push(parts.join(" + "));
    }
    let all: Vec<String> = terms.iter().map(term_expr).collect();
    strict.push(all.join(" AND "));
    let mut any: Vec<String> = Vec::new();
    for t in terms {
        match t {
            Term::Cjk(chars) if chars.len() > 2 => {
                for pair in chars.windows(2) {
                    any.push(quoted(&pair.iter().collect::<String>()));
                }
            }
            other => any.push(term_expr(other)),
        }
    }
    let mut seen = std::collections::HashSet::new();
    any.retain(|expr| seen.insert(expr.clone()));
    if any.len() < 2 {
        any.clear();
    }
    Tiers { strict, any }
}

/// Marks matches in a snippet.
const MARK: &str = "**";
/// Characters of a snippet around its matches.
pub const SNIPPET_CHARS: usize = 200;
/// Characters shown before the first match of a snippet.
const LEAD_CHARS: usize = 50;

/// Byte ranges of `text` that match `terms`: whole words compared case-insensitively, and
/// CJK runs as substrings (or, when the whole run is absent, its bigrams).
pub fn match_spans(text: &str, terms: &[Term]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let words: Vec<String> = terms
        .iter()
        .filter_map(|t| match t {
            Term::Word(w) => Some(w.to_lowercase()),
            Term::Cjk(_) => None,
        })
        .collect();
    if !words.is_empty() {
        let mut start: Option<usize> = None;
        let push_word = |s: usize, e: usize, spans: &mut Vec<(usize, usize)>| {
            let w = text[s..e].to_lowercase();
            if words.contains(&w) {
                spans.push((s, e));
            }
        };
        for (i, c) in text.char_indices() {
            let wordy = c.is_alphanumeric() && !is_cjk(c);
            match (wordy, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    push_word(s, i, &mut spans);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            push_word(s, text.len(), &mut spans);
        }
    }
    for t in terms {
        let Term::Cjk(chars) = t else { continue };
        let run: String = chars.iter().collect();
        let found = find_all(text, &run);
        if !found.is_empty() || chars.len() < 3 {
            spans.extend(found);
            continue;
        }
        for pair in chars.windows(2) {
            spans.extend(find_all(text, &pair.iter().collect::<String>()));
        }
    }
    spans.sort();
    // Merge overlaps so marks never nest.
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

fn find_all(text: &str, needle: &str) -> Vec<(usize, usize)> {
    if needle.is_empty() {
        return Vec::new();
    }
    text.match_indices(needle)
        .map(|(i, m)| (i, i + m.len()))
        .collect()
}

/// A one-line excerpt of `text` of about [`SNIPPET_CHARS`] characters around the densest
/// group of matches, each match between `**`. Without matches, the start of the text.
pub fn snippet(text: &str, terms: &[Term]) -> String {
    snippet_of(text, &match_spans(text, terms))
}

/// Like [`snippet`], marking where `needle` occurs as typed (for queries of symbols only).
pub fn snippet_literal(text: &str, needle: &str) -> String {
    snippet_of(text, &find_all(text, needle))
}

/// The excerpt around the densest group of `spans` (sorted, not overlapping).
fn snippet_of(text: &str, spans: &[(usize, usize)]) -> String {
    // Char index of every byte offset we need, via one pass.
    let char_starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
    let total = char_starts.len();
    let to_char = |byte: usize| char_starts.partition_point(|&b| b < byte);
    let to_byte = |ch: usize| char_starts.get(ch).copied().unwrap_or(text.len());

    // The match that starts the window holding the most matches.
    let mut best = (0usize, 0usize); // (count, index into spans)
    for (i, &(s, _)) in spans.iter().enumerate() {
        let limit = to_char(s) + SNIPPET_CHARS - LEAD_CHARS;
        let count = spans[i..]
            .iter()
            .take_while(|(e_s, _)| to_char(*e_s) < limit)
            .count();
        if count > best.0 {
            best = (count, i);
        }
    }
    let start_char = match spans.get(best.1) {
        Some(&(s, _)) if best.0 > 0 => to_char(s).saturating_sub(LEAD_CHARS),
        _ => 0,
    };
    let end_char = (start_char + SNIPPET_CHARS).min(total);
    let (from, to) = (to_byte(start_char), to_byte(end_char));

    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    let mut at = from;
    for &(s, e) in spans.iter().filter(|(s, e)| *s >= from && *e <= to) {
        out.push_str(&text[at..s]);
        out.push_str(MARK);
        out.push_str(&text[s..e]);
        out.push_str(MARK);
        at = e;
    }
    out.push_str(&text[at..to]);
    if to < text.len() {
        out.push('…');
    }
    one_line(&out)
}

/// `text` with every run of whitespace (line breaks included) as one space, trimmed.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max` characters of `text` on one line, with `…` when cut.
pub fn preview(text: &str, max: usize) -> String {
    let line = one_line(text);
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", line[..cut].trim_end()),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the index sees of one column: the text with every CJK run written as bigrams,
    /// and the last character of each run of two or more (for one-character queries).
    #[derive(Debug, Default, PartialEq, Eq)]
    struct IndexForm {
        text: String,
        tails: String,
    }

    fn form(text: &str) -> IndexForm {
        let mut tails = String::new();
        let text = index_form(text, &mut tails);
        IndexForm { text, tails }
    }

    #[test]
    fn cjk_runs_are_indexed_as_bigrams_and_a_tail() {
        let f = form("我们用SQLite做记忆数据库。好");
        assert_eq!(f.text, " 我们 们用 SQLite 做记 记忆 忆数 数据 据库 。 好 ");
        assert_eq!(f.tails, "用 库");
        let f = form("plain English, café");
        assert_eq!(f.text, "plain English, café");
        assert_eq!(f.tails, "");
        // Kana and Hangul are runs too; CJK punctuation is not.
        assert!(is_cjk('の') && is_cjk('カ') && is_cjk('ー') && is_cjk('한'));
        assert!(!is_cjk('。') && !is_cjk('「') && !is_cjk('a') && !is_cjk('，'));
    }

    #[test]
    fn tag_keys_are_exact() {
        assert_eq!(tag_key("Ab"), "tg4162");
        assert_ne!(tag_key("ab"), tag_key("Ab"));
        assert_eq!(tag_key("项目"), "tge9a1b9e79bae");
    }

    #[test]
    fn queries_become_quoted_strings_only() {
        let t = terms(r#"foo AND "bar" (baz*) col:qux NEAR(a b) -x ^y"#);
        let words: Vec<&str> = t
            .iter()
            .map(|t| match t {
                Term::Word(w) => w.as_str(),
                Term::Cjk(_) => "?",
            })
            .collect();
        assert_eq!(
            words,
            ["foo", "AND", "bar", "baz", "col", "qux", "NEAR", "a", "b", "x", "y"]
        );
        let tiers = tiers(&t);
        for tier in tiers.strict.iter().chain([&tiers.any.join(" OR ")]) {
            // Outside quoted strings there is nothing but our own operators.
            let mut outside = String::new();
            let mut in_quote = false;
            for c in tier.chars() {
                if c == '"' {
                    in_quote = !in_quote;
                } else if !in_quote {
                    outside.push(c);
                }
            }
            let ops: String = outside
                .replace(" AND ", "")
                .replace(" OR ", "")
                .replace(" + ", "");
            assert!(ops.trim().is_empty(), "{tier}: {ops:?}");
        }
        assert!(terms("*:()\"'").is_empty());
    }

    #[test]
    fn tiers_strictest_first() {
        let t = |q: &str| {
            let t = tiers(&terms(q));
            let mut all = t.strict;
            if !t.any.is_empty() {
                all.push(t.any.join(" OR "));
            }
            all
        };
        assert_eq!(
            t("quick brown"),
            [
                r#""quick" + "brown""#,
                r#""quick" AND "brown""#,
                r#""quick" OR "brown""#
            ]
        );
        assert_eq!(t("数据"), [r#""数据""#]);
        assert_eq!(t("the the"), [r#""the" + "the""#, r#""the" AND "the""#]);
        assert_eq!(t("数据库"), [r#""数据 据库""#, r#""数据" OR "据库""#]);
        assert_eq!(t("库"), [r#"("库"* OR tails : "库")"#]);
        assert_eq!(
            t("用 rust"),
            [
                r#""用"* + "rust""#,
                r#"("用"* OR tails : "用") AND "rust""#,
                r#"("用"* OR tails : "用") OR "rust""#
            ]
        );
    }

    #[test]
    fn snippets_mark_words_and_cjk_substrings() {
        let text = "We chose SQLite.\nThe SQLite file lives in .toolbox; sqlites are not words.";
        assert_eq!(
            snippet(text, &terms("sqlite")),
            "We chose **SQLite**. The **SQLite** file lives in .toolbox; sqlites are not words."
        );
        let zh = "我们决定用记忆数据库保存笔记。";
        assert_eq!(
            snippet(zh, &terms("数据")),
            "我们决定用记忆**数据**库保存笔记。"
        );
        // A long run not found whole: its bigrams are marked.
        assert_eq!(
            snippet(zh, &terms("数据笔记")),
            "我们决定用记忆**数据**库保存**笔记**。"
        );
        // The window moves to the matches, with … where it cuts.
        let long = format!("{}needle{}", "x ".repeat(300), " y".repeat(300));
        let s = snippet(&long, &terms("needle"));
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("**needle**"), "{s}");
        assert!(s.chars().count() <= SNIPPET_CHARS + 6, "{s}");
        // No match in the text (it was in the title): the start.
        assert_eq!(snippet("abc def", &terms("zzz")), "abc def");
    }

    #[test]
    fn previews_cut_on_characters() {
        assert_eq!(preview("数据库\n很好", 4), "数据库…");
        assert_eq!(preview("short", 10), "short");
    }
}
