//! The executor pipeline end to end, with test providers standing in for real tools:
//! routing, permission modes, approvals, timeouts, cancellation, panics, spooling,
//! trajectories, tracing and concurrency.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value};
use toolbox_core::{Arg, Args, ToolInfo, ToolOutput, ToolRisk};
use toolbox_executor::trajectory::{read_trajectory, trajectory_path};
use toolbox_executor::{
    ApprovalDecision, CallStatus, ErrorKind, ExecutorConfig, PermissionMode, Registry,
    ToolExecutor, ToolRequest,
};
use toolbox_host::{EventSink, ToolContext, ToolEvent, ToolProvider};

struct TestTools;

const TEXT: Arg = Arg::string("text").aliases(&["content"]).required();
const MS: Arg = Arg::integer("ms", 0, None).default(10);
const N: Arg = Arg::integer("n", 0, None).default(0);

#[async_trait]
impl ToolProvider for TestTools {
    fn name(&self) -> &str {
        "testing"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        let obj = json!({"type": "object"});
        vec![
            ToolInfo::new("echo", "Echo text.", obj.clone())
                .aliases(&["say"])
                .toolsets(&["basic"]),
            ToolInfo::new("sleepy", "Sleeps ms.", obj.clone()),
            ToolInfo::new("boom", "Panics.", obj.clone()),
            ToolInfo::new("stubborn", "Ignores cancellation.", obj.clone()),
            ToolInfo::new("fail", "Fails.", obj.clone()),
            ToolInfo::new("big", "Returns n chars.", obj.clone()),
            ToolInfo::new("streamer", "Spools its own output.", obj.clone()),
            ToolInfo::new("touch", "Writes.", obj.clone()).risk(ToolRisk::FileWrite),
            ToolInfo::new("sh", "Shell.", obj.clone()).risk(ToolRisk::Command),
            ToolInfo::new("py", "Python.", obj.clone()).risk(ToolRisk::Code),
            // Served by a runtime, as call_agent is: the executor refuses it by the flag.
            ToolInfo::new("relay", "Intercepted.", obj.clone()).intercepted(),
            // Both return a structured value; only the first told clients its shape.
            ToolInfo::new("shaped", "Structured.", obj.clone())
                .output_schema(json!({"type": "object"})),
            ToolInfo::new("unshaped", "Structured, undeclared.", obj),
        ]
    }

    async fn call_tool(
        &self,
        tool: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> anyhow::Result<ToolOutput> {
        let a = Args::new(tool, &args)?;
        let value = match tool {
            "shaped" | "unshaped" => {
                return Ok(ToolOutput::new("two rows", json!({"rows": 2})));
            }
            "echo" => Ok(Value::String(TEXT.str(&a)?.to_string())),
            "sleepy" => {
                let ms = MS.u64(&a)?;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!({"slept_ms": ms})),
                    _ = ctx.cancel.cancelled() => anyhow::bail!("cancelled inside the tool"),
                }
            }
            "boom" => panic!("provider exploded"),
            "stubborn" => {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok(Value::Null)
            }
            "fail" => anyhow::bail!("fail: the disk is on fire"),
            "big" => {
                let n = N.u64(&a)? as usize;
                Ok(Value::String("é".repeat(n)))
            }
            "streamer" => {
                use std::io::Write;
                let (mut file, _rel) = ctx.create_spool_file()?;
                for i in 0..10_000 {
                    writeln!(file, "line {i}")?;
                }
                Ok(Value::String(
                    "line 0\n[... kept in the spool file ...]\nline 9999".into(),
                ))
            }
            _ => Ok(Value::String(format!(
                "{tool} ran in session {}",
                ctx.session_id
            ))),
        };
        value.map(ToolOutput::from)
    }
}

fn setup(mode: PermissionMode, events: EventSink) -> (tempfile::TempDir, ToolExecutor) {
    let dir = tempfile::tempdir().unwrap();
    let exec = executor_in(dir.path(), mode, events);
    (dir, exec)
}

/// Another executor over an existing workspace (toolbox started again).
fn setup_in(root: &std::path::Path, mode: PermissionMode) -> ((), ToolExecutor) {
    ((), executor_in(root, mode, EventSink::none()))
}

