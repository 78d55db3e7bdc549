//! The `[shell]` configuration table: defaults, limits and the sandbox choice.
//!
//! Each key is declared once ([`Key`]), with its bounds and what a workspace may do with it;
//! the table ([`Table`]) refuses unknown keys, so a misspelt limit does not silently leave the
//! default in place.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, ParsedCache, Table};

/// Environment variables removed from every command unless `[shell] deny_env` says otherwise.
///
/// Credentials the agent process holds (LLM API keys, cloud secrets) are the usual target of a
/// prompt-injected `env | curl …`; a model rarely needs them in a shell. `*` matches any run of
/// characters and matching ignores ASCII case. Set `deny_env = []` to pass everything through.
pub const DEFAULT_DENY_ENV: &[&str] = toolbox_host::secrets::SECRET_PATTERNS;

/// Which OS sandbox wraps each command (the one sandbox of toolbox-host).
pub use toolbox_host::sandbox::SandboxMode;

/// The parsed `[shell]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct ShellConfig {
    /// Timeout of a command when the call gives no `timeout_ms`.
    pub default_timeout: Duration,
    /// No call may ask for more than this.
    pub max_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when a command is stopped.
    pub kill_grace: Duration,
    /// Bytes of each stream kept in memory (head and tail); beyond it the full output of both
    /// streams goes to a spool file.
    pub max_capture_bytes: usize,
    /// Patterns of environment variable names removed from the command's environment.
    pub deny_env: Vec<String>,
    /// The longest `sleep` waits; a longer request is capped to it.
    pub max_sleep_seconds: u64,
    /// The OS sandbox each command runs in.
    pub sandbox: SandboxMode,
    /// Allow network access inside the sandbox.
    pub sandbox_network: bool,
    /// Unread bytes kept per stream of a background job; older unread output is dropped.
    pub job_buffer_bytes: usize,
    /// Background jobs that may run at once.
    pub max_jobs: usize,
}

/// `[shell] default_timeout_ms` when not set.
const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// `[shell] max_timeout_ms` when not set: also the `maximum` the `shell` tool's schema states
/// for `timeout_ms` (a larger value is capped to the configured limit, not refused).
pub(crate) const DEFAULT_MAX_TIMEOUT_MS: u64 = 600_000;
const DEFAULT_KILL_GRACE_MS: u64 = 2_000;
const DEFAULT_CAPTURE_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_SLEEP_SECONDS: u64 = 300;
const DEFAULT_JOB_BUFFER_BYTES: u64 = 1024 * 1024;
const DEFAULT_MAX_JOBS: u64 = 16;

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            default_timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            max_timeout: Duration::from_millis(DEFAULT_MAX_TIMEOUT_MS),
            kill_grace: Duration::from_millis(DEFAULT_KILL_GRACE_MS),
            max_capture_bytes: DEFAULT_CAPTURE_BYTES as usize,
            deny_env: DEFAULT_DENY_ENV.iter().map(|s| s.to_string()).collect(),
            max_sleep_seconds: DEFAULT_MAX_SLEEP_SECONDS,
            sandbox: SandboxMode::Off,
            sandbox_network: false,
            job_buffer_bytes: DEFAULT_JOB_BUFFER_BYTES as usize,
            max_jobs: DEFAULT_MAX_JOBS as usize,
        }
    }
}

// Each key of [shell], with what an untrusted workspace's toolbox.toml may do with it: only
// tighten it. The defaults the rules start from are `ShellConfig::default()`'s.
const DEFAULT_TIMEOUT: Key =
    Key::integer("default_timeout_ms", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULT_TIMEOUT_MS));
const MAX_TIMEOUT: Key =
    Key::integer("max_timeout_ms", 1, u64::MAX).workspace(Tighten::AtMost(DEFAULT_MAX_TIMEOUT_MS));
const KILL_GRACE: Key =
    Key::integer("kill_grace_ms", 0, u64::MAX).workspace(Tighten::AtMost(DEFAULT_KILL_GRACE_MS));
const MAX_CAPTURE_BYTES: Key = Key::integer("max_capture_bytes", 1024, usize::MAX as u64)
    .workspace(Tighten::AtMost(DEFAULT_CAPTURE_BYTES));
const DENY_ENV: Key = Key::strings("deny_env").workspace(Tighten::AddToList(DEFAULT_DENY_ENV));
const MAX_SLEEP_SECONDS: Key = Key::integer("max_sleep_seconds", 0, u64::MAX)
    .workspace(Tighten::AtMost(DEFAULT_MAX_SLEEP_SECONDS));
