//! `lsp__definition`, `lsp__references`, `lsp__hover`: where a symbol is defined, where it
//! is used, what it is. Locations come back grouped by file, workspace-relative, each with
//! its source line, capped with a count of the rest.

use std::collections::BTreeMap;

use anyhow::Result;
use lsp_types::{GotoDefinitionResponse, Hover, HoverContents, Location, MarkedString};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::call::{Env, Fail};
use crate::position::{self, read_target};

/// Tool names.
pub const DEFINITION: &str = "lsp__definition";
/// Tool names.
pub const REFERENCES: &str = "lsp__references";
/// Tool names.
pub const HOVER: &str = "lsp__hover";

const DEFAULT_MAX: u64 = 50;
/// `max_results` of `lsp__definition` and `lsp__references` (`lsp__hover` shows one answer).
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(1000)).default(DEFAULT_MAX);
const MAX_HOVER_CHARS: usize = 4000;

fn schema(with_max: bool) -> Value {
    let mut props = position::props();
    if with_max {
        props.push(MAX_RESULTS.doc(format!(
            "Locations to show (default {DEFAULT_MAX}); the rest are counted."
        )));
    }
    object(&props)
}

/// `lsp__definition`'s description.
pub fn info_definition() -> ToolInfo {
    ToolInfo::new(
        DEFINITION,
        "Where a symbol is defined, from a real language server (follows imports across files; \
         not a text search). Point at it with path + symbol (a name or Class/method, line as a \
         hint), or path + line + column. Returns file:line with the source line.",
        schema(true),
    )
    .toolsets(&[crate::TOOLSET])
}

/// `lsp__references`'s description.
pub fn info_references() -> ToolInfo {
    ToolInfo::new(
        REFERENCES,
        "Every use of a symbol across the workspace, from a real language server (unlike grep, \
         only real references: no same-named strings, comments or other symbols). Point at it \
         with path + symbol (line as a hint), or path + line + column. Results grouped by \
         file with source lines, capped by max_results.",
        schema(true),
    )
    .toolsets(&[crate::TOOLSET])
}

/// `lsp__hover`'s description.
pub fn info_hover() -> ToolInfo {
    ToolInfo::new(
        HOVER,
        "The type, signature and documentation of a symbol, from a real language server. Point \
         at it with path + symbol (line as a hint), or path + line + column.",
        object(&position::props()),
    )
    .toolsets(&[crate::TOOLSET])
}

/// Runs one of the three.
pub async fn run(tool: &'static str, args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(tool, &args)?;
    let path = position::read_path(&args)?;
    let target = read_target(&args)?;
    let max = if tool == HOVER {
        DEFAULT_MAX
    } else {
        MAX_RESULTS.u64(&args)?
    };
    args.finish()?;
    let env = Env::new(tool, ctx)?;
    let doc = env.doc(&path).await?;
    let spec = env.spec_for(&doc)?;
    let text = env
        .with_server(&spec, |server, fresh| {
            let env = env.clone();
            let doc = doc.clone();
            let target = target.clone();
            async move {
                env.prepare(&server, Some(&doc), fresh).await?;
                let pos = position::resolve(&env, &server, &doc, &target).await?;
                let td = json!({"uri": doc.uri});
                match tool {
                    HOVER => {
                        let v = env
                            .req(
                                &server,
                                "textDocument/hover",
                                json!({"textDocument": td, "position": pos.json()}),
                            )
                            .await?;
                        Ok(hover_text(&pos.label, v))
                    }
                    DEFINITION => {
                        let v = env
                            .req(
                                &server,
                                "textDocument/definition",
                                json!({"textDocument": td, "position": pos.json()}),
                            )
                            .await?;
                        let locs = locations(v);
                        let head = format!("definition of {}", pos.label);
                        Ok(render(&env, &head, &locs, max).await)
                    }
                    _ => {
                        let params = json!({"textDocument": td, "position": pos.json(),
                                            "context": {"includeDeclaration": true}});
                        // A young server may still be reading the workspace: its answer
                        // counts once two in a row agree.
                        let (v, settled) = env
                            .settled(&server, || {
                                env.req(&server, "textDocument/references", params.clone())
                            })
                            .await?;
                        if !settled {
                            env.note(unsettled_note(&server.spec.name, env.cfg.index_wait_s));
                        }
                        let locs = locations(v);
                        let head = format!("references to {}", pos.label);
                        Ok::<_, Fail>(render(&env, &head, &locs, max).await)
                    }
                }
            }
        })
        .await?;
    Ok(Value::String(format!("{text}{}", env.notes_text())))
}

