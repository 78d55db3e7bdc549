//! MCP with the clients people use, against the real `toolbox serve --token …` (and
//! `toolbox mcp`) on 127.0.0.1 in a temporary workspace:
//!
//! - every client example of docs/clients.md and docs/mcp-http.md, taken from the page itself
//!   (the blocks after a `<!-- client-test: NAME ENV… -->` line), run in each environment it
//!   names: `mcp1` and `mcp2` are the Python venvs of scripts/test.sh (`tests/requirements-mcp1.txt`
//!   and `tests/requirements.txt`), `node` the MCP Inspector it installs. Each lists the tools
//!   and reads a file the test wrote;
//! - a call whose client went away is stopped: its HTTP connection closed, openai-agents'
//!   client timeout on mcp 1.x (which closes the connection but sends no cancellation), or
//!   `notifications/cancelled`;
//! - `DELETE /mcp` answers 204, so the Python SDK does not warn on every close;
//! - openai-agents' strict conversion leaves every tool schema as the server sent it, on both
//!   transports, and every tool takes a call with all its optional arguments null.

mod common;
mod serve_common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use serve_common::{Server, TOKEN};

/// Only a guard against a hang: one client run (a cold Python import of a framework is slow on
/// a loaded machine).
const CLIENT_LIMIT: Duration = Duration::from_secs(180);
/// The longest a test waits for a running command to be stopped once its client went away:
/// well below the run time of [`LATE_COMMAND`], so that a command that ended on its own is
/// never taken for one that was stopped.
const STOP_LIMIT: Duration = Duration::from_secs(20);
/// What the test writes into `notes.txt` and every example must print.
const NOTE: &str = "a note the MCP clients read back";
/// A command that would leave a file behind if it were not stopped.
const LATE_COMMAND: &str = "sleep 60; touch late.txt";

// ---------------------------------------------------------------------------------------
// The environments

/// A client environment, as the `client-test` lines of the docs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Env {
    /// The Python SDK 1.x and the frameworks that pin it (target/test-venv-mcp1).
    Mcp1,
    /// The Python SDK 2.x (target/test-venv).
    Mcp2,
    /// MCP Inspector from npm (target/inspector).
    Node,
}

impl Env {
    fn parse(name: &str) -> Env {
        match name {
            "mcp1" => Env::Mcp1,
            "mcp2" => Env::Mcp2,
            "node" => Env::Node,
            other => panic!("unknown client-test environment {other:?}"),
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The python of a venv that scripts/test.sh makes: `var` when set, else `default` under
/// the repository.
fn venv_python(var: &str, default: &str, requirements: &str) -> PathBuf {
    let python = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(default));
    assert!(
        python.is_file(),
        "this test needs the venv of {requirements}: run scripts/test.sh, or set {var} to its \
         python (looked at {})",
        python.display()
    );
    python
}

fn python(env: Env) -> PathBuf {
    match env {
        Env::Mcp1 => venv_python(
            "TOOLBOX_TEST_PYTHON_MCP1",
            "target/test-venv-mcp1/bin/python",
            "tests/requirements-mcp1.txt",
        ),
        Env::Mcp2 => venv_python(
            "TOOLBOX_TEST_PYTHON",
            "target/test-venv/bin/python",
            "tests/requirements.txt",
        ),
        Env::Node => panic!("not a Python environment"),
    }
}

/// The folder where scripts/test.sh installed MCP Inspector (`node_modules/` inside).
fn inspector_dir() -> PathBuf {
    let dir = std::env::var_os("TOOLBOX_TEST_INSPECTOR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/inspector"));
    assert!(
        dir.join("node_modules/@modelcontextprotocol/inspector")
            .is_dir(),
        "this test needs MCP Inspector from npm: run scripts/test.sh, or set \
         TOOLBOX_TEST_INSPECTOR to the folder it was installed in (looked at {})",
        dir.display()
    );
    dir
}

// ---------------------------------------------------------------------------------------
// The server and the clients

/// `toolbox serve --token TOKEN` in a fresh workspace holding `notes.txt`, in `mode`.
fn serve(mode: &str) -> (tempfile::TempDir, Server) {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), format!("{NOTE}\n")).unwrap();
    let server =
        Server::start(ws.path(), None, &["--token", TOKEN, "--mode", mode]).with_token(TOKEN);
    (ws, server)
}

