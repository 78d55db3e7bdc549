//! Helpers shared by the binary's integration tests (`mod common;` in each test file).

// Each test file uses some of these helpers, never all.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

/// The real `toolbox` binary run in `ws` with a clean environment: no `TOOLBOX_*`,
/// `RUST_LOG`, `OTEL_*` or `TRACEPARENT` from the developer's shell, no user config file (a developer's own
/// `~/.config/toolbox/config.toml` must not change what tests see), stdin from /dev/null.
pub fn toolbox(ws: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_toolbox"));
    cmd.current_dir(ws);
    for (key, _) in std::env::vars() {
        // Nor a developer's OpenTelemetry settings or trace: no test exports unless it asks.
        if key.starts_with("TOOLBOX_")
            || key == "RUST_LOG"
            || key.starts_with("OTEL_")
            || key == "TRACEPARENT"
            || key == "TRACESTATE"
        {
            cmd.env_remove(key);
        }
    }
    cmd.env("XDG_CONFIG_HOME", ws.join(".no-user-config"));
    cmd.stdin(Stdio::null());
    cmd
}

/// Limits `cmd`'s child to `limit` open descriptors (soft and hard), for the tests that
/// flood a listener.
#[allow(dead_code)]
pub fn with_fd_limit(cmd: &mut Command, limit: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; it limits only the child.
    unsafe {
        cmd.pre_exec(move || {
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Reads `stdout` line by line on a thread of its own, so a test can wait for a reply with a
/// timeout (`recv_timeout`) instead of blocking forever on a broken server.
pub fn line_reader(stdout: std::process::ChildStdout) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    lines
}

/// `toolbox mcp --mode full` serving the workspace `ws` (also its working directory), with
/// stderr discarded; the caller picks stdin and stdout.
pub fn mcp_full(ws: &Path) -> Command {
    let mut cmd = toolbox(ws);
    cmd.args(["mcp", "--mode", "full", "--workspace"])
        .arg(ws)
        .stderr(Stdio::null());
    cmd
}

/// The real binary on a real terminal: `script` gives it a pseudo-terminal, what it prints
/// there (stdout, stderr and /dev/tty alike) is collected as the screen, and keys are typed
/// into it. The environment is cleaned as [`toolbox`] cleans it.
pub struct Terminal {
    child: std::process::Child,
    keys: Option<std::process::ChildStdin>,
    screen: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Terminal {
    /// Runs `toolbox ARGS` (a shell-quoted argument string) in `ws` on a terminal.
    pub fn start(ws: &Path, args: &str, env: &[(&str, &str)]) -> Terminal {
        assert!(
            Path::new("/usr/bin/script").exists(),
            "this test needs /usr/bin/script (bsdutils / util-linux); run scripts/test.sh"
        );
        let command = format!("{} {args}", env!("CARGO_BIN_EXE_toolbox"));
        let mut script = Command::new("/usr/bin/script");
        for (key, _) in std::env::vars() {
            // Nor a developer's OpenTelemetry settings or trace: no test exports unless it asks.
            if key.starts_with("TOOLBOX_")
                || key == "RUST_LOG"
                || key.starts_with("OTEL_")
                || key == "TRACEPARENT"
                || key == "TRACESTATE"
            {
                script.env_remove(key);
            }
        }
        script
            .args(["-qfec", &command, "/dev/null"])
            .current_dir(ws)
            .env("XDG_CONFIG_HOME", ws.join(".no-user-config"))
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = script.spawn().expect("start script(1)");
        let screen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            use std::io::Read;
            let mut out = child.stdout.take().unwrap();
            let screen = screen.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = out.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    screen
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let keys = child.stdin.take();
        Terminal {
            child,
            keys,
            screen,
        }
    }

    /// Everything shown so far.
    pub fn screen(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) until `needle` has been shown `times` times; the screen.
    pub fn wait_for(&self, needle: &str, times: usize, limit: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let screen = self.screen();
            if screen.matches(needle).count() >= times {
                return screen;
            }
            if std::time::Instant::now() >= deadline {
                panic!("{needle:?} was not shown {times} times within {limit:?}; the screen:\n{screen}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Types `keys` (include the `\n`).
    pub fn type_keys(&mut self, keys: &str) {
        use std::io::Write;
        let stdin = self.keys.as_mut().expect("the terminal is still open");
        stdin.write_all(keys.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Waits (at most `limit`) for the program to exit; its exit code and the whole screen.
    pub fn finish(mut self, limit: std::time::Duration) -> (Option<i32>, String) {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Let the reader take the last bytes.
                std::thread::sleep(std::time::Duration::from_millis(100));
                self.keys.take();
                return (status.code(), self.screen());
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "the program did not exit within {limit:?}; the screen:\n{}",
                    self.screen()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `run_python_code` result without the note a new session's first result begins with
/// (where Python runs: tests/tests/python.rs checks it).
pub fn without_folder_note(text: &str) -> &str {
    match text.strip_prefix("note: Python runs in this session's scratchpad") {
        Some(rest) => rest.split_once('\n').map_or("", |(_, r)| r),
        None => text,
    }
}
