//! The web provider through the executor, against HTTP servers on 127.0.0.1 started by each
//! test: fetching and converting, the limits, the SSRF guard (defaults, post-resolution
//! checks, redirects) and the three search backends' wire formats.
//!
//! No test sends a packet anywhere but 127.0.0.1: every refused address is refused before a
//! connection is attempted, and the servers stop by themselves.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{PermissionMode, SchemaFormat, ToolExecutor};

use toolbox as _;
use toolbox_tests::http::Request;
use toolbox_tests::{fails, ok};

// ---------------------------------------------------------------------------------------
// A tiny HTTP/1.1 server: one thread accepting, one per connection, `Connection: close`.
// It serves at most MAX_CONNECTIONS connections or stops after LIFETIME, whichever is first.

const MAX_CONNECTIONS: usize = 64;
const LIFETIME: Duration = Duration::from_secs(60);

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    delay: Duration,
}

impl Reply {
    fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
            delay: Duration::ZERO,
        }
    }

    fn redirect(location: &str) -> Self {
        Reply {
            status: 302,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
            delay: Duration::ZERO,
        }
    }
}

type Handler = Arc<dyn Fn(&Request, SocketAddr) -> Reply + Send + Sync>;

struct Server {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(handler: impl Fn(&Request, SocketAddr) -> Reply + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let handler: Handler = Arc::new(handler);
    let log = requests.clone();
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut served = 0;
        while served < MAX_CONNECTIONS && started.elapsed() < LIFETIME {
            match listener.accept() {
                Ok((stream, _)) => {
                    served += 1;
                    let handler = handler.clone();
                    let log = log.clone();
                    std::thread::spawn(move || handle(stream, addr, &*handler, &log));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Server { addr, requests }
}

fn handle(
    mut stream: TcpStream,
    addr: SocketAddr,
    handler: &(dyn Fn(&Request, SocketAddr) -> Reply + Send + Sync),
    log: &Mutex<Vec<Request>>,
) {
    let Some(request) = toolbox_tests::http::read_request(&mut stream) else {
        return;
    };
    log.lock().unwrap().push(request.clone());
    let reply = handler(&request, addr);
    std::thread::sleep(reply.delay);
    let mut out = format!("HTTP/1.1 {} X\r\n", reply.status).into_bytes();
    for (k, v) in &reply.headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            reply.body.len()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&reply.body);
    let _ = stream.write_all(&out);
}

// ---------------------------------------------------------------------------------------

fn executor(web: Value) -> (tempfile::TempDir, ToolExecutor) {
    toolbox_tests::executor_with(PermissionMode::ReadOnly, &[("web", web)])
}

/// Tests allow 127.0.0.1 explicitly, by literal.
fn allow_local() -> Value {
    json!({"allow_hosts": ["127.0.0.1"]})
}

const ARTICLE: &str = r#"<!doctype html><html><head><title>Ferris Facts</title>
<style>.x{color:red}</style><script>var secretTracking = 1;</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About us</a></nav>
<article><h1>Ferris Facts</h1>
<p>Ferris is the unofficial mascot of the Rust programming language. This paragraph has enough
words in it for the readability algorithm to consider the article worth extracting at all.</p>
<p>Crabs are <b>decapod crustaceans</b>; read <a href="/more">more about crabs</a> on the next
page. Ferris appears on stickers, shirts and plushies at conferences around the world.</p>
<p>Café naïve Zürich: non-ASCII text survives the trip from bytes to Markdown intact, as it
should whenever the server declares UTF-8 in the content type header.</p>
</article><footer>Footer boilerplate</footer></body></html>"#;

fn site(req: &Request, addr: SocketAddr) -> Reply {
    match req.path().as_str() {
        "/article" => Reply::new(200, "text/html; charset=utf-8", ARTICLE),
        "/data.json" => Reply::new(200, "application/json", r#"{"name":"ferris","legs":[1,2,3,4,5,6,7,8],"big":123456789012345678901234567890}"#),
        "/plain.txt" => Reply::new(200, "text/plain; charset=utf-8", "line one\n  line two — ünïcode\n"),
        "/latin1.txt" => Reply::new(200, "text/plain; charset=ISO-8859-1", b"caf\xe9".to_vec()),
        "/image.png" => Reply::new(200, "image/png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec()),
        "/unlabelled" => Reply {
            headers: vec![],
            ..Reply::new(200, "", "<!DOCTYPE html><html><head><title>No Type</title></head><body><p>hi</p></body></html>")
        },
        "/big.txt" => Reply::new(200, "text/plain", "0123456789".repeat(5_000)),
        "/missing" => Reply::new(404, "text/plain", "not here"),
        "/slow" => Reply {
            delay: Duration::from_secs(3),
            ..Reply::new(200, "text/plain", "late")
        },
        "/redirect" => Reply::redirect("/article"),
        "/to-metadata" => Reply::redirect("http://169.254.169.254/latest/meta-data/"),
        "/to-loopback-name" => Reply::redirect(&format!("http://localhost:{}/secret", addr.port())),
        "/to-other-loopback" => Reply::redirect(&format!("http://127.0.0.2:{}/secret", addr.port())),
        "/to-file" => Reply::redirect("file:///etc/passwd"),
        "/secret" => Reply::new(200, "text/plain", "SECRET"),
        p if p.starts_with("/loop/") => {
            let n: u32 = p[6..].parse().unwrap_or(0);
            Reply::redirect(&format!("/loop/{}", n + 1))
        }
        _ => Reply::new(404, "text/plain", "no such page"),
    }
}

#[tokio::test]
async fn html_becomes_markdown_with_title_and_url_first() {
    let server = serve(site);
    let (_d, exec) = executor(allow_local());
    let url = server.url("/article");
    let r = ok(&exec, "web_fetch", json!({"url": url})).await;
    assert!(
        r.starts_with(&format!(
            "Title: Ferris Facts\nURL: {url}\nContent-Type: text/html\n"
        )),
        "{r}"
    );
    assert!(r.contains("**decapod crustaceans**"), "{r}");
    assert!(
        r.contains(&format!("[more about crabs]({})", server.url("/more"))),
        "links are made absolute: {r}"
    );
    assert!(r.contains("Café naïve Zürich"), "{r}");
    assert!(
        !r.contains("secretTracking") && !r.contains("Footer boilerplate"),
        "{r}"
    );
    let req = &server.requests()[0];
    assert_eq!(req.method, "GET");
    assert!(req.headers["user-agent"].starts_with("toolbox/"), "{req:?}");

    let r = ok(&exec, "web_fetch", json!({"url": url, "format": "text"})).await;
    assert!(
        r.contains("decapod crustaceans") && !r.contains("**"),
        "{r}"
    );
    let r = ok(&exec, "web_fetch", json!({"url": url, "format": "html"})).await;
    assert!(
        r.contains("<script>var secretTracking = 1;</script>"),
        "{r}"
    );

    // An unlabelled HTML body is recognised; a page with no article is converted whole.
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": server.url("/unlabelled")}),
    )
    .await;
    assert!(
        r.starts_with("Title: No Type\n") && r.contains("Content-Type: (not given)"),
        "{r}"
    );
    assert!(
        r.contains("Note: no main article was found, so this is the whole page"),
        "{r}"
    );
}

/// A documentation page: what the model reads must be the page's own text, so names,
/// paths and URLs can be copied out of it; the structure around the text is Markdown.
const DOCS_PAGE: &str = r#"<!doctype html><html><head><title>pandas.read_csv</title></head>
<body><nav><a href="/">Home</a></nav><main><article>
<h1>Reading CSV files with read_csv</h1>
<p>WEBMARKER_MAIN: call pandas.read_csv(path, *args, **kwargs) to load a file such as
my_data_2024.csv; the parser's __init__ runs first, and a*b columns are multiplied later.
The source is at https://example.com/pandas/io/parsers/readers_impl.py for those who want it,
and the file names in this paragraph must come through exactly as they are written here.</p>
<ul><li>snake_case_names stay as written</li><li>the <em>sep_char</em> option, <strong>**not** bold</strong></li></ul>
<table><tr><th>arg_name</th><th>type</th></tr><tr><td>index_col</td><td>int*</td></tr></table>
<p>See <a href="/api/pandas.read_csv">the read_csv reference</a> for the rest.</p>
<pre><code class="language-python">df = pd.read_csv("my_data_2024.csv", *args)


print(df.__len__())</code></pre>
</article></main><footer>Footer</footer></body></html>"#;

#[tokio::test]
async fn fetched_text_is_kept_as_written() {
    let server = serve(|req, _| match req.path().as_str() {
        "/docs" => Reply::new(200, "text/html; charset=utf-8", DOCS_PAGE),
        _ => Reply::new(404, "text/plain", "no such page"),
    });
    let (_d, exec) = executor(allow_local());
    let r = ok(&exec, "web_fetch", json!({"url": server.url("/docs")})).await;
    assert!(!r.contains("no main article was found"), "{r}");
    for want in [
        "# Reading CSV files with read_csv\n",
        "WEBMARKER_MAIN: call pandas.read_csv(path, *args, **kwargs) to load a file such as",
        "my_data_2024.csv; the parser's __init__ runs first, and a*b columns are multiplied later.",
        "The source is at https://example.com/pandas/io/parsers/readers_impl.py for those who want it,",
        "*   snake_case_names stay as written",
        "*   the *sep_char* option, ****not** bold**",
        "| arg_name  | type |",
        "| index_col | int* |",
        &format!(
            "See [the read_csv reference]({}) for the rest.",
            server.url("/api/pandas.read_csv")
        ),
        // (Readability drops class attributes, and with them the language.)
        "```\ndf = pd.read_csv(\"my_data_2024.csv\", *args)\n\n\nprint(df.__len__())\n```",
    ] {
        assert!(r.contains(want), "{want:?} in:\n{r}");
    }
    assert!(!r.contains('\\'), "no escapes: {r}");
}

#[tokio::test]
async fn json_text_and_binary_responses() {
    let server = serve(site);
    let (_d, exec) = executor(allow_local());
    let r = ok(&exec, "web_fetch", json!({"url": server.url("/data.json")})).await;
    // Pretty-printed in the document's own key order, numbers exactly as sent.
    assert!(
        r.contains("{\n  \"name\": \"ferris\",\n  \"legs\": [\n    1,"),
        "{r}"
    );
    assert!(
        r.ends_with("\n  ],\n  \"big\": 123456789012345678901234567890\n}"),
        "{r}"
    );
    let r = ok(&exec, "web_fetch", json!({"url": server.url("/plain.txt")})).await;
    assert!(r.ends_with("\n\nline one\n  line two — ünïcode\n"), "{r:?}");
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": server.url("/latin1.txt")}),
    )
    .await;
    assert!(r.ends_with("\n\ncafé"), "{r:?}");
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/image.png")}),
        "is image/png, which web_fetch cannot read",
    )
    .await;
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/missing")}),
        "answered HTTP 404 Not Found: not here",
    )
    .await;
}

#[tokio::test]
async fn pdf_responses_go_through_the_pdf_extractor() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys
from fpdf import FPDF
pdf = FPDF()
pdf.set_font("Helvetica", size=12)
for i in (1, 2):
    pdf.add_page()
    pdf.cell(0, 10, f"Remote page {i}: café naïve Zürich")
pdf.output(sys.argv[1])
"#;
    let path = dir.path().join("remote.pdf");
    let python = std::env::var("TOOLBOX_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .args(["-c", script])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fpdf2 is needed (pip install -r tests/requirements.txt): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pdf = std::fs::read(&path).unwrap();
    let server = serve(move |_, _| Reply::new(200, "application/pdf", pdf.clone()));
    let (_d, exec) = executor(allow_local());
    let r = ok(&exec, "web_fetch", json!({"url": server.url("/doc.pdf")})).await;
    assert!(r.contains("Content-Type: application/pdf"), "{r}");
    assert!(
        r.contains("--- page 1 ---") && r.contains("--- page 2 ---"),
        "{r}"
    );
    assert!(r.contains("Remote page 2: café naïve Zürich"), "{r}");
}

#[tokio::test]
async fn limits_max_chars_size_cap_timeout_and_redirect_count() {
    let server = serve(site);
    let (_d, exec) = executor(json!({
        "allow_hosts": ["127.0.0.1"],
        "max_response_bytes": 1000,
        "timeout_ms": 500,
    }));
    // max_chars cuts on a character boundary and says so.
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": server.url("/plain.txt"), "max_chars": 12}),
    )
    .await;
    assert!(
        r.contains("\n\nline one\n  l\n\n[truncated: showing the first 12 of 30 characters"),
        "{r}"
    );
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": server.url("/plain.txt"), "max_chars": 21}),
    )
    .await;
    assert!(r.contains("line two —\n\n[truncated"), "{r}");
    // The body is read only up to max_response_bytes.
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": server.url("/big.txt"), "max_chars": 100000}),
    )
    .await;
    assert!(
        r.contains("Note: the response was larger than 1000 bytes ([web] max_response_bytes)"),
        "{r}"
    );
    assert_eq!(r.split("\n\n").nth(1).unwrap().len(), 1000, "{r}");
    // A server slower than timeout_ms is given up on.
    let started = Instant::now();
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/slow")}),
        "timed out",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // Redirects are followed (and reported) up to 5; the sixth is refused.
    let r = ok(&exec, "web_fetch", json!({"url": server.url("/redirect")})).await;
    assert!(
        r.contains(&format!("URL: {}\n", server.url("/article"))),
        "{r}"
    );
    assert!(
        r.contains(&format!(
            "Note: redirected from {}",
            server.url("/redirect")
        )),
        "{r}"
    );
    let before = server.requests().len();
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/loop/0")}),
        "stopped after 5 redirects",
    )
    .await;
    assert_eq!(
        server.requests().len() - before,
        6,
        "the original request and 5 redirects"
    );

    // max_redirects is configurable, but not above 5.
    let (_d, exec) = executor(json!({"allow_hosts": ["127.0.0.1"], "max_redirects": 1}));
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/loop/0")}),
        "stopped after 1 redirects",
    )
    .await;
    let (_d, exec) = executor(json!({"max_redirects": 9}));
    fails(
        &exec,
        "web_fetch",
        json!({"url": server.url("/article")}),
        "invalid configuration: [web] max_redirects must be between 0 and 5, got 9",
    )
    .await;
}

