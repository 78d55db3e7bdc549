//! `registry_lookup`: find public functions and classes of an importable package.
//!
//! The search runs in a short-lived process of the session's interpreter (the venv's when
//! one is configured), not in the live session: importing a package runs its code, and a
//! walk over hundreds of submodules must be killable and must not leave modules behind in
//! the user's session. Submodules whose names start with `_` or are test packages are
//! skipped, the walk stops after 400 modules or 10 seconds, and the whole call after 30.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use toolbox_core::{Args, ToolContext, ToolInfo};

use crate::config::{ensure_venv, PythonConfig};
use crate::{isolated, object_schema, prop, TOOLSETS};

pub const NAME: &str = "registry_lookup";
const TIMEOUT: Duration = Duration::from_secs(30);
const WALK_BUDGET_S: f64 = 10.0;
const MAX_MODULES: u64 = 400;

pub fn info() -> ToolInfo {
    ToolInfo::new(
        NAME,
        "Search the public API of an importable Python package for functions, classes and \
         methods by name and docstring. Returns signatures and the first paragraph of their \
         documentation, best first (exact name, then prefix, then substring, then docstring \
         match). Use it to find the right call before writing code: query \"read_csv\" with \
         package \"pandas\", or query \"json.dumps\". Without package only module names are \
         matched. Searches the packages installed for this session's interpreter.",
        object_schema(
            &[
                (
                    "query",
                    prop(
                        "string",
                        "A name or a few words, e.g. \"read_csv\", \"mean\", \"parse date\".",
                    ),
                ),
                (
                    "package",
                    prop(
                        "string",
                        "The importable package or module to search, e.g. \"pandas\", \"json\".",
                    ),
                ),
                (
                    "limit",
                    prop("integer", "At most this many results (1-50, default 10)."),
                ),
            ],
            &["query"],
        ),
    )
    .toolsets(TOOLSETS)
}

pub async fn run(args: Value, ctx: &ToolContext) -> Result<Value> {
    let a = Args::new(NAME, &args)?;
    a.reject_unknown(&["query", "package", "module", "limit"])?;
    let query = a.str("query", &[])?.trim();
    if query.is_empty() {
        bail!("{NAME}: argument `query` is empty");
    }
    let package = a.opt_str("package", &["module"])?.map(str::trim);
    if let Some(package) = package {
        let valid = !package.is_empty()
            && package.split('.').all(|part| {
                part.starts_with(|c: char| c.is_alphabetic() || c == '_')
                    && part.chars().all(|c| c.is_alphanumeric() || c == '_')
            });
        if !valid {
            bail!("{NAME}: argument `package` {package:?} is not an importable module name (like pandas or os.path)");
        }
    }
    let limit = a.u64_in("limit", &[], 10, 1, 50)?;
    let config = PythonConfig::from_ctx(ctx)?;
    let limits = toolbox_core::limits::Limits::from_config(&ctx.config)
        .map_err(|e| anyhow!("{NAME}: invalid configuration: {e:#}"))?;
    ensure_venv(&config, ctx).await?;
    toolbox_core::containment::ensure();
    let cwd = ctx
        .workspace
        .scratchpad()
        .map_err(|e| anyhow!("{NAME}: cannot create the session scratchpad: {e}"))?;
    let request = json!({
        "op": "lookup",
        "query": query,
        "package": package,
        "limit": limit,
        "budget_s": WALK_BUDGET_S,
        "max_modules": MAX_MODULES,
    });
    let found = isolated::one_shot(
        &request,
        ctx,
        TIMEOUT,
        NAME,
        &config.interpreter(),
        &cwd,
        limits,
    )
    .await?;
    Ok(Value::String(render(query, &found)))
}

