//! `toolbox serve`'s security rules through the real binary, one test per rule: loopback
//! unless a token is given, the bearer token on every `/api` and `/mcp` request, the `Host`
//! check against DNS rebinding, cross-site `Origin`s refused, CORS only when configured, and
//! session ids that cannot name a folder refused on every endpoint.

mod common;
mod serve_common;

use std::time::Duration;

use serde_json::json;
use serve_common::{Req, Server, TOKEN};
use toolbox_tests::scripted_llm::ScriptedLlm;

/// Runs `toolbox serve` with `args` (and `env`) expecting it to refuse to start; returns
/// its stderr. Bounded: a server that starts anyway is killed and the test fails.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = common::toolbox(ws.path());
    cmd.arg("serve").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("toolbox serve {args:?} did not refuse to start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{args:?} started: {stderr}");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    stderr
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    for listen in ["0.0.0.0:0", "[::]:0", "192.0.2.1:0"] {
        let stderr = refused(&["--listen", listen], &[]);
        assert!(
            stderr.contains(&format!("refusing to listen on {listen} without a token")),
            "{stderr}"
        );
        assert!(
            stderr.contains("--token") && stderr.contains("TOOLBOX_SERVE_TOKEN"),
            "{stderr}"
        );
    }
    // An empty token is no token.
    let stderr = refused(&["--listen", "0.0.0.0:0"], &[("TOOLBOX_SERVE_TOKEN", "")]);
    assert!(stderr.contains("without a token"), "{stderr}");
    // A short token is refused anywhere, loopback included.
    let stderr = refused(&["--listen", "127.0.0.1:0", "--token", "short"], &[]);
    assert!(stderr.contains("too short"), "{stderr}");
    // A CORS origin that is no origin is refused at start, not ignored.
    let stderr = refused(
        &["--listen", "127.0.0.1:0", "--cors-origin", "localhost:3000"],
        &[],
    );
    assert!(stderr.contains("--cors-origin"), "{stderr}");
}

/// The paths a token must guard, `/mcp` and anything under it included (whatever `/mcp`
/// itself answers with the token).
const GUARDED: [(&str, &str); 10] = [
    ("GET", "/api/health"),
    ("GET", "/api/sessions"),
    ("GET", "/api/no/such/endpoint"),
    ("POST", "/api/sessions/g1/turns"),
    ("GET", "/api/sessions/g1/events"),
    ("POST", "/api/tool-approval/g1/c1"),
    ("GET", "/mcp"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
    ("GET", "/mcp/anything/below"),
];

fn check_token_rules(server: &Server) {
    let bare = |method: &str, path: &str| {
        Req::new(server.addr, method, path).header("Host", &server.host())
    };
    for (method, path) in GUARDED {
        let r = bare(method, path).json(&json!({})).send();
        r.assert_error(401, "Authorization: Bearer");
        assert_eq!(
            r.header("www-authenticate"),
            Some("Bearer realm=\"toolbox\""),
            "{method} {path}"
        );
        bare(method, path)
            .header("Authorization", "Bearer not-the-token-at-all")
            .send()
            .assert_error(401, "wrong");
        bare(method, path)
            .header("Authorization", &format!("Basic {TOKEN}"))
            .send()
            .assert_error(401, "Bearer");
        // One character off is still wrong.
        let almost = format!("Bearer {}x", &TOKEN[..TOKEN.len() - 1]);
        bare(method, path)
            .header("Authorization", &almost)
            .send()
            .assert_error(401, "wrong");
        // With the token the request gets through (whatever it then answers; an event
        // stream never ends, so only the head is read).
        let with = bare(method, path)
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .send_head();
        assert!(
            ![401, 403].contains(&with.status),
            "{method} {path}: {}",
            with.status
        );
    }
    let ok = bare("GET", "/api/health")
        .header("Authorization", &format!("bearer {TOKEN}"))
        .send();
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["status"], "ok");
    // Nothing ran for the refused requests.
    assert!(!server.running("g1"));
}

#[test]
fn a_token_guards_every_api_and_mcp_request() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![]);
    let server = Server::start(ws.path(), Some(&llm), &["--token", TOKEN]).with_token(TOKEN);
    assert!(server.stderr().contains("Bearer"), "{}", server.stderr());
    check_token_rules(&server);
    assert!(
        llm.requests().is_empty(),
        "a refused turn reached the model"
    );

    // The same through TOOLBOX_SERVE_TOKEN.
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = serve_common::serve_command(ws.path(), None, &[]);
    cmd.env("TOOLBOX_SERVE_TOKEN", TOKEN);
    let server = Server::spawn(cmd, ws.path()).with_token(TOKEN);
    check_token_rules(&server);
}

#[test]
fn without_a_token_loopback_requests_need_none() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(ws.path(), None, &[]);
    let r = Req::new(server.addr, "GET", "/api/health")
        .header("Host", &server.host())
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn on_loopback_the_host_must_name_loopback() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(ws.path(), None, &["--token", TOKEN]).with_token(TOKEN);
    let port = server.addr.port();
    for host in [
        "evil.example".to_string(),
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("10.0.0.1:{port}"),
    ] {
        for path in ["/api/health", "/mcp", "/"] {
            // Even with the right token: a rebound name is a page that must not get in.
            server
                .req("GET", path)
                .header("Host", &host)
                .send()
                .assert_error(403, "DNS rebinding");
        }
    }
    server
        .req("GET", "/api/health")
        .without("Host")
        .send()
        .assert_error(403, "not allowed");
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_string(),
    ] {
        let r = server
            .req("GET", "/api/health")
            .header("Host", &host)
            .send();
        assert_eq!(r.status, 200, "Host {host}: {}", r.text());
    }
}