fn executor_in(root: &std::path::Path, mode: PermissionMode, events: EventSink) -> ToolExecutor {
    let mut config = ExecutorConfig::new(root);
    config.permissions.mode = mode;
    config.approval_timeout = Duration::from_millis(300);
    let registry =
        Registry::from_providers([Arc::new(TestTools) as Arc<dyn ToolProvider>]).unwrap();
    ToolExecutor::with_registry(config, registry, events).unwrap()
}

fn req(id: &str, name: &str, args: Value) -> ToolRequest {
    ToolRequest::new(id, name, args).session("s1")
}

#[tokio::test]
async fn a_structured_value_goes_out_only_from_a_tool_that_declared_its_shape() {
    let (_d, exec) = setup(PermissionMode::Full, EventSink::none());
    let shaped = exec.run(req("1", "shaped", json!({}))).await;
    assert_eq!(shaped.result, "two rows");
    assert_eq!(shaped.structured, Some(json!({"rows": 2})));
    let unshaped = exec.run(req("2", "unshaped", json!({}))).await;
    assert_eq!(unshaped.result, "two rows");
    assert_eq!(unshaped.structured, None, "no client was told its shape");
    // A JSON value that is not a string reaches the model as pretty JSON.
    let slept = exec.run(req("3", "sleepy", json!({"ms": 1}))).await;
    assert_eq!(slept.result, "{\n  \"slept_ms\": 1\n}");
    assert_eq!(slept.structured, None);
}

#[tokio::test]
async fn routing_aliases_and_unknown_tools() {
    let (_d, exec) = setup(PermissionMode::Full, EventSink::none());
    let info = exec.run(req("1", "say", json!({"content": "hi"}))).await;
    assert_eq!(info.status, CallStatus::Done);
    assert_eq!(
        info.tool, "echo",
        "aliases are recorded under the canonical name"
    );
    assert_eq!(info.envelope(), r#"{"result":"hi","status":"done"}"#);

    let info = exec.run(req("2", "nope", json!({}))).await;
    assert_eq!(info.status, CallStatus::Error);
    assert_eq!(info.result, "unknown tool: nope");
    assert_eq!(info.error_kind, Some(ErrorKind::UnknownTool));

    let info = exec.run(req("3", "relay", json!({}))).await;
    assert_eq!(info.status, CallStatus::Error);
    assert_eq!(info.error_kind, Some(ErrorKind::InvalidRequest));
    assert!(
        info.result.contains("must intercept it before dispatch"),
        "{}",
        info.result
    );
    // The executor names no tool: call_agent, where no provider declares it, is unknown.
    let info = exec.run(req("3b", "call_agent", json!({}))).await;
    assert_eq!(info.result, "unknown tool: call_agent");

    let info = exec.run(req("4", "echo", json!({}))).await;
    assert_eq!(info.result, "echo requires text");

    // Chat Completions sends arguments as a JSON string.
    let info = exec
        .run(req("5", "echo", json!("{\"text\": \"from a string\"}")))
        .await;
    assert_eq!(info.result, "from a string");
    let info = exec.run(req("6", "echo", json!("{not json"))).await;
    assert_eq!(info.error_kind, Some(ErrorKind::InvalidRequest));
    assert!(
        info.result.contains("arguments are not valid JSON"),
        "{}",
        info.result
    );

    let info = exec
        .run(ToolRequest::new("7", "echo", json!({"text": "x"})).session("../evil"))
        .await;
    assert_eq!(info.error_kind, Some(ErrorKind::InvalidRequest));
    assert!(
        info.result.contains("invalid session id"),
        "{}",
        info.result
    );
}

#[tokio::test]
async fn tool_errors_and_panics_become_error_results_and_the_executor_keeps_serving() {
    let (_d, exec) = setup(PermissionMode::Full, EventSink::none());
    let info = exec.run(req("1", "fail", json!({}))).await;
    assert_eq!(info.status, CallStatus::Error);
    assert_eq!(info.result, "fail: the disk is on fire");

    for i in 0..3 {
        let info = exec.run(req(&format!("p{i}"), "boom", json!({}))).await;
        assert_eq!(info.status, CallStatus::Error);
        assert_eq!(info.error_kind, Some(ErrorKind::Panic));
        assert!(
            info.result.contains("panicked: provider exploded"),
            "{}",
            info.result
        );
    }
    let info = exec
        .run(req("after", "echo", json!({"text": "still here"})))
        .await;
    assert_eq!(info.result, "still here");
}

#[tokio::test]
async fn read_only_hides_and_refuses_risky_tools() {
    let (_d, exec) = setup(PermissionMode::ReadOnly, EventSink::none());
    let visible: Vec<_> = exec
        .visible_tools()
        .iter()
        .map(|t| t.info.name.clone())
        .collect();
    assert!(visible.contains(&"echo".to_string()));
    for hidden in ["touch", "sh", "py"] {
        assert!(
            !visible.contains(&hidden.to_string()),
            "{hidden} visible in read_only"
        );
        let info = exec.run(req("1", hidden, json!({}))).await;
        assert_eq!(info.status, CallStatus::Error);
        assert_eq!(info.error_kind, Some(ErrorKind::Denied));
        assert!(
            info.result
                .contains("not allowed in permission mode read_only"),
            "{}",
            info.result
        );
    }
}

#[tokio::test]
async fn legacy_flags_win_over_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config
        .apply_toml("permission_mode = \"full\"\nallow_shell = false\n")
        .unwrap();
    let registry =
        Registry::from_providers([Arc::new(TestTools) as Arc<dyn ToolProvider>]).unwrap();
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap();
    let info = exec.run(req("1", "sh", json!({}))).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    assert!(
        info.result.contains("allow_shell = false"),
        "{}",
        info.result
    );
    assert!(exec.run(req("2", "touch", json!({}))).await.is_done());

    let mut config = ExecutorConfig::new(dir.path());
    config
        .apply_toml("permission_mode = \"read_only\"\nallow_file_write = true\n")
        .unwrap();
    let registry =
        Registry::from_providers([Arc::new(TestTools) as Arc<dyn ToolProvider>]).unwrap();
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap();
    assert!(exec.run(req("3", "touch", json!({}))).await.is_done());
    assert!(!exec.run(req("4", "sh", json!({}))).await.is_done());
}

