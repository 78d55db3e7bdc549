//! The real `toolbox` binary links no libpython and finds its Python at run time (issue 42):
//! `[python] interpreter`, then `$VIRTUAL_ENV`, then `python3` on PATH; the embedded backend
//! loads that interpreter's own libpython and stdlib whatever else the environment says
//! (PYTHONHOME, PYTHONPATH, LD_LIBRARY_PATH); with no Python everything else still works and
//! run_python_code says what it looked for; and in a mount namespace where the build's
//! Python is hidden, the binary, its MCP server and the embedded backend (on Debian's
//! /usr/bin/python3) all work.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const PROBE: &str = r#"{"code": "import os, sys\nprint(sys.version.replace('\\n', ' '))\nprint(sys.prefix)\nprint(sys.executable)\nprint(os.__file__)\nprint(os.path.basename(os.readlink('/proc/self/exe')))"}"#;

/// Runs `toolbox ARGS` in `ws` with exactly the given environment; exit code and stdout.
fn toolbox_with(ws: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toolbox"))
        .current_dir(ws)
        .env_clear()
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("toolbox runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `toolbox call run_python_code PROBE` with exactly the given environment.
fn probe(ws: &Path, env: &[(&str, &str)]) -> (i32, Value) {
    let (code, stdout, stderr) = toolbox_with(
        ws,
        env,
        &["call", "--mode", "full", "run_python_code", PROBE],
    );
    let envelope = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("not one JSON envelope: {stdout}\nstderr: {stderr}"));
    (code, envelope)
}

/// What a Python says of itself, as the probe prints it (less the last line).
struct Identity {
    version: String,
    prefix: String,
    executable: String,
    /// Where its stdlib is.
    base_prefix: String,
}

fn identity(python: &Path, env: &[(&str, &str)]) -> Identity {
    let out = Command::new(python)
        .env_clear()
        .envs(env.iter().copied())
        .args([
            "-I",
            "-c",
            "import sys; print(sys.version.replace('\\n', ' ')); print(sys.prefix); \
             print(sys.executable); print(sys.base_prefix)",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    Identity {
        version: lines[0].into(),
        prefix: lines[1].into(),
        executable: lines[2].into(),
        base_prefix: lines[3].into(),
    }
}

/// The probe ran in toolbox's own process (the embedded backend) as `want`.
fn assert_embedded(code: i32, envelope: &Value, want: &Identity) {
    let result = common::without_folder_note(envelope["result"].as_str().unwrap_or_default());
    assert_eq!(code, 0, "{result}");
    assert_eq!(envelope["status"], "done", "{result}");
    let lines: Vec<&str> = result.lines().collect();
    assert_eq!(lines.first(), Some(&"[stdout]"), "{result}");
    assert_eq!(
        lines.get(1),
        Some(&want.version.as_str()),
        "sys.version: {result}"
    );
    assert_eq!(
        lines.get(2),
        Some(&want.prefix.as_str()),
        "sys.prefix: {result}"
    );
    assert_eq!(
        lines.get(3),
        Some(&want.executable.as_str()),
        "sys.executable: {result}"
    );
    let os_module = lines.get(4).copied().unwrap_or_default();
    assert!(
        os_module.starts_with(&want.base_prefix),
        "the stdlib must come from {}, got {os_module}",
        want.base_prefix
    );
    assert_eq!(
        lines.get(5),
        Some(&"toolbox"),
        "in toolbox's own process: {result}"
    );
}

const DEBIAN_PYTHON: &str = "/usr/bin/python3";

/// The Python `python3` on the tests' own PATH resolves to (pyenv's here), which is not
/// Debian's.
fn other_python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-I", "-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 on the tests' PATH");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

#[test]
fn the_embedded_python_is_the_one_found_on_path_whatever_pythonhome_says() {
    let ws = tempfile::tempdir().unwrap();
    let debian = identity(Path::new(DEBIAN_PYTHON), &[]);
    // Debian's Python is the only one on this PATH, and runs embedded.
    let (code, envelope) = probe(ws.path(), &[("PATH", "/usr/bin:/bin"), ("HOME", "/root")]);
    assert_embedded(code, &envelope, &debian);
    // PYTHONHOME / PYTHONPATH meant for another interpreter do not redirect its stdlib.
    let (code, envelope) = probe(
        ws.path(),
        &[
            ("PATH", "/usr/bin:/bin"),
            ("PYTHONHOME", "/nonexistent"),
            ("PYTHONPATH", "/nonexistent/lib"),
        ],
    );
    assert_embedded(code, &envelope, &debian);
}

#[test]
fn an_active_venv_and_then_the_config_come_before_path() {
    let ws = tempfile::tempdir().unwrap();
    // A venv of the other Python, made here (the `--without-pip` venv starts in a moment).
    let venv = ws.path().join("venv");
    let made = Command::new(other_python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap();
    assert!(made.success());
    let venv_python = venv.join("bin/python");
    let venv_identity = identity(&venv_python, &[]);
    let (code, envelope) = probe(
        ws.path(),
        &[
            ("PATH", "/usr/bin:/bin"),
            ("VIRTUAL_ENV", venv.to_str().unwrap()),
        ],
    );
    assert_embedded(code, &envelope, &venv_identity);

    // [python] interpreter in the user's config wins over both.
    let config = ws.path().join("operator.toml");
    std::fs::write(
        &config,
        format!("[python]\ninterpreter = \"{}\"\n", other_python().display()),
    )
    .unwrap();
    let other = identity(&other_python(), &[]);
    let (code, envelope) = probe(
        ws.path(),
        &[
            ("PATH", "/usr/bin:/bin"),
            ("VIRTUAL_ENV", venv.to_str().unwrap()),
            ("TOOLBOX_CONFIG", config.to_str().unwrap()),
        ],
    );
    assert_embedded(code, &envelope, &other);
}

#[test]
fn a_misleading_ld_library_path_does_not_swap_libpython() {
    let ws = tempfile::tempdir().unwrap();
    let other = other_python();
    let bin = other.parent().unwrap().to_str().unwrap().to_string();
    // Debian's libpython3.11.so.1.0 lives here, under the same name as pyenv's: a Python
    // whose own rpath is a DT_RUNPATH would load it if asked naively.
    let path = format!("{bin}:/usr/bin:/bin");
    let env = [
        ("PATH", path.as_str()),
        ("LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu:/usr/lib"),
    ];
    let want = identity(&other, &[]);
    let (code, envelope) = probe(ws.path(), &env);
    assert_embedded(code, &envelope, &want);
}

#[test]
fn with_no_python_everything_else_works_and_run_python_code_says_what_it_looked_for() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "x").unwrap();
    let env = [("PATH", "/nonexistent"), ("HOME", "/root")];
    let (code, stdout, stderr) = toolbox_with(ws.path(), &env, &["tools"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("run_python_code"), "{stdout}");
    let (code, stdout, _) = toolbox_with(
        ws.path(),
        &env,
        &["call", "file_manager__list", r#"{"path": "."}"#],
    );
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("a.txt"), "{stdout}");
    let (code, envelope) = probe(ws.path(), &env);
    assert_eq!(code, 1, "{envelope}");
    assert_eq!(envelope["status"], "error");
    let text = envelope["result"].as_str().unwrap();
    assert!(
        text.contains(
            "no Python interpreter found; looked for [python] interpreter (not set), then \
             $VIRTUAL_ENV/bin/python (VIRTUAL_ENV is not set), then python3 on PATH (not in \
             /nonexistent)"
        ),
        "{text}"
    );
    // `toolbox doctor` says the same, and still exits.
    let (_, stdout, _) = toolbox_with(ws.path(), &env, &["doctor"]);
    assert!(stdout.contains("no Python interpreter found"), "{stdout}");
}

/// Runs `script` (sh) in a new mount namespace, as root: `unshare` is util-linux's.
fn in_mount_namespace(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-ec", script])
        .output()
        .expect("unshare (util-linux) runs")
}

/// Shell words quoted for sh.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The lines of an MCP conversation: initialize, initialized, tools/list, and a
/// file_manager__list call.
fn mcp_lines() -> String {
    [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"ns-test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"file_manager__list","arguments":{"path":"."}}}"#,
    ]
    .join("\n")
        + "\n"
}

#[test]
fn where_the_build_python_is_hidden_the_binary_mcp_and_debians_python_work() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "x").unwrap();
    std::fs::write(ws.path().join("mcp.in"), mcp_lines()).unwrap();
    // The binary links no libpython at all.
    let dynamic = Command::new("readelf")
        .args(["-d", env!("CARGO_BIN_EXE_toolbox")])
        .output()
        .expect("readelf (binutils) runs");
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(dynamic.contains("NEEDED"), "{dynamic}");
    assert!(!dynamic.contains("libpython"), "{dynamic}");
    assert!(
        !dynamic.contains("RPATH") && !dynamic.contains("RUNPATH"),
        "{dynamic}"
    );

    // Hide the other Python's whole installation (its libpython and stdlib) behind empty
    // folders, and run with Debian's Python the only one on PATH.
    let other = other_python();
    let hidden: PathBuf = other.ancestors().nth(2).unwrap().to_path_buf();
    assert_ne!(
        hidden,
        Path::new("/usr"),
        "the tests' python3 must not be Debian's"
    );
    let exe = sh_quote(env!("CARGO_BIN_EXE_toolbox"));
    let probe_args = sh_quote(PROBE);
    let script = format!(
        "mount -t tmpfs none {hidden}\n\
         cd {ws}\n\
         export PATH=/usr/bin:/bin HOME=/root\n\
         unset VIRTUAL_ENV LD_LIBRARY_PATH TOOLBOX_CONFIG\n\
         ls -A {hidden} | wc -l\n\
         echo '== tools'; {exe} tools | grep -c __\n\
         echo '== list'; {exe} call file_manager__list '{{\"path\": \".\"}}'\n\
         echo; echo '== mcp'; {exe} mcp < mcp.in\n\
         echo '== python'; {exe} call --mode full run_python_code {probe_args}\n",
        hidden = sh_quote(hidden.to_str().unwrap()),
        ws = sh_quote(ws.path().to_str().unwrap()),
    );
    let out = in_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let mut sections = stdout.split("== ");
    assert_eq!(
        sections.next().map(str::trim),
        Some("0"),
        "hidden: {stdout}"
    );
    let tools = sections.next().unwrap();
    let count: usize = tools.trim_start_matches("tools").trim().parse().unwrap();
    assert!(count > 30, "{tools}");
    let list = sections.next().unwrap();
    assert!(
        list.contains("a.txt") && list.contains("\"done\""),
        "{list}"
    );
    let mcp = sections.next().unwrap();
    let replies: Vec<Value> = mcp
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("{l}")))
        .collect();
    assert_eq!(replies.len(), 3, "{mcp}");
    assert!(replies[1]["result"]["tools"].as_array().unwrap().len() > 30);
    assert!(replies[2]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("a.txt"));
    let python = sections.next().unwrap().trim_start_matches("python").trim();
    let envelope: Value = serde_json::from_str(python).unwrap_or_else(|_| panic!("{python}"));
    assert_embedded(0, &envelope, &identity(Path::new(DEBIAN_PYTHON), &[]));
}

