//! Turning a response body into text a model can read.

use std::rc::Rc;

use dom_smoothie::{Config, Readability, TextMode};
use htmd::element_handler::{HandlerResult, Handlers};
use htmd::Element;
use markup5ever_rcdom::{Node, NodeData};

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

/// Tags whose content is never page text.
const SKIPPED_TAGS: [&str; 8] = [
    "script", "style", "noscript", "template", "head", "svg", "iframe", "form",
];

/// HTML → Markdown through htmd, keeping the page's text as written.
///
/// htmd escapes every character Markdown could read as syntax (`read\_csv`, `\*args`,
/// `1\.`, `\<div>`): right for a Markdown renderer, wrong for a model that reads the text
/// and copies names, paths and URLs out of it. So before converting, each such character
/// in text outside code is swapped for a private-use placeholder htmd leaves alone, and
/// swapped back afterwards ([`Placeholders`]). Headings, lists, links, emphasis, tables and
/// code blocks are still Markdown, made by htmd from the elements; the text inside them is
/// the page's own. Code was never escaped and is left as it is.
fn markdown(html: &str) -> String {
    // Parsing needs no handlers; the converter below needs the placeholders.
    let Ok(tree) = htmd::HtmlToMarkdown::new().html_to_tree(html) else {
        // htmd fails only on an I/O error of its in-memory reader; fall back to the raw text.
        return html.to_string();
    };
    let placeholders = Placeholders::unused_in(&tree);
    if let Some(p) = placeholders {
        p.hide_specials(&tree);
    }
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED_TAGS.to_vec())
        .add_handler(
            vec!["pre"],
            move |handlers: &dyn Handlers, element: Element| {
                preformatted(handlers, element, placeholders)
            },
        )
        .build();
    let out = converter.tree_to_markdown(&tree);
    match placeholders {
        Some(p) => p.restore(&out),
        None => out,
    }
}

/// A `<pre>` holding a `<code>` is htmd's (a fenced block); any other `<pre>` (plain
/// preformatted text, or highlighted code made of spans) becomes a fenced block too, where
/// htmd would leave it unfenced and escape a leading backtick.
fn preformatted(
    handlers: &dyn Handlers,
    element: Element,
    placeholders: Option<Placeholders>,
) -> Option<HandlerResult> {
    if has_descendant(element.node, "code") {
        return handlers.fallback(element);
    }
    let content = handlers.walk_children(element.node).content;
    let content = match placeholders {
        Some(p) => p.restore(&content),
        None => content,
    };
    let content = content.trim_matches('\n');
    if content.trim().is_empty() {
        return Some(HandlerResult::from(String::new()));
    }
    // Longer than any run of backticks inside, so the content cannot close the fence.
    let longest = content.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    Some(HandlerResult::from(format!(
        "\n\n{fence}\n{content}\n{fence}\n\n"
    )))
}

fn has_descendant(node: &Rc<Node>, tag: &str) -> bool {
    let mut stack: Vec<Rc<Node>> = node.children.borrow().clone();
    while let Some(node) = stack.pop() {
        if element_name(&node) == Some(tag) {
            return true;
        }
        stack.extend(node.children.borrow().iter().cloned());
    }
    false
}

fn element_name(node: &Node) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } => Some(&name.local),
        _ => None,
    }
}

/// The characters htmd escapes in text (anywhere, or at the start of a line).
const SPECIALS: [char; 14] = [
    '\\', '*', '_', '`', '[', ']', '<', '>', '=', '~', '-', '+', '#', '.',
];

/// One private-use character per [`SPECIALS`] entry, from a block of code points the page
/// itself does not use (icon fonts do put private-use characters in text), so swapping
/// back can only ever produce the characters that were swapped out.
#[derive(Debug, Clone, Copy)]
struct Placeholders {
    first: u32,
}

