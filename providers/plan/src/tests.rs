//! Unit tests: the state machine, the storage, the gate, session__info.

use std::sync::Arc;

use serde_json::{json, Value};
use toolbox_core::{ToolInfo, ToolRisk};
use toolbox_host::{Asker, GateCall, PersonAnswer, ToolContext, ToolProvider, Workspace};

use crate::state::{self, ReviewState, Status};
use crate::PlanProvider;

fn ctx(root: &std::path::Path, sid: &str) -> ToolContext {
    ToolContext::new(Workspace::new(root).unwrap(), sid, "c1", "plan__set")
}

fn answering(answer: PersonAnswer) -> Asker {
    Asker::new(move |_| {
        let answer = answer.clone();
        Box::pin(async move { answer })
    })
}

async fn call(
    p: &PlanProvider,
    ctx: &ToolContext,
    tool: &str,
    args: Value,
) -> anyhow::Result<String> {
    p.call_tool(tool, args, ctx).await.map(|output| output.text)
}

#[tokio::test]
async fn set_show_and_one_step_in_progress_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let p = PlanProvider::default();
    let c = ctx(dir.path(), "s1");
    let out = call(
        &p,
        &c,
        "plan__set",
        json!({"goal": "Ship the report", "steps": ["Read data", {"title": "Write report", "note": "in output/"}]}),
    )
    .await
    .unwrap();
    assert!(
        out.contains("Goal (not yet reviewed): Ship the report"),
        "{out}"
    );
    assert!(out.contains("[ ] 1. Read data"), "{out}");
    assert!(out.contains("[ ] 2. Write report — in output/"), "{out}");
    // Stored where the issue says, as JSON.
    let stored: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join(".toolbox/sessions/s1/plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(stored["steps"][1]["title"], "Write report");

    call(
        &p,
        &c,
        "plan__update",
        json!({"steps": [{"id": "1", "status": "in_progress"}]}),
    )
    .await
    .unwrap();
    let err = call(
        &p,
        &c,
        "plan__update",
        json!({"steps": [{"id": "2", "status": "in_progress"}]}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("at most one step may be in_progress"), "{err}");
    // Nothing was written by the refused call.
    let plan = state::load(&c.workspace).unwrap();
    assert_eq!(plan.steps[1].status, Status::Pending);
    // Finishing one and starting the next in one call is fine.
    let out = call(
        &p,
        &c,
        "plan__update",
        json!({"steps": [{"id": "1", "status": "completed"}, {"id": "2", "status": "in_progress"}]}),
    )
    .await
    .unwrap();
    assert!(
        out.contains("[x] 1. Read data") && out.contains("[>] 2. Write report"),
        "{out}"
    );
    let shown = call(&p, &c, "plan__show", json!({})).await.unwrap();
    assert!(shown.contains("Plan (not yet reviewed):"), "{shown}");
    // Bad arguments name themselves.
    let err = call(
        &p,
        &c,
        "plan__update",
        json!({"steps": [{"id": "9", "status": "completed"}]}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("no step has id \"9\""), "{err}");
    let err = call(
        &p,
        &c,
        "plan__set",
        json!({"steps": [{"title": "x", "status": "done"}]}),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("status must be one of"), "{err}");
    let err = call(&p, &c, "plan__set", json!({"goal": "x", "colour": 1}))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("colour"), "{err}");
}

#[tokio::test]
async fn review_approve_reject_and_unconfirm_on_change() {
    let dir = tempfile::tempdir().unwrap();
    let p = PlanProvider::default();
    let mut c = ctx(dir.path(), "s1");
    call(&p, &c, "plan__set", json!({"steps": ["A", "B"]}))
        .await
        .unwrap();

    // Nobody to ask: the part stays pending and the result says so.
    let out = call(&p, &c, "plan__request_review", json!({"part": "plan"}))
        .await
        .unwrap();
    assert!(
        out.contains("Not reviewed: ") && out.contains("stays pending"),
        "{out}"
    );
    assert_eq!(
        state::load(&c.workspace).unwrap().plan_review.state,
        ReviewState::Pending
    );

    c.asker = answering(PersonAnswer::Rejected {
        by: "http".into(),
        feedback: Some("Add a step: check the totals.\nThen ask again.".into()),
    });
    let out = call(&p, &c, "plan__request_review", json!({"part": "plan"}))
        .await
        .unwrap();
    assert!(
        out.contains("Add a step: check the totals.\nThen ask again."),
        "{out}"
    );
    let plan = state::load(&c.workspace).unwrap();
    assert_eq!(plan.plan_review.state, ReviewState::Draft);
    assert_eq!(plan.plan_review.by.as_deref(), Some("http"));

    c.asker = answering(PersonAnswer::Approved {
        by: "terminal".into(),
        feedback: None,
    });
    let out = call(&p, &c, "plan__request_review", json!({"part": "plan"}))
        .await
        .unwrap();
    assert!(out.contains("confirmed"), "{out}");
    assert_eq!(
        state::load(&c.workspace).unwrap().plan_review.state,
        ReviewState::Confirmed
    );

    // Status changes keep it confirmed.
    let out = call(
        &p,
        &c,
        "plan__update",
        json!({"steps": [{"id": "1", "status": "completed", "note": "ok"}]}),
    )
    .await
    .unwrap();
    assert!(!out.contains("draft again"), "{out}");
    assert_eq!(
        state::load(&c.workspace).unwrap().plan_review.state,
        ReviewState::Confirmed
    );
    // Adding a step withdraws it, and says so.
    let out = call(&p, &c, "plan__update", json!({"add": ["C"]}))
        .await
        .unwrap();
    assert!(
        out.contains("was confirmed, and changed, so it is a draft again"),
        "{out}"
    );
    let plan = state::load(&c.workspace).unwrap();
    assert_eq!(plan.plan_review.state, ReviewState::Draft);
    assert_eq!(plan.steps.last().unwrap().id, "3");

    // A goal: confirmed, then a new goal makes it a draft; the same goal does not.
    call(&p, &c, "plan__set", json!({"goal": "G"}))
        .await
        .unwrap();
    call(&p, &c, "plan__request_review", json!({"part": "goal"}))
        .await
        .unwrap();
    assert_eq!(
        state::load(&c.workspace).unwrap().goal_review.state,
        ReviewState::Confirmed
    );
    let out = call(&p, &c, "plan__set", json!({"goal": "G"}))
        .await
        .unwrap();
    assert!(!out.contains("draft again"), "{out}");
    let out = call(&p, &c, "plan__set", json!({"goal": "G2"}))
        .await
        .unwrap();
    assert!(out.contains("goal was confirmed, and changed"), "{out}");
}

#[tokio::test]
async fn an_answer_about_an_older_plan_confirms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = Arc::new(PlanProvider::default());
    let mut c = ctx(dir.path(), "s1");
    call(&p, &c, "plan__set", json!({"steps": ["A"]}))
        .await
        .unwrap();
    // The person answers only after the plan changed under the question.
    let (p2, c2) = (p.clone(), c.clone());
    c.asker = Asker::new(move |_| {
        let (p2, c2) = (p2.clone(), c2.clone());
        Box::pin(async move {
            call(&p2, &c2, "plan__update", json!({"add": ["B"]}))
                .await
                .unwrap();
            PersonAnswer::Approved {
                by: "http".into(),
                feedback: None,
            }
        })
    });
    let out = call(&p, &c, "plan__request_review", json!({"part": "plan"}))
        .await
        .unwrap();
    assert!(out.contains("changed while the person was asked"), "{out}");
    assert_eq!(
        state::load(&c.workspace).unwrap().plan_review.state,
        ReviewState::Draft
    );
}