fn mcp_url(server: &Server) -> String {
    format!("http://{}/mcp", server.addr)
}

/// Runs `cmd` to its end (at most [`CLIENT_LIMIT`]), its output collected in files so that
/// neither pipe can fill up.
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout"), dir.path().join("stderr"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let deadline = Instant::now() + CLIENT_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {CLIENT_LIMIT:?}\nstdout:\n{}\nstderr:\n{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

/// A Python client run in `env` against `server`: `args` after the interpreter, the URL and
/// token in `TOOLBOX_MCP_URL` and `TOOLBOX_SERVE_TOKEN` as the docs' examples read them.
fn python_client(env: Env, server: &Server, args: &[&str], what: &str) -> Output {
    let mut cmd = Command::new(python(env));
    cmd.args(args)
        .current_dir(&server.ws)
        .env("TOOLBOX_MCP_URL", mcp_url(server))
        .env("TOOLBOX_SERVE_TOKEN", TOKEN)
        .env("PYTHONUNBUFFERED", "1");
    run_bounded(cmd, what)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The last stdout line of a helper script, as JSON.
fn last_json(out: &Output, what: &str) -> Value {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "{what} failed\nstdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {stdout}"))
}

// ---------------------------------------------------------------------------------------
// The examples in the docs

/// One marked example of a docs page.
#[derive(Debug)]
struct Example {
    name: String,
    envs: Vec<Env>,
    /// The fence's language: `python` or `sh`.
    lang: String,
    code: String,
}

const MARK: &str = "<!-- client-test:";

/// The examples of `page` (relative to the repository) marked with `<!-- client-test: NAME
/// ENV… -->`: the fenced block right after each mark.
fn examples(page: &str) -> Vec<Example> {
    let path = repo_root().join(page);
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let mut lines = doc.lines();
    let mut found = Vec::new();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim().strip_prefix(MARK) else {
            continue;
        };
        let words: Vec<&str> = rest.trim_end_matches("-->").split_whitespace().collect();
        let (name, envs) = words
            .split_first()
            .unwrap_or_else(|| panic!("{page}: a client-test mark without a name: {line}"));
        let fence = lines.next().unwrap_or_default();
        let lang = fence
            .strip_prefix("```")
            .unwrap_or_else(|| panic!("{page}: no code block right after the mark {line}"));
        let mut code = String::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            code.push_str(line);
            code.push('\n');
        }
        found.push(Example {
            name: name.to_string(),
            envs: envs.iter().map(|e| Env::parse(e)).collect(),
            lang: lang.trim().to_string(),
            code,
        });
    }
    found
}

fn example(page: &str, name: &str) -> Example {
    examples(page)
        .into_iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("{page} has no example marked `{MARK} {name} …`"))
}

/// What every example must show: the tool list and the note read back, with no warning from
/// the SDK about the session's end.
fn assert_listed_and_read(what: &str, out: &Output) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    let all = format!("{what}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(out.status.success(), "failed: {all}");
    for tool in ["file_manager__read", "file_manager__list", "shell"] {
        assert!(stdout.contains(tool), "{tool} not listed: {all}");
    }
    assert!(stdout.contains(NOTE), "the note was not read back: {all}");
    assert!(
        !stderr.contains("Session termination failed"),
        "the client warned about DELETE /mcp: {all}"
    );
}

/// Runs the Python example `name` of `page` in each of its environments against a fresh
/// server in `mode`.
fn run_python_example(page: &str, name: &str, mode: &str) -> Vec<(tempfile::TempDir, Output)> {
    let example = example(page, name);
    assert_eq!(example.lang, "python", "{name}");
    assert!(!example.envs.is_empty(), "{name} names no environment");
    let mut runs = Vec::new();
    for env in &example.envs {
        let (ws, server) = serve(mode);
        let script = ws.path().join("example.py");
        std::fs::write(&script, &example.code).unwrap();
        let what = format!("{page} example {name} on {env:?}");
        let out = python_client(*env, &server, &[script.to_str().unwrap()], &what);
        runs.push((ws, out));
    }
    runs
}

fn check_clients_md_example(name: &str) {
    for (_, out) in run_python_example("docs/clients.md", name, "auto") {
        assert_listed_and_read(&format!("docs/clients.md: {name}"), &out);
    }
}

