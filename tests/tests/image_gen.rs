//! image_gen__generate through the executor, against an OpenAI-compatible images endpoint
//! played by a small HTTP server on 127.0.0.1 that answers with `b64_json` PNGs.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use toolbox_executor::{ErrorKind, PermissionMode, SchemaFormat, ToolCallInfo, ToolExecutor};

use toolbox as _;
use toolbox_tests::http::Request;

const NAME: &str = "image_gen__generate";

// A tiny HTTP/1.1 server: at most 32 connections or 60 s, then it stops by itself.

type Handler = Arc<dyn Fn(&Request) -> (u16, String) + Send + Sync>;

struct Server {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
}

fn serve(handler: impl Fn(&Request) -> (u16, String) + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let log = requests.clone();
    let handler: Handler = Arc::new(handler);
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut served = 0;
        while served < 32 && started.elapsed() < Duration::from_secs(60) {
            match listener.accept() {
                Ok((stream, _)) => {
                    served += 1;
                    let (handler, log) = (handler.clone(), log.clone());
                    std::thread::spawn(move || handle(stream, &*handler, &log));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    Server { addr, requests }
}

fn handle(
    mut stream: TcpStream,
    handler: &(dyn Fn(&Request) -> (u16, String) + Send + Sync),
    log: &Mutex<Vec<Request>>,
) {
    let Some(request) = toolbox_tests::http::read_request(&mut stream) else {
        return;
    };
    log.lock().unwrap().push(request.clone());
    let (status, body) = handler(&request);
    let out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(out.as_bytes());
}

/// A valid 1×1 PNG (signature, IHDR, IDAT, IEND with correct CRCs).
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

fn b64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An OpenAI-compatible images endpoint: checks the key, answers `n` PNGs.
fn images_endpoint(req: &Request) -> (u16, String) {
    if req.headers.get("authorization").map(String::as_str) != Some("Bearer sk-test") {
        return (
            401,
            json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}).to_string(),
        );
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    if body["prompt"].as_str() == Some("explode") {
        return (
            500,
            json!({"error": {"message": "The server had an error while processing your request."}})
                .to_string(),
        );
    }
    let n = body["n"].as_u64().unwrap_or(1) as usize;
    let data: Vec<Value> = (0..n).map(|_| json!({"b64_json": b64(TINY_PNG)})).collect();
    (200, json!({"created": 1, "data": data}).to_string())
}

fn executor(image_gen: Value, mode: PermissionMode) -> (tempfile::TempDir, ToolExecutor) {
    toolbox_tests::executor_with(mode, &[("image_gen", image_gen)])
}

fn config_for(server: &Server) -> Value {
    // Each test names its own key variable, so parallel tests never share one.
    std::env::set_var("TOOLBOX_TEST_IMAGE_KEY", "sk-test");
    json!({
        "base_url": format!("http://{}/v1", server.addr),
        "model": "test-image-model",
        "api_key_env": "TOOLBOX_TEST_IMAGE_KEY",
    })
}

async fn call(exec: &ToolExecutor, args: Value) -> ToolCallInfo {
    toolbox_tests::call(exec, NAME, args).await
}

async fn fails(exec: &ToolExecutor, args: Value, want: &str) -> String {
    toolbox_tests::fails(exec, NAME, args, want).await
}

#[tokio::test]
async fn generated_pngs_are_saved_in_the_session_output_folder() {
    let server = serve(images_endpoint);
    let (dir, exec) = executor(config_for(&server), PermissionMode::Full);
    let info = call(
        &exec,
        json!({"prompt": "a red crab on a beach", "size": "512x512", "n": 2}),
    )
    .await;
    assert!(info.is_done(), "{}", info.result);
    let lines: Vec<&str> = info.result.lines().collect();
    assert_eq!(
        lines[0], "Saved 2 images (512x512, model test-image-model):",
        "{}",
        info.result
    );
    let out_dir = dir.path().join(".toolbox/sessions/s1/output");
    for line in &lines[1..3] {
        // `.toolbox/sessions/s1/output/image-….png (output/image-….png)`: where it really is.
        let (real, short) = line
            .split_once(" (")
            .expect("the real path, then the short one");
        assert!(
            real.starts_with(".toolbox/sessions/s1/output/image-"),
            "{line}"
        );
        let path = short.trim_end_matches(')');
        assert!(
            path.starts_with("output/image-") && path.ends_with(".png"),
            "{path}"
        );
        let file = out_dir.join(path.trim_start_matches("output/"));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            TINY_PNG,
            "{}",
            file.display()
        );
    }
    assert_ne!(lines[1], lines[2]);

    // The request was an OpenAI images request.
    let req = server.requests.lock().unwrap()[0].clone();
    assert_eq!(req.method, "POST");
    assert_eq!(req.target, "/v1/images/generations");
    assert_eq!(req.headers["content-type"], "application/json");
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body,
        json!({"model": "test-image-model", "prompt": "a red crab on a beach", "n": 2,
               "size": "512x512", "response_format": "b64_json"})
    );

    // A second call never overwrites the first call's files.
    let again = call(&exec, json!({"prompt": "another crab"})).await;
    assert!(again.is_done(), "{}", again.result);
    assert_eq!(std::fs::read_dir(&out_dir).unwrap().count(), 3);
}

