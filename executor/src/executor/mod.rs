//! The executor: [`ToolExecutor`], built once over a registry and shared by every call.
//!
//! - `request.rs`: [`ToolRequest`], one call as the model asked for it;
//! - `outcome.rs`: [`ToolCallInfo`], [`CallStatus`], [`ErrorKind`], and [`Finished`], a call
//!   whose trajectory line is still to be written;
//! - `pipeline.rs`: [`ToolExecutor::run`] and its steps: resolve, gate, run the provider,
//!   normalise, spool;
//! - `questions.rs`: what a call asks a person (its approval, a tool's review questions),
//!   how long it waited for the answer, and the answers front ends deliver.

use std::sync::Arc;

use anyhow::Result;
use serde_json::Value;
use toolbox_core::{SessionId, ToolInfo, Vocabulary};
use toolbox_host::{EventSink, Workspace};

use crate::approval::ApprovalBroker;
use crate::registry::RegisteredTool;
use crate::schema::SchemaRendering;
use crate::trajectory::TrajectoryWriter;
use crate::{ExecutorConfig, Permissions, Registry};

mod outcome;
mod pipeline;
mod questions;
mod request;

pub use outcome::{CallStatus, ErrorKind, Finished, ToolCallInfo};
pub use request::ToolRequest;

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
}

/// At most `max` characters, with an ellipsis when cut (a hostile name can be megabytes).
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut out: String = text.chars().take(max).collect();
        out.push('…');
        out
    }
}
