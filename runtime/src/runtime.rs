//! [`Runtime`]: turns, one at a time per session, over one executor and one model.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, SessionId, Table};
use toolbox_executor::{ApprovalDecision, PermissionMode, Permissions, ToolExecutor};
use toolbox_host::CancellationToken;

use crate::agent::ActiveAgent;
use crate::events::{EventHub, RuntimeEvent, StopReason};
use crate::llm::{LlmClient, Usage};

/// Settings of the runtime itself.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Model requests per turn for an agent that sets no `max_steps`.
    pub default_max_steps: u32,
    /// How deep `call_agent` may nest (the turn's agent is depth 0).
    pub max_agent_depth: u32,
    /// How many tool calls of one model reply run at once (`[runtime] max_parallel_calls`);
    /// the others wait for a free place, in order.
    pub max_parallel_calls: usize,
    /// How many tool calls one turn may make in all, sub-agents included
    /// (`[runtime] max_calls_per_turn`); past it calls are refused and the turn ends.
    pub max_calls_per_turn: u32,
    /// Whose tool names a model is shown when its agent sets no `vocabulary`
    /// (`[runtime] vocabulary`, `--vocabulary`): canonical by default.
    pub vocabulary: toolbox_core::Vocabulary,
}

/// The default of `[runtime] max_parallel_calls`.
pub const DEFAULT_MAX_PARALLEL_CALLS: u64 = 8;
/// The default of `[runtime] max_calls_per_turn`.
pub const DEFAULT_MAX_CALLS_PER_TURN: u64 = 500;

// A workspace's toolbox.toml may lower the fan-out caps, never raise them.
const MAX_PARALLEL_CALLS: Key = Key::integer("max_parallel_calls", 1, 256)
    .workspace(Tighten::AtMost(DEFAULT_MAX_PARALLEL_CALLS));
const MAX_CALLS_PER_TURN: Key = Key::integer("max_calls_per_turn", 1, 100_000)
    .workspace(Tighten::AtMost(DEFAULT_MAX_CALLS_PER_TURN));
const VOCABULARY: Key = Key::choice("vocabulary", &["canonical", "data-agent"]);
/// The `[runtime]` table.
const TABLE: Table = Table::new(
    "runtime",
    &[MAX_PARALLEL_CALLS, MAX_CALLS_PER_TURN, VOCABULARY],
);
toolbox_core::register_table!(TABLE);

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            default_max_steps: 25,
            max_agent_depth: 3,
            max_parallel_calls: DEFAULT_MAX_PARALLEL_CALLS as usize,
            max_calls_per_turn: DEFAULT_MAX_CALLS_PER_TURN as u32,
            vocabulary: toolbox_core::Vocabulary::Canonical,
        }
    }
}

impl RuntimeOptions {
    /// The defaults, with `[runtime]` of `config` over them (unknown keys and values out of
    /// range are refused, naming them).
    pub fn from_config(config: &toolbox_executor::ExecutorConfig) -> anyhow::Result<Self> {
        let table = TABLE.read_value(config.providers.get("runtime"))?;
        let mut options = RuntimeOptions::default();
        if let Some(n) = MAX_PARALLEL_CALLS.u64(&table)? {
            options.max_parallel_calls = n as usize;
        }
        if let Some(n) = MAX_CALLS_PER_TURN.u64(&table)? {
            options.max_calls_per_turn = n as u32;
        }
        if let Some(v) = VOCABULARY.one_of(&table)? {
            options.vocabulary = v.parse().map_err(anyhow::Error::msg)?;
        }
        Ok(options)
    }
}

/// One turn as a front end asks for it (the HTTP body of `POST /api/sessions/{sid}/turns`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TurnRequest {
    /// The user's message.
    pub message: String,
    /// The agent to run as [default: `default`].
    #[serde(default)]
    pub agent: Option<String>,
    /// The turn's permission mode; never above the process's.
    #[serde(default)]
    pub permission_mode: Option<PermissionMode>,
    /// Legacy switch; wins over `permission_mode` for Shell tools when both are given.
    #[serde(default)]
    pub allow_shell: Option<bool>,
    /// Legacy switch; wins over `permission_mode` for FileWrite tools when both are given.
    #[serde(default)]
    pub allow_file_write: Option<bool>,
    /// The caller's trace context (`toolbox serve`'s `traceparent` header): the parent of
    /// the turn's `invoke_agent` span when spans are exported.
    #[serde(skip)]
    pub trace_parent: Option<toolbox_core::TraceParent>,
}

