use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use toolbox_core::ToolRisk;
pub use toolbox_core::{Decision, PermissionMode};

/// The permission mode plus the legacy `allow_shell` / `allow_file_write` switches.
///
/// A legacy switch that is set wins over the mode for its risk class: `allow_shell = false`
/// refuses Shell tools even in `full`, `allow_shell = true` runs them directly even in
/// `read_only`. Python tools follow the mode alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Permissions {
    /// How risky tools are treated, unless a legacy switch below says otherwise.
    pub mode: PermissionMode,
    /// Legacy `allow_shell`: when set, wins over the mode for Shell tools.
    pub allow_shell: Option<bool>,
    /// Legacy `allow_file_write`: when set, wins over the mode for FileWrite tools.
    pub allow_file_write: Option<bool>,
}

impl From<PermissionMode> for Permissions {
    fn from(mode: PermissionMode) -> Self {
        Permissions {
            mode,
            allow_shell: None,
            allow_file_write: None,
        }
    }
}

impl Permissions {
    /// Whether a call of a tool with this risk runs, is refused, or asks first.
    pub fn decide(&self, risk: ToolRisk) -> Decision {
        let legacy = match risk {
            ToolRisk::Read => return Decision::Allow,
            ToolRisk::Command => self.allow_shell,
            ToolRisk::FileWrite => self.allow_file_write,
            ToolRisk::Code => None,
        };
        match (legacy, self.mode) {
            (Some(true), _) => Decision::Allow,
            (Some(false), _) => Decision::Deny,
            (None, PermissionMode::ReadOnly) => Decision::Deny,
            (None, PermissionMode::Auto) => Decision::Ask,
            (None, PermissionMode::Full) => Decision::Allow,
        }
    }

    /// The gate of a call whose turn asked for `request`, under these permissions as the
    /// ceiling: for each risk the stricter decision of the two wins, so a request (a turn's
    /// mode, its legacy flags) can lower what runs but never raise it.
    pub fn narrowed(&self, request: &Permissions) -> CallPermissions {
        CallPermissions {
            ceiling: *self,
            request: Some(*request),
        }
    }

    /// Whether a tool of this risk appears in schemas at all.
    pub fn visible(&self, risk: ToolRisk) -> bool {
        self.decide(risk) != Decision::Deny
    }

    /// Why a call of this risk is refused outright, for the model to read.
    pub(crate) fn denial_reason(&self, tool: &str, risk: ToolRisk) -> String {
        match (risk, self.allow_shell, self.allow_file_write) {
            (ToolRisk::Command, Some(false), _) => format!(
                "tool {tool} is disabled by allow_shell = false; to allow it, remove that \
                 setting (or set allow_shell = true) in the operator's config file or \
                 TOOLBOX_ALLOW_SHELL"
            ),
            (ToolRisk::FileWrite, _, Some(false)) => format!(
                "tool {tool} is disabled by allow_file_write = false; to allow it, remove that \
                 setting (or set allow_file_write = true) in the operator's config file or \
                 TOOLBOX_ALLOW_FILE_WRITE"
            ),
            _ => format!(
                "tool {tool} is not allowed in permission mode {} (risk: {risk}); to allow it, \
                 use mode auto (asks first) or full: --mode auto, TOOLBOX_MODE=auto or \
                 mode = \"auto\" in the operator's config file",
                self.mode
            ),
        }
    }
}

/// The permissions one call is gated by: the process's ceiling, narrowed by its turn's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPermissions {
    ceiling: Permissions,
    request: Option<Permissions>,
}

impl From<Permissions> for CallPermissions {
    fn from(ceiling: Permissions) -> Self {
        CallPermissions {
            ceiling,
            request: None,
        }
    }
}

impl CallPermissions {
    /// The permission mode in force: the turn's, never above the process's.
    pub fn mode(&self) -> PermissionMode {
        match self.request {
            Some(request) => request.mode.at_most(self.ceiling.mode),
            None => self.ceiling.mode,
        }
    }

