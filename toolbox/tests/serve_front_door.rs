//! `toolbox serve` cannot be held shut without credentials: half-sent requests, a huge
//! `Content-Length` and thousands of idle connections, each under a low descriptor limit;
//! after each, an authorised `GET /api/health` still answers. Every flood is bounded in
//! count, and every wait in time.

mod common;
mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serve_common::{serve_command, Server, TOKEN};

/// `toolbox serve --token` whose descriptor limit is `limit`.
fn server_with_fd_limit(ws: &std::path::Path, limit: u64) -> Server {
    let mut cmd = serve_command(ws, None, &["--token", TOKEN]);
    common::with_fd_limit(&mut cmd, limit);
    Server::spawn(cmd, ws).with_token(TOKEN)
}

/// An authorised health check answers (the client waits at most 20 s, only a guard).
fn health_answers(server: &Server) {
    let response = server.get("/api/health");
    assert_eq!(response.status, 200, "{}", response.text());
}

#[test]
fn half_sent_requests_do_not_lock_authorised_clients_out() {
    let ws = tempfile::tempdir().unwrap();
    let server = server_with_fd_limit(ws.path(), 256);
    // Far more slow clients than the server has places for, each stuck in its headers.
    let mut held = Vec::new();
    for _ in 0..400 {
        let Ok(mut stream) = TcpStream::connect(server.addr) else {
            continue;
        };
        let _ = stream.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
        held.push(stream);
    }
    health_answers(&server);
    // A slow client that does not finish its headers is closed by the server.
    let mut slow = TcpStream::connect(server.addr).unwrap();
    slow.write_all(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 1024];
    let read = slow.read(&mut buf);
    assert!(
        matches!(read, Ok(0)) || read.is_err() || buf.starts_with(b"HTTP/1.1 408"),
        "the half-sent request was kept open: {read:?}"
    );
    drop(held);
    health_answers(&server);
}

#[test]
fn a_huge_content_length_is_refused_before_the_body_is_read() {
    let ws = tempfile::tempdir().unwrap();
    let server = server_with_fd_limit(ws.path(), 256);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    let head = format!(
        "POST /api/sessions/s1/tools/file_manager__list HTTP/1.1\r\nHost: {}\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: 99999999999\r\n\r\n",
        server.host()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = stream.read(&mut buf).unwrap();
    let reply = String::from_utf8_lossy(&buf[..n]);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    health_answers(&server);
}

#[test]
fn two_thousand_idle_connections_under_a_low_descriptor_limit() {
    let ws = tempfile::tempdir().unwrap();
    let server = server_with_fd_limit(ws.path(), 256);
    let mut held = Vec::new();
    for _ in 0..2000 {
        if let Ok(stream) = TcpStream::connect(server.addr) {
            held.push(stream);
        }
        // Keep the test's own descriptors bounded too: drop the oldest past 900.
        if held.len() > 900 {
            held.remove(0);
        }
    }
    health_answers(&server);
    drop(held);
    health_answers(&server);
}
