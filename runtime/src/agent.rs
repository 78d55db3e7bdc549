//! The agent a turn (or a `call_agent` sub-turn) runs as.

/// What the turn loop needs of an agent: its prompt, its tools and its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveAgent {
    /// The agent's name, carried by every event of its turn.
    pub name: String,
    /// The system prompt.
    pub prompt: String,
    /// The toolsets it may use; `None` means every tool the permissions allow.
    pub toolsets: Option<Vec<String>>,
    /// A model other than the configured one.
    pub model: Option<String>,
    /// Model requests per turn before it is stopped; `None` uses the runtime's default.
    pub max_steps: Option<u32>,
    /// Whose tool names the model is shown; `None` uses the runtime's default.
    pub vocabulary: Option<toolbox_core::Vocabulary>,
    /// The prompt is toolbox's own (the built-in agent's): the tools it names are said in
    /// the model's vocabulary. An agent file's prompt is left as its author wrote it.
    pub builtin_prompt: bool,
}

impl From<&toolbox_core::AgentDef> for ActiveAgent {
    fn from(def: &toolbox_core::AgentDef) -> Self {
        ActiveAgent {
            name: def.name.to_string(),
            prompt: def.prompt.clone(),
            toolsets: def.toolsets.clone(),
            model: def.model.clone(),
            max_steps: def.max_steps,
            vocabulary: def.vocabulary,
            builtin_prompt: def.source == toolbox_core::agent::BUILT_IN_SOURCE,
        }
    }
}
