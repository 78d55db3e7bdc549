//! toolbox-memory is the `memory` provider: notes an agent keeps across sessions, in one
//! SQLite file, with full-text search that works for Chinese as well as English.
//!
//! | tool | risk | what it does |
//! |---|---|---|
//! | `memory__save` | file write | saves a text with an optional title and tags; returns its id |
//! | `memory__search` | read | ranked results (exact phrase first, then bm25) with a highlighted snippet |
//! | `memory__list` | read | newest first, optionally only those with some tags, page by page |
//! | `memory__get` | read | one memory in full, by id |
//! | `memory__delete` | file write | removes one memory, by id |
//!
//! All five are in the `memory` toolset. The store is `.toolbox/memory.sqlite` in the
//! workspace, created and opened without following links ([`store`]); the operator may move
//! it with `[memory] path` (a user-wide file, say), which a workspace's own `toolbox.toml`
//! cannot set. [`text`] is how text is indexed and how a query is turned into FTS5 syntax
//! that user input can never break.
//!
//! One module per tool (`save`, `search`, `list`, `get`, `delete`); the shared argument
//! parsing, configuration and formatting live here.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod delete;
mod get;
mod list;
mod save;
mod search;
pub mod store;
pub mod text;

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use anyhow::{anyhow, bail, Result};
use async_trait::async_trait;
use serde_json::Value;
use toolbox_core::trust::Tighten;
use toolbox_core::{Arg, Args, Key, Table, ToolInfo, ToolOutput};
use toolbox_host::{output, ToolContext, ToolProvider, Tools};

use crate::store::{Location, Memory, Store, Stores};

toolbox_host::register_provider!("memory", || Arc::new(MemoryProvider::default()));
// The store is a SQLite database: a copy of the workspace (session server mode's session
// store) copies it through SQLite's backup API, never as a plain file.
toolbox_host::register_state_file!("memory", ".toolbox/memory.sqlite", SqliteDatabase);

/// The toolset every memory tool belongs to.
const TOOLSET: &str = "memory";
/// A memory's text may be at most this long unless `[memory] max_text_bytes` says otherwise.
pub const DEFAULT_MAX_TEXT_BYTES: u64 = 64 * 1024;
/// The highest `[memory] max_text_bytes` an operator may set.
const MAX_TEXT_BYTES_CEILING: u64 = 64 * 1024 * 1024;
/// Title length limit, in bytes.
const MAX_TITLE_BYTES: usize = 1024;
/// At most this many tags per memory, each at most [`MAX_TAG_CHARS`] characters.
const MAX_TAGS: usize = 16;
const MAX_TAG_CHARS: usize = 64;

/// `[memory] path`: the operator's alone, since a repository must not point an agent's
/// memory at a file of its choosing.
const PATH: Key = Key::string("path");
/// `[memory] max_text_bytes`: an untrusted workspace may only lower it.
const MAX_TEXT_BYTES: Key = Key::integer("max_text_bytes", 1, MAX_TEXT_BYTES_CEILING)
    .workspace(Tighten::AtMost(DEFAULT_MAX_TEXT_BYTES));
/// The `[memory]` table.
const TABLE: Table = Table::new("memory", &[PATH, MAX_TEXT_BYTES]);
toolbox_core::register_table!(TABLE);

/// The `id` argument of `memory__get` and `memory__delete`.
const ID: Arg = Arg::integer("id", 0, None)
    .aliases(&["memory_id"])
    .required();
/// The `tags` argument.
const TAGS: Arg = Arg::strings("tags").aliases(&["tag"]);

/// The `memory` provider: the open stores, shared by every call.
#[derive(Default)]
pub struct MemoryProvider {
    stores: Arc<Stores>,
}

impl std::fmt::Debug for MemoryProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryProvider")
    }
}

#[async_trait]
impl ToolProvider for MemoryProvider {
    fn name(&self) -> &str {
        "memory"
    }

    fn list_tools(&self) -> Vec<ToolInfo> {
        TOOLS.infos()
    }

