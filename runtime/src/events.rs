//! One typed event stream per session.
//!
//! Everything a turn does is a [`RuntimeEvent`], serialised as JSON with a stable `type`
//! field. The [`EventHub`] numbers each session's events (`seq`, from 1) and keeps the most
//! recent ones, so a front end that reconnects (SSE's `Last-Event-ID`) gets what it missed
//! and no approval request is lost. Every front end renders these same events.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;
use toolbox_core::{Preview, SessionId, ToolRisk};
use toolbox_executor::{CallStatus, ErrorKind};

use crate::llm::Usage;

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for tools.
    EndTurn,
    /// The model still wanted tools after the agent's `max_steps` model requests.
    MaxSteps,
    /// The turn was cancelled.
    Cancelled,
    /// The model request failed (see the `error` event before it).
    Error,
}

impl StopReason {
    /// The reason's name, e.g. `max_steps`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxSteps => "max_steps",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "error",
        }
    }
}

/// Something that happened in a session. `agent` and `depth` say which agent it belongs to:
/// depth 0 is the turn's own agent, 1 an agent it called with `call_agent`, and so on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RuntimeEvent {
    /// A turn began.
    TurnStarted {
        /// The turn's id.
        turn_id: String,
        /// The agent running it.
        agent: String,
        /// The user's message.
        message: String,
        /// The permission mode in force for the turn, after the ceiling.
        permission_mode: String,
    },
    /// A piece of the model's text, as it streams.
    TextDelta {
        /// The turn's id.
        turn_id: String,
        /// The agent whose model wrote it.
        agent: String,
        /// 0 for the turn's agent, more inside `call_agent`.
        depth: u32,
        /// The text.
        text: String,
    },
    /// A tool call is about to pass the gate and run.
    ToolCallStarted {
        /// The turn's id.
        turn_id: String,
        /// The agent that asked for it.
        agent: String,
        /// Its depth.
        depth: u32,
        /// The call's id.
        id: String,
        /// The tool's name as the model wrote it.
        name: String,
        /// The arguments: an object, or the text the model sent when it was not JSON.
        arguments: Value,
    },
    /// A risky call waits for an answer (permission mode `auto`).
    ToolApprovalRequest {
        /// The session, so a front end can answer without context.
        session_id: String,
        /// The call waiting.
        call_id: String,
        /// The tool's canonical name.
        tool: String,
        /// The arguments the tool will get.
        arguments: Value,
        /// Why it asks.
        risk: ToolRisk,
        /// What the call will do (a diff, the real path, the command and its folder): what a
        /// front end shows the person, instead of the arguments.
        preview: Preview,
        /// The agent that asked for it.
        agent: String,
        /// Its depth.
        depth: u32,
    },
    /// A chunk of a tool's streamed output.
    ToolCallOutput {
        /// The call.
        call_id: String,
        /// The tool's canonical name.
        tool: String,
        /// `stdout`, `stderr`, or `progress` for a tool's progress lines.
        stream: String,
        /// The text.
        text: String,
        /// The agent that asked for the call.
        agent: String,
        /// Its depth.
        depth: u32,
    },
    /// A tool call ended.
    ToolCallFinished {
        /// The turn's id.
        turn_id: String,
        /// The call.
        id: String,
        /// The tool's canonical name (or the name asked for, when unknown).
        tool: String,
        /// `done` or `error`.
        status: CallStatus,
        /// Why it failed, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_kind: Option<ErrorKind>,
        /// The start of what the model got back (at most [`PREVIEW_CHARS`] characters).
        result_preview: String,
        /// Where the full result was spooled, when it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spool_path: Option<String>,
        /// How long the call took, not counting the time it waited for a person.
        elapsed_ms: u64,
        /// How long it waited for a person to approve it (0 when it did not ask).
        #[serde(default)]
        waited_ms: u64,
        /// The agent that asked for it.
        agent: String,
        /// Its depth.
        depth: u32,
    },
    /// `call_agent` started a sub-turn.
    AgentStarted {
        /// The turn's id.
        turn_id: String,
        /// The agent called.
        agent: String,
        /// Its depth (1 for an agent the turn's agent called).
        depth: u32,
        /// The agent that called it.
        parent: String,
        /// The `call_agent` call's id.
        call_id: String,
        /// The task it was given.
        task: String,
    },
    /// A sub-turn ended; its answer is `call_agent`'s result.
    AgentFinished {
        /// The turn's id.
        turn_id: String,
        /// The agent.
        agent: String,
        /// Its depth.
        depth: u32,
        /// The `call_agent` call's id.
        call_id: String,
        /// Why the sub-turn ended.
        stop_reason: StopReason,
        /// The start of its answer.
        result_preview: String,
    },
    /// A turn ended.
    TurnFinished {
        /// The turn's id.
        turn_id: String,
        /// Why.
        stop_reason: StopReason,
        /// Model requests made (sub-agents included).
        steps: u32,
        /// Tokens used (sub-agents included).
        usage: Usage,
        /// For people, when the stop needs explaining (`max_steps`, a cancellation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notice: Option<String>,
    },
    /// Something went wrong outside a tool (the model request, the conversation file).
    Error {
        /// The turn's id, when it happened in one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn_id: Option<String>,
        /// What went wrong, for people.
        message: String,
    },
}

