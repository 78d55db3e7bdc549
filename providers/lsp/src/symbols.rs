//! `lsp__symbols`: a file's outline, or the workspace's symbols matching a query.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use lsp_types::{OneOf, SymbolInformation, WorkspaceSymbol, WorkspaceSymbolResponse};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::call::{Env, Fail};
use crate::position::{kind_name, outline};
use crate::server::Server;
use crate::PATH;

/// The tool's name.
pub const NAME: &str = "lsp__symbols";
const DEFAULT_MAX: u64 = 200;
const QUERY: Arg = Arg::string("query");
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(5000)).default(DEFAULT_MAX);

/// Its description.
pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Symbols from a real language server. With path: the file's outline (kind, name, line \
         range, nested under their class). With query: the workspace's symbols whose names \
         match, from the server of path's language, or without path from every language the \
         workspace holds.",
        object(&[
            PATH.doc("Source file in the workspace."),
            QUERY.doc(
                "Search the whole workspace for symbols matching this name instead of listing \
                 a file's outline. With path, only path's language is searched; without it, \
                 every language the workspace holds.",
            ),
            MAX_RESULTS.doc(format!("Symbols to show (default {DEFAULT_MAX}).")),
        ]),
    )
    .toolsets(&[crate::TOOLSET])
}

/// Runs it.
pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let path = PATH.opt_nonempty_str(&args)?.map(str::to_string);
    let query = QUERY.opt_nonempty_str(&args)?.map(str::to_string);
    let max = MAX_RESULTS.u64(&args)? as usize;
    args.finish()?;
    let env = Env::new(NAME, ctx)?;
    let Some(path) = path else {
        let Some(query) = query else {
            bail!(
                "{NAME} requires path (the file to outline) or query (the symbol name to search \
                 the workspace for)"
            );
        };
        return search_every_language(&env, &query, max).await;
    };
    let doc = env.doc(&path).await?;
    let spec = env.spec_for(&doc)?;
    let text = env
        .with_server(&spec, |server, fresh| {
            let env = env.clone();
            let doc = doc.clone();
            let query = query.clone();
            async move {
                env.prepare(&server, Some(&doc), fresh).await?;
                if let Some(q) = query {
                    let rows = search(&env, &server, &q).await?;
                    return Ok(show_rows(&q, rows, max, &[]));
                }
                let syms = outline(&env, &server, &doc).await?;
                if syms.is_empty() {
                    return Ok(format!("{}: no symbols", doc.shown));
                }
                let mut out = format!("{}: {} symbols\n", doc.shown, syms.len());
                for s in syms.iter().take(max) {
                    out.push_str(&format!(
                        "{}{} {}  lines {}-{}\n",
                        "  ".repeat(s.depth),
                        kind_name(s.kind),
                        s.path.last().map(String::as_str).unwrap_or(""),
                        s.range.start.line + 1,
                        s.range.end.line + 1
                    ));
                }
                if syms.len() > max {
                    out.push_str(&format!("… {} more; raise max_results\n", syms.len() - max));
                }
                Ok(out.trim_end().to_string())
            }
        })
        .await?;
    Ok(Value::String(format!("{text}{}", env.notes_text())))
}

/// One symbol found: shown file, line, kind, name (with its container).
type Row = (String, u32, String, String);

/// `workspace/symbol` on `server`; a server that does not offer it says so.
async fn search(env: &Env, server: &Server, query: &str) -> Result<Vec<Row>, Fail> {
    let offered = {
        let caps = server
            .capabilities
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match caps.get("workspaceSymbolProvider") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(_) => true,
        }
    };
    if !offered {
        return Err(Fail::Other(anyhow!(
            "{NAME}: the language server `{}` does not search workspace symbols",
            server.spec.name
        )));
    }
    let v = env
        .req(server, "workspace/symbol", json!({"query": query}))
        .await?;
    Ok(workspace_rows(env, v))
}

