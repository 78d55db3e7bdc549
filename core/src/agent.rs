//! Agent definitions: Markdown files with YAML frontmatter, found in the workspace and in the
//! operator's folders, plus the built-in `default` agent.
//!
//! An agent file looks like this (the body is the agent's system prompt):
//!
//! ```markdown
//! ---
//! name: reviewer
//! description: Reviews a change for bugs and unclear code; read-only.
//! toolsets: [files]
//! model: gpt-4.1-mini
//! max_steps: 30
//! ---
//! You review code. Read the files involved, then list concrete problems ...
//! ```
//!
//! | key | | rule |
//! |---|---|---|
//! | `name` | required | an [`AgentName`]: 1-64 of `a-z 0-9 - _`, starting with a letter or digit |
//! | `description` | required | 1-1024 characters: what the agent is for, shown to people and models |
//! | `toolsets` | required | a list of toolset, provider or tool names; `[]` gives the agent no tools |
//! | `model` | optional | the model to run it on (the runtime's default when left out) |
//! | `max_steps` | optional | a whole number from 1 to 1000: the most model calls of one turn |
//! | `vocabulary` | optional | `canonical` or `data-agent`: whose tool names the model is shown (the runtime's `[runtime] vocabulary` when left out); see [`Vocabulary`](crate::Vocabulary) |
//!
//! Any other key is refused (a misspelt `max-steps` must not silently fall back to a default),
//! and so is an empty body. `toolsets` is required so that forgetting it never hands an agent
//! every tool; only the built-in `default` agent has every toolset ([`AgentDef::toolsets`] is
//! `None`). Toolset names are checked for their form here; whether they exist is checked by
//! whoever expands them into tools (the executor knows the registry).
//!
//! Where agents are found, in order (`toolbox_host::discover_agents`, which reads the files;
//! this module only parses them):
//!
//! 1. `<workspace>/.toolbox/agents/*.md`. `.toolbox` and `agents` are opened without following
//!    a symbolic link, and a link among the files is skipped with a reason: the workspace is
//!    hostile and `.toolbox/` is toolbox's own folder.
//! 2. each folder of `[agents] dirs` in the operator's configuration: absolute, `~/…` or
//!    relative to the workspace root. In an absolute (or `~`) folder, which the operator
//!    chose, links are followed; in a workspace-relative one only while they stay inside that
//!    folder. An untrusted workspace's `toolbox.toml` may set nothing in `[agents]`.
//! 3. the built-in `default` agent ([`AgentDef::builtin_default`]), unless a file defined an
//!    agent named `default`: then that file wins, without a problem being reported.
//!
//! In each folder only `*.md` regular files are read (dot-files are ignored), sorted by name,
//! at most [`MAX_FILES_PER_FOLDER`]; the file's name does not have to match the agent's. The
//! first agent of a name wins: a later file with the same name is skipped with a reason naming
//! both files. Every invalid file is skipped with its reasons ([`AgentSet::problems`]);
//! discovery itself never fails.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value};

use crate::config_table::{Key, Table};
use crate::frontmatter::{self, set_once, OtherKeys, ScalarText, SplitError};

/// `[agents] dirs`. An untrusted workspace's toolbox.toml may set nothing in [agents]: `dirs`
/// would let a repository point toolbox at folders outside it, whose prompts would then steer
/// agents.
const DIRS: Key = Key::strings("dirs");
/// The `[agents]` table.
const TABLE: Table = Table::new("agents", &[DIRS]);
crate::register_table!(TABLE);

/// The tool through which one agent runs another: declared by the team provider (with
/// [`call_agent_info`]), served by the agent runtime, which parses its arguments with
/// [`CallAgentArgs`]. Its one name, schema and argument rules live here, beside the agents.
pub const CALL_AGENT: &str = "call_agent";

/// `call_agent`'s tool description and schema, in the toolset `toolset`. Intercepted: the
/// executor refuses it; only a runtime serves it.
pub fn call_agent_info(toolset: &str) -> crate::ToolInfo {
    use crate::schema::{object_schema, prop};
    crate::ToolInfo::new(
        CALL_AGENT,
        "Run another agent on a task in this same session and return its final answer. The \
         agent works with its own instructions and toolsets until it is done, then its last \
         message comes back as this tool's result. Write the task so it stands on its own: the \
         goal, the files or data involved, and what to return. list_agents shows the agents \
         and what each is for.",
        object_schema(
            &[
                (
                    "agent",
                    prop(
                        "string",
                        "The agent's name, as list_agents shows it, e.g. \"reviewer\".",
                    ),
                ),
                (
                    "task",
                    prop(
                        "string",
                        "What the agent should do, self-contained, and what it should answer with.",
                    ),
                ),
            ],
            &["agent", "task"],
        ),
    )
    .risk(crate::ToolRisk::Read)
    .toolsets(&[toolset])
    .intercepted()
}