type Slot = Arc<Mutex<Option<ToolExecutor>>>;
type Seen = Arc<Mutex<Vec<ToolEvent>>>;

/// An event sink that answers approval requests through the executor it belongs to.
fn approver(decision: ApprovalDecision) -> (EventSink, Slot, Seen) {
    let slot: Slot = Arc::default();
    let seen: Seen = Arc::default();
    let (slot2, seen2) = (slot.clone(), seen.clone());
    let sink = EventSink::new(move |event| {
        seen2.lock().unwrap().push(event.clone());
        if let ToolEvent::ApprovalRequested(r) = event {
            let exec = slot2.lock().unwrap().clone().unwrap();
            assert!(exec.respond_approval(&r.session_id, &r.call_id, decision));
        }
    });
    (sink, slot, seen)
}

#[tokio::test]
async fn auto_mode_asks_and_honours_each_answer() {
    // approve
    let (sink, slot, seen) = approver(ApprovalDecision::Approve);
    let (_d, exec) = setup(PermissionMode::Auto, sink);
    *slot.lock().unwrap() = Some(exec.clone());
    assert!(exec
        .run(req("a1", "sh", json!({"cmd": "ls"})))
        .await
        .is_done());
    assert!(exec
        .run(req("a2", "echo", json!({"text": "read tools never ask"})))
        .await
        .is_done());
    let asked: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            ToolEvent::ApprovalRequested(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].tool, "sh");
    assert_eq!(asked[0].call_id, "a1");
    assert_eq!(asked[0].session_id, "s1");
    assert_eq!(asked[0].risk, ToolRisk::Command);
    assert_eq!(asked[0].arguments, json!({"cmd": "ls"}));

    // deny
    let (sink, slot, _) = approver(ApprovalDecision::Deny);
    let (_d, exec) = setup(PermissionMode::Auto, sink);
    *slot.lock().unwrap() = Some(exec.clone());
    let info = exec.run(req("d1", "touch", json!({}))).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    assert_eq!(info.result, "the user denied tool touch");

    // approve for the session: asked once per tool per session
    let (sink, slot, seen) = approver(ApprovalDecision::ApproveForSession);
    let (_d, exec) = setup(PermissionMode::Auto, sink);
    *slot.lock().unwrap() = Some(exec.clone());
    for i in 0..3 {
        assert!(exec
            .run(req(&format!("s{i}"), "py", json!({})))
            .await
            .is_done());
    }
    assert!(exec
        .run(ToolRequest::new("other", "py", json!({})).session("s2"))
        .await
        .is_done());
    let asks = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, ToolEvent::ApprovalRequested(_)))
        .count();
    assert_eq!(asks, 2, "once for s1, once for s2");
}

