//! `web_fetch`: one URL, read for a model.

use anyhow::{anyhow, bail, Result};
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;
use url::Url;

use crate::convert::{self, Format};
use crate::http::{describe_error, read_capped, Clients};

pub const NAME: &str = "web_fetch";
const DEFAULT_MAX_CHARS: u64 = 40_000;
const MAX_MAX_CHARS: u64 = 2_000_000;
const URL: Arg = Arg::string("url").required();
/// Read leniently by [`Format::parse`] (`md`, `txt`, any case); the schema lists the three.
const FORMAT: Arg = Arg::choice("format", &["markdown", "text", "html"]);
const MAX_CHARS: Arg = Arg::integer("max_chars", 1, Some(MAX_MAX_CHARS)).default(DEFAULT_MAX_CHARS);
/// Sent so servers that negotiate pick something we can read.
const ACCEPT: &str = "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.9,\
                      application/pdf;q=0.8,*/*;q=0.5";

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Fetch one web page (http or https) and return its main content as Markdown (default), \
         plain text or raw HTML, with the page title and final URL first. JSON is \
         pretty-printed, plain text is passed through, PDFs are converted to text when the pdf \
         provider is built in; other binary content is refused. Private, loopback, link-local \
         and cloud-metadata addresses are refused. Long pages are cut at max_chars.",
        object(&[
            URL.doc("The http:// or https:// URL to fetch."),
            FORMAT.doc(
                "markdown (default): the main content as Markdown; text: plain text; html: the \
                 raw HTML.",
            ),
            MAX_CHARS.doc(format!(
                "Return at most this many characters of content (default {DEFAULT_MAX_CHARS})."
            )),
        ]),
    )
    .toolsets(&["web"])
    // Read-only, but it talks to the open web: MCP clients should know.
    .open_world(true)
}

pub async fn run(clients: Clients, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let raw_url = URL.str(&args)?.trim();
    let format = Format::parse(NAME, FORMAT.opt_nonempty_str(&args)?)?;
    let max_chars = MAX_CHARS.u64(&args)? as usize;
    args.finish()?;
    let url = parse_url(raw_url)?;
    let config = clients.config.clone();

    config
        .policy
        .check_url(&url)
        .map_err(|refused| anyhow!("{NAME}: {refused}"))?;

    let request = clients
        .fetch
        .get(url.clone())
        .header(reqwest::header::ACCEPT, ACCEPT)
        .send();
    let mut response = tokio::select! {
        r = request => r.map_err(|e| anyhow!("{NAME}: {}", describe_error(&e, &config)))?,
        _ = ctx.cancel.cancelled() => bail!("{NAME}: cancelled"),
    };
    let final_url = response.url().to_string();
    let status = response.status();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (mime, charset) = split_content_type(content_type.as_deref());

    // Refuse binary content before downloading it.
    if status.is_success() && !mime.is_empty() && !readable_mime(&mime) {
        bail!(
            "{NAME}: {final_url} is {mime}, which web_fetch cannot read{}",
            pdf_hint(&mime)
        );
    }

    let cap = config.max_response_bytes;
    let body = read_capped(&mut response, cap, &ctx.cancel)
        .await
        .map_err(|e| {
            anyhow!(
                "{NAME}: reading the response from {final_url} failed: {}",
                describe_error(&e, &config)
            )
        })?;
    if ctx.cancel.is_cancelled() {
        bail!("{NAME}: cancelled");
    }

    if status.is_redirection() {
        // reqwest hands back a redirect it will not follow: one to a scheme other than
        // http(s), or one without a usable Location.
        let Some(to) = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
        else {
            bail!("{NAME}: {final_url} answered HTTP {status} without a usable Location header");
        };
        let scheme = to.split_once(':').map(|(s, _)| s).unwrap_or("");
        bail!(
            "{NAME}: {final_url} answered HTTP {status}, a redirect to {to}, which web_fetch does not follow: the scheme {scheme:?} is not allowed (only http and https)"
        );
    }
    if !status.is_success() {
        let text = convert::decode_text(&body.bytes, charset.as_deref());
        let (snippet, _) = convert::cut_chars(text.trim(), 300);
        bail!(
            "{NAME}: {final_url} answered HTTP {status}{}",
            if snippet.is_empty() {
                String::new()
            } else {
                format!(": {snippet}")
            }
        );
    }

    let mut notes = Vec::new();
    if final_url != url.as_str() {
        notes.push(format!("redirected from {url}"));
    }
    if body.truncated {
        notes.push(format!(
            "the response was larger than {cap} bytes ([web] max_response_bytes); only the first {cap} bytes were read"
        ));
    }

    // What the body is: the declared type, or a guess when none was declared.
    let kind = if mime.is_empty() {
        sniff(&body.bytes)
    } else {
        mime.clone()
    };
    let (title, content) = if let Some(extractor) = toolbox_host::find_extractor(&kind) {
        if body.truncated {
            bail!(
                "{NAME}: {final_url} is {kind} larger than {cap} bytes ([web] max_response_bytes); a cut-off document cannot be read — raise the limit to read it"
            );
        }
        let extract = extractor.extract;
        let bytes = body.bytes;
        let text = toolbox_host::blocking(format!("{NAME}: the {kind} extractor"), move || {
            extract(&bytes)
        })
        .await?
        .map_err(|e| anyhow!("{NAME}: cannot read the {kind} document at {final_url}: {e:#}"))?;
        (None, text)
    } else if is_html(&kind) {
        let html = convert::decode_text(&body.bytes, charset.as_deref());
        let page_url = final_url.clone();
        let page = toolbox_host::blocking(format!("{NAME}: converting the page"), move || {
            convert::html_page(&html, &page_url, format)
        })
        .await?;
        if page.whole_page && format != Format::Html {
            notes.push("no main article was found, so this is the whole page".into());
        }
        (page.title, page.body)
    } else if is_json(&kind) {
        let text = convert::decode_text(&body.bytes, charset.as_deref());
        match serde_json::from_str::<Value>(&text) {
            Ok(_) if format != Format::Html => (None, convert::pretty_json(&text)),
            Ok(_) => (None, text),
            Err(e) => {
                notes.push(format!(
                    "the JSON does not parse ({e}), so it is shown as sent"
                ));
                (None, text)
            }
        }
    } else if kind.starts_with("text/") || is_xml(&kind) {
        (None, convert::decode_text(&body.bytes, charset.as_deref()))
    } else if kind == "application/pdf" {
        bail!(
            "{NAME}: {final_url} is a PDF (application/pdf){}",
            pdf_hint(&kind)
        );
    } else {
        bail!("{NAME}: {final_url} is {kind}, which web_fetch cannot read (binary content)");
    };

    let mut out = String::new();
    if let Some(title) = &title {
        out.push_str(&format!("Title: {title}\n"));
    }
    out.push_str(&format!("URL: {final_url}\n"));
    out.push_str(&format!(
        "Content-Type: {}\n",
        if mime.is_empty() {
            "(not given)"
        } else {
            &mime
        }
    ));
    for note in &notes {
        out.push_str(&format!("Note: {note}\n"));
    }
    out.push('\n');
    let (shown, cut) = convert::cut_chars(&content, max_chars);
    out.push_str(shown);
    if let Some(total) = cut {
        out.push_str(&format!(
            "\n\n[truncated: showing the first {max_chars} of {total} characters; call {NAME} again with a larger max_chars to see more]"
        ));
    }
    Ok(Value::String(out))
}