#[test]
fn clients_md_marks_an_example_for_every_client() {
    let names: Vec<String> = examples("docs/clients.md")
        .into_iter()
        .map(|e| e.name)
        .collect();
    // Each has a test of its own below; a new mark needs one too.
    assert_eq!(
        names,
        [
            "sdk",
            "inspector",
            "openai-agents",
            "langchain",
            "pydantic-ai-1",
            "pydantic-ai-2"
        ],
        "the client-test marks of docs/clients.md"
    );
    let sdk = example("docs/clients.md", "sdk");
    assert_eq!(
        sdk.envs,
        [Env::Mcp1, Env::Mcp2],
        "the SDK example runs on both majors"
    );
}

#[test]
fn the_python_sdk_example_runs_on_mcp_1_and_2() {
    check_clients_md_example("sdk");
}

#[test]
fn the_openai_agents_example_runs() {
    check_clients_md_example("openai-agents");
}

#[test]
fn the_langchain_example_runs() {
    check_clients_md_example("langchain");
}

#[test]
fn the_pydantic_ai_1_example_runs() {
    check_clients_md_example("pydantic-ai-1");
}

#[test]
fn the_pydantic_ai_2_example_runs() {
    check_clients_md_example("pydantic-ai-2");
}

/// The approval example of docs/mcp-http.md: an elicitation answered "approve" writes the
/// file.
#[test]
fn the_mcp_http_md_approval_example_runs_on_mcp_1_and_2() {
    let runs = run_python_example("docs/mcp-http.md", "sdk-approve", "auto");
    assert_eq!(runs.len(), 2, "the example names mcp1 and mcp2");
    for (ws, out) in runs {
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let all = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(out.status.success(), "{all}");
        assert!(stdout.contains("file_manager__write"), "{all}");
        assert!(
            stdout.contains("Approve this call?"),
            "no elicitation: {all}"
        );
        let written = std::fs::read_to_string(ws.path().join("out.txt"))
            .unwrap_or_else(|e| panic!("out.txt not written ({e}): {all}"));
        assert_eq!(written, "hi");
        assert!(!stderr.contains("Session termination failed"), "{all}");
    }
}

/// The Inspector command of docs/clients.md, run as written with the installed package
/// (npx finds it in the folder's node_modules; npm is kept offline) and this server's URL.
fn run_inspector(server: &Server, code: &str) -> Output {
    let dir = inspector_dir();
    let code = code.replace("http://127.0.0.1:7878/mcp", &mcp_url(server));
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", &code])
        .current_dir(&dir)
        .env("TOOLBOX_SERVE_TOKEN", TOKEN)
        .env("npm_config_offline", "true")
        .env("npm_config_update_notifier", "false")
        .env("HOME", server.ws.join(".inspector-home"));
    run_bounded(cmd, "MCP Inspector")
}

#[test]
fn the_inspector_example_reads_the_file_and_without_the_header_it_wants_oauth() {
    let example = example("docs/clients.md", "inspector");
    assert_eq!(example.lang, "sh");
    assert_eq!(example.envs, [Env::Node]);
    let (_ws, server) = serve("auto");
    let out = run_inspector(&server, &example.code);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let answer: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr:\n{stderr}"));
    assert_eq!(answer["isError"], false, "{answer}");
    assert!(
        answer["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains(NOTE),
        "{answer}"
    );

    // What the page says happens without the header: an OAuth attempt, not a tool call.
    let bare: String = example
        .code
        .lines()
        .filter(|line| !line.contains("Authorization"))
        .collect::<Vec<_>>()
        .join("\n");
    let out = run_inspector(&server, &bare);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("OAuth"), "{all}");
    assert!(!all.contains(NOTE), "{all}");
}

// ---------------------------------------------------------------------------------------
// Raw MCP over HTTP, for what no client library shows

const PROTOCOL: &str = "2025-06-18";

/// Initializes an MCP session over plain HTTP; returns its `Mcp-Session-Id`.
fn initialize(server: &Server) -> String {
    let body = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "mcp_clients.rs", "version": "0"},
        },
    });
    let r = server
        .req("POST", "/mcp")
        .header("Accept", "application/json, text/event-stream")
        .json(&body)
        .send();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains("\"serverInfo\""), "{}", r.text());
    let session = r
        .header("mcp-session-id")
        .unwrap_or_else(|| panic!("no Mcp-Session-Id: {:?}", r.headers))
        .to_string();
    let r = session_req(server, "POST", &session)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    session
}