/// A string, not a choice: [`SandboxMode::parse`] also takes other spellings.
const SANDBOX: Key = Key::string("sandbox").workspace(toolbox_host::sandbox::MODE_RULE);
const SANDBOX_NETWORK: Key =
    Key::boolean("sandbox_network").workspace(toolbox_host::sandbox::NETWORK_RULE);
const JOB_BUFFER_BYTES: Key = Key::integer("job_buffer_bytes", 1024, usize::MAX as u64)
    .workspace(Tighten::AtMost(DEFAULT_JOB_BUFFER_BYTES));
const MAX_JOBS: Key =
    Key::integer("max_jobs", 0, usize::MAX as u64).workspace(Tighten::AtMost(DEFAULT_MAX_JOBS));

/// The `[shell]` table.
const TABLE: Table = Table::new(
    "shell",
    &[
        DEFAULT_TIMEOUT,
        MAX_TIMEOUT,
        KILL_GRACE,
        MAX_CAPTURE_BYTES,
        DENY_ENV,
        MAX_SLEEP_SECONDS,
        SANDBOX,
        SANDBOX_NETWORK,
        JOB_BUFFER_BYTES,
        MAX_JOBS,
    ],
);
toolbox_core::register_table!(TABLE);

impl ShellConfig {
    /// Reads the `[shell]` table; `None` (no table) gives the defaults.
    pub fn from_table(table: Option<&Value>) -> Result<Self> {
        let t = TABLE.read_value(table)?;
        let d = ShellConfig::default();
        let ms = |key: Key, default: Duration| -> Result<Duration> {
            Ok(key.u64(&t)?.map(Duration::from_millis).unwrap_or(default))
        };
        let bytes = |key: Key, default: usize| -> Result<usize> {
            Ok(key.u64(&t)?.map_or(default, |n| n as usize))
        };
        let sandbox = match SANDBOX.str(&t)? {
            None => d.sandbox,
            Some(text) => SandboxMode::parse(text)
                .ok_or_else(|| t.invalid(SANDBOX.name, SandboxMode::EXPECTED))?,
        };
        let c = ShellConfig {
            default_timeout: ms(DEFAULT_TIMEOUT, d.default_timeout)?,
            max_timeout: ms(MAX_TIMEOUT, d.max_timeout)?,
            kill_grace: ms(KILL_GRACE, d.kill_grace)?,
            max_capture_bytes: bytes(MAX_CAPTURE_BYTES, d.max_capture_bytes)?,
            deny_env: DENY_ENV.string_list(&t)?.unwrap_or(d.deny_env),
            max_sleep_seconds: MAX_SLEEP_SECONDS.u64(&t)?.unwrap_or(d.max_sleep_seconds),
            sandbox,
            sandbox_network: SANDBOX_NETWORK.bool(&t)?.unwrap_or(d.sandbox_network),
            job_buffer_bytes: bytes(JOB_BUFFER_BYTES, d.job_buffer_bytes)?,
            max_jobs: MAX_JOBS.u64(&t)?.map_or(d.max_jobs, |n| n as usize),
        };
        if c.default_timeout > c.max_timeout {
            bail!(
                "[shell] default_timeout_ms ({}) is larger than max_timeout_ms ({})",
                c.default_timeout.as_millis(),
                c.max_timeout.as_millis()
            );
        }
        Ok(c)
    }

    /// The parent's environment minus the variables `deny_env` matches.
    pub fn command_env(&self) -> Vec<(OsString, OsString)> {
        std::env::vars_os()
            .filter(|(name, _)| {
                // A name that is not UTF-8 cannot match a (UTF-8) pattern; keep it.
                let Some(name) = name.to_str() else {
                    return true;
                };
                !self.deny_env.iter().any(|p| wildcard_match(p, name))
            })
            .collect()
    }
}

/// The `[shell]` table parsed, rebuilt only when the table changes.
pub type ConfigCache = ParsedCache<ShellConfig>;

/// The `[shell]` table of a call's configuration, through the provider's cache.
pub fn cached(cache: &ConfigCache, config: &Value) -> Result<Arc<ShellConfig>> {
    cache.get_or_build(config.get("shell"), ShellConfig::from_table)
}

