use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use toolbox_core::{Preview, ToolInfo, ToolOutput};

use crate::ToolContext;

/// A family of tools behind one implementation.
///
/// `list_tools` is plain (not async): tool metadata is static, and the executor builds its
/// name index once, synchronously, when it starts. `call_tool` receives the canonical name
/// even when the model used an alias. Returning `Err` is the normal way to report a failure:
/// the executor turns it into status `error` with the message as the result.
///
/// A provider lists each tool once, in a [`Tools`] table: `list_tools` is the table's
/// [`Tools::infos`] and `call_tool` its [`Tools::call`].
#[async_trait]
pub trait ToolProvider: Send + Sync {
    /// The provider's name, e.g. `file_manager`; also a toolset naming all its tools.
    fn name(&self) -> &str;
    /// The provider's tools; a registry reads them once, when it is built.
    fn list_tools(&self) -> Vec<ToolInfo>;
    /// Runs the tool `tool` (a canonical name from [`Self::list_tools`], never an alias)
    /// with the model's arguments.
    async fn call_tool(
        &self,
        tool: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> anyhow::Result<ToolOutput>;

    /// What a call of `tool` with `args` would do, for the person asked to approve it: a
    /// diff, the real path and content, the command and its folder. Called before the call
    /// runs (in permission mode `auto`, for risky tools), with the context the call will get;
    /// it must not change anything, and should read little (a preview of an edit reads the
    /// file). `None` (the default) shows the arguments as `key: value` lines
    /// ([`Preview::arguments`]). Arguments that the call itself would refuse may still get a
    /// preview, or `None`: the call's own error is what the model sees.
    fn preview(&self, tool: &str, args: &Value, ctx: &ToolContext) -> Option<Preview> {
        let _ = (tool, args, ctx);
        None
    }

    /// The slot of a thread of this provider's that can take up a front end's work while it
    /// is idle (see [`handoff`](crate::handoff)): the embedded Python interpreter's thread
    /// reads `toolbox mcp`'s requests itself when it has nothing else to do. `None` (the
    /// default) for providers without such a thread.
    fn idle_slot(&self) -> Option<Arc<crate::handoff::IdleSlot>> {
        None
    }
}

/// The future a tool's run function returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<ToolOutput>> + Send + 'a>>;

/// How a [`Tools`] table runs one tool: the provider, the canonical tool name, the model's
/// arguments and the call's context.
pub type ToolFn<P> = for<'a> fn(&'a P, &'a str, Value, &'a ToolContext) -> ToolFuture<'a>;

/// A provider's tools, each listed once with the function that runs it: the table answers
/// both [`ToolProvider::list_tools`] and [`ToolProvider::call_tool`], so the two cannot
/// drift apart.
///
/// ```ignore
/// static TOOLS: LazyLock<Tools<Memory>> = LazyLock::new(|| {
///     Tools::<Memory>::new("memory")
///         .tool(save::info(), |p, _, args, ctx| output(save::run(p, args, ctx)))
///         .tool(get::info(), |p, _, args, ctx| output(get::run(p, args, ctx)))
/// });
/// ```
pub struct Tools<P: 'static> {
    provider: &'static str,
    entries: Vec<(ToolInfo, ToolFn<P>)>,
}

impl<P: 'static> Tools<P> {
    /// An empty table for the provider named `provider` (its errors name it).
    pub fn new(provider: &'static str) -> Self {
        Tools {
            provider,
            entries: Vec::new(),
        }
    }

    /// Adds the tool `info`, run by `run`.
    pub fn tool(mut self, info: ToolInfo, run: ToolFn<P>) -> Self {
        debug_assert!(
            self.entries
                .iter()
                .all(|(known, _)| known.name != info.name),
            "{} lists {} twice",
            self.provider,
            info.name
        );
        self.entries.push((info, run));
        self
    }

    /// Adds each of `infos`, all run by `run` (which gets the tool's name): a family of
    /// tools served by one function.
    pub fn family(self, infos: impl IntoIterator<Item = ToolInfo>, run: ToolFn<P>) -> Self {
        infos
            .into_iter()
            .fold(self, |table, info| table.tool(info, run))
    }

    /// Every tool's metadata, in the order listed.
    pub fn infos(&self) -> Vec<ToolInfo> {
        self.entries.iter().map(|(info, _)| info.clone()).collect()
    }

    /// Runs the tool named `tool` (canonical).
    pub async fn call(
        &self,
        provider: &P,
        tool: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> anyhow::Result<ToolOutput> {
        match self.entries.iter().find(|(info, _)| info.name == tool) {
            Some((_, run)) => run(provider, tool, args, ctx).await,
            None => Err(anyhow::anyhow!(
                "{} has no tool named {tool}",
                self.provider
            )),
        }
    }
}

/// Boxes a tool's future for a [`Tools`] table, turning what it returns (a [`ToolOutput`],
/// a `String`, or a JSON value) into a [`ToolOutput`].
pub fn output<'a, O: Into<ToolOutput>>(
    future: impl Future<Output = anyhow::Result<O>> + Send + 'a,
) -> ToolFuture<'a> {
    Box::pin(async move { future.await.map(Into::into) })
}

/// One provider's entry in the link-time registry. Use [`register_provider!`](crate::register_provider).
pub struct ProviderRegistration {
    /// The provider's name, as [`ToolProvider::name`] gives it.
    pub name: &'static str,
    /// Builds a fresh instance; each registry (each executor) builds its own.
    pub build: fn() -> Arc<dyn ToolProvider>,
}

inventory::collect!(ProviderRegistration);

/// Every provider linked into this binary, sorted by name so listings are stable.
///
/// A provider crate that is a dependency but never referenced is dropped by the linker, so the
/// umbrella crate says `use toolbox_x as _;` and binaries say `use toolbox as _;`.
pub fn registered_providers() -> Vec<&'static ProviderRegistration> {
    let mut all: Vec<_> = inventory::iter::<ProviderRegistration>
        .into_iter()
        .collect();
    all.sort_by_key(|r| r.name);
    all
}

/// Registers a provider with the executor's registry at link time.
///
/// ```ignore
/// toolbox_host::register_provider!("file_manager", || std::sync::Arc::new(FileManager));
/// ```
#[macro_export]
macro_rules! register_provider {
    ($name:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::ProviderRegistration { name: $name, build: $build }
        }
    };
}
