use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::{ToolInfo, Vocabulary};
use toolbox_host::{registered_providers, ToolProvider};

use crate::Permissions;

/// One tool and the provider that serves it.
#[derive(Clone)]
pub struct RegisteredTool {
    /// The tool's metadata, as its provider lists it.
    pub info: ToolInfo,
    /// The provider that runs it.
    pub provider: Arc<dyn ToolProvider>,
}

impl RegisteredTool {
    /// The name of the provider that serves the tool.
    pub fn provider_name(&self) -> &str {
        self.provider.name()
    }
}

/// Every tool of every provider, indexed by canonical name, alias and name in each
/// [`Vocabulary`](toolbox_core::Vocabulary).
///
/// Built once; lookups are one hash probe.
///
/// **Architecture Invariant:** the executor routes through this index and never names a tool
/// itself. Aliases are declared once, in each tool's [`ToolInfo::aliases`], and resolved
/// only here: a provider's `call_tool` sees canonical names.
#[derive(Clone, Default)]
pub struct Registry {
    tools: Vec<RegisteredTool>,
    by_name: HashMap<String, usize>,
}

impl Registry {
    /// The providers registered through `inventory` in this binary.
    pub fn from_inventory() -> Result<Self> {
        Self::from_providers(registered_providers().into_iter().map(|r| (r.build)()))
    }

    /// A registry of explicit providers. Two tools claiming one name (or alias) is an error.
    pub fn from_providers(
        providers: impl IntoIterator<Item = Arc<dyn ToolProvider>>,
    ) -> Result<Self> {
        let mut registry = Registry::default();
        for provider in providers {
            for info in provider.list_tools() {
                let index = registry.tools.len();
                for name in info.dispatch_names() {
                    if let Some(&other) = registry.by_name.get(name) {
                        let other = &registry.tools[other];
                        bail!(
                            "tool name {name:?} of provider {} is already taken by {} ({})",
                            provider.name(),
                            other.info.name,
                            other.provider.name()
                        );
                    }
                    registry.by_name.insert(name.to_string(), index);
                }
                registry.tools.push(RegisteredTool {
                    info,
                    provider: provider.clone(),
                });
            }
        }
        Ok(registry)
    }

    /// The [`IdleSlot`](toolbox_host::handoff::IdleSlot)s of the providers that have a
    /// thread able to take up a front end's work while idle (`ToolProvider::idle_slot`),
    /// each once.
    pub fn idle_slots(&self) -> Vec<Arc<toolbox_host::handoff::IdleSlot>> {
        let mut slots: Vec<Arc<toolbox_host::handoff::IdleSlot>> = Vec::new();
        for tool in &self.tools {
            if let Some(slot) = tool.provider.idle_slot() {
                if !slots.iter().any(|known| Arc::ptr_eq(known, &slot)) {
                    slots.push(slot);
                }
            }
        }
        slots
    }

    /// Looks a tool up by canonical name, alias, or name in any vocabulary.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// All tools in registration order (providers sorted by name).
    pub fn tools(&self) -> &[RegisteredTool] {
        &self.tools
    }

    /// The first tool (in registration order) that reads workspace text files
    /// ([`ToolInfo::file_reader`]) and that `permissions` let a model see: the tool a spooled
    /// result's preview names. `None` when no such tool is built in.
    pub fn file_reader(&self, permissions: &Permissions) -> Option<&RegisteredTool> {
        self.tools
            .iter()
            .find(|t| t.info.file_reader && permissions.visible(t.info.risk))
    }

    /// The tools the given permissions let a model see, without the ones only an agent
    /// runtime serves ([`ToolInfo::intercepted`]).
    pub fn visible(&self, permissions: &Permissions) -> Vec<&RegisteredTool> {
        self.tools
            .iter()
            .filter(|t| !t.info.intercepted && permissions.visible(t.info.risk))
            .collect()
    }

    /// `(canonical name, name in vocabulary)` for every tool whose names differ there.
    pub fn renames(&self, vocabulary: Vocabulary) -> Vec<(String, String)> {
        self.tools
            .iter()
            .filter(|t| t.info.name_in(vocabulary) != t.info.name)
            .map(|t| (t.info.name.clone(), t.info.name_in(vocabulary).to_string()))
            .collect()
    }

    /// The words of `vocabulary`, for the context of a call made by a model prompted in it
    /// ([`ToolContext::word`](toolbox_host::ToolContext::word)).
    pub fn words(&self, vocabulary: Vocabulary) -> toolbox_host::ToolWords {
        toolbox_host::ToolWords::new(vocabulary, self.renames(vocabulary))
    }

    /// Text written by toolbox (the built-in system prompt, say) with the tools it names
    /// said in `vocabulary` ([`rename_text`](crate::schema::rename_text)).
    pub fn rename_text(&self, text: &str, vocabulary: Vocabulary) -> String {
        if vocabulary == Vocabulary::Canonical {
            return text.to_string();
        }
        crate::schema::rename_text(text, &self.renames(vocabulary))
    }

    /// `tools` rendered in `rendering` (canonical unless it names a vocabulary), with the
    /// descriptions naming the other tools in that vocabulary too, and without the tools that
    /// vocabulary does not list ([`render_renamed`](crate::schema::render_renamed)).
    pub fn render<'a>(
        &self,
        tools: impl IntoIterator<Item = &'a ToolInfo>,
        rendering: impl Into<crate::SchemaRendering>,
    ) -> Vec<Value> {
        let rendering = rendering.into();
        let renames = self.renames(rendering.vocabulary.unwrap_or_default());
        crate::schema::render_renamed(tools, rendering, &renames)
    }

    /// Every toolset name a tool declares, plus every provider name.
    pub fn toolset_names(&self) -> BTreeSet<String> {
        self.tools
            .iter()
            .flat_map(|t| {
                t.info
                    .toolsets
                    .iter()
                    .cloned()
                    .chain(std::iter::once(t.provider_name().to_string()))
            })
            .collect()
    }

    /// Expands toolset names to tools, in registration order and without repeats.
    ///
    /// A name may be a toolset a tool declares, a provider name (also as the pattern
    /// `provider__*`, the form of the data agent's sidecar tables), or a single tool's name
    /// or alias. An unknown name is an error listing the known toolsets.
    pub fn expand_toolsets(&self, toolsets: &[&str]) -> Result<Vec<&RegisteredTool>> {
        let mut wanted = vec![false; self.tools.len()];
        for set in toolsets {
            // `memory__*`: every tool of the provider `memory`.
            let set = &set
                .strip_suffix("__*")
                .filter(|p| self.tools.iter().any(|t| t.provider_name() == *p))
                .unwrap_or(set);
            let mut found = false;
            for (i, t) in self.tools.iter().enumerate() {
                if t.provider_name() == *set || t.info.toolsets.iter().any(|s| s == set) {
                    wanted[i] = true;
                    found = true;
                }
            }
            if let Some(&i) = self.by_name.get(*set) {
                wanted[i] = true;
                found = true;
            }
            if !found {
                let known: Vec<_> = self.toolset_names().into_iter().collect();
                bail!("unknown toolset: {set} (known: {})", known.join(", "));
            }
        }
        Ok(self
            .tools
            .iter()
            .zip(wanted)
            .filter_map(|(t, w)| w.then_some(t))
            .collect())
    }
}