impl Placeholders {
    /// The first run of unused private-use code points, or `None` when a page uses so
    /// many that no run is free (then the text keeps htmd's escapes).
    fn unused_in(tree: &Rc<Node>) -> Option<Self> {
        const AREA: std::ops::RangeInclusive<u32> = 0xE000..=0xF8FF;
        let mut used = vec![false; (*AREA.end() - *AREA.start() + 1) as usize];
        let mut mark = |text: &str| {
            for c in text.chars() {
                if AREA.contains(&(c as u32)) {
                    used[(c as u32 - AREA.start()) as usize] = true;
                }
            }
        };
        // Attribute values reach the output too (link targets, image descriptions).
        walk(tree, |node| match &node.data {
            NodeData::Text { contents } => mark(&contents.borrow()),
            NodeData::Element { attrs, .. } => {
                for attr in attrs.borrow().iter() {
                    mark(&attr.value);
                }
            }
            _ => {}
        });
        let n = SPECIALS.len();
        (0..=used.len() - n)
            .step_by(n)
            .find(|&i| used[i..i + n].iter().all(|u| !u))
            .map(|i| Placeholders {
                first: AREA.start() + i as u32,
            })
    }

    fn hide(&self, c: char) -> char {
        match SPECIALS.iter().position(|s| *s == c) {
            Some(i) => char::from_u32(self.first + i as u32).unwrap_or(c),
            None => c,
        }
    }

    fn restore(&self, text: &str) -> String {
        let range = self.first..self.first + SPECIALS.len() as u32;
        text.chars()
            .map(|c| {
                if range.contains(&(c as u32)) {
                    SPECIALS[(c as u32 - self.first) as usize]
                } else {
                    c
                }
            })
            .collect()
    }

    /// Swaps the specials in every text node outside `<code>`. In link text, brackets are
    /// swapped only when they pair up: an unpaired `]` would end the link early, and there
    /// htmd's escape is needed.
    fn hide_specials(&self, tree: &Rc<Node>) {
        // (node, inside <code>, keep htmd's escapes of brackets)
        let mut stack = vec![(tree.clone(), false, false)];
        while let Some((node, in_code, keep_brackets)) = stack.pop() {
            match &node.data {
                NodeData::Text { contents } if !in_code => {
                    let swapped: String = contents
                        .borrow()
                        .chars()
                        .map(|c| match c {
                            '[' | ']' if keep_brackets => c,
                            c => self.hide(c),
                        })
                        .collect();
                    contents.replace(swapped.into());
                }
                _ => {}
            }
            let name = element_name(&node);
            let in_code = in_code || name == Some("code");
            let keep_brackets = keep_brackets || (name == Some("a") && !brackets_pair_up(&node));
            for child in node.children.borrow().iter() {
                stack.push((child.clone(), in_code, keep_brackets));
            }
        }
    }
}

/// Calls `f` on every node of the tree, in document order.
fn walk(tree: &Rc<Node>, mut f: impl FnMut(&Node)) {
    let mut stack = vec![tree.clone()];
    while let Some(node) = stack.pop() {
        f(&node);
        stack.extend(node.children.borrow().iter().rev().cloned());
    }
}

/// Whether every `]` in the element's text closes an earlier `[`, and none stays open.
fn brackets_pair_up(node: &Rc<Node>) -> bool {
    let mut text = String::new();
    walk(node, |n| {
        if let NodeData::Text { contents } = &n.data {
            text.push_str(&contents.borrow());
        }
    });
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' if depth == 0 => return false,
            ']' => depth -= 1,
            _ => {}
        }
    }
    depth == 0
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

