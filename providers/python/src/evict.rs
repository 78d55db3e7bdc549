//! Sessions that nobody uses any more give back what they hold.
//!
//! Each backend keeps something per session for as long as the process lives unless told
//! otherwise: embedded, a namespace in the one interpreter; isolated, a worker process; a
//! started Jupyter kernel, a kernel process. A server that sees session after session would
//! grow without bound. So every backend follows one rule, `[python] session_idle_ms` and
//! `[python] max_live_sessions`:
//!
//! - a session whose last call ended more than `session_idle_ms` ago (30 minutes by default)
//!   loses its state (namespace, worker or kernel);
//! - past `max_live_sessions` live sessions (64 by default) per backend, the ones whose last
//!   call ended longest ago lose theirs, so the new one has room; a session with a call
//!   running is never touched;
//! - the session's next call starts afresh and its result says so, as after a crash.
//!
//! Backends look for such sessions when a call comes (at most once a second) and a
//! background task does so every [`SWEEP_EVERY`], so an idle server gives its memory back too
//! (the clock for both is `crate::sessions`'s).
//!
//! Here are the rule ([`choose`]) and the table the isolated and jupyter backends keep their
//! slots in (`Slots`), which applies it; the embedded backend applies it to its namespaces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The default of `[python] session_idle_ms`.
pub const DEFAULT_SESSION_IDLE: Duration = Duration::from_secs(30 * 60);
/// The default of `[python] max_live_sessions`.
pub const DEFAULT_MAX_LIVE_SESSIONS: usize = 64;
/// How often the background task looks.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// How often, at most, a call looks.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The rule in force: the latest configuration a call brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session idle this long loses its state.
    pub idle: Duration,
    /// At most this many live sessions per backend.
    pub max_live: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle: DEFAULT_SESSION_IDLE,
            max_live: DEFAULT_MAX_LIVE_SESSIONS,
        }
    }
}

/// Why a session lost its state, told to its next call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evicted {
    /// It was idle for longer than `session_idle_ms`.
    Idle(Duration),
    /// Other sessions needed the room (`max_live_sessions`).
    Room(usize),
}

impl Evicted {
    /// Completes "this session's Python {what} …", e.g. with `done` = "was stopped".
    pub fn why(&self, done: &str) -> String {
        match self {
            Evicted::Idle(idle) => format!(
                "{done} after {} without a call ([python] session_idle_ms)",
                humantime::format_duration(if *idle >= Duration::from_secs(1) {
                    Duration::from_secs(idle.as_secs())
                } else {
                    Duration::from_millis(idle.as_millis() as u64)
                })
            ),
            Evicted::Room(max) => format!(
                "{done} to make room for other sessions ([python] max_live_sessions = {max})"
            ),
        }
    }
}

/// One live session a backend could evict: its key and when its last call ended.
pub struct Candidate<K> {
    /// The backend's own handle on it.
    pub key: K,
    /// When its last call ended.
    pub last_used: Instant,
}

/// Which of `live` (sessions with no call running) to evict, and why, given `busy` more
/// sessions that are running a call now and `incoming` about to start one.
pub fn choose<K>(
    mut live: Vec<Candidate<K>>,
    busy: usize,
    incoming: usize,
    limits: SessionLimits,
    now: Instant,
) -> Vec<(K, Evicted)> {
    let mut evicted = Vec::new();
    live.sort_by_key(|c| c.last_used);
    let mut kept = Vec::with_capacity(live.len());
    for c in live {
        let idle = now.saturating_duration_since(c.last_used);
        if idle >= limits.idle {
            evicted.push((c.key, Evicted::Idle(limits.idle)));
        } else {
            kept.push(c);
        }
    }
    let total = kept.len() + busy + incoming;
    let over = total.saturating_sub(limits.max_live.max(1));
    for c in kept.into_iter().take(over) {
        evicted.push((c.key, Evicted::Room(limits.max_live)));
    }
    evicted
}

