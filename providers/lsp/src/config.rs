//! `[lsp]`: which language servers run, and the bounds on them.
//!
//! ```toml
//! [lsp]
//! idle_shutdown_s = 600        # a server unused this long is stopped
//! init_timeout_s = 30          # bound on `initialize`
//! request_timeout_s = 30       # bound on every other request
//! index_wait_s = 10            # bound on waiting for `$/progress` indexing to end
//! diagnostics_wait_ms = 3000   # bound on waiting for diagnostics to settle
//! diagnostics_after_edit = false
//! builtin_servers = true       # use the built-in defaults found on PATH
//! disabled = ["clangd"]        # servers not to use (the only change a workspace may make)
//! allow_network = false
//! sandbox = true               # false: run servers without the filesystem sandbox
//! rust_analyzer_build_scripts = false
//!
//! [lsp.servers.pylsp]
//! command = ["pylsp"]
//! extensions = ["py", "pyi"]
//! language_id = "python"      # optional; from the extension otherwise
//! initialization_options = {}  # optional
//! settings = {}                # optional, answered to workspace/configuration
//! read_paths = ["~/.pyenv"]    # optional, more folders the server may read
//! ```
//!
//! A server runs in toolbox's sandbox (`toolbox_host::sandbox`): it reads the workspace, the
//! system's folders, its own installation (found from its program) and `read_paths`; it
//! writes only a private folder of its own, which is its `$HOME` and `$TMPDIR`.
//!
//! Starting a program is code execution, so `servers`, `builtin_servers`, `allow_network`
//! and `rust_analyzer_build_scripts` are the operator's alone: a workspace's `toolbox.toml`
//! may only add names to `disabled`, shorten the bounds, or turn `diagnostics_after_edit` off.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::trust::Tighten;
use toolbox_core::{Key, Table};

const DEFAULT_IDLE_S: u64 = 600;
const DEFAULT_INIT_S: u64 = 30;
const DEFAULT_REQUEST_S: u64 = 30;
const DEFAULT_INDEX_S: u64 = 10;
const DEFAULT_DIAG_MS: u64 = 3000;

// The keys of [lsp], each with what an untrusted workspace may do with it: add to
// `disabled`, shorten a bound, turn `diagnostics_after_edit` off or the sandbox on. The rest
// (starting programs, the network) are the operator's alone.
const IDLE_SHUTDOWN: Key =
    Key::integer("idle_shutdown_s", 1, 86_400).workspace(Tighten::AtMost(DEFAULT_IDLE_S));
const INIT_TIMEOUT: Key =
    Key::integer("init_timeout_s", 1, 600).workspace(Tighten::AtMost(DEFAULT_INIT_S));
const REQUEST_TIMEOUT: Key =
    Key::integer("request_timeout_s", 1, 600).workspace(Tighten::AtMost(DEFAULT_REQUEST_S));
const INDEX_WAIT: Key =
    Key::integer("index_wait_s", 0, 600).workspace(Tighten::AtMost(DEFAULT_INDEX_S));
const DIAGNOSTICS_WAIT: Key =
    Key::integer("diagnostics_wait_ms", 0, 600_000).workspace(Tighten::AtMost(DEFAULT_DIAG_MS));
const DIAGNOSTICS_AFTER_EDIT: Key =
    Key::boolean("diagnostics_after_edit").workspace(Tighten::Ranked {
        order: &["true", "false"],
        default: "false",
    });
const BUILTIN_SERVERS: Key = Key::boolean("builtin_servers");
const DISABLED: Key = Key::strings("disabled").workspace(Tighten::AddToList(&[]));
const ALLOW_NETWORK: Key = Key::boolean("allow_network");
const SANDBOX: Key = Key::boolean("sandbox").workspace(Tighten::Ranked {
    order: &["false", "true"],
    default: "true",
});
const RUST_ANALYZER_BUILD_SCRIPTS: Key = Key::boolean("rust_analyzer_build_scripts");
/// `[lsp.servers.<name>]` tables, parsed by [`parse_server`].
const SERVERS: Key = Key::other("servers");

/// The `[lsp]` table.
const TABLE: Table = Table::new(
    "lsp",
    &[
        IDLE_SHUTDOWN,
        INIT_TIMEOUT,
        REQUEST_TIMEOUT,
        INDEX_WAIT,
        DIAGNOSTICS_WAIT,
        DIAGNOSTICS_AFTER_EDIT,
        BUILTIN_SERVERS,
        DISABLED,
        ALLOW_NETWORK,
        SANDBOX,
        RUST_ANALYZER_BUILD_SCRIPTS,
        SERVERS,
    ],
);
toolbox_core::register_table!(TABLE);