/// Collapses runs of blank lines and drops trailing spaces: extraction leaves many, and they
/// cost the model tokens. Fenced code blocks are kept exactly as they are.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    let mut open_fence: Option<&str> = None;
    for line in text.lines() {
        let start = line.trim_start();
        if let Some(fence) = open_fence {
            out.push_str(line);
            out.push('\n');
            if closes_fence(start.trim_end(), fence) {
                open_fence = None;
            }
            continue;
        }
        open_fence = fence_of(start);
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

/// The fence a line opens: its leading run of three or more backticks or tildes.
fn fence_of(line: &str) -> Option<&str> {
    let marker = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = line.len() - line.trim_start_matches(marker).len();
    (run >= 3).then(|| &line[..run])
}

/// Whether a line closes `fence`: only the fence's character, at least as many times.
fn closes_fence(line: &str, fence: &str) -> bool {
    let marker = fence.chars().next().unwrap_or('`');
    line.len() >= fence.len() && line.chars().all(|c| c == marker)
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

    fn md(body: &str) -> String {
        let html = format!("<html><head><title>T</title></head><body>{body}</body></html>");
        html_page(&html, "https://example.com/", Format::Markdown).body
    }

    #[test]
    fn prose_keeps_its_characters() {
        let prose = "Call pandas.read_csv(path) in __init__ with *args and **kwargs; a*b is \
                     2*3. See my_file_name.txt, C:\\tmp\\x_y and \
                     https://example.com/a_b/c_d?x=1&y=[2] or WEBMARKER_MAIN, `tick` and <div>.";
        let body = md(&format!(
            "<p>{}</p><p>1. Not a list, 2024. A year</p><p>- not an item + # = ~ &gt; x</p>\
             <p># not a heading</p>",
            prose
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        ));
        for line in [
            prose,
            "1. Not a list, 2024. A year",
            "- not an item + # = ~ > x",
            "# not a heading",
        ] {
            assert!(body.lines().any(|l| l == line), "{line:?} in:\n{body}");
        }
        assert!(!body.contains('\u{E000}'), "{body}");
    }

    #[test]
    fn structure_stays_markdown_around_the_text() {
        let body = md("<h2>Using read_csv</h2>\
            <ul><li>item snake_case_name and *star*</li><li>__dunder__</li></ul>\
            <ol><li>first a_b</li></ol>\
            <table><tr><th>col_a</th><th>b*c</th></tr><tr><td>x_y.csv</td><td>[1]</td></tr></table>\
            <p>A <a href=\"https://example.com/x_y\">link_text [1]</a>, <em>emph_word</em>, \
            <strong>bold_one</strong> and <a href=\"/odd\">odd] one</a>.</p>\
            <blockquote><p>quoted *x*</p></blockquote>");
        for want in [
            "## Using read_csv",
            "*   item snake_case_name and *star*",
            "*   __dunder__",
            "1.  first a_b",
            "| col_a   | b*c |",
            "| x_y.csv | [1] |",
            "A [link_text [1]](https://example.com/x_y), *emph_word*, **bold_one** and \
             [odd\\] one](https://example.com/odd).",
            "> quoted *x*",
        ] {
            assert!(body.lines().any(|l| l == want), "{want:?} in:\n{body}");
        }
    }

    #[test]
    fn code_is_verbatim() {
        let body = md(
            "<pre><code class=\"language-python\">def __init__(self, *args):\n    \
            x = a*b  # [1] \n\n\n    return `x`\n</code></pre>\
            <pre>```\nraw pre_text *x*\n```</pre>\
            <pre><span class=\"k\">def</span> <span>f_x</span>():\n    pass</pre>\
            <p>inline <code>a_b*c</code> and <code>x`y</code></p>",
        );
        let want =
            "```python\ndef __init__(self, *args):\n    x = a*b  # [1] \n\n\n    return `x`\n```";
        assert!(body.contains(want), "{body}");
        // A <pre> without <code> is fenced too, with a fence longer than any inside.
        assert!(
            body.contains("````\n```\nraw pre_text *x*\n```\n````"),
            "{body}"
        );
        assert!(body.contains("```\ndef f_x():\n    pass\n```"), "{body}");
        assert!(body.contains("inline `a_b*c` and ``x`y``"), "{body}");
    }

    #[test]
    fn private_use_characters_of_the_page_survive() {
        // Icon fonts put private-use characters in text; the placeholders avoid them.
        let page: String = (0xE000u32..0xE020).filter_map(char::from_u32).collect();
        let body = md(&format!("<p>{page} a_b</p>"));
        assert_eq!(body, format!("{page} a_b"));
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
