use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, Result};
use futures_util::FutureExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolbox_core::{SessionId, ToolInfo, ToolOutput, ToolRisk, Vocabulary};
use toolbox_host::{
    ApprovalRequest, Asker, CallPolicy, CancellationToken, EventSink, GateCall, PersonAnswer,
    QuestionKind, ToolContext, ToolEvent, Workspace,
};

use crate::approval::{Answer, ApprovalBroker};
use crate::config::Decision;
use crate::registry::RegisteredTool;
use crate::schema::SchemaRendering;
use crate::spool::{self, SpoolOutcome};
use crate::trajectory::TrajectoryWriter;
use crate::{ApprovalDecision, ExecutorConfig, Permissions, Registry};

/// One tool call as the model asked for it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ToolRequest {
    /// The call's id as the model gave it; it names spool files.
    pub id: String,
    /// The tool's canonical name or an alias.
    pub name: String,
    /// An object, or a string holding a JSON object (as Chat Completions sends it).
    pub arguments: Value,
    /// `None` means the session `default`. Parsed into a [`SessionId`] before anything else
    /// happens: an invalid id is refused and nothing is written anywhere.
    pub session_id: Option<String>,
    /// The vocabulary the model was shown the tools in: the executor's own messages about
    /// the call (a refusal, a timeout, the tool a spooled result's preview names) use the
    /// tools' names in it. The name requested resolves in every vocabulary regardless.
    /// `None` means the executor's own ([`ExecutorConfig::vocabulary`]).
    #[serde(default)]
    pub vocabulary: Option<Vocabulary>,
    /// Overrides the configured per-call timeout for this call.
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// The permissions of the turn this call belongs to. They can only narrow the
    /// executor's own (the process's ceiling): for each risk the stricter decision wins.
    #[serde(skip)]
    pub permissions: Option<Permissions>,
    /// Where this call's streamed output and approval request go instead of the executor's
    /// sink (an agent runtime routes them to the call's session).
    #[serde(skip)]
    pub events: Option<EventSink>,
    /// This call's place in an [`ApprovalQueue`](crate::ApprovalQueue): if it must ask, it
    /// asks only after every earlier call of the queue has passed the gate.
    #[serde(skip)]
    pub approval_ticket: Option<Arc<crate::ApprovalTicket>>,
}

impl ToolRequest {
    /// A request in the session `default` with the configured timeout.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolRequest {
            id: id.into(),
            name: name.into(),
            arguments,
            session_id: None,
            vocabulary: None,
            timeout: None,
            permissions: None,
            events: None,
            approval_ticket: None,
        }
    }

    /// Sets the session id (checked when the call runs).
    pub fn session(mut self, sid: impl Into<String>) -> Self {
        self.session_id = Some(sid.into());
        self
    }

    /// Says which vocabulary the model saw (see [`ToolRequest::vocabulary`]).
    pub fn vocabulary(mut self, vocabulary: Vocabulary) -> Self {
        self.vocabulary = Some(vocabulary);
        self
    }

    /// Overrides the configured per-call timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Narrows the executor's permissions for this call (see [`ToolRequest::permissions`]).
    pub fn permissions(mut self, permissions: impl Into<Permissions>) -> Self {
        self.permissions = Some(permissions.into());
        self
    }

    /// Sends this call's events to `events` (see [`ToolRequest::events`]).
    pub fn events(mut self, events: EventSink) -> Self {
        self.events = Some(events);
        self
    }

    /// Places the call in an approval queue (see [`ToolRequest::approval_ticket`]).
    pub fn approval_ticket(mut self, ticket: crate::ApprovalTicket) -> Self {
        self.approval_ticket = Some(Arc::new(ticket));
        self
    }
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// The tool returned a result.
    Done,
    /// Anything else; [`ErrorKind`] says what.
    Error,
}

impl CallStatus {
    /// `done` or `error`, as the model sees it.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Done => "done",
            CallStatus::Error => "error",
        }
    }
}

