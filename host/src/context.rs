use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use toolbox_core::{Preview, SessionId, ToolRisk, Vocabulary};

use crate::{Asker, CallPolicy, PersonAnswer, QuestionKind, Workspace};

/// Which stream a chunk of streamed output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    /// The child's standard output.
    Stdout,
    /// The child's standard error.
    Stderr,
}

/// The executor asks whoever listens to approve a risky call (permission mode `auto`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The session of the call waiting for an answer.
    pub session_id: SessionId,
    /// The id of the call waiting for an answer.
    pub call_id: String,
    /// The canonical name of the tool asking to run.
    pub tool: String,
    /// The name the call was made by, when it was another one (an alias, or the tool's word
    /// in the model's vocabulary): what a front end names the tool by when it talks to the
    /// model about the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_as: Option<String>,
    /// The call's arguments, as the tool will get them.
    pub arguments: Value,
    /// The tool's risk class, which is why it asks.
    pub risk: ToolRisk,
    /// What the call will do, for the person who answers: show this, not the arguments.
    pub preview: Preview,
    /// What is asked: whether a risky call may run (the default), or a review
    /// (approve or reject, with feedback), which a front end must never answer by itself.
    #[serde(default, skip_serializing_if = "QuestionKind::is_tool")]
    pub kind: QuestionKind,
}

impl ApprovalRequest {
    /// The tool as the call named it: [`called_as`](Self::called_as), else the canonical
    /// name. What a refusal the model reads says.
    pub fn shown_tool(&self) -> &str {
        self.called_as.as_deref().unwrap_or(&self.tool)
    }
}

/// Something that happened during a call, delivered while the call is still running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolEvent {
    /// A chunk of a tool's streamed output (a shell command's stdout, say).
    Output {
        /// The call the output belongs to.
        call_id: String,
        /// The canonical name of the tool.
        tool: String,
        /// The name the call was made by, when it was another one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
        /// Which stream the chunk came from.
        stream: OutputStream,
        /// The chunk, as text.
        text: String,
    },
    /// A human-readable progress line (pip's output, a download, ...), with how far the
    /// work is when the tool can count it ([`ToolContext::emit_progress_of`]).
    Progress {
        /// The call the line belongs to.
        call_id: String,
        /// The canonical name of the tool.
        tool: String,
        /// The name the call was made by, when it was another one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        called_as: Option<String>,
        /// The line, for people.
        message: String,
        /// How much is done, in the tool's own unit (bytes read, say); it only grows within
        /// a call. `None` for a plain progress line.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        done: Option<u64>,
        /// How much there is in all, in the same unit, when known; only set with `done`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<u64>,
    },
    /// The executor waits for `ToolExecutor::respond_approval` on this call id.
    ApprovalRequested(ApprovalRequest),
    /// A review question ([`QuestionKind::Review`]) was answered, or given up on.
    ReviewAnswered {
        /// The call that asked.
        call_id: String,
        /// The canonical name of the tool that asked.
        tool: String,
        /// What came of it.
        answer: PersonAnswer,
    },
    /// A tool changed the session's plan (its goal, steps or review state); the whole plan.
    PlanUpdated {
        /// The call that changed it.
        call_id: String,
        /// The canonical name of the tool.
        tool: String,
        /// The plan, as the tool stores it.
        plan: Value,
        /// The plan as a checklist, for people.
        checklist: String,
    },
}

/// Where streamed events go. Cloning is cheap; the default sink drops everything.
#[derive(Clone, Default)]
pub struct EventSink {
    deliver: Option<Arc<dyn Fn(ToolEvent) + Send + Sync>>,
    /// Asked before a question is put to a person: `Err(why)` when no one could answer it
    /// now (see [`EventSink::with_askers`]).
    askers: Option<Arc<dyn Fn() -> Result<(), String> + Send + Sync>>,
}

impl EventSink {
    /// A sink that hands every event to `f`.
    pub fn new(f: impl Fn(ToolEvent) + Send + Sync + 'static) -> Self {
        EventSink {
            deliver: Some(Arc::new(f)),
            askers: None,
        }
    }

    /// A sink that drops everything.
    pub fn none() -> Self {
        EventSink::default()
    }

    /// The same sink, with a check made each time a call would ask a person (an approval
    /// or a review): `Err(why)` when nobody could answer now, and the question is then
    /// refused at once with `why` instead of waiting the approval timeout for no one. A
    /// front end that knows who is listening (`toolbox serve` counts its open event
    /// streams) sets it; without it, a question always waits.
    pub fn with_askers(
        mut self,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.askers = Some(Arc::new(check));
        self
    }

