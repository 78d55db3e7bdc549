//! [`ConfigTable`]: the one way a provider reads its `[table]` of the configuration.
//!
//! Every table arrives as JSON (the executor converts `toolbox.toml`, see
//! `toolbox_host::ToolContext::config`). Reading it through this type gives
//! every table the same rules and the same words:
//!
//! - no table (or `null`) means every default; anything but a table is an error;
//! - an unknown key is refused, naming the table and the keys it knows, so a misspelt limit
//!   never silently leaves the default in place:
//!   ``[shell] has an unknown key `max_job` (known keys: default_timeout_ms, …)``;
//! - a value of the wrong type or out of range names the table, the key and the value:
//!   `[web] max_redirects must be between 0 and 5, got 9`;
//! - a key set to `null` is a key not set.
//!
//! One caching rule for what is parsed from a table: parse it on every call (a table is a
//! handful of keys), or, when building the result is costly (HTTP clients, say), keep it in a
//! [`ParsedCache`], which rebuilds only when the table's contents change.
//!
//! A provider declares its table once, as a [`Table`] of [`Key`]s: the keys it knows, each
//! one's type and bounds, and what an untrusted workspace may set in it.

use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Result};
use serde_json::{Map, Value};

/// A provider's `[name]` table, checked for unknown keys, with typed getters.
///
/// Every getter returns `Ok(None)` for a key that is absent or `null`, so the caller keeps
/// its default in one place.
///
/// ```
/// use serde_json::json;
/// use toolbox_core::ConfigTable;
///
/// const KEYS: &[&str] = &["max_jobs", "sandbox"];
///
/// let config = json!({"shell": {"max_jobs": 4}});
/// let table = ConfigTable::from_config(&config, "shell", KEYS)?;
/// assert_eq!(table.u64_in("max_jobs", 1, 64)?, Some(4));
/// // Not set: the caller's default applies.
/// assert_eq!(table.one_of("sandbox", &["off", "read-only"])?, None);
///
/// // A misspelt key is refused, with the keys the table knows.
/// let config = json!({"shell": {"max_job": 4}});
/// let err = ConfigTable::from_config(&config, "shell", KEYS).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "[shell] has an unknown key `max_job` (known keys: max_jobs, sandbox)"
/// );
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ConfigTable<'a> {
    name: &'a str,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> ConfigTable<'a> {
    /// The `[name]` table of the whole configuration (`ToolContext::config`), refusing keys
    /// not in `known`.
    pub fn from_config(config: &'a Value, name: &'a str, known: &[&str]) -> Result<Self> {
        Self::new(name, config.get(name), known)
    }

    /// Reads `table` as the `[name]` table, refusing keys not in `known`. `None` and `null`
    /// are an empty table.
    pub fn new(name: &'a str, table: Option<&'a Value>, known: &[&str]) -> Result<Self> {
        Self::checked(name, table, |key| known.contains(&key), || known.join(", "))
    }

    /// Reads `table` as `[name]`, refusing a key `is_known` does not accept; `listed` names
    /// the known keys, for the error only (so a table that is read on every call allocates
    /// nothing unless it is wrong).
    fn checked(
        name: &'a str,
        table: Option<&'a Value>,
        is_known: impl Fn(&str) -> bool,
        listed: impl FnOnce() -> String,
    ) -> Result<Self> {
        let map = match table {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(map),
            Some(other) => bail!("[{name}] must be a table, got {other}"),
        };
        if let Some(key) = map
            .into_iter()
            .flat_map(|m| m.keys())
            .find(|k| !is_known(k))
        {
            bail!(
                "[{name}] has an unknown key `{key}` (known keys: {})",
                listed()
            );
        }
        Ok(ConfigTable { name, map })
    }

    /// The table's name, as in `[name]`.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The raw value of `key`; `None` when absent or `null`.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map?.get(key).filter(|v| !v.is_null())
    }

    /// The error for a value of `key` that is not what it must be:
    /// `[name] key must be {expected}, got {value}`.
    pub fn invalid(&self, key: &str, expected: &str) -> anyhow::Error {
        let got = self
            .get(key)
            .map(Value::to_string)
            .unwrap_or_else(|| "nothing".into());
        anyhow!("[{}] {key} must be {expected}, got {got}", self.name)
    }

    /// A whole number in `min..=max` (a string holding one is accepted too). With
    /// `max == u64::MAX` the error says only "at least `min`".
    pub fn u64_in(&self, key: &str, min: u64, max: u64) -> Result<Option<u64>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let n = match value {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
        .ok_or_else(|| self.invalid(key, "a whole number"))?;
        if n < min || n > max {
            if max == u64::MAX {
                bail!("[{}] {key} must be at least {min}, got {n}", self.name);
            }
            bail!(
                "[{}] {key} must be between {min} and {max}, got {n}",
                self.name
            );
        }
        Ok(Some(n))
    }

    /// `true` or `false` (or the strings `"true"` / `"false"`).
    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s == "true" => Ok(Some(true)),
            Some(Value::String(s)) if s == "false" => Ok(Some(false)),
            Some(_) => Err(self.invalid(key, "true or false")),
        }
    }

    /// A string, as written.
    pub fn string(&self, key: &str) -> Result<Option<&'a str>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.invalid(key, "a string")),
        }
    }

    /// A list of strings.
    pub fn string_list(&self, key: &str) -> Result<Option<Vec<String>>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        value
            .as_array()
            .and_then(|items| {
                items
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            })
            .map(Some)
            .ok_or_else(|| self.invalid(key, "a list of strings"))
    }

    /// One of `choices`, compared exactly; the error lists them.
    pub fn one_of(&self, key: &str, choices: &[&'static str]) -> Result<Option<&'static str>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        value
            .as_str()
            .and_then(|s| choices.iter().copied().find(|c| *c == s))
            .map(Some)
            .ok_or_else(|| self.invalid(key, &quoted_choices(choices)))
    }
}