#[test]
fn a_python_with_no_shared_libpython_runs_on_the_isolated_backend_and_says_so() {
    let ws = tempfile::tempdir().unwrap();
    // Debian's libpython hidden (a file that is a device is no library): only its static
    // python3 is left, which cannot be embedded.
    let libdir = "/usr/lib/x86_64-linux-gnu";
    let exe = sh_quote(env!("CARGO_BIN_EXE_toolbox"));
    let code = sh_quote(
        r#"{"code": "import os\nprint(os.path.basename(os.readlink('/proc/self/exe')))"}"#,
    );
    let script = format!(
        "for f in {libdir}/libpython3*.so*; do mount --bind /dev/null \"$f\"; done\n\
         cd {ws}\n\
         export PATH=/usr/bin:/bin HOME=/root\n\
         unset VIRTUAL_ENV LD_LIBRARY_PATH TOOLBOX_CONFIG\n\
         {exe} call --mode full run_python_code {code}\n\
         {exe} call --mode full run_python_code {code}\n",
        ws = sh_quote(ws.path().to_str().unwrap()),
    );
    let out = in_mount_namespace(&script);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let first: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let text = first["result"].as_str().unwrap();
    assert_eq!(first["status"], "done", "{text}");
    assert!(
        text.contains("this session runs on the isolated backend (a worker process), not the embedded one: the embedded backend needs a shared libpython"),
        "{text}"
    );
    assert!(text.contains("libpython3.11.so.1.0"), "{text}");
    // A worker process: python3, not toolbox.
    assert!(text.trim_end().ends_with("[stdout]\npython3.11"), "{text}");
    let _ = std::io::stdout().flush();
}