// The keys of one `[lsp.servers.<name>]` table. Its name varies with the server's, so it is
// read with `Table::read_as`; a workspace may set none of it (it is not registered: the
// whole `servers` key of `[lsp]` is the operator's).
const COMMAND: Key = Key::strings("command");
const EXTENSIONS: Key = Key::strings("extensions");
const LANGUAGE_ID: Key = Key::string("language_id");
const INITIALIZATION_OPTIONS: Key = Key::other("initialization_options");
const SETTINGS: Key = Key::other("settings");
const READ_PATHS: Key = Key::strings("read_paths");
const SERVER: Table = Table::new(
    "lsp.servers.<name>",
    &[
        COMMAND,
        EXTENSIONS,
        LANGUAGE_ID,
        INITIALIZATION_OPTIONS,
        SETTINGS,
        READ_PATHS,
    ],
);

/// One language server: how to start it and what it serves.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Its name, as in `[lsp.servers.<name>]`.
    pub name: String,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// File extensions it serves, without the dot, lower case.
    pub extensions: Vec<String>,
    /// The language id for `didOpen`, if fixed; else from the extension.
    pub language_id: Option<String>,
    /// `initializationOptions` of `initialize`.
    pub initialization_options: Option<Value>,
    /// What `workspace/configuration` and `didChangeConfiguration` answer.
    pub settings: Option<Value>,
    /// Whether the operator configured it (else a built-in default).
    pub configured: bool,
    /// More folders it may read, beyond the workspace, the system's and its installation.
    pub read_paths: Vec<std::path::PathBuf>,
}

/// The parsed `[lsp]` table.
#[derive(Debug, Clone)]
pub struct LspConfig {
    /// Seconds of idleness before a server is stopped.
    pub idle_shutdown_s: u64,
    /// Bound on `initialize`.
    pub init_timeout_s: u64,
    /// Bound on every other request.
    pub request_timeout_s: u64,
    /// Bound on waiting for indexing.
    pub index_wait_s: u64,
    /// Bound on waiting for diagnostics.
    pub diagnostics_wait_ms: u64,
    /// Whether edits by other tools report new diagnostics.
    pub diagnostics_after_edit: bool,
    /// Whether the built-in defaults are used.
    pub builtin_servers: bool,
    /// Server names not to use.
    pub disabled: Vec<String>,
    /// Whether servers may use the network.
    pub allow_network: bool,
    /// Whether servers run in the filesystem sandbox (the default; `false` only where the
    /// kernel cannot enforce it and the operator accepts that).
    pub sandbox: bool,
    /// Whether rust-analyzer may run build scripts and proc macros.
    pub rust_analyzer_build_scripts: bool,
    /// The operator's servers, by name.
    pub servers: BTreeMap<String, ServerSpec>,
}

impl LspConfig {
    /// Reads `[lsp]` from the whole configuration.
    pub fn from_config(config: &Value) -> Result<Self> {
        let t = TABLE.read(config)?;
        let mut servers = BTreeMap::new();
        if let Some(v) = SERVERS.value(&t) {
            let Some(map) = v.as_object() else {
                return Err(t.invalid(SERVERS.name, "a table of [lsp.servers.<name>] tables"));
            };
            for (name, table) in map {
                servers.insert(name.clone(), parse_server(name, table)?);
            }
        }
        Ok(LspConfig {
            idle_shutdown_s: IDLE_SHUTDOWN.u64(&t)?.unwrap_or(DEFAULT_IDLE_S),
            init_timeout_s: INIT_TIMEOUT.u64(&t)?.unwrap_or(DEFAULT_INIT_S),
            request_timeout_s: REQUEST_TIMEOUT.u64(&t)?.unwrap_or(DEFAULT_REQUEST_S),
            index_wait_s: INDEX_WAIT.u64(&t)?.unwrap_or(DEFAULT_INDEX_S),
            diagnostics_wait_ms: DIAGNOSTICS_WAIT.u64(&t)?.unwrap_or(DEFAULT_DIAG_MS),
            diagnostics_after_edit: DIAGNOSTICS_AFTER_EDIT.bool(&t)?.unwrap_or(false),
            builtin_servers: BUILTIN_SERVERS.bool(&t)?.unwrap_or(true),
            disabled: DISABLED.string_list(&t)?.unwrap_or_default(),
            allow_network: ALLOW_NETWORK.bool(&t)?.unwrap_or(false),
            sandbox: SANDBOX.bool(&t)?.unwrap_or(true),
            rust_analyzer_build_scripts: RUST_ANALYZER_BUILD_SCRIPTS.bool(&t)?.unwrap_or(false),
            servers,
        })
    }