/// What a config key holds, with its bounds: see [`Key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// A whole number in `min..=max` (no upper bound when `max` is `u64::MAX`).
    Integer {
        /// The least value.
        min: u64,
        /// The greatest value.
        max: u64,
    },
    /// `true` or `false`.
    Boolean,
    /// A string.
    String,
    /// One of these strings, compared exactly.
    Choice(&'static [&'static str]),
    /// A list of strings.
    StringList,
    /// Anything else (a nested table, a value of more than one shape), read with
    /// [`ConfigTable::get`] and parsed by the provider.
    Other,
}

/// One key of a provider's `[table]`, declared once: its name, what it holds, and what an
/// untrusted workspace's `toolbox.toml` may do with it ([`Tighten`](crate::trust::Tighten);
/// `None`: only the operator may set it). A [`Table`] lists its keys; the table's unknown-key
/// check, its trust rules and its typed reads all come from that one list.
///
/// ```
/// use serde_json::json;
/// use toolbox_core::config_table::{Key, Table};
/// use toolbox_core::trust::Tighten;
///
/// const MAX_JOBS: Key = Key::integer("max_jobs", 1, 64).workspace(Tighten::AtMost(8));
/// const SANDBOX: Key = Key::choice("sandbox", &["off", "read-only"]);
/// const SHELL: Table = Table::new("shell", &[MAX_JOBS, SANDBOX]);
///
/// let config = json!({"shell": {"max_jobs": 4}});
/// let table = SHELL.read(&config)?;
/// assert_eq!(MAX_JOBS.u64(&table)?, Some(4));
/// assert_eq!(SANDBOX.one_of(&table)?, None);
/// assert_eq!(SHELL.rule("max_jobs"), Some(Tighten::AtMost(8)));
/// assert_eq!(SHELL.rule("sandbox"), None);
///
/// let config = json!({"shell": {"max_jobs": 99}});
/// assert_eq!(
///     MAX_JOBS.u64(&SHELL.read(&config)?).unwrap_err().to_string(),
///     "[shell] max_jobs must be between 1 and 64, got 99"
/// );
/// # Ok::<(), anyhow::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The key's name.
    pub name: &'static str,
    /// What it holds.
    pub kind: KeyKind,
    /// What a workspace may do with it.
    pub workspace: Option<crate::trust::Tighten>,
}

impl Key {
    const fn of(name: &'static str, kind: KeyKind) -> Key {
        Key {
            name,
            kind,
            workspace: None,
        }
    }

    /// A whole number in `min..=max` (`u64::MAX`: no upper bound).
    pub const fn integer(name: &'static str, min: u64, max: u64) -> Key {
        Key::of(name, KeyKind::Integer { min, max })
    }

    /// `true` or `false`.
    pub const fn boolean(name: &'static str) -> Key {
        Key::of(name, KeyKind::Boolean)
    }

    /// A string.
    pub const fn string(name: &'static str) -> Key {
        Key::of(name, KeyKind::String)
    }

