//! The runtime's turn loop with real providers and an in-process model (no HTTP): approvals
//! answered through the runtime, approve-for-session, late and unknown answers, cancelling a
//! turn with a running command, a turn never above the process's mode, and the event stream.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use toolbox as _;
use toolbox_core::SessionId;
use toolbox_executor::{
    ApprovalDecision, ErrorKind, ExecutorConfig, PermissionMode, SchemaFormat, ToolExecutor,
};
use toolbox_runtime::llm::{
    ChatRequest, Completion, LlmClient, LlmError, LlmErrorKind, Message, TextSink, ToolCall,
};
use toolbox_runtime::{
    ApprovalAnswer, Runtime, RuntimeEvent, RuntimeOptions, StopReason, TurnError, TurnRequest,
};
use toolbox_tests::{assert_err_contains, assert_error};

/// A model that answers from a script and remembers what it was sent.
#[derive(Default)]
struct FakeModel {
    script: Mutex<VecDeque<Completion>>,
    seen: Mutex<Vec<(Vec<Message>, Vec<String>)>>,
}

impl FakeModel {
    fn new(script: Vec<Completion>) -> Arc<Self> {
        Arc::new(FakeModel {
            script: Mutex::new(script.into()),
            seen: Mutex::default(),
        })
    }

    fn tools_offered(&self, request: usize) -> Vec<String> {
        self.seen.lock().unwrap()[request].1.clone()
    }

    fn messages(&self, request: usize) -> Vec<Message> {
        self.seen.lock().unwrap()[request].0.clone()
    }
}

#[async_trait]
impl LlmClient for FakeModel {
    fn schema_format(&self) -> SchemaFormat {
        SchemaFormat::Anthropic
    }
    fn provider_name(&self) -> &'static str {
        "fake"
    }

    fn model(&self) -> &str {
        "fake"
    }
    async fn complete(
        &self,
        request: ChatRequest<'_>,
        on_text: TextSink<'_>,
    ) -> Result<Completion, LlmError> {
        let tools = request
            .tools
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        self.seen
            .lock()
            .unwrap()
            .push((request.messages.to_vec(), tools));
        let next = self.script.lock().unwrap().pop_front();
        let completion =
            next.ok_or_else(|| LlmError::new(LlmErrorKind::Server, "script exhausted"))?;
        if !completion.text.is_empty() {
            on_text(&completion.text);
        }
        Ok(completion)
    }
}

fn text(t: &str) -> Completion {
    Completion {
        text: t.into(),
        stop_reason: "end_turn".into(),
        ..Default::default()
    }
}

fn calls(list: &[(&str, &str, serde_json::Value)]) -> Completion {
    Completion {
        tool_calls: list
            .iter()
            .map(|(id, name, args)| ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: args.to_string(),
            })
            .collect(),
        stop_reason: "tool_use".into(),
        ..Default::default()
    }
}

fn runtime(mode: PermissionMode, model: Arc<FakeModel>) -> (tempfile::TempDir, Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = mode;
    config.approval_timeout = Duration::from_secs(20);
    let executor = ToolExecutor::new(config).unwrap();
    let llm: Arc<dyn LlmClient> = model;
    (
        dir,
        Runtime::new(executor, Ok(llm), RuntimeOptions::default()),
    )
}

fn sid(s: &str) -> SessionId {
    SessionId::parse(s).unwrap()
}

