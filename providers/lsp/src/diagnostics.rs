//! `lsp__diagnostics`: a server's errors and warnings for a file, or for every file it has
//! open, once it settles.

use std::time::{Duration, Instant};

use anyhow::Result;
use serde_json::Value;
use toolbox_core::schema::object;
use toolbox_core::{Arg, Args, ToolInfo};
use toolbox_host::ToolContext;

use crate::call::{Doc, Env, Fail};
use crate::server::{uri_path, Server};
use crate::PATH;

/// The tool's name.
pub const NAME: &str = "lsp__diagnostics";
const DEFAULT_MAX: u64 = 100;
const SEVERITY: Arg = Arg::choice("severity", &["error", "warning", "all"]);
const MAX_RESULTS: Arg = Arg::integer("max_results", 1, Some(5000)).default(DEFAULT_MAX);
/// How long a file's diagnostics must stay unchanged to count as settled.
const QUIET: Duration = Duration::from_millis(300);

/// Its description.
pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Errors and warnings from a real language server (type errors, undefined names, \
         syntax), after it has checked the file's current content. With path: that file; \
         without: every file the running servers have open.",
        object(&[
            PATH.doc("Source file in the workspace (default: every open file)."),
            SEVERITY.doc(
                "Least severity to show: error, warning (default: errors and warnings) or all.",
            ),
            MAX_RESULTS.doc(format!("Diagnostics to show (default {DEFAULT_MAX}).")),
        ]),
    )
    .toolsets(&[crate::TOOLSET])
}

/// Runs it.
pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let args = Args::new(NAME, &args)?;
    let path = PATH.opt_nonempty_str(&args)?.map(str::to_string);
    let least = match SEVERITY.opt_choice(&args)? {
        Some("error") => 1,
        Some("all") => 4,
        // "warning", the default.
        _ => 2,
    };
    let max = MAX_RESULTS.u64(&args)? as usize;
    args.finish()?;
    let env = Env::new(NAME, ctx)?;
    let Some(path) = path else {
        let servers = crate::pool::running(&env.root());
        if servers.is_empty() {
            return Ok(Value::String(
                "no language server is running for this workspace; give path to check a file"
                    .into(),
            ));
        }
        let mut out = String::new();
        for server in servers {
            if let Err(Fail::Other(e)) = env.prepare(&server, None, false).await {
                return Err(e);
            }
            tokio::time::sleep(QUIET).await;
            let mut all = Vec::new();
            for (uri, p) in server.all_published() {
                all.extend(format_items(&env, &uri, &p.items, least));
            }
            out.push_str(&summarise(&format!("`{}`", server.spec.name), &all, max));
            out.push('\n');
        }
        return Ok(Value::String(format!(
            "{}{}",
            out.trim_end(),
            env.notes_text()
        )));
    };
    let doc = env.doc(&path).await?;
    let spec = env.spec_for(&doc)?;
    let lines = env
        .with_server(&spec, |server, fresh| {
            let env = env.clone();
            let doc = doc.clone();
            async move {
                let before = server.publication_seq();
                let v0 = open_version(&server, &doc).await;
                env.prepare(&server, Some(&doc), fresh).await?;
                let sent = v0 != open_version(&server, &doc).await;
                settle(&env, &server, &doc, before, sent).await?;
                let items = server
                    .published(&doc.uri)
                    .map(|p| p.items)
                    .unwrap_or_default();
                Ok(format_items(&env, &doc.uri, &items, least))
            }
        })
        .await?;
    Ok(Value::String(format!(
        "{}{}",
        summarise(&doc.shown, &lines, max),
        env.notes_text()
    )))
}

/// Waits until the server has published diagnostics for `doc`'s current text (a report
/// after `before`, when `sent` says the text was just sent) and they stayed unchanged for a
/// moment, at most `[lsp] diagnostics_wait_ms`; a note says when the bound was hit.
pub async fn settle(
    env: &Env,
    server: &Server,
    doc: &Doc,
    before: u64,
    sent: bool,
) -> Result<(), Fail> {
    let bound = Duration::from_millis(env.cfg.diagnostics_wait_ms);
    let start = Instant::now();
    loop {
        if let Some(why) = server.dead_reason() {
            return Err(Fail::Crashed(why));
        }
        let p = server.published(&doc.uri);
        let current = p.as_ref().is_some_and(|p| !sent || p.seq > before);
        let quiet = p
            .as_ref()
            .and_then(|p| p.at)
            .is_some_and(|at| !sent || at.elapsed() >= QUIET);
        if current && quiet {
            return Ok(());
        }
        if start.elapsed() >= bound {
            if !current {
                env.note(format!(
                    "note: the language server `{}` had not reported on {} within {} ms ([lsp] \
                     diagnostics_wait_ms); what it reported last is shown",
                    server.spec.name, doc.shown, env.cfg.diagnostics_wait_ms
                ));
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The version the server has of `doc`, if it has it open.
pub async fn open_version(server: &Server, doc: &Doc) -> Option<i64> {
    server.docs.lock().await.get(&doc.uri).map(|d| d.version)
}

/// Whether `path` lies where a server may read: the workspace, or the system's folders
/// (headers, libraries). Anything else is a file the person did not hand to a read tool.
fn readable_place(root: &std::path::Path, path: &std::path::Path) -> bool {
    // `ws/../home/x` is outside `ws`: `..` is taken off lexically first (links inside the
    // workspace that lead out are the sandbox's to refuse).
    let mut path_buf = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                path_buf.pop();
            }
            std::path::Component::CurDir => {}
            other => path_buf.push(other),
        }
    }
    let path = path_buf.as_path();
    path.starts_with(root)
        || ["/usr", "/lib", "/lib32", "/lib64", "/opt"]
            .iter()
            .any(|r| path.starts_with(r))
}

/// Whether a diagnostic comes from, or quotes, a file outside [`readable_place`]: a related
/// location there, or an absolute path there in its message (clangd's "In included file:
/// … /home/u/.aws/credentials:1:25: note: error occurred here"). The sandbox keeps a server
/// from reading such files at all; this is the second line, for a server run without it.
pub fn from_outside(root: &std::path::Path, d: &Value) -> bool {
    let related = d["relatedInformation"].as_array().into_iter().flatten();
    for r in related {
        if let Some(path) = r["location"]["uri"].as_str().and_then(uri_path) {
            if !readable_place(root, &path) {
                return true;
            }
        }
    }
    let message = d["message"].as_str().unwrap_or("");
    let bytes = message.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let starts = b == b'/'
            && (i == 0
                || matches!(
                    bytes[i - 1],
                    b' ' | b'\'' | b'"' | b'(' | b'<' | b'\n' | b'\t'
                ));
        if !starts {
            continue;
        }
        let end = message[i..]
            .find(|c: char| c.is_whitespace() || matches!(c, ':' | '\'' | '"' | ')' | '>' | ','))
            .map_or(message.len(), |n| i + n);
        let path = std::path::Path::new(&message[i..end]);
        if path.components().count() > 2 && !readable_place(root, path) {
            return true;
        }
    }
    false
}

