//! One typed event stream per session.
//!
//! Everything a turn does is a [`RuntimeEvent`], serialised as JSON with a stable `type`
//! field. The [`EventHub`] numbers each session's events (`seq`, from 1) and keeps the most
//! recent ones, so a front end that reconnects (SSE's `Last-Event-ID`) gets what it missed
//! and no approval request is lost. Every front end renders these same events.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// A newer session server took the session over (a newer epoch claimed it): this session
    /// server stopped the turn and exits. See docs/scale-out.md.
    Superseded,
    /// The session server running the turn was lost (killed, its machine gone); the session
    /// server that resumed the session ends it so. Nothing of it is re-run.
    Interrupted,
}

impl StopReason {
    /// The reason's name, e.g. `max_steps`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxSteps => "max_steps",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "error",
            StopReason::Superseded => "superseded",
            StopReason::Interrupted => "interrupted",
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
        session_id: SessionId,
        /// The call waiting.
        call_id: String,
        /// The tool's canonical name.
        tool: String,
        /// The name the call was made by, when it was another one (an alias, or the tool's
        /// word in the model's vocabulary: `bash` for `shell`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
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
    /// A tool asks a person to review something (a goal, a plan): approve or reject, with
    /// optional feedback, answered like an approval (`POST /api/tool-approval/{sid}/{call_id}`
    /// with `decision` `approve` or `reject` and `feedback`). Asked in every permission mode.
    ReviewRequest {
        /// The session, so a front end can answer without context.
        session_id: SessionId,
        /// The call waiting.
        call_id: String,
        /// The tool that asks.
        tool: String,
        /// The name the call was made by, when it was another one (an alias, or the tool's
        /// word in the model's vocabulary: `bash` for `shell`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
        /// What is to be reviewed, rendered (the goal, or the checklist).
        preview: Preview,
        /// The agent that asked for it.
        agent: String,
        /// Its depth.
        depth: u32,
    },
    /// A review was answered, or given up on (no one could be asked, the wait ran out).
    ReviewAnswered {
        /// The session.
        session_id: SessionId,
        /// The call that asked.
        call_id: String,
        /// `approved`, `rejected` or `not_asked`.
        answer: String,
        /// Who answered (the front end), when someone did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The person's feedback, or why no one answered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        feedback: Option<String>,
    },
    /// The session's plan changed (its goal, steps or a review state).
    PlanUpdated {
        /// The call that changed it.
        call_id: String,
        /// The whole plan, as stored.
        plan: Value,
        /// The plan as a checklist, for people.
        checklist: String,
    },
    /// A chunk of a tool's streamed output.
    ToolCallOutput {
        /// The call.
        call_id: String,
        /// The tool's canonical name.
        tool: String,
        /// The name the call was made by, when it was another one (an alias, or the tool's
        /// word in the model's vocabulary: `bash` for `shell`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
        /// `stdout`, `stderr`, or `progress` for a tool's progress lines.
        stream: String,
        /// The text.
        text: String,
        /// The agent that asked for the call.
        agent: String,
        /// Its depth.
        depth: u32,
    },
    /// How far a call's long work is (a data conversion's rows and bytes, say): the latest
    /// report replaces the one before. A progress line without numbers comes as
    /// [`RuntimeEvent::ToolCallOutput`] on stream `progress` instead.
    ToolCallProgress {
        /// The call.
        call_id: String,
        /// The tool's canonical name.
        tool: String,
        /// The name the call was made by, when it was another one (an alias, or the tool's
        /// word in the model's vocabulary: `bash` for `shell`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
        /// How far it is, for people ("1,234 rows, 18 MB of 51 MB (35%)").
        message: String,
        /// How much is done, in the tool's unit (bytes read, say).
        done: u64,
        /// How much there is in all, in the same unit, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<u64>,
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
    /// The session was resumed by this session server from the state store (session server
    /// mode): what came back, and what could not. See docs/scale-out.md.
    SessionResumed {
        /// The epoch of the session server that resumed it.
        epoch: u64,
        /// The bytes of the files restored.
        restored_bytes: u64,
        /// What lived only in the lost session server's processes: `python`,
        /// `background_jobs`, `pending_approvals`.
        lost: Vec<String>,
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
    pub session_id: SessionId,
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
        map.insert("session_id".into(), Value::from(self.session_id.as_str()));
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
            .ok_or_else(|| D::Error::missing_field("session_id"))?;
        let session_id = SessionId::parse(session_id).map_err(D::Error::custom)?;
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
/// How many bytes of events (as JSON) each session keeps for replay, at most: past it the
/// oldest events go first, as past [`HISTORY`].
pub const HISTORY_BYTES: usize = 2 * 1024 * 1024;
/// How many bytes of events all sessions together keep. Past it the quiet streams (nobody
/// subscribed, no turn in flight) that were active longest ago are dropped whole.
pub const TOTAL_HISTORY_BYTES: usize = 256 * 1024 * 1024;
/// How far a live subscriber may fall behind before it has to catch up from the history
/// (the channel's slots are allocated up front, per session).
const CHANNEL: usize = 256;
/// Streams kept before idle ones (nobody subscribed, no turn in flight) are dropped with
/// their history: the
/// conversation and the trajectory on disk are the durable record, and a client naming
/// session after session must not grow memory without bound.
pub const MAX_STREAMS: usize = 4096;
/// A stream nobody is subscribed to whose last turn ended is dropped once it has had no
/// event for this long.
pub const STREAM_IDLE: Duration = Duration::from_secs(30 * 60);
/// A stream whose turn never said it finished (its process part died, say) is dropped
/// after this long without an event, when nobody is subscribed.
pub const UNFINISHED_STREAM_IDLE: Duration = Duration::from_secs(6 * 60 * 60);
/// How often, at most, idle streams are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The bounds of an [`EventHub`]; [`Default`] gives the constants above.
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    /// Events kept per session.
    pub history: usize,
    /// Bytes of events kept per session.
    pub history_bytes: usize,
    /// Bytes of events kept in all.
    pub total_bytes: usize,
    /// Streams kept before quiet ones are dropped.
    pub max_streams: usize,
    /// Idle time after which a quiet finished stream is dropped.
    pub idle: Duration,
    /// Idle time after which an unwatched unfinished stream is dropped.
    pub unfinished_idle: Duration,
    /// How often, at most, idle streams are looked for.
    pub sweep_every: Duration,
}

impl Default for HubLimits {
    fn default() -> Self {
        HubLimits {
            history: HISTORY,
            history_bytes: HISTORY_BYTES,
            total_bytes: TOTAL_HISTORY_BYTES,
            max_streams: MAX_STREAMS,
            idle: STREAM_IDLE,
            unfinished_idle: UNFINISHED_STREAM_IDLE,
            sweep_every: SWEEP_EVERY,
        }
    }
}

struct Stream {
    state: Mutex<StreamState>,
    live: broadcast::Sender<Arc<SessionEvent>>,
}

struct StreamState {
    next_seq: u64,
    history: VecDeque<(Arc<SessionEvent>, usize)>,
    /// The JSON size of the kept events.
    bytes: usize,
    /// When the last event was emitted (or the stream was made).
    active: Instant,
}

impl Stream {
    /// Nobody listens and the last turn is over (a turn in flight keeps its numbering).
    fn quiet(&self, state: &StreamState) -> bool {
        self.live.receiver_count() == 0 && state.finished()
    }
}

impl StreamState {
    fn finished(&self) -> bool {
        self.history
            .back()
            .is_none_or(|(e, _)| matches!(e.event, RuntimeEvent::TurnFinished { .. }))
    }
}

/// How far a subscriber to every session's events ([`EventHub::subscribe_all`]) may fall
/// behind before it gets `Lagged`.
const ALL_CHANNEL: usize = 1024;

#[derive(Default)]
struct Streams {
    map: HashMap<SessionId, Arc<Stream>>,
    /// The JSON size of every kept event, all streams together.
    bytes: usize,
    swept: Option<Instant>,
}

/// Every session's event stream.
///
/// Bounded: at most [`HubLimits::history`] events and [`HubLimits::history_bytes`] bytes per
/// session, [`HubLimits::total_bytes`] in all, and [`HubLimits::max_streams`] streams; a
/// stream nobody watches is dropped after [`HubLimits::idle`] without an event.
#[derive(Clone)]
pub struct EventHub {
    streams: Arc<Mutex<Streams>>,
    /// Every event of every session, for front ends that watch them all (a session list).
    all: broadcast::Sender<Arc<SessionEvent>>,
    limits: HubLimits,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub::with_limits(HubLimits::default())
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
    /// A hub with other bounds than the default ones (tests, small hosts).
    pub fn with_limits(limits: HubLimits) -> Self {
        EventHub {
            streams: Arc::default(),
            all: broadcast::channel(ALL_CHANNEL).0,
            limits,
        }
    }

    fn stream(&self, session: &SessionId) -> Arc<Stream> {
        self.stream_locked(&mut lock(&self.streams), session)
    }

    /// The stream of `session`, made if need be, marked active: under the streams' lock, so
    /// a sweep never drops a stream that is being used.
    fn stream_locked(&self, streams: &mut Streams, session: &SessionId) -> Arc<Stream> {
        let now = Instant::now();
        if let Some(stream) = streams.map.get(session) {
            lock(&stream.state).active = now;
            return stream.clone();
        }
        if streams
            .swept
            .is_none_or(|t| now.duration_since(t) >= self.limits.sweep_every)
        {
            streams.swept = Some(now);
            self.drop_streams(streams, |stream, state| {
                let idle = now.duration_since(state.active);
                stream.live.receiver_count() == 0
                    && if state.finished() {
                        idle >= self.limits.idle
                    } else {
                        idle >= self.limits.unfinished_idle
                    }
            });
        }
        if streams.map.len() >= self.limits.max_streams {
            self.drop_streams(streams, |stream, state| stream.quiet(state));
        }
        let stream = Arc::new(Stream {
            state: Mutex::new(StreamState {
                next_seq: 1,
                history: VecDeque::new(),
                bytes: 0,
                active: now,
            }),
            live: broadcast::channel(CHANNEL).0,
        });
        streams.map.insert(session.clone(), stream.clone());
        stream
    }

    /// Drops every stream `gone` says so of, with its bytes.
    fn drop_streams(
        &self,
        streams: &mut Streams,
        mut gone: impl FnMut(&Stream, &StreamState) -> bool,
    ) {
        let mut freed = 0;
        streams.map.retain(|_, stream| {
            let state = lock(&stream.state);
            if gone(stream, &state) {
                freed += state.bytes;
                false
            } else {
                true
            }
        });
        streams.bytes -= freed;
    }

    /// Numbers `event`, keeps it for replay and hands it to every subscriber. Returns its seq.
    pub fn emit(&self, session: &SessionId, event: RuntimeEvent) -> u64 {
        let event = SessionEvent {
            seq: 0,
            session_id: session.clone(),
            event,
        };
        let mut streams = lock(&self.streams);
        let stream = self.stream_locked(&mut streams, session);
        let seq = {
            let mut state = lock(&stream.state);
            let seq = state.next_seq;
            state.next_seq += 1;
            let event = Arc::new(SessionEvent { seq, ..event });
            let size = toolbox_core::json_len(&*event);
            let mut freed = 0;
            while !state.history.is_empty()
                && (state.history.len() >= self.limits.history
                    || state.bytes + size > self.limits.history_bytes)
            {
                let (_, old) = state.history.pop_front().expect("not empty");
                state.bytes -= old;
                freed += old;
            }
            state.history.push_back((event.clone(), size));
            state.bytes += size;
            streams.bytes = streams.bytes + size - freed;
            // Sent under the lock, so a subscriber's `missed` and `live` never overlap or gap.
            let _ = stream.live.send(event.clone());
            let _ = self.all.send(event);
            seq
        };
        if streams.bytes > self.limits.total_bytes {
            self.shed(&mut streams);
        }
        seq
    }

    /// Drops quiet streams, those active longest ago first, until the total is within its
    /// bound (or no quiet stream is left).
    fn shed(&self, streams: &mut Streams) {
        let mut quiet: Vec<(Instant, SessionId, usize)> = streams
            .map
            .iter()
            .filter_map(|(sid, stream)| {
                let state = lock(&stream.state);
                stream
                    .quiet(&state)
                    .then(|| (state.active, sid.clone(), state.bytes))
            })
            .collect();
        quiet.sort_by_key(|(active, _, _)| *active);
        for (_, sid, bytes) in quiet {
            if streams.bytes <= self.limits.total_bytes {
                break;
            }
            streams.map.remove(&sid);
            streams.bytes -= bytes;
        }
    }

    /// How many streams are kept, and the bytes of their events.
    pub fn kept(&self) -> (usize, usize) {
        let streams = lock(&self.streams);
        (streams.map.len(), streams.bytes)
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
                .filter(|(e, _)| e.seq > after)
                .map(|(e, _)| e.clone())
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
            .filter(|(e, _)| e.seq > after)
            .map(|(e, _)| e.clone())
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
                session_id: SessionId::parse("a").unwrap(),
                call_id: "c".into(),
                tool: "shell".into(),
                called_as: None,
                arguments: Value::Null,
                risk: ToolRisk::Command,
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

    fn finished() -> RuntimeEvent {
        RuntimeEvent::TurnFinished {
            turn_id: "t".into(),
            stop_reason: StopReason::EndTurn,
            steps: 1,
            usage: Usage::default(),
            notice: None,
        }
    }

    #[test]
    fn history_is_bounded_in_bytes_too() {
        let hub = EventHub::default();
        let big = "x".repeat(100_000);
        for _ in 0..100 {
            hub.emit(&sid("a"), error(&big));
        }
        let all = hub.since(&sid("a"), 0);
        let bytes: usize = all
            .iter()
            .map(|e| serde_json::to_vec(&**e).unwrap().len())
            .sum();
        assert!(bytes <= HISTORY_BYTES, "{bytes}");
        assert!(all.len() >= 15, "{}", all.len());
        assert_eq!(all.last().unwrap().seq, 100);
        assert_eq!(hub.kept(), (1, bytes));
    }

    #[test]
    fn all_histories_together_are_bounded_and_the_oldest_quiet_ones_go() {
        let hub = EventHub::with_limits(HubLimits {
            total_bytes: 1_000_000,
            ..HubLimits::default()
        });
        let watched = hub.subscribe(&sid("watched"), None);
        hub.emit(&sid("watched"), error(&"w".repeat(50_000)));
        let big = "x".repeat(50_000);
        for i in 0..200 {
            hub.emit(&sid(&format!("s{i}")), error(&big));
            hub.emit(&sid(&format!("s{i}")), finished());
        }
        let (streams, bytes) = hub.kept();
        assert!(bytes <= 1_000_000, "{bytes}");
        assert!(streams < 30, "{streams}");
        let kept = lock(&hub.streams);
        assert!(kept.map.contains_key(&sid("watched")));
        assert!(kept.map.contains_key(&sid("s199")));
        assert!(!kept.map.contains_key(&sid("s0")));
        let counted: usize = kept.map.values().map(|s| lock(&s.state).bytes).sum();
        assert_eq!(counted, bytes);
        drop(kept);
        drop(watched);
    }

    #[test]
    fn quiet_streams_expire_when_idle() {
        let hub = EventHub::with_limits(HubLimits {
            idle: Duration::from_millis(50),
            unfinished_idle: Duration::from_millis(2000),
            sweep_every: Duration::ZERO,
            ..HubLimits::default()
        });
        let watched = hub.subscribe(&sid("watched"), None);
        hub.emit(&sid("watched"), finished());
        hub.emit(&sid("done"), finished());
        hub.emit(&sid("busy"), error("a turn in flight"));
        std::thread::sleep(Duration::from_millis(100));
        hub.emit(&sid("new"), finished());
        let names = |hub: &EventHub| {
            let mut names: Vec<String> = lock(&hub.streams)
                .map
                .keys()
                .map(|s| s.to_string())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&hub), ["busy", "new", "watched"]);
        std::thread::sleep(Duration::from_millis(2100));
        hub.emit(&sid("newer"), finished());
        assert_eq!(names(&hub), ["newer", "watched"]);
        assert_eq!(
            hub.kept().1,
            lock(&hub.streams)
                .map
                .values()
                .map(|s| lock(&s.state).bytes)
                .sum::<usize>()
        );
        drop(watched);
    }

    #[test]
    fn idle_streams_are_dropped_past_the_cap() {
        let hub = EventHub::default();
        let watched = hub.subscribe(&sid("watched"), None);
        // A turn in flight (its last event is no turn_finished) keeps its stream.
        hub.emit(&sid("busy"), error("x"));
        for i in 0..MAX_STREAMS + 10 {
            hub.emit(&sid(&format!("s{i}")), finished());
        }
        let count = lock(&hub.streams).map.len();
        assert!(count <= MAX_STREAMS, "{count}");
        assert!(lock(&hub.streams).map.contains_key(&sid("watched")));
        assert!(lock(&hub.streams).map.contains_key(&sid("busy")));
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
