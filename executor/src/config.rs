use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};
use toolbox_core::ToolRisk;

/// How risky tools (FileWrite, Python, Shell) are treated. Read tools always run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Risky tools are hidden from every schema and refused when called anyway.
    ReadOnly,
    /// Risky tools ask for approval first; unanswered requests are denied after a timeout.
    #[default]
    Auto,
    /// Everything runs directly.
    Full,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ReadOnly => "read_only",
            PermissionMode::Auto => "auto",
            PermissionMode::Full => "full",
        }
    }
}

impl FromStr for PermissionMode {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "read_only" | "read-only" | "readonly" => Ok(PermissionMode::ReadOnly),
            "auto" => Ok(PermissionMode::Auto),
            "full" => Ok(PermissionMode::Full),
            other => bail!("permission mode must be one of read_only, auto, full (got {other:?})"),
        }
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a permission check concludes for one tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

/// The permission mode plus the legacy `allow_shell` / `allow_file_write` switches.
///
/// A legacy switch that is set wins over the mode for its risk class: `allow_shell = false`
/// refuses Shell tools even in `full`, `allow_shell = true` runs them directly even in
/// `read_only`. Python tools follow the mode alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Permissions {
    pub mode: PermissionMode,
    pub allow_shell: Option<bool>,
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
    pub fn decide(&self, risk: ToolRisk) -> Decision {
        let legacy = match risk {
            ToolRisk::Read => return Decision::Allow,
            ToolRisk::Shell => self.allow_shell,
            ToolRisk::FileWrite => self.allow_file_write,
            ToolRisk::Python => None,
        };
        match (legacy, self.mode) {
            (Some(true), _) => Decision::Allow,
            (Some(false), _) => Decision::Deny,
            (None, PermissionMode::ReadOnly) => Decision::Deny,
            (None, PermissionMode::Auto) => Decision::Ask,
            (None, PermissionMode::Full) => Decision::Allow,
        }
    }

    /// Whether a tool of this risk appears in schemas at all.
    pub fn visible(&self, risk: ToolRisk) -> bool {
        self.decide(risk) != Decision::Deny
    }

    /// Why a call of this risk is refused outright, for the model to read.
    pub(crate) fn denial_reason(&self, tool: &str, risk: ToolRisk) -> String {
        match (risk, self.allow_shell, self.allow_file_write) {
            (ToolRisk::Shell, Some(false), _) => {
                format!("tool {tool} is disabled by allow_shell = false")
            }
            (ToolRisk::FileWrite, _, Some(false)) => {
                format!("tool {tool} is disabled by allow_file_write = false")
            }
            _ => format!(
                "tool {tool} is not allowed in permission mode {} (risk: {risk})",
                self.mode
            ),
        }
    }
}

/// Everything the executor is configured with.
///
/// Precedence, lowest first: built-in defaults, `toolbox.toml` in the workspace (or the file
/// named by `TOOLBOX_CONFIG`), `TOOLBOX_*` environment variables, then whatever the caller
/// sets on the struct (the binary's flags).
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    pub workspace: PathBuf,
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
}

pub const CONFIG_FILE: &str = "toolbox.toml";

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
        }
    }

    /// Defaults, then the config file, then `TOOLBOX_*` from the process environment.
    pub fn load(workspace: impl Into<PathBuf>) -> Result<Self> {
        let mut config = Self::new(workspace);
        let file = match std::env::var_os("TOOLBOX_CONFIG") {
            Some(path) => Some(PathBuf::from(path)),
            None => Some(config.workspace.join(CONFIG_FILE)).filter(|p| p.is_file()),
        };
        if let Some(file) = file {
            config.apply_file(&file)?;
        }
        config.apply_env(std::env::vars())?;
        Ok(config)
    }

    pub fn apply_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        self.apply_toml(&text)
            .with_context(|| format!("config file {}", path.display()))
    }

    /// Applies the keys of a `toolbox.toml`. Unknown top-level keys are refused so a typo
    /// does not silently leave a default in place; tables belong to providers.
    pub fn apply_toml(&mut self, text: &str) -> Result<()> {
        let table: toml::Table = toml::from_str(text).map_err(|e| anyhow!("{e}"))?;
        for (key, value) in table {
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
        assert_eq!(p.decide(ToolRisk::Shell), Decision::Deny);
        assert_eq!(p.decide(ToolRisk::FileWrite), Decision::Allow);
        let p = Permissions {
            mode: PermissionMode::ReadOnly,
            allow_shell: None,
            allow_file_write: Some(true),
        };
        assert_eq!(p.decide(ToolRisk::FileWrite), Decision::Allow);
        assert_eq!(p.decide(ToolRisk::Python), Decision::Deny);
        assert_eq!(p.decide(ToolRisk::Read), Decision::Allow);
        let auto = Permissions::from(PermissionMode::Auto);
        assert_eq!(auto.decide(ToolRisk::Python), Decision::Ask);
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