/// `path:line:col: severity: message [source code]` lines, `least` severe or worse. A
/// diagnostic [`from_outside`] the workspace is withheld, and says so.
pub fn format_items(env: &Env, uri: &str, items: &[Value], least: u64) -> Vec<String> {
    let shown = env.show_uri(uri);
    let root = env.root();
    if uri_path(uri).is_some_and(|p| !readable_place(&root, &p)) {
        return Vec::new();
    }
    let mut out: Vec<(u64, u64, String)> = Vec::new();
    for d in items {
        let sev = d["severity"].as_u64().unwrap_or(1);
        if sev > least {
            continue;
        }
        if from_outside(&root, d) {
            let line = d["range"]["start"]["line"].as_u64().unwrap_or(0) + 1;
            let col = d["range"]["start"]["character"].as_u64().unwrap_or(0) + 1;
            let word = if sev == 1 { "error" } else { "warning" };
            out.push((
                line,
                col,
                format!(
                    "{shown}:{line}:{col}: {word}: (withheld: this diagnostic is about a file \
                     outside the workspace, which toolbox does not show)"
                ),
            ));
            continue;
        }
        let line = d["range"]["start"]["line"].as_u64().unwrap_or(0) + 1;
        let col = d["range"]["start"]["character"].as_u64().unwrap_or(0) + 1;
        let word = match sev {
            1 => "error",
            2 => "warning",
            3 => "info",
            _ => "hint",
        };
        let msg = d["message"].as_str().unwrap_or("").replace('\n', " ");
        let mut tag = Vec::new();
        if let Some(s) = d["source"].as_str() {
            tag.push(s.to_string());
        }
        match &d["code"] {
            Value::String(c) => tag.push(c.clone()),
            Value::Number(n) => tag.push(n.to_string()),
            _ => {}
        }
        let tag = if tag.is_empty() {
            String::new()
        } else {
            format!(" [{}]", tag.join(" "))
        };
        out.push((
            line,
            col,
            format!("{shown}:{line}:{col}: {word}: {msg}{tag}"),
        ));
    }
    out.sort();
    out.into_iter().map(|(_, _, s)| s).collect()
}

fn summarise(what: &str, lines: &[String], max: usize) -> String {
    if lines.is_empty() {
        return format!("{what}: no errors or warnings");
    }
    let errors = lines.iter().filter(|l| l.contains(": error: ")).count();
    let mut out = format!(
        "{what}: {} diagnostic{} ({errors} error{})\n",
        lines.len(),
        if lines.len() == 1 { "" } else { "s" },
        if errors == 1 { "" } else { "s" }
    );
    for l in lines.iter().take(max) {
        out.push_str(l);
        out.push('\n');
    }
    if lines.len() > max {
        out.push_str(&format!("… {} more\n", lines.len() - max));
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod outside_tests {
    use super::from_outside;
    use serde_json::json;
    use std::path::Path;

    #[test]
    fn diagnostics_that_quote_or_point_outside_are_recognised() {
        let root = Path::new("/work/ws");
        let said = |message: &str| json!({"message": message});
        assert!(!from_outside(
            root,
            &said("use of undeclared identifier 'x'")
        ));
        assert!(!from_outside(
            root,
            &said("In included file: /work/ws/a.h:1:2: note")
        ));
        assert!(!from_outside(
            root,
            &said("/usr/include/stdio.h:3: note: here")
        ));
        assert!(!from_outside(
            root,
            &said("see https://example.com/a/b and a/b/c")
        ));
        assert!(from_outside(
            root,
            &said("In included file: x\n\n/home/u/.aws/credentials:1:25: note")
        ));
        assert!(from_outside(
            root,
            &said("'/work/ws/../secret/t.h' file not found")
        ));
        assert!(from_outside(
            root,
            &json!({"message": "boom", "relatedInformation": [
                {"location": {"uri": "file:///root/.ssh/id_rsa", "range": {}}, "message": "here"}
            ]})
        ));
        assert!(!from_outside(
            root,
            &json!({"message": "boom", "relatedInformation": [
                {"location": {"uri": "file:///work/ws/b.c", "range": {}}, "message": "here"}
            ]})
        ));
    }
}