    /// Whether a call of a tool with this risk runs, is refused, or asks first.
    pub fn decide(&self, risk: ToolRisk) -> Decision {
        let ceiling = self.ceiling.decide(risk);
        let Some(request) = self.request else {
            return ceiling;
        };
        match (ceiling, request.decide(risk)) {
            (Decision::Deny, _) | (_, Decision::Deny) => Decision::Deny,
            (Decision::Ask, _) | (_, Decision::Ask) => Decision::Ask,
            _ => Decision::Allow,
        }
    }

    /// Whether a tool of this risk appears in schemas at all.
    pub fn visible(&self, risk: ToolRisk) -> bool {
        self.decide(risk) != Decision::Deny
    }

    /// Why a call of this risk is refused outright, naming whichever side refused it.
    pub(crate) fn denial_reason(&self, tool: &str, risk: ToolRisk) -> String {
        match self.request {
            Some(request)
                if self.ceiling.decide(risk) != Decision::Deny
                    && (request.allow_shell == Some(false) && risk == ToolRisk::Command
                        || request.allow_file_write == Some(false)
                            && risk == ToolRisk::FileWrite) =>
            {
                format!(
                    "tool {tool} is disabled for this turn by its allow_shell / \
                     allow_file_write = false; start the turn without that setting to allow it"
                )
            }
            Some(request) if self.ceiling.decide(risk) != Decision::Deny => format!(
                "tool {tool} is not allowed in this turn's permission mode {} (risk: {risk}); \
                 to allow it, start the turn with permission_mode auto or full (toolbox chat \
                 --mode, or permission_mode in the turn's request)",
                request.mode
            ),
            _ => self.ceiling.denial_reason(tool, risk),
        }
    }
}

/// Everything the executor is configured with.
///
/// Layers, lowest first: built-in defaults; the operator's files (the user config file, then
/// the file named by `TOOLBOX_CONFIG`); `TOOLBOX_*` environment variables; whatever the
/// caller sets on the struct (the binary's flags); and last the workspace's own
/// `toolbox.toml`, which is untrusted and may only tighten (see
/// [`apply_workspace_restrictions`](Self::apply_workspace_restrictions)). A workspace the
/// operator trusts (`--trust-workspace-config`, or `trusted_workspaces` in an operator file)
/// has its `toolbox.toml` applied as an ordinary layer just above the operator's files.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// The workspace root every path is jailed to.
    pub workspace: PathBuf,
    /// The permission mode and the legacy switches.
    pub permissions: Permissions,
    /// A call still running after this is stopped with status `error`.
    pub call_timeout: Duration,
    /// An approval request unanswered after this is denied.
    pub approval_timeout: Duration,
    /// After a timeout or cancellation, how long a tool may take to stop cleanly and report
    /// what it gathered before it is dropped.
    pub cancel_grace: Duration,
    /// Results of this many bytes or more are spooled to disk.
    pub spool_threshold: usize,
    /// Append every call to `.toolbox/trajectories/<session>/`.
    pub trajectory: bool,
    /// Provider tables (`[shell]`, `[python]`, ...) as JSON, handed to tools as `ToolContext::config`.
    pub providers: Map<String, Value>,
    /// Whether the workspace's own `toolbox.toml` is trusted like an operator file.
    pub workspace_trusted: bool,
    /// Folders whose `toolbox.toml` the operator trusts (`trusted_workspaces`).
    pub trusted_workspaces: Vec<PathBuf>,
    /// Whose tool names this executor's schemas and messages use when a request does not say
    /// ([`ToolRequest::vocabulary`](crate::ToolRequest::vocabulary)): canonical by default.
    /// The `toolbox` binary sets it from `--vocabulary`, else `[runtime] vocabulary`.
    pub vocabulary: toolbox_core::Vocabulary,
}

