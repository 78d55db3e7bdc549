//! `lsp__rename`: the server's WorkspaceEdit for a rename, applied through the workspace.
//! Every file is checked, edited in memory and then written atomically; if any write fails,
//! the files already written get their old content back, so all change or none do. The
//! approval preview shows the diff of every file.

use anyhow::{anyhow, bail, Result};
use lsp_types::{DocumentChangeOperation, DocumentChanges, OneOf, TextEdit, WorkspaceEdit};
use serde_json::{json, Value};
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, Preview, ToolInfo, ToolRisk};
use toolbox_host::{ToolContext, WsPath};

use crate::call::{read_doc, Env, Fail};
use crate::position::{self, from_utf16, read_target, Target};

/// The tool's name.
pub const NAME: &str = "lsp__rename";
const NEW_NAME: Arg = Arg::string("new_name").aliases(&["new"]).required();

/// Its description.
pub fn info() -> ToolInfo {
    let mut props = position::props();
    props.push(NEW_NAME.doc("The new name for the symbol, e.g. \"parse_header\"."));
    ToolInfo::new(
        NAME,
        "Renames a symbol everywhere it is used, through a real language server (scope-aware: \
         not a text replace). Point at it with path + symbol (line as a hint), or path + line \
         + column. Every file changes, or none does; the result lists the files and lines \
         changed.",
        object(&props),
    )
    .risk(ToolRisk::FileWrite)
    .toolsets(&[crate::TOOLSET])
}

/// One file's change.
#[derive(Clone)]
struct Change {
    p: WsPath,
    shown: String,
    uri: String,
    old: String,
    new: String,
    lines: usize,
}

#[derive(Clone)]
struct Plan {
    label: String,
    new_name: String,
    changes: Vec<Change>,
}

struct Request {
    path: String,
    target: Target,
    new_name: String,
}

fn read_args(args: &Value) -> Result<Request> {
    let args = Args::new(NAME, args)?;
    let path = position::read_path(&args)?;
    let target = read_target(&args)?;
    let new_name = NEW_NAME
        .opt_nonempty_str(&args)?
        .ok_or_else(|| args.missing(NEW_NAME.name))?
        .trim()
        .to_string();
    args.finish()?;
    if new_name.is_empty()
        || new_name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        bail!("{NAME}: new_name must be one identifier without spaces, got {new_name:?}");
    }
    Ok(Request {
        path,
        target,
        new_name,
    })
}