/// `call_agent`'s arguments, parsed once from what the model sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallAgentArgs {
    /// The agent to run, as the model named it (trimmed); whether it exists is the runtime's
    /// to find out.
    pub agent: String,
    /// What it should do (trimmed, never empty).
    pub task: String,
}

impl CallAgentArgs {
    /// Parses the arguments text a model sent (empty is `{}`); the error names the tool and
    /// the argument.
    pub fn parse(raw: &str) -> Result<CallAgentArgs, String> {
        let raw = if raw.trim().is_empty() { "{}" } else { raw };
        let args = match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(args)) => args,
            Ok(_) => {
                return Err(format!(
                    "{CALL_AGENT}: arguments must be a JSON object with agent and task"
                ))
            }
            Err(e) => return Err(format!("{CALL_AGENT}: arguments are not valid JSON: {e}")),
        };
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let Some(agent) = text("agent") else {
            return Err(format!(
                "{CALL_AGENT} requires agent: the name of an agent (see list_agents)"
            ));
        };
        let Some(task) = text("task") else {
            return Err(format!(
                "{CALL_AGENT} requires task: what the agent should do, in full"
            ));
        };
        Ok(CallAgentArgs { agent, task })
    }
}

/// An agent file larger than this is refused: its body goes into every request the agent makes.
pub const MAX_AGENT_FILE_BYTES: u64 = 256 * 1024;
/// The frontmatter (between the `---` lines) may be at most this long.
pub const MAX_FRONTMATTER_BYTES: usize = 16 * 1024;
/// The longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The highest `max_steps` an agent file may set.
pub const MAX_STEPS_LIMIT: u32 = 1000;
/// At most this many `*.md` files of one folder are read.
pub const MAX_FILES_PER_FOLDER: usize = 1000;
/// The folder under `.toolbox/` that holds the workspace's agents.
pub const AGENTS_DIR: &str = "agents";
/// The name of the built-in agent.
pub const DEFAULT_AGENT: &str = "default";
/// What [`AgentDef::source`] says for the built-in agent.
pub const BUILT_IN_SOURCE: &str = "built-in";
/// Longest accepted agent name, in characters (all ASCII, so also bytes).
pub const MAX_NAME_LEN: usize = 64;
/// At most this many `toolsets` entries.
const MAX_TOOLSETS: usize = 64;
/// The longest toolset name (the longest tool name).
const MAX_TOOLSET_CHARS: usize = 64;
/// The longest `model`.
const MAX_MODEL_CHARS: usize = 256;
/// Unknown keys beyond this many are not listed one by one.
const MAX_UNKNOWN_KEYS_LISTED: usize = 16;
/// The keys an agent file may have, for messages.
const KNOWN_KEYS: &str = "name, description, toolsets, model, max_steps, vocabulary";

/// A valid agent name: 1 to 64 characters of `a-z 0-9 - _`, starting with a letter or digit
/// (`^[a-z0-9][a-z0-9_-]{0,63}$`). Parsed once from a file or a model's `call_agent`
/// arguments; always safe as a file or folder name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AgentName(String);

/// Why an agent name was refused. The message quotes the name (escaped and shortened) and
/// states the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidAgentName {
    shown: String,
    reason: &'static str,
}

impl fmt::Display for InvalidAgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid agent name {}: {}; an agent name is 1-64 characters of a-z, 0-9, - and _, \
             starting with a letter or a digit",
            self.shown, self.reason
        )
    }
}

impl std::error::Error for InvalidAgentName {}