pub const CONFIG_FILE: &str = "toolbox.toml";
/// Larger config files are refused: a config is a few lines, and a workspace is hostile.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// How [`ExecutorConfig::load_operator`] finds the operator's settings.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Trust the workspace's `toolbox.toml` (the binary's `--trust-workspace-config`).
    pub trust_workspace: bool,
    /// The user config file; `None` means the default place (see [`user_config_path`]).
    pub user_config: Option<PathBuf>,
}

/// The user's config file: `$XDG_CONFIG_HOME/toolbox/config.toml`, else
/// `~/.config/toolbox/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("toolbox").join("config.toml"))
}

/// The table `name` as the operator's files set it: the user config file, then the file
/// `TOOLBOX_CONFIG` names, a key of the later winning. For settings needed before a
/// workspace is known (`[otel]`: the logging set-up comes first); a workspace's own
/// `toolbox.toml` never counts here. A file that cannot be read or parsed is an error.
pub fn operator_table(name: &str) -> Result<Option<toml::Table>> {
    let mut files: Vec<PathBuf> = user_config_path()
        .filter(|p| p.is_file())
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("TOOLBOX_CONFIG") {
        files.push(PathBuf::from(path));
    }
    let mut merged: Option<toml::Table> = None;
    for path in files {
        let shown = path.display().to_string();
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot read config file {shown}"))?;
        let text = read_capped(file, &shown)?;
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow!("config file {shown}: {e}"))?;
        match table.remove(name) {
            Some(toml::Value::Table(t)) => merged.get_or_insert_with(Default::default).extend(t),
            Some(other) => bail!("config file {shown}: {name} must be a table, not {other}"),
            None => {}
        }
    }
    Ok(merged)
}