async fn plan(env: &Env, req: &Request) -> Result<Plan> {
    let doc = env.doc(&req.path).await?;
    let spec = env.spec_for(&doc)?;
    let (label, edit) = env
        .with_server(&spec, |server, fresh| {
            let env = env.clone();
            let doc = doc.clone();
            let target = req.target.clone();
            let new_name = req.new_name.clone();
            async move {
                env.prepare(&server, Some(&doc), fresh).await?;
                let pos = position::resolve(&env, &server, &doc, &target).await?;
                let params = json!({"textDocument": {"uri": doc.uri}, "position": pos.json(),
                                    "newName": new_name});
                // A young server may still be reading the workspace: a rename is planned
                // only from an answer it gave twice in a row.
                let (v, settled) = env
                    .settled(&server, || {
                        env.req(&server, "textDocument/rename", params.clone())
                    })
                    .await?;
                if !settled {
                    return Err(Fail::Other(anyhow!(
                        "{NAME}: the language server `{}` was started moments ago and its \
                         rename kept changing for {} s ([lsp] index_wait_s): it has not read \
                         the whole workspace yet, and a rename from a partial answer would \
                         miss files. Nothing was changed; ask again in a few seconds",
                        server.spec.name,
                        env.cfg.index_wait_s
                    )));
                }
                Ok::<_, Fail>((pos.label, v))
            }
        })
        .await?;
    if edit.is_null() {
        bail!(
            "{NAME}: the language server `{}` has nothing to rename at {label}",
            spec.name
        );
    }
    let edit: WorkspaceEdit = serde_json::from_value(edit)
        .map_err(|e| anyhow!("{NAME}: the server's edit is not a WorkspaceEdit: {e}"))?;
    let mut per_file: Vec<(String, Vec<TextEdit>)> = Vec::new();
    if let Some(dc) = edit.document_changes {
        let edits = match dc {
            DocumentChanges::Edits(e) => e,
            DocumentChanges::Operations(ops) => {
                let mut edits = Vec::new();
                for op in ops {
                    match op {
                        DocumentChangeOperation::Edit(e) => edits.push(e),
                        DocumentChangeOperation::Op(_) => bail!(
                            "{NAME}: the server's edit creates, renames or deletes files, which \
                             lsp__rename does not do; nothing was changed"
                        ),
                    }
                }
                edits
            }
        };
        for e in edits {
            let list = e
                .edits
                .into_iter()
                .map(|e| match e {
                    OneOf::Left(t) => t,
                    OneOf::Right(a) => a.text_edit,
                })
                .collect();
            per_file.push((e.text_document.uri.as_str().to_string(), list));
        }
    } else if let Some(changes) = edit.changes {
        for (uri, list) in changes {
            per_file.push((uri.as_str().to_string(), list));
        }
    }
    per_file.sort_by(|a, b| a.0.cmp(&b.0));
    let mut changes: Vec<Change> = Vec::new();
    for (uri, list) in per_file {
        let Some(rel) = env.relative(&uri) else {
            bail!(
                "{NAME}: the server's edit touches {}, outside the workspace; nothing was changed",
                env.show_uri(&uri)
            );
        };
        let ws = env.ctx.workspace.clone();
        let p = ws.locate(&rel).map_err(|e| anyhow!("{NAME}: {e}"))?;
        let doc = read_doc(&ws, p.clone(), rel.clone(), NAME).await?;
        let (new, _) = apply_edits(&doc.text, &list)
            .map_err(|e| anyhow!("{NAME}: the server's edit of {rel} {e}; nothing was changed"))?;
        if let Some(prev) = changes.iter_mut().find(|c| c.uri == doc.uri) {
            let (again, _) = apply_edits(&prev.new, &list).map_err(|e| {
                anyhow!("{NAME}: the server's edit of {rel} {e}; nothing was changed")
            })?;
            prev.lines = changed_lines(&prev.old, &again);
            prev.new = again;
            continue;
        }
        if new != doc.text {
            let lines = changed_lines(&doc.text, &new);
            changes.push(Change {
                p,
                shown: rel,
                uri: doc.uri,
                old: doc.text,
                new,
                lines,
            });
        }
    }
    if changes.is_empty() {
        bail!(
            "{NAME}: the language server `{}` proposed no change for {label}",
            spec.name
        );
    }
    Ok(Plan {
        label,
        new_name: req.new_name.clone(),
        changes,
    })
}

/// Applies LSP text edits (UTF-16 positions) to `text`; returns the new text and how many
/// of the old lines the edits touch. Overlapping or out-of-range edits are errors.
pub fn apply_edits(text: &str, edits: &[TextEdit]) -> std::result::Result<(String, usize), String> {
    let starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let offset = |line: u32, ch: u32| -> std::result::Result<usize, String> {
        let l = line as usize;
        if l >= starts.len() {
            if l == starts.len() && ch == 0 {
                return Ok(text.len());
            }
            return Err(format!("points past the end of the file (line {})", l + 1));
        }
        let end = starts.get(l + 1).copied().unwrap_or(text.len());
        let line_text = &text[starts[l]..end];
        let col = from_utf16(line_text, ch);
        Ok(starts[l]
            + line_text
                .char_indices()
                .nth(col)
                .map(|(i, _)| i)
                .unwrap_or(line_text.len()))
    };
    let mut spans = Vec::new();
    let mut touched = std::collections::BTreeSet::new();
    for e in edits {
        let a = offset(e.range.start.line, e.range.start.character)?;
        let b = offset(e.range.end.line, e.range.end.character)?;
        if b < a {
            return Err("has a range that ends before it starts".into());
        }
        spans.push((a, b, e.new_text.as_str()));
        for l in e.range.start.line..=e.range.end.line {
            touched.insert(l);
        }
    }
    spans.sort_by_key(|s| (s.0, s.1));
    for w in spans.windows(2) {
        if w[1].0 < w[0].1 {
            return Err("has overlapping changes".into());
        }
    }
    let mut out = text.to_string();
    for (a, b, new) in spans.into_iter().rev() {
        out.replace_range(a..b, new);
    }
    Ok((out, touched.len()))
}

/// How many lines differ between `old` and `new` (a server may send a whole file as one
/// edit, so this is counted from the texts, not the edits).
pub fn changed_lines(old: &str, new: &str) -> usize {
    similar::TextDiff::from_lines(old, new)
        .ops()
        .iter()
        .map(|op| match op.tag() {
            similar::DiffTag::Equal => 0,
            _ => op.old_range().len().max(op.new_range().len()),
        })
        .sum()
}