/// Without path: each language the workspace holds is searched by its server (each server
/// once, with one of its files open so it knows the project), and the symbols are listed
/// together. A server that cannot search is named in a note; only when none could is it an
/// error.
async fn search_every_language(env: &Env, query: &str, max: usize) -> Result<Value> {
    let samples = crate::languages::sample_files(&env.ctx.workspace);
    // server name -> (spec, a file of its language)
    let mut servers: BTreeMap<String, (crate::config::ServerSpec, String)> = BTreeMap::new();
    for (ext, file) in &samples {
        if let Ok(spec) = env.cfg.server_for(ext, file) {
            servers
                .entry(spec.name.clone())
                .or_insert_with(|| (spec, file.clone()));
        }
    }
    if servers.is_empty() {
        bail!(
            "{NAME}: no file in the workspace is in a language a configured language server \
             serves{}, so there is nothing to search; pass path to pick a file's language",
            if samples.is_empty() {
                String::new()
            } else {
                format!(
                    " (looked at .{})",
                    samples
                        .keys()
                        .take(12)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", .")
                )
            }
        );
    }
    let mut rows = Vec::new();
    let mut searched = Vec::new();
    let mut failed = Vec::new();
    for (name, (spec, file)) in servers {
        let doc = match env.doc(&file).await {
            Ok(doc) => doc,
            Err(e) => {
                failed.push(format!("`{name}`: {e}"));
                continue;
            }
        };
        let found = env
            .with_server(&spec, |server, fresh| {
                let env = env.clone();
                let doc = doc.clone();
                let query = query.to_string();
                async move {
                    env.prepare(&server, Some(&doc), fresh).await?;
                    search(&env, &server, &query).await
                }
            })
            .await;
        match found {
            Ok(mut more) => {
                rows.append(&mut more);
                searched.push(name);
            }
            Err(e) => failed.push(e.to_string()),
        }
    }
    if searched.is_empty() {
        bail!(
            "{NAME}: no language server could search the workspace for `{query}`: {}",
            failed.join("; ")
        );
    }
    let mut text = show_rows(query, rows, max, &searched);
    for why in failed {
        text.push_str(&format!("\nnote: {why}"));
    }
    Ok(Value::String(format!("{text}{}", env.notes_text())))
}

fn workspace_rows(env: &Env, v: Value) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let push_info = |rows: &mut Vec<_>, s: SymbolInformation| {
        rows.push((
            env.show_uri(s.location.uri.as_str()),
            s.location.range.start.line + 1,
            kind_name(s.kind),
            match s.container_name {
                Some(c) if !c.is_empty() => format!("{c}/{}", s.name),
                _ => s.name,
            },
        ))
    };
    match serde_json::from_value::<WorkspaceSymbolResponse>(v) {
        Ok(WorkspaceSymbolResponse::Flat(list)) => {
            for s in list {
                push_info(&mut rows, s);
            }
        }
        Ok(WorkspaceSymbolResponse::Nested(list)) => {
            for s in list {
                let WorkspaceSymbol {
                    name,
                    kind,
                    location,
                    container_name,
                    ..
                } = s;
                let (uri, line) = match location {
                    OneOf::Left(l) => (l.uri, l.range.start.line + 1),
                    OneOf::Right(w) => (w.uri, 0),
                };
                rows.push((
                    env.show_uri(uri.as_str()),
                    line,
                    kind_name(kind),
                    match container_name {
                        Some(c) if !c.is_empty() => format!("{c}/{name}"),
                        _ => name,
                    },
                ));
            }
        }
        Err(_) => {}
    }
    rows
}

/// The rows as the model reads them; `searched` names the servers when more than one
/// language may have answered.
fn show_rows(query: &str, mut rows: Vec<Row>, max: usize, searched: &[String]) -> String {
    // Symbols outside the workspace (libraries) last.
    rows.sort_by(|a, b| (a.0.starts_with('/'), &a.0, a.1).cmp(&(b.0.starts_with('/'), &b.0, b.1)));
    rows.dedup();
    let by = if searched.is_empty() {
        String::new()
    } else {
        format!(" (searched with {})", searched.join(", "))
    };
    if rows.is_empty() {
        return format!("workspace symbols matching `{query}`: none found{by}");
    }
    let mut out = format!("workspace symbols matching `{query}`: {}{by}\n", rows.len());
    for (file, line, kind, name) in rows.iter().take(max) {
        out.push_str(&format!("{file}:{line}: {kind} {name}\n"));
    }
    if rows.len() > max {
        out.push_str(&format!("… {} more; raise max_results\n", rows.len() - max));
    }
    out.trim_end().to_string()
}