impl AgentName {
    /// Parses a name, refusing anything that is not a valid agent name. Nothing is trimmed.
    pub fn parse(raw: &str) -> Result<Self, InvalidAgentName> {
        let reason = if raw.is_empty() {
            Some("it is empty")
        } else if raw.chars().count() > MAX_NAME_LEN {
            Some("it is longer than 64 characters")
        } else if raw.bytes().any(|b| b.is_ascii_uppercase()) {
            Some("it has upper-case letters")
        } else if !raw
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        {
            Some("it has a character other than a-z, 0-9, - and _")
        } else if raw.starts_with(['-', '_']) {
            Some("it starts with - or _")
        } else {
            None
        };
        match reason {
            None => Ok(AgentName(raw.to_string())),
            Some(reason) => Err(InvalidAgentName {
                // Debug-escaped and cut, so a hostile name cannot flood or forge a message.
                shown: shorten_quoted(raw),
                reason,
            }),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `raw` with control characters and quotes escaped, cut to 64 characters (`…` after a cut).
fn shorten(raw: &str) -> String {
    let mut shown: String = raw.chars().take(64).flat_map(char::escape_debug).collect();
    if raw.chars().nth(64).is_some() {
        shown.push('…');
    }
    shown
}

/// [`shorten`] in double quotes.
fn shorten_quoted(raw: &str) -> String {
    format!("\"{}\"", shorten(raw))
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AgentName({:?})", self.0)
    }
}

impl std::str::FromStr for AgentName {
    type Err = InvalidAgentName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AgentName::parse(s)
    }
}

impl serde::Serialize for AgentName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// One agent: who it is, which tools it may use, and its system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDef {
    /// The agent's name.
    pub name: AgentName,
    /// What the agent is for, trimmed; shown to people and to models choosing an agent.
    pub description: String,
    /// The toolsets (or provider or tool names) the agent may use, in file order without
    /// repeats; `None` means every toolset (only the built-in default agent).
    pub toolsets: Option<Vec<String>>,
    /// The model to run the agent on; `None` means the runtime's default.
    pub model: Option<String>,
    /// The most model calls one turn of this agent may make; `None` means the runtime's
    /// default.
    pub max_steps: Option<u32>,
    /// Whose tool names the model is shown (schemas, the executor's messages); `None` means
    /// the runtime's default (`[runtime] vocabulary`).
    pub vocabulary: Option<crate::Vocabulary>,
    /// The system prompt: the Markdown body after the frontmatter, trimmed.
    pub prompt: String,
    /// Where the agent came from, for people: `.toolbox/agents/x.md`, `/abs/dir/x.md`, a
    /// workspace-relative `dir/x.md`, or `built-in`.
    pub source: String,
}

/// The built-in agent's system prompt.
const DEFAULT_PROMPT: &str = "\
You are a careful assistant working in the user's workspace, with tools.

- Work out what the user actually needs before acting; ask only when a wrong guess would be \
costly.
- Use the tools instead of guessing: read files, search, run code and look things up, then \
check what came back before relying on it.
- Take small steps. When a tool fails, read the error and change your approach instead of \
repeating the same call.
- Do not change or delete anything the task does not call for.
- Prefer the dedicated tools. `shell` is the fallback: for read-only git checks, system \
commands and process control; not for Python analysis, JSON/CSV conversion or installing \
packages. Never run `python …` through `shell`, and never use `subprocess` inside \
`run_python_code` to run another Python script: use its `script_path`.
- `file_manager__write` is for small files. Large JSON, JSONL or CSV goes through \
`data__convert`, or Python with pathlib/json/csv; inspect and validate datasets with \
`data__inspect` and `data__validate`.
- Temporary files go to the scratchpad; deliverables go to `output/`. Python code finds the \
scratchpad's path in the environment variable `PYTHON_EXEC_SCRATCHPAD`, and `output/`'s in \
`OUTPUT_DIR`.
- Install Python packages with `kernel_install`: they go into toolbox's per-user venv, \
never into the system Python or a project `.venv`.
- When you are done, or cannot go further, answer plainly: what you did, what you found, and \
what is still open.";

impl AgentDef {
    /// The built-in agent: named `default`, every toolset, the runtime's default model, and a
    /// short general-purpose system prompt. A file that defines `default` replaces it.
    pub fn builtin_default() -> AgentDef {
        AgentDef {
            name: AgentName(DEFAULT_AGENT.to_string()),
            description: "The built-in agent: every tool the permission mode allows.".to_string(),
            toolsets: None,
            model: None,
            max_steps: None,
            vocabulary: None,
            prompt: DEFAULT_PROMPT.to_string(),
            source: BUILT_IN_SOURCE.to_string(),
        }
    }

