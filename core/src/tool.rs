use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Which names a model sees for the tools: toolbox's own, or those of a source system whose
/// prompts and skills a model was written against.
///
/// A vocabulary changes names only: schemas, listings and the executor's own messages use
/// the tool's name in it ([`ToolInfo::name_in`]); every name of every vocabulary is accepted
/// at dispatch; each tool is still listed once; a tool the vocabulary has no word for keeps its
/// canonical name. The words are data: each tool declares its own ([`ToolInfo::named`]).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum Vocabulary {
    /// toolbox's canonical names (`file_manager__read`, `run_python_code`, `shell`).
    #[default]
    #[serde(rename = "canonical")]
    Canonical,
    /// The Python data agent's names (`read_file`, `python_exec`, `bash`, `Skill`).
    #[serde(rename = "data-agent")]
    DataAgent,
}

impl Vocabulary {
    /// Every vocabulary, the default first.
    pub const ALL: [Vocabulary; 2] = [Vocabulary::Canonical, Vocabulary::DataAgent];

    /// The vocabulary's name on the command line and in configuration, e.g. `data-agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Vocabulary::Canonical => "canonical",
            Vocabulary::DataAgent => "data-agent",
        }
    }
}

impl std::fmt::Display for Vocabulary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Vocabulary {
    type Err = String;
    /// `canonical` or `data-agent` (`data_agent` is taken too).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "canonical" => Ok(Vocabulary::Canonical),
            "data-agent" | "data_agent" => Ok(Vocabulary::DataAgent),
            other => Err(format!(
                "vocabulary must be canonical or data-agent (got {:?})",
                other.chars().take(64).collect::<String>()
            )),
        }
    }
}

/// How much harm a tool can do, which decides how a permission mode treats it. Each class
/// names what a tool can do, not which provider serves it.
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
    /// Runs model-written code in an interpreter (Python, a notebook's kernel). Configuration
    /// written before this name may say `python`.
    #[serde(alias = "python")]
    Code,
    /// Runs model-written commands (a shell). Configuration written before this name may say
    /// `shell`.
    #[serde(alias = "shell")]
    Command,
}

impl ToolRisk {
    /// Every risk class, least risky first.
    pub const ALL: [ToolRisk; 4] = [
        ToolRisk::Read,
        ToolRisk::FileWrite,
        ToolRisk::Code,
        ToolRisk::Command,
    ];

