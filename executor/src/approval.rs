use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Mutex;

use anyhow::bail;
use tokio::sync::oneshot;
use toolbox_host::QuestionKind;

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call (of a review: confirm what it shows).
    Approve,
    /// Run this call and every later call of the same tool in the same session (of a
    /// review: the same as `Approve`).
    ApproveForSession,
    /// Refuse this call (of a review: reject it). `reject` is read as this too.
    #[serde(alias = "reject")]
    Deny,
}

impl FromStr for ApprovalDecision {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s {
            "approve" | "yes" | "y" => Ok(ApprovalDecision::Approve),
            "approve_for_session" | "approve-for-session" | "session" | "s" => {
                Ok(ApprovalDecision::ApproveForSession)
            }
            "deny" | "no" | "n" | "reject" => Ok(ApprovalDecision::Deny),
            other => bail!(
                "approval must be approve, approve_for_session, deny or reject (got {other:?})"
            ),
        }
    }
}

type Key = (String, String);

/// What a waiting call receives from a front end.
#[derive(Debug)]
pub(crate) enum Answer {
    /// Someone answered.
    Decision {
        /// What they decided.
        decision: ApprovalDecision,
        /// What they wrote: a review's feedback, or why a call was denied.
        feedback: Option<String>,
        /// The front end that carried a person's answer (`http`, `terminal`, `mcp`); `None`
        /// from the plain [`ToolExecutor::respond_approval`](crate::ToolExecutor::respond_approval).
        by: Option<String>,
    },
    /// Refused without asking anyone, for this reason (the call's result).
    Refused(String),
}

/// Pending approval requests and the per-session approvals already given.
#[derive(Default)]
pub(crate) struct ApprovalBroker {
    pending: Mutex<HashMap<Key, (QuestionKind, oneshot::Sender<Answer>)>>,
    session_approved: Mutex<HashSet<Key>>,
}

impl ApprovalBroker {
    /// Whether `tool` was approved for the whole of `session` earlier.
    pub fn approved_for_session(&self, session: &str, tool: &str) -> bool {
        lock(&self.session_approved).contains(&(session.to_string(), tool.to_string()))
    }

    /// Registers a pending request; the receiver resolves when someone answers. `None` when
    /// a request of that session and call id waits already: two calls with one id could not
    /// be told apart by whoever answers.
    pub fn open(
        &self,
        session: &str,
        call_id: &str,
        kind: QuestionKind,
    ) -> Option<oneshot::Receiver<Answer>> {
        let mut pending = lock(&self.pending);
        let key = (session.to_string(), call_id.to_string());
        if pending.contains_key(&key) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        pending.insert(key, (kind, tx));
        Some(rx)
    }

    /// What the pending request of that call asks, if one waits.
    pub fn kind(&self, session: &str, call_id: &str) -> Option<QuestionKind> {
        lock(&self.pending)
            .get(&(session.to_string(), call_id.to_string()))
            .map(|(kind, _)| *kind)
    }

    /// Forgets a request that timed out or was cancelled.
    pub fn close(&self, session: &str, call_id: &str) {
        lock(&self.pending).remove(&(session.to_string(), call_id.to_string()));
    }

    pub fn remember_session(&self, session: &str, tool: &str) {
        lock(&self.session_approved).insert((session.to_string(), tool.to_string()));
    }

