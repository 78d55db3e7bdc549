//! Python sessions give their state back: past `[python] max_live_sessions` the session idle
//! the longest, and any session idle past `[python] session_idle_ms`, loses its namespace,
//! worker or kernel, and its next call says so. One test, so that no other test's sessions
//! share the process-wide rule while it runs.

use std::time::Duration;

use serde_json::json;
use toolbox::executor::{ToolCallInfo, ToolExecutor};
use toolbox_executor::PermissionMode;
use toolbox_tests::{call_in, executor_toml, test_python};

async fn run(exec: &ToolExecutor, session: &str, code: &str) -> ToolCallInfo {
    call_in(exec, session, "run_python_code", json!({ "code": code })).await
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

/// The last line of the code's stdout, as a pid.
fn pid_of(info: &ToolCallInfo) -> i32 {
    info.result
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next_back()
        .unwrap_or_else(|| panic!("no pid in {}", info.result))
}

async fn wait_dead(pid: i32) -> bool {
    for _ in 0..100 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_surplus_sessions_give_their_state_back_on_every_backend() {
    for (backend, thing) in [
        ("embedded", "Python namespace was cleared"),
        ("isolated", "previous Python worker was stopped"),
    ] {
        let (_dir, exec) = executor_toml(
            PermissionMode::Full,
            &format!(
                "[python]\nbackend = \"{backend}\"\nsession_idle_ms = 3000\nmax_live_sessions = 2\n"
            ),
        );
        let a = run(&exec, "a", "import os\nx = 'a'\nprint(os.getpid())").await;
        let a_pid = pid_of(&a);
        run(&exec, "b", "x = 'b'").await;
        // A third session: a, idle the longest, makes room.
        let c = run(&exec, "c", "x = 'c'\nprint(x)").await;
        assert!(c.result.contains('c'), "{backend}: {}", c.result);
        let again = run(&exec, "a", "print(x)").await;
        assert!(
            again.result.contains("NameError"),
            "{backend}: {}",
            again.result
        );
        let room =
            format!("{thing} to make room for other sessions ([python] max_live_sessions = 2)");
        assert!(again.result.contains(&room), "{backend}: {}", again.result);
        if backend == "isolated" {
            assert!(
                wait_dead(a_pid).await,
                "{backend}: worker {a_pid} still runs"
            );
        }
        // b was idle the longest when a came back: it made room then. c and a are live.
        let c = run(&exec, "c", "print(x)").await;
        assert!(!c.result.contains("NameError"), "{backend}: {}", c.result);
        let b = run(&exec, "b", "print(x)").await;
        assert!(b.result.contains(&room), "{backend}: {}", b.result);

        // Idle past session_idle_ms: cleared when the next session comes.
        tokio::time::sleep(Duration::from_millis(3300)).await;
        run(&exec, "d", "1").await;
        let c = run(&exec, "c", "print(x)").await;
        assert!(c.result.contains("NameError"), "{backend}: {}", c.result);
        assert!(
            c.result.contains(&format!(
                "{thing} after 3s without a call ([python] session_idle_ms)"
            )),
            "{backend}: {}",
            c.result
        );
        // Said once: the next call of the session is an ordinary one.
        let c = run(&exec, "c", "x = 1\nprint(x)").await;
        assert!(
            !c.result.contains("session_idle_ms"),
            "{backend}: {}",
            c.result
        );
    }

    // Kernels toolbox starts: a surplus one is shut down.
    let venv = test_python()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let (_dir, exec) = executor_toml(
        PermissionMode::Full,
        &format!(
            "[python]\nbackend = \"jupyter\"\nkernel_name = \"python3\"\nvenv = {:?}\nmax_live_sessions = 1\n",
            venv.to_str().unwrap()
        ),
    );
    let a = run(&exec, "a", "import os\nx = 'a'\nprint(os.getpid())").await;
    assert_eq!(a.status, toolbox_executor::CallStatus::Done, "{}", a.result);
    let a_pid = pid_of(&a);
    let b = run(&exec, "b", "x = 'b'").await;
    assert_eq!(b.status, toolbox_executor::CallStatus::Done, "{}", b.result);
    assert!(wait_dead(a_pid).await, "kernel {a_pid} still runs");
    let again = run(&exec, "a", "print(x)").await;
    assert!(again.result.contains("NameError"), "{}", again.result);
    assert!(
        again.result.contains(
            "kernel was stopped to make room for other sessions ([python] max_live_sessions = 1)"
        ),
        "{}",
        again.result
    );
}