fn session_req(server: &Server, method: &str, session: &str) -> serve_common::Req {
    server
        .req(method, "/mcp")
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", PROTOCOL)
}

/// POSTs `tools/call` (request id `id`) of `shell` running `command` and returns the open
/// connection once the response's head arrived: the answer is a stream that the caller may
/// read, or abandon by dropping it.
fn start_shell_call(
    server: &Server,
    session: &str,
    id: u64,
    command: &str,
) -> BufReader<TcpStream> {
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "shell", "arguments": {"command": command}},
    })
    .to_string();
    let mut head = format!("POST /mcp HTTP/1.1\r\nHost: {}\r\n", server.host());
    for (name, value) in [
        ("Authorization", format!("Bearer {TOKEN}")),
        ("Accept", "application/json, text/event-stream".into()),
        ("Content-Type", "application/json".into()),
        ("Mcp-Session-Id", session.into()),
        ("MCP-Protocol-Version", PROTOCOL.into()),
        ("Content-Length", body.len().to_string()),
    ] {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(serve_common::IO_LIMIT))
        .unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.contains(" 200 "), "tools/call: {status}");
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the head was cut short"
        );
        if line.trim().is_empty() {
            return reader;
        }
    }
}

/// The processes running in the workspace `ws` (its folder or one below; a shell command runs
/// in the session's scratchpad), but for the server itself and its janitor (a watcher that
/// lives as long as the server: `bash -c SCRIPT toolbox-janitor …`).
fn processes_in(ws: &Path, server: &Server) -> Vec<u32> {
    let ws = ws.canonicalize().unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == server.pid() {
            continue;
        }
        if !std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(&ws)) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline
            .split(|b| *b == 0)
            .any(|arg| arg.ends_with(b"janitor"))
        {
            continue;
        }
        found.push(pid);
    }
    found
}

/// `PID: command line` of each process.
fn describe(pids: &[u32]) -> String {
    pids.iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            format!("{pid}: {}", cmdline.trim())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits (at most [`STOP_LIMIT`]) until `done()` holds; false if it never did.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + STOP_LIMIT;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    true
}

/// Any `late.txt` anywhere in the workspace.
fn late_file(ws: &Path) -> Option<PathBuf> {
    let mut dirs = vec![ws.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == "late.txt") {
                return Some(path);
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(path);
            }
        }
    }
    None
}

/// The command of an abandoned call is stopped: its processes end within [`STOP_LIMIT`], and
/// it never gets to write `late.txt`.
fn assert_stopped(ws: &Path, server: &Server, how: &str) {
    let stopped = wait_until(|| processes_in(ws, server).is_empty());
    assert!(
        stopped,
        "{how}: the command still runs ({}), the server did not stop the call\nserver stderr:\n{}",
        describe(&processes_in(ws, server)),
        server.stderr()
    );
    assert_eq!(late_file(ws), None, "{how}");
}

fn wait_for_command(ws: &Path, server: &Server) {
    assert!(
        wait_until(|| !processes_in(ws, server).is_empty()),
        "the shell command never started\nserver stderr:\n{}",
        server.stderr()
    );
}

#[test]
fn a_call_whose_connection_closes_is_stopped() {
    let (ws, server) = serve("full");
    let session = initialize(&server);
    let call = start_shell_call(&server, &session, 7, LATE_COMMAND);
    wait_for_command(ws.path(), &server);
    // The client goes away without a word: no cancellation, no DELETE.
    drop(call);
    assert_stopped(ws.path(), &server, "connection closed");
}

#[test]
fn notifications_cancelled_stops_the_call() {
    let (ws, server) = serve("full");
    let session = initialize(&server);
    // Kept open the whole time: only the notification can be what stops the call.
    let _call = start_shell_call(&server, &session, 8, LATE_COMMAND);
    wait_for_command(ws.path(), &server);
    let r = session_req(&server, "POST", &session)
        .json(&json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 8, "reason": "the user gave up"},
        }))
        .send();
    assert_eq!(r.status, 202, "{}", r.text());
    assert_stopped(ws.path(), &server, "notifications/cancelled");
}

