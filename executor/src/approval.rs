use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Mutex;

use anyhow::bail;
use tokio::sync::oneshot;

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run this call.
    Approve,
    /// Run this call and every later call of the same tool in the same session.
    ApproveForSession,
    /// Refuse this call.
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
            "deny" | "no" | "n" => Ok(ApprovalDecision::Deny),
            other => bail!("approval must be approve, approve_for_session or deny (got {other:?})"),
        }
    }
}

type Key = (String, String);

/// What a waiting call receives: the decision and, for a denial, why (else the default text).
pub(crate) type Answer = (ApprovalDecision, Option<String>);

/// Pending approval requests and the per-session approvals already given.
#[derive(Default)]
pub(crate) struct ApprovalBroker {
    pending: Mutex<HashMap<Key, oneshot::Sender<Answer>>>,
    session_approved: Mutex<HashSet<Key>>,
}

impl ApprovalBroker {
    /// Whether `tool` was approved for the whole of `session` earlier.
    pub fn approved_for_session(&self, session: &str, tool: &str) -> bool {
        lock(&self.session_approved).contains(&(session.to_string(), tool.to_string()))
    }

    /// Registers a pending request; the receiver resolves when someone answers.
    pub fn open(&self, session: &str, call_id: &str) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert((session.to_string(), call_id.to_string()), tx);
        rx
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

    /// Answers a pending request. False when no request with that id is waiting.
    pub fn respond(&self, session: &str, call_id: &str, answer: Answer) -> bool {
        let sender = lock(&self.pending).remove(&(session.to_string(), call_id.to_string()));
        match sender {
            Some(tx) => tx.send(answer).is_ok(),
            None => false,
        }
    }
}

/// A poisoned lock only means another call panicked mid-update of a plain map; keep going.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