/// Why a call ended in `error`, for programs; the model reads the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No tool or alias of that name is registered.
    UnknownTool,
    /// Bad request: an unparsable argument string, an invalid session id, an intercepted tool.
    InvalidRequest,
    /// The permissions refused the call, or the user did, or no approval came in time.
    Denied,
    /// The call ran past its timeout and was stopped.
    Timeout,
    /// The caller cancelled the call.
    Cancelled,
    /// The tool panicked; the executor kept serving.
    Panic,
    /// The tool itself reported the error (including bad arguments).
    Tool,
}

/// A finished call whose trajectory line is still to be written: by [`Finished::record`],
/// or when it is dropped (a caller that returns early, or panics, still records the call).
pub struct Finished {
    info: Option<ToolCallInfo>,
    /// None for a call refused for its session id: it has nowhere to be recorded.
    session: Option<SessionId>,
    executor: ToolExecutor,
}

impl Finished {
    /// The outcome.
    pub fn info(&self) -> &ToolCallInfo {
        self.info.as_ref().expect("taken only by record and drop")
    }

    /// Appends the call's trajectory line, and returns the outcome.
    pub fn record(mut self) -> ToolCallInfo {
        let info = self.info.take().expect("taken only by record and drop");
        self.executor.record(self.session.as_ref(), &info);
        info
    }
}

impl Drop for Finished {
    fn drop(&mut self) {
        if let Some(info) = self.info.take() {
            self.executor.record(self.session.as_ref(), &info);
        }
    }
}

/// The record of one call: what the model sees, what the trajectory keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallInfo {
    /// The call's id as the model gave it.
    pub id: String,
    /// The canonical tool name when it resolved, else the name as requested.
    pub tool: String,
    /// The name the model called the tool by, when it is not the canonical one (an alias, or
    /// the tool's name in the model's [`Vocabulary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_as: Option<String>,
    /// The session the call ran in (empty when its id was refused).
    pub session_id: String,
    /// The arguments as the model sent them.
    pub arguments: Value,
    /// `done` or `error`.
    pub status: CallStatus,
    /// What the model sees: the whole result, or the preview of a spooled one.
    pub result: String,
    /// The structured form of the result, for programs (MCP `structuredContent`, the HTTP
    /// API's `"structured"`), when the tool has one ([`ToolInfo::output_schema`]) and the call
    /// ended `done`. The model never sees it: it reads [`result`](Self::result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
    /// Workspace-relative path of the full result when it was spooled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spool_path: Option<String>,
    /// Why the call failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// RFC 3339, UTC, milliseconds.
    pub started_at: String,
    /// How long the call took, not counting the time it waited for a person.
    pub elapsed_ms: u64,
    /// How long the call waited for a person to approve it (0 when it did not ask).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waited_ms: u64,
    /// Who approved the call, as the front end that carried the answer named them
    /// (`http 127.0.0.1:50112 with the token`, `terminal`, `mcp`); `None` when nobody was
    /// asked, or for an answer no front end signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ToolCallInfo {
    /// `{"status": "...", "result": "..."}` — the string the model gets back.
    pub fn envelope(&self) -> String {
        serde_json::json!({"status": self.status.as_str(), "result": self.result}).to_string()
    }

    /// Whether the call ended `done`.
    pub fn is_done(&self) -> bool {
        self.status == CallStatus::Done
    }
}

struct Inner {
    config: ExecutorConfig,
    workspace: Workspace,
    registry: Registry,
    approvals: ApprovalBroker,
    events: EventSink,
    trajectory: Option<TrajectoryWriter>,
    provider_config: Arc<Value>,
    /// The tool a spooled result's preview names, found in the registry (never hard-coded).
    spool_reader: Option<ToolInfo>,
    /// Each vocabulary's words, for the contexts of calls made by models prompted in it.
    words: std::collections::BTreeMap<Vocabulary, toolbox_host::ToolWords>,
}

/// The entry point for tool calls. Cheap to clone; one executor serves many concurrent calls.
#[derive(Clone)]
pub struct ToolExecutor {
    inner: Arc<Inner>,
}

