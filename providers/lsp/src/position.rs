//! Addressing a model can use: `symbol` (a name or a name path such as `Class/method`) with
//! an optional `line` hint, or `line` + `column` (1-based, in characters). Positions sent to
//! servers are in UTF-16 code units, as LSP counts them by default.

use anyhow::{anyhow, bail, Result};
use lsp_types::{DocumentSymbol, DocumentSymbolResponse, Range, SymbolKind};
use serde_json::{json, Value};
use toolbox_core::{Arg, Args, Prop};

use crate::call::{Doc, Env, Fail};
use crate::server::Server;

/// Where a position tool points, as the model said it.
#[derive(Debug, Clone)]
pub struct Target {
    /// A name or name path.
    pub symbol: Option<String>,
    /// 1-based line.
    pub line: Option<u64>,
    /// 1-based column, in characters.
    pub column: Option<u64>,
}

/// A resolved position.
#[derive(Debug, Clone)]
pub struct Pos {
    /// 0-based line.
    pub line: u32,
    /// UTF-16 column.
    pub character: u32,
    /// What it points at, for the result's header: `helper (line 3)`.
    pub label: String,
}

impl Pos {
    /// As LSP's `Position`.
    pub fn json(&self) -> Value {
        json!({"line": self.line, "character": self.character})
    }
}

/// One symbol of a document's outline.
#[derive(Debug, Clone)]
pub struct Sym {
    /// Names from the outermost container to the symbol.
    pub path: Vec<String>,
    /// Its kind.
    pub kind: SymbolKind,
    /// The whole definition.
    pub range: Range,
    /// The name's range.
    pub selection: Range,
    /// Nesting depth (0 at top level).
    pub depth: usize,
}

impl Sym {
    /// `Class/method`.
    pub fn name_path(&self) -> String {
        self.path.join("/")
    }
}

/// `path`, required: the file the position is in.
pub const PATH: Arg = crate::PATH.required();
const SYMBOL: Arg = Arg::string("symbol").aliases(&["name"]);
const LINE: Arg = Arg::integer("line", 1, None);
const COLUMN: Arg = Arg::integer("column", 1, None).aliases(&["col"]);

/// The schema properties of the addressing arguments.
pub fn props() -> Vec<Prop> {
    vec![
        PATH.doc("Source file in the workspace, e.g. \"src/app.py\"."),
        SYMBOL.doc(
            "The symbol: a name (\"helper\") or a name path (\"Parser/parse\"). Resolved \
             through the file's outline, else as the identifier on `line`.",
        ),
        LINE.doc(
            "1-based line: a hint that picks among symbols of the same name, or with `column` \
             an exact position.",
        ),
        COLUMN.doc("1-based column in characters (with `line`)."),
    ]
}

/// Reads the required `path` (an empty one is not given).
pub fn read_path(args: &Args<'_>) -> Result<String> {
    Ok(PATH
        .opt_nonempty_str(args)?
        .ok_or_else(|| args.missing(PATH.name))?
        .to_string())
}

/// Reads the addressing arguments.
pub fn read_target(args: &Args<'_>) -> Result<Target> {
    let symbol = SYMBOL.opt_nonempty_str(args)?.map(str::to_string);
    let line = LINE.opt_u64(args)?;
    let column = COLUMN.opt_u64(args)?;
    if symbol.is_none() && line.is_none() {
        bail!(
            "{} requires symbol (a name such as \"helper\" or \"Class/method\") or line and \
             column",
            args.tool()
        );
    }
    if symbol.is_none() && column.is_none() {
        bail!(
            "{}: line without symbol needs column too (1-based); or give symbol, with line \
             as a hint",
            args.tool()
        );
    }
    if symbol.is_some() && column.is_some() {
        bail!(
            "{}: give symbol (with line as a hint) or line and column, not symbol and column",
            args.tool()
        );
    }
    Ok(Target {
        symbol,
        line,
        column,
    })
}

/// The document's outline, flattened in order with name paths.
pub async fn outline(env: &Env, server: &Server, doc: &Doc) -> std::result::Result<Vec<Sym>, Fail> {
    // The server's answer is kept per document version: asking again for an unchanged file
    // would only cost the server's time.
    let version = server.docs.lock().await.get(&doc.uri).map(|d| d.version);
    let cached = version.and_then(|v| {
        let outlines = server.outlines.lock().unwrap_or_else(|e| e.into_inner());
        outlines
            .get(&doc.uri)
            .filter(|(at, _)| *at == v)
            .map(|(_, value)| value.clone())
    });
    let v = match cached {
        Some(v) => v,
        None => {
            let v = env
                .req(
                    server,
                    "textDocument/documentSymbol",
                    json!({"textDocument": {"uri": doc.uri}}),
                )
                .await?;
            if let Some(version) = version {
                server
                    .outlines
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(doc.uri.clone(), (version, v.clone()));
            }
            v
        }
    };
    Ok(parse_outline(v))
}

