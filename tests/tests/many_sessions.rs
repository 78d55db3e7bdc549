//! Thousands of sessions under a low descriptor limit: every call is still recorded in its
//! session's trajectory (the executor keeps a bounded number of trajectory files open).
//!
//! Its own test binary: the limit is set for the whole process.

use serde_json::json;
use toolbox as _;
use toolbox_executor::{trajectory, PermissionMode, ToolRequest};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_sessions_under_a_1024_descriptor_limit_are_all_recorded() {
    let limit = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: a plain struct for one system call; only this process (this test binary) is
    // limited.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let (dir, exec) = toolbox_tests::executor(PermissionMode::ReadOnly);
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    for i in 0..2000 {
        let info = exec
            .run(
                ToolRequest::new(
                    format!("c{i}"),
                    "file_manager__read",
                    json!({"path": "a.txt"}),
                )
                .session(format!("s{i}")),
            )
            .await;
        assert!(info.is_done(), "call {i}: {}", info.result);
    }
    // A second call in an early session (its file was closed long ago) appends to it.
    let info = exec
        .run(
            ToolRequest::new("again", "file_manager__read", json!({"path": "a.txt"})).session("s0"),
        )
        .await;
    assert!(info.is_done(), "{}", info.result);
    for i in [0, 1, 999, 1999] {
        let sid = toolbox_core::SessionId::parse(&format!("s{i}")).unwrap();
        let calls = trajectory::read_session_trajectory(exec.workspace(), &sid).unwrap();
        assert_eq!(calls.len(), if i == 0 { 2 } else { 1 }, "session s{i}");
    }
    let sessions = std::fs::read_dir(dir.path().join(".toolbox/trajectories"))
        .unwrap()
        .count();
    assert_eq!(sessions, 2000);
}