    /// Parses an agent file's bytes; `source` is recorded as [`AgentDef::source`]. On
    /// failure, every problem found (each a sentence naming the rule), joined with `"; "`.
    pub fn parse(bytes: &[u8], source: &str) -> Result<AgentDef, String> {
        parse_file(bytes, source).map_err(|problems| problems.join("; "))
    }

    /// The agent as people and models see it in a listing: `name`, `description`,
    /// `toolsets` (a list, or `"all"`), `model` and `max_steps` when set, and `source`. The
    /// prompt is left out.
    pub fn summary(&self) -> Value {
        let mut out = json!({
            "name": self.name,
            "description": self.description,
            "toolsets": match &self.toolsets {
                Some(sets) => json!(sets),
                None => json!("all"),
            },
        });
        if let Some(model) = &self.model {
            out["model"] = json!(model);
        }
        if let Some(steps) = self.max_steps {
            out["max_steps"] = json!(steps);
        }
        if let Some(vocabulary) = self.vocabulary {
            out["vocabulary"] = json!(vocabulary.as_str());
        }
        out["source"] = json!(self.source);
        out
    }
}

/// A file (or folder, or setting) that gave no agent, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentProblem {
    /// What has the problem, as shown to people: `.toolbox/agents/x.md`, a folder of
    /// `[agents] dirs`, or `configuration` for the `[agents]` table itself.
    pub file: String,
    /// Every rule it breaks, as sentences joined with `"; "`.
    pub reason: String,
}

/// The `[agents]` table of the configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentsConfig {
    /// `[agents] dirs`: more folders of agent files, as given (absolute, `~/…` or relative to
    /// the workspace root).
    pub dirs: Vec<String>,
}

impl AgentsConfig {
    /// Reads `[agents]` from the whole configuration (`ToolContext::config`): only `dirs`, a
    /// list of folder paths, is known.
    pub fn from_config(config: &Value) -> anyhow::Result<Self> {
        let table = TABLE.read(config)?;
        let dirs = DIRS.string_list(&table)?.unwrap_or_default();
        if let Some(bad) = dirs
            .iter()
            .find(|d| d.trim().is_empty() || d.contains('\0'))
        {
            anyhow::bail!("[agents] dirs must be folder paths, got {bad:?} among them");
        }
        Ok(AgentsConfig { dirs })
    }
}

/// Every agent visible from a workspace under a configuration, and what was skipped.
#[derive(Debug, Clone, Default)]
pub struct AgentSet {
    agents: Vec<AgentDef>,
    problems: Vec<AgentProblem>,
}

impl AgentSet {
    /// An empty set, for discovery to fill (`toolbox_host::discover_agents` does, in
    /// `host`): add agents with [`add`](Self::add), problems with
    /// [`problem`](Self::problem), then [`finish`](Self::finish).
    pub fn new() -> AgentSet {
        AgentSet::default()
    }

    /// Adds the built-in `default` agent unless a file defined one, and sorts by name.
    pub fn finish(mut self) -> AgentSet {
        if self.get(DEFAULT_AGENT).is_none() {
            self.agents.push(AgentDef::builtin_default());
        }
        self.agents.sort_by(|a, b| a.name.cmp(&b.name));
        self
    }

    /// The agents, sorted by name; the `default` agent is always among them.
    pub fn agents(&self) -> &[AgentDef] {
        &self.agents
    }

    /// The agent named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&AgentDef> {
        self.agents.iter().find(|a| a.name.as_str() == name)
    }

    /// What was skipped and why, in the order found.
    pub fn problems(&self) -> &[AgentProblem] {
        &self.problems
    }

    /// The listing `list_agents` returns: `{"agents": [...]}` with each agent's
    /// [`summary`](AgentDef::summary), and `"skipped": [{"file", "reason"}, ...]` when
    /// anything was skipped.
    pub fn summary(&self) -> Value {
        let mut out = json!({
            "agents": self.agents.iter().map(AgentDef::summary).collect::<Vec<_>>(),
        });
        if !self.problems.is_empty() {
            out["skipped"] = self
                .problems
                .iter()
                .map(|p| json!({"file": p.file, "reason": p.reason}))
                .collect();
        }
        out
    }

    /// Records that `file` was skipped, and why.
    pub fn problem(&mut self, file: String, reason: String) {
        self.problems.push(AgentProblem { file, reason });
    }

    /// Adds an agent unless one of its name came first (then the later one is a problem).
    pub fn add(&mut self, agent: AgentDef) {
        if let Some(first) = self.agents.iter().find(|a| a.name == agent.name) {
            let reason = format!(
                "an agent named {} is already defined in {}; this file is ignored",
                agent.name, first.source
            );
            return self.problem(agent.source, reason);
        }
        self.agents.push(agent);
    }
}