/// openai-agents gives up on a call after `client_session_timeout_seconds` (5 by default),
/// and on mcp 1.x it sends no `notifications/cancelled`: the server learns it only from the
/// client's HTTP traffic.
fn openai_agents_gives_up(end: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/give_up.py");
    let (ws, server) = serve("full");
    let out = python_client(
        Env::Mcp1,
        &server,
        &[script.to_str().unwrap(), "2", LATE_COMMAND, end],
        "give_up.py",
    );
    let report = last_json(&out, "give_up.py");
    assert_eq!(report["timed_out"], true, "{report}");
    assert_stopped(
        ws.path(),
        &server,
        &format!("openai-agents' timeout, then {end}"),
    );
}

/// The agent's run ends: the SDK sends `DELETE /mcp` and closes its connections.
#[test]
fn a_call_openai_agents_gave_up_on_is_stopped_when_it_closes() {
    openai_agents_gives_up("close");
}

/// The agent's process dies right after the timeout: no DELETE, only closed connections.
#[test]
fn a_call_openai_agents_gave_up_on_is_stopped_when_its_process_dies() {
    openai_agents_gives_up("exit");
}

#[test]
fn delete_ends_the_session_with_204() {
    let (_ws, server) = serve("auto");
    let session = initialize(&server);
    let r = session_req(&server, "DELETE", &session).send();
    assert!(
        r.status == 204 || r.status == 200,
        "DELETE /mcp answered {} (the Python SDK warns on anything but 200 and 204): {}",
        r.status,
        r.text()
    );
    // The session is gone.
    let r = session_req(&server, "POST", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send();
    assert_eq!(r.status, 404, "{}", r.text());
}

// ---------------------------------------------------------------------------------------
// Strict clients (openai-agents' convert_schemas_to_strict)

fn assert_strict_report(report: &Value, transport: &str) {
    let tools = report["tools"].as_array().expect("a tools array");
    assert!(tools.len() > 10, "{transport}: too few tools: {report}");
    for tool in tools {
        let name = tool["name"].as_str().unwrap();
        assert_eq!(
            tool["strict"], true,
            "{transport}: {name} is not strict: {tool}"
        );
        assert_eq!(
            tool["only_required_added"], true,
            "{transport}: openai-agents' strict conversion changed more than `required` in {name}: {tool:#}"
        );
        // The calls may fail (no such file, nothing configured), but never over a null, nor
        // over an optional argument left out.
        for (kind, said) in [("strict", &tool["text"]), ("loose", &tool["loose_text"])] {
            let said = said.as_str().unwrap().to_lowercase();
            for refusal in [
                "null",
                "must be a",
                "unknown argument",
                "invalid",
                "missing required",
                "raised",
            ] {
                assert!(
                    !said.contains(refusal),
                    "{transport}: {name} refused a {kind} call ({refusal:?}): {tool:#}"
                );
            }
        }
    }
}

#[test]
fn strict_and_loose_models_both_call_every_http_tool() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/strict_schemas.py");
    let (_ws, server) = serve("full");
    let out = python_client(
        Env::Mcp2,
        &server,
        &[script.to_str().unwrap(), "http"],
        "strict_schemas.py http",
    );
    assert_strict_report(&last_json(&out, "strict_schemas.py http"), "http");
}

#[test]
fn strict_and_loose_models_both_call_every_stdio_tool() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/strict_schemas.py");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("notes.txt"), format!("{NOTE}\n")).unwrap();
    let mut cmd = Command::new(python(Env::Mcp2));
    cmd.arg(&script)
        .arg("stdio")
        .current_dir(ws.path())
        .env("TOOLBOX_BIN", env!("CARGO_BIN_EXE_toolbox"))
        .env("TOOLBOX_WS", ws.path());
    let out = run_bounded(cmd, "strict_schemas.py stdio");
    assert_strict_report(&last_json(&out, "strict_schemas.py stdio"), "stdio");
}