#[tokio::test]
async fn a_denial_may_say_why() {
    let slot: Slot = Arc::default();
    let slot2 = slot.clone();
    let sink = EventSink::new(move |event| {
        if let ToolEvent::ApprovalRequested(r) = event {
            let exec = slot2.lock().unwrap().clone().unwrap();
            assert!(exec.deny_approval(&r.session_id, &r.call_id, "nobody can be asked here"));
        }
    });
    let (_d, exec) = setup(PermissionMode::Auto, sink);
    *slot.lock().unwrap() = Some(exec.clone());
    let info = exec.run(req("r1", "touch", json!({}))).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    assert_eq!(info.result, "nobody can be asked here");
}

#[tokio::test]
async fn unanswered_approval_is_denied_after_the_timeout() {
    let (_d, exec) = setup(PermissionMode::Auto, EventSink::none());
    let info = exec.run(req("t1", "sh", json!({}))).await;
    assert_eq!(info.error_kind, Some(ErrorKind::Denied));
    assert!(
        info.result.contains("none came within 300 ms"),
        "{}",
        info.result
    );
    assert!(
        !exec.respond_approval("s1", "t1", ApprovalDecision::Approve),
        "request was forgotten"
    );
}

#[tokio::test]
async fn timeouts_and_cancellation_say_which() {
    let (_d, exec) = setup(PermissionMode::Full, EventSink::none());
    let info = exec
        .run(req("t", "sleepy", json!({"ms": 10_000})).timeout(Duration::from_millis(100)))
        .await;
    assert_eq!(info.error_kind, Some(ErrorKind::Timeout));
    // The tool saw its token cancelled and reported back within the grace.
    assert_eq!(
        info.result,
        "tool sleepy timed out after 100 ms\ncancelled inside the tool"
    );

    let token = toolbox_host::CancellationToken::new();
    let canceller = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let info = exec
        .run_cancellable(req("c", "sleepy", json!({"ms": 10_000})), token)
        .await;
    assert_eq!(info.error_kind, Some(ErrorKind::Cancelled));
    assert_eq!(
        info.result,
        "tool sleepy was cancelled\ncancelled inside the tool"
    );
    assert!(info.elapsed_ms < 5_000);
}

#[tokio::test]
async fn a_tool_that_ignores_cancellation_is_dropped_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    config.apply_toml("cancel_grace_ms = 200").unwrap();
    let registry =
        Registry::from_providers([Arc::new(TestTools) as Arc<dyn ToolProvider>]).unwrap();
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap();
    let info = exec
        .run(req("s", "stubborn", json!({})).timeout(Duration::from_millis(100)))
        .await;
    assert_eq!(info.error_kind, Some(ErrorKind::Timeout));
    assert_eq!(info.result, "tool stubborn timed out after 100 ms");
    // 60 s of sleep were cut short: timeout plus grace, with generous slack.
    assert!(info.elapsed_ms < 20_000, "{}", info.elapsed_ms);
}

#[tokio::test]
async fn an_unrecorded_call_is_recorded_once_when_told_or_when_dropped() {
    let (dir, exec) = setup(PermissionMode::Full, EventSink::none());
    let path = trajectory_path(dir.path(), "s1");
    let lines = || read_trajectory(&path).map(|c| c.len()).unwrap_or(0);
    let finished = exec
        .run_unrecorded(
            req("a", "say", json!({"content": "hi"})),
            Default::default(),
        )
        .await;
    assert_eq!(finished.info().status, CallStatus::Done);
    // Not written until the caller has sent its reply.
    assert_eq!(lines(), 0);
    let info = finished.record();
    assert_eq!(info.id, "a");
    assert_eq!(lines(), 1);
    // A caller that returns early (or panics) still records the call, once.
    let finished = exec
        .run_unrecorded(
            req("b", "say", json!({"content": "hi"})),
            Default::default(),
        )
        .await;
    drop(finished);
    let calls = read_trajectory(&path).unwrap();
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    // A call refused for its session id has nowhere to be recorded.
    let bad = ToolRequest::new("c", "say", json!({"content": "hi"})).session("../x");
    let finished = exec.run_unrecorded(bad, Default::default()).await;
    assert_eq!(finished.record().status, CallStatus::Error);
    assert_eq!(read_trajectory(&path).unwrap().len(), 2);
}