/// What a backend keeps in one slot of a [`Slots`] table (a session's worker, a kernel).
pub(crate) trait SlotState: Default + Send + 'static {
    /// Whether the rule never applies to the slot `key` (an attached kernel is its owner's).
    fn exempt(key: &str) -> bool {
        let _ = key;
        false
    }
    /// Whether the slot holds nothing (no worker, no kernel).
    fn is_empty(&self) -> bool;
    /// Whether it holds something the rule may take back; by default, anything.
    fn is_live(&self) -> bool {
        !self.is_empty()
    }
    /// Whether it has something to tell its next call.
    fn has_note(&self) -> bool;
    /// When the slot's last call ended.
    fn last_used(&self) -> Option<Instant>;
    /// Gives back what it holds (kills the worker or the kernel) and notes why, for the next
    /// call.
    fn give_back(&mut self, why: &Evicted);
}

/// A table of slots by key, each behind its own lock: a call holds its slot's lock for as
/// long as it runs, so calls of one slot run one at a time and a slot being used is never
/// evicted.
pub(crate) struct Slots<S> {
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<S>>>>,
}

impl<S> Default for Slots<S> {
    fn default() -> Self {
        Slots {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: SlotState> Slots<S> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<S>>>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot `key`, made empty if there is none.
    pub fn slot(&self, key: &str) -> Arc<tokio::sync::Mutex<S>> {
        self.lock().entry(key.to_string()).or_default().clone()
    }

    /// Whether the slot `key` holds nothing (and no call running is filling it).
    pub fn is_empty(&self, key: &str) -> bool {
        self.lock()
            .get(key)
            .is_none_or(|slot| slot.try_lock().is_ok_and(|s| s.is_empty()))
    }

    /// Gives back what the rule says should go; `incoming` (a slot about to run a call) is
    /// never one of them, and counts as live. Slots left holding nothing, with nothing to
    /// tell, are forgotten.
    pub fn evict(&self, limits: SessionLimits, incoming: Option<&str>) {
        let slots: Vec<(String, Arc<tokio::sync::Mutex<S>>)> = self
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let now = Instant::now();
        let (mut guards, mut live, mut busy) = (Vec::new(), Vec::new(), 0);
        for (key, slot) in slots {
            if Some(key.as_str()) == incoming || S::exempt(&key) {
                continue;
            }
            match slot.try_lock_owned() {
                Ok(guard) if guard.is_live() => {
                    live.push(Candidate {
                        key: guards.len(),
                        last_used: guard.last_used().unwrap_or(now),
                    });
                    guards.push(guard);
                }
                Ok(_) => {}
                Err(_) => busy += 1,
            }
        }
        let incoming = usize::from(incoming.is_some_and(|key| !S::exempt(key)));
        for (i, why) in choose(live, busy, incoming, limits, now) {
            guards[i].give_back(&why);
        }
        drop(guards);
        self.lock().retain(|_, slot| {
            Arc::strong_count(slot) > 1
                || slot
                    .try_lock()
                    .map_or(true, |s| !s.is_empty() || s.has_note())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now: Instant, ago_s: u64) -> Instant {
        now - Duration::from_secs(ago_s)
    }

    #[test]
    fn idle_sessions_go_then_the_oldest_past_the_cap() {
        let now = Instant::now();
        let limits = SessionLimits {
            idle: Duration::from_secs(100),
            max_live: 3,
        };
        let live = vec![
            Candidate {
                key: "a",
                last_used: at(now, 50),
            },
            Candidate {
                key: "idle",
                last_used: at(now, 200),
            },
            Candidate {
                key: "b",
                last_used: at(now, 10),
            },
            Candidate {
                key: "c",
                last_used: at(now, 30),
            },
        ];
        // a, b, c live, one busy, one incoming: 5 > 3, so the two oldest of a, b, c go.
        let got = choose(live, 1, 1, limits, now);
        assert_eq!(
            got,
            [
                ("idle", Evicted::Idle(limits.idle)),
                ("a", Evicted::Room(3)),
                ("c", Evicted::Room(3)),
            ]
        );
        assert!(choose(Vec::<Candidate<&str>>::new(), 10, 1, limits, now).is_empty());
    }

    #[test]
    fn the_notes_name_the_keys() {
        assert_eq!(
            Evicted::Idle(Duration::from_secs(1800)).why("was stopped"),
            "was stopped after 30m without a call ([python] session_idle_ms)"
        );
        assert!(Evicted::Room(64)
            .why("was cleared")
            .starts_with("was cleared to make room"));
    }
}