    async fn call_tool(&self, tool: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutput> {
        TOOLS.call(self, tool, args, ctx).await
    }
}

/// Every memory tool, each listed once.
static TOOLS: LazyLock<Tools<MemoryProvider>> = LazyLock::new(|| {
    Tools::<MemoryProvider>::new("memory")
        .tool(save::info(), |p, _, args, ctx| {
            output(save::run(p, args, ctx))
        })
        .tool(search::info(), |p, _, args, ctx| {
            output(search::run(p, args, ctx))
        })
        .tool(list::info(), |p, _, args, ctx| {
            output(list::run(p, args, ctx))
        })
        .tool(get::info(), |p, _, args, ctx| {
            output(get::run(p, args, ctx))
        })
        .tool(delete::info(), |p, _, args, ctx| {
            output(delete::run(p, args, ctx))
        })
});

/// The `[memory]` table.
#[derive(Debug, Clone)]
struct Settings {
    location: Location,
    max_text_bytes: u64,
}

fn settings(ctx: &ToolContext) -> Result<Settings> {
    let read = || -> Result<Settings> {
        let table = TABLE.read(&ctx.config)?;
        let location = match PATH.str(&table)? {
            None => Location::Workspace(ctx.workspace.clone()),
            Some(p) => Location::Operator(operator_path(p)?),
        };
        let max_text_bytes = MAX_TEXT_BYTES
            .u64(&table)?
            .unwrap_or(DEFAULT_MAX_TEXT_BYTES);
        Ok(Settings {
            location,
            max_text_bytes,
        })
    };
    read().map_err(|e| anyhow!("{}: invalid configuration: {e:#}", ctx.tool))
}

/// `[memory] path`: absolute, or under the home folder with `~/`.
fn operator_path(given: &str) -> Result<PathBuf> {
    if given == "~" {
        bail!("[memory] path must name a file, got {given:?}");
    }
    let path = match toolbox_host::operator_path(given) {
        Ok(Some(path)) => path,
        Ok(None) => {
            bail!("[memory] path must be an absolute path (or start with ~/), got {given:?}")
        }
        Err(_) => bail!("[memory] path {given:?} starts with ~/ but HOME is not set"),
    };
    if path.file_name().is_none() {
        bail!("[memory] path must name a file, got {given:?}");
    }
    Ok(path)
}

impl MemoryProvider {
    /// Runs `f` on the store on the blocking pool. Without a store yet and with `create`
    /// false, `f` gets `None`.
    async fn with_store<T: Send + 'static>(
        &self,
        tool: &'static str,
        ctx: &ToolContext,
        create: bool,
        f: impl FnOnce(Option<&mut Store>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let settings = settings(ctx)?;
        let stores = self.stores.clone();
        toolbox_host::blocking(format!("{tool}: the memory task"), move || {
            let store = stores.get(&settings.location, create)?;
            match store {
                None => f(None),
                Some(store) => {
                    let mut guard = store.lock().unwrap_or_else(|e| e.into_inner());
                    f(Some(&mut guard))
                }
            }
        })
        .await?
        .map_err(|e| anyhow!("{tool}: {e:#}"))
    }
}

impl MemoryProvider {
    /// The shape `memory__get` and `memory__delete` share: the `id` argument parsed, `op`
    /// run on the existing store, and an unknown id (or no store yet) a clear error.
    async fn with_memory(
        &self,
        tool: &'static str,
        args: &Value,
        ctx: &ToolContext,
        op: fn(&mut Store, i64) -> Result<Option<Memory>>,
    ) -> Result<Memory> {
        let args = Args::new(tool, args)?;
        let id = id_arg(&args)?;
        args.finish()?;
        self.with_store(tool, ctx, false, move |store| match store {
            None => Err(unknown_id(id)),
            Some(store) => op(store, id)?.ok_or_else(|| unknown_id(id)),
        })
        .await
    }
}

/// The `id` argument: a whole number, or the `#12` form the tools print.
fn id_arg(args: &Args<'_>) -> Result<i64> {
    let id = match ID.opt_u64(args) {
        Ok(id) => id,
        Err(e) => match ID.opt_value(args) {
            Some(Value::String(s)) => Some(
                s.trim()
                    .trim_start_matches('#')
                    .parse::<u64>()
                    .map_err(|_| e)?,
            ),
            _ => return Err(e),
        },
    };
    let id = id.ok_or_else(|| args.missing("id"))?;
    i64::try_from(id).map_err(|_| anyhow!("{}: no memory with id {id}", args.tool()))
}

/// The `tags` argument: a list, or one string (split at commas). Each is trimmed and must
/// be non-empty; duplicates are dropped. Tags compare exactly (case included).
fn tags_arg(args: &Args<'_>) -> Result<Vec<String>> {
    let tool = args.tool();
    let given = TAGS.opt_str_list(args)?.unwrap_or_default();
    let mut tags: Vec<String> = Vec::new();
    for raw in given {
        for tag in raw.split(',') {
            let tag = text::one_line(tag);
            if tag.is_empty() {
                continue;
            }
            if tag.chars().count() > MAX_TAG_CHARS {
                bail!("{tool}: tag {tag:?} is longer than the {MAX_TAG_CHARS}-character limit");
            }
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
    }
    if tags.len() > MAX_TAGS {
        bail!(
            "{tool}: {} tags given, more than the limit of {MAX_TAGS}",
            tags.len()
        );
    }
    Ok(tags)
}

/// `2025-06-01T10:20:30Z`.
fn date(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `[#12] Title — 2025-06-01T10:20:30Z — tags: a, b`: one line naming a memory.
fn header(m: &Memory) -> String {
    let mut out = format!("[#{}]", m.id);
    if let Some(title) = m.title.as_deref().filter(|t| !t.is_empty()) {
        out.push(' ');
        out.push_str(title);
        out.push_str(" —");
    }
    out.push(' ');
    out.push_str(&date(m.created_ms));
    if !m.tags.is_empty() {
        out.push_str(" — tags: ");
        out.push_str(&m.tags.join(", "));
    }
    out
}

/// `` (tags: a, b)`` for messages about a filter, or nothing.
fn tags_note(tags: &[String]) -> String {
    if tags.is_empty() {
        String::new()
    } else {
        format!(" with tag{} {}", plural(tags.len()), tags.join(", "))
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The error for an id with no memory (the tool's name is added by `with_store`).
fn unknown_id(id: i64) -> anyhow::Error {
    anyhow!("no memory with id {id} (memory__list and memory__search show the ids)")
}

#[cfg(test)]
mod tests;