impl TurnRequest {
    /// A turn saying `message` to the default agent in the process's mode.
    pub fn new(message: impl Into<String>) -> Self {
        TurnRequest {
            message: message.into(),
            ..Default::default()
        }
    }

    /// The turn's own permissions: its mode (the ceiling's when it gives none) and its
    /// legacy switches, which win over the mode for their risks.
    pub fn permissions(&self, ceiling: &Permissions) -> Permissions {
        Permissions {
            mode: self.permission_mode.unwrap_or(ceiling.mode),
            allow_shell: self.allow_shell,
            allow_file_write: self.allow_file_write,
        }
    }
}

/// Why a turn could not start. Once started, a turn always ends with `turn_finished`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The session id cannot be used (it names a folder).
    #[error("{0}")]
    InvalidSession(String),
    /// Another turn of the session is still running.
    #[error("session {0} already has a turn running; wait for it or cancel it")]
    Busy(String),
    /// No such agent.
    #[error("{0}")]
    UnknownAgent(String),
    /// The request is malformed (an empty message, say).
    #[error("{0}")]
    BadRequest(String),
    /// No model is configured.
    #[error("{0}")]
    NoModel(String),
}

/// What a finished turn came to.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's id.
    pub turn_id: String,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// The model's last text.
    pub text: String,
    /// Model requests made.
    pub steps: u32,
    /// Tokens used.
    pub usage: Usage,
}

/// What answering an approval request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// The waiting call got the answer.
    Delivered,
    /// That call asked, but was answered already or stopped waiting (timed out, cancelled).
    AlreadyAnswered,
    /// No call of that id asked for approval in that session.
    Unknown,
}

/// How many of the calls that asked for approval are remembered: an answer to one asked
/// longer ago is told `Unknown`, as it would be after a restart.
pub const REMEMBERED_APPROVALS: usize = 4096;

/// The calls that asked for approval, the latest [`REMEMBERED_APPROVALS`] of them.
#[derive(Default)]
pub(crate) struct AskedCalls {
    set: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
}

impl AskedCalls {
    pub(crate) fn insert(&mut self, key: (String, String)) {
        if self.set.insert(key.clone()) {
            self.order.push_back(key);
            while self.order.len() > REMEMBERED_APPROVALS {
                if let Some(old) = self.order.pop_front() {
                    self.set.remove(&old);
                }
            }
        }
    }
}

pub(crate) struct SessionState {
    pub(crate) cancel: CancellationToken,
}

pub(crate) struct Inner {
    pub(crate) executor: ToolExecutor,
    pub(crate) llm: Option<Arc<dyn LlmClient>>,
    pub(crate) llm_problem: String,
    pub(crate) hub: EventHub,
    pub(crate) options: RuntimeOptions,
    pub(crate) running: Mutex<HashMap<SessionId, SessionState>>,
    /// The (session, call id) of the latest calls that asked for approval, to tell a late
    /// answer from a wrong one.
    pub(crate) asked: Mutex<AskedCalls>,
    pub(crate) next_turn: std::sync::atomic::AtomicU64,
    /// Set (to the newer epoch) when a newer session server took the sessions over: turns
    /// cancelled from then on end as `superseded`.
    pub(crate) superseded: std::sync::atomic::AtomicU64,
}

/// Runs turns. Cheap to clone; one runtime serves every session of a process.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

