//! Turning a response body into text a model can read.

use dom_smoothie::{Config, Readability, TextMode};

/// Below this many characters of text an extracted article is treated as no article
/// (the same threshold Readability's `isProbablyReaderable` uses).
const MIN_ARTICLE_CHARS: usize = 140;

/// What `web_fetch` returns for a page: `format` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Text,
    Html,
}

impl Format {
    pub fn parse(tool: &str, value: Option<&str>) -> anyhow::Result<Self> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("markdown") | Some("md") => Ok(Format::Markdown),
            Some("text") | Some("txt") | Some("plain") => Ok(Format::Text),
            Some("html") => Ok(Format::Html),
            Some(_) => anyhow::bail!(
                "{tool}: argument `format` must be \"markdown\", \"text\" or \"html\", got {:?}",
                value.unwrap_or_default()
            ),
        }
    }
}

/// A converted HTML page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub title: Option<String>,
    pub body: String,
    /// Set when the main-content extraction failed and the whole page was converted.
    pub whole_page: bool,
}

/// Converts HTML: the article found by dom_smoothie (Mozilla Readability's algorithm), as
/// Markdown through htmd or as text; when no article is found, the whole page through htmd.
/// CPU work: call it from the blocking pool.
pub fn html_page(html: &str, url: &str, format: Format) -> Page {
    if format == Format::Html {
        return Page {
            // The raw page is the content; a full parse just for the title would cost more
            // than the rest of this format's work.
            title: quick_title(html),
            body: html.to_string(),
            whole_page: true,
        };
    }
    let cfg = Config {
        text_mode: if format == Format::Text {
            TextMode::Formatted
        } else {
            TextMode::Raw
        },
        ..Config::default()
    };
    // `Readability::new` only fails on a relative document URL; then read without one.
    let readability = Readability::new(html, Some(url), Some(cfg.clone()))
        .or_else(|_| Readability::new(html, None, Some(cfg)));
    if let Ok(mut readability) = readability {
        if let Ok(article) = readability.parse() {
            let body = match format {
                Format::Text => article.text_content.to_string(),
                _ => markdown(&article.content),
            };
            // Readability always returns its best attempt; an "article" shorter than this
            // means it found none (a link list, a search form), and the whole page says more.
            if article.text_content.trim().chars().count() >= MIN_ARTICLE_CHARS
                && !body.trim().is_empty()
            {
                return Page {
                    title: Some(article.title).filter(|t| !t.trim().is_empty()),
                    body: tidy(&body),
                    whole_page: false,
                };
            }
        }
    }
    Page {
        title: title_of(html, url),
        body: tidy(&markdown(html)),
        whole_page: true,
    }
}

/// htmd with the parts of a page that are never content left out.
fn markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "head", "svg", "iframe", "form",
        ])
        .build();
    // htmd fails only on an I/O error of its in-memory reader; fall back to the raw text.
    converter.convert(html).unwrap_or_else(|_| html.to_string())
}

/// The page title from dom_smoothie's metadata (which also reads og:title and JSON-LD).
fn title_of(html: &str, url: &str) -> Option<String> {
    let readability = Readability::new(html, Some(url), None)
        .or_else(|_| Readability::new(html, None, None))
        .ok()?;
    let title = readability.get_article_title().to_string();
    let title = title.trim();
    (!title.is_empty()).then(|| title.to_string())
}

/// The text of the first `<title>` element, found by scanning rather than parsing.
fn quick_title(html: &str) -> Option<String> {
    // The title is in the head; 64 KiB is plenty. ASCII lower-casing keeps byte offsets.
    let mut cut = html.len().min(64 * 1024);
    while !html.is_char_boundary(cut) {
        cut -= 1;
    }
    let lower = html[..cut].to_ascii_lowercase();
    let open = lower.find("<title")?;
    let start = open + lower[open..].find('>')? + 1;
    let end = start + lower[start..].find("</title")?;
    let title = html[start..end]
        .replace("&amp;", "&")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'");
    let title = title.split_whitespace().collect::<Vec<_>>().join(" ");
    (!title.is_empty()).then_some(title)
}

/// Collapses runs of blank lines: extraction leaves many, and they cost the model tokens.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.trim().is_empty() {
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
    out.trim().to_string()
}

/// Decodes a text body. UTF-8 (the default and by far the most common) and the single-byte
/// Latin encodings are decoded exactly; anything else is read as UTF-8 with replacement
/// characters, which keeps ASCII intact.
pub fn decode_text(bytes: &[u8], charset: Option<&str>) -> String {
    let charset = charset.map(|c| c.trim().trim_matches('"').to_ascii_lowercase());
    match charset.as_deref() {
        Some("iso-8859-1" | "latin1" | "latin-1" | "iso8859-1" | "windows-1252" | "cp1252") => {
            bytes.iter().map(|b| char::from(*b)).collect()
        }
        _ => {
            // A BOM is not content.
            let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            String::from_utf8_lossy(bytes).into_owned()
        }
    }
}