/// Parses an agent file; on failure every problem found.
fn parse_file(bytes: &[u8], source: &str) -> Result<AgentDef, Vec<String>> {
    if bytes.len() as u64 > MAX_AGENT_FILE_BYTES {
        return Err(vec![format!(
            "the file is more than {MAX_AGENT_FILE_BYTES} bytes, the limit for an agent file \
             (its body is sent with every request the agent makes)"
        )]);
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        vec![format!(
            "the file is not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        )]
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (yaml, body) = frontmatter::split(text).map_err(|e| {
        vec![match e {
            SplitError::NoOpeningLine => "an agent file must begin with YAML frontmatter: a \
                first line `---`, the keys (`name`, `description`, `toolsets`, …), then a line \
                `---`, then the system prompt"
                .to_string(),
            SplitError::NoClosingLine => e.to_string(),
        }]
    })?;
    if yaml.len() > MAX_FRONTMATTER_BYTES {
        return Err(vec![format!(
            "the frontmatter is {} bytes, more than the {MAX_FRONTMATTER_BYTES}-byte limit",
            yaml.len()
        )]);
    }
    if yaml.trim().is_empty() {
        return Err(vec![
            "the frontmatter is empty: `name`, `description` and `toolsets` are required"
                .to_string(),
        ]);
    }
    let raw = frontmatter::deserialize_map(yaml, FrontmatterVisitor, "").map_err(|e| vec![e])?;
    check(raw, body, source)
}

/// The frontmatter keys as read, before the rules are checked.
#[derive(Default)]
struct RawAgent {
    name: Option<String>,
    description: Option<String>,
    toolsets: Option<Vec<String>>,
    model: Option<String>,
    max_steps: Option<i128>,
    vocabulary: Option<String>,
    unknown: OtherKeys,
}

struct FrontmatterVisitor;

impl<'de> Visitor<'de> for FrontmatterVisitor {
    type Value = RawAgent;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML mapping of keys such as `name:` and `description:`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawAgent, A::Error> {
        let mut raw = RawAgent::default();
        while let Some(key) = map.next_key::<ScalarText>()? {
            let key = key.0;
            // yaml_serde's errors already name the key (`toolsets: invalid type …`).
            match key.as_str() {
                "name" | "description" | "model" | "vocabulary" => {
                    let value = map.next_value::<ScalarText>()?.0;
                    let slot = match key.as_str() {
                        "name" => &mut raw.name,
                        "description" => &mut raw.description,
                        "vocabulary" => &mut raw.vocabulary,
                        _ => &mut raw.model,
                    };
                    set_once(slot, value, &key)?;
                }
                "toolsets" => {
                    set_once(&mut raw.toolsets, map.next_value::<ToolsetList>()?.0, &key)?
                }
                "max_steps" => {
                    set_once(&mut raw.max_steps, map.next_value::<WholeNumber>()?.0, &key)?
                }
                _ => raw.unknown.skip(&mut map, key, MAX_UNKNOWN_KEYS_LISTED)?,
            }
        }
        Ok(raw)
    }
}

/// `toolsets`: a list of names, capped as it is read.
struct ToolsetList(Vec<String>);

impl<'de> de::Deserialize<'de> for ToolsetList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolsetList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of toolset names such as [files, web] ([] for no tools)")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolsetList, A::Error> {
                let mut sets = Vec::new();
                while let Some(ScalarText(set)) = seq.next_element::<ScalarText>()? {
                    if sets.len() == MAX_TOOLSETS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_TOOLSETS} toolsets"
                        )));
                    }
                    sets.push(set);
                }
                Ok(ToolsetList(sets))
            }
        }
        d.deserialize_any(V)
    }
}

/// `max_steps`: a whole number, range-checked later so the message can name the range.
struct WholeNumber(i128);