fn parse_url(raw: &str) -> Result<Url> {
    if raw.is_empty() {
        bail!("{NAME} requires url");
    }
    match Url::parse(raw) {
        Ok(url) => Ok(url),
        Err(url::ParseError::RelativeUrlWithoutBase) => bail!(
            "{NAME}: argument `url` must be an absolute http:// or https:// URL, got {raw:?} (did you mean https://{raw}?)"
        ),
        Err(e) => bail!("{NAME}: argument `url` is not a valid URL ({e}): {raw:?}"),
    }
}

/// `text/html; charset=UTF-8` → (`text/html`, `Some("UTF-8")`).
fn split_content_type(header: Option<&str>) -> (String, Option<String>) {
    let Some(header) = header else {
        return (String::new(), None);
    };
    let mut parts = header.split(';');
    let mime = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset")).then(|| v.trim().to_string())
    });
    (mime, charset)
}

fn is_html(mime: &str) -> bool {
    matches!(mime, "text/html" | "application/xhtml+xml")
}

fn is_json(mime: &str) -> bool {
    mime == "application/json" || mime.ends_with("+json") || mime == "text/json"
}

fn is_xml(mime: &str) -> bool {
    mime == "application/xml" || mime.ends_with("+xml")
}

/// Whether the body can become text: text, JSON, XML, or a type with a linked extractor.
fn readable_mime(mime: &str) -> bool {
    mime.starts_with("text/")
        || is_html(mime)
        || is_json(mime)
        || is_xml(mime)
        || toolbox_host::find_extractor(mime).is_some()
}

fn pdf_hint(mime: &str) -> &'static str {
    if mime == "application/pdf" {
        " because the pdf provider is not built into this toolbox (enable the `pdf` feature)"
    } else {
        " (binary content)"
    }
}

/// The type of an unlabelled body, from its first bytes.
fn sniff(bytes: &[u8]) -> String {
    if bytes.starts_with(b"%PDF-") {
        return "application/pdf".into();
    }
    if !convert::looks_like_text(bytes) {
        return "application/octet-stream".into();
    }
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]);
    let trimmed = head.trim_start();
    if convert::looks_like_html(trimmed) {
        "text/html".into()
    } else if trimmed.starts_with('{') || trimmed.starts_with('[') {
        "application/json".into()
    } else {
        "text/plain".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_split() {
        assert_eq!(
            split_content_type(Some("Text/HTML; charset=\"ISO-8859-1\"")),
            ("text/html".into(), Some("\"ISO-8859-1\"".into()))
        );
        assert_eq!(split_content_type(None), (String::new(), None));
    }

    #[test]
    fn sniffing_unlabelled_bodies() {
        assert_eq!(sniff(b"%PDF-1.7\n"), "application/pdf");
        assert_eq!(sniff(b"<!doctype html><p>x"), "text/html");
        assert_eq!(sniff(b" {\"a\":1}"), "application/json");
        assert_eq!(sniff(b"hello"), "text/plain");
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\n\0"), "application/octet-stream");
    }

    #[test]
    fn pdf_is_refused_without_the_pdf_provider() {
        // This test binary does not link toolbox-pdf, so no PDF extractor is registered:
        // the situation of a toolbox built without the `pdf` feature.
        assert!(toolbox_host::find_extractor("application/pdf").is_none());
        assert!(!readable_mime("application/pdf"));
        assert!(pdf_hint("application/pdf").contains("the pdf provider is not built into"));
    }

    #[test]
    fn urls_are_checked() {
        let e = parse_url("example.com/x").unwrap_err().to_string();
        assert!(e.contains("did you mean https://example.com/x"), "{e}");
        assert!(parse_url("http://exa mple.com").is_err());
        assert!(!readable_mime("image/png"));
        assert!(readable_mime("application/ld+json"));
    }
}