/// Flattens a `documentSymbol` answer (hierarchical or flat) into name paths.
pub fn parse_outline(v: Value) -> Vec<Sym> {
    if v.is_null() {
        return Vec::new();
    }
    let Ok(resp) = serde_json::from_value::<DocumentSymbolResponse>(v) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match resp {
        DocumentSymbolResponse::Nested(syms) => {
            fn walk(out: &mut Vec<Sym>, syms: &[DocumentSymbol], parents: &[String]) {
                let mut syms: Vec<&DocumentSymbol> = syms.iter().collect();
                syms.sort_by_key(|s| (s.range.start.line, s.range.start.character));
                for s in syms {
                    let mut path = parents.to_vec();
                    path.push(s.name.clone());
                    out.push(Sym {
                        path: path.clone(),
                        kind: s.kind,
                        range: s.range,
                        selection: s.selection_range,
                        depth: parents.len(),
                    });
                    if let Some(children) = &s.children {
                        walk(out, children, &path);
                    }
                }
            }
            walk(&mut out, &syms, &[]);
        }
        DocumentSymbolResponse::Flat(mut syms) => {
            // Nesting from ranges: a symbol's parent is the nearest earlier one containing it.
            syms.sort_by_key(|s| {
                let r = s.location.range;
                (r.start.line, r.start.character, u32::MAX - r.end.line)
            });
            let mut stack: Vec<Sym> = Vec::new();
            for s in syms {
                let r = s.location.range;
                while stack.last().is_some_and(|p| !contains(&p.range, &r)) {
                    stack.pop();
                }
                let mut path: Vec<String> =
                    stack.last().map(|p| p.path.clone()).unwrap_or_default();
                path.push(s.name.clone());
                let sym = Sym {
                    depth: stack.len(),
                    path,
                    kind: s.kind,
                    range: r,
                    selection: Range::new(r.start, r.start),
                };
                out.push(sym.clone());
                stack.push(sym);
            }
        }
    }
    out
}

fn contains(outer: &Range, inner: &Range) -> bool {
    (outer.start.line, outer.start.character) <= (inner.start.line, inner.start.character)
        && (inner.end.line, inner.end.character) <= (outer.end.line, outer.end.character)
        && outer != inner
}

