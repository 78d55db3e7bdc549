//! `lsp__symbols`: a file's outline, or the workspace's symbols matching a query.

use anyhow::{bail, Result};
use lsp_types::{OneOf, SymbolInformation, WorkspaceSymbol, WorkspaceSymbolResponse};
use serde_json::{json, Value};
use toolbox_core::schema::{integer_in, object_schema, prop};
use toolbox_core::{Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::call::Env;
use crate::position::{kind_name, outline};

/// The tool's name.
pub const NAME: &str = "lsp__symbols";
const DEFAULT_MAX: u64 = 200;

/// Its description.
pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Symbols from a real language server. With path: the file's outline (kind, name, line \
         range, nested under their class). With query (and path to pick the language): the \
         workspace's symbols whose names match.",
        object_schema(
            &[
                ("path", prop("string", "Source file in the workspace.")),
                (
                    "query",
                    prop(
                        "string",
                        "Search the whole workspace for symbols matching this name instead of \
                         listing the file's outline (path still picks the language server).",
                    ),
                ),
                (
                    "max_results",
                    integer_in("Symbols to show (default 200).", 1, Some(5000)),
                ),
            ],
            &["path"],
        ),
    )
    .toolsets(&[crate::TOOLSET])
}

/// Runs it.
pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let path = args
        .opt_nonempty_str("path", &["file"])?
        .map(str::to_string);
    let query = args.opt_nonempty_str("query", &[])?.map(str::to_string);
    let max = args.u64_in("max_results", &[], DEFAULT_MAX, 1, 5000)? as usize;
    args.finish()?;
    let Some(path) = path else {
        bail!("{NAME} requires path (the file to outline, or one in the language to search with query)");
    };
    let env = Env::new(NAME, ctx)?;
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
                    let v = env
                        .req(&server, "workspace/symbol", json!({"query": q}))
                        .await?;
                    return Ok(workspace_symbols(&env, &q, v, max));
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

fn workspace_symbols(env: &Env, query: &str, v: Value, max: usize) -> String {
    let mut rows: Vec<(String, u32, String, String)> = Vec::new();
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
    // Symbols outside the workspace (libraries) last.
    rows.sort_by(|a, b| (a.0.starts_with('/'), &a.0, a.1).cmp(&(b.0.starts_with('/'), &b.0, b.1)));
    if rows.is_empty() {
        return format!("workspace symbols matching `{query}`: none found");
    }
    let mut out = format!("workspace symbols matching `{query}`: {}\n", rows.len());
    for (file, line, kind, name) in rows.iter().take(max) {
        out.push_str(&format!("{file}:{line}: {kind} {name}\n"));
    }
    if rows.len() > max {
        out.push_str(&format!("… {} more; raise max_results\n", rows.len() - max));
    }
    out.trim_end().to_string()
}
