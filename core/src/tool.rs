use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How much harm a tool can do, which decides how a permission mode treats it.
///
/// `Read` is the default: a tool must opt in to a riskier class explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolRisk {
    /// No side effects outside reading (and the executor's own bookkeeping).
    #[default]
    Read,
    /// Creates, changes or deletes files in the workspace.
    FileWrite,
    /// Runs model-written Python.
    Python,
    /// Runs model-written shell commands.
    Shell,
}

impl ToolRisk {
    /// Every risk class, least risky first.
    pub const ALL: [ToolRisk; 4] = [
        ToolRisk::Read,
        ToolRisk::FileWrite,
        ToolRisk::Python,
        ToolRisk::Shell,
    ];

    /// The risk's name in schemas and configuration, e.g. `file_write`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolRisk::Read => "read",
            ToolRisk::FileWrite => "file_write",
            ToolRisk::Python => "python",
            ToolRisk::Shell => "shell",
        }
    }

    /// Whether a permission mode has to gate this tool at all.
    pub fn is_risky(self) -> bool {
        self != ToolRisk::Read
    }
}

impl std::fmt::Display for ToolRisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the executor and the model know about one tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Canonical name, `^[a-zA-Z0-9_-]{1,64}$`, e.g. `file_manager__read`.
    pub name: String,
    /// What the tool does and when to use it; this is the model's only manual.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// How much harm the tool can do; decides how a permission mode treats it.
    pub risk: ToolRisk,
    /// Other names accepted at dispatch (never listed in schemas), e.g. `read_file`.
    pub aliases: Vec<String>,
    /// Coarse groups an agent can ask for, e.g. `files`.
    pub toolsets: Vec<String>,
    /// Whether the tool reaches beyond the workspace and this machine (the web, a remote
    /// service): MCP's `openWorldHint`. `None` derives it from the risk, see
    /// [`ToolInfo::open_world_hint`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world: Option<bool>,
    /// The tool shows any workspace text file named by its `path` argument, a window at a
    /// time, so the executor may point a model at it for a file toolbox wrote (a spooled
    /// result). Set with [`ToolInfo::file_reader`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub file_reader: bool,
    /// The tool is served by whoever drives a model's turn, not by the executor (the team
    /// provider's `call_agent`, which runs a sub-turn): it is listed only where such a runtime
    /// runs, and the executor refuses it. Set with [`ToolInfo::intercepted`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub intercepted: bool,
}

impl ToolInfo {
    /// A Read tool with no aliases and no toolsets; refine with the builder methods.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema,
            risk: ToolRisk::Read,
            aliases: Vec::new(),
            toolsets: Vec::new(),
            open_world: None,
            file_reader: false,
            intercepted: false,
        }
    }

    /// Sets the tool's risk class.
    pub fn risk(mut self, risk: ToolRisk) -> Self {
        self.risk = risk;
        self
    }

    /// Sets the other names accepted at dispatch (resolved by the registry).
    pub fn aliases(mut self, aliases: &[&str]) -> Self {
        self.aliases = aliases.iter().map(|a| a.to_string()).collect();
        self
    }

    /// Sets the toolsets the tool belongs to.
    pub fn toolsets(mut self, toolsets: &[&str]) -> Self {
        self.toolsets = toolsets.iter().map(|t| t.to_string()).collect();
        self
    }

    /// Says explicitly whether the tool reaches the open world (see [`ToolInfo::open_world`]).
    pub fn open_world(mut self, open_world: bool) -> Self {
        self.open_world = Some(open_world);
        self
    }

    /// The explicit hint, else one derived from the risk: code and commands can reach
    /// anything the host can; reading and writing workspace files cannot.
    pub fn open_world_hint(&self) -> bool {
        self.open_world
            .unwrap_or(matches!(self.risk, ToolRisk::Python | ToolRisk::Shell))
    }

    /// Marks the tool as a reader of workspace text files (see [`ToolInfo::file_reader`]).
    pub fn file_reader(mut self) -> Self {
        self.file_reader = true;
        self
    }

    /// Marks the tool as served by the agent runtime, not the executor (see
    /// [`ToolInfo::intercepted`]).
    pub fn intercepted(mut self) -> Self {
        self.intercepted = true;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_world_is_derived_from_risk_unless_given() {
        let info = |risk| ToolInfo::new("t", "d", serde_json::json!({})).risk(risk);
        assert!(!info(ToolRisk::Read).open_world_hint());
        assert!(!info(ToolRisk::FileWrite).open_world_hint());
        assert!(info(ToolRisk::Python).open_world_hint());
        assert!(info(ToolRisk::Shell).open_world_hint());
        assert!(info(ToolRisk::Read).open_world(true).open_world_hint());
        assert!(!info(ToolRisk::Python).open_world(false).open_world_hint());
    }
}