/// Resolves `target` in `doc` to one position, or an error listing the candidates.
pub async fn resolve(
    env: &Env,
    server: &Server,
    doc: &Doc,
    target: &Target,
) -> std::result::Result<Pos, Fail> {
    let lines: Vec<&str> = doc.text.split('\n').collect();
    let line_count = if doc.text.ends_with('\n') {
        lines.len() - 1
    } else {
        lines.len()
    }
    .max(1);
    if let Some(line) = target.line {
        if line as usize > line_count {
            return Err(Fail::Other(anyhow!(
                "{}: line {line} is past the end of {} ({line_count} lines)",
                env.tool,
                doc.shown
            )));
        }
    }
    let Some(symbol) = &target.symbol else {
        let line = target.line.unwrap_or(1) as usize - 1;
        let text = lines.get(line).copied().unwrap_or("");
        let col = target.column.unwrap_or(1) as usize - 1;
        let chars = text.trim_end_matches('\r').chars().count();
        if col > chars {
            return Err(Fail::Other(anyhow!(
                "{}: column {} is past the end of line {} of {} ({chars} characters)",
                env.tool,
                col + 1,
                line + 1,
                doc.shown
            )));
        }
        let word = word_at(text, col);
        let label = if word.is_empty() {
            format!("{}:{}:{}", doc.shown, line + 1, col + 1)
        } else {
            format!("`{word}` ({}:{}:{})", doc.shown, line + 1, col + 1)
        };
        return Ok(Pos {
            line: line as u32,
            character: to_utf16(text, col),
            label,
        });
    };
    let parts: Vec<String> = split_name_path(symbol);
    let Some(name) = parts.last().cloned() else {
        return Err(Fail::Other(anyhow!("{}: symbol is empty", env.tool)));
    };
    let syms = outline(env, server, doc).await?;
    let mut found: Vec<&Sym> = syms
        .iter()
        .filter(|s| {
            s.path.len() >= parts.len() && s.path[s.path.len() - parts.len()..] == parts[..]
        })
        .collect();
    if let Some(line) = target.line {
        let l = line as u32 - 1;
        let on: Vec<&Sym> = found
            .iter()
            .copied()
            .filter(|s| s.range.start.line <= l && l <= s.range.end.line)
            .collect();
        // The innermost one that contains the line.
        let inner = on
            .iter()
            .copied()
            .min_by_key(|s| s.range.end.line - s.range.start.line);
        found = inner.into_iter().collect();
    }
    match found.len() {
        1 => {
            let s = found[0];
            if let Some((line, col)) = find_word(&lines, &name, s.selection.start, s.range.end.line)
            {
                return Ok(pos(&lines, line, col, &s.name_path(), doc));
            }
            let line = s.selection.start.line as usize;
            let col = from_utf16(
                lines.get(line).copied().unwrap_or(""),
                s.selection.start.character,
            );
            Ok(pos(&lines, line, col, &s.name_path(), doc))
        }
        0 => {
            // The identifier on the hinted line, or the only line that has it.
            let hits: Vec<(usize, usize)> = match target.line {
                Some(line) => {
                    let l = line as usize - 1;
                    word_positions(lines.get(l).copied().unwrap_or(""), &name)
                        .into_iter()
                        .take(1)
                        .map(|c| (l, c))
                        .collect()
                }
                None => lines
                    .iter()
                    .enumerate()
                    .filter_map(|(i, t)| word_positions(t, &name).first().map(|c| (i, *c)))
                    .collect(),
            };
            match hits.len() {
                1 => Ok(pos(&lines, hits[0].0, hits[0].1, &name, doc)),
                0 => {
                    let names: Vec<String> = syms.iter().take(40).map(Sym::name_path).collect();
                    let mut msg = match target.line {
                        Some(l) => format!(
                            "{}: `{symbol}` is neither a symbol of {} containing line {l} nor \
                             an identifier on that line",
                            env.tool, doc.shown
                        ),
                        None => format!(
                            "{}: `{symbol}` is not a symbol of {} and does not occur in it",
                            env.tool, doc.shown
                        ),
                    };
                    if !names.is_empty() {
                        msg.push_str(&format!("; its symbols: {}", names.join(", ")));
                    }
                    Err(Fail::Other(anyhow!(msg)))
                }
                n => {
                    let list: Vec<String> = hits
                        .iter()
                        .take(20)
                        .map(|(l, _)| format!("line {}: {}", l + 1, lines[*l].trim()))
                        .collect();
                    Err(Fail::Other(anyhow!(
                        "{}: `{symbol}` is not defined in {} but occurs on {n} lines; give \
                         line to pick one:\n  {}",
                        env.tool,
                        doc.shown,
                        list.join("\n  ")
                    )))
                }
            }
        }
        n => {
            let list: Vec<String> = found
                .iter()
                .take(20)
                .map(|s| {
                    format!(
                        "{} ({}) lines {}-{}",
                        s.name_path(),
                        kind_name(s.kind),
                        s.range.start.line + 1,
                        s.range.end.line + 1
                    )
                })
                .collect();
            Err(Fail::Other(anyhow!(
                "{}: `{symbol}` is ambiguous in {}: {n} symbols match; give a name path or \
                 line:\n  {}",
                env.tool,
                doc.shown,
                list.join("\n  ")
            )))
        }
    }
}

fn pos(lines: &[&str], line: usize, col: usize, label: &str, doc: &Doc) -> Pos {
    let text = lines.get(line).copied().unwrap_or("");
    Pos {
        line: line as u32,
        character: to_utf16(text, col),
        label: format!("`{label}` ({}:{})", doc.shown, line + 1),
    }
}

