use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::{ToolContext, ToolInfo};

/// A family of tools behind one implementation.
///
/// `list_tools` is plain (not async): tool metadata is static, and the executor builds its
/// name index once, synchronously, when it starts. `call_tool` receives the canonical name
/// even when the model used an alias. Returning `Err` is the normal way to report a failure:
/// the executor turns it into status `error` with the message as the result.
#[async_trait]
pub trait ToolProvider: Send + Sync {
    fn name(&self) -> &str;
    fn list_tools(&self) -> Vec<ToolInfo>;
    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> anyhow::Result<Value>;
}

/// One provider's entry in the link-time registry. Use [`register_provider!`](crate::register_provider).
pub struct ProviderRegistration {
    pub name: &'static str,
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
/// toolbox_core::register_provider!("file_manager", || std::sync::Arc::new(FileManager));
/// ```
#[macro_export]
macro_rules! register_provider {
    ($name:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::ProviderRegistration { name: $name, build: $build }
        }
    };
}