/// What a result says when a just-started server's answers were still changing.
pub fn unsettled_note(server: &str, bound_s: u64) -> String {
    format!(
        "note: the language server `{server}` was started moments ago and its answers were \
         still changing after {bound_s} s ([lsp] index_wait_s): it may not have read the whole \
         workspace yet, so this list may be incomplete; ask again in a few seconds"
    )
}

/// Locations from a definition or references answer (`Location`, `Location[]` or
/// `LocationLink[]`), sorted and without duplicates.
pub fn locations(v: Value) -> Vec<Location> {
    if v.is_null() {
        return Vec::new();
    }
    let mut out: Vec<Location> = match serde_json::from_value::<GotoDefinitionResponse>(v) {
        Ok(GotoDefinitionResponse::Scalar(l)) => vec![l],
        Ok(GotoDefinitionResponse::Array(ls)) => ls,
        Ok(GotoDefinitionResponse::Link(links)) => links
            .into_iter()
            .map(|l| Location::new(l.target_uri, l.target_selection_range))
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort_by(|a, b| {
        (a.uri.as_str(), a.range.start.line, a.range.start.character).cmp(&(
            b.uri.as_str(),
            b.range.start.line,
            b.range.start.character,
        ))
    });
    out.dedup_by(|a, b| a.uri == b.uri && a.range.start == b.range.start);
    out
}

/// Locations grouped by file with their source lines, at most `max` shown.
pub async fn render(env: &Env, head: &str, locs: &[Location], max: u64) -> String {
    if locs.is_empty() {
        return format!("{head}: none found");
    }
    let mut by_file: BTreeMap<String, Vec<&Location>> = BTreeMap::new();
    for l in locs {
        by_file
            .entry(l.uri.as_str().to_string())
            .or_default()
            .push(l);
    }
    let mut out = format!(
        "{head}: {} in {} file{}\n",
        locs.len(),
        by_file.len(),
        if by_file.len() == 1 { "" } else { "s" }
    );
    let mut shown = 0u64;
    let mut rest_files = 0;
    let mut rest = 0;
    for (uri, ls) in &by_file {
        if shown >= max {
            rest_files += 1;
            rest += ls.len();
            continue;
        }
        out.push_str(&env.show_uri(uri));
        out.push('\n');
        let text = env.doc_at_uri(uri).await.map(|d| d.text);
        let lines: Vec<&str> = text
            .as_deref()
            .map(|t| t.split('\n').collect())
            .unwrap_or_default();
        for l in ls {
            if shown >= max {
                rest += 1;
                continue;
            }
            shown += 1;
            let n = l.range.start.line as usize;
            let src = lines.get(n).map(|s| s.trim_end()).unwrap_or("");
            let src: String = src.chars().take(200).collect();
            let col = lines
                .get(n)
                .map(|s| position::from_utf16(s, l.range.start.character) + 1)
                .unwrap_or(1);
            out.push_str(&format!("  {}:{}: {}\n", n + 1, col, src.trim_start()));
        }
    }
    if rest > 0 {
        out.push_str(&format!(
            "… {rest} more location{} ({rest_files} more file{} not shown); raise max_results \
             to see them\n",
            if rest == 1 { "" } else { "s" },
            if rest_files == 1 { "" } else { "s" }
        ));
    }
    out.trim_end().to_string()
}

fn hover_text(label: &str, v: Value) -> String {
    let Ok(h) = serde_json::from_value::<Hover>(v) else {
        return format!("hover for {label}: nothing (the server has no information there)");
    };
    let marked = |m: MarkedString| match m {
        MarkedString::String(s) => s,
        MarkedString::LanguageString(ls) => format!("```{}\n{}\n```", ls.language, ls.value),
    };
    let text = match h.contents {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(ms) => ms.into_iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value,
    };
    let text = text.trim();
    if text.is_empty() {
        return format!("hover for {label}: nothing (the server has no information there)");
    }
    let mut body: String = text.chars().take(MAX_HOVER_CHARS).collect();
    if text.chars().count() > MAX_HOVER_CHARS {
        body.push_str("\n… (cut)");
    }
    format!("hover for {label}:\n{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_three_location_shapes_parse() {
        let r = json!({"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 3}});
        let one = json!({"uri": "file:///w/a.py", "range": r});
        assert_eq!(locations(one.clone()).len(), 1);
        assert_eq!(locations(json!([one.clone(), one.clone()])).len(), 1);
        let link =
            json!([{"targetUri": "file:///w/b.py", "targetRange": r, "targetSelectionRange": r}]);
        assert_eq!(locations(link)[0].uri.as_str(), "file:///w/b.py");
        assert!(locations(Value::Null).is_empty());
    }
}