#[tokio::test]
async fn large_results_are_spooled_and_the_trajectory_records_everything() {
    let (dir, exec) = setup(PermissionMode::Full, EventSink::none());
    let info = exec
        .run(req("call/big:1", "big", json!({"n": 20_000})))
        .await;
    assert!(info.is_done());
    let spool = info.spool_path.clone().expect("spooled");
    assert!(spool.starts_with(".toolbox/tool_outputs/"), "{spool}");
    let name = spool.rsplit('/').next().unwrap();
    let (ms, rest) = name.split_once("__").unwrap();
    assert!(ms.parse::<u128>().is_ok(), "{name}");
    assert_eq!(rest, "call_big_1.txt");
    let on_disk = std::fs::read_to_string(dir.path().join(&spool)).unwrap();
    assert_eq!(on_disk, "é".repeat(20_000), "byte-exact");
    assert!(info.result.starts_with(&"é".repeat(2000)));
    assert!(!info.result.starts_with(&"é".repeat(2001)));
    // No tool of this registry reads files, so the preview names none.
    assert!(info.result.ends_with(&format!(
        "{}\n\n[Full output (40000 bytes) spooled to {spool}.]",
        "é".repeat(500)
    )));

    // Just under the threshold stays inline.
    let info = exec.run(req("small", "big", json!({"n": 8191}))).await;
    assert!(info.spool_path.is_none());
    assert_eq!(info.result.len(), 16_382);

    let calls = read_trajectory(&trajectory_path(dir.path(), "s1")).unwrap();
    assert_eq!(calls.len(), 2);
    let first = &calls[0];
    assert_eq!(first.id, "call/big:1");
    assert_eq!(first.tool, "big");
    assert_eq!(first.arguments, json!({"n": 20_000}));
    assert_eq!(first.status, CallStatus::Done);
    assert_eq!(first.spool_path.as_deref(), Some(spool.as_str()));
    assert!(
        first.started_at.ends_with('Z') && first.started_at.contains('T'),
        "{}",
        first.started_at
    );
    assert_eq!(calls[1].result.len(), 16_382);
}

#[tokio::test]
async fn a_tool_can_hand_over_its_own_spool_file() {
    let (dir, exec) = setup(PermissionMode::Full, EventSink::none());
    let info = exec.run(req("s-1", "streamer", json!({}))).await;
    assert!(info.is_done(), "{}", info.result);
    let path = info
        .spool_path
        .clone()
        .unwrap_or_else(|| panic!("no spool path recorded: {info:?}"));
    let on_disk = std::fs::read_to_string(dir.path().join(&path)).unwrap();
    assert_eq!(on_disk.lines().count(), 10_000);
    assert!(
        info.result.starts_with("line 0\n[... kept"),
        "{}",
        info.result
    );
    assert!(
        info.result.contains(&format!(
            "[Full output ({} bytes) spooled to {path}",
            on_disk.len()
        )),
        "{}",
        info.result
    );
    let files = std::fs::read_dir(dir.path().join(".toolbox/tool_outputs"))
        .unwrap()
        .count();
    assert_eq!(files, 1, "the executor did not spool a second copy");
}