    /// Whether anyone listens (so a tool may skip building events nobody reads).
    pub fn is_active(&self) -> bool {
        self.deliver.is_some()
    }

    /// Whether a question put now could reach a person: `Err(why)` when it could not.
    pub fn can_ask(&self) -> Result<(), String> {
        match (&self.deliver, &self.askers) {
            (None, _) => Err(
                "nobody listens for questions on this call (no terminal, HTTP \
                              listener or MCP client was attached)"
                    .into(),
            ),
            (Some(_), Some(check)) => check(),
            (Some(_), None) => Ok(()),
        }
    }

    /// Delivers `event` to the listener, if any.
    pub fn emit(&self, event: ToolEvent) {
        if let Some(f) = &self.deliver {
            f(event)
        }
    }
}

impl fmt::Debug for EventSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.deliver.is_some() {
            "EventSink(active)"
        } else {
            "EventSink(none)"
        })
    }
}

/// Everything one tool call may use besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The jail every path goes through, with this call's session routing.
    pub workspace: Workspace,
    /// The session of the call, already parsed.
    pub session_id: SessionId,
    /// The id the model gave the call; spool files are named after it.
    pub call_id: String,
    /// The canonical name of the tool being called.
    pub tool: String,
    /// Cancelled when the call times out or its caller cancels it; long work should watch it.
    pub cancel: CancellationToken,
    /// Where streamed output and progress go.
    pub events: EventSink,
    /// The configuration's tables (`[shell]`, `[web]`, `[limits]`, …) as one JSON object keyed
    /// by table name, as the executor holds them after every layer was applied; the
    /// executor's own top-level settings (mode, timeouts) are not in it. `null` in a context
    /// made with [`Self::new`]. A provider reads its table with
    /// [`ConfigTable::from_config`](toolbox_core::ConfigTable::from_config).
    pub config: Arc<Value>,
    /// A spool file the tool wrote itself, set through [`Self::create_spool_file`].
    pub spool: SpoolClaim,
    /// How this call asks a person a review question ([`Self::ask_review`]); the default
    /// reaches nobody.
    pub asker: Asker,
    /// How the permissions treat each risk class for this call (empty in a context made with
    /// [`Self::new`]).
    pub policy: CallPolicy,
    /// The name the call was made by, when it was not the canonical one (`bash` for
    /// `shell`): carried by the call's events beside [`tool`](Self::tool).
    pub called_as: Option<String>,
    /// The names the model was shown the tools by: a tool's text that names a tool says
    /// [`word`](Self::word)`("file_manager__write")`, which is `write_file` for a model
    /// prompted in the data agent's vocabulary. Canonical in a context made with
    /// [`Self::new`].
    pub words: ToolWords,
    /// The call's `execute_tool` span when spans are exported: a child process gets its
    /// trace context as `TRACEPARENT` ([`Self::trace_env`]).
    pub trace: Option<crate::telemetry::GenAiSpan>,
}

/// The names of the tools in the vocabulary a model was shown, for text a tool writes about
/// tools (its own name, a hint to use another). Built by the executor from the registry's
/// words; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ToolWords {
    vocabulary: Vocabulary,
    words: Arc<HashMap<String, String>>,
}

impl ToolWords {
    /// The words of `vocabulary`: `(canonical name, name in it)` for every tool whose names
    /// differ there.
    pub fn new(
        vocabulary: Vocabulary,
        renames: impl IntoIterator<Item = (String, String)>,
    ) -> Self {
        ToolWords {
            vocabulary,
            words: Arc::new(renames.into_iter().collect()),
        }
    }

    /// The vocabulary the model was shown the tools in.
    pub fn vocabulary(&self) -> Vocabulary {
        self.vocabulary
    }

    /// The name the model knows the tool `canonical` by: its word in the vocabulary, else
    /// `canonical` itself.
    pub fn of<'a>(&'a self, canonical: &'a str) -> &'a str {
        self.words
            .get(canonical)
            .map(String::as_str)
            .unwrap_or(canonical)
    }
}

/// Where a tool records the spool file it wrote itself; shared by clones of a context.
#[derive(Debug, Clone, Default)]
pub struct SpoolClaim(Arc<Mutex<Option<String>>>);

impl SpoolClaim {
    /// The workspace-relative path of the claimed spool file, if any.
    pub fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set(&self, rel: String) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(rel);
    }
}