/// Re-indents valid JSON two spaces per level, keeping the document's key order and its
/// numbers exactly as written (a round trip through `serde_json::Value` would sort keys and
/// turn big integers into floats).
pub fn pretty_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', depth * 2));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                let close = if c == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    // An empty container stays `{}` / `[]`.
                    chars.next();
                    out.push(c);
                    out.push(close);
                } else {
                    depth += 1;
                    out.push(c);
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// Whether bytes of an unlabelled response look like text rather than binary data.
pub fn looks_like_text(bytes: &[u8]) -> bool {
    let sample = &bytes[..bytes.len().min(4096)];
    if sample.contains(&0) {
        return false;
    }
    match std::str::from_utf8(sample) {
        Ok(_) => true,
        // A multi-byte character cut by the sample's end is still text.
        Err(e) => e.error_len().is_none(),
    }
}

/// Whether an unlabelled text body is HTML.
pub fn looks_like_html(text: &str) -> bool {
    let head: String = text
        .trim_start()
        .chars()
        .take(256)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html") || head.contains("<head")
}

/// The first `max` characters of `text` (cut on a character boundary) and, when it was cut,
/// how many characters there were.
pub fn cut_chars(text: &str, max: usize) -> (&str, Option<usize>) {
    match text.char_indices().nth(max) {
        None => (text, None),
        Some((byte, _)) => (&text[..byte], Some(text.chars().count())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARTICLE: &str = r#"<!doctype html><html><head><title>The Title</title>
        <style>body{color:red}</style><script>var tracking = 1;</script></head>
        <body><nav><a href="/">Home</a> <a href="/about">About</a></nav>
        <article><h1>The Title</h1>
        <p>First paragraph of the article with enough words to look like real content. It
        talks about Rust, readability and the conversion of HTML into Markdown for models.</p>
        <p>Second paragraph, with a <a href="/link">relative link</a> and <b>bold</b> text. More
        words follow here so that the extraction heuristics are satisfied by the length.</p>
        <p>Third paragraph. Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do
        eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim.</p>
        </article><footer>Copyright footer</footer></body></html>"#;

    #[test]
    fn article_becomes_markdown_without_chrome() {
        let page = html_page(ARTICLE, "https://example.com/a/b.html", Format::Markdown);
        assert_eq!(page.title.as_deref(), Some("The Title"));
        assert!(!page.whole_page);
        assert!(page.body.contains("**bold**"), "{}", page.body);
        assert!(
            page.body
                .contains("[relative link](https://example.com/link)"),
            "{}",
            page.body
        );
        assert!(!page.body.contains("tracking"), "{}", page.body);
        assert!(!page.body.contains("Copyright footer"), "{}", page.body);
    }

    #[test]
    fn text_format_has_no_markup() {
        let page = html_page(ARTICLE, "https://example.com/", Format::Text);
        assert!(page.body.contains("bold text"), "{}", page.body);
        assert!(!page.body.contains("**"), "{}", page.body);
        assert!(!page.body.contains("<p>"), "{}", page.body);
    }

    #[test]
    fn titles_by_scanning() {
        assert_eq!(
            quick_title("<HTML><head><Title lang=en>\n A &amp; B </TITLE>").as_deref(),
            Some("A & B")
        );
        assert_eq!(quick_title("<p>no title</p>"), None);
        assert_eq!(quick_title("<title></title>"), None);
    }

    #[test]
    fn tiny_pages_fall_back_to_the_whole_page() {
        let html = "<html><head><title>T</title></head><body><ul><li>one</li><li>two</li></ul></body></html>";
        let page = html_page(html, "https://example.com/", Format::Markdown);
        assert!(page.whole_page);
        assert_eq!(page.title.as_deref(), Some("T"));
        assert!(
            page.body.contains("one") && page.body.contains("two"),
            "{}",
            page.body
        );
    }

    #[test]
    fn json_is_reindented_in_order() {
        let text = r#" {"b":1,"a":[1, 2,{}],"s":"x,{\"y\"}: z","n":123456789012345678901234567890,"e":[ ]}"#;
        assert_eq!(
            pretty_json(text),
            "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2,\n    {}\n  ],\n  \"s\": \"x,{\\\"y\\\"}: z\",\n  \"n\": 123456789012345678901234567890,\n  \"e\": []\n}"
        );
    }

    #[test]
    fn decoding_and_sniffing() {
        assert_eq!(decode_text(b"caf\xe9", Some("ISO-8859-1")), "café");
        assert_eq!(decode_text("café".as_bytes(), None), "café");
        assert_eq!(decode_text(b"\xEF\xBB\xBFhi", Some("utf-8")), "hi");
        assert!(looks_like_text("héllo".as_bytes()));
        assert!(!looks_like_text(b"\x89PNG\r\n\x1a\n\0\0"));
        assert!(looks_like_html("  <!DOCTYPE html><html>"));
        assert!(!looks_like_html("plain words"));
    }

    #[test]
    fn cutting_respects_characters() {
        assert_eq!(cut_chars("héllo", 2), ("hé", Some(5)));
        assert_eq!(cut_chars("hé", 2), ("hé", None));
        assert_eq!(cut_chars("日本語", 1), ("日", Some(3)));
        assert!(Format::parse("t", Some("pdf")).is_err());
        assert_eq!(Format::parse("t", None).unwrap(), Format::Markdown);
    }
}
