//! Who could answer a question now: the open event streams of this server.
//!
//! A tool call made with `POST /api/sessions/{sid}/tools/{name}` that needs an approval
//! (permission mode `auto`) or a review is answered with `POST /api/tool-approval/...` by
//! someone who saw the question: on the session's event stream
//! (`GET /api/sessions/{sid}/events`) or in the console, which follows the session list
//! (`GET /api/sessions/events`). With neither open, nobody can see the question, so it is
//! refused at once with [`Askers::check`]'s message rather than after the approval timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use toolbox_core::SessionId;

/// The open streams that show questions: of one session, or of every session (a console).
#[derive(Default)]
pub struct Askers {
    everywhere: AtomicUsize,
    sessions: Mutex<HashMap<SessionId, usize>>,
}

/// One open stream; counted until it is dropped (the connection closed).
pub struct Listening {
    askers: Arc<Askers>,
    session: Option<SessionId>,
}

impl Askers {
    /// A stream of the session list (the console): it sees every session's questions.
    pub fn everywhere(self: &Arc<Self>) -> Listening {
        self.everywhere.fetch_add(1, Ordering::SeqCst);
        Listening {
            askers: self.clone(),
            session: None,
        }
    }

    /// A stream of `session`'s events.
    pub fn session(self: &Arc<Self>, session: &SessionId) -> Listening {
        *lock(&self.sessions).entry(session.clone()).or_default() += 1;
        Listening {
            askers: self.clone(),
            session: Some(session.clone()),
        }
    }

    /// Whether a question of `session` would be seen by someone now; `Err` says how to
    /// make it seen.
    pub fn check(&self, session: &SessionId) -> Result<(), String> {
        if self.everywhere.load(Ordering::SeqCst) > 0
            || lock(&self.sessions).get(session).is_some_and(|n| *n > 0)
        {
            return Ok(());
        }
        Err(format!(
            "no console is open and nothing follows GET /api/sessions/{session}/events, so no \
             one would see the question. Open the console (or that event stream) before the \
             call and answer with POST /api/tool-approval/{session}/<call_id>, or start the \
             server with --mode full if such calls may run unasked"
        ))
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        match &self.session {
            None => {
                self.askers.everywhere.fetch_sub(1, Ordering::SeqCst);
            }
            Some(session) => {
                let mut sessions = lock(&self.askers.sessions);
                if let Some(n) = sessions.get_mut(session) {
                    *n -= 1;
                    if *n == 0 {
                        sessions.remove(session);
                    }
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_count_while_open() {
        let askers = Arc::new(Askers::default());
        let a = SessionId::parse("a").unwrap();
        let b = SessionId::parse("b").unwrap();
        assert!(askers.check(&a).is_err());
        let on_a = askers.session(&a);
        assert!(askers.check(&a).is_ok());
        assert!(askers.check(&b).is_err());
        let console = askers.everywhere();
        assert!(askers.check(&b).is_ok());
        drop(console);
        drop(on_a);
        assert!(askers.check(&a).is_err());
        assert!(lock(&askers.sessions).is_empty());
    }
}