impl<'de> de::Deserialize<'de> for WholeNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = WholeNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a whole number from 1 to {MAX_STEPS_LIMIT}")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v.into()))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<WholeNumber, E> {
                Ok(WholeNumber(v))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<WholeNumber, E> {
                Ok(WholeNumber(i128::try_from(v).unwrap_or(i128::MAX)))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether `s` can name a toolset, provider or tool: 1-64 of `A-Z a-z 0-9 _ -`.
fn is_toolset_name(s: &str) -> bool {
    (1..=MAX_TOOLSET_CHARS).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The rules on what was read; every broken rule is reported.
fn check(raw: RawAgent, body: &str, source: &str) -> Result<AgentDef, Vec<String>> {
    let mut problems = Vec::new();
    let name = match raw.name.as_deref().map(str::trim) {
        None => {
            problems.push("`name` is missing (it is required)".to_string());
            None
        }
        Some(given) => match AgentName::parse(given) {
            Ok(name) => Some(name),
            Err(e) => {
                problems.push(format!("`name`: {e}"));
                None
            }
        },
    };
    let description = match raw.description.as_deref().map(str::trim) {
        None => {
            problems.push("`description` is missing (it is required)".to_string());
            None
        }
        Some("") => {
            problems.push("`description` is empty (1-1024 characters are required)".to_string());
            None
        }
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => {
            problems.push(format!(
                "`description` is {} characters, more than {MAX_DESCRIPTION_CHARS}",
                d.chars().count()
            ));
            None
        }
        Some(d) => Some(d.to_string()),
    };
    let toolsets = match raw.toolsets {
        None => {
            problems.push(
                "`toolsets` is missing: list what the agent may use, e.g. `toolsets: [files, \
                 web]`, or `toolsets: []` for no tools"
                    .to_string(),
            );
            None
        }
        Some(given) => {
            let mut sets: Vec<String> = Vec::with_capacity(given.len());
            for set in given {
                let set = set.trim();
                if !is_toolset_name(set) {
                    problems.push(format!(
                        "`toolsets` has {}, which is not a toolset name (1-64 letters, digits, \
                         _ and -)",
                        shorten_quoted(set)
                    ));
                } else if !sets.iter().any(|s| s == set) {
                    sets.push(set.to_string());
                }
            }
            Some(sets)
        }
    };
    let model = match raw.model.as_deref().map(str::trim) {
        None => None,
        Some("") => {
            problems.push(
                "`model` is empty (leave it out to use the runtime's default model)".to_string(),
            );
            None
        }
        Some(m) if m.chars().count() > MAX_MODEL_CHARS || m.chars().any(char::is_control) => {
            problems.push(format!(
                "`model` must be one line of at most {MAX_MODEL_CHARS} characters"
            ));
            None
        }
        Some(m) => Some(m.to_string()),
    };
    let max_steps = match raw.max_steps {
        None => None,
        Some(n) => match u32::try_from(n) {
            Ok(n) if (1..=MAX_STEPS_LIMIT).contains(&n) => Some(n),
            _ => {
                problems.push(format!(
                    "`max_steps` must be between 1 and {MAX_STEPS_LIMIT}, got {n}"
                ));
                None
            }
        },
    };
    let vocabulary = match raw.vocabulary.as_deref().map(str::trim) {
        None => None,
        Some(v) => match v.parse::<crate::Vocabulary>() {
            Ok(v) => Some(v),
            Err(e) => {
                problems.push(format!("`vocabulary`: {e}"));
                None
            }
        },
    };
    if raw.unknown.count() > 0 {
        let listed = raw.unknown.named(|k| format!("`{}`", shorten(k)));
        problems.push(format!(
            "unknown key{} {} (an agent file has only {KNOWN_KEYS})",
            if raw.unknown.count() == 1 { "" } else { "s" },
            listed.join(", ")
        ));
    }
    let prompt = body.trim();
    if prompt.is_empty() {
        problems.push(
            "the body is empty: the Markdown after the frontmatter is the agent's system prompt"
                .to_string(),
        );
    }
    match (name, description, toolsets) {
        (Some(name), Some(description), Some(toolsets)) if problems.is_empty() => Ok(AgentDef {
            name,
            description,
            toolsets: Some(toolsets),
            model,
            max_steps,
            vocabulary,
            prompt: prompt.to_string(),
            source: source.to_string(),
        }),
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests;