/// What the approval preview of a call computed, kept for its run: the person approves an
/// edit, and that edit is what runs (asking the server again could give another).
type Previewed = std::result::Result<Plan, String>;

/// One kept preview: (session, call id), the arguments it was for, when, and what it
/// computed.
struct Kept {
    key: (String, String),
    args: String,
    at: std::time::Instant,
    planned: Previewed,
}

/// The previews kept, oldest first.
static PREVIEWED: std::sync::Mutex<Vec<Kept>> = std::sync::Mutex::new(Vec::new());
/// The most previews kept, and for how long (a call asks, then runs or is refused).
const MAX_PREVIEWED: usize = 64;
const PREVIEW_KEPT: std::time::Duration = std::time::Duration::from_secs(3600);

fn keep_preview(ctx: &ToolContext, args: &Value, planned: Previewed) {
    let mut kept = PREVIEWED.lock().unwrap_or_else(|e| e.into_inner());
    kept.retain(|k| k.at.elapsed() < PREVIEW_KEPT);
    let key = (ctx.session_id.to_string(), ctx.call_id.clone());
    kept.retain(|k| k.key != key);
    if kept.len() >= MAX_PREVIEWED {
        drop(kept.remove(0));
    }
    kept.push(Kept {
        key,
        args: args.to_string(),
        at: std::time::Instant::now(),
        planned,
    });
}

fn take_preview(ctx: &ToolContext, args: &Value) -> Option<Previewed> {
    let mut kept = PREVIEWED.lock().unwrap_or_else(|e| e.into_inner());
    let key = (ctx.session_id.to_string(), ctx.call_id.clone());
    let args = args.to_string();
    let at = kept.iter().position(|k| k.key == key && k.args == args)?;
    Some(kept.remove(at).planned)
}

/// Runs it: the edit the approval preview showed, when there was one (only refused if a
/// file changed since); else (mode full, nobody asked) the server's edit now.
pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let req = read_args(&args)?;
    let env = Env::new(NAME, ctx)?;
    let plan = match take_preview(ctx, &args) {
        Some(Ok(plan)) => plan,
        Some(Err(why)) => bail!(
            "{NAME}: the preview the person approved could not compute the edit ({why}), so \
             nothing they saw can run; nothing was changed. Call again to ask the server anew"
        ),
        None => plan(&env, &req).await?,
    };
    write_all(&env, &plan).await?;
    // The server's copies of open files get the new text.
    let spec = env.spec_for(&env.doc(&req.path).await?)?;
    for server in crate::pool::running(&env.root()) {
        if server.spec != spec {
            continue;
        }
        for c in &plan.changes {
            if server.docs.lock().await.contains_key(&c.uri) {
                if let Some(doc) = env.doc_at_uri(&c.uri).await {
                    let _ = crate::call::sync(&server, &doc).await;
                }
            }
        }
    }
    let total: usize = plan.changes.iter().map(|c| c.lines).sum();
    let mut out = format!(
        "renamed {} to `{}`: {} file{}, {total} line{} changed\n",
        plan.label,
        plan.new_name,
        plan.changes.len(),
        if plan.changes.len() == 1 { "" } else { "s" },
        if total == 1 { "" } else { "s" }
    );
    for c in &plan.changes {
        out.push_str(&format!(
            "  {}: {} line{}\n",
            c.shown,
            c.lines,
            if c.lines == 1 { "" } else { "s" }
        ));
    }
    Ok(Value::String(format!(
        "{}{}",
        out.trim_end(),
        env.notes_text()
    )))
}