/// Waits (bounded) for an approval request in `session` and returns its call id.
async fn next_approval(rt: &Runtime, session: &str, after: u64) -> (String, u64) {
    for _ in 0..200 {
        for event in rt.events().since(&sid(session), after) {
            if let RuntimeEvent::ToolApprovalRequest { call_id, .. } = &event.event {
                return (call_id.clone(), event.seq);
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no approval request within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_through_the_runtime_and_for_the_rest_of_the_session() {
    let write = |id: &str, path: &str| (id.to_string(), json!({"path": path, "content": "x"}));
    let (a, b, c) = (
        write("w1", "one.txt"),
        write("w2", "two.txt"),
        write("w3", "three.txt"),
    );
    let model = FakeModel::new(vec![
        calls(&[(&a.0, "file_manager__write", a.1.clone())]),
        calls(&[(&b.0, "file_manager__write", b.1.clone())]),
        calls(&[(&c.0, "file_manager__write", c.1.clone())]),
        text("done"),
    ]);
    let (dir, rt) = runtime(PermissionMode::Auto, model.clone());
    let turn = tokio::spawn({
        let rt = rt.clone();
        async move {
            rt.run_turn("s1", TurnRequest::new("write three files"))
                .await
        }
    });
    // First: denied. Second: approved for the session. Third: runs without asking.
    let (first, seq) = next_approval(&rt, "s1", 0).await;
    assert_eq!(first, "w1");
    assert_eq!(
        rt.respond_approval("s1", "w1", ApprovalDecision::Deny),
        ApprovalAnswer::Delivered
    );
    assert_eq!(
        rt.respond_approval("s1", "w1", ApprovalDecision::Approve),
        ApprovalAnswer::AlreadyAnswered
    );
    assert_eq!(
        rt.respond_approval("s1", "nope", ApprovalDecision::Approve),
        ApprovalAnswer::Unknown
    );
    let (second, _) = next_approval(&rt, "s1", seq).await;
    assert_eq!(second, "w2");
    rt.respond_approval("s1", "w2", ApprovalDecision::ApproveForSession);
    let outcome = tokio::time::timeout(Duration::from_secs(30), turn)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert_eq!(outcome.text, "done");
    assert!(!dir.path().join("one.txt").exists());
    assert!(dir.path().join("two.txt").exists());
    assert!(dir.path().join("three.txt").exists());
    let approvals = rt
        .events()
        .since(&sid("s1"), 0)
        .iter()
        .filter(|e| matches!(e.event, RuntimeEvent::ToolApprovalRequest { .. }))
        .count();
    assert_eq!(approvals, 2, "the third write ran without asking");
    // What the model saw for the denied write.
    let seen = model.messages(1);
    let denied = seen
        .iter()
        .find_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } if tool_call_id == "w1" => Some(content),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no result for w1: {seen:?}"));
    let envelope: serde_json::Value = serde_json::from_str(denied).unwrap();
    assert_err_contains(&envelope, &["denied"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_never_runs_above_the_process_mode_and_legacy_flags_win() {
    // The process is read_only: a turn asking for full still sees no risky tool.
    let model = FakeModel::new(vec![
        calls(&[("s", "shell", json!({"command": "touch hacked"}))]),
        text("ok"),
    ]);
    let (dir, rt) = runtime(PermissionMode::ReadOnly, model.clone());
    let request = TurnRequest {
        message: "go".into(),
        permission_mode: Some(PermissionMode::Full),
        allow_shell: Some(true),
        ..Default::default()
    };
    rt.run_turn("s1", request).await.unwrap();
    assert!(!dir.path().join("hacked").exists());
    assert!(!model.tools_offered(0).iter().any(|t| t == "shell"));
    // The process is full: a turn's allow_shell = false wins over its mode full.
    let model = FakeModel::new(vec![
        calls(&[("s", "shell", json!({"command": "touch ran"}))]),
        text("ok"),
    ]);
    let (dir, rt) = runtime(PermissionMode::Full, model.clone());
    let request = TurnRequest {
        message: "go".into(),
        permission_mode: Some(PermissionMode::Full),
        allow_shell: Some(false),
        ..Default::default()
    };
    rt.run_turn("s1", request).await.unwrap();
    assert!(!dir.path().join("ran").exists());
    assert!(!model.tools_offered(0).iter().any(|t| t == "shell"));
    assert!(model
        .tools_offered(0)
        .iter()
        .any(|t| t == "file_manager__write"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_turn_stops_its_running_command() {
    let model = FakeModel::new(vec![calls(&[(
        "long",
        "shell",
        json!({"command": "sleep 30; touch finished"}),
    )])]);
    let (dir, rt) = runtime(PermissionMode::Full, model);
    let turn = tokio::spawn({
        let rt = rt.clone();
        async move { rt.run_turn("s1", TurnRequest::new("wait")).await }
    });
    // Wait for the command to start, then cancel.
    for _ in 0..200 {
        let started = rt
            .events()
            .since(&sid("s1"), 0)
            .iter()
            .any(|e| matches!(e.event, RuntimeEvent::ToolCallStarted { .. }));
        if started {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rt.is_running("s1"));
    assert!(rt.cancel("s1"));
    let outcome = tokio::time::timeout(Duration::from_secs(20), turn)
        .await
        .expect("a cancelled turn ends")
        .unwrap()
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    assert!(!rt.is_running("s1"));
    assert!(!dir.path().join("finished").exists());
    let events = rt.events().since(&sid("s1"), 0);
    let last = &events.last().unwrap().event;
    assert!(
        matches!(
            last,
            RuntimeEvent::TurnFinished {
                stop_reason: StopReason::Cancelled,
                ..
            }
        ),
        "{last:?}"
    );
    // The conversation holds the call and its (cancelled) result, so the next turn works.
    let kept = toolbox_runtime::conversation::load(rt.executor().workspace(), &sid("s1")).unwrap();
    assert!(kept.warnings.is_empty(), "{:?}", kept.warnings);
    assert!(matches!(kept.messages.last(), Some(Message::Tool { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_turn_per_session_and_bad_requests_are_refused_before_anything_runs() {
    let model = FakeModel::new(vec![calls(&[(
        "long",
        "shell",
        json!({"command": "sleep 5"}),
    )])]);
    let (dir, rt) = runtime(PermissionMode::Full, model);
    rt.start_turn("s1", TurnRequest::new("first")).unwrap();
    assert!(matches!(
        rt.start_turn("s1", TurnRequest::new("second")),
        Err(TurnError::Busy(_))
    ));
    rt.cancel("s1");
    assert!(matches!(
        rt.start_turn("../x", TurnRequest::new("hi")),
        Err(TurnError::InvalidSession(_))
    ));
    assert!(matches!(
        rt.start_turn("s2", TurnRequest::new("  ")),
        Err(TurnError::BadRequest(_))
    ));
    let unknown = TurnRequest {
        message: "hi".into(),
        agent: Some("nobody".into()),
        ..Default::default()
    };
    assert!(matches!(
        rt.start_turn("s3", unknown),
        Err(TurnError::UnknownAgent(_))
    ));
    assert!(!dir.path().join(".toolbox/sessions/s3").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_a_turn_arrive_in_order_with_a_type_tag() {
    let model = FakeModel::new(vec![
        calls(&[("l", "file_manager__list", json!({"path": "."}))]),
        text("listed"),
    ]);
    let (_dir, rt) = runtime(PermissionMode::Auto, model);
    rt.run_turn("ev", TurnRequest::new("list")).await.unwrap();
    let types: Vec<String> = rt
        .events()
        .since(&sid("ev"), 0)
        .iter()
        .map(|e| {
            serde_json::to_value(&**e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        types,
        [
            "turn_started",
            "tool_call_started",
            "tool_call_finished",
            "text_delta",
            "turn_finished"
        ]
    );
}

/// A question asked on another channel (an MCP client's elicitation: the executor asked, not
/// this runtime) cannot be answered through the runtime, and so not through the HTTP API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_questions_the_runtime_asked_are_answered_through_it() {
    let (dir, rt) = runtime(PermissionMode::Auto, FakeModel::new(vec![]));
    let executor = rt.executor().clone();
    let elsewhere = tokio::spawn(async move {
        executor
            .run(
                toolbox_executor::ToolRequest::new(
                    "mcp-http-7",
                    "file_manager__write",
                    serde_json::json!({"path": "x.txt", "content": "x"}),
                )
                .session("mcp"),
            )
            .await
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rt.executor().pending_approvals("mcp").is_empty() {
        assert!(std::time::Instant::now() < deadline, "the call never asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        rt.respond_approval("mcp", "mcp-http-7", ApprovalDecision::Approve),
        ApprovalAnswer::Unknown
    );
    assert_eq!(rt.executor().pending_approvals("mcp"), ["mcp-http-7"]);
    assert!(rt
        .executor()
        .respond_approval("mcp", "mcp-http-7", ApprovalDecision::Deny));
    assert_error(&elsewhere.await.unwrap(), ErrorKind::Denied, &[]);
    assert!(!dir.path().join("x.txt").exists());
}

/// One model reply cannot fan out without bound: at most `max_parallel_calls` of its calls
/// run at once, and past `max_calls_per_turn` calls are refused and the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_fans_out_within_its_caps() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ExecutorConfig::new(dir.path());
    config.permissions.mode = PermissionMode::Full;
    config
        .apply_toml("[runtime]\nmax_parallel_calls = 2\nmax_calls_per_turn = 6\n")
        .unwrap();
    // Each command notes how many run beside it: it counts the marker files present.
    let command = "touch run.$$; n=$(ls run.* | wc -l); echo $n >> ../../../../seen.txt; \
                   sleep 0.3; rm run.$$";
    let batch: Vec<(String, &str, serde_json::Value)> = (0..10)
        .map(|i| (format!("c{i}"), "shell", json!({ "command": command })))
        .collect();
    let batch: Vec<(&str, &str, serde_json::Value)> = batch
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, args.clone()))
        .collect();
    let model = FakeModel::new(vec![calls(&batch), text("never asked")]);
    let options = RuntimeOptions::from_config(&config).unwrap();
    assert_eq!(
        (options.max_parallel_calls, options.max_calls_per_turn),
        (2, 6)
    );
    let llm: Arc<dyn LlmClient> = model.clone();
    let rt = Runtime::new(ToolExecutor::new(config).unwrap(), Ok(llm), options);
    let outcome = rt
        .run_turn("s1", TurnRequest::new("fan out"))
        .await
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::MaxSteps);
    let seen = std::fs::read_to_string(dir.path().join("seen.txt")).unwrap();
    let counts: Vec<u32> = seen.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(counts.len(), 6, "exactly max_calls_per_turn ran: {seen}");
    assert!(
        counts.iter().all(|n| *n <= 2),
        "more than 2 at once: {seen}"
    );
    // The refused calls were answered, saying why; the model was not asked again.
    let kept = toolbox_runtime::conversation::load(rt.executor().workspace(), &sid("s1")).unwrap();
    let refused = kept
        .messages
        .iter()
        .filter(|m| format!("{m:?}").contains("max_calls_per_turn"))
        .count();
    assert_eq!(refused, 4);
    assert_eq!(model.script.lock().unwrap().len(), 1);
    // A workspace may lower the caps, not raise them; an unknown key is named.
    let mut bad = ExecutorConfig::new(dir.path());
    bad.apply_toml("[runtime]\nmax_paralel_calls = 2\n")
        .unwrap();
    assert_err_contains(RuntimeOptions::from_config(&bad), &["max_paralel_calls"]);
}