impl ToolExecutor {
    /// An executor over every provider linked into this binary.
    pub fn new(config: ExecutorConfig) -> Result<Self> {
        Self::with_registry(config, Registry::from_inventory()?, EventSink::none())
    }

    /// An executor over every linked provider that delivers events (streamed output,
    /// approval requests) to `events`.
    pub fn with_events(config: ExecutorConfig, events: EventSink) -> Result<Self> {
        Self::with_registry(config, Registry::from_inventory()?, events)
    }

    /// An executor over `registry` (tests and embedders pick their own providers) that delivers
    /// events to `events`.
    pub fn with_registry(
        config: ExecutorConfig,
        registry: Registry,
        events: EventSink,
    ) -> Result<Self> {
        let workspace = Workspace::new(&config.workspace)?;
        let trajectory = config
            .trajectory
            .then(|| TrajectoryWriter::new(workspace.clone()));
        let provider_config = Arc::new(Value::Object(config.providers.clone()));
        // Each provider's call gate checks its own settings against the tools linked in: a
        // gate that would silently hold nothing (a misspelt tool) stops the start instead.
        let infos: Vec<&toolbox_core::ToolInfo> =
            registry.tools().iter().map(|t| &t.info).collect();
        for gate in toolbox_host::call_gates() {
            (gate.validate)(&provider_config, &infos).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let spool_reader = registry
            .file_reader(&config.permissions)
            .map(|t| t.info.clone());
        let words = Vocabulary::ALL
            .into_iter()
            .map(|v| (v, registry.words(v)))
            .collect();
        Ok(ToolExecutor {
            inner: Arc::new(Inner {
                config,
                workspace,
                words,
                registry,
                approvals: ApprovalBroker::default(),
                events,
                trajectory,
                provider_config,
                spool_reader,
            }),
        })
    }

    /// The configuration this executor was built with.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Every tool this executor can run.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The workspace every call is jailed to.
    pub fn workspace(&self) -> &Workspace {
        &self.inner.workspace
    }

    /// The permissions every call is gated by.
    pub fn permissions(&self) -> Permissions {
        self.inner.config.permissions
    }

    /// The tools a model may see under this executor's permissions.
    pub fn visible_tools(&self) -> Vec<&RegisteredTool> {
        self.inner.registry.visible(&self.inner.config.permissions)
    }

    /// Expands `toolsets` (all tools when `None`) and keeps the tools `permissions` let a
    /// model see, in registration order. An unknown toolset is an error naming the known ones.
    ///
    /// Tools only an agent runtime serves ([`ToolInfo::intercepted`](toolbox_core::ToolInfo::intercepted),
    /// such as `call_agent`) are left out; a runtime asks for them with
    /// [`resolve_runtime_tools`](Self::resolve_runtime_tools).
    pub fn resolve_agent_tools(
        &self,
        toolsets: Option<&[&str]>,
        permissions: impl Into<Permissions>,
    ) -> Result<Vec<&RegisteredTool>> {
        let mut tools = self.resolve_runtime_tools(toolsets, permissions)?;
        tools.retain(|t| !t.info.intercepted);
        Ok(tools)
    }

    /// Like [`resolve_agent_tools`](Self::resolve_agent_tools), keeping the tools an agent
    /// runtime intercepts: for the runtime that serves them. The permissions are narrowed to
    /// this executor's own, as a call's are.
    pub fn resolve_runtime_tools(
        &self,
        toolsets: Option<&[&str]>,
        permissions: impl Into<Permissions>,
    ) -> Result<Vec<&RegisteredTool>> {
        let permissions = permissions.into();
        let ceiling = self.inner.config.permissions;
        let tools = match toolsets {
            Some(sets) => self.inner.registry.expand_toolsets(sets)?,
            None => self.inner.registry.tools().iter().collect(),
        };
        Ok(tools
            .into_iter()
            .filter(|t| ceiling.narrowed(&permissions).visible(t.info.risk))
            .collect())
    }

    /// [`resolve_agent_tools`](Self::resolve_agent_tools) rendered in `rendering` (in this
    /// executor's [`vocabulary`](ExecutorConfig::vocabulary) unless it names one): a bare
    /// [`SchemaFormat`](crate::SchemaFormat) for its default strictness, or
    /// `format.strict(true)`. Pass a bare
    /// [`PermissionMode`](crate::PermissionMode) or full [`Permissions`] with legacy flags.
    pub fn resolve_agent_tool_schemas(
        &self,
        toolsets: Option<&[&str]>,
        permissions: impl Into<Permissions>,
        rendering: impl Into<SchemaRendering>,
    ) -> Result<Vec<Value>> {
        let tools = self.resolve_agent_tools(toolsets, permissions)?;
        let mut rendering = rendering.into();
        rendering.vocabulary = rendering.vocabulary.or(Some(self.inner.config.vocabulary));
        Ok(self
            .inner
            .registry
            .render(tools.into_iter().map(|t| &t.info), rendering))
    }

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

    /// Runs one call to completion. Never fails: every outcome is a [`ToolCallInfo`].
    ///
    /// **Architecture Invariant:** every outcome is a `ToolCallInfo` — success, a tool's
    /// error, bad arguments, an unknown tool, a denial, a timeout, a cancellation, a panic in
    /// a provider. Nothing here returns `Result`; the model always gets
    /// `{"status": …, "result": …}`.
    pub async fn run(&self, request: ToolRequest) -> ToolCallInfo {
        self.run_cancellable(request, CancellationToken::new())
            .await
    }

    /// Like [`run`](Self::run); cancelling `cancel` stops the call with status `error`.
    /// The call's trajectory line is written before this returns.
    pub async fn run_cancellable(
        &self,
        request: ToolRequest,
        cancel: CancellationToken,
    ) -> ToolCallInfo {
        self.run_unrecorded(request, cancel).await.record()
    }

    /// Like [`run_cancellable`](Self::run_cancellable), but the trajectory line is written
    /// when the caller says so ([`Finished::record`]) or drops the [`Finished`]: a server
    /// sends its reply first, and the client does not wait for the disk. The price: if the
    /// process dies between the reply and the record (microseconds later, on the same
    /// thread), that one call is missing from the trajectory.
    pub async fn run_unrecorded(
        &self,
        mut request: ToolRequest,
        cancel: CancellationToken,
    ) -> Finished {
        let started = Instant::now();
        // Taken out, so that a call refused before the gate lets the calls after it go on.
        let ticket = request.approval_ticket.take();
        let started_at = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        // The id names folders: parse it before anything else, and on failure write nothing.
        let session = match &request.session_id {
            None => SessionId::default_session(),
            Some(raw) => match SessionId::parse(raw) {
                Ok(sid) => sid,
                Err(e) => {
                    // Nothing is recorded: there is no session to record it in.
                    return Finished {
                        info: Some(refused_session(request, e, started_at, started)),
                        session: None,
                        executor: self.clone(),
                    };
                }
            },
        };
        let session_id = session.to_string();
        tracing::debug!(target: "toolbox", tool_id = %request.id, tool_name = %request.name, session = %session_id, "tool execution started");

        let claim = toolbox_host::SpoolClaim::default();
        let waited = WaitClock::default();
        let (tool_name, outcome) = self
            .dispatch(&request, &session, cancel, claim.clone(), ticket, &waited)
            .await;
        let (status, text, error_kind, structured) = match outcome {
            Ok((text, structured)) => (CallStatus::Done, text, None, structured),
            Err((kind, message)) => (CallStatus::Error, message, Some(kind), None),
        };
        let called_as = (request.name != tool_name).then(|| shorten(&request.name, 200));
        let result_chars = text.chars().count();
        let (result, spool_path) = match claim.get() {
            // The tool streamed its full output to its own spool file already.
            Some(path) => {
                let bytes = toolbox_host::spool_file_len(&self.inner.workspace, &path).unwrap_or(0);
                let reader = self.spool_reader(self.vocabulary_of(&request));
                (spool::preview(&text, &path, bytes, reader), Some(path))
            }
            None => match spool::offload_if_large(
                &self.inner.workspace,
                &request.id,
                text,
                self.inner.config.spool_threshold,
                self.spool_reader(self.vocabulary_of(&request)),
            ) {
                SpoolOutcome::Inline(text) => (text, None),
                SpoolOutcome::Spooled { preview, path } => (preview, Some(path)),
            },
        };
        // The structured result mirrors the text: it obeys the same limits, on every way out.
        let structured = structured.map(|v| spool::bound_structured(v, spool_path.as_deref()));
        let waited_ms = waited.get().as_millis() as u64;
        let elapsed_ms = (started.elapsed().as_millis() as u64).saturating_sub(waited_ms);
        let info = ToolCallInfo {
            id: request.id,
            tool: tool_name,
            called_as,
            session_id,
            arguments: request.arguments,
            status,
            result,
            structured,
            spool_path,
            error_kind,
            started_at,
            elapsed_ms,
            waited_ms,
            approved_by: waited.approved_by(),
        };
        tracing::debug!(
            target: "toolbox",
            tool_id = %info.id,
            tool_name = %info.tool,
            status = status.as_str(),
            elapsed_ms,
            result_chars,
            "tool execution finished"
        );
        Finished {
            info: Some(info),
            session: Some(session),
            executor: self.clone(),
        }
    }

    /// The vocabulary the model of `request` was shown the tools in.
    fn vocabulary_of(&self, request: &ToolRequest) -> Vocabulary {
        request.vocabulary.unwrap_or(self.inner.config.vocabulary)
    }

    /// The name, in `vocabulary`, of the tool a spooled result's preview names.
    fn spool_reader(&self, vocabulary: Vocabulary) -> Option<&str> {
        self.inner
            .spool_reader
            .as_ref()
            .map(|info| info.name_in(vocabulary))
    }

    fn record(&self, session: Option<&SessionId>, info: &ToolCallInfo) {
        if let (Some(writer), Some(session)) = (&self.inner.trajectory, session) {
            if let Err(e) = writer.append(session, info) {
                tracing::warn!(target: "toolbox", tool_id = %info.id, error = %e, "could not append to the trajectory");
            }
        }
    }

    /// Resolve, gate, run. Returns the name to record and the outcome.
    async fn dispatch(
        &self,
        request: &ToolRequest,
        session_id: &SessionId,
        cancel: CancellationToken,
        claim: toolbox_host::SpoolClaim,
        ticket: Option<Arc<crate::ApprovalTicket>>,
        waited: &WaitClock,
    ) -> (String, Result<(String, Option<Value>), (ErrorKind, String)>) {
        let inner = &*self.inner;
        let found = inner.registry.get(&request.name);
        // By the flag alone: the executor names no tool.
        let intercepted = found.is_some_and(|tool| tool.info.intercepted);
        if intercepted {
            let shown = shorten(&request.name, 200);
            return (
                shown.clone(),
                Err((
                    ErrorKind::InvalidRequest,
                    format!("{shown} reached the tool executor, but it is served by the agent runtime, which must intercept it before dispatch. It works inside a turn (toolbox chat, toolbox serve), not through toolbox call or MCP"),
                )),
            );
        }
        let Some(tool) = found else {
            let shown = shorten(&request.name, 200);
            return (
                shown.clone(),
                Err((ErrorKind::UnknownTool, format!("unknown tool: {shown}"))),
            );
        };
        let name = tool.info.name.clone();
        let outcome = self
            .gate_and_call(tool, request, session_id, cancel, claim, ticket, waited)
            .await;
        (name, outcome)
    }

    #[allow(clippy::too_many_arguments)]
    async fn gate_and_call(
        &self,
        tool: &RegisteredTool,
        request: &ToolRequest,
        session_id: &SessionId,
        cancel: CancellationToken,
        claim: toolbox_host::SpoolClaim,
        ticket: Option<Arc<crate::ApprovalTicket>>,
        waited: &WaitClock,
    ) -> Result<(String, Option<Value>), (ErrorKind, String)> {
        let inner = &*self.inner;
        let name = tool.info.name.as_str();
        // The name the model called the tool by (an alias, a word of its vocabulary), for
        // the messages it reads: a refusal of `bash` says `bash`.
        let shown = request.name.as_str();
        let arguments = normalize_arguments(name, &request.arguments)
            .map_err(|e| (ErrorKind::InvalidRequest, e.to_string()))?;
        let workspace = inner.workspace.with_session_id(session_id.clone());
        let permissions = match &request.permissions {
            Some(turn) => inner.config.permissions.narrowed(turn),
            None => inner.config.permissions.into(),
        };
        let events = request.events.as_ref().unwrap_or(&inner.events);
        let call_cancel = cancel.child_token();
        // The time the call's review questions wait for a person counts as waited, not run.
        let review_wait = ReviewWait {
            clock: waited,
            ms: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        };
        let asker = {
            let executor = self.clone();
            let (session, call_id, tool_name) =
                (session_id.clone(), request.id.clone(), name.to_string());
            let called_as = (shown != name).then(|| shown.to_string());
            let (events, cancel) = (events.clone(), call_cancel.clone());
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
        };
        let policy = CallPolicy {
            mode: Some(permissions.mode()),
            risks: ToolRisk::ALL
                .into_iter()
                .map(|risk| (risk, permissions.decide(risk)))
                .collect(),
        };
        let ctx = ToolContext {
            workspace,
            session_id: session_id.clone(),
            call_id: request.id.clone(),
            tool: name.to_string(),
            cancel: call_cancel.clone(),
            events: events.clone(),
            config: inner.provider_config.clone(),
            spool: claim,
            asker,
            policy,
            called_as: (shown != name).then(|| shown.to_string()),
            words: inner
                .words
                .get(&self.vocabulary_of(request))
                .cloned()
                .unwrap_or_default(),
        };

        let decision = permissions.decide(tool.info.risk);
        if decision == Decision::Deny {
            return Err((
                ErrorKind::Denied,
                permissions.denial_reason(shown, tool.info.risk),
            ));
        }
        // The gates providers registered (a plan that must be confirmed first), before
        // anyone is asked: the executor names no tool, each gate decides for itself.
        for gate in toolbox_host::call_gates() {
            let call = GateCall {
                tool: &tool.info,
                ctx: &ctx,
            };
            let checked = std::panic::catch_unwind(AssertUnwindSafe(|| (gate.check)(&call)));
            match checked {
                Ok(None) => {}
                Ok(Some(refusal)) => return Err((ErrorKind::Denied, refusal)),
                Err(panic) => {
                    return Err((
                        ErrorKind::Denied,
                        format!(
                            "tool {shown} was held back: the call gate of {} panicked ({})",
                            gate.provider,
                            toolbox_core::panic::message(&*panic)
                        ),
                    ))
                }
            }
        }
        match decision {
            Decision::Allow | Decision::Deny => {}
            Decision::Ask => {
                let asked = Instant::now();
                let answer = self
                    .await_approval(tool, request, &arguments, &ctx, &cancel, ticket.as_deref())
                    .await;
                waited.set(asked.elapsed());
                waited.answered_by(answer?);
            }
        }
        // Past the gate: the calls queued behind this one may ask now, while it runs.
        drop(ticket);
        let timeout = request.timeout.unwrap_or(inner.config.call_timeout);
        let call = AssertUnwindSafe(tool.provider.call_tool(name, arguments, &ctx)).catch_unwind();
        tokio::pin!(call);
        let declares_structure = tool.info.output_schema.is_some();
        let finish = |result: std::thread::Result<anyhow::Result<ToolOutput>>| match result {
            // A structured value goes out only from a tool that declared its shape: no client
            // was told the shape of any other.
            Ok(Ok(output)) => Ok((
                output.text,
                output.structured.filter(|_| declares_structure),
            )),
            Ok(Err(err)) => Err((ErrorKind::Tool, said_as(format!("{err:#}"), name, shown))),
            Err(panic) => Err((
                ErrorKind::Panic,
                format!(
                    "tool {shown} panicked: {}",
                    toolbox_core::panic::message(&*panic)
                ),
            )),
        };
        let stopped = tokio::select! {
            biased;
            _ = cancel.cancelled() => (ErrorKind::Cancelled, format!("tool {shown} was cancelled")),
            result = &mut call => {
                // Whatever the tool left running is told to stop.
                call_cancel.cancel();
                return finish(result);
            }
            _ = tokio::time::sleep(timeout) => (
                ErrorKind::Timeout,
                format!("tool {shown} timed out after {} ms", timeout.as_millis()),
            ),
        };
        // Timed out or cancelled: tell the tool through its token and give it a short grace
        // to stop its work cleanly (a shell command gets SIGTERM before SIGKILL) and return
        // what it gathered so far; a tool that ignores the token is dropped after the grace.
        call_cancel.cancel();
        let (kind, message) = stopped;
        match tokio::time::timeout(inner.config.cancel_grace, &mut call).await {
            Ok(result) => {
                let partial = match finish(result) {
                    Ok((text, _)) | Err((_, text)) => text,
                };
                if partial.trim().is_empty() {
                    Err((kind, message))
                } else {
                    Err((kind, format!("{message}\n{partial}")))
                }
            }
            Err(_) => Err((kind, message)),
        }
    }

    /// Asks for approval of one call (after the calls queued before it, when it has a
    /// ticket) and waits for the answer, the approval timeout, or the call's cancellation.
    async fn await_approval(
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
}

impl ToolExecutor {
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
struct ReviewWait<'a> {
    clock: &'a WaitClock,
    ms: Arc<std::sync::atomic::AtomicU64>,
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
struct WaitClock(std::sync::Mutex<Duration>, std::sync::Mutex<Option<String>>);

impl WaitClock {
    fn set(&self, waited: Duration) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = waited;
    }

    fn get(&self) -> Duration {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn answered_by(&self, by: Option<String>) {
        *self.1.lock().unwrap_or_else(|e| e.into_inner()) = by;
    }

    fn approved_by(&self) -> Option<String> {
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

/// The record of a call refused for its session id. Nothing is written: the id cannot name a
/// folder, so there is no trajectory to append to.
fn refused_session(
    request: ToolRequest,
    error: toolbox_core::InvalidSessionId,
    started_at: String,
    started: Instant,
) -> ToolCallInfo {
    tracing::debug!(target: "toolbox", tool_id = %request.id, "refused: invalid session id");
    ToolCallInfo {
        id: request.id,
        tool: shorten(&request.name, 200),
        called_as: None,
        session_id: String::new(),
        arguments: Value::Null,
        status: CallStatus::Error,
        result: error.to_string(),
        structured: None,
        spool_path: None,
        error_kind: Some(ErrorKind::InvalidRequest),
        started_at,
        elapsed_ms: started.elapsed().as_millis() as u64,
        waited_ms: 0,
        approved_by: None,
    }
}

/// At most `max` characters, with an ellipsis when cut (a hostile name can be megabytes).
/// A tool's error message as the model reads it: a message that begins with the tool's
/// canonical name (`file_manager__read: …`, the providers' convention) begins with the
/// name the call was made by instead (`read_file: …`). Only that first word is changed:
/// the rest may quote data.
fn said_as(message: String, canonical: &str, shown: &str) -> String {
    if canonical == shown {
        return message;
    }
    match message.strip_prefix(canonical) {
        Some(rest) if !rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') => {
            format!("{shown}{rest}")
        }
        _ => message,
    }
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut out: String = text.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Arguments may come as an object, as null, or as a string holding a JSON object.
fn normalize_arguments(tool: &str, arguments: &Value) -> Result<Value> {
    match arguments {
        Value::String(text) if text.trim().is_empty() => Ok(Value::Object(Default::default())),
        Value::String(text) => serde_json::from_str::<Value>(text)
            .map_err(|e| anyhow!("{tool}: arguments are not valid JSON: {e}")),
        other => Ok(other.clone()),
    }
}