    /// The risk's name in listings and configuration, e.g. `file_write`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolRisk::Read => "read",
            ToolRisk::FileWrite => "file_write",
            ToolRisk::Code => "code",
            ToolRisk::Command => "command",
        }
    }

    /// The class named `name` in configuration: its name, or the name it had before
    /// (`python` for [`Code`](ToolRisk::Code), `shell` for [`Command`](ToolRisk::Command)).
    pub fn parse(name: &str) -> Option<ToolRisk> {
        match name {
            "python" => Some(ToolRisk::Code),
            "shell" => Some(ToolRisk::Command),
            _ => ToolRisk::ALL.into_iter().find(|r| r.as_str() == name),
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
    /// The tool's name in other vocabularies, e.g. `data-agent: read_file`: shown instead of
    /// [`name`](Self::name) to a model prompted in that vocabulary, and accepted at dispatch
    /// like an alias. Set with [`ToolInfo::named`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<Vocabulary, String>,
    /// JSON Schema of the structured value the tool returns beside its text (MCP's
    /// `outputSchema`), when it has one. Set with [`ToolInfo::output_schema`]; the tool then
    /// returns a [`ToolOutput`] with that value (see [`ToolOutput::new`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
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
    /// The vocabularies whose listings leave the tool out, because other tools cover it
    /// there under the words of that vocabulary (`plan__set` in `data-agent`, where
    /// `data_agent_prepare_generation_goal` and `…_plan` set its two parts), or because it
    /// exists for one vocabulary only. The tool is still accepted at dispatch by every name.
    /// Set with [`ToolInfo::only_in`] or [`ToolInfo::unlisted_in`].
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unlisted: BTreeSet<Vocabulary>,
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
            names: BTreeMap::new(),
            output_schema: None,
            open_world: None,
            file_reader: false,
            intercepted: false,
            unlisted: BTreeSet::new(),
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

    /// Gives the tool its name in `vocabulary` (also accepted at dispatch). A name equal to
    /// the canonical one is fine: it says the vocabulary has the same word.
    pub fn named(mut self, vocabulary: Vocabulary, name: &str) -> Self {
        self.names.insert(vocabulary, name.to_string());
        self
    }

    /// Lists the tool in `vocabulary` only: a tool made for that vocabulary's own words (the
    /// data agent's `data_agent_*` family). Its name is its canonical name; every vocabulary
    /// accepts it at dispatch.
    pub fn only_in(mut self, vocabulary: Vocabulary) -> Self {
        self.unlisted = Vocabulary::ALL
            .into_iter()
            .filter(|v| *v != vocabulary)
            .collect();
        self.names.insert(vocabulary, self.name.clone());
        self
    }

    /// Leaves the tool out of `vocabulary`'s listings, where other tools cover it in that
    /// vocabulary's words; still accepted at dispatch.
    pub fn unlisted_in(mut self, vocabulary: Vocabulary) -> Self {
        self.unlisted.insert(vocabulary);
        self
    }

    /// Whether a listing in `vocabulary` shows the tool.
    pub fn listed_in(&self, vocabulary: Vocabulary) -> bool {
        !self.unlisted.contains(&vocabulary)
    }

    /// The name a model prompted in `vocabulary` sees: the tool's word in it, else the
    /// canonical name.
    pub fn name_in(&self, vocabulary: Vocabulary) -> &str {
        self.names
            .get(&vocabulary)
            .map(String::as_str)
            .unwrap_or(&self.name)
    }

    /// Every name the tool answers to at dispatch, without repeats: the canonical name, the
    /// aliases, and its names in every vocabulary.
    pub fn dispatch_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = vec![&self.name];
        for name in self.aliases.iter().chain(self.names.values()) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// A copy whose [`name`](Self::name) is the tool's name in `vocabulary`, for rendering.
    pub fn in_vocabulary(&self, vocabulary: Vocabulary) -> ToolInfo {
        let mut info = self.clone();
        info.name = self.name_in(vocabulary).to_string();
        info
    }

    /// Declares the structured value the tool returns beside its text (see
    /// [`ToolInfo::output_schema`]): a JSON Schema of an object.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
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
            .unwrap_or(matches!(self.risk, ToolRisk::Code | ToolRisk::Command))
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

/// What a tool returns: the text the model reads and, for a tool that declares an output
/// schema ([`ToolInfo::output_schema`]), a structured value a program reads (MCP
/// `structuredContent`, `"structured"` in the HTTP API, `ToolCallInfo::structured`).
///
/// The model gets exactly `text`. A structured value from a tool that declares no output
/// schema is dropped by the executor, since no client was told its shape.
///
/// ```
/// use serde_json::json;
/// use toolbox_core::ToolOutput;
///
/// let plain = ToolOutput::from("3 files");
/// assert_eq!((plain.text.as_str(), plain.structured), ("3 files", None));
/// // A JSON value that is not a string reaches the model as pretty JSON.
/// let json = ToolOutput::from(json!({"rows": 2}));
/// assert_eq!(json.text, "{\n  \"rows\": 2\n}");
/// let both = ToolOutput::new("2 rows", json!({"rows": 2}));
/// assert_eq!(both.structured, Some(json!({"rows": 2})));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// What the model sees.
    pub text: String,
    /// What a program reads: a JSON object matching the tool's output schema, if it has one.
    pub structured: Option<Value>,
}

impl ToolOutput {
    /// A result of `text` for the model and `structured` for programs.
    pub fn new(text: impl Into<String>, structured: Value) -> Self {
        ToolOutput {
            text: text.into(),
            structured: Some(structured),
        }
    }

    /// A result of text only.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            structured: None,
        }
    }
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        ToolOutput::text(text)
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        ToolOutput::text(text)
    }
}