    /// The server for a file with extension `ext` (lower case, no dot): the operator's first
    /// (by name) that serves it, else the first built-in whose program is on PATH. An error
    /// names the extension and how to configure a server.
    pub fn server_for(&self, ext: &str, shown: &str) -> Result<ServerSpec> {
        let enabled = |name: &str| !self.disabled.iter().any(|d| d == name);
        for spec in self.servers.values() {
            if spec.extensions.iter().any(|e| e == ext) && enabled(&spec.name) {
                return Ok(spec.clone());
            }
        }
        let mut missing = Vec::new();
        if self.builtin_servers {
            for spec in self.builtins() {
                if !spec.extensions.iter().any(|e| e == ext) || !enabled(&spec.name) {
                    continue;
                }
                if self.servers.contains_key(&spec.name) {
                    continue;
                }
                if on_path(&spec.command[0]) {
                    return Ok(spec);
                }
                missing.push(spec.command[0].clone());
            }
        }
        let ext_shown = if ext.is_empty() {
            "files without an extension".to_string()
        } else {
            format!("`.{ext}` files")
        };
        let mut msg = format!("no language server is configured for {ext_shown} ({shown})");
        if !missing.is_empty() {
            msg.push_str(&format!(
                "; the built-in choices are not installed (none of {} is on PATH)",
                missing.join(", ")
            ));
        }
        msg.push_str(&format!(
            ". The operator can add one in toolbox's configuration: [lsp.servers.NAME] \
             command = [\"program\", \"args\"], extensions = [\"{}\"]",
            if ext.is_empty() { "ext" } else { ext }
        ));
        Err(anyhow!(msg))
    }

    /// The built-in defaults, in order of preference.
    pub fn builtins(&self) -> Vec<ServerSpec> {
        let b = |name: &str, command: &[&str], exts: &[&str], init: Option<Value>| ServerSpec {
            name: name.to_string(),
            command: command.iter().map(|s| s.to_string()).collect(),
            extensions: exts.iter().map(|s| s.to_string()).collect(),
            language_id: None,
            initialization_options: init,
            settings: None,
            configured: false,
            read_paths: builtin_read_paths(name),
        };
        let py = &["py", "pyi"];
        let c = &["c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx"];
        let ts = &["ts", "tsx", "js", "jsx", "mjs", "cjs"];
        let ra = self.rust_analyzer_build_scripts;
        vec![
            b(
                "basedpyright",
                &["basedpyright-langserver", "--stdio"],
                py,
                None,
            ),
            b("pyright", &["pyright-langserver", "--stdio"], py, None),
            b("pylsp", &["pylsp"], py, None),
            b("clangd", &["clangd", "--log=error"], c, None),
            b(
                "typescript-language-server",
                &["typescript-language-server", "--stdio"],
                ts,
                None,
            ),
            b("gopls", &["gopls"], &["go"], None),
            b(
                "rust-analyzer",
                &["rust-analyzer"],
                &["rs"],
                Some(json!({
                    "cargo": {"buildScripts": {"enable": ra}},
                    "procMacro": {"enable": ra},
                })),
            ),
        ]
    }
}

/// What a built-in server reads outside its installation: the toolchains and the sources of
/// dependencies it analyses (those of the user, under their home).
fn builtin_read_paths(name: &str) -> Vec<std::path::PathBuf> {
    let under_home: &[&str] = match name {
        "rust-analyzer" => &[
            "~/.rustup",
            "~/.cargo/bin",
            "~/.cargo/registry",
            "~/.cargo/git",
        ],
        "gopls" => &["~/go/pkg/mod", "~/sdk"],
        _ => &[],
    };
    under_home
        .iter()
        .filter_map(|p| toolbox_host::operator_path(p).ok().flatten())
        .collect()
}