/// `toolbox mcp --vocabulary data-agent` through the MCP Python SDK: the tools are listed by
/// the data agent's names, each once, and every one answers a call by the name it was listed
/// under. The SDK checks each structured result against the tool's outputSchema itself.
#[test]
fn a_data_agent_client_calls_every_tool_by_the_name_it_was_listed_under() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/vocabulary.py");
    let ws = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(python(Env::Mcp2));
    cmd.arg(&script)
        .current_dir(ws.path())
        .env("TOOLBOX_BIN", env!("CARGO_BIN_EXE_toolbox"))
        .env("TOOLBOX_WS", ws.path());
    let out = run_bounded(cmd, "vocabulary.py");
    let report = last_json(&out, "vocabulary.py");
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    let unique: std::collections::BTreeSet<&&str> = tools.iter().collect();
    assert_eq!(unique.len(), tools.len(), "each tool once: {tools:?}");
    for word in [
        "list_dir",
        "read_file",
        "write_file",
        "edit_file",
        "glob_search",
        "grep_search",
        "notebook_edit",
        "python_exec",
        "python_package",
        "bash",
        "sleep",
        "Skill",
    ] {
        assert!(tools.contains(&word), "{word} not listed: {tools:?}");
    }
    for canonical in ["file_manager__read", "run_python_code", "shell", "skill"] {
        assert!(!tools.contains(&canonical), "{canonical} listed: {tools:?}");
    }
    for name in &tools {
        let call = &report["calls"][name];
        // No exception: the name resolved, and a structured result matched its schema.
        assert!(call.get("exception").is_none(), "{name}: {call}");
        assert!(
            !call["text"].as_str().unwrap().starts_with("unknown tool"),
            "{name}: {call}"
        );
        assert_eq!(
            call["noted"], false,
            "a listed name gets no note: {name}: {call}"
        );
    }
    // Issue 38, point 8: a name the list does not use still runs, and the text says which
    // name is listed.
    let canonical = report["by_canonical_name"].as_str().unwrap();
    assert!(canonical.starts_with("exit code 0"), "{canonical}");
    assert!(
        canonical
            .ends_with("(note: this server lists the tool shell as bash; call it bash next time)"),
        "{canonical}"
    );
    for name in ["python_exec", "bash", "pdf__info"] {
        assert!(report["output_schemas"].get(name).is_some(), "{name}");
    }
    let python = &report["calls"]["python_exec"];
    assert_eq!(python["is_error"], false, "{python}");
    assert_eq!(python["structured"]["stdout"], "42\n", "{python}");
    assert_eq!(python["structured"]["error"], Value::Null, "{python}");
    // The text the model reads is the same sections as ever.
    assert!(
        python["text"].as_str().unwrap().contains("[stdout]\n42\n"),
        "{python}"
    );
    let bash = &report["calls"]["bash"];
    assert_eq!(bash["structured"]["exit_code"], 0, "{bash}");
    assert_eq!(bash["structured"]["stdout"], "vocab-ok\n", "{bash}");
    // The trajectory keeps the canonical name and the name the client used.
    let kept = std::fs::read_to_string(
        ws.path()
            .join(".toolbox/trajectories/default/tool_calls.jsonl"),
    )
    .unwrap();
    let bash_line = kept
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["called_as"] == "bash")
        .expect("a line for bash");
    assert_eq!(bash_line["tool"], "shell");
}

/// Issue 38, point 1: a structured result obeys the limits of the text it mirrors. Every tool
/// with an outputSchema is called with an input that makes its output about 3 MB, through the
/// MCP SDK 2.x over HTTP (which refuses SSE events over 1 MiB) and through Pydantic AI (which
/// gives the model the structured value): every call succeeds in the client, and neither the
/// structured value nor what reaches the model passes the documented cap.
#[test]
fn three_megabyte_outputs_stay_within_the_structured_cap() {
    const CAP: usize = 32 * 1024;
    let (ws, server) = serve("full");
    let python = python(Env::Mcp2);
    // A PDF whose title is 3 MB, and a CSV whose one column's name is.
    let made = Command::new(&python)
        .current_dir(ws.path())
        .args([
            "-c",
            "from fpdf import FPDF\n\
             p = FPDF(); p.set_title('t' * 3_000_000); p.add_page(); p.output('big-title.pdf')\n\
             open('wide-name.csv', 'w').write('c' * 3_000_000 + ',b\\n1,2\\n')",
        ])
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made.stderr));
    let out = python_client(
        Env::Mcp2,
        &server,
        &[repo_root()
            .join("toolbox/tests/clients/large_outputs.py")
            .to_str()
            .unwrap()],
        "large_outputs.py",
    );
    let got = last_json(&out, "large_outputs.py");
    for tool in [
        "shell",
        "run_python_code",
        "pdf__info",
        "data__inspect",
        "data__validate",
        "data__convert",
    ] {
        let sdk = &got["sdk"][tool];
        assert!(sdk.get("failed").is_none(), "{tool} over the SDK: {sdk}");
        let structured = sdk["structured"].as_u64().unwrap_or(0) as usize;
        assert!(structured > 0 && structured <= CAP, "{tool}: {sdk}");
        let model = &got["pydantic_ai"][tool];
        assert!(
            model.get("failed").is_none(),
            "{tool} in Pydantic AI: {model}"
        );
        assert!(
            model["to_model"].as_u64().unwrap() as usize <= CAP,
            "{tool} in Pydantic AI: {model}"
        );
    }
    // The big ones name where the whole output is.
    for tool in ["shell", "run_python_code"] {
        let keys = got["sdk"][tool]["keys"].to_string();
        assert!(
            keys.contains("spool_path") && keys.contains("omitted_bytes"),
            "{tool}: {keys}"
        );
    }
}