/// A string as it is; any other JSON value as pretty JSON text, with no structured value.
impl From<Value> for ToolOutput {
    fn from(value: Value) -> Self {
        match value {
            Value::String(text) => ToolOutput::text(text),
            other => ToolOutput::text(
                serde_json::to_string_pretty(&other)
                    .unwrap_or_else(|e| format!("<unprintable result: {e}>")),
            ),
        }
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
        assert!(info(ToolRisk::Code).open_world_hint());
        assert!(info(ToolRisk::Command).open_world_hint());
        assert!(info(ToolRisk::Read).open_world(true).open_world_hint());
        assert!(!info(ToolRisk::Code).open_world(false).open_world_hint());
    }

    #[test]
    fn a_vocabulary_renames_only_the_tools_that_have_a_word_in_it() {
        let t = ToolInfo::new("file_manager__read", "d", serde_json::json!({}))
            .aliases(&["cat", "read_file"])
            .named(Vocabulary::DataAgent, "read_file");
        assert_eq!(t.name_in(Vocabulary::DataAgent), "read_file");
        assert_eq!(t.name_in(Vocabulary::Canonical), "file_manager__read");
        assert_eq!(
            t.dispatch_names(),
            ["file_manager__read", "cat", "read_file"]
        );
        assert_eq!(t.in_vocabulary(Vocabulary::DataAgent).name, "read_file");
        let plain = ToolInfo::new("memory__save", "d", serde_json::json!({}));
        assert_eq!(plain.name_in(Vocabulary::DataAgent), "memory__save");
        assert_eq!("data-agent".parse(), Ok(Vocabulary::DataAgent));
        assert!("klingon".parse::<Vocabulary>().is_err());
        let own = ToolInfo::new("data_agent_x", "d", serde_json::json!({}))
            .only_in(Vocabulary::DataAgent);
        assert!(own.listed_in(Vocabulary::DataAgent));
        assert!(!own.listed_in(Vocabulary::Canonical));
        assert_eq!(own.name_in(Vocabulary::DataAgent), "data_agent_x");
        let covered = plain.clone().unlisted_in(Vocabulary::DataAgent);
        assert!(covered.listed_in(Vocabulary::Canonical));
        assert!(!covered.listed_in(Vocabulary::DataAgent));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(
            json["names"],
            serde_json::json!({"data-agent": "read_file"})
        );
        assert_eq!(serde_json::from_value::<ToolInfo>(json).unwrap(), t);
    }

    #[test]
    fn risk_classes_are_named_for_what_a_tool_does_and_read_by_their_old_names_too() {
        assert_eq!(ToolRisk::Code.as_str(), "code");
        assert_eq!(ToolRisk::Command.to_string(), "command");
        for (name, risk) in [
            ("code", ToolRisk::Code),
            ("python", ToolRisk::Code),
            ("command", ToolRisk::Command),
            ("shell", ToolRisk::Command),
            ("file_write", ToolRisk::FileWrite),
        ] {
            assert_eq!(ToolRisk::parse(name), Some(risk), "{name}");
            assert_eq!(
                serde_json::from_value::<ToolRisk>(Value::String(name.into())).unwrap(),
                risk
            );
        }
        assert_eq!(ToolRisk::parse("bash"), None);
        assert_eq!(serde_json::to_value(ToolRisk::Code).unwrap(), "code");
    }

    #[test]
    fn a_tool_output_is_text_and_an_optional_value() {
        let out = ToolOutput::new("text", serde_json::json!({"exit_code": 0}));
        assert_eq!(out.structured, Some(serde_json::json!({"exit_code": 0})));
        assert_eq!(
            ToolOutput::from(Value::String("s".into())),
            ToolOutput::text("s")
        );
        assert_eq!(ToolOutput::from(serde_json::json!([1])).text, "[\n  1\n]");
    }
}