fn parse_server(name: &str, table: &Value) -> Result<ServerSpec> {
    let label = format!("lsp.servers.{name}");
    let t = SERVER.read_as(&label, Some(table))?;
    let command = COMMAND
        .string_list(&t)?
        .filter(|c| !c.is_empty() && !c[0].is_empty())
        .ok_or_else(|| anyhow!("[{label}] needs command, the program and its arguments"))?;
    let extensions: Vec<String> = EXTENSIONS
        .string_list(&t)?
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.trim_start_matches('.').to_ascii_lowercase())
        .collect();
    if extensions.is_empty() {
        bail!("[{label}] needs extensions, the file extensions it serves (e.g. [\"py\"])");
    }
    Ok(ServerSpec {
        name: name.to_string(),
        command,
        extensions,
        language_id: LANGUAGE_ID.str(&t)?.map(str::to_string),
        initialization_options: INITIALIZATION_OPTIONS.value(&t).cloned(),
        settings: SETTINGS.value(&t).cloned(),
        configured: true,
        read_paths: READ_PATHS
            .string_list(&t)?
            .unwrap_or_default()
            .iter()
            .map(|p| match toolbox_host::operator_path(p) {
                Ok(Some(path)) => Ok(path),
                Ok(None) => Err(anyhow!(
                    "[{label}] read_paths: {p:?} must be an absolute path or start with ~/"
                )),
                Err(e) => Err(anyhow!("[{label}] read_paths: {p:?}: {e}")),
            })
            .collect::<Result<Vec<_>>>()?,
    })
}

/// Whether `program` names an executable: a path, or a name found on PATH.
pub fn on_path(program: &str) -> bool {
    find_program(program).is_some()
}

/// The executable `program` names: itself when it has a `/`, else the first on PATH.
pub fn find_program(program: &str) -> Option<std::path::PathBuf> {
    toolbox_host::find_program(program)
}

/// The language id LSP uses for a file extension.
pub fn language_id(ext: &str) -> &'static str {
    match ext {
        "py" | "pyi" => "python",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "ts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "go" => "go",
        "rs" => "rust",
        _ => "plaintext",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_servers_come_first_and_disabled_ones_are_skipped() {
        let config = json!({"lsp": {
            "builtin_servers": false,
            "servers": {
                "a": {"command": ["a-ls"], "extensions": [".PY"]},
                "b": {"command": ["b-ls"], "extensions": ["py"], "settings": {"x": 1}},
            },
        }});
        let c = LspConfig::from_config(&config).unwrap();
        assert_eq!(c.server_for("py", "x.py").unwrap().name, "a");
        let mut c2 = c.clone();
        c2.disabled = vec!["a".into()];
        let b = c2.server_for("py", "x.py").unwrap();
        assert_eq!((b.name.as_str(), b.settings), ("b", Some(json!({"x": 1}))));
        let err = c.server_for("zig", "src/x.zig").unwrap_err().to_string();
        assert!(err.contains("`.zig` files (src/x.zig)"), "{err}");
        assert!(err.contains("[lsp.servers.NAME]"), "{err}");
    }

    #[test]
    fn bad_tables_name_the_key() {
        let bad = [
            (
                json!({"lsp": {"servers": {"a": {"extensions": ["py"]}}}}),
                "needs command",
            ),
            (
                json!({"lsp": {"servers": {"a": {"command": ["x"]}}}}),
                "needs extensions",
            ),
            (
                json!({"lsp": {"servers": {"a": {"command": ["x"], "extensions": ["py"], "cmd": 1}}}}),
                "unknown key `cmd`",
            ),
            (json!({"lsp": {"idle_shutdown": 5}}), "unknown key"),
        ];
        for (config, want) in bad {
            let err = LspConfig::from_config(&config).unwrap_err().to_string();
            assert!(err.contains(want), "{config}: {err}");
        }
    }

    #[test]
    fn a_workspace_may_only_tighten() {
        let rules = toolbox_core::trust::table_rules("lsp").expect("[lsp] is registered");
        assert_eq!(rules.rule("disabled"), Some(Tighten::AddToList(&[])));
        assert_eq!(rules.rule("index_wait_s"), Some(Tighten::AtMost(10)));
        assert_eq!(
            rules.rule("sandbox"),
            Some(Tighten::Ranked {
                order: &["false", "true"],
                default: "true"
            })
        );
        for key in [
            "servers",
            "builtin_servers",
            "allow_network",
            "rust_analyzer_build_scripts",
        ] {
            assert_eq!(rules.rule(key), None, "{key}");
        }
        let err = LspConfig::from_config(&json!({"lsp": {"index_wait_s": 601}}))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "[lsp] index_wait_s must be between 0 and 600, got 601");
    }

    #[test]
    fn rust_analyzer_runs_no_workspace_code_by_default() {
        let c = LspConfig::from_config(&Value::Null).unwrap();
        let ra = c
            .builtins()
            .into_iter()
            .find(|s| s.name == "rust-analyzer")
            .unwrap();
        let init = ra.initialization_options.unwrap();
        assert_eq!(init["procMacro"]["enable"], json!(false));
        assert_eq!(init["cargo"]["buildScripts"]["enable"], json!(false));
    }
}