/// Writes every file atomically; on a failure, puts back what was written.
async fn write_all(env: &Env, plan: &Plan) -> Result<()> {
    let ws = env.ctx.workspace.clone();
    let files: Vec<(WsPath, String, String, String)> = plan
        .changes
        .iter()
        .map(|c| (c.p.clone(), c.shown.clone(), c.old.clone(), c.new.clone()))
        .collect();
    toolbox_host::blocking(format!("{NAME}: writing"), move || -> Result<()> {
        use std::io::Read;
        // Nothing is written if any file changed since the server's edit was computed.
        for (p, shown, old, _) in &files {
            let mut now = String::new();
            ws.open_read(p)
                .map_err(|e| anyhow!("{NAME}: {e}; nothing was changed"))?
                .read_to_string(&mut now)
                .map_err(|e| anyhow!("{NAME}: cannot read {shown}: {e}; nothing was changed"))?;
            if &now != old {
                bail!(
                    "{NAME}: {shown} changed since the rename was computed (and shown), so it \
                     would not be the edit approved; nothing was changed. Call again for an \
                     edit of the files as they are now"
                );
            }
        }
        for (i, (p, shown, _, new)) in files.iter().enumerate() {
            if let Err(e) = ws.write_atomic(p, new.as_bytes(), false) {
                let mut restored = 0;
                for (p, _, old, _) in &files[..i] {
                    if ws.write_atomic(p, old.as_bytes(), false).is_ok() {
                        restored += 1;
                    }
                }
                bail!(
                    "{NAME}: cannot write {shown}: {e}; the {restored} file{} written before it \
                     got their old content back, so nothing was changed",
                    if restored == 1 { "" } else { "s" }
                );
            }
        }
        Ok(())
    })
    .await?
}

/// The approval preview: the diff of every file, computed by the server now.
pub fn preview(args: &Value, ctx: &ToolContext) -> Option<Preview> {
    let req = match read_args(args) {
        Ok(r) => r,
        Err(e) => return Some(Preview::new(format!("Rename (invalid arguments: {e})"))),
    };
    let (kept_ctx, kept_args) = (ctx.clone(), args.clone());
    let ctx = ctx.clone();
    let summary_target = req.target.symbol.clone().unwrap_or_else(|| {
        format!(
            "{}:{}:{}",
            req.path,
            req.target.line.unwrap_or(0),
            req.target.column.unwrap_or(0)
        )
    });
    let new_name = req.new_name.clone();
    // Computed on a thread and runtime of its own: the server's replies are read by a plain
    // thread, so this needs nothing from the caller's runtime.
    let planned = std::thread::spawn(move || -> Result<Plan> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let env = Env::new(NAME, &ctx)?;
            plan(&env, &req).await
        })
    })
    .join();
    let kept: Previewed = match &planned {
        Ok(Ok(plan)) => Ok(plan.clone()),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err("the computation stopped".to_string()),
    };
    keep_preview(&kept_ctx, &kept_args, kept);
    match planned {
        Ok(Ok(plan)) => {
            let mut p = Preview::new(format!(
                "Rename {} to `{}` in {} file{}",
                plan.label,
                plan.new_name,
                plan.changes.len(),
                if plan.changes.len() == 1 { "" } else { "s" }
            ));
            for c in &plan.changes {
                p = p.diff(&c.shown, &c.old, &c.new);
            }
            Some(p)
        }
        Ok(Err(e)) => Some(Preview::new(format!(
            "Rename `{summary_target}` to `{new_name}` (the edit could not be computed: {e})"
        ))),
        Err(_) => Some(Preview::new(format!(
            "Rename `{summary_target}` to `{new_name}` (the edit could not be computed)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsp_types::{Position, Range};

    fn edit(l0: u32, c0: u32, l1: u32, c1: u32, t: &str) -> TextEdit {
        TextEdit::new(
            Range::new(Position::new(l0, c0), Position::new(l1, c1)),
            t.into(),
        )
    }

    #[test]
    fn edits_apply_from_the_end_in_utf16() {
        let text = "é x = 1\ny = x\n";
        let (out, lines) =
            apply_edits(text, &[edit(1, 4, 1, 5, "zz"), edit(0, 2, 0, 3, "zz")]).unwrap();
        assert_eq!(out, "é zz = 1\ny = zz\n");
        assert_eq!(lines, 2);
        assert_eq!(changed_lines(text, &out), 2);
        assert_eq!(changed_lines("a\nb\nc\n", "a\nB\nc\n"), 1);
        let (out, _) = apply_edits("a😀b\n", &[edit(0, 3, 0, 4, "c")]).unwrap();
        assert_eq!(out, "a😀c\n");
    }

    #[test]
    fn bad_edits_are_refused() {
        assert!(
            apply_edits("ab\n", &[edit(0, 0, 0, 2, "x"), edit(0, 1, 0, 2, "y")])
                .unwrap_err()
                .contains("overlapping")
        );
        assert!(apply_edits("ab\n", &[edit(5, 0, 5, 1, "x")])
            .unwrap_err()
            .contains("past the end"));
    }
}