/// `Class/method`, `Class.method` and `Class::method` are name paths.
pub fn split_name_path(s: &str) -> Vec<String> {
    let s = s.trim();
    let parts: Vec<&str> = if s.contains('/') {
        s.split('/').collect()
    } else if s.contains("::") {
        s.split("::").collect()
    } else {
        s.split('.').collect()
    };
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// The first whole-word `name` from `start` (UTF-16) on its line, then on the lines after
/// it up to `last`: (line, character column).
fn find_word(
    lines: &[&str],
    name: &str,
    start: lsp_types::Position,
    last: u32,
) -> Option<(usize, usize)> {
    let first = start.line as usize;
    let from = from_utf16(lines.get(first).copied().unwrap_or(""), start.character);
    if let Some(c) = word_positions(lines.get(first)?, name)
        .into_iter()
        .find(|c| *c >= from)
    {
        return Some((first, c));
    }
    (first + 1..=(last as usize).min(lines.len().saturating_sub(1)))
        .find_map(|l| word_positions(lines[l], name).first().map(|c| (l, *c)))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Character columns where `name` occurs as a whole word in `line`.
pub fn word_positions(line: &str, name: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    let want: Vec<char> = name.chars().collect();
    if want.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i + want.len() <= chars.len() {
        if chars[i..i + want.len()] == want[..]
            && (i == 0 || !is_ident(chars[i - 1]))
            && chars.get(i + want.len()).is_none_or(|c| !is_ident(*c))
        {
            out.push(i);
            i += want.len();
        } else {
            i += 1;
        }
    }
    out
}

fn word_at(line: &str, col: usize) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut a = col.min(chars.len());
    let mut b = a;
    while a > 0 && is_ident(chars[a - 1]) {
        a -= 1;
    }
    while b < chars.len() && is_ident(chars[b]) {
        b += 1;
    }
    chars[a..b].iter().collect()
}

/// A character column as UTF-16 code units.
pub fn to_utf16(line: &str, col: usize) -> u32 {
    line.chars().take(col).map(|c| c.len_utf16() as u32).sum()
}

/// UTF-16 code units as a character column.
pub fn from_utf16(line: &str, units: u32) -> usize {
    let mut n = 0u32;
    for (i, c) in line.chars().enumerate() {
        if n >= units {
            return i;
        }
        n += c.len_utf16() as u32;
    }
    line.chars().count()
}

/// A symbol kind as a word.
pub fn kind_name(kind: SymbolKind) -> String {
    let s = format!("{kind:?}");
    // SymbolKind's Debug is `Function`, `Class`, …; unknown values print as numbers.
    s.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_columns_are_one_based() {
        let read = |v: Value| {
            let args = Args::new("lsp__hover", &v).unwrap();
            read_path(&args).and_then(|_| read_target(&args))
        };
        let t = read(json!({"file": "a.py", "line": "3", "col": 2})).unwrap();
        assert_eq!((t.line, t.column), (Some(3), Some(2)));
        for (v, want) in [
            (
                json!({"path": "a.py", "line": 0, "column": 1}),
                "lsp__hover: argument `line` must be at least 1, got 0",
            ),
            (
                json!({"path": "a.py", "line": 1, "column": 0}),
                "lsp__hover: argument `column` must be at least 1, got 0",
            ),
            (
                json!({"path": "", "symbol": "f"}),
                "lsp__hover requires path (also given: symbol)",
            ),
        ] {
            assert_eq!(read(v).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn columns_convert_through_utf16() {
        let line = "a😀b = é";
        assert_eq!(to_utf16(line, 2), 3);
        assert_eq!(from_utf16(line, 3), 2);
        assert_eq!(from_utf16(line, 99), line.chars().count());
    }

    #[test]
    fn words_are_whole_identifiers() {
        assert_eq!(
            word_positions("helper(helpers, _helper, helper)", "helper"),
            vec![0, 25]
        );
        assert_eq!(word_at("x = foo_bar(1)", 6), "foo_bar");
        assert_eq!(split_name_path("A/b"), vec!["A", "b"]);
        assert_eq!(split_name_path("A::b"), vec!["A", "b"]);
        assert_eq!(split_name_path("A.b"), vec!["A", "b"]);
    }

    #[test]
    fn flat_outlines_nest_by_range() {
        let loc = |l0: u32, l1: u32| json!({"uri": "file:///x.py", "range": {"start": {"line": l0, "character": 0}, "end": {"line": l1, "character": 1}}});
        let v = json!([
            {"name": "m", "kind": 6, "location": loc(1, 2)},
            {"name": "C", "kind": 5, "location": loc(0, 5)},
            {"name": "f", "kind": 12, "location": loc(7, 8)},
        ]);
        let syms = parse_outline(v);
        let paths: Vec<String> = syms.iter().map(Sym::name_path).collect();
        assert_eq!(paths, vec!["C", "C/m", "f"]);
        assert_eq!(syms[1].depth, 1);
        assert_eq!(kind_name(syms[0].kind), "class");
    }
}