/// Issue 38, point 2: a model in strict mode (optional arguments null) and a model not in
/// strict mode (optional arguments left out) both reach the tool through openai-agents (its
/// strict and non-strict conversions, with its own check of `required`), Pydantic AI and
/// LangChain, on the SDK 1.x and 2.x.
#[test]
fn a_model_of_each_kind_calls_a_tool_through_every_framework() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/model_kinds.py");
    for env in [Env::Mcp2, Env::Mcp1] {
        let (_ws, server) = serve("full");
        let out = python_client(env, &server, &[script.to_str().unwrap()], "model_kinds.py");
        let report = last_json(&out, "model_kinds.py");
        let expected: &[&str] = match env {
            Env::Mcp2 => &["openai_agents", "pydantic_ai"],
            _ => &["openai_agents", "pydantic_ai", "langchain"],
        };
        for framework in expected {
            for kind in ["strict", "loose"] {
                let got = report[framework][kind].as_str().unwrap_or_default();
                assert!(
                    got.contains(NOTE),
                    "{env:?} {framework}, a {kind} model did not read the file: {report:#}"
                );
            }
        }
    }
}

/// Issue 38, point 3: LangChain's default mode opens an MCP session per call, and each MCP
/// session over HTTP is a toolbox session of its own, so work was lost between calls. With
/// `?session=NAME` on the URL (or a `Toolbox-Session` header) every call runs in that toolbox
/// session: a file written by one call is there for the next, and Python keeps its
/// variables; the folders are the named session's.
#[test]
fn langchain_per_call_sessions_share_one_toolbox_session_when_named() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/langchain_session.py");
    let (ws, server) = serve("full");
    let out = python_client(
        Env::Mcp1,
        &server,
        &[script.to_str().unwrap()],
        "langchain_session.py",
    );
    let report = last_json(&out, "langchain_session.py");
    let named = &report["named"];
    assert!(
        named["read"].as_str().unwrap().contains("kept"),
        "{report:#}"
    );
    assert!(named["use"].as_str().unwrap().contains("42"), "{report:#}");
    assert!(ws
        .path()
        .join(".toolbox/sessions/langchain-work/output/kept.txt")
        .is_file());
    // Unnamed, each call is a session of its own: the file and the variable are gone.
    let unnamed = &report["unnamed"];
    assert!(
        !unnamed["read"].as_str().unwrap().contains("kept\n"),
        "{report:#}"
    );
    assert!(
        unnamed["use"].as_str().unwrap().contains("NameError"),
        "{report:#}"
    );
}

/// Issue 38, point 8, over HTTP: a call by an alias (`bash`) runs, and its text ends with the
/// name `tools/list` gives the tool, so the model can switch to it (the SDK looks a result's
/// schema up by the name called, and lists the tools again for every unlisted one).
#[test]
fn an_alias_call_over_http_names_the_listed_tool() {
    let (_ws, server) = serve("full");
    let session = initialize(&server);
    for (name, noted) in [("bash", true), ("shell", false)] {
        let r = session_req(&server, "POST", &session)
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": name, "arguments": {"command": "echo via-alias"}},
            }))
            .send();
        assert_eq!(r.status, 200, "{}", r.text());
        let body = r.text();
        assert!(body.contains("via-alias"), "{body}");
        assert_eq!(
            body.contains(
                "(note: this server lists the tool bash as shell; call it shell next time)"
            ),
            noted,
            "{name}: {body}"
        );
    }
}