    /// One of `choices`.
    pub const fn choice(name: &'static str, choices: &'static [&'static str]) -> Key {
        Key::of(name, KeyKind::Choice(choices))
    }

    /// A list of strings.
    pub const fn strings(name: &'static str) -> Key {
        Key::of(name, KeyKind::StringList)
    }

    /// A value the provider parses itself.
    pub const fn other(name: &'static str) -> Key {
        Key::of(name, KeyKind::Other)
    }

    /// What an untrusted workspace may do with it.
    pub const fn workspace(mut self, rule: crate::trust::Tighten) -> Key {
        self.workspace = Some(rule);
        self
    }

    /// The whole number, within the declared bounds, if set.
    pub fn u64(&self, table: &ConfigTable<'_>) -> Result<Option<u64>> {
        let KeyKind::Integer { min, max } = self.kind else {
            panic!("[{}] {} is not declared as a number", table.name, self.name)
        };
        table.u64_in(self.name, min, max)
    }

    /// `true` or `false`, if set.
    pub fn bool(&self, table: &ConfigTable<'_>) -> Result<Option<bool>> {
        debug_assert_eq!(self.kind, KeyKind::Boolean, "{}", self.name);
        table.bool(self.name)
    }

    /// The string, if set.
    pub fn str<'a>(&self, table: &ConfigTable<'a>) -> Result<Option<&'a str>> {
        debug_assert_eq!(self.kind, KeyKind::String, "{}", self.name);
        table.string(self.name)
    }

    /// One of the declared choices, if set.
    pub fn one_of(&self, table: &ConfigTable<'_>) -> Result<Option<&'static str>> {
        let KeyKind::Choice(choices) = self.kind else {
            panic!("[{}] {} is not declared as a choice", table.name, self.name)
        };
        table.one_of(self.name, choices)
    }

    /// The list of strings, if set.
    pub fn string_list(&self, table: &ConfigTable<'_>) -> Result<Option<Vec<String>>> {
        debug_assert_eq!(self.kind, KeyKind::StringList, "{}", self.name);
        table.string_list(self.name)
    }

    /// The raw value, if set (not `null`).
    pub fn value<'a>(&self, table: &ConfigTable<'a>) -> Option<&'a Value> {
        table.get(self.name)
    }
}

/// A provider's `[table]`: its name and every key it understands (see [`Key`]). Register it
/// with [`register_table!`](crate::register_table) so the executor knows what a workspace may
/// set in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    /// The table's name, as in `[name]`.
    pub name: &'static str,
    /// Every key it understands.
    pub keys: &'static [Key],
}

impl Table {
    /// The table `[name]` of `keys`.
    pub const fn new(name: &'static str, keys: &'static [Key]) -> Table {
        Table { name, keys }
    }

    /// Reads this table from the whole configuration (`ToolContext::config`), refusing keys
    /// it does not declare.
    pub fn read<'a>(&self, config: &'a Value) -> Result<ConfigTable<'a>> {
        self.read_value(config.get(self.name))
    }

    /// Reads `value` as this table (`None` and `null`: an empty table).
    pub fn read_value<'a>(&self, value: Option<&'a Value>) -> Result<ConfigTable<'a>> {
        self.read_as(self.name, value)
    }

    /// Reads `value` as a table of these keys named `name`, for a nested table whose name is
    /// known only at run time (`[lsp.servers.pylsp]`); errors name it.
    pub fn read_as<'a>(&self, name: &'a str, value: Option<&'a Value>) -> Result<ConfigTable<'a>> {
        let keys = self.keys;
        ConfigTable::checked(
            name,
            value,
            |key| keys.iter().any(|k| k.name == key),
            || keys.iter().map(|k| k.name).collect::<Vec<_>>().join(", "),
        )
    }

    /// What a workspace may do with `key`; `None`: it may not set it.
    pub fn rule(&self, key: &str) -> Option<crate::trust::Tighten> {
        self.keys
            .iter()
            .find(|k| k.name == key)
            .and_then(|k| k.workspace)
    }
}

/// `"a", "b" or "c"`.
pub fn quoted_choices(choices: &[&str]) -> String {
    let quoted: Vec<String> = choices.iter().map(|c| format!("{c:?}")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Keeps what was built from a `[table]` while the table's contents stay the same.
///
/// This is the one caching rule for parsed configuration: the key is the table's JSON value
/// (`null` when there is none), so two executors with the same table share nothing but also
/// never see each other's stale result, and a failed parse is not cached (the next call
/// reports the error again).
pub struct ParsedCache<T> {
    last: Mutex<Option<(Value, Arc<T>)>>,
}

impl<T> Default for ParsedCache<T> {
    fn default() -> Self {
        ParsedCache {
            last: Mutex::new(None),
        }
    }
}

impl<T> std::fmt::Debug for ParsedCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParsedCache")
    }
}