impl ExecutorConfig {
    /// Built-in defaults for a workspace.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        ExecutorConfig {
            workspace: workspace.into(),
            permissions: Permissions::default(),
            // Above the shell's own cap (600 s) plus its kill grace, so a tool's own timeout
            // (which keeps the output gathered so far) normally fires first.
            call_timeout: Duration::from_secs(900),
            approval_timeout: Duration::from_secs(300),
            cancel_grace: Duration::from_secs(3),
            spool_threshold: crate::spool::SPOOL_THRESHOLD_BYTES,
            trajectory: true,
            providers: Map::new(),
            workspace_trusted: false,
            trusted_workspaces: Vec::new(),
            vocabulary: toolbox_core::Vocabulary::Canonical,
        }
    }

    /// Every layer: [`load_operator`](Self::load_operator), then the workspace's
    /// `toolbox.toml` as restrictions. A program that sets fields of its own (flags) should
    /// call the two steps itself, setting its fields in between.
    pub fn load(workspace: impl Into<PathBuf>) -> Result<Self> {
        let mut config = Self::load_operator(workspace, LoadOptions::default())?;
        config.apply_workspace_restrictions()?;
        Ok(config)
    }

    /// Defaults, the operator's files, a trusted workspace's `toolbox.toml`, then `TOOLBOX_*`
    /// from the process environment. An untrusted workspace's file is not read here.
    pub fn load_operator(workspace: impl Into<PathBuf>, options: LoadOptions) -> Result<Self> {
        let mut config = Self::new(workspace);
        let user = options.user_config.clone().or_else(user_config_path);
        if let Some(file) = user.filter(|p| p.is_file()) {
            config.apply_file(&file)?;
        }
        if let Some(path) = std::env::var_os("TOOLBOX_CONFIG") {
            config.apply_file(Path::new(&path))?;
        }
        config.workspace_trusted = options.trust_workspace || config.workspace_is_listed();
        if config.workspace_trusted {
            if let Some(text) = config.read_workspace_file()? {
                config.apply_toml(&text).with_context(|| {
                    format!("{} (trusted workspace)", config.workspace_file_shown())
                })?;
            }
        }
        config.apply_env(std::env::vars())?;
        Ok(config)
    }

    /// Applies the workspace's `toolbox.toml` (when it is not trusted) as restrictions on
    /// what the layers before allowed: it may lower the mode, shorten timeouts, lower limits,
    /// add to deny lists and pick stricter options. Any key that would widen, or that has no
    /// tightening rule, is refused with an error naming it, and nothing is applied.
    pub fn apply_workspace_restrictions(&mut self) -> Result<()> {
        if self.workspace_trusted {
            return Ok(());
        }
        let Some(text) = self.read_workspace_file()? else {
            return Ok(());
        };
        let shown = self.workspace_file_shown();
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow!("config file {shown}: {e}"))?;
        let mut next = self.clone();
        let mut refused = Vec::new();
        for (key, value) in &table {
            let outcome = match value {
                toml::Value::Table(t) => next.tighten_table(key, t),
                other => next.tighten_scalar(key, other),
            };
            if let Err(e) = outcome {
                refused.push(e.to_string());
            }
        }
        if !refused.is_empty() {
            let hint = match user_config_path() {
                Some(p) => format!("trusted_workspaces in {}", p.display()),
                None => "trusted_workspaces in the user config file".to_string(),
            };
            bail!(
                "config file {shown} comes with the workspace, so it may only tighten the operator's settings:\n  - {}\nRemove those keys, or trust this workspace (--trust-workspace-config, or {hint}).",
                refused.join("\n  - ")
            );
        }
        *self = next;
        Ok(())
    }

    fn workspace_file_shown(&self) -> String {
        self.workspace.join(CONFIG_FILE).display().to_string()
    }

    /// The workspace's `toolbox.toml`, read without following a link and capped in size.
    fn read_workspace_file(&self) -> Result<Option<String>> {
        let shown = self.workspace_file_shown();
        let ws = toolbox_host::Workspace::new(&self.workspace)?;
        let file = match ws.open_root_file(CONFIG_FILE) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => bail!("config file {shown}: {e} (a link is not followed here)"),
        };
        read_capped(file, &shown).map(Some)
    }

    fn workspace_is_listed(&self) -> bool {
        let Ok(ws) = std::fs::canonicalize(&self.workspace) else {
            return false;
        };
        self.trusted_workspaces
            .iter()
            .any(|t| std::fs::canonicalize(t).is_ok_and(|t| t == ws))
    }

    /// One top-level key of an untrusted file.
    fn tighten_scalar(&mut self, key: &str, value: &toml::Value) -> Result<()> {
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| value.to_string());
        let widen = |now: &dyn std::fmt::Display| {
            anyhow!("{key} = {value} would widen what the operator allowed ({now})")
        };
        match key {
            "permission_mode" | "mode" => {
                let mode: PermissionMode = text.parse().with_context(|| key.to_string())?;
                if mode.at_most(self.permissions.mode) != mode {
                    return Err(widen(&self.permissions.mode));
                }
                self.permissions.mode = mode;
            }
            "allow_shell" | "allow_file_write" => {
                let wanted = parse_bool(key, &text)?;
                let slot = if key == "allow_shell" {
                    &mut self.permissions.allow_shell
                } else {
                    &mut self.permissions.allow_file_write
                };
                if wanted && *slot != Some(true) {
                    return Err(widen(&"unset, so the permission mode decides"));
                }
                *slot = Some(wanted);
            }
            "call_timeout_ms" | "approval_timeout_ms" | "cancel_grace_ms" => {
                let slot = match key {
                    "call_timeout_ms" => &mut self.call_timeout,
                    "approval_timeout_ms" => &mut self.approval_timeout,
                    _ => &mut self.cancel_grace,
                };
                let ms = parse_num(key, &text, 0)?;
                if u128::from(ms) > slot.as_millis() {
                    return Err(widen(&format!("{} ms", slot.as_millis())));
                }
                self.set(key, &text)?;
            }
            "spool_threshold_bytes" => {
                let n = parse_num(key, &text, 1)?;
                if n as usize > self.spool_threshold {
                    return Err(widen(&format!("{} bytes", self.spool_threshold)));
                }
                self.spool_threshold = n as usize;
            }
            "trajectory" => {
                if !parse_bool(key, &text)? {
                    return Err(anyhow!(
                        "trajectory = false would switch off the record of calls, which only the operator may do"
                    ));
                }
                self.trajectory = true;
            }
            "trusted_workspaces" => {
                return Err(anyhow!(
                    "trusted_workspaces belongs in an operator's config file"
                ))
            }
            other => {
                // Unknown keys get the usual error naming them.
                self.set(other, &text)?;
            }
        }
        Ok(())
    }

    /// One `[table]` of an untrusted file, key by key, by the rules its provider declared.
    fn tighten_table(&mut self, table: &str, keys: &toml::Table) -> Result<()> {
        use toolbox_core::trust::{table_rules, Tighten};
        let rules = table_rules(table);
        let mut current = match self.providers.get(table) {
            Some(Value::Object(map)) => map.clone(),
            _ => Map::new(),
        };
        let mut refused = Vec::new();
        for (key, value) in keys {
            let value = serde_json::to_value(value)?;
            let shown = format!("[{table}] {key} = {value}");
            let Some(rule) = rules.and_then(|r| r.rule(key)) else {
                refused.push(format!(
                    "{shown}: a workspace may not set this key (only tightening keys are accepted here)"
                ));
                continue;
            };
            let now = current.get(key).cloned();
            let merged = match rule {
                Tighten::AtMost(default) | Tighten::AtLeast(default) => {
                    let Some(n) = value.as_u64() else {
                        refused.push(format!("{shown}: must be a whole number"));
                        continue;
                    };
                    let have = match &now {
                        Some(v) => v.as_u64(),
                        None => Some(default),
                    };
                    let ok = match (rule, have) {
                        (Tighten::AtMost(_), Some(h)) => n <= h,
                        (_, Some(h)) => n >= h,
                        (_, None) => false,
                    };
                    if !ok {
                        refused.push(format!(
                            "{shown} would widen what the operator allowed ({})",
                            have.map(|h| h.to_string())
                                .unwrap_or_else(|| "unknown".into())
                        ));
                        continue;
                    }
                    value
                }
                Tighten::Ranked { order, default } => {
                    let as_text = |v: &Value| match v {
                        Value::String(s) => Some(s.clone()),
                        Value::Bool(b) => Some(b.to_string()),
                        _ => None,
                    };
                    let want = as_text(&value).and_then(|t| order.iter().position(|o| *o == t));
                    let Some(want) = want else {
                        refused.push(format!("{shown}: must be one of {}", order.join(", ")));
                        continue;
                    };
                    let have_text = now
                        .as_ref()
                        .and_then(as_text)
                        .unwrap_or_else(|| default.to_string());
                    match order.iter().position(|o| *o == have_text) {
                        Some(have) if want >= have => value,
                        _ => {
                            refused.push(format!(
                                "{shown} would widen what the operator allowed ({have_text})"
                            ));
                            continue;
                        }
                    }
                }
                Tighten::Limit => {
                    let Some(n) = value.as_u64() else {
                        refused.push(format!("{shown}: must be a whole number"));
                        continue;
                    };
                    // Absent or 0 is no limit at all.
                    let have = now.as_ref().and_then(Value::as_u64).filter(|h| *h > 0);
                    let ok = n > 0 && have.is_none_or(|h| n <= h);
                    if !ok {
                        refused.push(format!(
                            "{shown} would lift or raise a limit the operator set ({})",
                            have.map(|h| h.to_string()).unwrap_or_else(|| "none".into())
                        ));
                        continue;
                    }
                    value
                }
                Tighten::AddToList(default) => {
                    let Some(items) = value.as_array().filter(|a| a.iter().all(Value::is_string))
                    else {
                        refused.push(format!("{shown}: must be a list of strings"));
                        continue;
                    };
                    let mut list: Vec<Value> = match &now {
                        Some(Value::Array(a)) => a.clone(),
                        _ => default
                            .iter()
                            .map(|s| Value::String(s.to_string()))
                            .collect(),
                    };
                    for item in items {
                        if !list.contains(item) {
                            list.push(item.clone());
                        }
                    }
                    Value::Array(list)
                }
            };
            current.insert(key.clone(), merged);
        }
        if !refused.is_empty() {
            bail!("{}", refused.join("\n  - "));
        }
        self.providers
            .insert(table.to_string(), Value::Object(current));
        Ok(())
    }

    /// Applies an operator's config file (trusted).
    pub fn apply_file(&mut self, path: &Path) -> Result<()> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot read config file {shown}"))?;
        let text = read_capped(file, &shown)?;
        self.apply_toml(&text)
            .with_context(|| format!("config file {}", path.display()))
    }

    /// Applies the keys of a `toolbox.toml`. Unknown top-level keys are refused so a typo
    /// does not silently leave a default in place; tables belong to providers.
    pub fn apply_toml(&mut self, text: &str) -> Result<()> {
        let table: toml::Table = toml::from_str(text).map_err(|e| anyhow!("{e}"))?;
        for (key, value) in table {
            if key == "trusted_workspaces" {
                let list = value
                    .as_array()
                    .filter(|a| a.iter().all(|v| v.is_str()))
                    .ok_or_else(|| anyhow!("trusted_workspaces must be a list of folder paths"))?;
                self.trusted_workspaces
                    .extend(list.iter().filter_map(|v| v.as_str()).map(PathBuf::from));
                continue;
            }
            if let toml::Value::Table(_) = value {
                let json = serde_json::to_value(&value)?;
                self.providers.insert(key, json);
                continue;
            }
            let shown = value.to_string();
            let as_str = value.as_str().map(str::to_string).unwrap_or(shown);
            self.set(&key, &as_str)?;
        }
        Ok(())
    }

    /// Applies `TOOLBOX_*` variables; other variables are ignored.
    pub fn apply_env(&mut self, vars: impl IntoIterator<Item = (String, String)>) -> Result<()> {
        for (name, value) in vars {
            let key = match name.strip_prefix("TOOLBOX_") {
                Some(rest) => rest.to_ascii_lowercase(),
                None => continue,
            };
            // Variables the binary reads for itself, not settings.
            if matches!(key.as_str(), "config" | "log") {
                continue;
            }
            let key = if key == "mode" {
                "permission_mode".into()
            } else {
                key
            };
            if !SETTINGS.contains(&key.as_str()) {
                continue;
            }
            self.set(&key, &value)
                .with_context(|| format!("environment variable {name}"))?;
        }
        Ok(())
    }

    /// Sets one key of a provider's table (`[shell] sandbox`, say) as the operator: a program's
    /// flags use this between [`load_operator`](Self::load_operator) and
    /// [`apply_workspace_restrictions`](Self::apply_workspace_restrictions), like any other
    /// field. The table is created when missing; the provider checks the value when a call
    /// reads its table.
    pub fn set_provider_value(
        &mut self,
        table: &str,
        key: &str,
        value: impl Into<Value>,
    ) -> Result<()> {
        if table.is_empty() || key.is_empty() {
            bail!("a provider setting needs a table and a key (got [{table}] {key:?})");
        }
        if SETTINGS.contains(&table) || table == "trusted_workspaces" {
            bail!("{table} is a top-level setting, not a provider table");
        }
        let entry = self
            .providers
            .entry(table.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(entries) = entry else {
            bail!("[{table}] is not a table, so {key} cannot be set in it");
        };
        entries.insert(key.to_string(), value.into());
        Ok(())
    }

    /// Sets one scalar setting from its text form, with an error naming the key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let value = value.trim();
        match key {
            "permission_mode" | "mode" => self.permissions.mode = value.parse()?,
            "allow_shell" => self.permissions.allow_shell = Some(parse_bool(key, value)?),
            "allow_file_write" => self.permissions.allow_file_write = Some(parse_bool(key, value)?),
            "call_timeout_ms" => {
                self.call_timeout = Duration::from_millis(parse_num(key, value, 1)?)
            }
            "approval_timeout_ms" => {
                self.approval_timeout = Duration::from_millis(parse_num(key, value, 0)?)
            }
            "cancel_grace_ms" => {
                self.cancel_grace = Duration::from_millis(parse_num(key, value, 0)?)
            }
            "spool_threshold_bytes" => self.spool_threshold = parse_num(key, value, 1)? as usize,
            "trajectory" => self.trajectory = parse_bool(key, value)?,
            other => bail!("unknown setting {other:?} (known: {})", SETTINGS.join(", ")),
        }
        Ok(())
    }
}