#[tokio::test]
async fn sessions_keep_plans_apart_and_a_planted_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = PlanProvider::default();
    call(
        &p,
        &ctx(dir.path(), "one"),
        "plan__set",
        json!({"goal": "first"}),
    )
    .await
    .unwrap();
    call(
        &p,
        &ctx(dir.path(), "two"),
        "plan__set",
        json!({"goal": "second"}),
    )
    .await
    .unwrap();
    let one = call(&p, &ctx(dir.path(), "one"), "plan__show", json!({}))
        .await
        .unwrap();
    assert!(one.contains("first") && !one.contains("second"), "{one}");

    // A link planted as plan.json is not followed, for reading or writing.
    let secret = dir.path().join("secret.txt");
    std::fs::write(&secret, "keep").unwrap();
    let folder = dir.path().join(".toolbox/sessions/evil");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::symlink(&secret, folder.join("plan.json")).unwrap();
    let c = ctx(dir.path(), "evil");
    assert!(call(&p, &c, "plan__show", json!({})).await.is_err());
    let _ = call(&p, &c, "plan__set", json!({"goal": "x"})).await;
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
}

fn tool(name: &str, risk: ToolRisk) -> ToolInfo {
    ToolInfo::new(name, "t", json!({"type": "object"})).risk(risk)
}