impl Runtime {
    /// A runtime over `executor` (whose permissions are the ceiling of every turn) talking to
    /// `llm`. Without a model (`Err` with why, e.g. the `[llm]` settings are wrong) turns are
    /// refused with that reason, while single tool calls still work.
    pub fn new(
        executor: ToolExecutor,
        llm: Result<Arc<dyn LlmClient>, String>,
        options: RuntimeOptions,
    ) -> Self {
        let (llm, llm_problem) = match llm {
            Ok(client) => (Some(client), String::new()),
            Err(why) => (None, why),
        };
        Runtime {
            inner: Arc::new(Inner {
                executor,
                llm,
                llm_problem,
                hub: EventHub::default(),
                options,
                running: Mutex::new(HashMap::new()),
                asked: Mutex::new(AskedCalls::default()),
                next_turn: std::sync::atomic::AtomicU64::new(1),
                superseded: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// The executor every call goes through.
    pub fn executor(&self) -> &ToolExecutor {
        &self.inner.executor
    }

    /// Every session's events.
    pub fn events(&self) -> &EventHub {
        &self.inner.hub
    }

    /// Runs one turn to its end. Errors only when it cannot start; see [`TurnError`].
    pub async fn run_turn(
        &self,
        session: &str,
        request: TurnRequest,
    ) -> Result<TurnOutcome, TurnError> {
        let started = self.begin(session, &request)?;
        Ok(crate::turn::run(self.clone(), started, request).await)
    }

    /// Starts a turn in the background and returns its id at once (for a server's 202).
    pub fn start_turn(&self, session: &str, request: TurnRequest) -> Result<String, TurnError> {
        let started = self.begin(session, &request)?;
        let turn_id = started.turn_id.clone();
        let me = self.clone();
        tokio::spawn(async move {
            crate::turn::run(me, started, request).await;
        });
        Ok(turn_id)
    }

    /// Cancels the running turn of `session` and its running tools. False when none runs.
    pub fn cancel(&self, session: &str) -> bool {
        let Ok(sid) = SessionId::parse(session) else {
            return false;
        };
        let running = lock(&self.inner.running);
        match running.get(&sid) {
            Some(state) => {
                state.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every running turn (a server shutting down). Returns how many.
    pub fn cancel_all(&self) -> usize {
        let running = lock(&self.inner.running);
        for state in running.values() {
            state.cancel.cancel();
        }
        running.len()
    }

    /// A newer session server (of epoch `newer`) took the sessions over (session server
    /// mode): cancels every running turn, which ends as `superseded` rather than
    /// `cancelled`. Returns how many.
    pub fn supersede(&self, newer: u64) -> usize {
        self.inner
            .superseded
            .store(newer.max(1), std::sync::atomic::Ordering::SeqCst);
        self.cancel_all()
    }

    /// The newer epoch that took the sessions over, once [`supersede`](Self::supersede) ran.
    pub fn superseded_by(&self) -> Option<u64> {
        match self
            .inner
            .superseded
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            0 => None,
            epoch => Some(epoch),
        }
    }

    /// Waits until no turn runs, at most `limit`. True when idle.
    pub async fn wait_idle(&self, limit: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if lock(&self.inner.running).is_empty() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The sessions with a turn running now.
    pub fn running_sessions(&self) -> Vec<String> {
        lock(&self.inner.running)
            .keys()
            .map(|s| s.to_string())
            .collect()
    }

    /// Runs one tool outside any turn (a front end that runs its own model loop), through
    /// the same gate: `permissions` narrowed by the process's, approval requests and streamed
    /// output on the session's event stream (agent `""`, depth 0), answered with
    /// [`respond_approval`](Self::respond_approval). `call_agent` is refused here: it needs a
    /// turn. `askers`, when given, is asked before a question is put to a person: `Err(why)`
    /// refuses the question at once (see [`EventSink::with_askers`](toolbox_host::EventSink::with_askers)).
    /// `trace` is the caller's trace context, the parent of the call's span.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_tool(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        arguments: Value,
        permissions: Permissions,
        cancel: CancellationToken,
        askers: Option<std::sync::Arc<dyn Fn() -> Result<(), String> + Send + Sync>>,
        trace: Option<toolbox_core::TraceParent>,
    ) -> Result<toolbox_executor::ToolCallInfo, TurnError> {
        let sid =
            SessionId::parse(session).map_err(|e| TurnError::InvalidSession(e.to_string()))?;
        let mut sink = crate::turn::session_events(self, &sid, "", 0);
        if let Some(check) = askers {
            sink = sink.with_askers(move || check());
        }
        let request = toolbox_executor::ToolRequest::new(call_id, tool, arguments)
            .session(sid.as_str())
            .permissions(permissions)
            .events(sink)
            .trace_parent(trace);
        Ok(self.inner.executor.run_cancellable(request, cancel).await)
    }

    /// Whether `session` has a turn running.
    pub fn is_running(&self, session: &str) -> bool {
        SessionId::parse(session).is_ok_and(|sid| lock(&self.inner.running).contains_key(&sid))
    }

    /// Answers the approval request of call `call_id` in `session`.
    pub fn respond_approval(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
    ) -> ApprovalAnswer {
        self.answer(session, call_id, |executor| {
            executor.respond_approval(session, call_id, decision)
        })
    }

    /// Answers the approval request or review of call `call_id` in `session` with what a
    /// person said (see [`ToolExecutor::respond_as_person`]); `by` names the front end.
    pub fn respond_as_person(
        &self,
        session: &str,
        call_id: &str,
        decision: ApprovalDecision,
        feedback: Option<String>,
        by: &str,
    ) -> ApprovalAnswer {
        self.answer(session, call_id, |executor| {
            executor.respond_as_person(session, call_id, decision, feedback, by)
        })
    }

    fn answer(
        &self,
        session: &str,
        call_id: &str,
        deliver: impl FnOnce(&ToolExecutor) -> bool,
    ) -> ApprovalAnswer {
        // Only questions this runtime asked (a turn's calls, run_tool's) are answered here:
        // a call that asked someone else (an MCP client, by elicitation) is that channel's
        // to answer, not anyone's who can reach this API.
        let key = (session.to_string(), call_id.to_string());
        if !lock(&self.inner.asked).set.contains(&key) {
            return ApprovalAnswer::Unknown;
        }
        if deliver(&self.inner.executor) {
            ApprovalAnswer::Delivered
        } else {
            ApprovalAnswer::AlreadyAnswered
        }
    }

    /// Checks the request, claims the session and resolves the agent.
    fn begin(&self, session: &str, request: &TurnRequest) -> Result<Started, TurnError> {
        let sid =
            SessionId::parse(session).map_err(|e| TurnError::InvalidSession(e.to_string()))?;
        if request.message.trim().is_empty() {
            return Err(TurnError::BadRequest(
                "message is empty: a turn needs the user's message".into(),
            ));
        }
        let Some(llm) = self.inner.llm.clone() else {
            return Err(TurnError::NoModel(self.inner.llm_problem.clone()));
        };
        let agent = self.find_agent(request.agent.as_deref().unwrap_or(DEFAULT_AGENT))?;
        let cancel = CancellationToken::new();
        {
            let mut running = lock(&self.inner.running);
            if running.contains_key(&sid) {
                return Err(TurnError::Busy(sid.to_string()));
            }
            running.insert(
                sid.clone(),
                SessionState {
                    cancel: cancel.clone(),
                },
            );
        }
        let n = self
            .inner
            .next_turn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Ok(Started {
            session: sid,
            turn_id: format!("turn_{millis}_{n}"),
            agent,
            llm,
            cancel,
        })
    }

    /// The agent called `name`, found afresh (agent files may change between turns), or an
    /// error listing the known ones and any file skipped for being invalid.
    pub(crate) fn find_agent(&self, name: &str) -> Result<ActiveAgent, TurnError> {
        let config = Value::Object(self.inner.executor.config().providers.clone());
        let set = toolbox_host::discover_agents(self.inner.executor.workspace(), &config);
        if let Some(agent) = set.get(name) {
            return Ok(ActiveAgent::from(agent));
        }
        let known: Vec<&str> = set.agents().iter().map(|a| a.name.as_str()).collect();
        let mut message = format!("unknown agent: {name} (known: {})", known.join(", "));
        for problem in set.problems() {
            message.push_str(&format!("; skipped {}: {}", problem.file, problem.reason));
        }
        Err(TurnError::UnknownAgent(message))
    }

    pub(crate) fn emit(&self, session: &SessionId, event: RuntimeEvent) {
        self.inner.hub.emit(session, event);
    }

    /// Emits the turn's last event and frees the session, as one step: a front end that
    /// sees `turn_finished` and at once starts the next turn must not get `Busy`, and no
    /// other turn of the session may start before that event is out.
    pub(crate) fn finish(&self, session: &SessionId, last: RuntimeEvent) {
        let mut running = lock(&self.inner.running);
        self.inner.hub.emit(session, last);
        running.remove(session);
    }
}

/// The agent a turn runs as when the request names none.
pub const DEFAULT_AGENT: &str = toolbox_core::agent::DEFAULT_AGENT;

/// A turn that passed [`Runtime::begin`].
pub(crate) struct Started {
    pub(crate) session: SessionId,
    pub(crate) turn_id: String,
    pub(crate) agent: ActiveAgent,
    pub(crate) llm: Arc<dyn LlmClient>,
    pub(crate) cancel: CancellationToken,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod asked_tests {
    use super::*;

    #[test]
    fn only_the_latest_approvals_are_remembered() {
        let mut asked = AskedCalls::default();
        for i in 0..REMEMBERED_APPROVALS + 10 {
            asked.insert(("s".into(), format!("c{i}")));
        }
        asked.insert(("s".into(), "c20".into()));
        assert_eq!(asked.set.len(), REMEMBERED_APPROVALS);
        assert_eq!(asked.order.len(), REMEMBERED_APPROVALS);
        assert!(!asked.set.contains(&("s".into(), "c9".into())));
        assert!(asked.set.contains(&("s".into(), "c10".into())));
    }
}