/// How many characters of a result events carry.
pub const PREVIEW_CHARS: usize = 500;

/// The first [`PREVIEW_CHARS`] characters of `text`, with an ellipsis when cut.
pub fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

/// An event as a session's stream delivers it: one JSON object with the event's own fields
/// and `type`, plus `seq` and `session_id` (written once, even for the events that carry a
/// `session_id` of their own, such as `tool_approval_request`).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// Its number in the session's stream, from 1; SSE's `id:`.
    pub seq: u64,
    /// The session.
    pub session_id: String,
    /// The event itself; its fields sit beside `seq` and `session_id` in JSON.
    pub event: RuntimeEvent,
}

impl Serialize for SessionEvent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut map = match serde_json::to_value(&self.event).map_err(S::Error::custom)? {
            Value::Object(map) => map,
            _ => return Err(S::Error::custom("an event is a JSON object")),
        };
        map.insert("seq".into(), Value::from(self.seq));
        map.insert("session_id".into(), Value::from(self.session_id.clone()));
        map.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SessionEvent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        let seq = value
            .get("seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| D::Error::missing_field("seq"))?;
        let session_id = value
            .get("session_id")
            .and_then(Value::as_str)
            .ok_or_else(|| D::Error::missing_field("session_id"))?
            .to_string();
        let event = RuntimeEvent::deserialize(value).map_err(D::Error::custom)?;
        Ok(SessionEvent {
            seq,
            session_id,
            event,
        })
    }
}

/// How many events of each session are kept for replay.
pub const HISTORY: usize = 10_000;
/// How far a live subscriber may fall behind before it has to catch up from the history
/// (the channel's slots are allocated up front, per session).
const CHANNEL: usize = 256;
/// Streams kept before idle ones (nobody subscribed, no turn in flight) are dropped with
/// their history: the
/// conversation and the trajectory on disk are the durable record, and a client naming
/// session after session must not grow memory without bound.
pub const MAX_STREAMS: usize = 4096;

struct Stream {
    state: Mutex<StreamState>,
    live: broadcast::Sender<Arc<SessionEvent>>,
}

struct StreamState {
    next_seq: u64,
    history: VecDeque<Arc<SessionEvent>>,
}

/// How far a subscriber to every session's events ([`EventHub::subscribe_all`]) may fall
/// behind before it gets `Lagged`.
const ALL_CHANNEL: usize = 1024;

/// Every session's event stream.
#[derive(Clone)]
pub struct EventHub {
    streams: Arc<Mutex<HashMap<SessionId, Arc<Stream>>>>,
    /// Every event of every session, for front ends that watch them all (a session list).
    all: broadcast::Sender<Arc<SessionEvent>>,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub {
            streams: Arc::default(),
            all: broadcast::channel(ALL_CHANNEL).0,
        }
    }
}