#[tokio::test]
async fn trajectory_reader_skips_torn_lines_and_the_writer_starts_fresh_lines() {
    let (dir, exec) = setup(PermissionMode::Full, EventSink::none());
    for i in 0..3 {
        exec.run(req(
            &format!("c{i}"),
            "echo",
            json!({"text": i.to_string()}),
        ))
        .await;
    }
    let path = trajectory_path(dir.path(), "s1");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"id\":\"torn\",\"tool\":\"ec");
    std::fs::write(&path, &text).unwrap();
    let calls = read_trajectory(&path).unwrap();
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["c0", "c1", "c2"]
    );
    // A new executor (toolbox started again after the crash) appends on a fresh line: the
    // next record is not glued onto the torn one.
    let (_, exec2) = setup_in(dir.path(), PermissionMode::Full);
    exec2.run(req("c3", "echo", json!({"text": "3"}))).await;
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(after.contains("\"tool\":\"ec\n{"), "{after}");
    let calls = read_trajectory(&path).unwrap();
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["c0", "c1", "c2", "c3"]
    );
    std::fs::write(&path, &text).unwrap();

    // Corruption in the middle is reported, not skipped.
    let broken = text.replacen("{\"id\":\"c1\"", "garbage{", 1);
    std::fs::write(&path, broken).unwrap();
    let err = format!("{:#}", read_trajectory(&path).unwrap_err());
    assert!(err.contains("line 2"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_on_one_executor() {
    let (dir, exec) = setup(PermissionMode::Full, EventSink::none());
    let started = std::time::Instant::now();
    let mut handles = Vec::new();
    for i in 0..64 {
        let exec = exec.clone();
        handles.push(tokio::spawn(async move {
            let name = if i % 2 == 0 { "sleepy" } else { "big" };
            let args = if i % 2 == 0 {
                json!({"ms": 200})
            } else {
                json!({"n": 20_000})
            };
            exec.run(req(&format!("c{i}"), name, args)).await
        }));
    }
    for h in handles {
        assert!(h.await.unwrap().is_done());
    }
    // 32 sleeps of 200 ms in sequence would take 6.4 s; concurrently well under that.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "calls did not overlap"
    );
    let calls = read_trajectory(&trajectory_path(dir.path(), "s1")).unwrap();
    assert_eq!(calls.len(), 64, "every line intact");
    let spooled = std::fs::read_dir(dir.path().join(".toolbox/tool_outputs"))
        .unwrap()
        .count();
    assert_eq!(spooled, 32);
}

#[tokio::test]
async fn trajectory_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    config.trajectory = false;
    let registry =
        Registry::from_providers([Arc::new(TestTools) as Arc<dyn ToolProvider>]).unwrap();
    let exec = ToolExecutor::with_registry(config, registry, EventSink::none()).unwrap();
    assert!(exec
        .run(req("1", "echo", json!({"text": "x"})))
        .await
        .is_done());
    assert!(!dir.path().join(".toolbox/trajectories").exists());
}

#[test]
fn duplicate_tool_names_are_refused() {
    let err = Registry::from_providers([
        Arc::new(TestTools) as Arc<dyn ToolProvider>,
        Arc::new(TestTools) as Arc<dyn ToolProvider>,
    ])
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("already taken"), "{err}");
}

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn tracing_events_at_start_and_finish() {
    // The subscriber is the process's global one: a thread-local default races with the other
    // tests' threads, which can cache a callsite as uninteresting while no subscriber is
    // theirs, so an event of this test could go unrecorded. Lines are told apart by call id.
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    let captured = CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("toolbox=debug"))
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("no global subscriber yet");
            captured
        })
        .clone();
    let (_d, exec) = setup(PermissionMode::Full, EventSink::none());
    exec.run(req("trace-1", "echo", json!({"text": "abc"})))
        .await;
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let ours: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("tool_id=trace-1"))
        .collect();
    assert!(
        ours.iter().any(|l| l.contains("tool execution started")),
        "{log}"
    );
    let finished = ours
        .iter()
        .find(|l| l.contains("tool execution finished"))
        .expect(&log);
    for field in [
        "tool_id=trace-1",
        "tool_name=echo",
        "status=\"done\"",
        "elapsed_ms=",
        "result_chars=3",
    ] {
        assert!(finished.contains(field), "{field} missing in {finished}");
    }
}

/// Two calls waiting with one session and call id could not be told apart by whoever
/// answers: the second is refused at once, and the first still gets its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_call_with_a_waiting_calls_id_is_refused() {
    let (_d, exec) = setup(PermissionMode::Auto, EventSink::none());
    let first = tokio::spawn({
        let exec = exec.clone();
        async move { exec.run(req("same", "touch", json!({}))).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while exec.pending_approvals("s1").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the first call never asked"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = exec.run(req("same", "touch", json!({}))).await;
    assert_eq!(
        second.error_kind,
        Some(ErrorKind::InvalidRequest),
        "{second:?}"
    );
    assert!(
        second.result.contains("already waiting for approval"),
        "{}",
        second.result
    );
    assert!(exec.respond_approval("s1", "same", ApprovalDecision::Approve));
    let first = first.await.unwrap();
    assert!(first.is_done(), "{}", first.result);
}
