//! The plan provider through the executor: a review is asked in every permission mode and
//! only an answer a front end signs as a person's confirms it; the gate of `[plan]
//! require_confirmed` refuses before any approval question, in mode auto too.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::json;
use toolbox_executor::{ApprovalDecision, CallStatus, ErrorKind, PermissionMode, ToolExecutor};
use toolbox_host::{ApprovalRequest, EventSink, QuestionKind, ToolEvent};
use toolbox_tests::{call, executor_with_events, SESSION};

use toolbox as _;

type Asked = Arc<Mutex<Vec<ApprovalRequest>>>;

/// An executor whose approval questions are collected, then answered by `answer` on a thread
/// of their own (as a front end answers).
fn executor(
    mode: PermissionMode,
    gate: bool,
    answer: fn(&ToolExecutor, &ApprovalRequest),
) -> (tempfile::TempDir, ToolExecutor, Asked) {
    let asked: Asked = Arc::default();
    let slot: Arc<OnceLock<ToolExecutor>> = Arc::default();
    let events = {
        let (asked, slot) = (asked.clone(), slot.clone());
        EventSink::new(move |event| {
            if let ToolEvent::ApprovalRequested(request) = event {
                asked.lock().unwrap().push(request.clone());
                let slot = slot.clone();
                std::thread::spawn(move || {
                    if let Some(executor) = slot.get() {
                        answer(executor, &request);
                    }
                });
            }
        })
    };
    let tables = if gate {
        vec![("plan", json!({"require_confirmed": ["file_write"]}))]
    } else {
        vec![]
    };
    let (dir, executor) = executor_with_events(mode, &tables, events);
    let _ = slot.set(executor.clone());
    (dir, executor, asked)
}

#[tokio::test]
async fn a_review_is_asked_in_every_mode_and_only_a_persons_answer_confirms() {
    for mode in [
        PermissionMode::ReadOnly,
        PermissionMode::Auto,
        PermissionMode::Full,
    ] {
        let (_dir, exec, asked) = executor(mode, false, |executor, request| {
            let (s, c) = (request.session_id.as_str(), request.call_id.as_str());
            // Unsigned, as a --approve yes fallback would answer: not taken for a review.
            assert!(!executor.respond_approval(s, c, ApprovalDecision::Approve));
            assert_eq!(executor.pending_kind(s, c), Some(QuestionKind::Review));
            assert!(executor.respond_as_person(
                s,
                c,
                ApprovalDecision::Approve,
                Some("ok".into()),
                "test"
            ));
        });
        let set = call(&exec, "plan__set", json!({"steps": ["A"]})).await;
        assert_eq!(set.status, CallStatus::Done, "{mode}: {}", set.result);
        let review = tokio::time::timeout(
            Duration::from_secs(60),
            call(&exec, "plan__request_review", json!({"part": "plan"})),
        )
        .await
        .unwrap();
        assert!(
            review.result.contains("it is confirmed"),
            "{mode}: {}",
            review.result
        );
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 1, "{mode}");
        assert_eq!(asked[0].kind, QuestionKind::Review);
        assert!(asked[0].preview.to_text(false).contains("1. A"), "{mode}");
    }
}

#[tokio::test]
async fn the_gate_refuses_before_any_approval_question() {
    let (_dir, exec, asked) = executor(PermissionMode::Auto, true, |executor, request| {
        let (s, c) = (request.session_id.as_str(), request.call_id.as_str());
        match request.kind {
            QuestionKind::Review => {
                executor.respond_as_person(s, c, ApprovalDecision::Approve, None, "test");
            }
            QuestionKind::Tool => {
                executor.respond_approval(s, c, ApprovalDecision::Approve);
            }
        }
    });
    let write = json!({"path": "a.txt", "content": "a"});
    let held = call(&exec, "file_manager__write", write.clone()).await;
    assert_eq!(held.error_kind, Some(ErrorKind::Denied), "{}", held.result);
    assert!(held.result.contains("plan__set"), "{}", held.result);
    assert!(asked.lock().unwrap().is_empty(), "refused before asking");
    call(&exec, "plan__set", json!({"steps": ["Write a.txt"]})).await;
    call(&exec, "plan__request_review", json!({"part": "plan"})).await;
    // Open now: the write asks its own approval (mode auto), and runs.
    let ran = call(&exec, "file_manager__write", write).await;
    assert_eq!(ran.status, CallStatus::Done, "{}", ran.result);
    let kinds: Vec<QuestionKind> = asked.lock().unwrap().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, vec![QuestionKind::Review, QuestionKind::Tool]);
    let info = call(&exec, "session__info", json!({})).await;
    let info: serde_json::Value = serde_json::from_str(&info.result).unwrap();
    assert_eq!(info["session_id"], SESSION);
    assert_eq!(info["risk_classes"]["file_write"], "ask");
    assert_eq!(info["plan"]["gate"]["open"], true);
}