/// A live subscription: what was missed, then everything new.
pub struct Subscription {
    /// Events after the `after` the subscriber gave, oldest first.
    pub missed: Vec<Arc<SessionEvent>>,
    /// New events as they happen. On `Lagged`, catch up with [`EventHub::since`].
    pub live: broadcast::Receiver<Arc<SessionEvent>>,
}

impl EventHub {
    fn stream(&self, session: &SessionId) -> Arc<Stream> {
        let mut streams = lock(&self.streams);
        if streams.len() >= MAX_STREAMS && !streams.contains_key(session) {
            // Only quiet ones: nobody listening and the last turn over (a turn in flight
            // keeps its numbering).
            streams.retain(|_, s| {
                s.live.receiver_count() > 0
                    || !lock(&s.state)
                        .history
                        .back()
                        .is_none_or(|e| matches!(e.event, RuntimeEvent::TurnFinished { .. }))
            });
        }
        streams
            .entry(session.clone())
            .or_insert_with(|| {
                Arc::new(Stream {
                    state: Mutex::new(StreamState {
                        next_seq: 1,
                        history: VecDeque::new(),
                    }),
                    live: broadcast::channel(CHANNEL).0,
                })
            })
            .clone()
    }

    /// Numbers `event`, keeps it for replay and hands it to every subscriber. Returns its seq.
    pub fn emit(&self, session: &SessionId, event: RuntimeEvent) -> u64 {
        let stream = self.stream(session);
        let mut state = lock(&stream.state);
        let seq = state.next_seq;
        state.next_seq += 1;
        let event = Arc::new(SessionEvent {
            seq,
            session_id: session.to_string(),
            event,
        });
        if state.history.len() == HISTORY {
            state.history.pop_front();
        }
        state.history.push_back(event.clone());
        // Sent under the lock, so a subscriber's `missed` and `live` never overlap or gap.
        let _ = stream.live.send(event.clone());
        let _ = self.all.send(event);
        seq
    }

    /// Subscribes to the events of every session, from now on (nothing is replayed): for a
    /// front end that follows all sessions at once, such as a session list showing which
    /// ones run or wait for an approval. Each session's events arrive in their order; a
    /// subscriber that falls more than 1024 events behind gets `Lagged` and should then
    /// look at the state afresh rather than replay.
    pub fn subscribe_all(&self) -> broadcast::Receiver<Arc<SessionEvent>> {
        self.all.subscribe()
    }

    /// Subscribes to `session`, with the kept events numbered above `after` (all of them for
    /// `None`) as `missed`.
    ///
    /// An `after` beyond the last event numbered so far comes from an earlier run of the
    /// process (numbers start at 1 again after a restart): the subscriber then gets every
    /// kept event rather than waiting for numbers to catch up.
    pub fn subscribe(&self, session: &SessionId, after: Option<u64>) -> Subscription {
        let stream = self.stream(session);
        let state = lock(&stream.state);
        let live = stream.live.subscribe();
        let after = after.unwrap_or(0);
        let after = if after >= state.next_seq { 0 } else { after };
        Subscription {
            missed: state
                .history
                .iter()
                .filter(|e| e.seq > after)
                .cloned()
                .collect(),
            live,
        }
    }

    /// The kept events of `session` numbered above `after`.
    pub fn since(&self, session: &SessionId, after: u64) -> Vec<Arc<SessionEvent>> {
        let stream = self.stream(session);
        let state = lock(&stream.state);
        state
            .history
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sid(s: &str) -> SessionId {
        SessionId::parse(s).unwrap()
    }

    fn error(text: &str) -> RuntimeEvent {
        RuntimeEvent::Error {
            turn_id: None,
            message: text.into(),
        }
    }

    #[test]
    fn events_serialise_with_a_type_tag_beside_seq() {
        let hub = EventHub::default();
        hub.emit(&sid("a"), error("x"));
        let got = hub.since(&sid("a"), 0);
        let json = serde_json::to_value(&*got[0]).unwrap();
        assert_eq!(json["type"], "error");
        assert_eq!(json["seq"], 1);
        assert_eq!(json["session_id"], "a");
        assert_eq!(json["message"], "x");
        let back: SessionEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, *got[0]);
    }

