//! What a call asks a person, and the answers: the approval a call in mode `auto` waits for
//! (in its turn, when it holds an [`ApprovalTicket`](crate::ApprovalTicket)), the review
//! questions a tool asks through [`ToolContext::ask_review`], the time the call waited for
//! them ([`WaitClock`]), and the answers front ends deliver (`respond_approval`,
//! `respond_as_person`, `deny_approval`).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolbox_core::{SessionId, ToolRisk};
use toolbox_host::{
    ApprovalRequest, Asker, CancellationToken, EventSink, PersonAnswer, QuestionKind, ToolContext,
    ToolEvent,
};

use super::{shorten, ErrorKind, ToolExecutor, ToolRequest};
use crate::approval::Answer;
use crate::registry::RegisteredTool;
use crate::ApprovalDecision;

impl ToolExecutor {
    /// The call ids of `session` that wait for an approval now, sorted.
    pub fn pending_approvals(&self, session_id: &str) -> Vec<String> {
        self.inner.approvals.pending(session_id)
    }

    /// How many calls wait for an approval, per session (sessions with none are left out).
    pub fn pending_approval_counts(&self) -> std::collections::HashMap<String, usize> {
        self.inner.approvals.pending_counts()
    }

    /// Answers an approval request. False when no such request is waiting.
    pub fn respond_approval(
        &self,
        session_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> bool {
        self.inner.approvals.respond(
            session_id,
            call_id,
            Answer::Decision {
                decision,
                feedback: None,
                by: None,
            },
        )
    }

    /// Answers an approval request or a review with what a person said: `by` names the front
    /// end that carried the answer (`http`, `terminal`, `mcp`), `feedback` is their text (a
    /// review's result carries it word for word; a denied call's result quotes it). Only an
    /// answer given this way confirms a review. False when no such request is waiting.
    pub fn respond_as_person(
        &self,
        session_id: &str,
        call_id: &str,
        decision: ApprovalDecision,
        feedback: Option<String>,
        by: &str,
    ) -> bool {
        self.inner.approvals.respond(
            session_id,
            call_id,
            Answer::Decision {
                decision,
                feedback: feedback.filter(|f| !f.trim().is_empty()),
                by: Some(by.to_string()),
            },
        )
    }

    /// What the waiting request of that call asks (a tool approval or a review), if one
    /// waits.
    pub fn pending_kind(&self, session_id: &str, call_id: &str) -> Option<QuestionKind> {
        self.inner.approvals.kind(session_id, call_id)
    }

    /// Denies an approval request with `reason` as the call's result, instead of the default
    /// `the user denied tool X`: for a front end that refuses without asking anyone and
    /// should say why and how to allow the call. False when no such request is waiting.
    pub fn deny_approval(
        &self,
        session_id: &str,
        call_id: &str,
        reason: impl Into<String>,
    ) -> bool {
        self.inner
            .approvals
            .respond(session_id, call_id, Answer::Refused(reason.into()))
    }

    /// Asks for approval of one call (after the calls queued before it, when it has a
    /// ticket) and waits for the answer, the approval timeout, or the call's cancellation.
    pub(super) async fn await_approval(
        &self,
        tool: &RegisteredTool,
        request: &ToolRequest,
        arguments: &Value,
        ctx: &ToolContext,
        cancel: &CancellationToken,
        ticket: Option<&crate::ApprovalTicket>,
    ) -> Result<Option<String>, (ErrorKind, String)> {
        let inner = &*self.inner;
        let name = tool.info.name.as_str();
        let shown = request.name.as_str();
        let session_id = &ctx.session_id;
        if let Some(ticket) = ticket {
            tokio::select! {
                _ = cancel.cancelled() => {
                    return Err((ErrorKind::Cancelled, format!("tool {shown} was cancelled while waiting for approval")));
                }
                _ = ticket.my_turn() => {}
            }
        }
        // Checked after the queue: the question before this one may have approved the tool
        // for the whole session.
        if inner.approvals.approved_for_session(session_id, name) {
            return Ok(None);
        }
        // A front end that knows nobody could answer (no one follows the session) says so,
        // and the call is refused now rather than after the approval timeout. A sink without
        // that knowledge waits: a library may answer from pending_approvals().
        if ctx.events.is_active() {
            if let Err(why) = ctx.events.can_ask() {
                return Err((
                    ErrorKind::Denied,
                    format!(
                        "tool {shown} needs approval in permission mode auto, and nobody can be \
                         asked: {why}"
                    ),
                ));
            }
        }
        let preview = describe(tool, arguments, ctx);
        let Some(rx) = inner
            .approvals
            .open(session_id, &request.id, QuestionKind::Tool)
        else {
            return Err((
                ErrorKind::InvalidRequest,
                format!(
                    "call id {} of session {session_id} is already waiting for approval; \
                     each call needs an id of its own, so the answer goes to the right one",
                    shorten(&request.id, 200)
                ),
            ));
        };
        ctx.events
            .emit(ToolEvent::ApprovalRequested(ApprovalRequest {
                session_id: session_id.clone(),
                call_id: request.id.clone(),
                tool: name.to_string(),
                called_as: ctx.called_as.clone(),
                arguments: arguments.clone(),
                risk: tool.info.risk,
                preview,
                kind: QuestionKind::Tool,
            }));
        let wait = inner.config.approval_timeout;
        let answer = tokio::select! {
            _ = cancel.cancelled() => {
                inner.approvals.close(session_id, &request.id);
                return Err((ErrorKind::Cancelled, format!("tool {shown} was cancelled while waiting for approval")));
            }
            answer = tokio::time::timeout(wait, rx) => answer,
        };
        match answer {
            Ok(Ok(Answer::Decision {
                decision: ApprovalDecision::Approve,
                by,
                ..
            })) => Ok(by),
            Ok(Ok(Answer::Decision {
                decision: ApprovalDecision::ApproveForSession,
                by,
                ..
            })) => {
                inner.approvals.remember_session(session_id, name);
                Ok(by)
            }
            Ok(Ok(Answer::Decision {
                decision: ApprovalDecision::Deny,
                feedback,
                ..
            })) => Err((
                ErrorKind::Denied,
                match feedback {
                    Some(why) => format!("the user denied tool {shown}: {why}"),
                    None => format!("the user denied tool {shown}"),
                },
            )),
            Ok(Ok(Answer::Refused(reason))) => Err((ErrorKind::Denied, reason)),
            Ok(Err(_)) | Err(_) => {
                inner.approvals.close(session_id, &request.id);
                Err((
                    ErrorKind::Denied,
                    format!(
                        "tool {shown} needs approval in permission mode auto and none came within {} ms, so the call was denied; to allow such calls, answer within the time, raise approval_timeout_ms (TOOLBOX_APPROVAL_TIMEOUT_MS), or use mode full (--mode full)",
                        wait.as_millis()
                    ),
                ))
            }
        }
    }

    /// The [`Asker`] a call's tool asks review questions through
    /// ([`ToolContext::ask_review`]): each one asked by [`ask_review`](Self::ask_review), the
    /// time it waited for a person added to `review_wait`.
    pub(super) fn review_asker(
        &self,
        session_id: &SessionId,
        call_id: &str,
        (tool, called_as): (&str, Option<String>),
        events: &EventSink,
        cancel: &CancellationToken,
        review_wait: &ReviewWait<'_>,
    ) -> Asker {
        let executor = self.clone();
        let (session, call_id, tool_name) =
            (session_id.clone(), call_id.to_string(), tool.to_string());
        let (events, cancel) = (events.clone(), cancel.clone());
        let wait_ms = review_wait.ms.clone();
        Asker::new(move |preview| {
            let executor = executor.clone();
            let (session, call_id, tool_name, called_as) = (
                session.clone(),
                call_id.clone(),
                tool_name.clone(),
                called_as.clone(),
            );
            let (events, cancel, wait_ms) = (events.clone(), cancel.clone(), wait_ms.clone());
            Box::pin(async move {
                let asked = Instant::now();
                let answer = executor
                    .ask_review(
                        &session,
                        &call_id,
                        (&tool_name, called_as),
                        &events,
                        &cancel,
                        preview,
                    )
                    .await;
                wait_ms.fetch_add(
                    asked.elapsed().as_millis() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
                answer
            })
        })
    }

    /// Asks a person a review question for call `call_id` (a tool's
    /// [`ToolContext::ask_review`]): in every permission mode, through the same channel as
    /// approvals, and waits for the answer, the approval timeout or the call's cancellation.
    async fn ask_review(
        &self,
        session_id: &SessionId,
        call_id: &str,
        (tool, called_as): (&str, Option<String>),
        events: &EventSink,
        cancel: &CancellationToken,
        preview: toolbox_core::Preview,
    ) -> PersonAnswer {
        let inner = &*self.inner;
        if let Err(reason) = events.can_ask() {
            return PersonAnswer::NotAsked { reason };
        }
        let Some(rx) = inner
            .approvals
            .open(session_id, call_id, QuestionKind::Review)
        else {
            return PersonAnswer::NotAsked {
                reason: format!(
                    "call id {} of session {session_id} is already waiting for an answer",
                    shorten(call_id, 200)
                ),
            };
        };
        events.emit(ToolEvent::ApprovalRequested(ApprovalRequest {
            session_id: session_id.clone(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            called_as,
            arguments: Value::Null,
            risk: ToolRisk::Read,
            preview,
            kind: QuestionKind::Review,
        }));
        let wait = inner.config.approval_timeout;
        let answer = tokio::select! {
            _ = cancel.cancelled() => {
                inner.approvals.close(session_id, call_id);
                return PersonAnswer::NotAsked { reason: "the call was cancelled while it waited for the answer".into() };
            }
            answer = tokio::time::timeout(wait, rx) => answer,
        };
        let answer = match answer {
            Ok(Ok(Answer::Decision {
                decision,
                feedback,
                by,
            })) => {
                let by = by.unwrap_or_else(|| "unknown".into());
                match decision {
                    ApprovalDecision::Approve | ApprovalDecision::ApproveForSession => {
                        PersonAnswer::Approved { by, feedback }
                    }
                    ApprovalDecision::Deny => PersonAnswer::Rejected { by, feedback },
                }
            }
            Ok(Ok(Answer::Refused(reason))) => PersonAnswer::NotAsked { reason },
            Ok(Err(_)) | Err(_) => {
                inner.approvals.close(session_id, call_id);
                PersonAnswer::NotAsked {
                    reason: format!(
                        "no answer came within {} ms (approval_timeout_ms)",
                        wait.as_millis()
                    ),
                }
            }
        };
        events.emit(ToolEvent::ReviewAnswered {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            answer: answer.clone(),
        });
        answer
    }
}

/// Adds the time a call's review questions waited to its [`WaitClock`] when the call ends,
/// whichever way it ends.
pub(super) struct ReviewWait<'a> {
    clock: &'a WaitClock,
    ms: Arc<std::sync::atomic::AtomicU64>,
}

impl<'a> ReviewWait<'a> {
    pub(super) fn new(clock: &'a WaitClock) -> Self {
        ReviewWait {
            clock,
            ms: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        }
    }
}

impl Drop for ReviewWait<'_> {
    fn drop(&mut self) {
        let ms = self.ms.load(std::sync::atomic::Ordering::Relaxed);
        if ms > 0 {
            self.clock.set(self.clock.get() + Duration::from_millis(ms));
        }
    }
}

/// How long a call waited for a person, and who answered, set once the gate has an answer.
#[derive(Default)]
pub(super) struct WaitClock(std::sync::Mutex<Duration>, std::sync::Mutex<Option<String>>);

impl WaitClock {
    pub(super) fn set(&self, waited: Duration) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = waited;
    }

    pub(super) fn get(&self) -> Duration {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn answered_by(&self, by: Option<String>) {
        *self.1.lock().unwrap_or_else(|e| e.into_inner()) = by;
    }

    pub(super) fn approved_by(&self) -> Option<String> {
        self.1.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the call will do, as its tool describes it, or its arguments as `key: value` lines.
/// A provider's preview that panics falls back to the arguments: the question is still asked.
fn describe(tool: &RegisteredTool, arguments: &Value, ctx: &ToolContext) -> toolbox_core::Preview {
    let name = tool.info.name.as_str();
    let described = std::panic::catch_unwind(AssertUnwindSafe(|| {
        tool.provider.preview(name, arguments, ctx)
    }));
    match described {
        Ok(Some(preview)) => preview,
        Ok(None) => toolbox_core::Preview::arguments(name, arguments),
        Err(panic) => {
            tracing::warn!(target: "toolbox", tool = name, "the preview panicked: {}", toolbox_core::panic::message(&*panic));
            toolbox_core::Preview::arguments(name, arguments)
        }
    }
}