    /// The call ids of `session` waiting for an answer now, sorted.
    pub fn pending(&self, session: &str) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.pending)
            .keys()
            .filter(|(s, _)| s == session)
            .map(|(_, call)| call.clone())
            .collect();
        ids.sort();
        ids
    }

    /// How many calls wait for an answer, per session.
    pub fn pending_counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for (session, _) in lock(&self.pending).keys() {
            *counts.entry(session.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Answers a pending request. False when no request with that id is waiting, or when
    /// the answer would confirm a review without a person's name on it: a review is
    /// confirmed only through an answer a front end says a person gave.
    pub fn respond(&self, session: &str, call_id: &str, answer: Answer) -> bool {
        let key = (session.to_string(), call_id.to_string());
        let mut pending = lock(&self.pending);
        let unsigned_approval = matches!(
            answer,
            Answer::Decision {
                decision: ApprovalDecision::Approve | ApprovalDecision::ApproveForSession,
                by: None,
                ..
            }
        );
        if unsigned_approval
            && pending
                .get(&key)
                .is_some_and(|(kind, _)| *kind == QuestionKind::Review)
        {
            return false;
        }
        match pending.remove(&key) {
            Some((_, tx)) => tx.send(answer).is_ok(),
            None => false,
        }
    }
}

/// A poisoned lock only means another call panicked mid-update of a plain map; keep going.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps the approval questions of a run of calls one at a time, in the order the calls were
/// made: a call that must ask waits until every call that took a ticket before it has passed
/// the gate (it was allowed, refused, or its question was answered). A person is then never
/// shown two questions at once, and an answer always belongs to the question on the screen.
///
/// The agent runtime takes a ticket per tool call of a model reply, in the model's order, and
/// keeps one queue per turn; an MCP server keeps one per connection. Calls that need no
/// approval pass at once and hold nobody up while they run.
#[derive(Clone, Default, Debug)]
pub struct ApprovalQueue {
    inner: std::sync::Arc<QueueInner>,
}

#[derive(Default, Debug)]
struct QueueInner {
    state: Mutex<QueueState>,
    changed: tokio::sync::Notify,
}

#[derive(Default, Debug)]
struct QueueState {
    /// The number the next ticket gets.
    next: u64,
    /// Every ticket below this number has passed the gate.
    passed_below: u64,
    /// Tickets at or above `passed_below` that have passed, out of order.
    passed: std::collections::BTreeSet<u64>,
}

impl ApprovalQueue {
    /// A new, empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next place in the queue. Give it to the call's
    /// [`ToolRequest::approval_ticket`](crate::ToolRequest::approval_ticket); dropping it
    /// (a call that never reaches the gate) lets the calls after it go on.
    pub fn ticket(&self) -> ApprovalTicket {
        let mut state = lock(&self.inner.state);
        let number = state.next;
        state.next += 1;
        ApprovalTicket {
            queue: self.inner.clone(),
            number,
        }
    }
}

/// One call's place in an [`ApprovalQueue`]; the call has passed the gate when it is dropped.
#[derive(Debug)]
pub struct ApprovalTicket {
    queue: std::sync::Arc<QueueInner>,
    number: u64,
}

impl ApprovalTicket {
    /// Resolves once every earlier ticket of the queue has passed the gate.
    pub async fn my_turn(&self) {
        loop {
            let notified = self.queue.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&self.queue.state).passed_below >= self.number {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for ApprovalTicket {
    fn drop(&mut self) {
        let mut state = lock(&self.queue.state);
        state.passed.insert(self.number);
        loop {
            let below = state.passed_below;
            if !state.passed.remove(&below) {
                break;
            }
            state.passed_below += 1;
        }
        drop(state);
        self.queue.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_ticket_waits_for_every_earlier_one_in_any_order_of_passing() {
        let queue = ApprovalQueue::new();
        let (a, b, c) = (queue.ticket(), queue.ticket(), queue.ticket());
        // The first never waits.
        tokio::time::timeout(Duration::from_secs(5), a.my_turn())
            .await
            .unwrap();
        let turn = |t: &ApprovalTicket| {
            let fut = t.my_turn();
            futures_util::FutureExt::now_or_never(fut).is_some()
        };
        assert!(!turn(&b) && !turn(&c));
        // c's predecessors pass out of order: b first, then a.
        drop(b);
        assert!(!turn(&c), "a has not passed yet");
        let waiting = tokio::spawn(async move {
            c.my_turn().await;
            c
        });
        tokio::task::yield_now().await;
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        drop(c);
        // A ticket taken after everything passed goes at once.
        assert!(turn(&queue.ticket()));
    }
}