fn render(query: &str, found: &Value) -> String {
    let matches = found["matches"].as_array().cloned().unwrap_or_default();
    let total = found["total"].as_u64().unwrap_or(matches.len() as u64);
    let place = match found["package"].as_str() {
        Some(p) => format!(
            "in {p} ({} modules searched)",
            found["modules_searched"].as_u64().unwrap_or(0)
        ),
        None => "among importable module names".to_string(),
    };
    let mut out = if matches.is_empty() {
        format!("{NAME}: nothing matches {query:?} {place}\n")
    } else {
        format!(
            "{NAME}: {} of {total} matches for {query:?} {place}\n",
            matches.len()
        )
    };
    for (i, m) in matches.iter().enumerate() {
        let name = m["name"].as_str().unwrap_or("?");
        let kind = m["kind"].as_str().unwrap_or("?");
        let signature = m["signature"].as_str().unwrap_or(name);
        out.push_str(&format!("\n{}. {name} [{kind}]\n", i + 1));
        if signature != name {
            out.push_str(&format!("   {signature}\n"));
        }
        if let Some(summary) = m["summary"].as_str().filter(|s| !s.is_empty()) {
            out.push_str(&format!("   {summary}\n"));
        }
    }
    if let Some(notes) = found["notes"].as_array() {
        for note in notes.iter().filter_map(Value::as_str) {
            out.push_str(&format!("\nnote: {note}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::*;

    #[tokio::test]
    async fn finds_stdlib_functions_ranked() {
        let (_d, ctx) = setup(NAME, "lookup", json!({}));
        let text = call(&ctx, NAME, json!({"query": "dumps", "package": "json"}))
            .await
            .unwrap();
        let first = text.lines().find(|l| l.starts_with("1. ")).unwrap();
        assert_eq!(first, "1. json.dumps [function]", "{text}");
        assert!(text.contains("dumps(obj, *, skipkeys=False"), "{text}");
        assert!(
            text.contains("Serialize ``obj`` to a JSON formatted ``str``"),
            "{text}"
        );
        // `loads` is found by name too, and json.tool (a submodule) was walked.
        let text = call(&ctx, NAME, json!({"query": "loads", "package": "json"}))
            .await
            .unwrap();
        assert!(text.contains("1. json.loads [function]"), "{text}");

        let text = call(
            &ctx,
            NAME,
            json!({"query": "mean", "package": "statistics", "limit": 3}),
        )
        .await
        .unwrap();
        let ranked: Vec<&str> = text
            .lines()
            .filter(|l| l.contains(". statistics."))
            .collect();
        assert_eq!(ranked.len(), 3, "{text}");
        // Exact name first, then names starting with it (fmean, geometric_mean… are substrings).
        assert_eq!(ranked[0], "1. statistics.mean [function]", "{text}");
        assert!(
            text.contains("Return the sample arithmetic mean of data."),
            "{text}"
        );

        // A dotted query names its package.
        let text = call(&ctx, NAME, json!({"query": "json.dumps"}))
            .await
            .unwrap();
        assert!(text.contains("1. json.dumps [function]"), "{text}");
        // Docstring hits rank below name hits but are found.
        let text = call(
            &ctx,
            NAME,
            json!({"query": "arithmetic", "package": "statistics"}),
        )
        .await
        .unwrap();
        assert!(text.contains("statistics.mean [function]"), "{text}");
    }

    #[tokio::test]
    async fn errors_are_clear() {
        let (_d, ctx) = setup(NAME, "lookup", json!({}));
        let e = call(
            &ctx,
            NAME,
            json!({"query": "x", "package": "no_such_pkg_xyz"}),
        )
        .await
        .unwrap_err();
        assert!(e.contains("cannot import no_such_pkg_xyz"), "{e}");
        let e = call(&ctx, NAME, json!({"query": "x", "package": "../etc"}))
            .await
            .unwrap_err();
        assert!(e.contains("not an importable module name"), "{e}");
        let e = call(&ctx, NAME, json!({"query": " "})).await.unwrap_err();
        assert!(e.contains("`query` is empty"), "{e}");
        let e = call(&ctx, NAME, json!({"query": "x", "limit": 0}))
            .await
            .unwrap_err();
        assert!(e.contains("between 1 and 50"), "{e}");
    }
}