    #[test]
    fn sessions_are_numbered_apart_and_replayed_after_a_seq() {
        let hub = EventHub::default();
        for i in 0..5 {
            hub.emit(&sid("a"), error(&format!("a{i}")));
        }
        hub.emit(&sid("b"), error("b0"));
        let sub = hub.subscribe(&sid("a"), Some(3));
        let seqs: Vec<u64> = sub.missed.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [4, 5]);
        assert_eq!(hub.since(&sid("b"), 0)[0].seq, 1);
    }

    #[tokio::test]
    async fn a_subscriber_gets_new_events_without_gap_or_overlap() {
        let hub = EventHub::default();
        hub.emit(&sid("a"), error("old"));
        let mut sub = hub.subscribe(&sid("a"), None);
        hub.emit(&sid("a"), error("new"));
        assert_eq!(sub.missed.len(), 1);
        let next = sub.live.recv().await.unwrap();
        assert_eq!(next.seq, 2);
    }

    #[test]
    fn an_event_with_its_own_session_id_writes_it_once() {
        let hub = EventHub::default();
        hub.emit(
            &sid("a"),
            RuntimeEvent::ToolApprovalRequest {
                session_id: "a".into(),
                call_id: "c".into(),
                tool: "shell".into(),
                arguments: Value::Null,
                risk: ToolRisk::Shell,
                preview: Preview::new("Run shell"),
                agent: "default".into(),
                depth: 0,
            },
        );
        let event = &hub.since(&sid("a"), 0)[0];
        let text = serde_json::to_string(&**event).unwrap();
        assert_eq!(text.matches("\"session_id\"").count(), 1, "{text}");
        let back: SessionEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, **event);
    }

    #[test]
    fn a_last_id_from_an_earlier_run_replays_everything() {
        let hub = EventHub::default();
        hub.emit(&sid("a"), error("x"));
        hub.emit(&sid("a"), error("y"));
        assert_eq!(hub.subscribe(&sid("a"), Some(500)).missed.len(), 2);
        assert_eq!(hub.subscribe(&sid("a"), Some(2)).missed.len(), 0);
    }

    #[test]
    fn history_is_bounded() {
        let hub = EventHub::default();
        for _ in 0..HISTORY + 10 {
            hub.emit(&sid("a"), error("x"));
        }
        let all = hub.since(&sid("a"), 0);
        assert_eq!(all.len(), HISTORY);
        assert_eq!(all[0].seq, 11);
    }

    #[test]
    fn idle_streams_are_dropped_past_the_cap() {
        let hub = EventHub::default();
        let watched = hub.subscribe(&sid("watched"), None);
        let finished = || RuntimeEvent::TurnFinished {
            turn_id: "t".into(),
            stop_reason: StopReason::EndTurn,
            steps: 1,
            usage: Usage::default(),
            notice: None,
        };
        // A turn in flight (its last event is no turn_finished) keeps its stream.
        hub.emit(&sid("busy"), error("x"));
        for i in 0..MAX_STREAMS + 10 {
            hub.emit(&sid(&format!("s{i}")), finished());
        }
        let count = lock(&hub.streams).len();
        assert!(count <= MAX_STREAMS, "{count}");
        assert!(lock(&hub.streams).contains_key(&sid("watched")));
        assert!(lock(&hub.streams).contains_key(&sid("busy")));
        drop(watched);
    }

    #[tokio::test]
    async fn a_subscriber_to_all_sessions_gets_every_sessions_new_events() {
        let hub = EventHub::default();
        hub.emit(&sid("a"), error("before"));
        let mut all = hub.subscribe_all();
        hub.emit(&sid("a"), error("a1"));
        hub.emit(&sid("b"), error("b1"));
        let first = all.recv().await.unwrap();
        let second = all.recv().await.unwrap();
        assert_eq!((first.session_id.as_str(), first.seq), ("a", 2));
        assert_eq!((second.session_id.as_str(), second.seq), ("b", 1));
        assert!(all.try_recv().is_err());
    }

    #[test]
    fn previews_cut_on_characters() {
        let long = "é".repeat(PREVIEW_CHARS + 5);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert_eq!(preview("short"), "short");
    }
}
