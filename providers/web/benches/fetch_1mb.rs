//! `web_fetch` of a local 1 MB HTML page, in each output format, through the provider (no
//! executor): the time a model waits for one fetch, minus process start-up.
//!
//! Run with `cargo bench -p toolbox-web --bench fetch_1mb`. The page is served from
//! 127.0.0.1 by a thread that stops after MAX_CONNECTIONS requests or LIFETIME.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;
use toolbox_host::{ToolContext, ToolProvider, Workspace};

const MAX_CONNECTIONS: usize = 50_000;
const LIFETIME: Duration = Duration::from_secs(600);

/// About 1 MB of article-like HTML: headings, paragraphs with inline markup and links,
/// lists, tables, plus the navigation, scripts and footer a real page carries.
pub fn page() -> String {
    let mut html = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Benchmark article</title>\
         <style>body{font:16px sans-serif}</style><script>window.analytics=[];</script></head><body>\
         <nav><ul><li><a href=\"/\">Home</a></li><li><a href=\"/news\">News</a></li><li><a href=\"/about\">About</a></li></ul></nav>\
         <main><article><h1>Benchmark article</h1>",
    );
    let mut section = 0;
    while html.len() < 1_000_000 {
        section += 1;
        html.push_str(&format!("<h2>Section {section}</h2>"));
        for p in 0..6 {
            html.push_str(&format!(
                "<p>Paragraph {p} of section {section}: the quick brown fox jumps over the lazy dog, \
                 <b>café</b> naïve Zürich, with <a href=\"/s{section}/p{p}\">a link</a> and <em>emphasis</em>. \
                 Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt \
                 ut labore et dolore magna aliqua.</p>"
            ));
        }
        html.push_str("<ul>");
        for i in 0..5 {
            html.push_str(&format!("<li>Item {i} of list {section}</li>"));
        }
        html.push_str("</ul><table><tr><th>Key</th><th>Value</th></tr>");
        for i in 0..4 {
            html.push_str(&format!("<tr><td>k{i}</td><td>{}</td></tr>", i * section));
        }
        html.push_str("</table>");
    }
    html.push_str("</article></main><footer>Footer &copy; benchmark</footer><script>track();</script></body></html>");
    html
}

/// Serves `body` as text/html to every request on 127.0.0.1; returns the port.
fn serve(body: Arc<Vec<u8>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let port = listener.local_addr().expect("local addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut served = 0;
        while served < MAX_CONNECTIONS && started.elapsed() < LIFETIME {
            let Ok((mut stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            served += 1;
            let body = body.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nonblocking(false);
                let mut buf = [0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    )
                    .as_bytes(),
                );
                let _ = stream.write_all(&body);
            });
        }
    });
    port
}

fn fetch(c: &mut Criterion) {
    let html = page();
    let bytes = html.len();
    let port = serve(Arc::new(html.into_bytes()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut ctx = ToolContext::new(
        Workspace::new(dir.path()).expect("workspace"),
        "bench",
        "call",
        "web_fetch",
    );
    ctx.config = Arc::new(json!({"web": {"allow_hosts": ["127.0.0.1"]}}));
    let provider = toolbox_web::Web::default();
    let url = format!("http://127.0.0.1:{port}/page.html");

    let mut group = c.benchmark_group("web_fetch_1mb");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for format in ["html", "markdown", "text"] {
        let args = json!({"url": url, "format": format, "max_chars": 2_000_000});
        // One call outside the timing shows the output is real.
        let first = rt
            .block_on(provider.call_tool("web_fetch", args.clone(), &ctx))
            .expect("web_fetch works");
        let chars = first.text.chars().count();
        eprintln!("web_fetch format={format}: {bytes} bytes of HTML -> {chars} characters");
        group.bench_function(format, |b| {
            b.iter(|| {
                rt.block_on(provider.call_tool("web_fetch", args.clone(), &ctx))
                    .expect("web_fetch works")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, fetch);
criterion_main!(benches);