#[test]
fn cross_site_origins_are_refused_and_cors_is_off_by_default() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![]);
    let server = Server::start(ws.path(), Some(&llm), &[]);
    for origin in ["http://evil.example", "null", "http://localhost:3000"] {
        server
            .req("GET", "/api/health")
            .header("Origin", origin)
            .send()
            .assert_error(403, "Origin");
        // A page elsewhere cannot start a turn (no CSRF).
        server
            .req("POST", "/api/sessions/x1/turns")
            .header("Origin", origin)
            .header("Content-Type", "text/plain")
            .body(json!({"message": "rm -rf"}).to_string())
            .send()
            .assert_error(403, "Origin");
    }
    assert!(llm.requests().is_empty());
    assert!(!server.running("x1"));

    // The server's own pages may call it, and get no CORS headers (none are needed).
    let own = server
        .req("GET", "/api/health")
        .header("Origin", &format!("http://{}", server.host()))
        .send();
    assert_eq!(own.status, 200, "{}", own.text());
    assert!(own.header("access-control-allow-origin").is_none());
    // No origin, no CORS headers either.
    let plain = server.get("/api/health");
    assert!(plain.header("access-control-allow-origin").is_none());
    // A preflight gets no permission.
    let preflight = server
        .req("OPTIONS", "/api/sessions/x1/turns")
        .header("Origin", "http://localhost:3000")
        .header("Access-Control-Request-Method", "POST")
        .send();
    assert!(
        preflight.header("access-control-allow-origin").is_none(),
        "{:?}",
        preflight.headers
    );
}

#[test]
fn a_configured_cors_origin_gets_cors_headers_and_no_other() {
    let ws = tempfile::tempdir().unwrap();
    let server = Server::start(
        ws.path(),
        None,
        &["--cors-origin", "http://localhost:3000", "--token", TOKEN],
    )
    .with_token(TOKEN);
    let allowed = server
        .req("GET", "/api/health")
        .header("Origin", "http://localhost:3000")
        .send();
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    // A preflight carries no token and is answered before the token check.
    let preflight = Req::new(server.addr, "OPTIONS", "/api/sessions/c1/turns")
        .header("Host", &server.host())
        .header("Origin", "http://localhost:3000")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "authorization,content-type",
        )
        .send();
    assert!(preflight.status < 300, "{}", preflight.status);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("http://localhost:3000")
    );
    let methods = preflight
        .header("access-control-allow-methods")
        .unwrap_or_default()
        .to_ascii_uppercase();
    assert!(methods.contains("POST"), "{methods}");
    let headers = preflight
        .header("access-control-allow-headers")
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(headers.contains("authorization"), "{headers}");
    // The real request from that origin still needs the token.
    Req::new(server.addr, "GET", "/api/health")
        .header("Host", &server.host())
        .header("Origin", "http://localhost:3000")
        .send()
        .assert_error(401, "Bearer");
    // Another origin is still refused, and told nothing.
    let other = server
        .req("GET", "/api/health")
        .header("Origin", "http://localhost:4000")
        .send();
    other.assert_error(403, "Origin");
    assert!(other.header("access-control-allow-origin").is_none());
}

#[test]
fn invalid_session_ids_are_refused_on_every_endpoint() {
    let ws = tempfile::tempdir().unwrap();
    let llm = ScriptedLlm::start(vec![]);
    let server = Server::start(ws.path(), Some(&llm), &["--mode", "full"]);
    let long = "a".repeat(200);
    let ids = [
        "..",
        "%2e%2e",
        ".hidden",
        "a%2Fb",
        "a%2F..%2F..%2Fetc",
        "a%20b",
        "a%00b",
        "%C3%A9t%C3%A9",
        long.as_str(),
    ];
    for sid in ids {
        let calls: [(&str, String); 8] = [
            ("GET", format!("/api/sessions/{sid}/messages")),
            ("GET", format!("/api/sessions/{sid}/trajectory")),
            ("GET", format!("/api/sessions/{sid}/events")),
            ("POST", format!("/api/sessions/{sid}/turns")),
            ("POST", format!("/api/sessions/{sid}/cancel")),
            (
                "POST",
                format!("/api/sessions/{sid}/tools/file_manager__list"),
            ),
            ("POST", format!("/api/sessions/{sid}/tools/shell")),
            ("POST", format!("/api/tool-approval/{sid}/c1")),
        ];
        for (method, path) in calls {
            let body = match path.rsplit('/').next() {
                Some("turns") => json!({"message": "hi"}),
                Some("c1") => json!({"decision": "approve"}),
                Some("shell") => json!({"command": "touch escaped"}),
                _ => json!({"path": "."}),
            };
            server
                .req(method, &path)
                .json(&body)
                .send()
                .assert_error(400, "invalid session id");
        }
    }
    assert!(llm.requests().is_empty());
    assert!(!ws.path().join("escaped").exists());
    // Nothing was created for them: no session folder, no trajectory folder.
    for kind in ["sessions", "trajectories"] {
        let dir = ws.path().join(".toolbox").join(kind);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(entries.is_empty(), "{kind}: {entries:?}");
    }
    // A valid id at the limit works.
    let fine = "a-Z_0.9".to_string() + &"x".repeat(121);
    assert_eq!(fine.len(), 128);
    let r = server.get(&format!("/api/sessions/{fine}/messages"));
    assert_eq!(r.status, 200, "{}", r.text());
}