impl<T> ParsedCache<T> {
    /// What `build` made from `table` last time, or a fresh build when `table` changed.
    pub fn get_or_build(
        &self,
        table: Option<&Value>,
        build: impl FnOnce(Option<&Value>) -> Result<T>,
    ) -> Result<Arc<T>> {
        let key = table.cloned().unwrap_or(Value::Null);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, built)) = &*last {
            if *seen == key {
                return Ok(built.clone());
            }
        }
        let built = Arc::new(build(table)?);
        *last = Some((key, built.clone()));
        Ok(built)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEYS: &[&str] = &["n", "flag", "name", "list", "mode"];

    fn table(v: Value) -> Value {
        json!({ "demo": v })
    }

    #[test]
    fn no_table_is_every_default() {
        for config in [json!({}), json!({"demo": null}), Value::Null] {
            let t = ConfigTable::from_config(&config, "demo", KEYS).unwrap();
            assert_eq!(t.u64_in("n", 0, 9).unwrap(), None);
            assert_eq!(t.bool("flag").unwrap(), None);
            assert_eq!(t.string("name").unwrap(), None);
            assert_eq!(t.string_list("list").unwrap(), None);
        }
    }

    #[test]
    fn values_are_read() {
        let config = table(
            json!({"n": "7", "flag": true, "name": "x", "list": ["a", "b"],
                                  "mode": "fast"}),
        );
        let t = ConfigTable::from_config(&config, "demo", KEYS).unwrap();
        assert_eq!(t.u64_in("n", 1, 9).unwrap(), Some(7));
        assert_eq!(t.bool("flag").unwrap(), Some(true));
        assert_eq!(t.string("name").unwrap(), Some("x"));
        assert_eq!(t.string_list("list").unwrap().unwrap(), ["a", "b"]);
        assert_eq!(t.one_of("mode", &["slow", "fast"]).unwrap(), Some("fast"));
    }

    #[test]
    fn one_wording_for_every_mistake() {
        let err = |v: Value, read: &dyn Fn(&ConfigTable) -> Result<()>| {
            let config = table(v);
            match ConfigTable::from_config(&config, "demo", KEYS) {
                Err(e) => e.to_string(),
                Ok(t) => read(&t).unwrap_err().to_string(),
            }
        };
        let none = |_: &ConfigTable| Ok(());
        assert_eq!(
            err(json!({"nn": 1}), &none),
            "[demo] has an unknown key `nn` (known keys: n, flag, name, list, mode)"
        );
        assert_eq!(
            ConfigTable::from_config(&json!({"demo": 3}), "demo", KEYS)
                .unwrap_err()
                .to_string(),
            "[demo] must be a table, got 3"
        );
        let n = |t: &ConfigTable| t.u64_in("n", 1, 9).map(drop);
        assert_eq!(
            err(json!({"n": 10}), &n),
            "[demo] n must be between 1 and 9, got 10"
        );
        assert_eq!(
            err(json!({"n": -1}), &n),
            "[demo] n must be a whole number, got -1"
        );
        assert_eq!(
            err(json!({"n": 0}), &|t| t.u64_in("n", 1, u64::MAX).map(drop)),
            "[demo] n must be at least 1, got 0"
        );
        assert_eq!(
            err(json!({"flag": 1}), &|t| t.bool("flag").map(drop)),
            "[demo] flag must be true or false, got 1"
        );
        assert_eq!(
            err(json!({"name": 1}), &|t| t.string("name").map(drop)),
            "[demo] name must be a string, got 1"
        );
        assert_eq!(
            err(json!({"list": "a"}), &|t| t.string_list("list").map(drop)),
            "[demo] list must be a list of strings, got \"a\""
        );
        assert_eq!(
            err(json!({"mode": "warp"}), &|t| t
                .one_of("mode", &["slow", "fast", "auto"])
                .map(drop)),
            "[demo] mode must be \"slow\", \"fast\" or \"auto\", got \"warp\""
        );
    }

    #[test]
    fn the_cache_rebuilds_only_when_the_table_changes() {
        let cache = ParsedCache::<u64>::default();
        let builds = std::cell::Cell::new(0);
        let build = |t: Option<&Value>| {
            builds.set(builds.get() + 1);
            Ok(t.and_then(|t| t["n"].as_u64()).unwrap_or(0))
        };
        let a = json!({"n": 3});
        let first = cache.get_or_build(Some(&a), build).unwrap();
        let again = cache.get_or_build(Some(&a.clone()), build).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(builds.get(), 1);
        assert_eq!(*cache.get_or_build(None, build).unwrap(), 0);
        assert!(cache
            .get_or_build(Some(&a), |_| Err(anyhow!("bad")))
            .is_err());
        assert_eq!(*cache.get_or_build(Some(&a), build).unwrap(), 3);
        assert_eq!(builds.get(), 3);
    }
}