#[tokio::test]
async fn the_gate_holds_listed_classes_until_confirmed() {
    let dir = tempfile::tempdir().unwrap();
    let p = PlanProvider::default();
    let mut c = ctx(dir.path(), "s1");
    let write = tool("file_manager__write", ToolRisk::FileWrite);
    let read = tool("file_manager__read", ToolRisk::Read);
    let check = |c: &ToolContext, t: &ToolInfo| crate::gate::check(&GateCall { tool: t, ctx: c });
    // Off by default.
    assert_eq!(check(&c, &write), None);
    c.config = Arc::new(json!({"plan": {"require_confirmed": ["file_write", "web_fetch"]}}));
    let refusal = check(&c, &write).expect("held back");
    assert!(
        refusal.contains("plan__set") && refusal.contains("plan__request_review"),
        "{refusal}"
    );
    assert_eq!(check(&c, &read), None);
    assert!(check(&c, &tool("web_fetch", ToolRisk::Read)).is_some());
    // The plan's own tools never.
    let own = crate::set::info();
    assert_eq!(check(&c, &own), None);

    call(&p, &c, "plan__set", json!({"steps": ["A"]}))
        .await
        .unwrap();
    let refusal = check(&c, &write).unwrap();
    assert!(
        refusal.contains("call plan__request_review with part \"plan\""),
        "{refusal}"
    );
    c.asker = answering(PersonAnswer::Approved {
        by: "http".into(),
        feedback: None,
    });
    call(&p, &c, "plan__request_review", json!({"part": "plan"}))
        .await
        .unwrap();
    assert_eq!(check(&c, &write), None);
    // With a goal set, require = "plan" wants the goal confirmed too.
    call(&p, &c, "plan__set", json!({"goal": "G"}))
        .await
        .unwrap();
    assert!(check(&c, &write).unwrap().contains("the goal is draft"));
    // require = "goal" wants only the goal.
    c.config = Arc::new(json!({"plan": {"require_confirmed": ["file_write"], "require": "goal"}}));
    call(&p, &c, "plan__update", json!({"add": ["B"]}))
        .await
        .unwrap();
    assert!(check(&c, &write).is_some());
    call(&p, &c, "plan__request_review", json!({"part": "goal"}))
        .await
        .unwrap();
    assert_eq!(check(&c, &write), None);
    // A bad table holds risky calls back, says why, and lets reads through.
    c.config = Arc::new(json!({"plan": {"require_confirmed": ["../x"]}}));
    assert!(check(&c, &write)
        .unwrap()
        .contains("[plan] table is invalid"));
    assert_eq!(check(&c, &read), None);
}

#[tokio::test]
async fn session_info_tells_where_and_what() {
    let dir = tempfile::tempdir().unwrap();
    let p = PlanProvider::default();
    let mut c = ctx(dir.path(), "s1");
    c.policy = toolbox_host::CallPolicy {
        mode: Some(toolbox_core::PermissionMode::Auto),
        risks: vec![
            (toolbox_core::ToolRisk::Read, toolbox_core::Decision::Allow),
            (toolbox_core::ToolRisk::Command, toolbox_core::Decision::Ask),
        ],
    };
    c.config = Arc::new(
        json!({"shell": {"sandbox": "read-only"}, "limits": {"memory_mb": 512},
        "plan": {"require_confirmed": ["shell"]}}),
    );
    let text = p
        .call_tool("session__info", json!({}), &c)
        .await
        .unwrap()
        .text;
    let out: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out["session_id"], "s1");
    assert_eq!(out["permission_mode"], "auto");
    assert_eq!(out["risk_classes"]["command"], "ask");
    assert_eq!(out["sandbox"], "read-only");
    assert!(out["limits"].as_str().unwrap().contains("512"), "{out}");
    let root = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(out["paths"]["workspace"], root.display().to_string());
    assert_eq!(
        out["paths"]["output"],
        root.join(".toolbox/sessions/s1/output")
            .display()
            .to_string()
    );
    assert_eq!(out["plan"]["plan"], "draft");
    assert_eq!(out["plan"]["gate"]["enabled"], true);
    assert_eq!(out["plan"]["gate"]["open"], false);
}