impl ToolContext {
    /// A context with no events, no configuration and a fresh cancellation token, for tests
    /// and programs that drive a provider directly with a fixed session id.
    ///
    /// # Panics
    ///
    /// If `session_id` is not a valid [`SessionId`]; parse untrusted ids with
    /// [`SessionId::parse`] and use [`Self::for_session`].
    pub fn new(workspace: Workspace, session_id: &str, call_id: &str, tool: &str) -> Self {
        let sid = SessionId::parse(session_id).unwrap_or_else(|e| panic!("{e}"));
        Self::for_session(workspace, sid, call_id, tool)
    }

    /// A context for an already parsed session id; the workspace gets its routing.
    pub fn for_session(
        workspace: Workspace,
        session_id: SessionId,
        call_id: &str,
        tool: &str,
    ) -> Self {
        ToolContext {
            workspace: workspace.with_session_id(session_id.clone()),
            session_id,
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            cancel: CancellationToken::new(),
            events: EventSink::none(),
            config: Arc::new(Value::Null),
            spool: SpoolClaim::default(),
            asker: Asker::default(),
            policy: CallPolicy::default(),
            called_as: None,
            words: ToolWords::default(),
            trace: None,
        }
    }

    /// The variables a child process of this call gets so that code that traces itself
    /// joins the call's trace (`TRACEPARENT`, `TRACESTATE`); empty when spans are not
    /// exported.
    pub fn trace_env(&self) -> Vec<(&'static str, String)> {
        let parent = self.trace.as_ref().and_then(|span| span.trace_parent());
        crate::telemetry::child_env(parent.as_ref())
    }

    /// The name the model knows the tool `canonical` by, in the vocabulary it was shown
    /// ([`ToolWords::of`]): use it wherever a tool's text names a tool.
    pub fn word<'a>(&'a self, canonical: &'a str) -> &'a str {
        self.words.of(canonical)
    }

    /// The vocabulary the model was shown the tools in.
    pub fn vocabulary(&self) -> Vocabulary {
        self.words.vocabulary()
    }

    /// Asks a person to confirm what `preview` shows, through the front end's approval
    /// channel, in every permission mode, and waits for the answer (or for the reason none
    /// will come).
    pub async fn ask_review(&self, preview: Preview) -> PersonAnswer {
        self.asker.ask(preview).await
    }

    /// Creates this call's spool file for output too large to keep in memory and tells the
    /// executor about it: the executor then keeps that file as the full output (instead of
    /// spooling the returned text again) and shows the model a preview of the returned text
    /// with the file's name and size.
    pub fn create_spool_file(&self) -> std::io::Result<(std::fs::File, String)> {
        let (file, rel) = crate::create_spool_file(&self.workspace, &self.call_id)?;
        self.spool.set(rel.clone());
        Ok((file, rel))
    }

    /// The `[name]` table of the configuration, if any, unchecked; [`toolbox_core::ConfigTable`]
    /// checks its keys and types.
    pub fn provider_config(&self, name: &str) -> Option<&Value> {
        self.config.get(name)
    }

    /// Streams a chunk of the tool's output to whoever listens.
    pub fn emit_output(&self, stream: OutputStream, text: impl Into<String>) {
        if self.events.is_active() {
            self.events.emit(ToolEvent::Output {
                call_id: self.call_id.clone(),
                tool: self.tool.clone(),
                called_as: self.called_as.clone(),
                stream,
                text: text.into(),
            });
        }
    }

    /// Reports a progress line to whoever listens.
    pub fn emit_progress(&self, message: impl Into<String>) {
        if self.events.is_active() {
            self.events.emit(ToolEvent::Progress {
                call_id: self.call_id.clone(),
                tool: self.tool.clone(),
                called_as: self.called_as.clone(),
                message: message.into(),
                done: None,
                total: None,
            });
        }
    }

    /// Reports how far long work is: `done` of `total` (when known) in one unit of the
    /// tool's choosing, and a line for people that says it in words ("1,234 rows, 18 MB of
    /// 51 MB (35%)"). Front ends show it as a bar or a line redrawn in place, and MCP sends
    /// it as `notifications/progress` with `progress` and `total`. `done` should only grow
    /// within a call. Rate-limit it: a report a second or two is plenty.
    pub fn emit_progress_of(&self, message: impl Into<String>, done: u64, total: Option<u64>) {
        if self.events.is_active() {
            self.events.emit(ToolEvent::Progress {
                call_id: self.call_id.clone(),
                tool: self.tool.clone(),
                called_as: self.called_as.clone(),
                message: message.into(),
                done: Some(done),
                total,
            });
        }
    }
}