#[test]
fn call_examples_from_the_docs_work() {
    let ws = tempfile::tempdir().unwrap();
    let run = |tool: &str, args: &str| -> (i32, Value) {
        let out = Command::new(env!("CARGO_BIN_EXE_toolbox"))
            .current_dir(ws.path())
            .env_remove("TOOLBOX_CONFIG")
            .args(["call", "--mode", "full", tool, args])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        (
            out.status.code().unwrap_or(-1),
            serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        )
    };
    let (code, v) = run("run_python_code", r#"{"code": "x = 21\nx * 2"}"#);
    let result = v["result"].as_str().map(common::without_folder_note);
    assert_eq!((code, result), (0, Some("[result]\n42\n")));
    // An exception is a readable result (status done), with the traceback naming <cell>.
    let (code, v) = run("python", r#"{"code": "1/0"}"#);
    assert_eq!(code, 0, "{v}");
    let text = v["result"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("[error] ZeroDivisionError: division by zero"),
        "{text}"
    );
    assert!(text.contains("File \"<cell>\", line 1"), "{text}");
    // A refused install is an error (exit 1) naming the entry.
    let (code, v) = run(
        "kernel_install",
        r#"{"packages": ["-r", "requirements.txt"]}"#,
    );
    assert_eq!(code, 1, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap_or_default()
            .contains("refused package entry \"-r\""),
        "{v}"
    );
    let (code, v) = run(
        "registry_lookup",
        r#"{"query": "dumps", "package": "json"}"#,
    );
    assert_eq!(code, 0, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap_or_default()
            .contains("1. json.dumps [function]"),
        "{v}"
    );
}

#[test]
fn one_cpython_layer_embeds_every_python_3_10_and_later_this_machine_has() {
    let ws = tempfile::tempdir().unwrap();
    // pyenv's versions here (3.6 to 3.13), and Debian's.
    let mut pythons = vec![PathBuf::from(DEBIAN_PYTHON)];
    let versions = Path::new("/root/.pyenv/versions");
    if let Ok(entries) = std::fs::read_dir(versions) {
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path().join("bin/python3"))
            .filter(|p| p.is_file())
            .collect();
        found.sort();
        pythons.extend(found);
    }
    let mut embedded = std::collections::BTreeSet::new();
    for python in &pythons {
        let want = identity(python, &[]);
        let minor: Vec<u32> = want
            .version
            .split(['.', ' '])
            .take(2)
            .map(|n| n.parse().unwrap())
            .collect();
        let config = ws.path().join("operator.toml");
        std::fs::write(
            &config,
            format!("[python]\ninterpreter = \"{}\"\n", python.display()),
        )
        .unwrap();
        let env = [
            ("PATH", "/usr/bin:/bin"),
            ("TOOLBOX_CONFIG", config.to_str().unwrap()),
        ];
        let (code, envelope) = probe(ws.path(), &env);
        if minor < vec![3, 9] {
            // Older ones are refused by name, on every backend.
            assert_eq!(code, 1, "{envelope}");
            let text = envelope["result"].as_str().unwrap();
            assert!(text.contains("need Python 3.9 or later"), "{text}");
            continue;
        }
        if minor < vec![3, 10] {
            // 3.9 is older than the layer's stable ABI: it runs in a worker, and says so.
            assert_eq!(code, 0, "{envelope}");
            let text = envelope["result"].as_str().unwrap();
            assert!(text.contains("needs CPython 3.10 or later"), "{text}");
            assert!(text.trim_end().ends_with("python3.9"), "{text}");
            continue;
        }
        assert_embedded(code, &envelope, &want);
        embedded.insert(format!("{}.{}", minor[0], minor[1]));
    }
    // Debian's 3.11, and pyenv's 3.10, 3.11, 3.12 and 3.13 on these machines.
    assert!(
        embedded.len() >= 3,
        "embedded only {embedded:?} of {pythons:?}"
    );
}