#[tokio::test]
async fn arguments_are_checked() {
    let (_d, exec) = executor(Value::Null);
    fails(&exec, "web_fetch", json!({}), "web_fetch requires url").await;
    fails(
        &exec,
        "web_fetch",
        json!({"url": "example.com/x"}),
        "did you mean https://example.com/x",
    )
    .await;
    fails(
        &exec,
        "web_fetch",
        json!({"url": "https://example.com", "format": "pdf"}),
        "argument `format` must be",
    )
    .await;
    fails(
        &exec,
        "web_fetch",
        json!({"url": "https://example.com", "max_chars": 0}),
        "argument `max_chars` must be between",
    )
    .await;
    fails(
        &exec,
        "web_fetch",
        json!({"url": "https://example.com", "urls": []}),
        "unknown argument `urls`",
    )
    .await;
}

#[tokio::test]
async fn the_guard_refuses_non_public_addresses_by_default() {
    let server = serve(site);
    let port = server.addr.port();
    let (_d, exec) = executor(Value::Null);
    for (url, want) in [
        (server.url("/secret"), "127.0.0.1 is loopback".to_string()),
        (format!("http://[::1]:{port}/"), "::1 is loopback".into()),
        (
            format!("http://0x7f.0.0.1:{port}/"),
            "127.0.0.1 is loopback".into(),
        ),
        (
            format!("http://2130706433:{port}/"),
            "127.0.0.1 is loopback".into(),
        ),
        (
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "is loopback".into(),
        ),
        (
            "http://169.254.169.254/latest/meta-data/".into(),
            "a cloud metadata service".into(),
        ),
        (
            "http://[fd00:ec2::254]/".into(),
            "a cloud metadata service".into(),
        ),
        (
            "http://metadata.google.internal/computeMetadata/v1/".into(),
            "metadata service host name".into(),
        ),
        ("http://10.0.0.1/".into(), "private".into()),
        ("http://192.168.1.1/".into(), "private".into()),
        ("http://172.16.5.4/".into(), "private".into()),
        ("http://100.64.0.1/".into(), "carrier-grade NAT".into()),
        ("http://[fe80::1]/".into(), "link-local".into()),
        ("http://[fc00::1]/".into(), "unique local".into()),
        ("http://0.0.0.0/".into(), "unspecified".into()),
        (
            "file:///etc/passwd".into(),
            "the scheme \"file\" is not allowed".into(),
        ),
        (
            "ftp://example.com/".into(),
            "the scheme \"ftp\" is not allowed".into(),
        ),
    ] {
        let r = fails(&exec, "web_fetch", json!({"url": url}), &want).await;
        assert!(r.contains("refused to fetch"), "{r}");
        assert!(
            r.contains("allow_hosts"),
            "the refusal says how to allow: {r}"
        );
    }
    assert!(server.requests().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn names_are_checked_after_resolution() {
    let server = serve(site);
    let port = server.addr.port();
    // 127.0.0.1 is allowed by literal, but `localhost` is a name: it is resolved, the
    // addresses it resolves to are loopback, and those are not allowed.
    let (_d, exec) = executor(allow_local());
    let r = fails(
        &exec,
        "web_fetch",
        json!({"url": format!("http://localhost:{port}/secret")}),
        "localhost resolves to",
    )
    .await;
    assert!(r.contains("loopback"), "{r}");
    assert!(server.requests().is_empty(), "nothing reached the server");

    // Allowing the *range* the name resolves into lets the same URL through: the decision is
    // made on the resolved address, not on the spelling of the host.
    let (_d, exec) = executor(json!({"allow_ranges": ["127.0.0.0/8"]}));
    let r = ok(
        &exec,
        "web_fetch",
        json!({"url": format!("http://localhost:{port}/secret")}),
    )
    .await;
    assert!(r.ends_with("\n\nSECRET"), "{r}");
    // Allowing the name itself works as well.
    let (_d, exec) = executor(json!({"allow_hosts": ["LOCALHOST"]}));
    ok(
        &exec,
        "web_fetch",
        json!({"url": format!("http://localhost:{port}/secret")}),
    )
    .await;
}

#[tokio::test]
async fn every_redirect_hop_is_checked() {
    let server = serve(site);
    let (_d, exec) = executor(allow_local());
    for (path, want) in [
        (
            "/to-metadata",
            "169.254.169.254 is a cloud metadata service (reached through a redirect)",
        ),
        (
            "/to-other-loopback",
            "127.0.0.2 is loopback (127.0.0.0/8) (reached through a redirect)",
        ),
        ("/to-loopback-name", "localhost resolves to"),
        (
            "/to-file",
            "a redirect to file:///etc/passwd, which web_fetch does not follow",
        ),
    ] {
        let r = fails(&exec, "web_fetch", json!({"url": server.url(path)}), want).await;
        assert!(r.contains("refused") || r.contains("scheme"), "{r}");
    }
    let paths: Vec<String> = server.requests().iter().map(Request::path).collect();
    assert!(
        !paths.contains(&"/secret".to_string()),
        "a refused hop was fetched: {paths:?}"
    );
}

// ---------------------------------------------------------------------------------------
// web_search

fn results_json(n: usize, snippet_key: &str) -> Vec<Value> {
    (1..=n)
        .map(|i| {
            json!({"title": format!("Result {i}"), "url": format!("https://example.com/{i}"),
                   snippet_key: format!("About <strong>result</strong> {i} &amp; more")})
        })
        .collect()
}

#[tokio::test]
async fn search_without_a_backend_says_how_to_configure_one() {
    let (_d, exec) = executor(Value::Null);
    let r = fails(
        &exec,
        "web_search",
        json!({"query": "rust"}),
        "no search backend configured",
    )
    .await;
    for want in [
        "[web]",
        "search_backend = \"searxng\"",
        "searxng_url",
        "search_backend = \"brave\"",
        "BRAVE_API_KEY",
        "search_backend = \"tavily\"",
        "TAVILY_API_KEY",
    ] {
        assert!(r.contains(want), "missing {want:?} in {r}");
    }
    let (_d, exec) = executor(json!({"search_backend": "searxng"}));
    fails(
        &exec,
        "web_search",
        json!({"query": "rust"}),
        "needs [web] searxng_url",
    )
    .await;
    fails(
        &exec,
        "web_search",
        json!({"query": " "}),
        "argument `query` is empty",
    )
    .await;
    fails(
        &exec,
        "web_search",
        json!({"query": "x", "max_results": 50}),
        "argument `max_results` must be between 1 and 20",
    )
    .await;
}

#[tokio::test]
async fn searxng_wire_format() {
    let server = serve(|req, _| {
        if req.path() == "/searx/search"
            && req.query().get("format").map(String::as_str) == Some("json")
        {
            Reply::new(
                200,
                "application/json",
                json!({"query": "x", "results": results_json(3, "content")}).to_string(),
            )
        } else {
            Reply::new(403, "text/html", "<h1>Forbidden</h1>")
        }
    });
    // The configured endpoint is trusted: no allow_hosts needed for a SearxNG on 127.0.0.1.
    let (_d, exec) =
        executor(json!({"search_backend": "searxng", "searxng_url": server.url("/searx/")}));
    let r = ok(
        &exec,
        "web_search",
        json!({"query": "rust & crabs", "max_results": 2}),
    )
    .await;
    assert!(
        r.starts_with("2 results for \"rust & crabs\" (SearxNG):\n"),
        "{r}"
    );
    assert!(
        r.contains("\n1. Result 1\n   https://example.com/1\n   About result 1 & more\n"),
        "{r}"
    );
    assert!(
        r.contains("\n2. Result 2\n") && !r.contains("Result 3"),
        "{r}"
    );
    let req = &server.requests()[0];
    assert_eq!(req.method, "GET");
    assert_eq!(req.query()["q"], "rust & crabs");

    // An instance without the JSON format answers 403: the error says what to change.
    let (_d, exec) =
        executor(json!({"search_backend": "searxng", "searxng_url": server.url("/other")}));
    fails(
        &exec,
        "web_search",
        json!({"query": "x"}),
        "HTTP 403 Forbidden",
    )
    .await;
    let r = fails(&exec, "web_search", json!({"query": "x"}), "json format").await;
    assert!(r.contains("settings.yml"), "{r}");
}

#[tokio::test]
async fn brave_wire_format() {
    let server = serve(|req, _| {
        match req.headers.get("x-subscription-token").map(String::as_str) {
            Some("brave-test-key") if req.path() == "/res/v1/web/search" => Reply::new(
                200,
                "application/json",
                json!({"type": "search", "web": {"type": "search", "results": results_json(3, "description")}}).to_string(),
            ),
            _ => Reply::new(401, "application/json", r#"{"error":{"code":"SUBSCRIPTION_TOKEN_INVALID","message":"The provided subscription token is invalid."}}"#),
        }
    });
    // Each test names its own variable, so tests running in parallel do not share one.
    std::env::set_var("TOOLBOX_TEST_BRAVE_KEY_OK", "brave-test-key");
    std::env::set_var("TOOLBOX_TEST_BRAVE_KEY_BAD", "wrong");
    let (_d, exec) = executor(
        json!({"search_backend": "brave", "brave_base_url": server.url(""),
                                     "brave_api_key_env": "TOOLBOX_TEST_BRAVE_KEY_OK"}),
    );
    let r = ok(
        &exec,
        "web_search",
        json!({"query": "ferris crab", "max_results": 3}),
    )
    .await;
    assert!(
        r.starts_with("3 results for \"ferris crab\" (Brave Search):\n"),
        "{r}"
    );
    assert!(
        r.contains("\n3. Result 3\n   https://example.com/3\n   About result 3 & more\n"),
        "{r}"
    );
    let req = &server.requests()[0];
    assert_eq!(req.method, "GET");
    assert_eq!(req.query()["q"], "ferris crab");
    assert_eq!(req.query()["count"], "3");
    assert_eq!(req.headers["accept"], "application/json");

    let (_d, exec) = executor(
        json!({"search_backend": "brave", "brave_base_url": server.url(""),
                                     "brave_api_key_env": "TOOLBOX_TEST_BRAVE_KEY_BAD"}),
    );
    let r = fails(
        &exec,
        "web_search",
        json!({"query": "x"}),
        "HTTP 401 Unauthorized: The provided subscription token is invalid.",
    )
    .await;
    assert!(
        r.contains("check the key in TOOLBOX_TEST_BRAVE_KEY_BAD"),
        "{r}"
    );

    let (_d, exec) = executor(
        json!({"search_backend": "brave", "brave_api_key_env": "TOOLBOX_TEST_BRAVE_KEY_UNSET"}),
    );
    fails(
        &exec,
        "web_search",
        json!({"query": "x"}),
        "Brave Search needs an API key in the environment variable TOOLBOX_TEST_BRAVE_KEY_UNSET",
    )
    .await;
}

#[tokio::test]
async fn tavily_wire_format() {
    let server = serve(|req, _| {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let authorised =
            req.headers.get("authorization").map(String::as_str) == Some("Bearer tvly-test-key");
        if req.method == "POST" && req.path() == "/search" && authorised {
            let n = body["max_results"].as_u64().unwrap_or(5) as usize;
            Reply::new(
                200,
                "application/json",
                json!({"query": body["query"], "results": results_json(n, "content")}).to_string(),
            )
        } else {
            Reply::new(
                401,
                "application/json",
                r#"{"detail":{"error":"Unauthorized: missing or invalid API key."}}"#,
            )
        }
    });
    std::env::set_var("TOOLBOX_TEST_TAVILY_KEY", "tvly-test-key");
    let (_d, exec) = executor(
        json!({"search_backend": "tavily", "tavily_base_url": server.url(""),
                                     "tavily_api_key_env": "TOOLBOX_TEST_TAVILY_KEY"}),
    );
    let r = ok(
        &exec,
        "web_search",
        json!({"query": "crab facts", "max_results": 2}),
    )
    .await;
    assert!(
        r.starts_with("2 results for \"crab facts\" (Tavily):\n"),
        "{r}"
    );
    assert!(
        r.contains("\n2. Result 2\n   https://example.com/2\n"),
        "{r}"
    );
    let req = &server.requests()[0];
    assert_eq!(req.headers["content-type"], "application/json");
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body["query"], "crab facts");
    assert_eq!(body["max_results"], 2);

    let (_d, exec) = executor(
        json!({"search_backend": "tavily", "tavily_api_key_env": "TOOLBOX_TEST_TAVILY_KEY_UNSET"}),
    );
    fails(
        &exec,
        "web_search",
        json!({"query": "x"}),
        "Tavily needs an API key in the environment variable TOOLBOX_TEST_TAVILY_KEY_UNSET",
    )
    .await;
}

#[tokio::test]
async fn both_tools_are_read_only_in_the_web_toolset() {
    let (_d, exec) = executor(Value::Null);
    let schemas = exec
        .resolve_agent_tool_schemas(
            Some(&["web"]),
            PermissionMode::ReadOnly,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    let mut names: Vec<&str> = schemas.iter().filter_map(|s| s["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["web_fetch", "web_search"]);
}