#[tokio::test]
async fn endpoint_errors_are_reported_with_their_message() {
    let server = serve(images_endpoint);
    let (_d, exec) = executor(config_for(&server), PermissionMode::Full);
    fails(
        &exec,
        json!({"prompt": "explode"}),
        "HTTP 500 Internal Server Error: The server had an error while processing your request.",
    )
    .await;

    std::env::set_var("TOOLBOX_TEST_IMAGE_WRONG_KEY", "sk-wrong");
    let mut config = config_for(&server);
    config["api_key_env"] = json!("TOOLBOX_TEST_IMAGE_WRONG_KEY");
    let (_d, exec) = executor(config, PermissionMode::Full);
    let r = fails(
        &exec,
        json!({"prompt": "crab"}),
        "HTTP 401 Unauthorized: Incorrect API key provided.",
    )
    .await;
    assert!(r.contains("TOOLBOX_TEST_IMAGE_WRONG_KEY"), "{r}");
}

#[tokio::test]
async fn non_png_answers_are_refused_and_nothing_is_saved() {
    let server = serve(|_| {
        let jpeg = b64(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00");
        (200, json!({"data": [{"b64_json": jpeg}]}).to_string())
    });
    let (dir, exec) = executor(config_for(&server), PermissionMode::Full);
    fails(&exec, json!({"prompt": "crab"}), "image 1 is not a PNG").await;
    let out_dir = dir.path().join(".toolbox/sessions/s1/output");
    let saved = std::fs::read_dir(&out_dir).map(|d| d.count()).unwrap_or(0);
    assert_eq!(saved, 0);
}

#[tokio::test]
async fn arguments_are_checked() {
    let server = serve(images_endpoint);
    let (_d, exec) = executor(config_for(&server), PermissionMode::Full);
    fails(&exec, json!({}), "image_gen__generate requires prompt").await;
    fails(&exec, json!({"prompt": "  "}), "argument `prompt` is empty").await;
    fails(
        &exec,
        json!({"prompt": "x", "size": "huge"}),
        "argument `size` must be WIDTHxHEIGHT",
    )
    .await;
    fails(
        &exec,
        json!({"prompt": "x", "n": 5}),
        "argument `n` must be between 1 and 4, got 5",
    )
    .await;
    fails(
        &exec,
        json!({"prompt": "x", "count": 2}),
        "unknown argument `count`",
    )
    .await;
    assert!(
        server.requests.lock().unwrap().is_empty(),
        "bad arguments never reach the endpoint"
    );
}

/// The base-URL variables come from the process environment, which whoever runs the suite
/// may have set. So the test runs again in a child copy of this test binary with them
/// removed, and checks there that an unconfigured endpoint is explained.
#[tokio::test]
async fn no_endpoint_configured_says_how_to_configure_one() {
    const TEST: &str = "no_endpoint_configured_says_how_to_configure_one";
    const CHILD: &str = "TOOLBOX_TEST_IMAGE_GEN_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--test-threads=1"])
            .env(CHILD, "1")
            .env_remove("TOOLBOX_IMAGE_BASE_URL")
            .env_remove("OPENAI_BASE_URL")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child run failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        for var in ["TOOLBOX_IMAGE_BASE_URL", "OPENAI_BASE_URL"] {
            assert!(std::env::var_os(var).is_none(), "{var} is still set");
        }
        // The key points at a variable nobody sets.
        let (_d, exec) = executor(
            json!({"api_key_env": "TOOLBOX_TEST_IMAGE_KEY_NEVER_SET"}),
            PermissionMode::Full,
        );
        let r = fails(
            &exec,
            json!({"prompt": "crab"}),
            "no image endpoint configured",
        )
        .await;
        for want in [
            "[image_gen]",
            "base_url",
            "TOOLBOX_IMAGE_BASE_URL",
            "OPENAI_API_KEY",
        ] {
            assert!(r.contains(want), "missing {want:?}: {r}");
        }
    }
}

#[tokio::test]
async fn it_is_a_file_write_tool_in_the_images_toolset() {
    let server = serve(images_endpoint);
    let (_d, exec) = executor(config_for(&server), PermissionMode::ReadOnly);
    toolbox_tests::assert_error(
        &call(&exec, json!({"prompt": "crab"})).await,
        ErrorKind::Denied,
        &[],
    );
    assert!(server.requests.lock().unwrap().is_empty());
    let hidden = exec
        .resolve_agent_tool_schemas(
            Some(&["images"]),
            PermissionMode::ReadOnly,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    assert!(hidden.is_empty(), "{hidden:?}");
    // The executor's mode is the ceiling: asking for full cannot list it here...
    let still_hidden = exec
        .resolve_agent_tool_schemas(
            Some(&["images"]),
            PermissionMode::Full,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    assert!(still_hidden.is_empty(), "{still_hidden:?}");
    // ...but under a full executor it is listed.
    let (_d2, full) = executor(config_for(&server), PermissionMode::Full);
    let shown = full
        .resolve_agent_tool_schemas(
            Some(&["images"]),
            PermissionMode::Full,
            SchemaFormat::Anthropic,
        )
        .unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["name"], "image_gen__generate");
    let tool = exec.registry().get("image_gen__generate").unwrap();
    assert_eq!(tool.info.risk, toolbox_core::ToolRisk::FileWrite);
}