/// Whether `name` matches a `deny_env` pattern: the one matcher of core's secrets list.
pub use toolbox_host::secrets::name_matches as wildcard_match;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_and_overrides() {
        let c = ShellConfig::from_table(None).unwrap();
        assert_eq!(c, ShellConfig::default());
        assert_eq!(c.default_timeout, Duration::from_secs(120));
        assert_eq!(c.max_capture_bytes, 1 << 20);
        let c = ShellConfig::from_table(Some(&json!({
            "default_timeout_ms": 1000, "max_timeout_ms": "5000", "sandbox": "workspace_write",
            "sandbox_network": true, "deny_env": ["A*"], "kill_grace_ms": 0,
        })))
        .unwrap();
        assert_eq!(c.max_timeout, Duration::from_secs(5));
        assert_eq!(c.sandbox, SandboxMode::WorkspaceWrite);
        assert!(c.sandbox_network);
        assert_eq!(c.deny_env, ["A*"]);
        assert_eq!(c.kill_grace, Duration::ZERO);
    }

    #[test]
    fn bad_tables_are_named() {
        let e = |v: Value| ShellConfig::from_table(Some(&v)).unwrap_err().to_string();
        assert!(e(json!({"defualt_timeout_ms": 1})).contains("unknown key `defualt_timeout_ms`"));
        assert!(e(json!({"sandbox": "strict"})).contains("\"read-only\""));
        assert!(
            e(json!({"max_timeout_ms": "soon"})).contains("max_timeout_ms must be a whole number")
        );
        assert!(e(json!({"default_timeout_ms": 10, "max_timeout_ms": 5})).contains("larger than"));
        assert!(e(json!({"deny_env": "X"}))
            .contains("[shell] deny_env must be a list of strings, got \"X\""));
        assert!(e(json!({"sandbox_network": 1})).contains("true or false"));
    }

    #[test]
    fn a_workspace_may_only_tighten() {
        let rules = toolbox_core::trust::table_rules("shell").expect("[shell] is registered");
        assert_eq!(rules.rule("max_jobs"), Some(Tighten::AtMost(16)));
        assert_eq!(rules.rule("max_timeout_ms"), Some(Tighten::AtMost(600_000)));
        assert_eq!(
            rules.rule("deny_env"),
            Some(Tighten::AddToList(DEFAULT_DENY_ENV))
        );
        assert_eq!(
            rules.rule("sandbox"),
            Some(toolbox_host::sandbox::MODE_RULE)
        );
        let names: Vec<&str> = rules.keys.iter().map(|k| k.name).collect();
        assert_eq!(names.len(), 10);
        assert!(rules.keys.iter().all(|k| k.workspace.is_some()));
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match("*_API_KEY", "OPENAI_API_KEY"));
        assert!(wildcard_match("*_api_key", "OPENAI_API_KEY"));
        assert!(!wildcard_match("*_API_KEY", "OPENAI_API_KEY_ID"));
        assert!(wildcard_match("AWS_*", "AWS_SECRET_ACCESS_KEY"));
        assert!(wildcard_match("HOME", "HOME"));
        assert!(!wildcard_match("HOME", "HOMEDIR"));
        assert!(wildcard_match("*", ""));
        assert!(wildcard_match("A*B*C", "AxxBxxBxxC"));
        assert!(!wildcard_match("A*B*C", "AxxBxx"));
        let c = ShellConfig::default();
        let denied = |name: &str| c.deny_env.iter().any(|p| wildcard_match(p, name));
        for name in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
            // The secrets list covers tokens and the AWS credentials too.
            "AWS_ACCESS_KEY_ID",
            "GITHUB_TOKEN",
        ] {
            assert!(denied(name), "{name}");
        }
        for name in ["PATH", "HOME", "USER", "LANG", "TERM"] {
            assert!(!denied(name), "{name}");
        }
    }

    #[test]
    fn the_cache_reparses_only_for_a_new_configuration() {
        let cache = ConfigCache::default();
        let a = json!({"shell": {"max_jobs": 3}});
        let first = cached(&cache, &a).unwrap();
        assert!(Arc::ptr_eq(&first, &cached(&cache, &a.clone()).unwrap()));
        let b = json!({"shell": {"max_jobs": 4}});
        assert_eq!(cached(&cache, &b).unwrap().max_jobs, 4);
        let bad = json!({"shell": {"nope": 1}});
        assert!(cached(&cache, &bad).is_err());
    }
}