const SETTINGS: &[&str] = &[
    "permission_mode",
    "allow_shell",
    "allow_file_write",
    "call_timeout_ms",
    "approval_timeout_ms",
    "cancel_grace_ms",
    "spool_threshold_bytes",
    "trajectory",
];

/// A config file's text, refusing more than [`MAX_CONFIG_BYTES`].
fn read_capped(file: std::fs::File, shown: &str) -> Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read config file {shown}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        bail!("config file {shown} is larger than {MAX_CONFIG_BYTES} bytes");
    }
    String::from_utf8(bytes).map_err(|_| anyhow!("config file {shown} is not UTF-8"))
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => bail!("{key} must be true or false (got {value:?})"),
    }
}

fn parse_num(key: &str, value: &str, min: u64) -> Result<u64> {
    let n: u64 = value
        .parse()
        .map_err(|_| anyhow!("{key} must be a whole number (got {value:?})"))?;
    if n < min {
        bail!("{key} must be at least {min} (got {n})");
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_flags_win_over_mode() {
        let p = Permissions {
            mode: PermissionMode::Full,
            allow_shell: Some(false),
            allow_file_write: None,
        };
        assert_eq!(p.decide(ToolRisk::Command), Decision::Deny);
        assert_eq!(p.decide(ToolRisk::FileWrite), Decision::Allow);
        let p = Permissions {
            mode: PermissionMode::ReadOnly,
            allow_shell: None,
            allow_file_write: Some(true),
        };
        assert_eq!(p.decide(ToolRisk::FileWrite), Decision::Allow);
        assert_eq!(p.decide(ToolRisk::Code), Decision::Deny);
        assert_eq!(p.decide(ToolRisk::Read), Decision::Allow);
        let auto = Permissions::from(PermissionMode::Auto);
        assert_eq!(auto.decide(ToolRisk::Code), Decision::Ask);
    }

    #[test]
    fn toml_then_env_precedence() {
        let mut c = ExecutorConfig::new("/tmp");
        c.apply_toml(
            "permission_mode = \"full\"\ncall_timeout_ms = 5000\nspool_threshold_bytes = 100\n[shell]\ndeny_env = [\"AWS_SECRET\"]\n",
        )
        .unwrap();
        assert_eq!(c.permissions.mode, PermissionMode::Full);
        assert_eq!(c.call_timeout, Duration::from_millis(5000));
        assert_eq!(c.providers["shell"]["deny_env"][0], "AWS_SECRET");
        c.apply_env([
            ("TOOLBOX_MODE".to_string(), "read_only".to_string()),
            (
                "TOOLBOX_SPOOL_THRESHOLD_BYTES".to_string(),
                "200".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ])
        .unwrap();
        assert_eq!(c.permissions.mode, PermissionMode::ReadOnly);
        assert_eq!(c.spool_threshold, 200);
    }

    /// The workspace file is applied last and may only tighten.
    #[test]
    fn a_workspace_file_only_tightens() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let apply = |operator: &str, workspace: &str| -> Result<ExecutorConfig> {
            let mut c = ExecutorConfig::new(ws);
            c.apply_toml(operator).unwrap();
            std::fs::write(ws.join(CONFIG_FILE), workspace).unwrap();
            c.apply_workspace_restrictions().map(|_| c)
        };
        let c = apply(
            "permission_mode = \"full\"\n[limits]\nmemory_mb = 512\n",
            "permission_mode = \"auto\"\ncall_timeout_ms = 1000\n[limits]\nmemory_mb = 256\ncpu_seconds = 5\n",
        )
        .unwrap();
        assert_eq!(c.permissions.mode, PermissionMode::Auto);
        assert_eq!(c.call_timeout, Duration::from_millis(1000));
        assert_eq!(c.providers["limits"]["memory_mb"], 256);
        assert_eq!(c.providers["limits"]["cpu_seconds"], 5);
        for (operator, workspace, key) in [
            ("", "permission_mode = \"full\"", "permission_mode"),
            ("", "allow_file_write = true", "allow_file_write"),
            ("", "trajectory = false", "trajectory"),
            (
                "",
                "spool_threshold_bytes = 99999999",
                "spool_threshold_bytes",
            ),
            (
                "[limits]\nmemory_mb = 512\n",
                "[limits]\nmemory_mb = 0",
                "memory_mb",
            ),
            (
                "[limits]\nmemory_mb = 512\n",
                "[limits]\nmemory_mb = 1024",
                "memory_mb",
            ),
            ("", "[nosuchtable]\nx = 1", "[nosuchtable] x"),
        ] {
            let e = format!("{:#}", apply(operator, workspace).unwrap_err());
            assert!(
                e.contains(key) && e.contains("only tighten"),
                "{workspace}: {e}"
            );
        }
        // Trusted: the same widening file is accepted.
        std::fs::write(ws.join(CONFIG_FILE), "permission_mode = \"full\"").unwrap();
        let c = ExecutorConfig::load_operator(
            ws,
            LoadOptions {
                trust_workspace: true,
                user_config: Some(ws.join("no-such-user-config.toml")),
            },
        )
        .unwrap();
        assert_eq!(c.permissions.mode, PermissionMode::Full);
    }

    #[test]
    fn provider_values_are_set_in_their_table() {
        let mut c = ExecutorConfig::new("/tmp");
        c.apply_toml("[shell]\ndeny_env = [\"X\"]\n").unwrap();
        c.set_provider_value("shell", "sandbox", "read-only")
            .unwrap();
        c.set_provider_value("python", "backend", "isolated")
            .unwrap();
        assert_eq!(c.providers["shell"]["sandbox"], "read-only");
        assert_eq!(c.providers["shell"]["deny_env"][0], "X", "other keys stay");
        assert_eq!(c.providers["python"]["backend"], "isolated");
        assert!(c.set_provider_value("", "x", 1).is_err());
        assert!(c.set_provider_value("call_timeout_ms", "x", 1).is_err());
        c.providers.insert("odd".into(), Value::from(3));
        let e = c.set_provider_value("odd", "x", 1).unwrap_err().to_string();
        assert!(e.contains("[odd] is not a table"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = ExecutorConfig::new("/tmp");
        let e = format!(
            "{:#}",
            c.apply_toml("permission_mode = \"yolo\"").unwrap_err()
        );
        assert!(e.contains("read_only, auto, full"), "{e}");
        let e = format!(
            "{:#}",
            c.apply_toml("call_timeout_ms = \"soon\"").unwrap_err()
        );
        assert!(e.contains("call_timeout_ms must be a whole number"), "{e}");
        let e = format!(
            "{:#}",
            c.apply_toml("permision_mode = \"full\"").unwrap_err()
        );
        assert!(e.contains("unknown setting \"permision_mode\""), "{e}");
        let e = format!(
            "{:#}",
            c.apply_env([("TOOLBOX_ALLOW_SHELL".into(), "maybe".into())])
                .unwrap_err()
        );
        assert!(
            e.contains("TOOLBOX_ALLOW_SHELL") && e.contains("true or false"),
            "{e}"
        );
    }
}
